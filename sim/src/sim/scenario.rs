//! The scenarios: each a short list of steps over a fleet that is first started and balanced.

use std::time::Duration;

/// One thing that happens to the fleet. The simulator waits until the fleet is balanced again
/// (or the step limit passes) before the next step, and measures each step on its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `n` new workers start at the same moment.
    Start(usize),
    /// `n` workers die without a goodbye (process killed).
    Crash(usize),
    /// `n` workers die without a goodbye, and each starts again with the same id (a new
    /// process, a new incarnation) after the span, finding its session's record as the
    /// crash left it (a supervisor restarting a killed process).
    CrashRestart(usize, Duration),
    /// `n` workers shut down gracefully at the same moment.
    Leave(usize),
    /// Worker number `i` shuts down gracefully and starts again with the same id after
    /// [`RESTART_DOWNTIME`](super::RESTART_DOWNTIME).
    Restart(usize),
    /// `n` new shards appear in the source.
    AddShards(usize),
    /// `n` shards disappear from the source.
    RemoveShards(usize),
    /// `n` workers stall (every answer to them held) for a while, then go on.
    Pause(usize, Duration),
    /// `n` workers lose their connection to the table for a while.
    CutOff(usize, Duration),
    /// Nothing happens: the fleet, balanced by count when it starts, settles by the policy
    /// (with a load policy, from the load figures its workers publish).
    Settle,
}

impl Step {
    pub fn label(&self) -> String {
        match self {
            Step::Start(n) => format!("{n} start"),
            Step::Crash(n) => format!("{n} crash"),
            Step::CrashRestart(n, d) => format!("{n} crash, back after {} s", d.as_secs()),
            Step::Leave(n) => format!("{n} leave"),
            Step::Restart(i) => format!("restart #{i}"),
            Step::AddShards(n) => format!("{n} shards added"),
            Step::RemoveShards(n) => format!("{n} shards removed"),
            Step::Pause(n, d) => format!("{n} paused {} s", d.as_secs()),
            Step::CutOff(n, d) => format!("{n} cut off {} s", d.as_secs()),
            Step::Settle => "settle".into(),
        }
    }
}

/// A scenario: the fleet it starts from and what happens to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: &'static str,
    /// Workers started (and balanced, unmeasured) before the first step.
    pub initial: usize,
    /// Shards come from a source the workers discover (instead of leases created up front).
    pub discovery: bool,
    pub steps: Vec<Step>,
}

/// Every scenario name, for `--help`.
pub const NAMES: &[&str] = &[
    "cold-start",
    "join",
    "crash",
    "leave",
    "rolling-restart",
    "autoscale",
    "shards",
    "pause",
    "cut-off",
    "crash-join",
    "crash-restart",
    "skew",
    "hot-shard",
    "heterogeneous",
    "drift",
    "rest",
];

/// The load model a scenario runs with unless `--load` says otherwise.
pub fn default_load(name: &str) -> &'static str {
    match name {
        "skew" | "drift" => "zipf:1",
        _ => "uniform",
    }
}

/// The capacities a scenario runs with unless `--capacities` says otherwise (empty: all 1).
pub fn default_capacities(name: &str) -> Vec<f64> {
    match name {
        "heterogeneous" => vec![1.0, 2.0, 4.0],
        _ => Vec::new(),
    }
}

/// When a lease turns hot in a scenario unless `--hot-after` says otherwise.
pub fn default_hot_after(name: &str) -> Option<Duration> {
    match name {
        "hot-shard" => Some(HOT_AFTER),
        _ => None,
    }
}

/// The period of the diurnal wave of `drift` unless `--wave` says otherwise (a day, squeezed
/// into half an hour so that an hour's rest sees two).
pub const WAVE: Duration = Duration::from_secs(1800);

/// The wave a scenario runs with unless `--wave` says otherwise.
pub fn default_wave(name: &str) -> Option<Duration> {
    match name {
        "drift" => Some(WAVE),
        _ => None,
    }
}

/// How long into the rest the lease of `hot-shard` turns hot, unless told.
pub const HOT_AFTER: Duration = Duration::from_secs(300);

/// How long a pause lasts unless told: two lease durations.
pub const PAUSE: Duration = Duration::from_secs(20);
/// How long a cut-off lasts unless told: three lease durations.
pub const CUT_OFF: Duration = Duration::from_secs(30);
/// How long a crashed process of `crash-restart` stays down unless told: half a lease.
pub const BACK_AFTER: Duration = Duration::from_secs(5);

