//! The failure policy of the Kinesis consumer on kinesalite: a batch the processor fails is
//! delivered again in place, the lease kept, `batch_attempts` times; then it is skipped to the
//! dead-letter hook (whose default checkpoints past it) and reading goes on, or the shard is
//! halted here: held, unread, reported stalled, and named in the worker's record (which keeps
//! it out of the fleet's balance) until the lease is asked to stop. The
//! leases are in memory; one record per batch (`max_records` 1), so the poison record is a
//! batch of its own.

#[path = "common/kinesis.rs"]
mod kinesis;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use kinesis::until;
use shardlease::kinesis::{
    BatchOutcome, ConsumerConfig, ConsumerEvent, FailureAction, InitialPosition, KinesisConsumer,
    KinesisRecord, ProcessError, RecordCheckpointer, RecordProcessor,
};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, Stall};
use shardlease::{LeaseKey, WorkerId};

/// What the processor and the consumer's events showed.
#[derive(Default)]
struct Seen {
    /// Every delivery: the record's data.
    deliveries: Vec<String>,
    /// Checkpoints stored, as the consumer reported them (sequence numbers).
    checkpoints: Vec<String>,
    /// (attempt, error, then) of every failed delivery.
    failures: Vec<(u32, Option<String>, BatchOutcome)>,
    /// Leases that left this worker (released, lost, handed off) while it ran.
    moves: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

/// Fails every delivery of `poison`; asks once to retry `retry-me`; processes and
/// checkpoints the rest.
struct Picky {
    seen: Shared,
    retried: bool,
}

#[async_trait]
impl RecordProcessor for Picky {
    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        let data: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(&r.data).into_owned())
            .collect();
        self.seen.lock().unwrap().deliveries.extend(data.clone());
        if data.iter().any(|d| d == "poison") {
            return Err("cannot parse poison".into());
        }
        if data.iter().any(|d| d == "retry-me") && !self.retried {
            self.retried = true;
            return Ok(BatchOutcome::Retry);
        }
        checkpointer.checkpoint(records.last().unwrap()).await?;
        Ok(BatchOutcome::Continue)
    }
}

async fn put(client: &aws_sdk_kinesis::Client, stream: &str, data: &str) -> String {
    client
        .put_record()
        .stream_name(stream)
        .partition_key("k")
        .data(Blob::new(data.as_bytes()))
        .send()
        .await
        .expect("put a record")
        .sequence_number
}

async fn start(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    store: &Arc<dyn LeaseStore>,
    on_failure: FailureAction,
    seen: &Shared,
) -> KinesisConsumer {
    let (events, processors) = (Arc::clone(seen), Arc::clone(seen));
    KinesisConsumer::builder(
        client.clone(),
        stream,
        Arc::clone(store),
        WorkerId::new("a").unwrap(),
    )
    .worker_config(kinesis::worker_config())
    .config(
        ConsumerConfig::default()
            .initial_position(InitialPosition::TrimHorizon)
            .max_records(1)
            .min_call_interval(Duration::from_millis(50))
            .idle_time_between_reads(Duration::from_millis(100))
            .batch_attempts(3)
            .retry_backoff(Duration::from_millis(20))
            .on_failure(on_failure),
    )
    .on_event(move |event| {
        let mut seen = events.lock().unwrap();
        match event {
            ConsumerEvent::Checkpointed {
                sequence_number, ..
            } => seen.checkpoints.push(sequence_number),
            ConsumerEvent::BatchFailed {
                attempt,
                error,
                then,
                ..
            } => seen.failures.push((attempt, error, then)),
            ConsumerEvent::Lease(
                LeaseEvent::Released { key }
                | LeaseEvent::Lost { key }
                | LeaseEvent::HandedOff { key, .. },
            ) => seen.moves.push(key.to_string()),
            _ => {}
        }
    })
    .processor(move |_: &LeaseKey| Picky {
        seen: Arc::clone(&processors),
        retried: false,
    })
    .start()
    .await
    .expect("consumer starts")
}

