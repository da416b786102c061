//! The fleet simulator: runs the library's real workers on paused time over an in-memory
//! table with simulated latency and faults, and reports convergence, movement, failover,
//! safety and cost, for shardlease and for the KCL 2.x baseline (a model of KCL's own lease
//! coordination, `sim/kcl.rs`) side by side.
//!
//! ```sh
//! cargo run --release -p shardlease-sim -- --scenario join --workers 100 --leases 10000
//! cargo run --release -p shardlease-sim -- --scenario crash --workers 50 --leases 5000 --json
//! cargo run --release -p shardlease-sim -- --campaign 200 --seed 1
//! cargo run --release -p shardlease-sim -- --help
//! ```
//!
//! The modules are the crate's library (`src/lib.rs`, `src/sim/`), which the tests use too.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, ValueEnum};

use shardlease_sim::sim;
use sim::campaign::schedule::{self, Fault};
use sim::latency::LatencyModel;
use sim::load::{self, LoadModel, Loads};
use sim::net::{FaultRates, Latencies, Latency};
use sim::report::table;
use sim::scenario::{scenario, NAMES};
use sim::{Policy, Settings};

/// See `Cargo.toml`: allocation-heavy rounds over 100,000 leases run faster on it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A fleet of shardlease workers on simulated time, against the KCL 2.x baseline.
///
/// Runs the library's real workers on paused time over an in-memory table with simulated
/// latency and faults, and reports convergence, movement, failover, safety and cost, one
/// column per policy (or, with --json, one JSON object per run).
///
/// With --campaign N or --schedule SEED it runs the fault campaign instead: seeded schedules
/// of mixed faults (small fleets, a few simulated minutes each), each checked against the
/// invariants; the options under "Fault campaign" apply to it, those under "Run" do not.
#[derive(Parser)]
#[command(
    name = "simulate",
    override_usage = "cargo run --release -p shardlease-sim -- [OPTIONS]\n       \
                      cargo run --release -p shardlease-sim -- --campaign N [CAMPAIGN OPTIONS]\n       \
                      cargo run --release -p shardlease-sim -- --schedule SEED [CAMPAIGN OPTIONS]",
    after_help = "Examples:\n  \
                  simulate --scenario join --workers 100 --leases 10000\n  \
                  simulate --scenario crash --workers 50 --leases 5000 --json\n  \
                  simulate --campaign 200 --seed 1\n  \
                  simulate --schedule SEED          (replay one schedule, with its events)",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Cli {
    /// The seed: the same seed replays the same run. With --campaign, the campaign's seed:
    /// schedule i is seeded from S and i
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    campaign: CampaignArgs,
}

/// The help headings of a run's options and of the fault campaign's.
const RUN: &str = "Run";
const CAMPAIGN: &str = "Fault campaign";

