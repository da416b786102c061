//! A fault schedule, drawn from one seed: the fleet, the fault rates, and the timed events of
//! the fault phase. Pure: the same seed and switches give the same schedule.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::sim::net::{Aim, Aimed, Chaos};

/// A kind of fault, as named on the command line (`--faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// Requests refused for capacity, up to 20 % of them.
    Throttle,
    /// Requests failed before they are applied, up to 5 %.
    Transient,
    /// Writes applied whose answer is lost, 5 %.
    Lost,
    /// Requests whose answer never comes (applied or not), 1 %.
    Never,
    /// Latency spikes longer than the lease, on one process for a while.
    Spike,
    /// A whole process frozen (SIGSTOP), timers included.
    Freeze,
    /// A process cut off from the table for a while.
    CutOff,
    /// A process killed (SIGKILL).
    Crash,
    /// A process killed and started again with the same id.
    Restart,
    /// A second live process with the id of a running one.
    Twin,
    /// The application panics while it holds a grant.
    Panic,
    /// The application finishes handoffs late (up to 45 s, past the handoff timeout).
    Handoff,
    /// A worker joins.
    Join,
    /// A worker leaves gracefully.
    Leave,
    /// Shards added to and removed from the source.
    Shards,
    /// Each worker's clock runs up to `--max-skew` fast or slow.
    Skew,
    /// Writes lost to their caller (connection reset, no answer by the deadline) that land
    /// anyway, up to a lease duration later: 1-5 % of write attempts.
    LateWrite,
    /// Eventually consistent reads (scans, watch reads) served by a lagging replica: 5-30 %
    /// of them, lagging mostly under a second, 5 % of those beyond a lease duration.
    StaleRead,
    /// The schedule may balance by load (`Balance::Load`, every lease reporting a load of 1).
    PolicyLoad,
    /// The schedule may run `KclBalance`, whose rounds steal held leases, on the sessions.
    PolicyKcl,
    /// An operator moves a lease off its owner (`Admin::release`).
    OpRelease,
    /// An operator drains a worker (`Admin::drain`): it leaves.
    OpDrain,
    /// An operator writes a checkpoint into a lease (`Admin::set_checkpoint`, forced).
    OpCheckpoint,
    /// An operator resets a lease's checkpoint (`Admin::set_checkpoint` with none: the item
    /// is deleted and created again).
    OpReset,
    /// An operator deletes a lease (`Admin::delete`, forced); the discoverer creates it again.
    OpDelete,
}

impl Fault {
    pub const ALL: [Fault; 25] = [
        Fault::Throttle,
        Fault::Transient,
        Fault::Lost,
        Fault::Never,
        Fault::Spike,
        Fault::Freeze,
        Fault::CutOff,
        Fault::Crash,
        Fault::Restart,
        Fault::Twin,
        Fault::Panic,
        Fault::Handoff,
        Fault::Join,
        Fault::Leave,
        Fault::Shards,
        Fault::Skew,
        Fault::LateWrite,
        Fault::StaleRead,
        Fault::PolicyLoad,
        Fault::PolicyKcl,
        Fault::OpRelease,
        Fault::OpDrain,
        Fault::OpCheckpoint,
        Fault::OpReset,
        Fault::OpDelete,
    ];

    /// The kinds a campaign injects unless told otherwise (`--faults default`): every kind,
    /// as `--faults all`.
    pub fn defaults() -> BTreeSet<Fault> {
        Fault::ALL.into_iter().collect()
    }

