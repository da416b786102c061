//! One worker process on a DynamoDB lease table (or a local emulator), or on a Redis server,
//! for fleets of real processes: `scripts/dynalite_failover.sh` starts several and kills one
//! with SIGKILL; `scripts/chaos.sh` runs them under faults on either backend.
//!
//! ```sh
//! cargo run --example lease_worker -- --id a --endpoint http://127.0.0.1:4567 --shards 32 \
//!     --events-log /tmp/a.jsonl
//! cargo run --features redis --example lease_worker -- --id a --redis redis://127.0.0.1:6379 \
//!     --shards 32
//! ```
//!
//! The application "processes" a lease until it is told to stop, then checkpoints once and
//! finishes; the checkpoint's result is logged (and written to the events log). With
//! `--checkpoint-secs S` it also checkpoints every S seconds while it holds the lease, and its
//! checkpoints are a counter that only grows: it resumes from the number the lease was
//! acquired with (0 without one, or with a checkpoint that is not a number) and adds 1 per
//! attempt: a worker that resumes a lease from a checkpoint older than one already
//! acknowledged shows it as a smaller number (what `scripts/chaos.py` audits). Ctrl-C
//! (SIGINT) or SIGTERM leaves gracefully: every lease is checkpointed and released, and the
//! process exits 0; so it does when an operator drains it (`shardlease drain ID`). The library's log goes to stderr (`RUST_LOG`, default `info`); an error
//! that stops the process is printed as one line.
//!
//! Options: `--id ID` (default: host and pid), `--table NAME` (default `shardlease-demo`),
//! `--endpoint URL` (default: the AWS chain, or `AWS_ENDPOINT_URL`), `--redis URL` (the lease
//! table on a Redis server instead of DynamoDB; needs the `redis` feature), `--shards N` (create
//! `shard-0000`.. if missing), `--lease-secs S` (default 10), `--balance count|load|kcl`
//! (default `count`; `kcl` is KCL 2.x's taker policy, `shardlease::balance::KclBalance`, which
//! steals one lease per round; every process of one table must use the same),
//! `--weight W` (this worker's capacity against the others', default 1), `--lease-load
//! KEY=FIGURE` (repeatable: the load this process reports every second for a lease it holds;
//! 1 for the others), `--checkpoint-secs S` (checkpoint the counter every S seconds; default 0:
//! only "done" when told to stop), `--events-log PATH` (append
//! `{"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}` per event: acquired, with the
//! grant's `tenure` and the `checkpoint` it resumes from (`null` for none); stopped,
//! handed_off, released, lost; and checkpointed with its `checkpoint` and `tenure`, or
//! checkpoint_failed with those and an `error`).

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::time::{interval, interval_at, Instant, Interval, MissedTickBehavior};

use clap::Parser;
use common::Error;
use shardlease::balance::KclBalance;
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker};
use shardlease::{Balance, LeaseKey, WorkerConfig, WorkerId};

/// One lease worker process on a DynamoDB lease table (or a local emulator), or on Redis
/// (`--redis`). Ctrl-C or SIGTERM
/// leaves gracefully: every lease is checkpointed and released, and the process exits 0.
#[derive(Parser)]
#[command(
    name = "lease_worker",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Args {
    /// The worker's id [default: $HOSTNAME-<pid>]
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// The lease table, created if missing
    #[arg(long, value_name = "NAME", default_value = "shardlease-demo")]
    table: String,
    /// The DynamoDB endpoint [default: the AWS chain, or AWS_ENDPOINT_URL]
    #[arg(long, value_name = "URL", conflicts_with = "redis")]
    endpoint: Option<String>,
    /// Keep the lease table on this Redis server instead of DynamoDB:
    /// redis://[USER:PASSWORD@]HOST[:PORT][/DB] (needs the redis feature)
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Create the leases shard-0000.. (N of them) if missing
    #[arg(long, value_name = "N", default_value_t = 0)]
    shards: usize,
    /// The lease duration in seconds, at least 0.1
    #[arg(long, value_name = "S", default_value = "10", value_parser = lease_secs)]
    lease_secs: f64,
    /// Balance the fleet by lease count, by the load figures the workers report, or by KCL
    /// 2.x's taker policy (steals one lease per round from the most loaded worker); every
    /// process of one table must use the same
    #[arg(long, value_name = "B", value_enum, default_value = "count")]
    balance: BalanceArg,
    /// This worker's capacity against the others' (balance by load gives it a share of the
    /// load in proportion), above 0
    #[arg(long, value_name = "W", default_value = "1", value_parser = weight)]
    weight: f64,
    /// The load this process reports for lease KEY every second while it holds it (1 for the
    /// leases not named); repeat for more leases
    #[arg(long, value_name = "KEY=FIGURE", value_parser = lease_load)]
    lease_load: Vec<(LeaseKey, f64)>,
    /// Checkpoint every S seconds while a lease is held, and when told to stop, a counter
    /// that resumes from the lease's checkpoint and grows by 1 per attempt; 0: only "done"
    /// when told to stop
    #[arg(long, value_name = "S", default_value = "0", value_parser = checkpoint_secs)]
    checkpoint_secs: f64,
    /// Append one JSON line per event: {"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}
    /// (acquired with "tenure" and "checkpoint", stopped, handed_off, released, lost, and
    /// checkpointed with "checkpoint" and "tenure", or checkpoint_failed with those and an
    /// "error")
    #[arg(long, value_name = "PATH")]
    events_log: Option<String>,
}