/// The options of a run (not of the fault campaign).
#[derive(Args)]
#[command(next_help_heading = RUN)]
struct RunArgs {
    /// What happens to the fleet: cold-start, join, crash, leave, rolling-restart, autoscale,
    /// shards, pause, cut-off, crash-join (k crash, then k start), crash-restart (k crash
    /// and start again with their ids after --outage, default 5 s), skew, hot-shard,
    /// heterogeneous, drift, rest (nothing: the balanced fleet rests); or `all` for every
    /// one in turn
    #[arg(long, value_name = "NAME", default_value = "join", value_parser = scenario_names(),
          hide_possible_values = true)]
    scenario: String,
    /// Workers (autoscale: the peak, from 4)
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = at_least_1)]
    workers: usize,
    /// Leases
    #[arg(long, value_name = "L", default_value_t = 1000, value_parser = at_least_1)]
    leases: usize,
    /// Workers a join, crash, leave, pause, cut-off or crash-join concerns [default: a tenth
    /// of the workers, at least 1]
    #[arg(long, value_name = "N")]
    k: Option<usize>,
    /// The policies to run, side by side
    #[arg(long, value_name = "P", value_enum, default_value = "both")]
    policy: Policies,
    /// Store latency in ms, log-normal, of every request (under --latency-model heavy-tail,
    /// the body below the tail)
    #[arg(long, value_name = "MED,P99", default_value = "5,25", value_parser = latency)]
    latency: Latency,
    /// How latency is drawn: lognormal (by --latency), or heavy-tail: the log-normal body of
    /// --latency for 99 % of requests, a Pareto tail from its p99 (25 ms) to 1 s at the
    /// 99.9th percentile, the top 0.1 % log-uniform from 1 s to 2 s; and one 3 s stall per
    /// worker in each simulated hour (at an instant drawn by the seed), during which every
    /// request the worker starts waits until the stall ends before it is sent. It applies to
    /// every policy, the KCL model included
    #[arg(long, value_name = "MODEL", default_value = "lognormal", value_parser = LatencyModel::parse)]
    latency_model: LatencyModel,
    /// The library's lease duration in seconds, fractions allowed (1.5): the intervals the
    /// library derives from it follow it as its defaults do (the beat every 45 %, the reads
    /// of a worker's own record between beats every third of a beat, a failed taker round
    /// retried after a half, the drift allowance a twentieth); those it does not
    /// derive keep their defaults (slow scan 50 s, store timeout 5 s, handoff poll 250 ms,
    /// handoff and shutdown timeouts 30 s). A value WorkerConfig::validate refuses is
    /// refused with its message. The KCL model (--policy kcl) does not follow it: it keeps
    /// its own 10 s unless --kcl-lease-duration is given [default: 10]
    #[arg(long, value_name = "SECS", value_parser = positive_seconds)]
    lease_duration: Option<Duration>,
    /// The KCL model's lease duration in seconds (its failoverTimeMillis, at least 0.1):
    /// its renewals every lease / 3 - 25 ms and its taker every 2 x (lease + 25 ms) follow
    /// it, as KCL derives them. --lease-duration does not change it [default: 10]
    #[arg(long, value_name = "SECS", value_parser = kcl_lease_duration)]
    kcl_lease_duration: Option<sim::kcl::Timing>,
    /// The latency of gets [default: --latency]
    #[arg(long, value_name = "MED,P99", value_parser = latency)]
    read_latency: Option<Latency>,
    /// The latency of conditional writes [default: --latency]
    #[arg(long, value_name = "MED,P99", value_parser = latency)]
    write_latency: Option<Latency>,
    /// The latency of one scan page [default: --latency]
    #[arg(long, value_name = "MED,P99", value_parser = latency)]
    scan_latency: Option<Latency>,
    /// Probability a request is throttled
    #[arg(long, value_name = "P", default_value = "0", value_parser = probability)]
    throttle: f64,
    /// Probability a request fails before it is applied
    #[arg(long, value_name = "P", default_value = "0", value_parser = probability)]
    transient: f64,
    /// Probability a write's answer is lost after it is applied
    #[arg(long, value_name = "P", default_value = "0", value_parser = probability)]
    ambiguous: f64,
    /// Simulated rest after the last step, for moves and cost at rest
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = seconds)]
    rest: Duration,
    /// How long a step may take to balance
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = seconds)]
    step_limit: Duration,
    /// The applications checkpoint this often, at least 0.1 s [default: only on stop]
    #[arg(long, value_name = "SECS", value_parser = checkpoint_every)]
    checkpoint_every: Option<Duration>,
    /// How long a pause or a cut-off lasts, or a crashed process of crash-restart stays down
    /// [default: 20, 30 and 5]
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    outage: Option<Duration>,
    /// A crash (of crash, crash-join and crash-restart) comes at an instant drawn by the seed uniformly
    /// within SECS after the fleet is balanced, so that seeds sample the phase of the
    /// victims' beats the crash meets; failover is measured from the crash [default: at
    /// once]
    #[arg(long, value_name = "SECS", value_parser = positive_seconds)]
    crash_within: Option<Duration>,
    /// Between the starts of workers that join together (0: one right after the other)
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = seconds)]
    start_gap: Duration,
    /// Print simulated and wall time to stderr every SECS simulated, at least 1
    #[arg(long, value_name = "SECS", value_parser = progress)]
    progress: Option<Duration>,
    /// Lease loads, normalised to a mean of 1: uniform (every lease 1); zipf:S (the lease of
    /// rank r in proportion to 1/r^S, S > 0, the ranks shuffled over the leases by the seed);
    /// hot:K (K leases, drawn by the seed, 10 times as heavy as the others). Shards added
    /// during a run weigh 1 [default: zipf:1 for skew, else uniform]
    #[arg(long, value_name = "MODEL")]
    load: Option<LoadModel>,
    /// Worker capacity weights, comma-separated, cycled over the workers in start order
    /// (1,2,4: the first worker 1, the second 2, the third 4, the fourth 1 ...) [default:
    /// 1,2,4 for heterogeneous, else all 1]
    #[arg(long, value_name = "LIST", value_parser = capacities)]
    capacities: Option<Capacities>,
    /// A worker is overloaded (above 100 % of its capacity) when it holds more than this
    /// times its fair share of the load: its capacity weight x total lease load / total
    /// capacity weight of the running workers x HEADROOM
    #[arg(long, value_name = "HEADROOM", default_value = "1.25", value_parser = headroom)]
    headroom: f64,
    /// SECS into the rest, one lease drawn by the seed turns 20 times as heavy (the loads'
    /// mean is then no longer 1) [default: 300 for hot-shard]
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    hot_after: Option<Duration>,
    /// A diurnal wave of period SECS from the first step: the leases fall into 3 regions
    /// drawn by the seed, and each one's load goes from half to 1.5 times its drawn load and
    /// back, the regions a third of a period apart (updated every 10 s) [default: 1800 for
    /// drift]
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    wave: Option<Duration>,
    /// Under the load policies, every load figure the applications report is the lease's load
    /// times a factor drawn uniformly from [1 - NOISE, 1 + NOISE] (0.2: ±20 %)
    #[arg(long, value_name = "NOISE", default_value = "0", value_parser = noise)]
    noise: f64,
    /// Under the load policies, the applications of K leases (the first K in key order) never
    /// report a figure for them
    #[arg(long, value_name = "K", default_value = "0")]
    unreported: usize,
    /// One JSON object per run, one per line, instead of the table
    #[arg(long)]
    json: bool,
    /// Write every worker's held load over its fair share, each simulated second from the
    /// first step on, to FILE as CSV (scenario,policy,seed,t_s,worker,share), one row per
    /// worker and second, every run appended (`scripts/plot_load.py` draws it)
    #[arg(long, value_name = "FILE")]
    load_trace: Option<std::path::PathBuf>,
    /// For the scenarios that start from the table balanced by count (`skew`, `heterogeneous`,
    /// `drift`, `hot-shard`): write that start to FILE as JSON ({"loads", "holder",
    /// "capacities", "tolerance"}: each lease's load and first holder, each worker's capacity),
    /// the input of `scripts/minimum_moves.py`
    #[arg(long, value_name = "FILE")]
    dump_start: Option<std::path::PathBuf>,
}

