//! A lease deleted and re-created between two scans of an observer, and brought back to the
//! counter and tenure the observer saw before, is a new item: the observer counts its expiry
//! from when it first saw the new item, not from when it saw the old one (paused time, in-memory
//! store).

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::memory::InMemoryStore;
use shardlease::store::{LeaseStore, Outcome};
use shardlease::{
    Incarnation, Lease, LeaseKey, NewLease, Protocol, Worker, WorkerConfig, WorkerId,
};
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn deadline() -> Instant {
    Instant::now() + secs(5)
}

/// Creates `key`, takes it for `owner` and renews it twice: counter 3, tenure 1.
async fn held_at_counter_three(store: &InMemoryStore, key: &LeaseKey, owner: &WorkerId) -> Lease {
    let lease = store
        .create(NewLease::new(key.clone()), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    let mut lease = store
        .take(key, owner, Incarnation::new(1), lease.counter, deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    for _ in 0..2 {
        lease = store
            .renew(key, owner, lease.tenure, None, deadline())
            .await
            .unwrap()
            .done()
            .unwrap();
    }
    assert_eq!((lease.counter, lease.tenure), (3, 1));
    lease
}

#[tokio::test(start_paused = true)]
async fn a_lease_re_created_at_an_old_counter_between_two_scans_is_not_taken_as_expired() {
    let store = InMemoryStore::new();
    let key = LeaseKey::new("s").unwrap();
    let other = WorkerId::new("other").unwrap();
    // The lease protocol, whose observers judge expiry by a lease's counter (with sessions they
    // judge its owner's session, and "another" renewing it is a session that beats).
    let config = WorkerConfig::default().protocol(Protocol::Leases);
    let first = held_at_counter_three(&store, &key, &other).await;

    // w scans now: it first sees counter 3 of the first item now.
    let worker = Worker::builder(Arc::new(store.clone()), WorkerId::new("w").unwrap())
        .config(config.clone())
        .start()
        .await
        .unwrap();
    tokio::time::sleep(config.lease_duration - secs(1)).await;

    // Just before that value would expire, the lease is deleted and re-created, taken and
    // renewed back to counter 3 in tenure 1: its owner is alive and just wrote it.
    let deleted = store
        .delete(&key, first.counter, first.tenure, deadline())
        .await
        .unwrap();
    assert!(matches!(deleted, Outcome::Done(_)), "{deleted:?}");
    let again = held_at_counter_three(&store, &key, &other).await;
    assert_ne!(again.nonce, first.nonce);
    let written = Instant::now();

    // Nobody renews it from here: w may take it once a whole lease duration has passed since
    // it first saw this item, and not before.
    while Instant::now() < written + config.lease_duration {
        let now = store.get(&key, deadline()).await.unwrap().unwrap();
        assert_eq!(
            now.owner.as_ref(),
            Some(&other),
            "taken {:?} after its owner wrote it",
            Instant::now() - written
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(config.lease_duration).await;
    let now = store.get(&key, deadline()).await.unwrap().unwrap();
    assert_eq!(now.owner.as_ref().map(WorkerId::as_str), Some("w"));
    worker.shutdown().await;
}
