//! Two workers follow a shard list that changes while they run, in real time with a 2 s lease:
//! a shard splits, two merge (the children wait until their parents are processed to the end),
//! and one is removed (its lease is retired: the holder is told, finishes, the lease is deleted).
//!
//! Run: `cargo run --example resharding` (about 15 s). Ctrl-C or SIGTERM ends it early,
//! gracefully. `RUST_LOG=shardlease=info` shows the library's own log (default: warnings).

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use common::Error;

use shardlease::source::StaticShardSource;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::time::{sleep, Instant};

fn key(s: &str) -> LeaseKey {
    LeaseKey::new(s).expect("valid key")
}

/// Processes one lease: "reads records" until asked to stop or, once the source says the
/// shard is closed, for one more second to drain it, then checkpoints its end.
async fn process(
    name: String,
    mut grant: LeaseGrant,
    source: StaticShardSource,
    t: impl Fn() -> String,
) {
    let mut read = 0u64;
    let mut closed_at = None;
    loop {
        tokio::select! {
            reason = grant.stopped() => {
                if reason != StopReason::Lost {
                    let _ = grant.checkpoint(&read.to_string()).await;
                }
                println!("{} {name} stops   {} ({reason}) after {read} records", t(), grant.key());
                return;
            }
            _ = sleep(Duration::from_millis(100)) => read += 1,
        }
        let closed = source.get(grant.key()).is_some_and(|s| s.closed);
        if closed && closed_at.is_none() {
            closed_at = Some(Instant::now());
        }
        if closed_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(1)) {
            match grant.end_of_shard().await {
                Ok(()) => println!(
                    "{} {name} ended   {} after {read} records",
                    t(),
                    grant.key()
                ),
                Err(err) => println!("{} {name} could not end {}: {err}", t(), grant.key()),
            }
            return;
        }
    }
}

async fn start(
    store: &Arc<InMemoryStore>,
    source: &StaticShardSource,
    name: &'static str,
    started: Instant,
) -> Result<Worker, Error> {
    let store: Arc<dyn LeaseStore> = store.clone();
    let config = WorkerConfig::default()
        .lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
        .retire_after(Duration::from_secs(2));
    let (worker, mut events) = Worker::builder(store, WorkerId::new(name)?)
        .config(config)
        .source(source.clone())
        .start()
        .await?;
    let source = source.clone();
    tokio::spawn(async move {
        let t = move || format!("{:5.1}s", started.elapsed().as_secs_f64());
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(grant) => {
                    let from = grant.initial_checkpoint().unwrap_or("-").to_owned();
                    println!(
                        "{} {name} starts  {} from checkpoint {from}",
                        t(),
                        grant.key()
                    );
                    tokio::spawn(process(name.to_owned(), grant, source.clone(), t));
                }
                LeaseEvent::ShardEnded { key } => {
                    println!("{} {name} released {key}: processed to its end", t());
                }
                LeaseEvent::Retired { key } => {
                    println!("{} {name} retired {key}: it left the source", t());
                }
                LeaseEvent::Lost { key } => println!("{} {name} lost    {key}", t()),
                _ => {}
            }
        }
    });
    Ok(worker)
}

#[tokio::main]
async fn main() -> ExitCode {
    common::init_tracing("warn");
    common::exit(run().await)
}

/// The story, cut short by Ctrl-C or SIGTERM: the workers leave gracefully either way.
async fn run() -> Result<(), Error> {
    let mut workers = Vec::new();
    let told = tokio::select! {
        told = story(&mut workers) => told,
        signal = common::shutdown_signal() => {
            println!("\n{}: the workers leave gracefully", signal?);
            Ok(())
        }
    };
    for worker in workers.drain(..) {
        worker.shutdown().await;
    }
    told
}

async fn story(workers: &mut Vec<Worker>) -> Result<(), Error> {
    let started = Instant::now();
    let store = Arc::new(InMemoryStore::new());
    let source = StaticShardSource::from_keys(["s0", "s1", "s2", "s3"].map(key));
    workers.push(start(&store, &source, "a", started).await?);
    workers.push(start(&store, &source, "b", started).await?);
    sleep(Duration::from_secs(3)).await;

    println!("\n== s0 splits into s4 + s5; s1 and s2 merge into s6; s3 is removed\n");
    source.split(&key("s0"), [key("s4"), key("s5")]);
    source.merge(&[key("s1"), key("s2")], key("s6"));
    source.remove(&key("s3"));
    sleep(Duration::from_secs(8)).await;

    let deadline = Instant::now() + Duration::from_secs(1);
    let mut table: Vec<String> = store
        .snapshot(deadline)
        .await?
        .leases
        .iter()
        .map(|l| l.key.to_string())
        .collect();
    table.sort();
    println!("\n== leases in the table: {table:?}");
    println!(
        "== a holds {:?}, b holds {:?}\n",
        workers[0].held_leases(),
        workers[1].held_leases()
    );
    Ok(())
}
