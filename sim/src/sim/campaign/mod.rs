//! The fault campaign: many seeded schedules of mixed faults on the real worker code over the
//! simulated network, each checked against the invariants a user relies on (see `run.rs`):
//!
//! - never two applications processing one lease at the same simulated instant (a frozen
//!   process processes nothing, and must stop what others took at the instant it thaws);
//! - no checkpoint accepted from a tenure that has ended, none lost or moved backwards;
//! - after the heal, every lease processed again within a lease duration and two taker
//!   intervals, the fleet balanced within a minute and staying so, removed shards retired;
//! - no request left waiting by a caller past its deadline and a store timeout, no start or
//!   shutdown that does not return;
//! - no task or memory growth over a simulated day at rest (some schedules).

pub mod app;
pub mod fleet;
pub mod ledger;
pub mod run;
pub mod schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use self::run::{Knobs, Outcome};
use self::schedule::{fault_list, schedule, schedule_seed, script, Fault};

/// What the campaign runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many schedules.
    pub schedules: u64,
    /// The campaign's seed: schedule `i` is seeded by `schedule_seed(seed, i)`.
    pub seed: u64,
    /// Run only the schedule of this seed (a replay).
    pub only: Option<u64>,
    /// Run only this scripted schedule (`schedule::SCRIPTS`).
    pub script: Option<String>,
    pub faults: BTreeSet<Fault>,
    /// Clock rates are drawn within `1 ± max_skew`.
    pub max_skew: f64,
    pub knobs: Knobs,
    /// Every this many schedules (the first included), the fleet also rests a simulated day
    /// (0: never).
    pub day_every: u64,
    /// Print one line per schedule, and a replayed schedule's events.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            schedules: 200,
            seed: 1,
            only: None,
            script: None,
            faults: Fault::defaults(),
            max_skew: 0.01,
            knobs: Knobs::default(),
            day_every: 500,
            verbose: false,
        }
    }
}

/// What a campaign found.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub schedules: u64,
    /// Invariants broken, counted once per schedule.
    pub violations: u64,
    pub injected: BTreeMap<Fault, u64>,
    /// Of the stale reads, those that lagged by more than a lease duration.
    pub stale_long: u64,
    /// Per invariant: in how many schedules, and the first schedule's seed.
    pub by_invariant: BTreeMap<&'static str, (u64, u64)>,
    pub simulated: Duration,
}

impl Options {
    /// The command that replays the schedule of `seed` alone.
    pub fn replay(&self, seed: u64, day_rest: bool) -> String {
        let mut command = match &self.script {
            Some(name) => format!("cargo run --release -p shardlease-sim -- --script {name}"),
            None => format!("cargo run --release -p shardlease-sim -- --schedule {seed}"),
        };
        if self.faults != Fault::defaults() {
            command += &format!(" --faults {}", fault_list(&self.faults));
        }
        if self.max_skew != Options::default().max_skew {
            command += &format!(" --max-skew {}%", self.max_skew * 100.0);
        }
        if let Some(timeout) = self.knobs.attempt_timeout {
            command += &format!(" --attempt-timeout {}", timeout.as_secs_f64());
        }
        if day_rest {
            command += " --day-every 1";
        }
        if let Some(interval) = self.knobs.renew_interval {
            command += &format!(" --renew-interval {}", interval.as_secs_f64());
        }
        command
    }
}

/// Installs, once, a panic hook that keeps the simulated applications' panics quiet (every
/// other panic is printed as usual).
pub fn quiet_simulated_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let text = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied());
            if text != Some(app::PANIC) {
                default(info);
            }
        }));
    });
}

