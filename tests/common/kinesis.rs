//! Kinesis on kinesalite for the consumer tests: clients, streams, a producer, a processor that
//! records what it processes in a shared ledger, and an interceptor that injects throttling and
//! expired-iterator errors into `GetRecords` answers.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_kinesis::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_kinesis::error::BoxError;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::Client;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use shardlease::kinesis::{
    BatchOutcome, KinesisRecord, ProcessError, RecordCheckpointer, RecordProcessor, ShardStart,
};
use shardlease::worker::StopReason;
use shardlease::{LeaseKey, WorkerConfig};
use tokio::time::Instant;

/// kinesalite at `SHARDLEASE_KINESALITE_ENDPOINT` or the port `scripts/emulators.sh` uses.
pub fn endpoint() -> String {
    std::env::var("SHARDLEASE_KINESALITE_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4569".into())
}

/// kinesis-mock (npm `kinesis-local`, which serves stream consumers and `SubscribeToShard`) at
/// `SHARDLEASE_KINESIS_MOCK_ENDPOINT` or the plain port `scripts/emulators.sh` uses.
pub fn mock_endpoint() -> String {
    std::env::var("SHARDLEASE_KINESIS_MOCK_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4570".into())
}

fn config_at(endpoint: String) -> aws_sdk_kinesis::config::Builder {
    aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
}

fn config() -> aws_sdk_kinesis::config::Builder {
    config_at(endpoint())
}

pub fn client() -> Client {
    Client::from_conf(config().build())
}

/// A client of kinesis-mock (its plain port: the SDK's client speaks HTTP/1.1 there, over
/// which kinesis-mock streams `SubscribeToShard`'s events too), and the interceptor that counts
/// its `GetRecords` and `GetShardIterator` calls.
pub fn mock_client() -> (Client, InjectErrors) {
    let counts = InjectErrors::default();
    let config = config_at(mock_endpoint()).interceptor(counts.clone());
    (Client::from_conf(config.build()), counts)
}

/// A kinesis-mock account of this test alone: 12 random digits (kinesis-mock keeps every
/// stream until it stops, and allows 50 shards an account).
pub fn fresh_account() -> String {
    let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000;
    format!("{n:012}")
}

/// A client of kinesis-mock in `account` (kinesis-mock serves the account whose 12-digit id is
/// the request's access key id), with `interceptor` if given.
pub fn mock_client_of(account: &str, interceptor: Option<impl Intercept + 'static>) -> Client {
    let mut config = config_at(mock_endpoint())
        .credentials_provider(Credentials::new(account, "test", None, None, "tests"));
    if let Some(interceptor) = interceptor {
        config = config.interceptor(interceptor);
    }
    Client::from_conf(config.build())
}

/// A client whose `GetRecords` answers are replaced, one in `every`, by a throttling or an
/// expired-iterator error (alternately).
pub fn faulty_client(every: u32) -> (Client, InjectErrors) {
    let inject = InjectErrors {
        every,
        ..InjectErrors::default()
    };
    (
        Client::from_conf(config().interceptor(inject.clone()).build()),
        inject,
    )
}

/// The worker configuration of the consumer tests: a 2 s lease (failover within seconds) and a
/// discovery every 500 ms (new shards, and a worker's first leases, at once).
pub fn worker_config() -> WorkerConfig {
    WorkerConfig::default()
        .lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
}

/// The consumer configuration of the consumer tests: from the oldest record, small batches,
/// quick polling.
pub fn consumer_config() -> shardlease::kinesis::ConsumerConfig {
    shardlease::kinesis::ConsumerConfig::default()
        .initial_position(shardlease::kinesis::InitialPosition::TrimHorizon)
        .max_records(50)
        .min_call_interval(Duration::from_millis(100))
        .idle_time_between_reads(Duration::from_millis(200))
}

/// A stream name no other test uses.
pub fn unique_stream(test: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{test}-{seq}-{}", &id[..8])
}