/// The options of the fault campaign (`--campaign N` or `--schedule SEED`).
#[derive(Args)]
#[command(next_help_heading = CAMPAIGN)]
struct CampaignArgs {
    /// Run N seeded fault schedules (small fleets, a few simulated minutes each) and check the
    /// invariants; ends with `campaign: N schedules, V violations; injected: ...` (exit 1 when
    /// V > 0)
    #[arg(long, value_name = "N")]
    campaign: Option<u64>,
    /// Run the one schedule of this seed (a failing schedule prints it), with its events
    #[arg(long, value_name = "SEED")]
    schedule: Option<u64>,
    /// Run one scripted schedule, with its events: faults aimed at single requests where
    /// random schedules rarely meet a hole (lost-steal)
    #[arg(long, value_name = "NAME")]
    script: Option<String>,
    /// Fault kinds, comma-separated, or all (the default) or none: throttle, transient,
    /// lost, never, spike, freeze, cutoff, crash, restart, twin, panic, handoff, join, leave,
    /// shards, skew, late-write, stale-read, policy-load, policy-kcl, op-release, op-drain,
    /// op-checkpoint, op-reset, op-delete
    #[arg(long, value_name = "LIST", value_parser = schedule::parse_faults)]
    faults: Option<BTreeSet<Fault>>,
    /// Clock rates drawn within 1 +- P ("1%" or 0.01) [default: 1%]
    #[arg(long, value_name = "P", value_parser = max_skew)]
    max_skew: Option<f64>,
    /// The simulated store fails an unanswered attempt after SECS, as an SDK attempt timeout
    /// would [default: none, the caller must give up]
    #[arg(long, value_name = "SECS", value_parser = positive_seconds)]
    attempt_timeout: Option<Duration>,
    /// Every Nth schedule (the first included) also rests a simulated day, checking tasks and
    /// memory do not grow (0: never) [default: 500]
    #[arg(long, value_name = "N")]
    day_every: Option<u64>,
    /// The workers' beat (their session's renew interval) instead of the default (a lease
    /// duration x 0.45)
    #[arg(long, value_name = "SECS", value_parser = positive_seconds)]
    renew_interval: Option<Duration>,
    /// One line per schedule
    #[arg(long)]
    verbose: bool,
    /// Print every processing start and stop, freeze, thaw and event to stderr (for a replay)
    #[arg(long)]
    trace: bool,
}

