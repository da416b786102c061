//! What an operator does to a running fleet (`shardlease::admin`, under the `shardlease`
//! command line): release a lease, drain a worker, force a checkpoint or a reset, delete a
//! lease; every move graceful, checked by the fleet's ledger (paused time, in-memory store).

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/admin.rs");

#[tokio::test]
async fn no_worker_may_use_the_operators_id() {
    use shardlease::lease::WorkerId;
    use shardlease::store::memory::InMemoryStore;
    use shardlease::worker::WorkerError;
    use shardlease::Worker;
    let store = std::sync::Arc::new(InMemoryStore::new());
    let refused = Worker::builder(store, WorkerId::operator()).start().await;
    assert!(
        matches!(refused, Err(WorkerError::ReservedId { .. })),
        "{:?}",
        refused.err()
    );
}

/// A reset deletes the lease and creates it again without a checkpoint. A discoverer that
/// re-creates the lease between the two writes, from the checkpoint it remembers, makes the
/// reset's create lose: the reset takes that item and starts over, and ends with no checkpoint.
/// (It answered "changed, nothing was written" with the old checkpoint back in the table.)
#[tokio::test(start_paused = true)]
async fn a_reset_racing_the_discoverer_still_starts_the_lease_over() {
    use shardlease::admin::Admin;
    use shardlease::lease::{LeaseKey, NewLease};
    use shardlease::store::fault::FaultyStore;
    use shardlease::store::memory::InMemoryStore;
    use shardlease::store::LeaseStore;
    use std::time::Duration;
    use tokio::time::Instant;

    let (store, faults) = FaultyStore::new(InMemoryStore::new());
    let key = LeaseKey::new("shard-1").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let _ = store
        .create(
            NewLease::new(key.clone()).with_checkpoint("seq-10"),
            deadline,
        )
        .await
        .unwrap();
    // The discoverer's re-creation, from an older checkpoint it remembered.
    faults.create_before_next_create(NewLease::new(key.clone()).with_checkpoint("seq-5"));
    let admin = Admin::new(store);
    let given = admin
        .set_checkpoint(&key, None, false, Duration::from_secs(1), |_| {})
        .await;
    assert!(given.is_ok(), "{given:?}");
    let lease = admin.store().get(&key, deadline).await.unwrap().unwrap();
    assert_eq!(lease.checkpoint, None, "{lease:?}");
    assert_eq!(lease.owner, None, "no worker: left unowned");
}
