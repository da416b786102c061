//! What the real-time fleets (on dynalite, on redis-server) share: the same scenarios on each
//! backend.

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Processing, Record};
use shardlease::source::StaticShardSource;
use shardlease::store::LeaseStore;
use shardlease::{LeaseKey, WorkerConfig};

/// Two workers with a shard source on `store` (real time, 2 s lease): a shard split and one
/// removed are followed, the children only after their parent, and the leases of the gone
/// shards retired; no lease processed by two workers at once.
pub async fn discovery_splits_and_retires(store: Arc<dyn LeaseStore>) {
    let config = WorkerConfig::default()
        .lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
        .retire_after(Duration::from_secs(2));
    let key = |s: &str| LeaseKey::new(s).unwrap();
    let source = StaticShardSource::from_keys(["s0", "s1", "s2"].map(key));
    let mut fleet = Fleet::with_source(store, config, source.clone());
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