/// Splits the first shard of a stream in two halves and waits until the stream is active;
/// returns the parent's id.
pub async fn split_first(client: &Client, name: &str) -> String {
    let shards = shards(client, name).await;
    let (first, start_key, end_key, _) = shards[0].clone();
    let middle = start_key + (end_key - start_key) / 2 + 1;
    client
        .split_shard()
        .stream_name(name)
        .shard_to_split(&first)
        .new_starting_hash_key(middle.to_string())
        .send()
        .await
        .unwrap();
    wait_active(client, name).await;
    first
}

/// Creates a stream and waits until it is active.
pub async fn create_stream(client: &Client, name: &str, shards: i32) {
    client
        .create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot create a stream on kinesalite at {} ({e:?}); start the emulators with \
                 `scripts/emulators.sh start` or run `scripts/test.sh`",
                endpoint()
            )
        });
    wait_active(client, name).await;
}

pub async fn wait_active(client: &Client, name: &str) {
    for _ in 0..100 {
        let summary = client
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .unwrap();
        let status = summary
            .stream_description_summary()
            .unwrap()
            .stream_status();
        if status.as_str() == "ACTIVE" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream {name} did not become ACTIVE");
}

/// The shards of a stream: (id, starting hash key, ending hash key, open).
pub async fn shards(client: &Client, name: &str) -> Vec<(String, u128, u128, bool)> {
    let listed = client.list_shards().stream_name(name).send().await.unwrap();
    listed
        .shards()
        .iter()
        .map(|s| {
            let range = s.hash_key_range().unwrap();
            let open = s
                .sequence_number_range()
                .is_none_or(|r| r.ending_sequence_number().is_none());
            (
                s.shard_id().to_owned(),
                range.starting_hash_key().parse().unwrap(),
                range.ending_hash_key().parse().unwrap(),
                open,
            )
        })
        .collect()
}

/// Writes records `"{key}:{n}"` for each partition key, `n` counting up per key.
#[derive(Clone)]
pub struct Producer {
    client: Client,
    stream: String,
    keys: Vec<String>,
    next: Arc<Mutex<HashMap<String, u64>>>,
}

impl Producer {
    pub fn new(client: Client, stream: &str, keys: usize) -> Self {
        Self {
            client,
            stream: stream.to_owned(),
            keys: (0..keys).map(|k| format!("key-{k:02}")).collect(),
            next: Arc::default(),
        }
    }

    /// The same producer with its keys named `{prefix}-key-NN` (two producers whose records
    /// must not be taken for each other's).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        for key in &mut self.keys {
            *key = format!("{prefix}-{key}");
        }
        self
    }

    /// One record for every key.
    pub async fn round(&self) {
        for key in &self.keys {
            let n = {
                let mut next = self.next.lock().unwrap();
                let n = next.entry(key.clone()).or_default();
                *n += 1;
                *n - 1
            };
            self.client
                .put_record()
                .stream_name(&self.stream)
                .partition_key(key)
                .data(Blob::new(format!("{key}:{n}")))
                .send()
                .await
                .unwrap();
        }
    }

    /// `rounds` rounds, `every` apart, on a task of their own (records keep coming while the
    /// test moves leases).
    pub fn in_background(&self, rounds: usize, every: Duration) -> tokio::task::JoinHandle<()> {
        let producer = self.clone();
        tokio::spawn(async move {
            for _ in 0..rounds {
                producer.round().await;
                tokio::time::sleep(every).await;
            }
        })
    }

    /// How many records of each key were written.
    pub fn written(&self) -> HashMap<String, u64> {
        self.next.lock().unwrap().clone()
    }

    pub fn total(&self) -> u64 {
        self.written().values().sum()
    }
}

/// One record as a worker processed it.
#[derive(Debug, Clone)]
pub struct Processed {
    pub worker: String,
    pub shard: String,
    pub key: String,
    pub n: u64,
    pub sequence: String,
    pub at: Instant,
}

