//! Handoffs whose other side goes away (paused time, in-memory store): a handoff whose
//! requester left before the owner's application let go of the lease is not completed to it
//! (the owner releases the lease instead, so it is processed again at once rather than after a
//! lease duration owned by nobody alive; with sessions it hands the lease over, finds that the
//! receiver has no session and places it again at once); and a lease whose owner dies mid-handoff is taken by
//! the requester when it expires, not a lease duration after the handoff timeout.

use crate::cases::{base, figure};
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::store::memory::InMemoryStore;
use shardlease::LeaseKey;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Waits (30 s at most) until `requester` has asked for a handoff of one lease; returns it.
async fn asked_for(fleet: &Fleet, requester: &str) -> LeaseKey {
    let started = Instant::now();
    loop {
        assert!(
            Instant::now() - started < secs(30),
            "{requester} asked for nothing"
        );
        for key in &fleet.shards {
            let lease = fleet
                .store
                .get(key, Instant::now() + secs(5))
                .await
                .unwrap();
            if lease.is_some_and(|l| l.handoff_to.as_ref().map(|t| t.as_str()) == Some(requester)) {
                return key.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_handoff_is_not_completed_to_a_requester_that_left() {
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), base(), 2);
    // a's application takes 8 s to let go of a lease.
    fleet.start("a", App::FinishAfter(secs(8))).await;
    fleet.until(secs(30), |f| f.counts() == [2]).await;
    fleet
        .start("b", App::FinishAfter(Duration::from_millis(100)))
        .await;

    // b asks a for one of its leases...
    let key = asked_for(&fleet, "b").await;
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
        let_go - left >= base().effective_taker_interval(),
        "a round of a's taker saw b gone"
    );
    let took = fleet.until(secs(30), |f| f.counts() == [2]).await;
    figure(
        "handoff: requester left, from the owner letting go until processed again",
        took,
    );

    // The owner hands the lease over, finds that the receiver has no session and
    // places it again at once (here, on itself): processed again as soon.
    assert!(
        took <= base().effective_taker_interval(),
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

/// The owner dies while it winds a requested lease down: the requester takes it when it
/// expires, as any expired lease, and does not wait for the handoff timeout and then a further
/// lease duration (found by the fault campaign, schedule 737443435314715779: the twin holding
/// the lease was stopped mid-handoff, and the requester's forced take at the handoff timeout
/// came 20 ms before the expiry and waited a whole lease duration more).
#[tokio::test(start_paused = true)]
async fn a_handoff_whose_owner_dies_is_taken_when_the_lease_expires() {
    let config = base().handoff_timeout(secs(12));
    let (lease, taker) = (config.lease_duration, config.effective_taker_interval());
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), config.clone(), 2);
    // a's application never finishes a handoff in time.
    fleet.start("a", App::FinishAfter(secs(600))).await;
    fleet.until(secs(30), |f| f.counts() == [2]).await;
    fleet
        .start("b", App::FinishAfter(Duration::from_millis(100)))
        .await;
    let key = asked_for(&fleet, "b").await;
    // Let the request reach a at a renewal (it asks its application to stop), then a dies.
    fleet
        .idle(base().effective_renew_interval() + secs(1))
        .await;
    fleet.crash("a");
    let crashed = Instant::now();
    let took = fleet
        .until(secs(60), |f| {
            f.first_start("b", Some(key.as_str())).is_some()
        })
        .await;
    figure(
        "handoff: owner died mid-handoff, from its death until processed again",
        took,
    );
    assert!(
        took <= lease + taker,
        "processed again {took:?} after its owner died (expiry: {lease:?} after its last renewal)"
    );
    // Expiry counts from the last beat the taker saw, up to one interval before the crash.
    let last_seen = config.effective_renew_interval();
    assert!(
        Instant::now() - crashed >= lease - last_seen - config_drift(),
        "taken before it expired"
    );
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

fn config_drift() -> Duration {
    base().effective_drift_allowance()
}
