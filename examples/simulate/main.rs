//! The fleet simulator: runs the library's real workers on paused time over an in-memory
//! table with simulated latency and faults, and reports convergence, movement, failover,
//! safety and cost, for shardlease and for the KCL 2.x baseline side by side.
//!
//! ```sh
//! cargo run --release --example simulate -- --scenario join --workers 100 --leases 10000
//! cargo run --release --example simulate -- --scenario crash --workers 50 --leases 5000 --json
//! cargo run --release --example simulate -- --campaign 200 --seed 1
//! cargo run --release --example simulate -- --help
//! ```

mod sim;

use std::process::ExitCode;
use std::time::Duration;

use sim::net::{FaultRates, Latencies, Latency};
use sim::report::table;
use sim::scenario::{scenario, NAMES};
use sim::{Policy, Settings};

const HELP: &str = "\
simulate: a fleet of shardlease workers on simulated time, against the KCL 2.x baseline

USAGE: cargo run --release --example simulate -- [OPTIONS]

  --scenario NAME      what happens to the fleet (default: join); one of
                       cold-start, join, crash, leave, rolling-restart, autoscale,
                       shards, pause, cut-off, crash-join (k crash, then k
                       start); or `all` for every one in turn
  --workers N          workers (autoscale: the peak, from 4) (default: 10)
  --leases L           leases (default: 1000)
  --k N                workers a join, crash, leave, pause, cut-off or crash-join
                       concerns
                       (default: a tenth of the workers, at least 1)
  --policy P           ours (the library's defaults: the session protocol; `sessions`
                       says the same), leases (ours on the lease protocol), kcl, both
                       (ours and kcl) or all (ours, leases and kcl) (default: both)
  --seed S             seed; the same seed replays the same run (default: 1)
  --latency MED,P99    store latency in ms, log-normal, of every request (default: 5,25)
  --read-latency MED,P99, --write-latency MED,P99, --scan-latency MED,P99
                       the latency of gets, of conditional writes, of one scan page
                       (default: --latency)
  --throttle P         probability a request is throttled (default: 0)
  --transient P        probability a request fails before it is applied (default: 0)
  --ambiguous P        probability a write's answer is lost after it is applied (default: 0)
  --rest SECS          simulated rest after the last step, for moves and cost at rest
                       (default: 3600)
  --step-limit SECS    how long a step may take to balance (default: 3600)
  --checkpoint-every SECS  the applications checkpoint this often (default: only on stop)
  --outage SECS        how long a pause or a cut-off lasts (default: 20 and 30)
  --start-gap SECS     between the starts of workers that join together (default: 0,
                       one right after the other)
  --progress SECS      print simulated and wall time to stderr every SECS simulated
  --json               one JSON object per run, one per line, instead of the table
";

struct Args {
    scenarios: Vec<String>,
    workers: usize,
    leases: usize,
    k: Option<usize>,
    policies: Vec<Policy>,
    seed: u64,
    latency: Latency,
    read_latency: Option<Latency>,
    write_latency: Option<Latency>,
    scan_latency: Option<Latency>,
    faults: FaultRates,
    rest: Duration,
    step_limit: Duration,
    checkpoint_every: Option<Duration>,
    outage: Option<Duration>,
    progress: Option<Duration>,
    start_gap: Duration,
    json: bool,
}

/// `MEDIAN_MS,P99_MS` as a latency distribution.
fn latency(flag: &str, value: &str) -> Result<Latency, String> {
    let expected = || format!("{flag} {value:?}: MEDIAN_MS,P99_MS expected");
    let parts: Vec<f64> = value
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| expected())?;
    let [median, p99] = parts[..] else {
        return Err(expected());
    };
    if !(0.0..=60_000.0).contains(&median) || p99 < median || p99 > 60_000.0 {
        return Err(format!(
            "{flag} {value:?}: 0 <= median <= p99 <= 60000 ms expected"
        ));
    }
    Ok(Latency {
        median: Duration::from_secs_f64(median / 1000.0),
        p99: Duration::from_secs_f64(p99 / 1000.0),
    })
}

