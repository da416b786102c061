//! A table written by an earlier build, whose workers renewed every lease and kept their
//! membership records by heartbeats (the lease protocol, since removed): a worker refuses to
//! start while such workers live, and clears the records stopped ones left (paused time,
//! in-memory store). The earlier build's worker is played here by the store calls it made.

use std::sync::Arc;
use std::time::Duration;

use shardlease::lease::{Incarnation, NewLease};
use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::store::Outcome;
use shardlease::worker::{LeaseEvent, LeaseEvents, WorkerError};
use shardlease::{LeaseKey, Worker, WorkerId};
use tokio::task::JoinHandle;
use tokio::time::Instant;

fn id(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn start(
    store: Arc<dyn LeaseStore>,
    name: &str,
) -> Result<(Worker, LeaseEvents), WorkerError> {
    Worker::builder(store, id(name)).start().await
}

async fn create(store: &InMemoryStore, keys: &[&str]) {
    for name in keys {
        let _ = store.create(NewLease::new(key(name)), far()).await.unwrap();
    }
}

async fn member_ids(store: &InMemoryStore) -> Vec<String> {
    let snapshot = store.snapshot(far()).await.unwrap();
    snapshot
        .members
        .iter()
        .map(|m| m.worker.to_string())
        .collect()
}

/// A worker of the earlier build: it takes `keys`, then renews them and heartbeats its
/// membership record every 10/3 s, as that build's lease protocol did, until aborted.
async fn earlier_build_worker(store: &InMemoryStore, name: &str, keys: &[&str]) -> JoinHandle<()> {
    let (worker, incarnation) = (id(name), Incarnation::new(7));
    let mut tenures = Vec::new();
    for name in keys {
        let current = store.get(&key(name), far()).await.unwrap().unwrap();
        let taken = store
            .take(
                &key(name),
                current.nonce,
                &worker,
                incarnation,
                current.counter,
                far(),
            )
            .await
            .unwrap();
        tenures.push((key(name), current.nonce, taken.done().unwrap().tenure));
    }
    let _ = store
        .heartbeat(&worker, incarnation, None, None, far())
        .await
        .unwrap();
    let store = store.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10) / 3).await;
            let _ = store
                .heartbeat(&worker, incarnation, None, None, far())
                .await
                .unwrap();
            for (key, nonce, tenure) in &tenures {
                let renewed = store
                    .renew(key, *nonce, &worker, *tenure, None, far())
                    .await;
                assert!(matches!(renewed, Ok(Outcome::Done(_))), "{renewed:?}");
            }
        }
    })
}

/// Keeps every grant a worker is given, so that its leases stay processed.
fn keep_grants(mut events: LeaseEvents) {
    tokio::spawn(async move {
        let mut grants = Vec::new();
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(grant) = event {
                grants.push(grant);
            }
        }
    });
}

/// The refusal, with the live workers it names.
fn refused_for(result: Result<(Worker, LeaseEvents), WorkerError>) -> (String, Vec<String>) {
    match result {
        Err(WorkerError::EarlierBuild { worker, others }) => {
            let text = WorkerError::EarlierBuild {
                worker,
                others: others.clone(),
            }
            .to_string();
            (text, others.iter().map(|w| w.to_string()).collect())
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok((worker, _)) => panic!(
            "worker {} started on a table of an earlier build's live workers",
            worker.id()
        ),
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_refuses_a_table_where_workers_of_an_earlier_build_live() {
    let store = InMemoryStore::new();
    create(&store, &["s1", "s2"]).await;
    let old = earlier_build_worker(&store, "old", &["s1", "s2"]).await;

    let (text, others) = refused_for(start(Arc::new(store.clone()), "new").await);
    assert_eq!(others, ["old"]);
    assert!(text.contains("earlier shardlease build"), "{text}");
    assert!(
        text.contains("Stop every worker of the earlier build"),
        "{text}"
    );
    // The refused worker left nothing, and took nothing of the live one's.
    assert_eq!(member_ids(&store).await, ["old"]);
    for name in ["s1", "s2"] {
        let lease = store.get(&key(name), far()).await.unwrap().unwrap();
        assert_eq!(lease.owner, Some(id("old")), "{name}");
    }
    old.abort();
}

/// A fleet moved to this build: a crashed worker of the earlier build left its record and a
/// lease. The first worker waits a lease duration, clears the record, starts, and takes the
/// lease as any orphan.
#[tokio::test(start_paused = true)]
async fn records_of_stopped_workers_of_an_earlier_build_are_cleared() {
    let store = InMemoryStore::new();
    create(&store, &["s1"]).await;
    let gone = earlier_build_worker(&store, "gone", &["s1"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    gone.abort();

    let began = Instant::now();
    let (worker, events) = start(Arc::new(store.clone()), "new").await.unwrap();
    assert!(began.elapsed() >= shardlease::WorkerConfig::default().lease_duration);
    assert_eq!(member_ids(&store).await, ["new"]);
    keep_grants(events);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(worker.held_leases(), [key("s1")]);
    worker.shutdown().await;
}

/// A worker of the earlier build writes its first heartbeat while this one starts, after this
/// one's first look: this one sees it in its second look (after writing its own record),
/// refuses, and leaves no record behind.
#[tokio::test(start_paused = true)]
async fn a_worker_of_an_earlier_build_starting_meanwhile_is_seen_after_the_record() {
    let store = InMemoryStore::new();
    create(&store, &["s1", "s2"]).await;
    let (slow, faults) = FaultyStore::new(store.clone());
    faults.set_latency(Duration::from_millis(10));
    let old = {
        let store = store.clone();
        tokio::spawn(async move {
            // After the starting worker's first scan (10 ms), before its second.
            tokio::time::sleep(Duration::from_millis(15)).await;
            let _ = store
                .heartbeat(&id("old"), Incarnation::new(7), None, None, far())
                .await
                .unwrap();
        })
    };
    let (_, others) = refused_for(start(Arc::new(slow), "new").await);
    assert_eq!(others, ["old"]);
    old.await.unwrap();
    assert_eq!(member_ids(&store).await, ["old"]);
}
