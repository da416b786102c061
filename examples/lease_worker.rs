//! One worker process on a DynamoDB lease table (or a local emulator), for fleets of real
//! processes: `scripts/dynalite_failover.sh` starts several and kills one with SIGKILL.
//!
//! ```sh
//! cargo run --example lease_worker -- --id a --endpoint http://127.0.0.1:4567 --shards 32 \
//!     --events-log /tmp/a.jsonl
//! ```
//!
//! The application "processes" a lease until it is told to stop, then checkpoints once and
//! finishes. Ctrl-C (SIGINT) or SIGTERM leaves gracefully.
//!
//! Options: `--id ID` (default: host and pid), `--table NAME` (default `shardlease-demo`),
//! `--endpoint URL` (default: the AWS chain, or `AWS_ENDPOINT_URL`), `--shards N` (create
//! `shard-0000`.. if missing), `--lease-secs S` (default 10), `--events-log PATH` (append
//! `{"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}` per event).

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::worker::{LeaseEvent, StopReason, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    id: String,
    table: String,
    endpoint: Option<String>,
    shards: usize,
    lease_secs: f64,
    events_log: Option<String>,
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
            _ => {
                return Err(format!(
                    "unknown option {flag:?}\nusage: lease_worker [--id ID] [--table NAME] \
                     [--endpoint URL] [--shards N] [--lease-secs S] [--events-log PATH]"
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
        println!("{} {event} {lease}", self.worker);
        let Some(file) = &self.file else {
            return;
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let line = format!(
            "{{\"ts_unix_nanos\":{nanos},\"worker\":{:?},\"lease\":{:?},\"event\":{event:?}}}\n",
            self.worker,
            lease.as_str()
        );
        let _ = file.lock().unwrap().write_all(line.as_bytes());
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
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
    let config = WorkerConfig::with_lease_duration(Duration::from_secs_f64(args.lease_secs));
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
    let mut events = worker.take_events().expect("first call");
    let app_log = log.clone();
    let app = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(mut grant) => {
                    let log = app_log.clone();
                    log.write(grant.key(), "acquired");
                    tokio::spawn(async move {
                        let reason = grant.stopped().await;
                        if reason != StopReason::Lost {
                            let _ = grant.checkpoint_at("done").await;
                        }
                        log.write(grant.key(), "stopped");
                        grant.finish();
                    });
                }
                LeaseEvent::HandedOff { key, .. } => app_log.write(&key, "handed_off"),
                LeaseEvent::Released { key } => app_log.write(&key, "released"),
                LeaseEvent::Lost { key } => app_log.write(&key, "lost"),
                _ => {}
            }
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("{}: leaving", args.id);
    worker.shutdown().await;
    let _ = app.await;
    Ok(())
}