/// The scenario `name` for a fleet of `workers` over `leases`; `k` is how many workers a
/// join, crash, leave, pause or cut-off concerns; `outage` how long a pause or cut-off lasts,
/// or a crashed process of `crash-restart` stays down (default [`PAUSE`], [`CUT_OFF`],
/// [`BACK_AFTER`]).
pub fn scenario(
    name: &str,
    workers: usize,
    leases: usize,
    k: usize,
    outage: Option<Duration>,
) -> Result<Scenario, String> {
    let k = k.clamp(1, workers.max(1));
    let plain = |initial, steps| Scenario {
        name: NAMES.iter().find(|n| **n == name).copied().unwrap_or("?"),
        initial,
        discovery: false,
        steps,
    };
    Ok(match name {
        "cold-start" => plain(0, vec![Step::Start(workers)]),
        "join" => plain(workers, vec![Step::Start(k)]),
        "crash" => plain(workers, vec![Step::Crash(k.min(workers - 1))]),
        "leave" => plain(workers, vec![Step::Leave(k.min(workers - 1))]),
        "rolling-restart" => plain(workers, (0..workers).map(Step::Restart).collect()),
        "autoscale" => {
            // From 4 workers up to `workers` in four waves, and back down in four.
            let peak = workers.max(8);
            let wave = (peak - 4).div_ceil(4);
            let mut steps = Vec::new();
            let mut size = 4;
            while size < peak {
                let n = wave.min(peak - size);
                steps.push(Step::Start(n));
                size += n;
            }
            while size > 4 {
                let n = wave.min(size - 4);
                steps.push(Step::Leave(n));
                size -= n;
            }
            plain(4, steps)
        }
        "shards" => {
            let n = (leases / 10).max(1);
            Scenario {
                discovery: true,
                ..plain(workers, vec![Step::AddShards(n), Step::RemoveShards(n)])
            }
        }
        "pause" => plain(workers, vec![Step::Pause(k, outage.unwrap_or(PAUSE))]),
        "cut-off" => plain(workers, vec![Step::CutOff(k, outage.unwrap_or(CUT_OFF))]),
        // A crash, and the same workers back (new processes) a moment later.
        "crash-restart" => plain(
            workers,
            vec![Step::CrashRestart(
                k.min(workers - 1),
                outage.unwrap_or(BACK_AFTER),
            )],
        ),
        // A crash, and once its orphans are placed, as many new workers (a replacement).
        "crash-join" => {
            let k = k.min(workers - 1);
            plain(workers, vec![Step::Crash(k), Step::Start(k)])
        }
        // The fleet starts balanced by count, under skewed loads (`skew`), with like loads of
        // which one turns 20 times hotter during the rest (`hot-shard`), or over workers of
        // capacities 1, 2 and 4 (`heterogeneous`), or under skewed loads riding a diurnal
        // wave in three regions (`drift`): the policy settles it.
        "skew" | "hot-shard" | "heterogeneous" | "drift" => plain(workers, vec![Step::Settle]),
        // Nothing happens: the fleet, started and balanced, rests (cost and losses at rest
        // of exactly `workers`).
        "rest" => plain(workers, Vec::new()),
        other => {
            return Err(format!(
                "unknown scenario {other:?}; one of: {}",
                NAMES.join(", ")
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autoscale_grows_to_the_peak_and_back() {
        let s = scenario("autoscale", 64, 1000, 1, None).unwrap();
        assert_eq!(s.initial, 4);
        let (grown, shrunk) = s.steps.iter().fold((0, 0), |(up, down), step| match step {
            Step::Start(n) => (up + n, down),
            Step::Leave(n) => (up, down + n),
            _ => (up, down),
        });
        assert_eq!((grown, shrunk), (60, 60));
        assert_eq!(s.steps.len(), 8);
    }

    #[test]
    fn crash_join_replaces_the_crashed() {
        let s = scenario("crash-join", 1000, 100_000, 1, None).unwrap();
        assert_eq!(
            (s.initial, s.steps),
            (1000, vec![Step::Crash(1), Step::Start(1)])
        );
    }

    #[test]
    fn unknown_names_are_refused_with_the_list() {
        let err = scenario("explode", 4, 10, 1, None).unwrap_err();
        assert!(
            err.contains("cold-start") && err.contains("cut-off"),
            "{err}"
        );
    }
}