/// Runs the campaign; `say` receives the report line by line, the last one being
/// `campaign: N schedules, V violations; injected: KIND COUNT, ...`.
pub fn campaign(options: &Options, say: &mut dyn FnMut(&str)) -> Summary {
    quiet_simulated_panics();
    let mut summary = Summary::default();
    let seeds: Vec<(u64, u64, bool)> = match options.only {
        _ if options.script.is_some() => vec![(0, 0, false)],
        Some(seed) => vec![(0, seed, options.day_every == 1)],
        None => (0..options.schedules)
            .map(|i| {
                let day = options.day_every > 0 && i % options.day_every == 0;
                (i, schedule_seed(options.seed, i), day)
            })
            .collect(),
    };
    for (index, seed, day_rest) in seeds {
        let drawn = match &options.script {
            Some(name) => match script(name) {
                Some(scripted) => scripted,
                None => {
                    say(&format!("no scripted schedule {name:?}"));
                    break;
                }
            },
            None => schedule(seed, &options.faults, options.max_skew, day_rest),
        };
        if (options.only.is_some() || options.script.is_some()) && options.verbose {
            describe(&drawn, say);
        }
        let outcome = run::run(drawn, options.knobs);
        summary.schedules += 1;
        summary.simulated += outcome.simulated;
        for (fault, n) in &outcome.injected {
            *summary.injected.entry(*fault).or_default() += n;
        }
        summary.stale_long += outcome.stale_long;
        let broken: BTreeSet<&'static str> =
            outcome.violations.iter().map(|v| v.invariant).collect();
        for invariant in &broken {
            let first = outcome.schedule.seed;
            let entry = summary.by_invariant.entry(invariant).or_insert((0, first));
            entry.0 += 1;
        }
        summary.violations += broken.len() as u64;
        if options.verbose {
            say(&format!(
                "schedule {index} (seed {}): {} workers, {} leases, {:.0} s of faults, {} events, {:.0} s simulated: {}",
                outcome.schedule.seed,
                outcome.schedule.workers,
                outcome.schedule.leases,
                outcome.schedule.faults_for.as_secs_f64(),
                outcome.schedule.events.len(),
                outcome.simulated.as_secs_f64(),
                if broken.is_empty() { "ok".to_owned() } else { broken.iter().copied().collect::<Vec<_>>().join(", ") }
            ));
        }
        if !broken.is_empty() {
            report_failure(options, index, &outcome, say);
        }
    }
    if !summary.by_invariant.is_empty() {
        let broken: Vec<String> = summary
            .by_invariant
            .iter()
            .map(|(name, (n, seed))| format!("{name} in {n} (first: --schedule {seed})"))
            .collect();
        say(&format!("violations by invariant: {}", broken.join("; ")));
    }
    say(&format!(
        "simulated {:.1} h in all (faults: {}, max skew {}%)",
        summary.simulated.as_secs_f64() / 3600.0,
        fault_list(&options.faults),
        options.max_skew * 100.0
    ));
    say(&format!(
        "campaign: {} schedules, {} violations; injected: {}",
        summary.schedules,
        summary.violations,
        injected(options, &summary)
    ));
    summary
}

/// Each fault kind the campaign could inject, with how many it did: requests for the rates,
/// schedules for the policies, processes for the skew, events for the rest.
fn injected(options: &Options, summary: &Summary) -> String {
    let kinds: Vec<String> = Fault::ALL
        .iter()
        .filter(|f| options.faults.contains(f))
        .map(|f| {
            let n = summary.injected.get(f).copied().unwrap_or(0);
            match f {
                Fault::StaleRead => {
                    format!("{} {n} ({} beyond a lease)", f.name(), summary.stale_long)
                }
                _ => format!("{} {n}", f.name()),
            }
        })
        .collect();
    if kinds.is_empty() {
        return "nothing".into();
    }
    kinds.join(", ")
}

/// How many details of one invariant a failing schedule prints.
const DETAILS: usize = 3;

fn report_failure(options: &Options, index: u64, outcome: &Outcome, say: &mut dyn FnMut(&str)) {
    let seed = outcome.schedule.seed;
    say(&format!("FAILED schedule {index} (seed {seed}):"));
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &outcome.violations {
        let n = shown.entry(v.invariant).or_default();
        *n += 1;
        if *n <= DETAILS {
            say(&format!("  {} at {:.3} s: {}", v.invariant, v.at, v.detail));
        }
    }
    for (invariant, n) in &shown {
        if *n > DETAILS {
            say(&format!("  ({} more {invariant})", n - DETAILS));
        }
    }
    say(&format!(
        "  replay: {}",
        options.replay(seed, outcome.schedule.day_rest)
    ));
}

fn describe(s: &schedule::Schedule, say: &mut dyn FnMut(&str)) {
    say(&format!(
        "schedule {}: {} workers ({:?} balance), {} leases, checkpoints every {:.1} s, rates {:?}, max skew {}%, {:.0} s of faults",
        s.seed,
        s.workers,
        s.balancing,
        s.leases,
        s.checkpoint_every.as_secs_f64(),
        s.rates,
        s.max_skew * 100.0,
        s.faults_for.as_secs_f64()
    ));
    for (at, event) in &s.events {
        say(&format!("  +{:.3} s {event:?}", at.as_secs_f64()));
    }
}
