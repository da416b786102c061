//! Workers as separate tasks over DynamoDB on dynalite, in real time with a 2 s lease: join,
//! crash, leave. The same safety checks as on paused time run throughout. Limits are generous
//! (a shared machine is noisy); speed is measured by the benchmarks, not here.

use crate::dynamo;

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet};
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::WorkerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_dynalite_join_crash_and_leave_without_overlap() {
    let config = WorkerConfig::default().lease_duration(Duration::from_secs(2));
    fleet_joins_crashes_and_leaves(config).await;
}

async fn fleet_joins_crashes_and_leaves(config: WorkerConfig) {
    let emulator = dynamo::Emulator::dynalite();
    let store = emulator
        .store(DynamoConfig::new(dynamo::unique_table("worker-fleet")))
        .await;
    let mut fleet = Fleet::new(Arc::new(store), config, 6);
    let app = App::FinishAfter(Duration::from_millis(50));
    let limit = Duration::from_secs(60);

    fleet.start("a", app).await;
    fleet.until(limit, |f| f.counts() == [6]).await;
    fleet.start("b", app).await;
    fleet.start("c", app).await;
    fleet.until(limit, |f| f.counts() == [2, 2, 2]).await;

    fleet.crash("c");
    fleet.until(limit, |f| f.counts() == [3, 3]).await;

    fleet.leave("b").await;
    fleet.until(limit, |f| f.counts() == [6]).await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_on_dynalite_splits_and_retires() {
    let emulator = dynamo::Emulator::dynalite();
    let store = emulator
        .store(DynamoConfig::new(dynamo::unique_table("discovery")))
        .await;
    crate::real_time::discovery_splits_and_retires(Arc::new(store)).await;
}