fn parse() -> Result<Option<Args>, String> {
    let mut args = Args {
        scenarios: vec!["join".into()],
        workers: 10,
        leases: 1000,
        k: None,
        policies: vec![Policy::Ours, Policy::Kcl],
        seed: 1,
        latency: Latency {
            median: Duration::from_millis(5),
            p99: Duration::from_millis(25),
        },
        read_latency: None,
        write_latency: None,
        scan_latency: None,
        faults: FaultRates::default(),
        rest: Duration::from_secs(3600),
        step_limit: Duration::from_secs(3600),
        checkpoint_every: None,
        outage: None,
        progress: None,
        start_gap: Duration::ZERO,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        if flag == "--json" {
            args.json = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value (see --help)"))?;
        let number = |what: &str| -> Result<f64, String> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{flag} {value:?}: {what} expected"))
        };
        let count = || -> Result<usize, String> {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag} {value:?}: a whole number expected"))
        };
        let probability = || -> Result<f64, String> {
            number("a probability between 0 and 1").and_then(|p| {
                (p <= 1.0)
                    .then_some(p)
                    .ok_or_else(|| format!("{flag} {value}: a probability is at most 1"))
            })
        };
        match flag.as_str() {
            "--scenario" => {
                args.scenarios = if value == "all" {
                    NAMES.iter().map(|s| s.to_string()).collect()
                } else {
                    vec![value.clone()]
                }
            }
            "--workers" => args.workers = count()?,
            "--leases" => args.leases = count()?,
            "--k" => args.k = Some(count()?),
            "--policy" => {
                args.policies = match value.as_str() {
                    "ours" | "sessions" => vec![Policy::Ours],
                    "leases" => vec![Policy::Leases],
                    "kcl" => vec![Policy::Kcl],
                    "both" => vec![Policy::Ours, Policy::Kcl],
                    "all" => vec![Policy::Ours, Policy::Leases, Policy::Kcl],
                    _ => {
                        return Err(format!(
                            "--policy {value:?}: ours, sessions, leases, kcl, both or all"
                        ))
                    }
                }
            }
            "--seed" => {
                args.seed = value
                    .parse()
                    .map_err(|_| format!("--seed {value:?}: a whole number expected"))?
            }
            "--latency" => args.latency = latency(&flag, &value)?,
            "--read-latency" => args.read_latency = Some(latency(&flag, &value)?),
            "--write-latency" => args.write_latency = Some(latency(&flag, &value)?),
            "--scan-latency" => args.scan_latency = Some(latency(&flag, &value)?),
            "--throttle" => args.faults.throttle = probability()?,
            "--transient" => args.faults.transient = probability()?,
            "--ambiguous" => args.faults.ambiguous = probability()?,
            "--rest" => args.rest = Duration::from_secs_f64(number("seconds")?),
            "--step-limit" => args.step_limit = Duration::from_secs_f64(number("seconds")?),
            "--checkpoint-every" => {
                let every = number("seconds")?;
                if every < 0.1 {
                    return Err(format!("--checkpoint-every {value}: at least 0.1 s"));
                }
                args.checkpoint_every = Some(Duration::from_secs_f64(every));
            }
            "--start-gap" => args.start_gap = Duration::from_secs_f64(number("seconds")?),
            "--outage" => args.outage = Some(Duration::from_secs_f64(number("seconds")?)),
            "--progress" => {
                let every = number("seconds")?;
                if every < 1.0 {
                    return Err(format!("--progress {value}: at least 1 s"));
                }
                args.progress = Some(Duration::from_secs_f64(every));
            }
            _ => return Err(format!("unknown option {flag:?} (see --help)")),
        }
    }
    if args.workers == 0 || args.leases == 0 {
        return Err("--workers and --leases must be at least 1".into());
    }
    Ok(Some(args))
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
    let all: Vec<String> = std::env::args().skip(1).collect();
    let help = all.iter().any(|a| a == "--help" || a == "-h");
    match sim::campaign::parse(&all) {
        Some(Ok(options)) if !help => return campaign(options),
        Some(Err(message)) if !help => {
            eprintln!("simulate: {message}");
            return ExitCode::from(2);
        }
        _ => {}
    }
    let args = match parse() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}\n{}", sim::campaign::HELP);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("simulate: {message}");
            return ExitCode::from(2);
        }
    };
    let k = args.k.unwrap_or((args.workers / 10).max(1));
    let mut failed = false;
    for name in &args.scenarios {
        let scenario = match scenario(name, args.workers, args.leases, k, args.outage) {
            Ok(s) => s,
            Err(message) => {
                eprintln!("simulate: {message}");
                return ExitCode::from(2);
            }
        };
        let mut reports = Vec::new();
        for policy in &args.policies {
            let settings = Settings {
                scenario: scenario.clone(),
                workers: args.workers,
                leases: args.leases,
                policy: *policy,
                seed: args.seed,
                latency: Latencies {
                    read: args.read_latency.unwrap_or(args.latency),
                    write: args.write_latency.unwrap_or(args.latency),
                    scan: args.scan_latency.unwrap_or(args.latency),
                },
                faults: args.faults,
                rest: args.rest,
                step_limit: args.step_limit,
                checkpoint_every: args.checkpoint_every,
                progress: args.progress,
                start_gap: args.start_gap,
            };
            let report = sim::simulate(settings);
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
