//! A fault schedule, drawn from one seed: the fleet, the fault rates, and the timed events of
//! the fault phase. Pure: the same seed and switches give the same schedule.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::sim::net::Chaos;

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
}

impl Fault {
    pub const ALL: [Fault; 16] = [
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
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// A fault drawn per request (a rate) rather than an event of the schedule.
    fn is_rate(self) -> bool {
        matches!(
            self,
            Fault::Throttle | Fault::Transient | Fault::Lost | Fault::Never | Fault::Skew
        )
    }
}

/// `all`, or a comma-separated list of fault names.
pub fn parse_faults(list: &str) -> Result<BTreeSet<Fault>, String> {
    if list == "all" {
        return Ok(Fault::ALL.into_iter().collect());
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
                    "unknown fault {name:?}; one of: {}, or all",
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
    Freeze { pick: u64, span: Duration },
    CutOff { pick: u64, span: Duration },
    Spike { pick: u64, span: Duration },
    Crash { pick: u64 },
    Restart { pick: u64, down: Duration },
    Twin { pick: u64 },
    Panic { pick: u64 },
    Handoff { pick: u64 },
    Join,
    Leave { pick: u64 },
    AddShards(usize),
    RemoveShards { n: usize, pick: u64 },
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
        }
    }
}

/// The lease duration of the campaign's workers (the library's default).
pub const LEASE: Duration = Duration::from_secs(10);
/// The extra latency of a request sent during a spike: between one lease duration and this.
pub const SPIKE_MAX: Duration = Duration::from_millis(25_000);

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
    };
    let kinds: Vec<Fault> = enabled.iter().copied().filter(|f| !f.is_rate()).collect();
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
                Fault::Throttle | Fault::Transient | Fault::Lost | Fault::Never | Fault::Skew => {
                    unreachable!("rates are not events")
                }
            };
            events.push((at, event));
        }
    }
    events.sort_by_key(|(at, _)| *at);
    Schedule {
        seed,
        workers,
        leases,
        rates,
        max_skew: if on(Fault::Skew) { max_skew } else { 0.0 },
        checkpoint_every,
        faults_for,
        events,
        day_rest,
    }
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
