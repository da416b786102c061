//! Records aggregated in the KPL's format, read by the Kinesis consumer on kinesalite: each
//! aggregate is expanded into its user records as the producer's own project reads them back,
//! a checkpoint inside an aggregate resumes with the next user record, a record whose digest
//! does not match is delivered as it is, and an aggregate holding a user record hashed outside
//! its shard is dropped whole (as KCL drops it).
//!
//! The aggregates are `tests/data/kpl/`, written by the kinesis-aggregation project's Python
//! producer (`scripts/kpl_fixtures.py`); the leases are in memory.

#[path = "common/kinesis.rs"]
mod kinesis;

use kinesis::until;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use shardlease::kinesis::{
    BatchOutcome, ConsumerConfig, InitialPosition, KinesisConsumer, KinesisRecord, ProcessError,
    RecordCheckpointer, RecordProcessor, ShardStart, StartPosition,
};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::{LeaseKey, WorkerId};

const THREE: &[u8] = include_bytes!("data/kpl/three.bin");
const MANY: &[u8] = include_bytes!("data/kpl/many.bin");
const HASHED: &[u8] = include_bytes!("data/kpl/hashed.bin");
const BAD_DIGEST: &[u8] = include_bytes!("data/kpl/bad-digest.bin");
const EXPECTED: &str = include_str!("data/kpl/expected.json");

/// The last user record of `many.bin` the first consumer checkpoints.
const CHECKPOINTED: u64 = 499;

/// One user record as a processor saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    worker: &'static str,
    shard: String,
    sequence_number: String,
    sub_sequence_number: Option<u64>,
    partition_key: String,
    explicit_hash_key: Option<String>,
    data: Vec<u8>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Records every record; checkpoints each, except on the first shard past user record
/// [`CHECKPOINTED`] of the big aggregate (what a crash then loses).
struct Recorder {
    worker: &'static str,
    shard: String,
    log: Log,
    checkpointing: bool,
    starts: Arc<Mutex<Vec<(String, StartPosition)>>>,
}

#[async_trait]
impl RecordProcessor for Recorder {
    async fn initialize(&mut self, start: &ShardStart) {
        self.starts
            .lock()
            .unwrap()
            .push((self.shard.clone(), start.position.clone()));
    }

    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        cp: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        for record in records {
            self.log.lock().unwrap().push(Seen {
                worker: self.worker,
                shard: self.shard.clone(),
                sequence_number: record.sequence_number.clone(),
                sub_sequence_number: record.sub_sequence_number,
                partition_key: record.partition_key.clone(),
                explicit_hash_key: record.explicit_hash_key.clone(),
                data: record.data.clone(),
            });
            if self.checkpointing {
                cp.checkpoint(record).await.expect("checkpoint");
            }
            if self.worker == "a"
                && record.partition_key.starts_with("key-")
                && record.sub_sequence_number == Some(CHECKPOINTED)
            {
                self.checkpointing = false;
            }
        }
        Ok(BatchOutcome::Continue)
    }
}

async fn put(client: &aws_sdk_kinesis::Client, stream: &str, data: &[u8], hash_key: &str) {
    client
        .put_record()
        .stream_name(stream)
        .partition_key("outer")
        .explicit_hash_key(hash_key)
        .data(Blob::new(data))
        .send()
        .await
        .expect("put a record");
}

async fn start(
    worker: &'static str,
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    store: &Arc<dyn LeaseStore>,
    log: &Log,
    starts: &Arc<Mutex<Vec<(String, StartPosition)>>>,
) -> KinesisConsumer {
    let (log, starts) = (Arc::clone(log), Arc::clone(starts));
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
            .min_call_interval(Duration::from_millis(100))
            .idle_time_between_reads(Duration::from_millis(200)),
    )
    .processor(move |shard: &LeaseKey| Recorder {
        worker,
        shard: shard.to_string(),
        log: Arc::clone(&log),
        checkpointing: true,
        starts: Arc::clone(&starts),
    })
    .start()
    .await
    .expect("consumer starts")
}