/// `--balance`: what the fleet balances, and with which policy.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BalanceArg {
    Count,
    Load,
    /// KCL 2.x's taker policy (`shardlease::balance::KclBalance`): one steal per round
    Kcl,
}

impl From<BalanceArg> for Balance {
    fn from(balance: BalanceArg) -> Self {
        match balance {
            BalanceArg::Count | BalanceArg::Kcl => Balance::Count,
            BalanceArg::Load => Balance::Load,
        }
    }
}

fn weight(value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|w| w.is_finite() && *w > 0.0)
        .ok_or_else(|| "a number above 0 expected".into())
}

fn lease_load(value: &str) -> Result<(LeaseKey, f64), String> {
    let (key, figure) = value
        .split_once('=')
        .ok_or_else(|| format!("KEY=FIGURE expected, got {value:?}"))?;
    let key = LeaseKey::new(key).map_err(|e| e.to_string())?;
    let figure = figure
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| format!("a load figure at least 0 expected, got {figure:?}"))?;
    Ok((key, figure))
}

fn checkpoint_secs(value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (*s == 0.0 || *s >= 0.01))
        .ok_or_else(|| "0 or at least 0.01 expected".into())
}

fn lease_secs(value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.1)
        .ok_or_else(|| "at least 0.1 expected".into())
}

/// Appends one JSON line per event, with a wall-clock timestamp other processes can compare.
#[derive(Clone)]
struct EventLog {
    worker: String,
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl EventLog {
    fn write(&self, lease: &LeaseKey, event: &str) {
        self.write_with(lease, event, &[]);
    }

    /// Writes the event with more fields (`tenure`, `checkpoint`, `error`), printed after it.
    fn write_with(&self, lease: &LeaseKey, event: &str, fields: &[(&str, Value)]) {
        let mut text = format!("{} {event} {lease}", self.worker);
        for (name, value) in fields {
            text.push_str(&format!(" {name}={value}"));
        }
        println!("{text}");
        let Some(file) = &self.file else {
            return;
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut line = json!({
            "ts_unix_nanos": nanos,
            "worker": self.worker,
            "lease": lease.as_str(),
            "event": event,
        });
        for (name, value) in fields {
            line[*name] = value.clone();
        }
        let line = format!("{line}\n");
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %err, "cannot write the events log");
        }
    }
}

/// `--checkpoint-secs`: the counter a lease's checkpoints carry, and when to write the next.
/// It grows by 1 per attempt, stored or not, so one grant never writes a number twice.
struct Counter {
    last: u64,
    every: Interval,
}

impl Counter {
    /// Resumes from the checkpoint the lease was acquired with: 0 without one, or when it is
    /// not a number (a table a run without `--checkpoint-secs` checkpointed "done" in).
    fn resume(checkpoint: Option<&str>, period: Duration) -> Self {
        // The first checkpoint a period after the lease was acquired.
        let mut every = interval_at(Instant::now() + period, period);
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            last: checkpoint.and_then(|c| c.parse().ok()).unwrap_or(0),
            every,
        }
    }

    fn next_value(&mut self) -> String {
        self.last += 1;
        self.last.to_string()
    }
}

/// The next value to checkpoint, when its time has come; never without a counter.
async fn counter_due(counter: &mut Option<Counter>) -> String {
    match counter {
        Some(counter) => {
            counter.every.tick().await;
            counter.next_value()
        }
        None => std::future::pending().await,
    }
}

/// Stores `value` as the lease's checkpoint and logs the result with the grant's tenure.
async fn checkpoint(grant: &LeaseGrant, log: &EventLog, value: &str) {
    let mut fields = vec![
        ("checkpoint", json!(value)),
        ("tenure", json!(grant.tenure())),
    ];
    match grant.checkpoint(value).await {
        Ok(()) => {
            tracing::info!(lease_key = %grant.key(), checkpoint = value, "checkpointed");
            log.write_with(grant.key(), "checkpointed", &fields);
        }
        Err(err) => {
            let error = common::chain(&err);
            tracing::warn!(lease_key = %grant.key(), checkpoint = value, %error, "checkpoint failed");
            fields.push(("error", json!(error)));
            log.write_with(grant.key(), "checkpoint_failed", &fields);
        }
    }
}