#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Which worker is inside `process_records` of each shard right now.
    busy: HashMap<String, String>,
    pub processed: Vec<Processed>,
    /// Checkpoints stored, by shard: (worker, sequence number, at).
    pub checkpoints: BTreeMap<String, Vec<(String, String, Instant)>>,
    pub starts: Vec<(String, ShardStart, Instant)>,
    pub ends: Vec<(String, String, Instant)>,
    pub violations: Vec<String>,
}

impl Ledger {
    /// Records processed of each key, in the order they were first processed.
    pub fn first_order(&self) -> HashMap<String, Vec<u64>> {
        let mut seen = std::collections::HashSet::new();
        let mut order: HashMap<String, Vec<u64>> = HashMap::new();
        for p in &self.processed {
            if seen.insert((p.key.clone(), p.n)) {
                order.entry(p.key.clone()).or_default().push(p.n);
            }
        }
        order
    }

    /// How many distinct records were processed, a record being its key and number within
    /// its lease key's stream (the key without its last `:` part; one stream for plain keys).
    pub fn distinct_per_shard_key(&self) -> usize {
        self.processed
            .iter()
            .map(|p| {
                let stream = p.shard.rsplit_once(':').map_or("", |(stream, _)| stream);
                (stream, &p.key, p.n)
            })
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    /// How many distinct records were processed.
    pub fn distinct(&self) -> usize {
        self.processed
            .iter()
            .map(|p| (&p.key, p.n))
            .collect::<std::collections::HashSet<_>>()
            .len()
    }
}

/// Records everything in the ledger and checkpoints after every batch.
pub struct TestProcessor {
    pub worker: String,
    pub shard: String,
    pub ledger: Arc<Mutex<Ledger>>,
    /// How long processing a batch takes.
    pub work: Duration,
}

#[async_trait]
impl RecordProcessor for TestProcessor {
    async fn initialize(&mut self, start: &ShardStart) {
        self.ledger.lock().unwrap().starts.push((
            self.worker.clone(),
            start.clone(),
            Instant::now(),
        ));
    }

    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        {
            let mut ledger = self.ledger.lock().unwrap();
            if let Some(other) = ledger.busy.insert(self.shard.clone(), self.worker.clone()) {
                let message = format!(
                    "{}: {} processing while {other} was",
                    self.shard, self.worker
                );
                ledger.violations.push(message);
            }
            for record in records {
                let text = String::from_utf8(record.data.clone()).unwrap();
                let (key, n) = text.split_once(':').unwrap();
                ledger.processed.push(Processed {
                    worker: self.worker.clone(),
                    shard: self.shard.clone(),
                    key: key.to_owned(),
                    n: n.parse().unwrap(),
                    sequence: record.sequence_number.clone(),
                    at: Instant::now(),
                });
            }
        }
        tokio::time::sleep(self.work).await;
        self.ledger.lock().unwrap().busy.remove(&self.shard);
        let last = records.last().expect("batches are not empty");
        if checkpointer.checkpoint(last).await.is_ok() {
            self.ledger
                .lock()
                .unwrap()
                .checkpoints
                .entry(self.shard.clone())
                .or_default()
                .push((
                    self.worker.clone(),
                    last.sequence_number.clone(),
                    Instant::now(),
                ));
        }
        Ok(BatchOutcome::Continue)
    }

    async fn shard_ended(&mut self, checkpointer: &RecordCheckpointer) {
        checkpointer.end_of_shard().await.unwrap();
        self.ledger.lock().unwrap().ends.push((
            self.worker.clone(),
            self.shard.clone(),
            Instant::now(),
        ));
    }

    async fn stop_requested(&mut self, _reason: &StopReason, _checkpointer: &RecordCheckpointer) {}
}