    /// The kinds drawn from a stream of their own (see `draw_protocol_faults`): late
    /// writes, stale reads, the policies, the operator's moves.
    pub const OWN_STREAM: [Fault; 9] = [
        Fault::LateWrite,
        Fault::StaleRead,
        Fault::PolicyLoad,
        Fault::PolicyKcl,
        Fault::OpRelease,
        Fault::OpDrain,
        Fault::OpCheckpoint,
        Fault::OpReset,
        Fault::OpDelete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttle => "throttle",
            Fault::Transient => "transient",
            Fault::Lost => "lost",
            Fault::Never => "never",
            Fault::Spike => "spike",
            Fault::Freeze => "freeze",
            Fault::CutOff => "cutoff",
            Fault::Crash => "crash",
            Fault::Restart => "restart",
            Fault::Twin => "twin",
            Fault::Panic => "panic",
            Fault::Handoff => "handoff",
            Fault::Join => "join",
            Fault::Leave => "leave",
            Fault::Shards => "shards",
            Fault::Skew => "skew",
            Fault::LateWrite => "late-write",
            Fault::StaleRead => "stale-read",
            Fault::PolicyLoad => "policy-load",
            Fault::PolicyKcl => "policy-kcl",
            Fault::OpRelease => "op-release",
            Fault::OpDrain => "op-drain",
            Fault::OpCheckpoint => "op-checkpoint",
            Fault::OpReset => "op-reset",
            Fault::OpDelete => "op-delete",
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// A fault drawn per request (a rate) rather than an event of the schedule.
    fn is_rate(self) -> bool {
        matches!(
            self,
            Fault::Throttle
                | Fault::Transient
                | Fault::Lost
                | Fault::Never
                | Fault::Skew
                | Fault::LateWrite
                | Fault::StaleRead
                | Fault::PolicyLoad
                | Fault::PolicyKcl
        )
    }

    /// An operator's move, drawn apart from the other events.
    fn is_operator(self) -> bool {
        matches!(
            self,
            Fault::OpRelease
                | Fault::OpDrain
                | Fault::OpCheckpoint
                | Fault::OpReset
                | Fault::OpDelete
        )
    }
}

/// `all` (or `default`, the same), `none`, or a comma-separated list of fault names.
pub fn parse_faults(list: &str) -> Result<BTreeSet<Fault>, String> {
    if list == "all" {
        return Ok(Fault::ALL.into_iter().collect());
    }
    if list == "default" {
        return Ok(Fault::defaults());
    }
    if let Some(more) = list.strip_prefix("default,") {
        // Kept for replay commands of earlier builds; every kind is a default now.
        let _ = parse_faults(more)?;
        return Ok(Fault::defaults());
    }
    if list == "none" {
        return Ok(BTreeSet::new());
    }
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            Fault::parse(name).ok_or_else(|| {
                let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                format!(
                    "unknown fault {name:?}; one of: {}, or all, default, none",
                    names.join(", ")
                )
            })
        })
        .collect()
}

/// The comma-separated names of `faults` (`all` when every one).
pub fn fault_list(faults: &BTreeSet<Fault>) -> String {
    if faults.len() == Fault::ALL.len() {
        return "all".into();
    }
    if faults.is_empty() {
        return "none".into();
    }
    let names: Vec<&str> = faults.iter().map(|f| f.name()).collect();
    names.join(",")
}

/// One thing that happens during the fault phase. `pick` chooses the process (or shards)
/// among those eligible when the event comes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Freeze {
        pick: u64,
        span: Duration,
    },
    CutOff {
        pick: u64,
        span: Duration,
    },
    Spike {
        pick: u64,
        span: Duration,
    },
    Crash {
        pick: u64,
    },
    Restart {
        pick: u64,
        down: Duration,
    },
    Twin {
        pick: u64,
    },
    Panic {
        pick: u64,
    },
    Handoff {
        pick: u64,
    },
    Join,
    Leave {
        pick: u64,
    },
    AddShards(usize),
    RemoveShards {
        n: usize,
        pick: u64,
    },
    /// The operator's moves: `pick` chooses the lease (or the worker, for a drain).
    Release {
        pick: u64,
    },
    Drain {
        pick: u64,
    },
    SetCheckpoint {
        pick: u64,
        value: u64,
    },
    ResetCheckpoint {
        pick: u64,
    },
    Delete {
        pick: u64,
    },
    /// A fault aimed at one request (scripted schedules only).
    Aim(Aim),
}

impl Event {
    pub fn fault(&self) -> Fault {
        match self {
            Event::Freeze { .. } => Fault::Freeze,
            Event::CutOff { .. } => Fault::CutOff,
            Event::Spike { .. } => Fault::Spike,
            Event::Crash { .. } => Fault::Crash,
            Event::Restart { .. } => Fault::Restart,
            Event::Twin { .. } => Fault::Twin,
            Event::Panic { .. } => Fault::Panic,
            Event::Handoff { .. } => Fault::Handoff,
            Event::Join => Fault::Join,
            Event::Leave { .. } => Fault::Leave,
            Event::AddShards(_) | Event::RemoveShards { .. } => Fault::Shards,
            Event::Release { .. } => Fault::OpRelease,
            Event::Drain { .. } => Fault::OpDrain,
            Event::SetCheckpoint { .. } => Fault::OpCheckpoint,
            Event::ResetCheckpoint { .. } => Fault::OpReset,
            Event::Delete { .. } => Fault::OpDelete,
            Event::Aim(aim) => match aim.fault {
                Aimed::Unanswered => Fault::Never,
                Aimed::Stale(_) => Fault::StaleRead,
            },
        }
    }
}

