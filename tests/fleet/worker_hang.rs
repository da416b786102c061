//! Workers whose store stops answering, on paused time: requests the store accepts and never
//! answers (a half-open connection) must cost a worker no more than each call's deadline. The
//! store is the in-memory one behind a `FaultyStore` whose hang switch holds requests forever,
//! so what is tested is the worker's own bound, not a store's. Every test also checks, at every
//! lease start and every 5 ms, that no two workers hold or process one lease at once.

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet};
use shardlease::store::memory::InMemoryStore;
use shardlease::WorkerConfig;
use tokio::time::Instant;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn fleet_with(shards: usize, config: WorkerConfig) -> Fleet {
    Fleet::new(Arc::new(InMemoryStore::new()), config, shards)
}

#[tokio::test(start_paused = true)]
async fn shutdown_returns_within_its_timeout_and_one_store_timeout_while_every_request_hangs() {
    for app in [QUICK, App::FinishAfter(secs(20)), App::NeverFinish] {
        let config = WorkerConfig::default();
        let limit = config.shutdown_timeout + config.store_timeout;
        let mut fleet = fleet_with(4, config.clone());
        fleet.start("a", app).await;
        fleet.until(secs(30), |f| f.counts() == [4]).await;
        fleet.faults("a").set_hang(true);
        let start = Instant::now();
        // Twice the limit: long enough to tell "late" from "never".
        tokio::time::timeout(2 * limit, fleet.leave("a"))
            .await
            .unwrap_or_else(|_| panic!("{app:?}: shutdown did not return"));
        let took = start.elapsed();
        Fleet::figure(&format!("shutdown, every request hangs, {app:?}"), took);
        assert!(took <= limit, "{app:?}: shutdown took {took:?}");
        fleet.assert_safe();
    }
}

#[tokio::test(start_paused = true)]
async fn after_thirty_seconds_unanswered_a_worker_gets_its_share_back_within_two_taker_intervals() {
    // Heal at several phases of the loops (taker, beats) of the held worker.
    for extra_ms in [0, 1_250, 2_500, 3_750] {
        let config = WorkerConfig::default();
        let hold = secs(30) + Duration::from_millis(extra_ms);
        let mut fleet = fleet_with(4, config.clone());
        fleet.start("a", QUICK).await;
        fleet.start("b", QUICK).await;
        fleet.until(secs(60), |f| f.counts() == [2, 2]).await;
        let faults = fleet.faults("b");
        faults.set_hang(true);
        fleet.idle(hold).await;
        assert_eq!(
            fleet.counts(),
            [4, 0],
            "a took b's leases over during the hold"
        );
        assert!(faults.hung() > 0);

        faults.set_hang(false);
        let took = fleet.until(secs(120), |f| f.counts() == [2, 2]).await;
        Fleet::figure(&format!("hold {hold:?}: heal to fair share"), took);
        assert!(
            took <= 2 * config.effective_taker_interval(),
            "hold {hold:?}: b got its share back {took:?} after the heal"
        );
        fleet.assert_safe();
        fleet.shutdown_all().await;
    }
}