/// `--policy`: which policies run, side by side.
#[derive(Clone, Copy, ValueEnum)]
enum Policies {
    /// The library's defaults: the session protocol (`sessions` says the same)
    #[value(alias = "sessions")]
    Ours,
    /// The KCL 2.x baseline: a model of KCL's own lease coordination (renewals, taker,
    /// steals), not the library's worker
    Kcl,
    /// Ours with balance by load (`LoadBalance`): the applications report their leases'
    /// loads, the workers their capacities as weights
    Load,
    /// Balance by count: the library's default (as `ours`)
    Count,
    /// The KCL 3.x-style baseline (`Kcl3Balance`), run leaderlessly, fed the same figures
    Kcl3,
    /// Load, count and kcl3, side by side
    Loads,
    /// Ours and kcl
    Both,
}

impl Policies {
    fn policies(self) -> Vec<Policy> {
        match self {
            Policies::Ours => vec![Policy::Ours],
            Policies::Kcl => vec![Policy::Kcl],
            Policies::Load => vec![Policy::Load],
            Policies::Count => vec![Policy::Ours],
            Policies::Kcl3 => vec![Policy::Kcl3],
            Policies::Loads => vec![Policy::Load, Policy::Ours, Policy::Kcl3],
            Policies::Both => vec![Policy::Ours, Policy::Kcl],
        }
    }
}

/// The scenarios' names, and `all`.
fn scenario_names() -> PossibleValuesParser {
    PossibleValuesParser::new(NAMES.iter().copied().chain(["all"]))
}

fn at_least_1(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("at least 1 expected".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("a whole number expected".into()),
    }
}

/// Appends the run's load trace to `path` (with a header when the file is new).
fn write_trace(path: &std::path::Path, report: &sim::report::Report) -> std::io::Result<()> {
    use std::io::Write;
    let new = !path.exists();
    let mut file = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?,
    );
    if new {
        writeln!(file, "scenario,policy,seed,t_s,worker,share")?;
    }
    for (at, worker, share) in &report.load.trace {
        writeln!(
            file,
            "{},{},{},{at:.0},{worker},{share:.4}",
            report.scenario, report.policy, report.seed
        )?;
    }
    file.flush()
}

/// `--noise`: a fraction from 0 to 1.
fn noise(value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|n| (0.0..1.0).contains(n))
        .ok_or_else(|| format!("a fraction from 0 up to (not including) 1 expected, not {value:?}"))
}

/// A finite number, at least 0.
fn number(value: &str, what: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{what} expected"))
}

fn seconds(value: &str) -> Result<Duration, String> {
    number(value, "seconds").map(Duration::from_secs_f64)
}

fn probability(value: &str) -> Result<f64, String> {
    let p = number(value, "a probability between 0 and 1")?;
    (p <= 1.0)
        .then_some(p)
        .ok_or_else(|| "a probability is at most 1".into())
}

/// `--capacities`, as one value (clap would take a `Vec` for a list of values).
#[derive(Clone)]
struct Capacities(Vec<f64>);

fn capacities(value: &str) -> Result<Capacities, String> {
    load::parse_capacities(value).map(Capacities)
}

/// `--headroom`: at least 1 (a worker at its fair share is never overloaded).
fn headroom(value: &str) -> Result<f64, String> {
    let headroom = number(value, "a factor of at least 1")?;
    if headroom < 1.0 {
        return Err("at least 1 expected".into());
    }
    Ok(headroom)
}

fn checkpoint_every(value: &str) -> Result<Duration, String> {
    let every = number(value, "seconds")?;
    if every < 0.1 {
        return Err("at least 0.1 s".into());
    }
    Ok(Duration::from_secs_f64(every))
}

fn progress(value: &str) -> Result<Duration, String> {
    let every = number(value, "seconds")?;
    if every < 1.0 {
        return Err("at least 1 s".into());
    }
    Ok(Duration::from_secs_f64(every))
}

/// A positive number of seconds.
fn positive_seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "seconds expected".into())
}

