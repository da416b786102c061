//! A KCL application's checkpoint inside an aggregate, imported, resumes with the next user
//! record: a KCL lease table on dynalite (written as KCL writes it) checkpointed at user record
//! k of an aggregate of 1,000 (written by the kinesis-aggregation project's producer, in
//! kinesalite) is imported with `kcl::plan` and `apply`, and a consumer on the imported table
//! first delivers user record k + 1, then the rest of the aggregate, none twice.

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
    BatchOutcome, ConsumerConfig, KinesisConsumer, KinesisRecord, ProcessError, RecordCheckpointer,
    RecordProcessor,
};
use shardlease::store::dynamodb::kcl;
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

/// One aggregate of 1,000 user records (`tests/data/kpl/`).
const MANY: &[u8] = include_bytes!("data/kpl/many.bin");

/// The (sequence number, sub-sequence number) of every user record delivered, in order.
type Log = Arc<Mutex<Vec<(String, Option<u64>)>>>;

struct Recorder(Log);

#[async_trait]
impl RecordProcessor for Recorder {
    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        _: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        let mut log = self.0.lock().unwrap();
        log.extend(
            records
                .iter()
                .map(|r| (r.sequence_number.clone(), r.sub_sequence_number)),
        );
        Ok(BatchOutcome::Continue)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_checkpoint_at_user_record_k_resumes_at_k_plus_one() {
    let emulator = dynamo::Emulator::dynalite();
    let dynamodb = emulator.client();
    let client = kinesis::client();
    for k in [0u64, 7, 998] {
        let stream = kinesis::unique_stream("kcl-resume");
        kinesis::create_stream(&client, &stream, 1).await;
        let shard = kinesis::shards(&client, &stream).await[0].0.clone();
        let aggregate = client
            .put_record()
            .stream_name(&stream)
            .partition_key("outer")
            .data(Blob::new(MANY))
            .send()
            .await
            .expect("put the aggregate")
            .sequence_number;
        // The lease as KCL's `DynamoDBLeaseSerializer` writes it after `checkpoint(record)` of
        // user record k.
        let from = dynamo::unique_table("kcl-resume-source");
        let item = HashMap::from([
            ("leaseKey".to_owned(), AttributeValue::S(shard.clone())),
            ("leaseCounter".to_owned(), AttributeValue::N("12".into())),
            (
                "leaseOwner".to_owned(),
                AttributeValue::S("kcl-worker".into()),
            ),
            (
                "ownerSwitchesSinceCheckpoint".to_owned(),
                AttributeValue::N("0".into()),
            ),
            (
                "checkpoint".to_owned(),
                AttributeValue::S(aggregate.clone()),
            ),
            (
                "checkpointSubSequenceNumber".to_owned(),
                AttributeValue::N(k.to_string()),
            ),
        ]);
        dynamo::kcl_table(&dynamodb, &from, &[item]).await;
        let to = emulator
            .store(DynamoConfig::new(dynamo::unique_table("kcl-resume")))
            .await;
        let plan = kcl::plan(&dynamodb, &from, &to).await.unwrap();
        assert_eq!(plan.leases.len(), 1, "{plan:?}");
        plan.apply(&to).await.unwrap();

        let log: Log = Arc::default();
        let recorded = Arc::clone(&log);
        let consumer = KinesisConsumer::builder(
            client.clone(),
            &stream,
            Arc::new(to),
            WorkerId::new("a").unwrap(),
        )
        .worker_config(WorkerConfig::default().lease_duration(Duration::from_secs(2)))
        .config(ConsumerConfig::default().min_call_interval(Duration::from_millis(50)))
        .processor(move |_: &LeaseKey| Recorder(Arc::clone(&recorded)))
        .start()
        .await
        .expect("consumer starts");
        let rest = (999 - k) as usize;
        until("the rest of the aggregate was delivered", || {
            log.lock().unwrap().len() >= rest
        })
        .await;
        consumer.shutdown().await;
        let log = log.lock().unwrap();
        let expected: Vec<(String, Option<u64>)> = (k + 1..1000)
            .map(|n| (aggregate.clone(), Some(n)))
            .collect();
        assert_eq!(*log, expected, "checkpointed at user record {k}");
    }
}
