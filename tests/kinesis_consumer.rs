//! The Kinesis consumer end to end, in real time: streams on kinesalite, leases on dynalite,
//! several consumers in one process. A ledger records every record each processor sees and
//! flags two workers inside one shard's `process_records` at once. Limits are generous (a
//! shared machine is noisy); speed is measured by the figure printed, not asserted tightly.

#[path = "common/dynamo.rs"]
mod dynamo;
#[path = "common/kinesis.rs"]
mod kinesis;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kinesis::{consumer_config, until, worker_config, Ledger, Producer};
use shardlease::kinesis::{ConsumerEvent, InitialPosition, KinesisConsumer, StartPosition};
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::store::LeaseStore;
use shardlease::{LeaseEvent, WorkerId};
use tokio::time::Instant;

async fn store(test: &str) -> Arc<dyn LeaseStore> {
    let emulator = dynamo::Emulator::dynalite();
    Arc::new(
        emulator
            .store(DynamoConfig::new(dynamo::unique_table(test)))
            .await,
    )
}

async fn start(
    name: &str,
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    store: &Arc<dyn LeaseStore>,
    ledger: &Arc<Mutex<Ledger>>,
) -> KinesisConsumer {
    KinesisConsumer::builder(
        client.clone(),
        stream,
        Arc::clone(store),
        WorkerId::new(name).unwrap(),
    )
    .worker_config(worker_config())
    .config(consumer_config())
    .processor(kinesis::processors(name, ledger, Duration::from_millis(10)))
    .start()
    .await
    .expect("consumer starts")
}

/// The process's Prometheus recorder (installed once, for every test of this binary), for the
/// record loops' metrics.
fn recorder() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: OnceLock<metrics_exporter_prometheus::PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("no other recorder in this test binary")
    })
}

/// The sum over the samples of `name` whose labels contain every one of `labels`, and how
/// many there are.
fn samples(text: &str, name: &str, labels: &[&str]) -> (f64, usize) {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            series_name == name && labels.iter().all(|l| series_labels.contains(l))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .fold((0.0, 0), |(sum, n), value| (sum + value, n + 1))
}

/// Numeric order of two decimal sequence numbers.
fn seq_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Every record written was processed, each key's records were first processed in the order
/// they were written, and no two workers were inside one shard at once.
fn assert_complete_and_ordered(ledger: &Ledger, producer: &Producer) {
    assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
    let order = ledger.first_order();
    for (key, written) in producer.written() {
        let seen = order.get(&key).cloned().unwrap_or_default();
        let expected: Vec<u64> = (0..written).collect();
        assert_eq!(seen, expected, "records of {key}, in first-processed order");
    }
}