/// `--kcl-lease-duration`: a lease the KCL model can run with, and its intervals.
fn kcl_lease_duration(value: &str) -> Result<sim::kcl::Timing, String> {
    sim::kcl::Timing::of(positive_seconds(value)?)
}

/// `--lease-duration`, checked as the library checks it: `WorkerConfig::validate`'s message
/// when it refuses the value.
fn check_lease_duration(lease: Duration) -> Result<(), String> {
    shardlease::WorkerConfig::default()
        .lease_duration(lease)
        .validate()
        .map_err(|err| err.to_string())
}

/// `--max-skew`: a fraction, or a percentage.
fn max_skew(value: &str) -> Result<f64, String> {
    let (number, scale) = match value.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (value, 1.0),
    };
    number
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * scale)
        .filter(|v| (0.0..0.5).contains(v))
        .ok_or_else(|| "a fraction below 0.5, or a percentage expected".into())
}

/// `MEDIAN_MS,P99_MS` as a latency distribution.
fn latency(value: &str) -> Result<Latency, String> {
    let expected = || "MEDIAN_MS,P99_MS expected".to_string();
    let parts: Vec<f64> = value
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| expected())?;
    let [median, p99] = parts[..] else {
        return Err(expected());
    };
    if !(0.0..=60_000.0).contains(&median) || p99 < median || p99 > 60_000.0 {
        return Err("0 <= median <= p99 <= 60000 ms expected".into());
    }
    Ok(Latency {
        median: Duration::from_secs_f64(median / 1000.0),
        p99: Duration::from_secs_f64(p99 / 1000.0),
    })
}

impl Cli {
    /// Parses the command line, or exits with clap's message (status 2) or help (status 0).
    /// The options of a run and those of the fault campaign (`--campaign N` or `--schedule
    /// SEED`) do not mix.
    fn parse_checked() -> Cli {
        let mut command = Cli::command();
        let matches = command.get_matches_mut();
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let (other, mistake) = if given("campaign") || given("schedule") || given("script") {
            (RUN, "an option of a run, not of the fault campaign")
        } else {
            (
                CAMPAIGN,
                "an option of the fault campaign (--campaign N or --schedule SEED)",
            )
        };
        let stray = command
            .get_arguments()
            .find(|arg| arg.get_help_heading() == Some(other) && given(arg.get_id().as_str()));
        if let Some(arg) = stray {
            let flag = arg.get_long().unwrap_or_default();
            let message = format!("--{flag} is {mistake}");
            command.error(ErrorKind::ArgumentConflict, message).exit();
        }
        Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
    }
}

impl CampaignArgs {
    /// The campaign's options, `None` unless `--campaign` or `--schedule` asks for one.
    fn options(&self, seed: u64) -> Option<sim::campaign::Options> {
        if self.campaign.is_none() && self.schedule.is_none() && self.script.is_none() {
            return None;
        }
        let mut options = sim::campaign::Options {
            seed,
            ..Default::default()
        };
        if let Some(schedules) = self.campaign {
            options.schedules = schedules;
        }
        if let Some(seed) = self.schedule {
            options.only = Some(seed);
            options.verbose = true;
        }
        if let Some(name) = &self.script {
            options.script = Some(name.clone());
            options.verbose = true;
        }
        if let Some(faults) = &self.faults {
            options.faults = faults.clone();
        }
        if let Some(max_skew) = self.max_skew {
            options.max_skew = max_skew;
        }
        if let Some(day_every) = self.day_every {
            options.day_every = day_every;
        }
        options.knobs.attempt_timeout = self.attempt_timeout.or(options.knobs.attempt_timeout);
        options.knobs.renew_interval = self.renew_interval.or(options.knobs.renew_interval);
        options.verbose |= self.verbose;
        Some(options)
    }
}

/// Prints a line; a closed pipe (`| head`) is not an error worth a panic.
fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{text}");
}

/// Runs the fault campaign (`--campaign N` or `--schedule SEED`).
fn campaign(options: sim::campaign::Options) -> ExitCode {
    let summary = sim::campaign::campaign(&options, &mut |line| say(line));
    if summary.violations > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Stamps log lines with simulated time: seconds since the first line, on the paused runtime's
/// clock (the same time `--trace` prints).
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(tokio::time::Instant::now);
        write!(w, "{:10.3}", start.elapsed().as_secs_f64())
    }
}