/// A [`TestProcessor`] that panics in `process_records` while `armed` is set (once: the
/// panic disarms it), as a processor meeting a poison record does.
pub struct PanicOnce {
    pub inner: TestProcessor,
    pub armed: Arc<AtomicBool>,
}

#[async_trait]
impl RecordProcessor for PanicOnce {
    async fn initialize(&mut self, start: &ShardStart) {
        self.inner.initialize(start).await;
    }

    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("poison record in {}", self.inner.shard);
        }
        self.inner.process_records(records, checkpointer).await
    }

    async fn shard_ended(&mut self, checkpointer: &RecordCheckpointer) {
        self.inner.shard_ended(checkpointer).await;
    }
}

/// A factory of [`TestProcessor`]s for one worker.
pub fn processors(
    worker: &str,
    ledger: &Arc<Mutex<Ledger>>,
    work: Duration,
) -> impl Fn(&LeaseKey) -> TestProcessor + Send + Sync + 'static {
    let (worker, ledger) = (worker.to_owned(), Arc::clone(ledger));
    move |shard: &LeaseKey| TestProcessor {
        worker: worker.clone(),
        shard: shard.to_string(),
        ledger: Arc::clone(&ledger),
        work,
    }
}

/// Which error an injected answer carries.
#[derive(Debug, Clone, Copy)]
struct Inject(&'static str);

impl Storable for Inject {
    type Storer = StoreReplace<Self>;
}

/// Replaces one `GetRecords` answer in `every` with an error, alternating throttling and
/// expired iterators, and while `deny` is set every `GetRecords` and `GetShardIterator` answer
/// with `AccessDeniedException`. The request reached the server; only its answer is replaced.
#[derive(Debug, Clone, Default)]
pub struct InjectErrors {
    every: u32,
    pub deny: Arc<AtomicBool>,
    seen: Arc<AtomicU32>,
    pub throttled: Arc<AtomicU32>,
    pub expired: Arc<AtomicU32>,
    /// `GetShardIterator` calls seen.
    pub iterators: Arc<AtomicU32>,
    /// `GetRecords` calls seen.
    pub reads: Arc<AtomicU32>,
}

impl Intercept for InjectErrors {
    fn name(&self) -> &'static str {
        "InjectErrors"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default();
        if target.ends_with("GetShardIterator") {
            self.iterators.fetch_add(1, Ordering::SeqCst);
        }
        if target.ends_with("GetRecords") {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
        let reads = target.ends_with("GetRecords") || target.ends_with("GetShardIterator");
        if reads && self.deny.load(Ordering::SeqCst) {
            cfg.interceptor_state()
                .store_put(Inject("AccessDeniedException"));
            return Ok(());
        }
        if !target.ends_with("GetRecords") || self.every == 0 {
            return Ok(());
        }
        let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if seen.is_multiple_of(self.every) {
            let code = if (seen / self.every) % 2 == 1 {
                self.throttled.fetch_add(1, Ordering::SeqCst);
                "ProvisionedThroughputExceededException"
            } else {
                self.expired.fetch_add(1, Ordering::SeqCst);
                "ExpiredIteratorException"
            };
            cfg.interceptor_state().store_put(Inject(code));
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Inject(code)) = cfg.load::<Inject>().copied() {
            let body = format!(r#"{{"__type":"{code}","message":"injected by the test"}}"#);
            let mut response =
                Response::new(StatusCode::try_from(400).unwrap(), SdkBody::from(body));
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.1");
            response.headers_mut().insert("x-amzn-errortype", code);
            *context.response_mut() = response;
        }
        Ok(())
    }
}

/// How long a consumer test waits for what it expects (generous: a shared machine is noisy).
pub const LIMIT: Duration = Duration::from_secs(90);

/// Waits until `done`, polling every 50 ms; fails the test after [`LIMIT`], naming `what`.
/// Returns how long it took.
pub async fn until(what: &str, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < LIMIT,
            "not reached within {LIMIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}
