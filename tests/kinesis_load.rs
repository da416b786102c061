//! Balance by load with the Kinesis consumer, end to end on kinesalite: the record loops
//! report what they read per second as their leases' load (no application code), and with
//! `Balance::Load` a shard carrying ten times the records of the others ends up on a worker of
//! its own. Leases in memory (the store is not what this tests); real time, generous limits.

#[path = "common/kinesis.rs"]
mod kinesis;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use kinesis::Ledger;
use shardlease::kinesis::{ConsumerConfig, InitialPosition, KinesisConsumer};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::{Balance, WorkerConfig, WorkerId};
use tokio::time::Instant;

const LIMIT: Duration = Duration::from_secs(120);

fn worker_config(balance: Balance) -> WorkerConfig {
    WorkerConfig::default()
        .lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
        .balance(balance)
        .load_short_window(Duration::from_secs(2))
        .load_long_window(Duration::from_secs(4))
        .load_publish_interval(Duration::from_millis(500))
}

fn consumer_config() -> ConsumerConfig {
    ConsumerConfig::default()
        .initial_position(InitialPosition::TrimHorizon)
        .max_records(100)
        .min_call_interval(Duration::from_millis(100))
        .idle_time_between_reads(Duration::from_millis(200))
}

/// Writes, every 200 ms, `hot` records to the shard of `hot_key` and one to each of the
/// others (`"{key}:{n}"`, as the test processor parses them), until dropped.
fn produce(
    client: aws_sdk_kinesis::Client,
    stream: String,
    shards: Vec<(String, u128)>,
    hot_key: String,
    hot: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next: BTreeMap<String, u64> = BTreeMap::new();
        loop {
            for (shard, start) in &shards {
                let count = if *shard == hot_key { hot } else { 1 };
                for _ in 0..count {
                    let n = next.entry(shard.clone()).or_default();
                    let written = client
                        .put_record()
                        .stream_name(&stream)
                        .partition_key(shard)
                        .explicit_hash_key(start.to_string())
                        .data(Blob::new(format!("{shard}:{n}")))
                        .send()
                        .await;
                    if written.is_ok() {
                        *n += 1;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The shards each consumer holds, by consumer.
fn holdings(consumers: &[KinesisConsumer]) -> Vec<Vec<String>> {
    consumers
        .iter()
        .map(|c| {
            let mut held: Vec<String> = c
                .worker()
                .held_leases()
                .iter()
                .map(|k| k.to_string())
                .collect();
            held.sort();
            held
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_with_ten_times_the_records_ends_up_on_a_worker_of_its_own() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("hot-shard");
    kinesis::create_stream(&client, &stream, 6).await;
    kinesis::wait_active(&client, &stream).await;
    let shards: Vec<(String, u128)> = kinesis::shards(&client, &stream)
        .await
        .into_iter()
        .map(|(id, start, _, _)| (id, start))
        .collect();
    assert_eq!(shards.len(), 6);
    let hot = shards[3].0.clone();
    let producer = produce(
        client.clone(),
        stream.clone(),
        shards.clone(),
        hot.clone(),
        10,
    );

    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut consumers = Vec::new();
    for name in ["w1", "w2", "w3"] {
        let consumer = KinesisConsumer::builder(
            client.clone(),
            &stream,
            Arc::clone(&store),
            WorkerId::new(name).unwrap(),
        )
        .worker_config(worker_config(Balance::Load))
        .config(consumer_config())
        .processor(kinesis::processors(name, &ledger, Duration::from_millis(5)))
        .start()
        .await
        .expect("consumer starts");
        consumers.push(consumer);
    }

    let start = Instant::now();
    let alone = |held: &[Vec<String>]| {
        held.iter().any(|h| h == std::slice::from_ref(&hot))
            && held.iter().map(Vec::len).sum::<usize>() == 6
            && held.iter().all(|h| !h.is_empty())
    };
    loop {
        let held = holdings(&consumers);
        if alone(&held) {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the hot shard {hot} is not alone on a worker after {LIMIT:?}: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled = start.elapsed();
    // It stays so: nothing moves back while the loads stay as they are.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = holdings(&consumers);
    assert!(alone(&held), "moved again: {held:?}");
    eprintln!("the hot shard was alone on a worker {settled:?} after the start: {held:?}");

    producer.abort();
    for consumer in consumers {
        consumer.shutdown().await;
    }
    let ledger = ledger.lock().unwrap();
    assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
}
