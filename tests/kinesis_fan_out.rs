//! Enhanced fan-out end to end on kinesis-mock (npm `kinesis-local`, the Kinesis emulator that
//! serves stream consumers and `SubscribeToShard`): the consumer registers its stream consumer,
//! every record reaches the processor once and in order, two applications with consumers of
//! their own each get every record, and a lease handed over mid-subscription loses nothing and
//! repeats nothing checkpointed. Leases in memory; a ledger flags two workers inside one
//! shard's `process_records` at once.
//!
//! What kinesis-mock cannot show: the end of a shard through a subscription (it sends no child
//! shards), HTTP/2 (the tests use its plain port, where it streams events over HTTP/1.1), and
//! Kinesis's own pace (it pushes an event a second).

#[path = "common/kinesis.rs"]
mod kinesis;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis::{until, Ledger, Producer};
use shardlease::kinesis::{ConsumerConfig, InitialPosition, KinesisConsumer, Retrieval};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::WorkerId;

async fn start(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    application: &str,
    worker: &str,
    store: &Arc<dyn LeaseStore>,
    ledger: &Arc<Mutex<Ledger>>,
) -> KinesisConsumer {
    KinesisConsumer::builder(
        client.clone(),
        stream,
        Arc::clone(store),
        WorkerId::new(worker).unwrap(),
    )
    .worker_config(kinesis::worker_config())
    .config(
        ConsumerConfig::default()
            .initial_position(InitialPosition::TrimHorizon)
            .retrieval(Retrieval::FanOut(application.into())),
    )
    .processor(kinesis::processors(
        worker,
        ledger,
        Duration::from_millis(5),
    ))
    .start()
    .await
    .expect("consumer starts")
}

/// Every record written was processed, each key's in the order written, none by two workers
/// at once.
fn assert_complete(ledger: &Ledger, producer: &Producer) {
    assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
    let order = ledger.first_order();
    for (key, written) in producer.written() {
        let expected: Vec<u64> = (0..written).collect();
        assert_eq!(
            order.get(&key).cloned().unwrap_or_default(),
            expected,
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applications_each_get_every_record_through_consumers_of_their_own() {
    let (client, calls) = kinesis::mock_client();
    let stream = kinesis::unique_stream("fan-out");
    kinesis::create_stream(&client, &stream, 2).await;
    let producer = Producer::new(client.clone(), &stream, 8);
    for _ in 0..3 {
        producer.round().await;
    }
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..2).map(|_| Arc::default()).collect();
    let mut consumers = Vec::new();
    for (application, ledger) in ["orders", "audit"].into_iter().zip(&ledgers) {
        let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
        let consumer = start(&client, &stream, application, "a", &store, ledger).await;
        consumers.push(consumer);
    }
    for _ in 0..3 {
        producer.round().await;
    }
    let total = producer.total() as usize;
    for ledger in &ledgers {
        until("every record reached both applications", || {
            ledger.lock().unwrap().distinct() == total
        })
        .await;
    }
    for consumer in consumers {
        consumer.shutdown().await;
    }
    for ledger in &ledgers {
        assert_complete(&ledger.lock().unwrap(), &producer);
    }
    // Pushed, not polled.
    let polled = |n: &std::sync::atomic::AtomicU32| n.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!((polled(&calls.reads), polled(&calls.iterators)), (0, 0));
    let summary = client
        .describe_stream_summary()
        .stream_name(&stream)
        .send()
        .await
        .unwrap();
    let arn = summary.stream_description_summary().unwrap().stream_arn();
    let listed = client
        .list_stream_consumers()
        .stream_arn(arn)
        .send()
        .await
        .unwrap();
    let mut names: Vec<&str> = listed
        .consumers()
        .iter()
        .map(|c| c.consumer_name())
        .collect();
    names.sort();
    assert_eq!(names, ["audit", "orders"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handed_over_mid_subscription_loses_nothing_and_repeats_nothing_checkpointed() {
    let (client, _) = kinesis::mock_client();
    let stream = kinesis::unique_stream("fan-out-handoff");
    kinesis::create_stream(&client, &stream, 2).await;
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let producer = Producer::new(client.clone(), &stream, 8);
    producer.round().await;
    let a = start(&client, &stream, "app", "a", &store, &ledger).await;
    until("a holds both shards", || {
        a.worker().held_leases().len() == 2
    })
    .await;
    let producing = producer.in_background(30, Duration::from_millis(200));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = start(&client, &stream, "app", "b", &store, &ledger).await;
    until("one shard moved to b", || {
        b.worker().held_leases().len() == 1
    })
    .await;
    producing.await.unwrap();
    let total = producer.total() as usize;
    until("every record processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
    let ledger = ledger.lock().unwrap();
    assert_complete(&ledger, &producer);
    // Every batch was checkpointed as it was processed, and the old owner's subscription
    // ended before its last checkpoint: nothing was processed twice.
    let mut seen: HashMap<(String, u64), usize> = HashMap::new();
    for p in &ledger.processed {
        *seen.entry((p.key.clone(), p.n)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert!(ledger.processed.iter().any(|p| p.worker == "b"));
}