fn main() -> ExitCode {
    // The library's own log lines, when asked for (`RUST_LOG=shardlease=debug`): with
    // `--schedule` and `--trace`, they show why a worker did what the trace shows.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_timer(SimTime)
            .with_writer(std::io::stderr)
            .init();
    }
    let cli = Cli::parse_checked();
    if let Some(options) = cli.campaign.options(cli.seed) {
        if cli.campaign.trace {
            sim::campaign::ledger::TRACE.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        return campaign(options);
    }
    let (args, seed) = (cli.run, cli.seed);
    if let Some(lease) = args.lease_duration {
        if let Err(message) = check_lease_duration(lease) {
            eprintln!(
                "simulate: --lease-duration {}: {message}",
                lease.as_secs_f64()
            );
            return ExitCode::from(2);
        }
    }
    let scenarios: Vec<String> = if args.scenario == "all" {
        NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        vec![args.scenario.clone()]
    };
    let faults = FaultRates {
        throttle: args.throttle,
        transient: args.transient,
        ambiguous: args.ambiguous,
    };
    let k = args.k.unwrap_or((args.workers / 10).max(1));
    let mut failed = false;
    for name in &scenarios {
        let model = args.load.unwrap_or_else(|| {
            sim::scenario::default_load(name)
                .parse()
                .expect("a valid default")
        });
        if args.unreported > args.leases {
            eprintln!(
                "simulate: --unreported {} is more than the {} leases",
                args.unreported, args.leases
            );
            return ExitCode::from(2);
        }
        if let Err(message) = model.loads(args.leases, seed) {
            eprintln!("simulate: --load {message}");
            return ExitCode::from(2);
        }
        let loads = Loads {
            model,
            capacities: args
                .capacities
                .clone()
                .map(|c| c.0)
                .unwrap_or_else(|| sim::scenario::default_capacities(name)),
            headroom: args.headroom,
            hot_after: args
                .hot_after
                .or_else(|| sim::scenario::default_hot_after(name)),
            noise: args.noise,
            unreported: args.unreported,
            wave: args.wave.or_else(|| sim::scenario::default_wave(name)),
        };
        let scenario = match scenario(name, args.workers, args.leases, k, args.outage) {
            Ok(s) => s,
            Err(message) => {
                eprintln!("simulate: {message}");
                return ExitCode::from(2);
            }
        };
        if args.dump_start.is_some() && scenario.steps != [sim::scenario::Step::Settle] {
            eprintln!(
                "simulate: --dump-start needs a scenario that starts from the table balanced by \
                 count (skew, heterogeneous, drift, hot-shard), not {name}"
            );
            return ExitCode::from(2);
        }
        let mut reports = Vec::new();
        for policy in &args.policy.policies() {
            let settings = Settings {
                scenario: scenario.clone(),
                workers: args.workers,
                leases: args.leases,
                policy: *policy,
                seed,
                latency: Latencies {
                    read: args.read_latency.unwrap_or(args.latency),
                    write: args.write_latency.unwrap_or(args.latency),
                    scan: args.scan_latency.unwrap_or(args.latency),
                },
                faults,
                rest: args.rest,
                step_limit: args.step_limit,
                checkpoint_every: args.checkpoint_every,
                progress: args.progress,
                start_gap: args.start_gap,
                load: loads.clone(),
                load_trace: args.load_trace.is_some(),
                dump_start: args.dump_start.clone(),
                lease_duration: args.lease_duration,
                kcl: args.kcl_lease_duration.unwrap_or_default(),
                latency_model: args.latency_model,
                crash_within: args.crash_within,
            };
            let report = sim::simulate(settings);
            if let Some(path) = &args.load_trace {
                if let Err(err) = write_trace(path, &report) {
                    eprintln!("simulate: --load-trace {}: {err}", path.display());
                    return ExitCode::from(1);
                }
            }
            failed |= report.double_holding > 0;
            if args.json {
                say(&report.json());
            }
            reports.push(report);
        }
        if !args.json {
            say(&table(&reports));
        }
    }
    if failed {
        eprintln!("simulate: a lease was processed by two workers at once");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_duration_the_library_refuses_is_refused_with_its_message() {
        let err = check_lease_duration(Duration::from_millis(50)).unwrap_err();
        assert!(err.contains("lease_duration 50ms is too short"), "{err}");
        check_lease_duration(Duration::from_millis(1500)).unwrap();
        assert!(kcl_lease_duration("0.05")
            .unwrap_err()
            .contains("at least 100 ms"));
        assert!(positive_seconds("0").is_err());
    }
}