/// What `expected.json` says `name` holds: (partition key, explicit hash key, data).
fn expected(name: &str) -> Vec<(String, Option<String>, Vec<u8>)> {
    let all: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    all[name]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["partition_key"].as_str().unwrap().to_owned(),
                u["explicit_hash_key"].as_str().map(str::to_owned),
                u["data"].as_str().unwrap().as_bytes().to_vec(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_expand_and_a_checkpoint_inside_one_resumes_with_the_next_user_record() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("aggregated");
    kinesis::create_stream(&client, &stream, 1).await;
    let shard = kinesis::shards(&client, &stream).await[0].0.clone();
    // The aggregates, a record that only looks like one, and a plain record.
    for data in [THREE, MANY, BAD_DIGEST, b"plain"] {
        put(&client, &stream, data, "0").await;
    }

    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let log: Log = Arc::default();
    let starts = Arc::default();
    let seen_by = |worker: &'static str| -> Vec<Seen> {
        log.lock()
            .unwrap()
            .iter()
            .filter(|s| s.worker == worker)
            .cloned()
            .collect()
    };
    let last_data = |worker: &'static str| seen_by(worker).last().map(|s| s.data.clone());
    let a = start("a", &client, &stream, &store, &log, &starts).await;
    until("the first consumer read the shard", || {
        last_data("a").as_deref() == Some(b"plain")
    })
    .await;

    let first = seen_by("a");
    assert_eq!(first.len(), 3 + 1000 + 2);
    let three: Vec<_> = first[..3]
        .iter()
        .map(|s| {
            (
                s.partition_key.clone(),
                s.explicit_hash_key.clone(),
                s.data.clone(),
            )
        })
        .collect();
    assert_eq!(three, expected("three.bin"));
    assert!(first[..3]
        .iter()
        .all(|s| s.sequence_number == first[0].sequence_number));
    assert_eq!(
        first[..3]
            .iter()
            .map(|s| s.sub_sequence_number)
            .collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2)]
    );
    for (i, user) in first[3..1003].iter().enumerate() {
        assert_eq!(user.sub_sequence_number, Some(i as u64));
        assert_eq!(user.partition_key, format!("key-{}", i % 7));
        assert_eq!(user.data, i.to_string().as_bytes());
    }
    assert_eq!(first[1003].data, BAD_DIGEST, "delivered as it is");
    assert_eq!(first[1003].sub_sequence_number, None);
    assert_eq!(first[1004].data, b"plain");

    // A crash: the next consumer resumes after user record 499 of the big aggregate.
    drop(a);
    let b = start("b", &client, &stream, &store, &log, &starts).await;
    until("the second consumer read the shard to its end", || {
        last_data("b").as_deref() == Some(b"plain")
    })
    .await;
    let resumed = seen_by("b");
    assert_eq!(
        resumed.len(),
        500 + 2,
        "user records 500..999, then the two records"
    );
    assert_eq!(resumed[0].sequence_number, first[3].sequence_number);
    for (i, user) in resumed[..500].iter().enumerate() {
        let sub = CHECKPOINTED + 1 + i as u64;
        assert_eq!(user.sub_sequence_number, Some(sub));
        assert_eq!(user.data, sub.to_string().as_bytes());
    }
    let position = starts
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|(s, _)| *s == shard)
        .map(|(_, position)| position.clone());
    assert_eq!(
        position,
        Some(StartPosition::AfterSubSequenceNumber {
            sequence_number: first[3].sequence_number.clone(),
            sub_sequence_number: CHECKPOINTED,
        })
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_holding_a_user_record_of_another_shard_is_dropped_whole() {
    let client = kinesis::client();
    let stream = kinesis::unique_stream("aggregated-range");
    kinesis::create_stream(&client, &stream, 2).await;
    let shards = kinesis::shards(&client, &stream).await;
    let (low, high) = if shards[0].1 == 0 {
        (shards[0].0.clone(), shards[1].0.clone())
    } else {
        (shards[1].0.clone(), shards[0].0.clone())
    };
    // User records hashed 10, 20 and 30: the lower shard's keys. Put on the lower shard the
    // aggregate is expanded; put on the upper one it is dropped.
    for hash_key in ["0".to_owned(), u128::MAX.to_string()] {
        put(&client, &stream, HASHED, &hash_key).await;
        put(&client, &stream, b"after", &hash_key).await;
    }
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let log: Log = Arc::default();
    let consumer = start("a", &client, &stream, &store, &log, &Arc::default()).await;
    let data_of = |shard: &str| -> Vec<Vec<u8>> {
        log.lock()
            .unwrap()
            .iter()
            .filter(|s| s.shard == shard)
            .map(|s| s.data.clone())
            .collect()
    };
    until("both shards read to the plain record", || {
        data_of(&low).last().map(Vec::as_slice) == Some(b"after")
            && data_of(&high).last().map(Vec::as_slice) == Some(b"after")
    })
    .await;
    let expanded: Vec<Vec<u8>> = expected("hashed.bin").into_iter().map(|u| u.2).collect();
    assert_eq!(data_of(&low), [expanded, vec![b"after".to_vec()]].concat());
    assert_eq!(data_of(&high), [b"after".to_vec()]);
    consumer.shutdown().await;
}
