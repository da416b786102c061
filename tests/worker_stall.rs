//! A lease nobody processes must not stay held: grants the application drops, panics with or
//! never receives, on paused tokio time over the in-memory store.

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseEvents, LeaseGrant, Stall, StopReason, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

async fn start(store: Arc<dyn LeaseStore>, name: &str, shards: &[&str]) -> (Worker, LeaseEvents) {
    Worker::builder(store, WorkerId::new(name).unwrap())
        .shards(shards.iter().map(|s| key(s)).collect())
        .start()
        .await
        .unwrap()
}

/// The next event within `limit` of (paused) time; panics naming `what` otherwise.
async fn next(events: &mut LeaseEvents, what: &str) -> LeaseEvent {
    match tokio::time::timeout(secs(60), events.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the event stream ended while waiting for {what}"),
        Err(_) => panic!("no event within 60 s while waiting for {what}"),
    }
}

async fn next_grant(events: &mut LeaseEvents) -> LeaseGrant {
    loop {
        if let LeaseEvent::Acquired(grant) = next(events, "a grant").await {
            return grant;
        }
    }
}

/// The events up to the next grant, in order, as short strings (the grant itself last).
async fn until_grant(events: &mut LeaseEvents) -> (Vec<String>, LeaseGrant) {
    let mut seen = Vec::new();
    loop {
        match next(events, "the lease to come back").await {
            LeaseEvent::Acquired(grant) => return (seen, grant),
            LeaseEvent::Abandoned { key } => seen.push(format!("abandoned {key}")),
            LeaseEvent::Released { key } => seen.push(format!("released {key}")),
            LeaseEvent::Lost { key } => seen.push(format!("lost {key}")),
            other => seen.push(format!("{other:?}")),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_grant_is_reported_abandoned_and_its_lease_released_and_placed_again() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let (worker, mut events) = start(Arc::clone(&store), "a", &["s"]).await;
    let first = next_grant(&mut events).await;
    let tenure = first.tenure();
    // The application forgets the lease: no finish, no stop request.
    drop(first);
    let (seen, second) = until_grant(&mut events).await;
    assert_eq!(seen, ["abandoned s", "released s"]);
    // Released, then taken again (here by the only worker): a new tenure, processed again.
    assert!(second.tenure() > tenure, "{} vs {tenure}", second.tenure());
    assert_eq!(worker.held_leases(), [key("s")]);
    assert!(worker.monitor().nothing_stalled());
    drop(second);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_application_task_gives_its_lease_back_to_the_fleet() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let (a, mut a_events) = start(Arc::clone(&store), "a", &["s"]).await;
    let grant = next_grant(&mut a_events).await;
    let task = tokio::spawn(async move {
        let _grant = grant;
        panic!("the processor met a poison record");
    });
    assert!(task.await.unwrap_err().is_panic());
    let (seen, _again) = until_grant(&mut a_events).await;
    assert_eq!(seen, ["abandoned s", "released s"]);
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn finishing_an_active_grant_without_a_stop_releases_it_without_calling_it_abandoned() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let (worker, mut events) = start(Arc::clone(&store), "a", &["s"]).await;
    next_grant(&mut events).await.finish();
    let (seen, again) = until_grant(&mut events).await;
    assert_eq!(seen, ["released s"]);
    drop(again);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_grant_waiting_unread_in_the_event_stream_is_reported_stalled() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let (worker, mut events) = start(Arc::clone(&store), "a", &["s", "t"]).await;
    let monitor = worker.monitor();
    tokio::time::sleep(secs(5)).await;
    assert_eq!(worker.held_leases(), [key("s"), key("t")]);
    assert_eq!(
        monitor.stalled_leases(),
        [
            (key("s"), Stall::Undelivered),
            (key("t"), Stall::Undelivered)
        ]
    );
    assert!(!monitor.nothing_stalled());
    // Once the stream is read the queued grants reach the application: each lease stops
    // being undelivered as its own grant is read.
    let first = next_grant(&mut events).await;
    let other = if *first.key() == key("s") {
        key("t")
    } else {
        key("s")
    };
    assert_eq!(monitor.stalled_leases(), [(other, Stall::Undelivered)]);
    let (s, t) = (first, next_grant(&mut events).await);
    assert!(monitor.stalled_leases().is_empty());
    assert!(monitor.nothing_stalled());
    drop((s, t));
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_lease_whose_release_cannot_be_written_stays_stalled_until_it_expires() {
    let memory = Arc::new(InMemoryStore::new());
    let (faulty, faults) = FaultyStore::new(memory);
    let store: Arc<dyn LeaseStore> = Arc::new(faulty);
    let config = WorkerConfig::default();
    let (worker, mut events) = Worker::builder(store, WorkerId::new("a").unwrap())
        .config(config.clone())
        .shards(vec![key("s")])
        .start()
        .await
        .unwrap();
    let monitor = worker.monitor();
    let grant = next_grant(&mut events).await;
    faults.set_cut_off(true);
    drop(grant);
    assert!(matches!(
        next(&mut events, "the abandonment").await,
        LeaseEvent::Abandoned { .. }
    ));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(monitor.stalled_leases(), [(key("s"), Stall::Abandoned)]);
    assert!(worker.held_leases().is_empty(), "nobody may process it");
    // Its validity here ends within a lease duration: then it is the peers' to take.
    tokio::time::sleep(config.lease_duration).await;
    assert!(monitor.nothing_stalled(), "{:?}", monitor.stalled_leases());
    faults.set_cut_off(false);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_grant_dropped_after_a_stop_request_still_finishes_the_handoff() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let (a, mut a_events) = start(Arc::clone(&store), "a", &["s", "t"]).await;
    let mut grants = vec![
        next_grant(&mut a_events).await,
        next_grant(&mut a_events).await,
    ];
    let (b, mut b_events) = start(Arc::clone(&store), "b", &["s", "t"]).await;
    // b asks for one of them; a's application drops the grant once asked.
    let keys = [grants[0].key().clone(), grants[1].key().clone()];
    let (asked, reason) = {
        let [first, second] = &mut grants[..] else {
            unreachable!("two grants")
        };
        let stopped = async {
            tokio::select! {
                reason = first.stopped() => (keys[0].clone(), reason),
                reason = second.stopped() => (keys[1].clone(), reason),
            }
        };
        tokio::time::timeout(secs(60), stopped)
            .await
            .expect("a stop within 60 s")
    };
    assert!(matches!(reason, StopReason::Handoff { .. }), "{reason:?}");
    grants.retain(|g| *g.key() != asked);
    let moved = next_grant(&mut b_events).await;
    assert_eq!(*moved.key(), asked);
    loop {
        match next(&mut a_events, "the handoff").await {
            LeaseEvent::HandedOff { key, .. } => break assert_eq!(key, asked),
            LeaseEvent::Abandoned { key } => panic!("{key} was abandoned"),
            _ => {}
        }
    }
    drop((grants, moved));
    a.shutdown().await;
    b.shutdown().await;
}
