//! One worker process on a DynamoDB lease table (or a local emulator), for fleets of real
//! processes: `scripts/dynalite_failover.sh` starts several and kills one with SIGKILL.
//!
//! ```sh
//! cargo run --example lease_worker -- --id a --endpoint http://127.0.0.1:4567 --shards 32 \
//!     --events-log /tmp/a.jsonl
//! ```
//!
//! The application "processes" a lease until it is told to stop, then checkpoints once and
//! finishes; the checkpoint's result is logged (and written to the events log). Ctrl-C
//! (SIGINT) or SIGTERM leaves gracefully: every lease is checkpointed and released, and the
//! process exits 0. The library's log goes to stderr (`RUST_LOG`, default `info`); an error
//! that stops the process is printed as one line.
//!
//! Options: `--id ID` (default: host and pid), `--table NAME` (default `shardlease-demo`),
//! `--endpoint URL` (default: the AWS chain, or `AWS_ENDPOINT_URL`), `--shards N` (create
//! `shard-0000`.. if missing), `--lease-secs S` (default 10), `--protocol leases|sessions`
//! (default `sessions`, the library's; every process of one table must use the same), `--events-log PATH` (append
//! `{"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}` per event: acquired, stopped,
//! handed_off, released, lost, and checkpointed or checkpoint_failed with an `error`).

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Error;
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker};
use shardlease::{LeaseKey, Protocol, WorkerConfig, WorkerId};

struct Args {
    id: String,
    table: String,
    endpoint: Option<String>,
    shards: usize,
    lease_secs: f64,
    events_log: Option<String>,
    protocol: Protocol,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        id: format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into()),
            std::process::id()
        ),
        table: "shardlease-demo".into(),
        endpoint: None,
        shards: 0,
        lease_secs: 10.0,
        events_log: None,
        protocol: Protocol::Sessions,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => args.id = value,
            "--table" => args.table = value,
            "--endpoint" => args.endpoint = Some(value),
            "--shards" => {
                args.shards = value
                    .parse()
                    .map_err(|_| format!("--shards {value:?}: a whole number expected"))?
            }
            "--lease-secs" => {
                args.lease_secs = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.1)
                    .ok_or_else(|| format!("--lease-secs {value:?}: at least 0.1 expected"))?
            }
            "--events-log" => args.events_log = Some(value),
            "--protocol" => {
                args.protocol = match value.as_str() {
                    "leases" => Protocol::Leases,
                    "sessions" => Protocol::Sessions,
                    _ => return Err(format!("--protocol {value:?}: leases or sessions")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown option {flag:?}\nusage: lease_worker [--id ID] [--table NAME] \
                     [--endpoint URL] [--shards N] [--lease-secs S] [--protocol P] \
                     [--events-log PATH]"
                ))
            }
        }
    }
    Ok(args)
}

/// Appends one JSON line per event, with a wall-clock timestamp other processes can compare.
#[derive(Clone)]
struct EventLog {
    worker: String,
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl EventLog {
    fn write(&self, lease: &LeaseKey, event: &str) {
        self.write_with(lease, event, None);
    }

    /// Writes the event, with an `error` field when given.
    fn write_with(&self, lease: &LeaseKey, event: &str, error: Option<&str>) {
        match error {
            Some(error) => println!("{} {event} {lease}: {error}", self.worker),
            None => println!("{} {event} {lease}", self.worker),
        }
        let Some(file) = &self.file else {
            return;
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let error = error.map_or(String::new(), |e| {
            format!(",\"error\":{}", common::json_string(e))
        });
        let line = format!(
            "{{\"ts_unix_nanos\":{nanos},\"worker\":{},\"lease\":{},\"event\":{}{error}}}\n",
            common::json_string(&self.worker),
            common::json_string(lease.as_str()),
            common::json_string(event)
        );
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %err, "cannot write the events log");
        }
    }
}

/// The application's part of a lease: wait until it must stop; unless it was lost,
/// checkpoint and log the result; let the lease go.
async fn process(mut grant: LeaseGrant, log: EventLog) {
    let reason = grant.stopped().await;
    if reason != StopReason::Lost {
        match grant.checkpoint("done").await {
            Ok(()) => {
                tracing::info!(lease_key = %grant.key(), "checkpointed");
                log.write(grant.key(), "checkpointed");
            }
            Err(err) => {
                let error = common::chain(&err);
                tracing::warn!(lease_key = %grant.key(), %error, "checkpoint failed");
                log.write_with(grant.key(), "checkpoint_failed", Some(&error));
            }
        }
    }
    log.write(grant.key(), "stopped");
    grant.finish();
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    common::init_tracing("info");
    common::exit(run(args).await)
}

async fn run(args: Args) -> Result<(), Error> {
    let aws = aws_config::load_from_env().await;
    let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
    if let Some(endpoint) = &args.endpoint {
        dynamo = dynamo.endpoint_url(endpoint);
    }
    let client = aws_sdk_dynamodb::Client::from_conf(dynamo.build());
    let store = DynamoStore::connect(client, DynamoConfig::new(&args.table)).await?;
    let shards = (0..args.shards)
        .map(|i| LeaseKey::new(format!("shard-{i:04}")))
        .collect::<Result<Vec<_>, _>>()?;
    let config = WorkerConfig::with_lease_duration(Duration::from_secs_f64(args.lease_secs))
        .protocol(args.protocol);
    let mut worker = Worker::builder(Arc::new(store), WorkerId::new(&args.id)?)
        .config(config)
        .shards(shards)
        .start()
        .await?;
    let file = match &args.events_log {
        Some(path) => Some(Arc::new(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))),
        None => None,
    };
    let log = EventLog {
        worker: args.id.clone(),
        file,
    };
    let mut events = worker
        .take_events()
        .ok_or("the event stream is taken once")?;
    let app_log = log.clone();
    let app = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(grant) => {
                    app_log.write(grant.key(), "acquired");
                    tokio::spawn(process(grant, app_log.clone()));
                }
                LeaseEvent::HandedOff { key, .. } => app_log.write(&key, "handed_off"),
                LeaseEvent::Released { key } => app_log.write(&key, "released"),
                LeaseEvent::Lost { key } => app_log.write(&key, "lost"),
                _ => {}
            }
        }
    });
    let signal = common::shutdown_signal().await?;
    tracing::info!(worker = %args.id, signal, "leaving gracefully");
    worker.shutdown().await;
    let _ = app.await;
    Ok(())
}
