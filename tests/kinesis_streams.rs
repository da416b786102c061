//! A consumer of several streams, in real time: streams on kinesalite (and, for two accounts,
//! on kinesis-mock), leases on dynalite, several consumers in one process. Every lease key is
//! `<account>:<stream>:<creation epoch>:<shard id>`; the ledger flags two workers inside one
//! shard at once, and every record of every stream must be processed, in order per key.

#[path = "common/dynamo.rs"]
mod dynamo;
#[path = "common/kinesis.rs"]
mod kinesis;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_kinesis::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_kinesis::error::BoxError;
use kinesis::{consumer_config, until, worker_config, Ledger, Producer};
use shardlease::kinesis::{
    ConsumerConfig, ConsumerEvent, InitialPosition, KinesisConsumer, StreamConfig, StreamId,
    StreamSet, StreamTracker,
};
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::store::LeaseStore;
use shardlease::worker::StopReason;
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::time::Instant;

async fn store(test: &str) -> Arc<dyn LeaseStore> {
    let emulator = dynamo::Emulator::dynalite();
    Arc::new(
        emulator
            .store(DynamoConfig::new(dynamo::unique_table(test)))
            .await,
    )
}

/// The events of every consumer of a test, with the consumer's name.
type Events = Arc<Mutex<Vec<(String, ConsumerEvent)>>>;

/// What the consumers of one test share: the lease table, the ledger and the events.
struct Fleet {
    store: Arc<dyn LeaseStore>,
    ledger: Arc<Mutex<Ledger>>,
    events: Events,
}

impl Fleet {
    async fn new(test: &str) -> Self {
        Self {
            store: store(test).await,
            ledger: Arc::default(),
            events: Events::default(),
        }
    }

    async fn start(
        &self,
        name: &str,
        client: &aws_sdk_kinesis::Client,
        tracker: impl StreamTracker,
        workers: WorkerConfig,
        config: ConsumerConfig,
    ) -> KinesisConsumer {
        let (who, sink) = (name.to_owned(), Arc::clone(&self.events));
        KinesisConsumer::multi_stream(
            client.clone(),
            tracker,
            Arc::clone(&self.store),
            WorkerId::new(name).unwrap(),
        )
        .worker_config(workers)
        .config(config)
        .on_event(move |event| sink.lock().unwrap().push((who.clone(), event)))
        .processor(kinesis::processors(
            name,
            &self.ledger,
            Duration::from_millis(10),
        ))
        .start()
        .await
        .expect("consumer starts")
    }
}

/// The stream name of a multi-stream lease key.
fn stream_of(key: &str) -> String {
    let key = LeaseKey::new(key).unwrap();
    StreamId::split_lease_key(&key)
        .expect("a multi-stream key")
        .0
        .name
}

/// Every record written to `stream` was processed (by whichever worker), each key's in the
/// order written.
fn assert_stream_complete(ledger: &Ledger, stream: &str, producer: &Producer) {
    let mut seen = HashSet::new();
    let mut order: HashMap<String, Vec<u64>> = HashMap::new();
    for p in ledger
        .processed
        .iter()
        .filter(|p| stream_of(&p.shard) == stream)
    {
        if seen.insert((p.key.clone(), p.n)) {
            order.entry(p.key.clone()).or_default().push(p.n);
        }
    }
    for (key, written) in producer.written() {
        let expected: Vec<u64> = (0..written).collect();
        assert_eq!(
            order.get(&key).cloned().unwrap_or_default(),
            expected,
            "records of {key} in {stream}, in first-processed order"
        );
    }
}

/// How many distinct records of `stream` were processed.
fn processed_of(ledger: &Ledger, stream: &str) -> usize {
    ledger
        .processed
        .iter()
        .filter(|p| stream_of(&p.shard) == stream)
        .map(|p| (&p.key, p.n))
        .collect::<HashSet<_>>()
        .len()
}