fn held(consumer: &KinesisConsumer) -> Vec<String> {
    consumer
        .worker()
        .held_leases()
        .iter()
        .map(|k| k.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_is_processed_and_a_killed_workers_shards_resume_from_their_checkpoints() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("failover");
    kinesis::create_stream(&client, &stream, 4).await;
    let store = store("kinesis-failover").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let producer = Producer::new(client.clone(), &stream, 16);
    for _ in 0..5 {
        producer.round().await;
    }

    let mut consumers: HashMap<&str, KinesisConsumer> = HashMap::new();
    for name in ["a", "b", "c"] {
        consumers.insert(name, start(name, &client, &stream, &store, &ledger).await);
    }
    let total = producer.total() as usize;
    until("every record processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    until("4 shards held by 3 workers", || {
        let mut counts: Vec<usize> = consumers.values().map(|c| held(c).len()).collect();
        counts.sort();
        counts == [1, 1, 2]
    })
    .await;
    // Let the processors checkpoint what they processed.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let orphans = held(&consumers["c"]);
    let last_checkpoints: HashMap<String, String> = {
        let ledger = ledger.lock().unwrap();
        orphans
            .iter()
            .map(|shard| {
                let last = ledger.checkpoints[shard].last().unwrap().1.clone();
                (shard.clone(), last)
            })
            .collect()
    };
    let killed = Instant::now();
    drop(consumers.remove("c"));
    let producing = producer.in_background(10, Duration::from_millis(200));
    producing.await.unwrap();
    let total = producer.total() as usize;
    until("every record processed after the kill", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;

    let ledger = ledger.lock().unwrap().clone();
    assert_complete_and_ordered(&ledger, &producer);
    // Survivors resumed each orphan from its last checkpoint: anything processed twice on an
    // orphaned shard lies after that checkpoint.
    let mut count: HashMap<(String, u64), usize> = HashMap::new();
    for p in &ledger.processed {
        *count.entry((p.key.clone(), p.n)).or_default() += 1;
    }
    for p in &ledger.processed {
        if count[&(p.key.clone(), p.n)] > 1 {
            let checkpoint = last_checkpoints
                .get(&p.shard)
                .unwrap_or_else(|| panic!("{p:?} duplicated on a shard that did not move"));
            assert_eq!(
                seq_cmp(&p.sequence, checkpoint),
                std::cmp::Ordering::Greater,
                "{p:?} was processed again although checkpointed"
            );
        }
    }
    let failover = orphans
        .iter()
        .map(|shard| {
            let first = ledger
                .processed
                .iter()
                .find(|p| &p.shard == shard && p.worker != "c" && p.at > killed)
                .unwrap_or_else(|| panic!("no survivor processed {shard}"));
            first.at - killed
        })
        .max()
        .unwrap();
    println!(
        "FIGURE kinesis: kill -> first record of every orphaned shard on a survivor (2 s lease): {:.2} s",
        failover.as_secs_f64()
    );
    for (_, consumer) in consumers {
        consumer.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_with_the_same_id_resumes_from_its_checkpoints() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("restart");
    kinesis::create_stream(&client, &stream, 2).await;
    let store = store("kinesis-restart").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let producer = Producer::new(client.clone(), &stream, 8);
    for _ in 0..3 {
        producer.round().await;
    }
    let consumer = start("a", &client, &stream, &store, &ledger).await;
    let total = producer.total() as usize;
    until("first records processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(consumer);

    for _ in 0..3 {
        producer.round().await;
    }
    let restarted = Instant::now();
    let consumer = start("a", &client, &stream, &store, &ledger).await;
    let total = producer.total() as usize;
    let took = until("records after the restart processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    println!(
        "FIGURE kinesis: restart with the same id -> every new record processed: {:.2} s",
        took.as_secs_f64()
    );

    let ledger_now = ledger.lock().unwrap().clone();
    assert_complete_and_ordered(&ledger_now, &producer);
    assert_eq!(
        ledger_now.processed.len(),
        total,
        "nothing processed twice: every batch was checkpointed before the crash"
    );
    let resumed: Vec<&StartPosition> = ledger_now
        .starts
        .iter()
        .filter(|(_, _, at)| *at >= restarted)
        .map(|(_, start, _)| &start.position)
        .collect();
    assert_eq!(resumed.len(), 2, "{resumed:?}");
    assert!(
        resumed
            .iter()
            .all(|p| matches!(p, StartPosition::AfterSequenceNumber(_))),
        "{resumed:?}"
    );
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_and_a_merge_while_consuming_keep_every_keys_order() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("reshard");
    kinesis::create_stream(&client, &stream, 2).await;
    let store = store("kinesis-reshard").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let producer = Producer::new(client.clone(), &stream, 16);
    let a = start("a", &client, &stream, &store, &ledger).await;
    let b = start("b", &client, &stream, &store, &ledger).await;

    let producing = producer.in_background(40, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let shards = kinesis::shards(&client, &stream).await;
    let (first, start_key, end_key, _) = shards[0].clone();
    let middle = start_key + (end_key - start_key) / 2 + 1;
    client
        .split_shard()
        .stream_name(&stream)
        .shard_to_split(&first)
        .new_starting_hash_key(middle.to_string())
        .send()
        .await
        .unwrap();
    kinesis::wait_active(&client, &stream).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Merge the upper child of the split with the second original shard (adjacent ranges).
    let shards = kinesis::shards(&client, &stream).await;
    let upper_child = shards
        .iter()
        .find(|(_, start, _, open)| *open && *start == middle)
        .unwrap()
        .0
        .clone();
    let second = shards[1].0.clone();
    client
        .merge_shards()
        .stream_name(&stream)
        .shard_to_merge(&upper_child)
        .adjacent_shard_to_merge(&second)
        .send()
        .await
        .unwrap();
    kinesis::wait_active(&client, &stream).await;
    producing.await.unwrap();

    let total = producer.total() as usize;
    until("every record processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    let ledger_now = ledger.lock().unwrap().clone();
    assert_complete_and_ordered(&ledger_now, &producer);
    let ended: BTreeSet<&str> = ledger_now.ends.iter().map(|(_, s, _)| s.as_str()).collect();
    for parent in [first.as_str(), second.as_str(), upper_child.as_str()] {
        assert!(
            ended.contains(parent),
            "{parent} was not read to its end: {ended:?}"
        );
    }
    // A child's first record came after each of its parents' end.
    for (_, start, started_at) in &ledger_now.starts {
        for parent in &start.parents {
            let end = ledger_now
                .ends
                .iter()
                .find(|(_, s, _)| s == parent.as_str())
                .map(|(_, _, at)| *at)
                .unwrap_or_else(|| panic!("{parent} never ended"));
            assert!(
                end <= *started_at,
                "{} started before {parent} ended",
                start.shard
            );
        }
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_expired_iterators_are_survived_without_losing_records() {
    let metrics = recorder();
    let client = kinesis::client();
    let stream = kinesis::unique_stream("faults");
    kinesis::create_stream(&client, &stream, 2).await;
    let store = store("kinesis-faults").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let producer = Producer::new(client.clone(), &stream, 8);
    let (faulty, injected) = kinesis::faulty_client(3);
    let consumer = start("a", &faulty, &stream, &store, &ledger).await;
    for _ in 0..20 {
        producer.round().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let total = producer.total() as usize;
    until("every record processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    let throttled = injected.throttled.load(std::sync::atomic::Ordering::SeqCst);
    let expired = injected.expired.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        throttled >= 2 && expired >= 2,
        "injected {throttled} throttles, {expired} expiries"
    );
    // A fresh iterator after each expiry (and one per shard at start), none after throttling.
    // Faults go on being injected while the consumer polls, and an expiry's fresh iterator
    // comes a round trip after it: wait for a moment when every expiry has had its iterator
    // (iterators read first, so a later expiry cannot make the count look too high).
    until("a fresh iterator for every expired iterator", || {
        let iterators = injected.iterators.load(std::sync::atomic::Ordering::SeqCst);
        let expired = injected.expired.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            iterators <= 2 + expired,
            "{iterators} GetShardIterator calls for {expired} expiries and 2 shards"
        );
        iterators == 2 + expired
    })
    .await;
    let ledger = ledger.lock().unwrap().clone();
    assert_complete_and_ordered(&ledger, &producer);
    // Each fresh iterator started after the last record processed: nothing was read twice.
    assert_eq!(ledger.processed.len(), total, "records processed twice");

    // The record loops' metrics, read before the injected count (still growing).
    let text = metrics.render();
    let stream_label = format!("stream=\"{stream}\"");
    let on_stream = [stream_label.as_str()];
    let (records, shards) = samples(&text, "shardlease_kinesis_records_total", &on_stream);
    assert_eq!((records, shards), (total as f64, 2), "{text}");
    let (bytes, _) = samples(&text, "shardlease_kinesis_bytes_total", &on_stream);
    assert!(
        bytes >= total as f64,
        "{bytes} bytes for {total} records\n{text}"
    );
    let (_, lags) = samples(&text, "shardlease_kinesis_millis_behind_latest", &on_stream);
    assert_eq!(lags, 2, "a lag per shard\n{text}");
    let (calls, _) = samples(
        &text,
        "shardlease_kinesis_get_records_seconds_count",
        &on_stream,
    );
    let throttles = [stream_label.as_str(), "call=\"GetRecords\""];
    let (throttled_seen, _) = samples(&text, "shardlease_kinesis_throttles_total", &throttles);
    let throttled = injected.throttled.load(std::sync::atomic::Ordering::SeqCst);
    // The SDK client retries a throttled attempt itself (the injector counts attempts): the
    // loop sees, and counts, only those its retries did not cure.
    assert!(
        throttled_seen <= f64::from(throttled),
        "{throttled_seen} throttles counted, {throttled} injected\n{text}"
    );
    assert!(
        calls > throttled_seen,
        "{calls} GetRecords calls timed\n{text}"
    );
    consumer.shutdown().await;
}

/// Every consumer event, in order, for assertions.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<ConsumerEvent>>>);

impl Events {
    fn observer(&self) -> impl Fn(ConsumerEvent) + Send + Sync + 'static {
        let events = Arc::clone(&self.0);
        move |event| events.lock().unwrap().push(event)
    }

    fn count(&self, matches: impl Fn(&ConsumerEvent) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|e| matches(e)).count()
    }

    /// The position of the first event matching, if any.
    fn first(&self, matches: impl Fn(&ConsumerEvent) -> bool) -> Option<usize> {
        self.0.lock().unwrap().iter().position(matches)
    }
}

/// A consumer builder with the test configuration and `events` observing it.
fn builder(
    name: &str,
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    store: &Arc<dyn LeaseStore>,
    events: &Events,
) -> shardlease::kinesis::KinesisConsumerBuilder {
    KinesisConsumer::builder(
        client.clone(),
        stream,
        Arc::clone(store),
        WorkerId::new(name).unwrap(),
    )
    .worker_config(worker_config())
    .config(consumer_config().max_backoff(Duration::from_secs(1)))
    .on_event(events.observer())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_does_not_replay_the_children_of_a_shard_closed_before_the_first_start() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("latest");
    kinesis::create_stream(&client, &stream, 1).await;
    let producer = Producer::new(client.clone(), &stream, 8);
    // Written before the consumer's first start: into the parent, then into its children.
    producer.round().await;
    let parent = kinesis::split_first(&client, &stream).await;
    producer.round().await;
    let before = producer.total();
    // Past the margin a `Latest` start keeps before "now".
    tokio::time::sleep(Duration::from_secs(2)).await;

    let store = store("kinesis-latest").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let events = Events::default();
    let consumer = builder("a", &client, &stream, &store, &events)
        .config(consumer_config().initial_position(InitialPosition::Latest))
        .processor(kinesis::processors("a", &ledger, Duration::from_millis(10)))
        .start()
        .await
        .unwrap();
    until("both children are read", || {
        ledger.lock().unwrap().starts.len() >= 2
    })
    .await;
    // kinesalite's AT_TIMESTAMP iterators deliver nothing (a closed parent read from one never
    // ends there either), so what is checked is where each lease starts: the children at the
    // consumer's start, without the parent, which gets no lease. Before the fix the parent got
    // one and the children waited for it, then started at TRIM_HORIZON.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ledger = ledger.lock().unwrap().clone();
    let old: Vec<String> = ledger
        .processed
        .iter()
        .map(|p| format!("{}:{} in {}", p.key, p.n, p.shard))
        .collect();
    assert!(old.is_empty(), "records written before the start: {old:?}");
    assert!(before > 0);
    let started: Vec<&str> = ledger
        .starts
        .iter()
        .map(|(_, s, _)| s.shard.as_str())
        .collect();
    assert!(!started.contains(&parent.as_str()), "{started:?}");
    assert_eq!(started.len(), 2, "{started:?}");
    for (_, start, _) in &ledger.starts {
        assert!(
            matches!(start.position, StartPosition::AtTimestamp(_)) && start.parents.is_empty(),
            "{start:?}"
        );
    }
    // kinesalite leaves a `GetShardIterator` at a timestamp unanswered here: the record loop
    // must still see the stop (it hung there for good before `call_timeout` and the race).
    tokio::time::timeout(Duration::from_secs(60), consumer.shutdown())
        .await
        .expect("the consumer shuts down while a Kinesis call goes unanswered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_processor_is_reported_and_its_lease_released_then_read_again() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("panic");
    kinesis::create_stream(&client, &stream, 1).await;
    let store = store("kinesis-panic").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let events = Events::default();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let factory = {
        let (ledger, armed) = (Arc::clone(&ledger), Arc::clone(&armed));
        move |shard: &shardlease::LeaseKey| kinesis::PanicOnce {
            inner: kinesis::processors("a", &ledger, Duration::from_millis(10))(shard),
            armed: Arc::clone(&armed),
        }
    };
    let consumer = builder("a", &client, &stream, &store, &events)
        .processor(factory)
        .start()
        .await
        .unwrap();
    let producer = Producer::new(client.clone(), &stream, 4);
    producer.round().await;
    let total = producer.total() as usize;
    until("every record processed after the panic", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    let panicked = |e: &ConsumerEvent| matches!(e, ConsumerEvent::ProcessorPanicked { message, .. } if message.starts_with("poison record"));
    let released =
        |e: &ConsumerEvent| matches!(e, ConsumerEvent::Lease(LeaseEvent::Released { .. }));
    let reacquired = |e: &ConsumerEvent| matches!(e, ConsumerEvent::Acquired { .. });
    assert_eq!(events.count(panicked), 1);
    let at = events.first(panicked).unwrap();
    let release = events.first(released).expect("the lease was released");
    assert!(at < release, "released before the panic");
    assert_eq!(events.count(reacquired), 2, "taken again after the release");
    assert_complete_and_ordered(&ledger.lock().unwrap().clone(), &producer);
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_read_is_reported_and_ends_the_loop_releasing_the_lease() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("denied");
    kinesis::create_stream(&client, &stream, 1).await;
    let store = store("kinesis-denied").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let events = Events::default();
    let (faulty, inject) = kinesis::faulty_client(0);
    let consumer = builder("a", &faulty, &stream, &store, &events)
        .processor(kinesis::processors("a", &ledger, Duration::from_millis(10)))
        .start()
        .await
        .unwrap();
    until("the lease is read", || {
        !ledger.lock().unwrap().starts.is_empty()
    })
    .await;
    inject.deny.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = |e: &ConsumerEvent| matches!(e, ConsumerEvent::ReadFailed { error, .. } if error.contains("AccessDeniedException"));
    until("the refusal is reported", || events.count(refused) > 0).await;
    until("the loop ends and the lease is released", || {
        events.count(|e| matches!(e, ConsumerEvent::Stopped { .. })) > 0
            && events.count(|e| matches!(e, ConsumerEvent::Lease(LeaseEvent::Released { .. }))) > 0
    })
    .await;
    // Once access is back, the lease is taken again and read.
    inject
        .deny
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let producer = Producer::new(client.clone(), &stream, 4);
    producer.round().await;
    let total = producer.total() as usize;
    until("records processed once access is back", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_and_taken_back_during_a_long_batch_is_never_read_by_two_loops_at_once() {
    use shardlease::store::fault::FaultyStore;

    let client = kinesis::client();
    let stream = kinesis::unique_stream("reacquire");
    kinesis::create_stream(&client, &stream, 1).await;
    let emulator = dynamo::Emulator::dynalite();
    let dynamo = emulator
        .store(DynamoConfig::new(dynamo::unique_table("kinesis-reacquire")))
        .await;
    let (faulty, faults) = FaultyStore::new(dynamo);
    let store: Arc<dyn LeaseStore> = Arc::new(faulty);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let events = Events::default();
    // Each batch takes 8 s: far longer than the 2 s lease.
    let consumer = builder("a", &client, &stream, &store, &events)
        .processor(kinesis::processors("a", &ledger, Duration::from_secs(8)))
        .start()
        .await
        .unwrap();
    let producer = Producer::new(client.clone(), &stream, 4);
    producer.round().await;
    let total = producer.total() as usize;
    until("the first batch is being processed", || {
        !ledger.lock().unwrap().processed.is_empty()
    })
    .await;
    // Cut off past the lease's validity: lost here while the batch runs, then taken back.
    faults.set_cut_off(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    faults.set_cut_off(false);
    until("the lease is acquired again", || {
        events.count(|e| matches!(e, ConsumerEvent::Acquired { .. })) >= 2
    })
    .await;
    until("the batch is read again after the lease came back", || {
        ledger.lock().unwrap().processed.len() >= 2 * total
    })
    .await;
    let ledger = ledger.lock().unwrap().clone();
    assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_signal_checkpoints_releases_and_ends_every_record_loop() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("signal");
    kinesis::create_stream(&client, &stream, 2).await;
    let store = store("kinesis-signal").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let events = Events::default();
    let (fire, signal) = tokio::sync::oneshot::channel::<()>();
    let consumer = builder("a", &client, &stream, &store, &events)
        .graceful_shutdown_on(async {
            let _ = signal.await;
        })
        .processor(kinesis::processors("a", &ledger, Duration::from_millis(10)))
        .start()
        .await
        .unwrap();
    let producer = Producer::new(client.clone(), &stream, 4);
    producer.round().await;
    let total = producer.total() as usize;
    until("every record processed", || {
        ledger.lock().unwrap().distinct() == total
    })
    .await;

    fire.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), consumer.stopped())
        .await
        .expect("the consumer left after the signal");
    let released =
        |e: &ConsumerEvent| matches!(e, ConsumerEvent::Lease(LeaseEvent::Released { .. }));
    let stopped = |e: &ConsumerEvent| matches!(e, ConsumerEvent::Stopped { .. });
    assert_eq!(events.count(released), 2, "both leases released");
    assert_eq!(events.count(stopped), 2, "both record loops ended");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for lease in store.snapshot(deadline).await.unwrap().leases {
        assert_eq!(
            lease.owner, None,
            "{lease:?} still owned after the departure"
        );
    }
    consumer.shutdown().await;
}
