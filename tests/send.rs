//! Every public future and handle can cross threads: a compile test. Each check below fails
//! to compile, not to run, if a type or future stops being `Send` (or `Sync`, for the handles
//! an application shares): an `Rc` or a `MutexGuard` held across an `.await` in one of them,
//! for example, breaks every application that spawns it on a multi-threaded runtime.

use std::future::Future;
use std::sync::Arc;

use shardlease::store::memory::InMemoryStore;
use shardlease::worker::{Checkpointer, LeaseEvents, WorkerMonitor};
use shardlease::{LeaseGrant, LeaseStore, Worker, WorkerBuilder, WorkerConfig};

fn send<T: Send>(_: &T) {}
fn send_sync<T: Send + Sync>() {}
fn send_future<F: Future + Send>(_: F) {}

/// Never called: it only has to compile.
#[allow(dead_code)]
async fn worker_futures(
    builder: WorkerBuilder,
    worker: Worker,
    mut grant: LeaseGrant,
    checkpointer: Checkpointer,
    mut events: LeaseEvents,
) {
    send_future(builder.start());
    send_future(events.recv());
    send_future(worker.stopped());
    send_future(grant.checkpoint("1"));
    send_future(grant.end_of_shard());
    send_future(checkpointer.checkpoint("1"));
    send_future(checkpointer.end_of_shard());
    send_future(grant.lost());
    send_future(grant.stopped());
    send_future(worker.shutdown());
}

#[allow(dead_code)]
async fn store_futures(store: Arc<dyn LeaseStore>, deadline: tokio::time::Instant) {
    send_future(store.snapshot(deadline));
    send_future(store.list_members(deadline));
}

#[cfg(feature = "dynamodb")]
#[allow(dead_code)]
async fn dynamodb_futures(client: aws_sdk_dynamodb::Client) {
    use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
    send_future(DynamoStore::from_env(DynamoConfig::new("t")));
    send_future(DynamoStore::connect(client, DynamoConfig::new("t")));
}

#[cfg(feature = "kinesis")]
#[allow(dead_code)]
async fn kinesis_futures(
    builder: shardlease::kinesis::KinesisConsumerBuilder,
    consumer: shardlease::kinesis::KinesisConsumer,
    source: shardlease::kinesis::KinesisShardSource,
    checkpointer: shardlease::kinesis::RecordCheckpointer,
) {
    use shardlease::kinesis::{KinesisConsumer, RecordCheckpointer};
    let factory = |_: &shardlease::LeaseKey| NoOp;
    send_future(builder.processor(factory).start());
    send_future(consumer.stopped());
    send_future(source.check());
    send_future(checkpointer.checkpoint_at("1"));
    send_future(checkpointer.end_of_shard());
    send_future(consumer.shutdown());
    send_sync::<KinesisConsumer>();
    send_sync::<shardlease::kinesis::KinesisConsumerBuilder>();
    send_sync::<RecordCheckpointer>();
}

#[cfg(feature = "kinesis")]
struct NoOp;

#[cfg(feature = "kinesis")]
#[async_trait::async_trait]
impl shardlease::kinesis::RecordProcessor for NoOp {
    async fn process_records(
        &mut self,
        _records: &[shardlease::kinesis::KinesisRecord],
        _checkpointer: &shardlease::kinesis::RecordCheckpointer,
    ) -> Result<shardlease::kinesis::BatchOutcome, shardlease::kinesis::ProcessError> {
        Ok(shardlease::kinesis::BatchOutcome::Continue)
    }
}

#[test]
fn handles_are_send_and_sync() {
    send_sync::<Worker>();
    send_sync::<WorkerBuilder>();
    send_sync::<WorkerMonitor>();
    send_sync::<LeaseEvents>();
    send_sync::<LeaseGrant>();
    send_sync::<Checkpointer>();
    send_sync::<WorkerConfig>();
    send_sync::<InMemoryStore>();
    send_sync::<shardlease::StoreError>();
    send_sync::<shardlease::worker::WorkerError>();
    let store = InMemoryStore::new();
    send(&store);
}