/// The lease duration of the campaign's workers (the library's default).
pub const LEASE: Duration = Duration::from_secs(10);
/// The extra latency of a request sent during a spike: between one lease duration and this.
pub const SPIKE_MAX: Duration = Duration::from_millis(25_000);

/// The balance policy a schedule's workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancing {
    /// `CountBalance`, the default.
    Count,
    /// `Balance::Load`, every lease reporting a load of 1.
    Load,
    /// `KclBalance` (steals held leases) on the session protocol.
    Kcl,
}

impl Balancing {
    /// The fault kind that lets a schedule draw it.
    pub fn fault(self) -> Option<Fault> {
        match self {
            Balancing::Count => None,
            Balancing::Load => Some(Fault::PolicyLoad),
            Balancing::Kcl => Some(Fault::PolicyKcl),
        }
    }
}

/// One seeded schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    /// Workers started (and balanced) before the faults.
    pub workers: usize,
    pub leases: usize,
    /// Request fault rates during the fault phase.
    pub rates: Chaos,
    /// Each worker's clock rate is drawn within `1 ± max_skew` (0: no skew).
    pub max_skew: f64,
    /// How often the applications checkpoint.
    pub checkpoint_every: Duration,
    /// How long the fault phase lasts; everything heals at its end.
    pub faults_for: Duration,
    /// Offsets from the start of the fault phase, in order.
    pub events: Vec<(Duration, Event)>,
    /// Whether the fleet then rests a simulated day (task and memory growth).
    pub day_rest: bool,
    /// The workers' balance policy.
    pub balancing: Balancing,
}

/// The seed of schedule `index` of a campaign seeded `seed` (splitmix64 of both).
pub fn schedule_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The clock rate of host `host` (a worker id; a twin is another host) in schedule `seed`.
pub fn clock_rate(seed: u64, host: u64, max_skew: f64) -> f64 {
    if max_skew <= 0.0 {
        return 1.0;
    }
    let mut rng = StdRng::seed_from_u64(schedule_seed(seed, host));
    1.0 + rng.gen_range(-max_skew..=max_skew)
}

fn seconds(rng: &mut StdRng, low: f64, high: f64) -> Duration {
    Duration::from_millis((rng.gen_range(low..=high) * 1000.0).round() as u64)
}