/// The application's part of a lease: report its load every second (and checkpoint the
/// counter, with `--checkpoint-secs`) until it must stop; unless it was lost, checkpoint once
/// more (the counter, or "done") and log the result; let the lease go.
async fn process(mut grant: LeaseGrant, log: EventLog, load: f64, period: Option<Duration>) {
    let mut counter = period.map(|period| Counter::resume(grant.initial_checkpoint(), period));
    // The load figure, every second until the lease is to stop (it is checked when parsed).
    let mut every = interval(Duration::from_secs(1));
    let reason = loop {
        tokio::select! {
            reason = grant.stopped() => break reason,
            _ = every.tick() => {
                let _ = grant.report_load(load);
            }
            value = counter_due(&mut counter) => checkpoint(&grant, &log, &value).await,
        }
    };
    if reason != StopReason::Lost {
        let value = counter
            .as_mut()
            .map_or_else(|| "done".to_owned(), Counter::next_value);
        checkpoint(&grant, &log, &value).await;
    }
    log.write(grant.key(), "stopped");
    grant.finish();
}

/// The table on DynamoDB, at `--endpoint` or where the AWS environment says.
async fn dynamo_store(args: &Args) -> Result<Arc<dyn LeaseStore>, Error> {
    let aws = aws_config::load_from_env().await;
    let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
    if let Some(endpoint) = &args.endpoint {
        dynamo = dynamo.endpoint_url(endpoint);
    }
    let client = aws_sdk_dynamodb::Client::from_conf(dynamo.build());
    let store = DynamoStore::connect(client, DynamoConfig::new(&args.table)).await?;
    Ok(Arc::new(store))
}

/// The table on the Redis server at `url`.
#[cfg(feature = "redis")]
async fn redis_store(url: &str, table: &str) -> Result<Arc<dyn LeaseStore>, Error> {
    use shardlease::store::redis::{RedisConfig, RedisStore};
    let store = RedisStore::connect(RedisConfig::new(url, table)).await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "redis"))]
async fn redis_store(_url: &str, _table: &str) -> Result<Arc<dyn LeaseStore>, Error> {
    Err(
        "--redis needs the redis feature: cargo run --features redis --example lease_worker -- ..."
            .into(),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    common::init_tracing("info");
    common::exit(run(args).await)
}

async fn run(args: Args) -> Result<(), Error> {
    let id = args.id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    });
    let store = match &args.redis {
        Some(url) => redis_store(url, &args.table).await?,
        None => dynamo_store(&args).await?,
    };
    let shards = (0..args.shards)
        .map(|i| LeaseKey::new(format!("shard-{i:04}")))
        .collect::<Result<Vec<_>, _>>()?;
    let config = WorkerConfig::default()
        .lease_duration(Duration::from_secs_f64(args.lease_secs))
        .balance(args.balance.into())
        .weight(args.weight);
    let mut builder = Worker::builder(store, WorkerId::new(&id)?)
        .config(config)
        .shards(shards);
    if args.balance == BalanceArg::Kcl {
        builder = builder.policy(KclBalance::default());
    }
    let (worker, mut events) = builder.start().await?;
    let file = match &args.events_log {
        Some(path) => Some(Arc::new(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))),
        None => None,
    };
    let log = EventLog {
        worker: id.clone(),
        file,
    };
    let app_log = log.clone();
    let loads: std::collections::HashMap<LeaseKey, f64> = args.lease_load.into_iter().collect();
    let period =
        (args.checkpoint_secs > 0.0).then(|| Duration::from_secs_f64(args.checkpoint_secs));
    let app = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(grant) => {
                    let resumes_from = grant.initial_checkpoint().map(str::to_owned);
                    let fields = [
                        ("tenure", json!(grant.tenure())),
                        ("checkpoint", json!(resumes_from)),
                    ];
                    app_log.write_with(grant.key(), "acquired", &fields);
                    let load = loads.get(grant.key()).copied().unwrap_or(1.0);
                    tokio::spawn(process(grant, app_log.clone(), load, period));
                }
                LeaseEvent::HandedOff { key, .. } => app_log.write(&key, "handed_off"),
                LeaseEvent::Released { key } => app_log.write(&key, "released"),
                LeaseEvent::Lost { key } => app_log.write(&key, "lost"),
                _ => {}
            }
        }
    });
    // SIGTERM or Ctrl-C, or an operator's `shardlease drain`, which makes the worker leave
    // by itself.
    let signal = tokio::select! {
        signal = common::shutdown_signal() => Some(signal?),
        _ = worker.stopped() => None,
    };
    match signal {
        Some(signal) => {
            tracing::info!(worker = %id, signal, "leaving gracefully");
            worker.shutdown().await;
        }
        None => tracing::info!(worker = %id, "drained: the worker left the fleet"),
    }
    let _ = app.await;
    Ok(())
}
