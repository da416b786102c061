//! Workers as separate tasks over the Redis store on a real redis-server
//! (`SHARDLEASE_REDIS_URL`; `scripts/test.sh` starts one), in real time with a 2 s lease: join (the new workers get their share by graceful handoff: the old owner
//! checkpoints, then the new one starts from that checkpoint), crash, leave; and discovery
//! (a split, children after their parent, a vanished shard retired). The ledger checks that
//! no lease is processed by two workers at once. Limits are generous (a shared machine is
//! noisy); speed is measured by the benchmarks, not here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::WorkerConfig;

/// A table of its own on the test server.
async fn store(test: &str) -> RedisStore {
    let url =
        std::env::var("SHARDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("test-{test}-{}", uuid::Uuid::new_v4().simple());
    RedisStore::connect(RedisConfig::new(url.clone(), "leases").key_prefix(prefix))
        .await
        .unwrap_or_else(|e| panic!("no redis-server at {url} (SHARDLEASE_REDIS_URL): {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_redis_join_hand_over_crash_and_leave_without_overlap() {
    let config = WorkerConfig::default().lease_duration(Duration::from_secs(2));
    fleet_joins_crashes_and_leaves("sessions", config).await;
}

async fn fleet_joins_crashes_and_leaves(test: &str, config: WorkerConfig) {
    let mut fleet = Fleet::new(Arc::new(store(test).await), config, 6);
    let app = App::FinishAfter(Duration::from_millis(50));
    let limit = Duration::from_secs(60);

    fleet.start("a", app).await;
    fleet.until(limit, |f| f.counts() == [6]).await;
    fleet.start("b", app).await;
    fleet.start("c", app).await;
    fleet.until(limit, |f| f.counts() == [2, 2, 2]).await;
    // Every lease b and c got came by handoff: its owner checkpointed and handed it to them,
    // then they started from that checkpoint.
    assert_every_move_was_a_handoff(&fleet);

    fleet.crash("c");
    fleet.until(limit, |f| f.counts() == [3, 3]).await;

    fleet.leave("b").await;
    fleet.until(limit, |f| f.counts() == [6]).await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

/// A lease handed from one worker to another next starts on that other worker, from the
/// checkpoint the first one wrote before handing it over (`<first>-done`); and b and c got
/// their shares that way.
fn assert_every_move_was_a_handoff(fleet: &Fleet) {
    let mut handed: HashMap<String, (String, String)> = HashMap::new();
    let mut moves = 0;
    for record in fleet.records() {
        match record {
            Record::HandedOff { worker, key, to } => {
                handed.insert(key, (worker, to));
            }
            Record::Started {
                worker,
                key,
                checkpoint,
                ..
            } => {
                if let Some((from, to)) = handed.remove(&key) {
                    assert_eq!(worker, to, "{key}: {from} handed it to {to}");
                    assert_eq!(checkpoint, Some(format!("{from}-done")), "{key} on {to}");
                    moves += 1;
                }
            }
            _ => {}
        }
    }
    assert!(
        moves >= 4,
        "b and c got their shares by handoff ({moves} moves)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_on_redis_splits_and_retires() {
    let store = store("discovery").await;
    crate::real_time::discovery_splits_and_retires(Arc::new(store)).await;
}
