//! A fleet of workers shares eight shards through the in-memory lease table, in real time with
//! a 2 s lease: workers join (leases are handed over gracefully), one crashes (its leases are
//! taken once they expire), one leaves (its leases are released and taken at once).
//!
//! Run: `cargo run -p shardlease-demo` (about 25 s). Ctrl-C or SIGTERM ends it early,
//! gracefully (every worker checkpoints and releases its leases). `RUST_LOG=shardlease=info`
//! shows the library's own log (default: warnings only).
//!
//! A package of its own, so that the first build compiles only what the demo needs: the
//! library without the AWS SDK, tokio and a tracing subscriber (the library's tests and
//! examples need much more).

#[path = "../../examples/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use common::Error;

use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, StopReason, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::time::{sleep, Instant};

/// Starts a worker whose "application" prints what happens to its leases, pretends to
/// process records, and checkpoints before it lets a lease go.
async fn start(
    store: &Arc<InMemoryStore>,
    name: &str,
    shards: &[LeaseKey],
    started: Instant,
) -> Result<Worker, Error> {
    let store: Arc<dyn LeaseStore> = store.clone();
    let (worker, mut events) = Worker::builder(store, WorkerId::new(name)?)
        .config(WorkerConfig::default().lease_duration(Duration::from_secs(2)))
        .shards(shards.to_vec())
        .start()
        .await?;
    let name = name.to_owned();
    tokio::spawn(async move {
        let t = move || format!("{:5.1}s", started.elapsed().as_secs_f64());
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(mut grant) => {
                    println!(
                        "{} {name:<7} starts  {} from checkpoint {}",
                        t(),
                        grant.key(),
                        grant.initial_checkpoint().unwrap_or("-")
                    );
                    let name = name.clone();
                    tokio::spawn(async move {
                        let reason = grant.stopped().await;
                        if let StopReason::Handoff { to, .. } = &reason {
                            println!("{} {name:<7} asked to hand {} to {to}", t(), grant.key());
                        }
                        if reason != StopReason::Lost {
                            let checkpoint = format!("{name}@{}", t().trim());
                            if grant.checkpoint(&checkpoint).await.is_ok() {
                                println!(
                                    "{} {name:<7} saved   {} at {checkpoint}",
                                    t(),
                                    grant.key()
                                );
                            }
                        }
                        grant.finish();
                    });
                }
                LeaseEvent::HandedOff { key, to } => {
                    println!("{} {name:<7} handed  {key} over to {to}", t());
                }
                LeaseEvent::Released { key } => println!("{} {name:<7} released {key}", t()),
                LeaseEvent::Lost { key } => println!("{} {name:<7} lost    {key}", t()),
                _ => {}
            }
        }
    });
    Ok(worker)
}

fn show(title: &str, workers: &BTreeMap<&str, Worker>) {
    println!("\n== {title}");
    for (name, worker) in workers {
        let held: Vec<String> = worker.held_leases().iter().map(|k| k.to_string()).collect();
        println!("   {name:<7} {} leases: {}", held.len(), held.join(" "));
    }
    println!();
}

/// Waits until every shard is held and the counts differ by at most one.
async fn settle(workers: &BTreeMap<&str, Worker>, shards: usize) {
    let limit = Instant::now() + Duration::from_secs(15);
    while Instant::now() < limit {
        let counts: Vec<usize> = workers.values().map(|w| w.held_leases().len()).collect();
        let (min, max) = (counts.iter().min(), counts.iter().max());
        if counts.iter().sum::<usize>() == shards && max.zip(min).is_some_and(|(a, b)| a - b <= 1) {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    common::init_tracing("warn");
    common::exit(run().await)
}

/// The story, cut short by Ctrl-C or SIGTERM: the workers still running then leave
/// gracefully.
async fn run() -> Result<(), Error> {
    let started = Instant::now();
    let mut workers = BTreeMap::new();
    let told = tokio::select! {
        told = story(&mut workers, started) => told,
        signal = common::shutdown_signal() => {
            println!("\n{}: the remaining workers leave gracefully", signal?);
            Ok(())
        }
    };
    for worker in std::mem::take(&mut workers).into_values() {
        worker.shutdown().await;
    }
    told?;
    println!("done in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

async fn story(
    workers: &mut BTreeMap<&'static str, Worker>,
    started: Instant,
) -> Result<(), Error> {
    let store = Arc::new(InMemoryStore::new());
    let shards: Vec<LeaseKey> = (0..8)
        .map(|i| LeaseKey::new(format!("shard-{i}")))
        .collect::<Result<_, _>>()?;

    workers.insert("alpha", start(&store, "alpha", &shards, started).await?);
    settle(workers, shards.len()).await;
    show("alpha alone holds every shard", workers);

    workers.insert("bravo", start(&store, "bravo", &shards, started).await?);
    workers.insert("charlie", start(&store, "charlie", &shards, started).await?);
    settle(workers, shards.len()).await;
    show(
        "bravo and charlie joined: leases handed over gracefully (3+3+2)",
        workers,
    );

    println!("charlie crashes (no goodbye; its leases expire after 2 s)\n");
    drop(workers.remove("charlie"));
    settle(workers, shards.len()).await;
    show("charlie's leases were taken over (4+4)", workers);

    println!("bravo leaves gracefully (checkpoints, releases)\n");
    if let Some(bravo) = workers.remove("bravo") {
        bravo.shutdown().await;
    }
    settle(workers, shards.len()).await;
    show("alpha holds every shard again", workers);
    Ok(())
}
