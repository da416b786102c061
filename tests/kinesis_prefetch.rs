//! Reading ahead on kinesalite: with prefetch on, the next `GetRecords` of a shard runs while
//! `process_records` works, up to the configured number of waiting records and no further;
//! with it off, no `GetRecords` runs while the processor holds a batch. The `GetRecords` calls
//! are counted by an interceptor of the Kinesis client; the leases are in memory.

#[path = "common/kinesis.rs"]
mod kinesis;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use kinesis::until;
use shardlease::kinesis::{
    BatchOutcome, ConsumerConfig, InitialPosition, KinesisConsumer, KinesisRecord, ProcessError,
    RecordCheckpointer, RecordProcessor,
};
use shardlease::store::memory::InMemoryStore;
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::sync::Semaphore;

/// Holds each batch until the test lets one through; records what it was given.
struct Gate {
    open: Arc<Semaphore>,
    delivered: Arc<Mutex<Vec<String>>>,
    /// `GetRecords` calls made when the first batch came.
    at_first: Arc<Mutex<Option<u32>>>,
    reads: Arc<AtomicU32>,
}

#[async_trait]
impl RecordProcessor for Gate {
    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        _: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        self.at_first
            .lock()
            .unwrap()
            .get_or_insert(self.reads.load(Ordering::SeqCst));
        self.open.acquire().await?.forget();
        let mut delivered = self.delivered.lock().unwrap();
        delivered.extend(
            records
                .iter()
                .map(|r| String::from_utf8_lossy(&r.data).into()),
        );
        Ok(BatchOutcome::Continue)
    }
}

struct Run {
    consumer: KinesisConsumer,
    open: Arc<Semaphore>,
    delivered: Arc<Mutex<Vec<String>>>,
    at_first: Arc<Mutex<Option<u32>>>,
    reads: Arc<AtomicU32>,
}

/// A one-shard stream with 20 records, read one record a batch with `prefetch_records`.
async fn start(name: &str, prefetch_records: u32) -> Run {
    let (client, inject) = kinesis::faulty_client(0);
    let stream = kinesis::unique_stream(name);
    kinesis::create_stream(&client, &stream, 1).await;
    for n in 0..20 {
        client
            .put_record()
            .stream_name(&stream)
            .partition_key("k")
            .data(Blob::new(format!("r-{n:02}")))
            .send()
            .await
            .expect("put a record");
    }
    let open = Arc::new(Semaphore::new(0));
    let delivered = Arc::default();
    let at_first = Arc::default();
    let reads = Arc::clone(&inject.reads);
    let (o, d, a, r) = (
        Arc::clone(&open),
        Arc::clone(&delivered),
        Arc::clone(&at_first),
        Arc::clone(&reads),
    );
    let consumer = KinesisConsumer::builder(
        client,
        stream,
        Arc::new(InMemoryStore::new()),
        WorkerId::new("a").unwrap(),
    )
    .worker_config(WorkerConfig::default().lease_duration(Duration::from_secs(2)))
    .config(
        ConsumerConfig::default()
            .initial_position(InitialPosition::TrimHorizon)
            .max_records(1)
            .min_call_interval(Duration::from_millis(20))
            .prefetch_records(prefetch_records),
    )
    .processor(move |_: &LeaseKey| Gate {
        open: Arc::clone(&o),
        delivered: Arc::clone(&d),
        at_first: Arc::clone(&a),
        reads: Arc::clone(&r),
    })
    .start()
    .await
    .expect("consumer starts");
    Run {
        consumer,
        open,
        delivered,
        at_first,
        reads,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_run_ahead_of_a_busy_processor_up_to_the_limit_and_records_stay_in_order() {
    let run = start("prefetch-on", 2).await;
    until("the first batch reached the processor", || {
        run.at_first.lock().unwrap().is_some()
    })
    .await;
    // The processor holds its first batch (the first read: kinesalite answers every read of a
    // shard with records waiting): two more records may wait, the held one counted, so the
    // fetcher reads two batches ahead and then waits for room.
    until("two reads ran while the processor was busy", || {
        run.reads.load(Ordering::SeqCst) >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(run.reads.load(Ordering::SeqCst), 3, "read past the limit");
    run.open.add_permits(1_000);
    until("every record was delivered", || {
        run.delivered.lock().unwrap().len() == 20
    })
    .await;
    let expected: Vec<String> = (0..20).map(|n| format!("r-{n:02}")).collect();
    assert_eq!(*run.delivered.lock().unwrap(), expected);
    run.consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prefetch_nothing_is_read_while_the_processor_holds_a_batch() {
    let run = start("prefetch-off", 0).await;
    until("the first batch reached the processor", || {
        run.at_first.lock().unwrap().is_some()
    })
    .await;
    let first = run.at_first.lock().unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(run.reads.load(Ordering::SeqCst), first);
    run.open.add_permits(1_000);
    until("every record was delivered", || {
        run.delivered.lock().unwrap().len() == 20
    })
    .await;
    run.consumer.shutdown().await;
}
