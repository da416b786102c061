//! A worker that handed a lease over looks after it until its receiver takes it: a receiver
//! whose session is over is fenced and the lease given on. A read of the receiver's record
//! that fails tells nothing of that session (paused time, in-memory store).

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet};
use shardlease::lease::WorkerId;
use shardlease::store::memory::InMemoryStore;
use shardlease::WorkerConfig;
use tokio::time::Instant;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

/// How many leases the table names `worker` the owner of.
async fn owned_by(fleet: &Fleet, worker: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let snapshot = fleet.store.snapshot(deadline).await.unwrap();
    let worker = WorkerId::new(worker).unwrap();
    snapshot
        .leases
        .iter()
        .filter(|l| l.owner.as_ref() == Some(&worker))
        .count()
}

/// b joins and asks a and c for its share; they hand leases over, and b's takes hang, so the
/// leases wait on b, alive and beating. a's and c's reads of b's record fail meanwhile. The
/// leases stay b's, and b starts them once its takes are answered again. (A failed first read
/// was taken as "no session": the leases handed to b were given on to the others at once.)
#[tokio::test(start_paused = true)]
async fn a_receiver_whose_record_cannot_be_read_keeps_the_leases_handed_to_it() {
    let config = WorkerConfig::default();
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), config.clone(), 6);
    fleet.start("a", QUICK).await;
    fleet.start("c", QUICK).await;
    fleet
        .until(Duration::from_secs(120), |f| f.counts() == [3, 3])
        .await;
    for giver in ["a", "c"] {
        fleet.faults(giver).set_hang_on("get_member", true);
    }
    fleet.start("b", QUICK).await;
    // Before b's first round.
    fleet.faults("b").set_hang_on("take", true);
    fleet
        .until(Duration::from_secs(120), |f| {
            let mut counts = f.counts();
            counts.sort();
            counts == [0, 2, 2]
        })
        .await;
    fleet.idle(config.lease_duration * 3).await;
    assert_eq!(
        owned_by(&fleet, "b").await,
        2,
        "the leases handed to b are still b's"
    );
    for giver in ["a", "c"] {
        fleet.faults(giver).set_hang_on("get_member", false);
    }
    fleet.faults("b").set_hang_on("take", false);
    fleet
        .until(Duration::from_secs(120), |f| f.counts() == [2, 2, 2])
        .await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}
