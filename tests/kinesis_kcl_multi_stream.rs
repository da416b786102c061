//! A KCL multi-stream application's table, imported one to one: its leases (keyed
//! `<account>:<stream>:<creation epoch>:<shard id>`, with `streamName` and `shardId`, parents
//! named by shard id) written on dynalite as KCL writes them, for two streams on kinesalite,
//! one of them split (a finished parent, two children). `kcl::plan` skips none of them and
//! keys the children's parents with their stream; a multi-stream consumer on the imported
//! table resumes each shard after its checkpoint, reads the children (their parent being
//! finished), and delivers no record twice.

#[path = "common/dynamo.rs"]
mod dynamo;
#[path = "common/kinesis.rs"]
mod kinesis;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use kinesis::until;
use shardlease::kinesis::{
    BatchOutcome, ConsumerConfig, InitialPosition, KinesisConsumer, KinesisRecord, ProcessError,
    RecordCheckpointer, RecordProcessor, StreamConfig, StreamSet,
};
use shardlease::store::dynamodb::kcl;
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

/// The data of every record delivered, by lease key, in order.
type Log = Arc<Mutex<HashMap<String, Vec<String>>>>;

struct Recorder {
    key: String,
    log: Log,
}

#[async_trait]
impl RecordProcessor for Recorder {
    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        let data = records
            .iter()
            .map(|r| String::from_utf8(r.data.clone()).unwrap());
        self.log
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default()
            .extend(data);
        checkpointer.checkpoint(records.last().unwrap()).await?;
        Ok(BatchOutcome::Continue)
    }
}

/// Puts `count` records `{prefix}-{n}` on `shard` (by its starting hash key); their sequence
/// numbers.
async fn put(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    hash_key: u128,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let mut sequences = Vec::new();
    for n in 0..count {
        let put = client
            .put_record()
            .stream_name(stream)
            .partition_key("p")
            .explicit_hash_key(hash_key.to_string())
            .data(Blob::new(format!("{prefix}-{n}")))
            .send()
            .await
            .unwrap();
        sequences.push(put.sequence_number);
    }
    sequences
}

/// A lease of a KCL multi-stream table, as `DynamoDBMultiStreamLeaseSerializer` writes it.
fn kcl_lease(
    stream_id: &str,
    shard: &str,
    checkpoint: &str,
    parents: &[&str],
) -> HashMap<String, AttributeValue> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let mut item = HashMap::from([
        ("leaseKey".to_owned(), s(&format!("{stream_id}:{shard}"))),
        ("streamName".to_owned(), s(stream_id)),
        ("shardId".to_owned(), s(shard)),
        ("leaseCounter".to_owned(), AttributeValue::N("40".into())),
        ("leaseOwner".to_owned(), s("kcl-worker")),
        (
            "ownerSwitchesSinceCheckpoint".to_owned(),
            AttributeValue::N("0".into()),
        ),
        ("checkpoint".to_owned(), s(checkpoint)),
        (
            "checkpointSubSequenceNumber".to_owned(),
            AttributeValue::N("0".into()),
        ),
    ]);
    if !parents.is_empty() {
        item.insert(
            "parentShardId".to_owned(),
            AttributeValue::Ss(parents.iter().map(|p| (*p).to_owned()).collect()),
        );
    }
    item
}

