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