/// Draws the schedule of `seed` with the `enabled` faults.
pub fn schedule(seed: u64, enabled: &BTreeSet<Fault>, max_skew: f64, day_rest: bool) -> Schedule {
    let mut rng = StdRng::seed_from_u64(seed);
    let on = |f: Fault| enabled.contains(&f);
    let workers = rng.gen_range(3..=6);
    let leases = rng.gen_range(8..=32);
    let checkpoint_every = seconds(&mut rng, 1.0, 5.0);
    let faults_for = Duration::from_secs(rng.gen_range(60..=180));
    let rates = Chaos {
        throttle: if on(Fault::Throttle) {
            rng.gen_range(0.0..=0.2)
        } else {
            0.0
        },
        transient: if on(Fault::Transient) {
            rng.gen_range(0.0..=0.05)
        } else {
            0.0
        },
        lost: if on(Fault::Lost) { 0.05 } else { 0.0 },
        never: if on(Fault::Never) { 0.01 } else { 0.0 },
        ..Chaos::default()
    };
    let kinds: Vec<Fault> = enabled
        .iter()
        .copied()
        .filter(|f| !f.is_rate() && !f.is_operator())
        .collect();
    let mut events = Vec::new();
    if !kinds.is_empty() {
        let phase = faults_for.as_secs_f64();
        let count = rng.gen_range((phase / 30.0) as usize..=(phase / 10.0) as usize);
        for _ in 0..count {
            let kind = kinds[rng.gen_range(0..kinds.len())];
            // A spiked request is answered up to 2.5 lease durations later: spikes end that
            // long before the heal, so none is still in flight when everything has healed.
            let last = match kind {
                Fault::Spike => phase - SPIKE_MAX.as_secs_f64() - 2.0,
                _ => phase,
            };
            let at = seconds(&mut rng, 0.0, last);
            let pick: u64 = rng.gen();
            // Outages end by the heal at the latest.
            let mut span = |low: f64, high: f64| seconds(&mut rng, low, high).min(faults_for - at);
            let event = match kind {
                Fault::Freeze => Event::Freeze {
                    pick,
                    span: span(1.0, 40.0),
                },
                Fault::CutOff => Event::CutOff {
                    pick,
                    span: span(1.0, 45.0),
                },
                Fault::Spike => Event::Spike {
                    pick,
                    span: span(2.0, 30.0).min(faults_for.saturating_sub(at + SPIKE_MAX)),
                },
                Fault::Crash => Event::Crash { pick },
                Fault::Restart => Event::Restart {
                    pick,
                    down: span(0.0, 15.0),
                },
                Fault::Twin => Event::Twin { pick },
                Fault::Panic => Event::Panic { pick },
                Fault::Handoff => Event::Handoff { pick },
                Fault::Join => Event::Join,
                Fault::Leave => Event::Leave { pick },
                Fault::Shards if rng.gen_bool(0.5) => Event::AddShards(rng.gen_range(1..=3)),
                Fault::Shards => {
                    // Removed early enough to be retired (60 s) within the checks after the
                    // heal, whatever the faults did to discovery.
                    let n = rng.gen_range(1..=3);
                    let at = seconds(&mut rng, 0.0, phase / 2.0);
                    events.push((at, Event::RemoveShards { n, pick }));
                    continue;
                }
                _ => unreachable!("rates and operators' moves are drawn apart"),
            };
            events.push((at, event));
        }
    }
    events.sort_by_key(|(at, _)| *at);
    let mut schedule = Schedule {
        seed,
        workers,
        leases,
        rates,
        max_skew: if on(Fault::Skew) { max_skew } else { 0.0 },
        checkpoint_every,
        faults_for,
        events,
        day_rest,
        balancing: Balancing::Count,
    };
    draw_protocol_faults(seed, enabled, &mut schedule);
    schedule
}

/// The faults of [`Fault::OWN_STREAM`] (late writes, stale reads, policies that steal,
/// operators), drawn from a stream of their own: with them off, a seed draws the schedule it
/// drew before they existed (the seeds quoted in ARCHITECTURE.md and BENCHMARKS.md replay
/// with the fault kinds they name).
fn draw_protocol_faults(seed: u64, enabled: &BTreeSet<Fault>, schedule: &mut Schedule) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x34_34_34_34_34_34_34_34);
    let on = |f: Fault| enabled.contains(&f);
    if !enabled.iter().any(|f| Fault::OWN_STREAM.contains(f)) {
        return;
    }
    if on(Fault::LateWrite) {
        schedule.rates.late = rng.gen_range(0.01..=0.05);
    }
    if on(Fault::StaleRead) {
        schedule.rates.stale = rng.gen_range(0.05..=0.3);
    }
    let mut policies = vec![Balancing::Count];
    if on(Fault::PolicyLoad) {
        policies.push(Balancing::Load);
    }
    if on(Fault::PolicyKcl) {
        policies.push(Balancing::Kcl);
    }
    schedule.balancing = policies[rng.gen_range(0..policies.len())];
    // An application that checkpoints rarely (KCL's own examples checkpoint once a minute)
    // learns from no refused checkpoint that its lease was taken: a third of the schedules
    // checkpoint every 10-60 s.
    let rarely = rng.gen_bool(1.0 / 3.0);
    let every = seconds(&mut rng, 10.0, 60.0);
    if rarely {
        schedule.checkpoint_every = every;
    }
    let moves: Vec<Fault> = enabled
        .iter()
        .copied()
        .filter(|f| f.is_operator())
        .collect();
    if moves.is_empty() {
        return;
    }
    // Early enough that a move waiting for an application (30 s at most) ends before the heal.
    let phase = schedule.faults_for.as_secs_f64();
    for _ in 0..rng.gen_range(1..=4) {
        let at = seconds(&mut rng, 0.0, phase * 0.6);
        let pick: u64 = rng.gen();
        let event = match moves[rng.gen_range(0..moves.len())] {
            Fault::OpRelease => Event::Release { pick },
            Fault::OpDrain => Event::Drain { pick },
            Fault::OpCheckpoint => Event::SetCheckpoint {
                pick,
                value: rng.gen_range(0..1000),
            },
            Fault::OpReset => Event::ResetCheckpoint { pick },
            _ => Event::Delete { pick },
        };
        schedule.events.push((at, event));
    }
    schedule.events.sort_by_key(|(at, _)| *at);
}