fn delivered(seen: &Shared, data: &str) -> usize {
    let seen = seen.lock().unwrap();
    seen.deliveries.iter().filter(|d| *d == data).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_is_retried_in_place_then_skipped_past_with_its_checkpoint() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("failures-skip");
    kinesis::create_stream(&client, &stream, 1).await;
    let first = put(&client, &stream, "retry-me").await;
    let poison = put(&client, &stream, "poison").await;
    let after = put(&client, &stream, "after").await;
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let seen: Shared = Arc::default();
    let consumer = start(&client, &stream, &store, FailureAction::Skip, &seen).await;
    until("the record after the poison was checkpointed", || {
        seen.lock().unwrap().checkpoints.contains(&after)
    })
    .await;
    consumer.shutdown().await;

    assert_eq!(delivered(&seen, "retry-me"), 2, "a retry asked for");
    assert_eq!(delivered(&seen, "poison"), 3, "batch_attempts deliveries");
    assert_eq!(delivered(&seen, "after"), 1);
    let seen = seen.lock().unwrap();
    let error = Some("cannot parse poison".to_owned());
    assert_eq!(
        seen.failures,
        [
            (1, None, BatchOutcome::Retry),
            (1, error.clone(), BatchOutcome::Retry),
            (2, error.clone(), BatchOutcome::Retry),
            (3, error, BatchOutcome::Skip),
        ]
    );
    // The default dead-letter hook checkpointed past the poison, in order.
    assert_eq!(seen.checkpoints, [first, poison, after.clone()]);
    // The lease stayed here throughout (released only by the shutdown, at the end).
    assert!(seen.moves.len() <= 1, "{:?}", seen.moves);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_fails_every_attempt_halts_the_shard_held_and_reported_stalled() {
    // The client counts the `GetRecords` calls.
    let (client, calls) = kinesis::faulty_client(0);
    let stream = kinesis::unique_stream("failures-stop");
    kinesis::create_stream(&client, &stream, 1).await;
    let shard = LeaseKey::new(kinesis::shards(&client, &stream).await[0].0.clone()).unwrap();
    let first = put(&client, &stream, "ok").await;
    put(&client, &stream, "poison").await;
    put(&client, &stream, "after").await;
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let seen: Shared = Arc::default();
    let consumer = start(&client, &stream, &store, FailureAction::Stop, &seen).await;
    let monitor = consumer.worker().monitor();
    until("the shard was halted", || {
        monitor.stalled_leases() == [(shard.clone(), Stall::Halted)]
    })
    .await;
    assert!(!monitor.healthy(), "a halted shard fails the health probe");
    let reads = calls.reads.load(std::sync::atomic::Ordering::SeqCst);
    // Ten read intervals later: nothing more was delivered, the lease is still held here,
    // its checkpoint is still before the poison, and the idle shard was read at most three
    // answers ahead of the halted batch, not every interval.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let more = calls.reads.load(std::sync::atomic::Ordering::SeqCst) - reads;
    assert!(more <= 3, "{more} reads of a halted shard");
    assert_eq!(delivered(&seen, "poison"), 3);
    assert_eq!(delivered(&seen, "after"), 0);
    let lease = store
        .get(&shard, tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.owner.as_ref().map(|o| o.as_str()), Some("a"));
    assert_eq!(lease.checkpoint.as_deref(), Some(first.as_str()));
    // The worker's record names it, so that the fleet's balance leaves it here.
    let snapshot = store
        .snapshot(tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        snapshot.members[0].halted,
        std::collections::BTreeSet::from([shard.clone()])
    );
    assert_eq!(
        seen.lock().unwrap().failures.last().map(|f| f.2),
        Some(BatchOutcome::Stop)
    );
    assert!(seen.lock().unwrap().moves.is_empty());
    consumer.shutdown().await;
}
