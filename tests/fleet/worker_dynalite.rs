//! Workers as separate tasks over DynamoDB on dynalite, in real time with a 2 s lease: join,
//! crash, leave. The same safety checks as on paused time run throughout. Limits are generous
//! (a shared machine is noisy); speed is measured by the benchmarks, not here.

use crate::dynamo;

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Processing, Record};
use shardlease::source::StaticShardSource;
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::{LeaseKey, WorkerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_dynalite_join_crash_and_leave_without_overlap() {
    let config = WorkerConfig::with_lease_duration(Duration::from_secs(2));
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
    let config = WorkerConfig::with_lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
        .retire_after(Duration::from_secs(2));
    let key = |s: &str| LeaseKey::new(s).unwrap();
    let source = StaticShardSource::from_keys(["s0", "s1", "s2"].map(key));
    let mut fleet = Fleet::with_source(Arc::new(store), config, source.clone());
    fleet.processing = Processing {
        checkpoint_every: Some(Duration::from_millis(300)),
        end_after: Duration::from_millis(500),
    };
    let app = App::FinishAfter(Duration::from_millis(50));
    let limit = Duration::from_secs(60);
    fleet.start("a", app).await;
    fleet.start("b", app).await;
    fleet.until(limit, |f| f.held_keys().len() == 3).await;

    source.split(&key("s0"), [key("s3"), key("s4")]);
    source.remove(&key("s2"));
    let want = ["s1", "s3", "s4"].map(String::from).into();
    fleet.until(limit, |f| f.held_keys() == want).await;
    fleet.assert_parents_first("s3", &["s0"]);
    fleet.assert_parents_first("s4", &["s0"]);
    let start = tokio::time::Instant::now();
    while fleet.lease_exists("s0").await || fleet.lease_exists("s2").await {
        assert!(start.elapsed() < limit, "s0 or s2 still in the table");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        fleet.count(|r| matches!(r, Record::Retired { key, .. } if key == "s2")),
        1
    );
    fleet.assert_safe();
    fleet.assert_no_errors();
    fleet.shutdown_all().await;
}