fn held_by_stream(consumer: &KinesisConsumer) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for key in consumer.worker().held_leases() {
        *counts.entry(stream_of(key.as_str())).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_balance_three_streams_and_process_every_record_once_in_order() {
    let client = kinesis::client();
    let mut names = Vec::new();
    let mut producers = Vec::new();
    for s in 0..3 {
        let name = kinesis::unique_stream(&format!("multi{s}"));
        kinesis::create_stream(&client, &name, 3).await;
        producers.push(Producer::new(client.clone(), &name, 6));
        names.push(name);
    }
    let fleet = Fleet::new("kinesis-multi").await;
    let (ledger, events) = (&fleet.ledger, &fleet.events);
    let set = StreamSet::new(names.iter().map(|n| StreamConfig::new(n).unwrap()));
    for producer in &producers {
        producer.round().await;
    }
    let mut consumers = Vec::new();
    for w in ["w1", "w2", "w3"] {
        let consumer = fleet
            .start(w, &client, set.clone(), worker_config(), consumer_config())
            .await;
        consumers.push(consumer);
    }
    let started = Instant::now();
    let balanced = until("9 leases of 3 streams spread 3, 3, 3", || {
        consumers
            .iter()
            .all(|c| c.worker().held_leases().len() == 3)
    })
    .await;
    println!(
        "FIGURE multi_stream_balance 3 workers x 3 streams x 3 shards: 3/3/3 after {:.1} s",
        balanced.as_secs_f64()
    );
    for consumer in &consumers {
        for key in consumer.worker().held_leases() {
            let (id, shard) = StreamId::split_lease_key(&key).expect("a multi-stream key");
            assert_eq!(id.account, "000000000000", "kinesalite's account");
            assert!(id.creation_epoch > 0);
            assert!(names.contains(&id.name), "{key}");
            assert!(shard.starts_with("shardId-"), "{key}");
        }
    }
    let writing: Vec<_> = producers
        .iter()
        .map(|p| p.in_background(10, Duration::from_millis(100)))
        .collect();
    for handle in writing {
        handle.await.unwrap();
    }
    let total: u64 = producers.iter().map(Producer::total).sum();
    until("every record of every stream processed", || {
        ledger.lock().unwrap().distinct_per_shard_key() as u64 >= total
    })
    .await;
    let ledger_now = ledger.lock().unwrap().clone();
    assert!(
        ledger_now.violations.is_empty(),
        "{:#?}",
        ledger_now.violations
    );
    for (name, producer) in names.iter().zip(&producers) {
        assert_stream_complete(&ledger_now, name, producer);
    }
    for start in &ledger_now.starts {
        let stream = start.1.stream_id.as_ref().expect("a multi-stream start");
        assert_eq!(start.1.stream, stream.name);
        assert_eq!(
            stream.lease_key(&start.1.shard_id).unwrap(),
            start.1.shard,
            "ShardStart names the lease's stream and shard"
        );
    }
    let added: HashSet<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, e)| match e {
            ConsumerEvent::StreamAdded { stream } => Some(stream.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        added,
        names.iter().cloned().collect(),
        "StreamAdded per stream"
    );
    println!(
        "FIGURE multi_stream_records {total} records of 3 streams processed {:.1} s after start",
        started.elapsed().as_secs_f64()
    );
    for consumer in consumers {
        consumer.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_added_at_run_time_is_read_and_a_removed_one_retires_its_leases() {
    let client = kinesis::client();
    let first = kinesis::unique_stream("kept");
    let later = kinesis::unique_stream("added");
    kinesis::create_stream(&client, &first, 2).await;
    kinesis::create_stream(&client, &later, 2).await;
    let (first_producer, later_producer) = (
        Producer::new(client.clone(), &first, 4),
        Producer::new(client.clone(), &later, 4),
    );
    first_producer.round().await;
    later_producer.round().await;
    let fleet = Fleet::new("kinesis-multi-change").await;
    let (ledger, events) = (&fleet.ledger, &fleet.events);
    let set = StreamSet::new([StreamConfig::new(&first).unwrap()]);
    let workers = worker_config().retire_after(Duration::from_secs(2));
    let config = consumer_config().removed_stream_wait(Duration::from_secs(1));
    let mut consumers = Vec::new();
    for w in ["w1", "w2"] {
        let consumer = fleet
            .start(w, &client, set.clone(), workers.clone(), config.clone())
            .await;
        consumers.push(consumer);
    }
    until("the first stream's 2 leases held", || {
        consumers
            .iter()
            .map(|c| c.worker().held_leases().len())
            .sum::<usize>()
            == 2
    })
    .await;

    // Added: its leases are created at the next discovery round and taken.
    let added_at = Instant::now();
    set.add(StreamConfig::new(&later).unwrap());
    let held = until("the added stream's 2 leases held", || {
        let held: usize = consumers
            .iter()
            .map(|c| held_by_stream(c).get(&later).copied().unwrap_or(0))
            .sum();
        held == 2
    })
    .await;
    println!(
        "FIGURE multi_stream_added leases of a stream added at run time held {:.2} s after \
         the add (discovery every {:?})",
        held.as_secs_f64(),
        worker_config().discovery_interval
    );
    later_producer
        .in_background(5, Duration::from_millis(100))
        .await
        .unwrap();
    until("every record of the added stream processed", || {
        processed_of(&ledger.lock().unwrap(), &later) as u64 == later_producer.total()
    })
    .await;
    assert!(added_at.elapsed() < Duration::from_secs(60));

    // Removed: read on for the wait, then every lease of it retires (its processors asked to
    // stop), and the table keeps only the other stream's.
    let removed_at = Instant::now();
    assert!(set.remove(&first));
    until("the removed stream's leases retired", || {
        consumers
            .iter()
            .all(|c| !held_by_stream(c).contains_key(&first))
    })
    .await;
    let retired_after = removed_at.elapsed();
    println!(
        "FIGURE multi_stream_removed leases of a removed stream retired {:.1} s after the \
         removal (wait 1 s, retire_after 2 s)",
        retired_after.as_secs_f64()
    );
    assert!(
        retired_after >= Duration::from_secs(3),
        "not before removed_stream_wait + retire_after: {retired_after:?}"
    );
    let table = until_listed(&fleet.store, |keys| {
        keys.iter().all(|k| stream_of(k) == later)
    })
    .await;
    assert_eq!(table.len(), 2, "the added stream's leases stay: {table:?}");
    {
        let seen = events.lock().unwrap();
        let retired = seen
            .iter()
            .filter(|(_, e)| {
                matches!(e, ConsumerEvent::StopRequested { key, reason: StopReason::Retired { .. } }
                    if stream_of(key.as_str()) == first)
            })
            .count();
        assert_eq!(
            retired, 2,
            "each held lease of the removed stream was asked to stop"
        );
        assert!(seen.iter().any(|(_, e)| matches!(e,
            ConsumerEvent::StreamRemoved { stream } if stream.name == first)));
    }
    assert!(ledger.lock().unwrap().violations.is_empty());
    for consumer in consumers {
        consumer.shutdown().await;
    }
}

/// The lease table's keys once `done` holds for them.
async fn until_listed(
    store: &Arc<dyn LeaseStore>,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let started = Instant::now();
    loop {
        let keys: Vec<String> = store
            .snapshot(Instant::now() + Duration::from_secs(5))
            .await
            .unwrap()
            .leases
            .into_iter()
            .map(|l| l.key.to_string())
            .collect();
        if done(&keys) {
            return keys;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "table: {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_tracker_lacks_a_stream_reads_its_leases_with_its_own_client() {
    let client = kinesis::client();
    let (a, b) = (
        kinesis::unique_stream("both"),
        kinesis::unique_stream("one"),
    );
    kinesis::create_stream(&client, &a, 2).await;
    kinesis::create_stream(&client, &b, 4).await;
    let producer = Producer::new(client.clone(), &b, 32);
    producer.round().await;
    let fleet = Fleet::new("kinesis-multi-partial").await;
    let (ledger, events) = (&fleet.ledger, &fleet.events);
    let both = StreamSet::new([
        StreamConfig::new(&a).unwrap(),
        StreamConfig::new(&b).unwrap(),
    ]);
    let only_a = StreamSet::new([StreamConfig::new(&a).unwrap()]);
    let w1 = fleet
        .start("w1", &client, both, worker_config(), consumer_config())
        .await;
    let w2 = fleet
        .start("w2", &client, only_a, worker_config(), consumer_config())
        .await;
    // 6 leases on 2 workers settle at 3 and 3: w2 holds at least one of the 4 of `b`, for
    // good.
    until(
        "3 leases each, w2 holding some of the stream its tracker lacks",
        || {
            w1.worker().held_leases().len() == 3
                && w2.worker().held_leases().len() == 3
                && held_by_stream(&w2).contains_key(&b)
        },
    )
    .await;
    producer
        .in_background(5, Duration::from_millis(100))
        .await
        .unwrap();
    until("every record of that stream processed", || {
        processed_of(&ledger.lock().unwrap(), &b) as u64 == producer.total()
    })
    .await;
    let ledger_now = ledger.lock().unwrap().clone();
    assert!(
        ledger_now.violations.is_empty(),
        "{:#?}",
        ledger_now.violations
    );
    assert_stream_complete(&ledger_now, &b, &producer);
    let failures: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|(who, e)| who == "w2" && matches!(e, ConsumerEvent::ReadFailed { .. }))
        .map(|(_, e)| format!("{e:?}"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        ledger_now
            .processed
            .iter()
            .any(|p| p.worker == "w2" && stream_of(&p.shard) == b),
        "w2 read records of it"
    );
    w1.shutdown().await;
    w2.shutdown().await;
}

/// Records the `StreamARN` of every request body that names one, by operation.
/// Calls seen: the operation, and the `StreamARN` it named.
type Calls = Arc<Mutex<Vec<(String, Option<String>)>>>;

#[derive(Debug, Clone, Default)]
struct Arns {
    calls: Calls,
    /// Off while the test itself sets the streams up.
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl Intercept for Arns {
    fn name(&self) -> &'static str {
        "Arns"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_owned();
        let body: serde_json::Value = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        let arn = body
            .get("StreamARN")
            .and_then(|a| a.as_str())
            .map(str::to_owned);
        let names_stream = body.get("StreamName").is_some()
            || body.get("ShardIterator").is_some()
            || body.get("StreamARN").is_some();
        if names_stream && self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            self.calls.lock().unwrap().push((target, arn));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_two_accounts_with_one_name_are_read_apart_each_call_naming_its_arn() {
    // kinesis-mock serves the account whose 12-digit id signs the request (accounts of this
    // run alone: each account has kinesis-mock's limit of 50 shards).
    let (home, other) = (&kinesis::fresh_account(), &kinesis::fresh_account());
    let home_client = kinesis::mock_client_of(home, None::<Arns>);
    let arns = Arns::default();
    let other_client = kinesis::mock_client_of(other, Some(arns.clone()));
    let name = kinesis::unique_stream("accounts");
    kinesis::create_stream(&home_client, &name, 2).await;
    kinesis::create_stream(&other_client, &name, 2).await;
    let home_producer = Producer::new(home_client.clone(), &name, 4).prefixed("home");
    let other_producer = Producer::new(other_client.clone(), &name, 4).prefixed("other");
    home_producer.round().await;
    other_producer.round().await;
    let other_arn = format!("arn:aws:kinesis:us-east-1:{other}:stream/{name}");
    let set = StreamSet::new([
        StreamConfig::new(&name).unwrap(),
        StreamConfig::new(&other_arn)
            .unwrap()
            .client(other_client.clone()),
    ]);
    let fleet = Fleet::new("kinesis-multi-accounts").await;
    arns.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let ledger = &fleet.ledger;
    let consumer = fleet
        .start("w1", &home_client, set, worker_config(), consumer_config())
        .await;
    arns.armed.store(false, std::sync::atomic::Ordering::SeqCst);
    home_producer.round().await;
    other_producer.round().await;
    arns.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let total = home_producer.total() + other_producer.total();
    until("every record of both accounts' streams processed", || {
        ledger.lock().unwrap().distinct_per_shard_key() as u64 >= total
    })
    .await;
    let ledger_now = ledger.lock().unwrap().clone();
    for p in &ledger_now.processed {
        let key = LeaseKey::new(p.shard.as_str()).unwrap();
        let (id, _) = StreamId::split_lease_key(&key).unwrap();
        let expected = if id.account == *home { "home" } else { "other" };
        assert!(p.key.starts_with(expected), "{} read from {key}", p.key);
    }
    let accounts: HashSet<String> = consumer
        .worker()
        .held_leases()
        .iter()
        .map(|k| StreamId::split_lease_key(k).unwrap().0.account)
        .collect();
    assert_eq!(accounts, HashSet::from([home.to_owned(), other.to_owned()]));
    arns.armed.store(false, std::sync::atomic::Ordering::SeqCst);
    let calls = arns.calls.lock().unwrap().clone();
    for operation in [
        "DescribeStreamSummary",
        "ListShards",
        "GetShardIterator",
        "GetRecords",
    ] {
        let named: Vec<_> = calls.iter().filter(|(op, _)| op == operation).collect();
        assert!(
            !named.is_empty(),
            "{operation} called for the other account's stream"
        );
        for (_, arn) in named {
            assert_eq!(
                arn.as_deref(),
                Some(other_arn.as_str()),
                "{operation} names StreamARN"
            );
        }
    }
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_of_another_accounts_stream_is_never_read_from_a_namesake_in_this_account() {
    let (home, other) = (&kinesis::fresh_account(), &kinesis::fresh_account());
    let home_client = kinesis::mock_client_of(home, None::<Arns>);
    let other_client = kinesis::mock_client_of(other, None::<Arns>);
    let name = kinesis::unique_stream("namesake");
    kinesis::create_stream(&home_client, &name, 1).await;
    kinesis::create_stream(&other_client, &name, 1).await;
    let home_producer = Producer::new(home_client.clone(), &name, 4).prefixed("home");
    home_producer.round().await;
    let other_arn = format!("arn:aws:kinesis:us-east-1:{other}:stream/{name}");
    let fleet = Fleet::new("kinesis-multi-namesake").await;
    let (ledger, events) = (&fleet.ledger, &fleet.events);
    // A worker that knows both streams creates their leases, then leaves.
    let both = StreamSet::new([
        StreamConfig::new(&name).unwrap(),
        StreamConfig::new(&other_arn).unwrap().client(other_client),
    ]);
    let w1 = fleet
        .start("w1", &home_client, both, worker_config(), consumer_config())
        .await;
    until("both streams' leases held", || {
        w1.worker().held_leases().len() == 2
    })
    .await;
    w1.shutdown().await;
    // One that knows only this account's stream takes both leases: the other account's is
    // refused (its client reaches a namesake), never read.
    let home_only = StreamSet::new([StreamConfig::new(&name).unwrap()]);
    let config = consumer_config().max_backoff(Duration::from_secs(1));
    let w2 = fleet
        .start("w2", &home_client, home_only, worker_config(), config)
        .await;
    until("the other account's lease refused", || {
        events.lock().unwrap().iter().any(|(who, e)| {
            who == "w2"
                && matches!(e, ConsumerEvent::ReadFailed { key, error }
                    if key.as_str().starts_with(other) && error.contains("not in this worker's stream set"))
        })
    })
    .await;
    home_producer.round().await;
    until("this account's records processed", || {
        ledger.lock().unwrap().distinct_per_shard_key() as u64 >= home_producer.total()
    })
    .await;
    let ledger_now = ledger.lock().unwrap().clone();
    assert!(
        ledger_now
            .processed
            .iter()
            .all(|p| p.shard.starts_with(home) && p.key.starts_with("home")),
        "nothing read under the other account's lease"
    );
    w2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_streams_read_with_enhanced_fan_out_each_through_its_own_stream_consumer() {
    let account = kinesis::fresh_account();
    let counts = kinesis::InjectErrors::default();
    let client = kinesis::mock_client_of(&account, Some(counts.clone()));
    let names = [
        kinesis::unique_stream("fan-a"),
        kinesis::unique_stream("fan-b"),
    ];
    let mut producers = Vec::new();
    for name in &names {
        kinesis::create_stream(&client, name, 2).await;
        let producer = Producer::new(client.clone(), name, 4);
        producer.round().await;
        producers.push(producer);
    }
    let fleet = Fleet::new("kinesis-multi-fan-out").await;
    let set = StreamSet::new(names.iter().map(|n| StreamConfig::new(n).unwrap()));
    let config = ConsumerConfig::default()
        .initial_position(InitialPosition::TrimHorizon)
        .retrieval(shardlease::kinesis::Retrieval::FanOut("multi-app".into()));
    let consumer = fleet
        .start("w1", &client, set, worker_config(), config)
        .await;
    for producer in &producers {
        producer.round().await;
    }
    let total: u64 = producers.iter().map(Producer::total).sum();
    until("every record of both streams pushed and processed", || {
        fleet.ledger.lock().unwrap().distinct_per_shard_key() as u64 >= total
    })
    .await;
    let ledger = fleet.ledger.lock().unwrap().clone();
    assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
    for (name, producer) in names.iter().zip(&producers) {
        assert_stream_complete(&ledger, name, producer);
        let consumers = client
            .list_stream_consumers()
            .stream_arn(format!("arn:aws:kinesis:us-east-1:{account}:stream/{name}"))
            .send()
            .await
            .unwrap();
        let registered: Vec<&str> = consumers
            .consumers()
            .iter()
            .map(|c| c.consumer_name())
            .collect();
        assert_eq!(registered, ["multi-app"], "{name}'s stream consumer");
    }
    assert_eq!(
        counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no GetRecords with fan-out"
    );
    consumer.shutdown().await;
}
