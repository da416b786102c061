//! A handoff whose requester left before the owner's application let go of the lease is not
//! completed to it: the owner releases the lease instead, so it is processed again at once
//! rather than after a lease duration owned by nobody alive (paused time, in-memory store).

#[path = "common/fleet.rs"]
mod fleet;

use std::sync::Arc;
use std::time::Duration;

use fleet::{App, Fleet, Record};
use shardlease::store::memory::InMemoryStore;
use shardlease::WorkerConfig;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn a_handoff_is_not_completed_to_a_requester_that_left() {
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), WorkerConfig::default(), 2);
    // a's application takes 8 s to let go of a lease.
    fleet.start("a", App::FinishAfter(secs(8))).await;
    fleet.until(secs(30), |f| f.counts() == [2]).await;
    fleet
        .start("b", App::FinishAfter(Duration::from_millis(100)))
        .await;

    // b asks a for one of its leases...
    let started = Instant::now();
    let key = 'asked: loop {
        assert!(Instant::now() - started < secs(30), "b asked for nothing");
        for key in &fleet.shards {
            let lease = fleet
                .store
                .get(key, Instant::now() + secs(5))
                .await
                .unwrap();
            if lease.is_some_and(|l| l.handoff_to.as_ref().map(|t| t.as_str()) == Some("b")) {
                break 'asked key.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // ...and leaves before a's application has let go of it.
    fleet.leave("b").await;
    let left = Instant::now();

    fleet
        .until(secs(30), |f| {
            f.count(|r| matches!(r, Record::Stopped { worker, key: k, .. } if worker == "a" && k == key.as_str())) == 1
        })
        .await;
    let let_go = Instant::now();
    assert!(
        let_go - left >= WorkerConfig::default().taker_interval,
        "a round of a's taker saw b gone"
    );
    let took = fleet.until(secs(30), |f| f.counts() == [2]).await;
    Fleet::figure(
        "handoff: requester left, from the owner letting go until processed again",
        took,
    );

    let handed = fleet.count(|r| matches!(r, Record::HandedOff { to, .. } if to == "b"));
    assert_eq!(handed, 0, "handed over to a worker that had left");
    let released = fleet.count(
        |r| matches!(r, Record::Released { worker, key: k } if worker == "a" && k == key.as_str()),
    );
    assert_eq!(released, 1);
    assert!(
        took <= WorkerConfig::default().taker_interval,
        "processed again {took:?} after a let go"
    );
    let lease = fleet
        .store
        .get(&key, Instant::now() + secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.owner.as_ref().map(|o| o.as_str()), Some("a"));
    fleet.assert_safe();
    fleet.shutdown_all().await;
}
