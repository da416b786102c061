//! Workers whose store stops answering, on paused time: requests the store accepts and never
//! answers (a half-open connection) must cost a worker no more than each call's deadline. The
//! store is the in-memory one behind a `FaultyStore` whose hang switch holds requests forever,
//! so what is tested is the worker's own bound, not a store's. Every test also checks, at every
//! lease start and every 5 ms, that no two workers hold or process one lease at once.

#[path = "common/fleet.rs"]
mod fleet;

use std::sync::Arc;
use std::time::Duration;

use fleet::{App, Fleet, Record};
use shardlease::store::memory::InMemoryStore;
use shardlease::{LeaseKey, Protocol, WorkerConfig};
use tokio::time::Instant;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The lease protocol: its renewals and heartbeats are what the first two tests hang. The
/// session protocol's beats are hung by the fault campaign (`never`, `cutoff`); the tests of
/// whole-store hangs run on both.
fn config() -> WorkerConfig {
    WorkerConfig::default().protocol(Protocol::Leases)
}

fn fleet(shards: usize) -> Fleet {
    fleet_with(shards, config())
}

fn fleet_with(shards: usize, config: WorkerConfig) -> Fleet {
    Fleet::new(Arc::new(InMemoryStore::new()), config, shards)
}

/// The default (sessions) and the lease protocol.
fn both_protocols() -> [WorkerConfig; 2] {
    [WorkerConfig::default(), config()]
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_that_never_returns_does_not_stop_renewals() {
    let mut fleet = fleet(4);
    fleet.start("a", QUICK).await;
    fleet.start("b", QUICK).await;
    fleet.until(secs(60), |f| f.counts() == [2, 2]).await;
    let held = fleet.worker("b").held_leases();
    let faults = fleet.faults("b");
    faults.set_hang_on("heartbeat", true);

    let span = secs(60);
    fleet.idle(span).await;
    assert_eq!(fleet.worker("b").held_leases(), held, "b kept its leases");
    let lost = fleet.count(|r| matches!(r, Record::Lost { .. }));
    assert_eq!(lost, 0, "no lease was lost: {:#?}", fleet.records());
    // Each heartbeat was abandoned at its deadline and the next one sent on time: one per
    // renew interval, but for the one the span's end may cut off.
    let expected = (span.as_secs_f64() / config().renew_interval.as_secs_f64()) as u64 - 1;
    assert!(
        faults.hung() >= expected,
        "{} heartbeats sent in {span:?}, expected {expected}",
        faults.hung()
    );
    fleet.assert_safe();
    faults.set_hang_on("heartbeat", false);
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_returns_within_its_timeout_and_one_store_timeout_while_every_request_hangs() {
    for (config, app) in both_protocols()
        .into_iter()
        .flat_map(|c| [QUICK, App::FinishAfter(secs(20)), App::NeverFinish].map(|a| (c.clone(), a)))
    {
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
    // Heal at several phases of the loops (taker, heartbeat, renewals) of the held worker.
    for (config, extra_ms) in both_protocols()
        .into_iter()
        .flat_map(|c| [0, 1_250, 2_500, 3_750].map(|ms| (c.clone(), ms)))
    {
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
            took <= 2 * config.taker_interval,
            "hold {hold:?}: b got its share back {took:?} after the heal"
        );
        fleet.assert_safe();
        fleet.shutdown_all().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_returns_does_not_delay_the_other_leases() {
    let mut fleet = fleet(4);
    fleet.start("a", QUICK).await;
    fleet.until(secs(30), |f| f.counts() == [4]).await;
    let counter = |key: &'static str| {
        let store = Arc::clone(&fleet.store);
        async move {
            let deadline = Instant::now() + secs(1);
            let key = LeaseKey::new(key).unwrap();
            store.get(&key, deadline).await.unwrap().unwrap().counter
        }
    };
    let before = counter("shard-0001").await;
    fleet
        .faults("a")
        .set_hang_on_key("renew", "shard-0000", true);
    let span = secs(60);
    fleet.idle(span).await;
    // shard-0000 is lost at the end of each validity and taken back at once (only its
    // renewals hang); the other leases were renewed every renew interval all along (but for
    // the round the span's end may cut off), and never lost.
    let renewals = counter("shard-0001").await - before;
    let expected = (span.as_secs_f64() / config().renew_interval.as_secs_f64()) as u64 - 1;
    assert!(
        renewals >= expected,
        "shard-0001 renewed {renewals} times in {span:?}, expected {expected}"
    );
    let lost_others = fleet.count(|r| matches!(r, Record::Lost { key, .. } if key != "shard-0000"));
    assert_eq!(lost_others, 0, "{:#?}", fleet.records());
    fleet.assert_safe();
    fleet
        .faults("a")
        .set_hang_on_key("renew", "shard-0000", false);
    fleet.shutdown_all().await;
}
