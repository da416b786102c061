//! Loads the worker's and the lease table's configuration from a TOML file, or the worker's
//! from the environment, and runs a worker with it (feature `serde`).
//!
//! ```sh
//! cargo run --example config_file --features serde -- examples/shardlease.toml
//! SHARDLEASE_WORKER_LEASE_DURATION=30s SHARDLEASE_WORKER_HANDOFF_TIMEOUT=1m \
//!     cargo run --example config_file --features serde -- --env
//! ```
//!
//! The worker runs on the in-memory store (so that the example needs no DynamoDB) until Ctrl-C,
//! SIGTERM or five seconds, and leaves gracefully (`graceful_shutdown_on`);
//! `DynamoStore::from_env(file.table)` is what a real application would do with the `[table]`
//! section. A bad value is refused with the field it is in.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::Error;
use serde::Deserialize;
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::store::memory::InMemoryStore;
use shardlease::{LeaseEvent, LeaseKey, Worker, WorkerConfig, WorkerId};

/// The file's layout: one table per configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    worker: Option<WorkerConfig>,
    table: DynamoConfig,
    /// The Kinesis consumer's section (feature `kinesis`), not used here.
    #[serde(default)]
    consumer: Option<toml::Value>,
}

fn load() -> Result<WorkerConfig, Error> {
    let arg = std::env::args().nth(1).ok_or(
        "usage: config_file FILE.toml | config_file --env (reads SHARDLEASE_WORKER_* variables)",
    )?;
    if arg == "--env" {
        return envy::prefixed("SHARDLEASE_WORKER_")
            .from_env::<WorkerConfig>()
            .map_err(|e| format!("the SHARDLEASE_WORKER_* variables: {e}").into());
    }
    let text = std::fs::read_to_string(&arg).map_err(|e| format!("{arg}: {e}"))?;
    let file: File = toml::from_str(&text).map_err(|e| format!("{arg}: {e}"))?;
    println!("table: {:#?}", file.table);
    if file.consumer.is_some() {
        println!("consumer: a [consumer] section (for the Kinesis consumer) was found");
    }
    Ok(file.worker.unwrap_or_default())
}

#[tokio::main]
async fn main() -> ExitCode {
    common::init_tracing("warn");
    common::exit(run().await)
}

async fn run() -> Result<(), Error> {
    let config = load()?;
    println!("worker: {config:#?}");
    let shards = (0..4)
        .map(|i| LeaseKey::new(format!("shard-{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let (worker, mut events) =
        Worker::builder(Arc::new(InMemoryStore::new()), WorkerId::new("w1")?)
            .config(config)
            .shards(shards)
            // Leaves on Ctrl-C or SIGTERM, or after a few seconds for the demonstration.
            .graceful_shutdown_on(async {
                tokio::select! {
                    signal = common::shutdown_signal() => {
                        if let Ok(name) = signal {
                            println!("{name}: leaving");
                        }
                    }
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            })
            .start()
            .await?;
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(mut grant) = event {
                println!("acquired {}", grant.key());
                tokio::spawn(async move {
                    let reason = grant.stopped().await;
                    println!("{}: {reason}", grant.key());
                    grant.finish();
                });
            }
        }
    });
    worker.stopped().await;
    println!("left gracefully");
    Ok(())
}