/// `account:name:creationEpoch` of a kinesalite stream.
async fn identifier(client: &aws_sdk_kinesis::Client, stream: &str) -> String {
    let summary = client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .unwrap();
    let summary = summary.stream_description_summary().unwrap();
    let account = summary.stream_arn().split(':').nth(4).unwrap().to_owned();
    let epoch = summary.stream_creation_timestamp().secs();
    format!("{account}:{stream}:{epoch}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_multi_stream_table_imports_one_to_one_and_resumes_after_each_checkpoint() {
    let emulator = dynamo::Emulator::dynalite();
    let dynamodb = emulator.client();
    let client = kinesis::client();
    let (plain, split) = (
        kinesis::unique_stream("kcl-multi-a"),
        kinesis::unique_stream("kcl-multi-b"),
    );
    kinesis::create_stream(&client, &plain, 1).await;
    kinesis::create_stream(&client, &split, 1).await;
    let plain_shard = kinesis::shards(&client, &plain).await[0].0.clone();
    let plain_sequences = put(&client, &plain, 0, "a", 10).await;
    let parent = kinesis::shards(&client, &split).await[0].0.clone();
    put(&client, &split, 0, "parent", 3).await;
    kinesis::split_first(&client, &split).await;
    let children: Vec<(String, u128)> = kinesis::shards(&client, &split)
        .await
        .into_iter()
        .filter(|(id, ..)| *id != parent)
        .map(|(id, start, ..)| (id, start))
        .collect();
    assert_eq!(children.len(), 2);
    for (n, (_, start)) in children.iter().enumerate() {
        put(&client, &split, *start, &format!("child{n}"), 4).await;
    }

    // The KCL application had processed records 0..=4 of the plain stream, the split
    // stream's parent to its end and nothing of its children.
    let (plain_id, split_id) = (
        identifier(&client, &plain).await,
        identifier(&client, &split).await,
    );
    let mut items = vec![
        kcl_lease(&plain_id, &plain_shard, &plain_sequences[4], &[]),
        kcl_lease(&split_id, &parent, "SHARD_END", &[]),
    ];
    for (child, _) in &children {
        items.push(kcl_lease(&split_id, child, "TRIM_HORIZON", &[&parent]));
    }
    let from = dynamo::unique_table("kcl-multi-source");
    dynamo::kcl_table(&dynamodb, &from, &items).await;
    let to = emulator
        .store(DynamoConfig::new(dynamo::unique_table("kcl-multi")))
        .await;
    let plan = kcl::plan(&dynamodb, &from, &to).await.unwrap();
    println!(
        "FIGURE kcl_multi_stream_import {} leases of 2 streams planned, {} skipped",
        plan.leases.len(),
        plan.skipped.len()
    );
    assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
    assert_eq!(plan.leases.len(), 4);
    let report = plan.apply(&to).await.unwrap();
    assert!(report.skipped.is_empty());
    let parent_key = LeaseKey::new(format!("{split_id}:{parent}")).unwrap();
    let child_parents: Vec<Vec<LeaseKey>> = report
        .leases
        .iter()
        .filter(|l| l.key().as_str().starts_with(&split_id) && *l.key() != parent_key)
        .map(|l| l.parents.clone())
        .collect();
    assert_eq!(
        child_parents,
        vec![vec![parent_key.clone()], vec![parent_key]],
        "the children's parents are keyed with their stream"
    );

    let log: Log = Arc::default();
    let recorded = Arc::clone(&log);
    let streams = StreamSet::new([
        StreamConfig::new(&plain).unwrap(),
        StreamConfig::new(&split).unwrap(),
    ]);
    let consumer = KinesisConsumer::multi_stream(
        client.clone(),
        streams,
        Arc::new(to),
        WorkerId::new("a").unwrap(),
    )
    .worker_config(
        WorkerConfig::default()
            .lease_duration(Duration::from_secs(2))
            .discovery_interval(Duration::from_millis(500)),
    )
    .config(
        ConsumerConfig::default()
            .initial_position(InitialPosition::Latest)
            .min_call_interval(Duration::from_millis(50))
            .idle_time_between_reads(Duration::from_millis(200)),
    )
    .processor(move |key: &LeaseKey| Recorder {
        key: key.to_string(),
        log: Arc::clone(&recorded),
    })
    .start()
    .await
    .expect("consumer starts");
    until(
        "the plain stream's rest and both children delivered",
        || {
            let log = log.lock().unwrap();
            let len = |key: String| log.get(&key).map_or(0, Vec::len);
            len(format!("{plain_id}:{plain_shard}")) >= 5
                && children
                    .iter()
                    .all(|(child, _)| len(format!("{split_id}:{child}")) >= 4)
        },
    )
    .await;
    // Nothing more comes (no record twice, none of the finished parent's).
    tokio::time::sleep(Duration::from_secs(1)).await;
    consumer.shutdown().await;
    let log = log.lock().unwrap();
    assert_eq!(
        log[&format!("{plain_id}:{plain_shard}")],
        (5..10).map(|n| format!("a-{n}")).collect::<Vec<_>>(),
        "resumed after the KCL checkpoint"
    );
    for (n, (child, _)) in children.iter().enumerate() {
        assert_eq!(
            log[&format!("{split_id}:{child}")],
            (0..4).map(|i| format!("child{n}-{i}")).collect::<Vec<_>>()
        );
    }
    assert!(!log.contains_key(&format!("{split_id}:{parent}")));
}
