//! One table, one protocol: a worker refuses to start while live workers of the other
//! protocol use its table, and clears the records stopped ones left (paused time, in-memory
//! store).

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, WorkerError};
use shardlease::{
    Incarnation, LeaseKey, NewLease, Outcome, Protocol, Worker, WorkerConfig, WorkerId,
};
use tokio::time::Instant;

fn id(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

fn config(protocol: Protocol) -> WorkerConfig {
    WorkerConfig::default().protocol(protocol)
}

async fn start(
    store: Arc<dyn LeaseStore>,
    name: &str,
    protocol: Protocol,
) -> Result<Worker, WorkerError> {
    Worker::builder(store, id(name))
        .config(config(protocol))
        .start()
        .await
}

async fn create(store: &InMemoryStore, keys: &[&str]) {
    for key in keys {
        let lease = NewLease::new(LeaseKey::new(*key).unwrap());
        let _ = store.create(lease, far()).await.unwrap();
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn member_ids(store: &InMemoryStore) -> Vec<String> {
    let snapshot = store.snapshot(far()).await.unwrap();
    snapshot
        .members
        .iter()
        .map(|m| m.worker.to_string())
        .collect()
}

/// Keeps every grant a worker is given, so that its leases stay processed.
fn keep_grants(worker: &mut Worker) {
    let mut events = worker.take_events().unwrap();
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
fn refused_for(result: Result<Worker, WorkerError>) -> (String, Vec<String>) {
    match result {
        Err(error @ WorkerError::MixedProtocols { .. }) => {
            let text = error.to_string();
            let WorkerError::MixedProtocols { others, .. } = error else {
                unreachable!()
            };
            (text, others.iter().map(|w| w.to_string()).collect())
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(worker) => panic!(
            "worker {} started on a table of the other protocol",
            worker.id()
        ),
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_refuses_a_table_where_lease_workers_live() {
    let store = InMemoryStore::new();
    create(&store, &["s1", "s2"]).await;
    let mut old = start(Arc::new(store.clone()), "old", Protocol::Leases)
        .await
        .unwrap();
    keep_grants(&mut old);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(old.held_leases().len(), 2);

    let (text, others) =
        refused_for(start(Arc::new(store.clone()), "new", Protocol::Sessions).await);
    assert_eq!(others, ["old"]);
    assert!(text.contains("Protocol::Leases"), "{text}");
    assert!(text.contains("Stop those workers"), "{text}");
    // The refused worker left nothing, and the live one kept its leases.
    assert_eq!(member_ids(&store).await, ["old"]);
    assert_eq!(old.held_leases().len(), 2);
    old.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_worker_refuses_a_table_where_sessions_live() {
    let store = InMemoryStore::new();
    create(&store, &["s1", "s2"]).await;
    let mut session = start(Arc::new(store.clone()), "new", Protocol::Sessions)
        .await
        .unwrap();
    keep_grants(&mut session);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(session.held_leases().len(), 2);

    let (text, others) = refused_for(start(Arc::new(store.clone()), "old", Protocol::Leases).await);
    assert_eq!(others, ["new"]);
    assert!(text.contains("Protocol::Sessions"), "{text}");
    assert_eq!(member_ids(&store).await, ["new"]);
    // Had it started, it would have taken the session's leases as expired by now.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(session.held_leases().len(), 2);
    session.shutdown().await;
}

/// A fleet moved from the lease protocol to sessions: a crashed worker of the old protocol
/// left its record and a lease. The first session waits a lease duration, clears the record,
/// starts, and takes the lease as any orphan.
#[tokio::test(start_paused = true)]
async fn records_of_stopped_workers_of_the_other_protocol_are_cleared() {
    let store = InMemoryStore::new();
    create(&store, &["s1"]).await;
    let gone = id("gone");
    let incarnation = Incarnation::new(7);
    let _ = store
        .heartbeat(&gone, incarnation, None, None, far())
        .await
        .unwrap();
    let key = LeaseKey::new("s1").unwrap();
    let taken = store
        .take(&key, &gone, incarnation, 0, far())
        .await
        .unwrap();
    assert!(matches!(taken, Outcome::Done(_)));

    let began = Instant::now();
    let mut session = start(Arc::new(store.clone()), "new", Protocol::Sessions)
        .await
        .unwrap();
    assert!(began.elapsed() >= WorkerConfig::default().lease_duration);
    assert_eq!(member_ids(&store).await, ["new"]);
    keep_grants(&mut session);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(session.held_leases(), [key]);
    session.shutdown().await;
}

/// Two workers of different protocols start at the same instant on an empty table: neither
/// sees the other before writing its own record. Whichever writes second sees the first one's
/// record afterwards, so they do not both start (here both refuse).
#[tokio::test(start_paused = true)]
async fn workers_of_two_protocols_starting_together_do_not_both_start() {
    let store = InMemoryStore::new();
    create(&store, &["s1", "s2"]).await;
    let (slow, slow_faults) = FaultyStore::new(store.clone());
    slow_faults.set_latency(Duration::from_millis(10));
    let (fast, fast_faults) = FaultyStore::new(store.clone());
    fast_faults.set_latency(Duration::from_millis(7));
    let (leases, sessions) = tokio::join!(
        start(Arc::new(slow), "old", Protocol::Leases),
        start(Arc::new(fast), "new", Protocol::Sessions),
    );
    let started: Vec<String> = [&leases, &sessions]
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|w| w.id().to_string()))
        .collect();
    assert!(started.len() < 2, "both protocols started on one table");
    for result in [leases, sessions] {
        match result {
            Ok(worker) => worker.shutdown().await,
            Err(error) => assert!(
                matches!(error, WorkerError::MixedProtocols { .. }),
                "{error}"
            ),
        }
    }
}
