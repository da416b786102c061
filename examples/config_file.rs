//! Loads the worker's and the lease table's configuration from a TOML file, or the worker's
//! from the environment, and runs a worker with it (feature `serde`).
//!
//! ```sh
//! cargo run --example config_file --features serde -- examples/shardlease.toml
//! SHARDLEASE_WORKER_LEASE_DURATION=30s SHARDLEASE_WORKER_PROTOCOL=leases \
//!     cargo run --example config_file --features serde -- --env
//! ```
//!
//! The worker runs on the in-memory store for a few seconds (so that the example needs no
//! DynamoDB); `DynamoStore::from_env(file.table)` is what a real application would do with
//! the `[table]` section. A bad value is refused with the field it is in.

use std::sync::Arc;
use std::time::Duration;

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

fn load() -> Result<WorkerConfig, String> {
    let arg = std::env::args().nth(1).ok_or(
        "usage: config_file FILE.toml | config_file --env (reads SHARDLEASE_WORKER_* variables)",
    )?;
    if arg == "--env" {
        return envy::prefixed("SHARDLEASE_WORKER_")
            .from_env::<WorkerConfig>()
            .map_err(|e| format!("the SHARDLEASE_WORKER_* variables: {e}"));
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
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let config = match load() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("config_file: {err}");
            std::process::exit(2);
        }
    };
    println!("worker: {config:#?}");
    if let Err(err) = run(config).await {
        eprintln!("config_file: {err}");
        std::process::exit(1);
    }
}

async fn run(config: WorkerConfig) -> Result<(), Box<dyn std::error::Error>> {
    let shards = (0..4)
        .map(|i| LeaseKey::new(format!("shard-{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut worker = Worker::builder(Arc::new(InMemoryStore::new()), WorkerId::new("w1")?)
        .config(config)
        .shards(shards)
        .start()
        .await?;
    let mut events = worker.take_events().expect("taken once");
    let until = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(until);
    loop {
        tokio::select! {
            _ = &mut until => break,
            event = events.recv() => match event {
                Some(LeaseEvent::Acquired(grant)) => {
                    println!("acquired {}", grant.key());
                    // Dropped at the end of the run: the shutdown below releases it.
                    tokio::spawn(async move {
                        let mut grant = grant;
                        grant.stopped().await;
                        grant.finish();
                    });
                }
                Some(_) => {}
                None => break,
            },
        }
    }
    worker.shutdown().await;
    println!("left gracefully");
    Ok(())
}