/// The scripted schedules (`--script NAME`): a few faults aimed at single requests, for the
/// holes that random schedules meet too rarely.
pub const SCRIPTS: [&str; 2] = ["lost-steal", "restart-stale"];

/// A calm schedule of three workers over nine leases, no fault drawn: a script adds its own.
fn calm(seed: u64) -> Schedule {
    Schedule {
        seed,
        workers: 3,
        leases: 9,
        rates: Chaos::default(),
        max_skew: 0.0,
        checkpoint_every: Duration::from_secs(2),
        faults_for: Duration::from_secs(90),
        events: Vec::new(),
        day_rest: false,
        balancing: Balancing::Count,
    }
}

fn aim_at(process: u64, operation: &'static str, key: &str, fault: Aimed) -> Event {
    Event::Aim(Aim {
        process: Some(process),
        operation,
        key: Some(key.to_owned()),
        fault,
    })
}

/// The scripted schedule `name` (one of [`SCRIPTS`]).
pub fn script(name: &str) -> Option<Schedule> {
    let secs = Duration::from_secs;
    let mut s = calm(34);
    match name {
        // Hole 1: a worker joins a fleet balanced by `KclBalance`, whose rounds steal; its
        // steal of shard-0000001 from p1 lands, and no answer comes to it or its retries. The
        // next round resumes it as a forced take, reported a lease duration later; nobody
        // tells p1, which goes on processing.
        "lost-steal" => {
            s.balancing = Balancing::Kcl;
            // A refused checkpoint would tell the old owner: it checkpoints once a minute.
            s.checkpoint_every = secs(60);
            // p0, the worker doing the chores, which would tell the owner, is frozen meanwhile.
            s.events = vec![
                (
                    secs(20),
                    Event::Freeze {
                        pick: 0,
                        span: secs(12),
                    },
                ),
                (
                    secs(20),
                    aim_at(3, "take", "shard-0000001", Aimed::Unanswered),
                ),
                (secs(20), Event::Join),
            ];
        }
        // Hole 6's restart: the only worker restarts under its id just before the faults
        // end, and the first rounds of its new process (p1) scan lagging replicas, which
        // still show the record of the session its opening replaced, beating, and that
        // session's leases. Judged by the scans alone, they are held by a live session until
        // a scan shows the record replaced, and for a lease duration after that; the new
        // session knows its opening replaced that session (`OwnSession::predecessors`). It also
        // passes with that knowledge taken away: a replica that shows the old record never
        // beating again lets the session be fenced a lease duration after the opening.
        "restart-stale" => {
            s.workers = 1;
            // Lags chosen so that each round's replica shows a later beat of the old session
            // (which beat every 2.5 s until the restart): the rounds at +0 s, +0.6 s and +10 s
            // (a lease duration without a new beat seen) see it alive each time; the fourth
            // round's replica shows the new record.
            s.events = [12, 9, 12, 14]
                .into_iter()
                .map(|lag| {
                    let aim = Aim {
                        process: Some(1),
                        operation: "scan",
                        key: None,
                        fault: Aimed::Stale(secs(lag)),
                    };
                    (secs(85), Event::Aim(aim))
                })
                .collect();
            s.events.push((
                secs(85),
                Event::Restart {
                    pick: 0,
                    down: secs(1),
                },
            ));
        }
        _ => return None,
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_and_only_the_enabled_faults() {
        let all = parse_faults("all").unwrap();
        let a = schedule(42, &all, 0.01, false);
        let b = schedule(42, &all, 0.01, false);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let some = parse_faults("crash,freeze").unwrap();
        for seed in 0..50 {
            let s = schedule(seed, &some, 0.01, false);
            assert_eq!(s.rates, Chaos::default());
            assert_eq!(s.max_skew, 0.0);
            assert!(s.events.iter().all(|(_, e)| some.contains(&e.fault())));
            assert!(s.events.iter().all(|(at, _)| *at <= s.faults_for));
        }
        assert!(parse_faults("crash,explode")
            .unwrap_err()
            .contains("throttle"));
    }

    #[test]
    fn clock_rates_stay_within_the_skew() {
        for host in 0..100 {
            let rate = clock_rate(7, host, 0.01);
            assert!((0.99..=1.01).contains(&rate), "{rate}");
        }
        assert_eq!(clock_rate(7, 3, 0.0), 1.0);
    }
}
