//! What a probe reads from `WorkerMonitor`: leases whose application makes no progress within
//! the configured window (`Stall::NoProgress`), `healthy()` and `ready()` from start to stop,
//! on paused tokio time over the in-memory store.

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseEvents, LeaseGrant, Stall, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

async fn start(
    store: Arc<dyn LeaseStore>,
    config: WorkerConfig,
    shards: &[&str],
) -> (Worker, LeaseEvents) {
    Worker::builder(store, WorkerId::new("a").unwrap())
        .config(config)
        .shards(shards.iter().map(|s| key(s)).collect())
        .start()
        .await
        .unwrap()
}

async fn next_grant(events: &mut LeaseEvents) -> LeaseGrant {
    loop {
        match tokio::time::timeout(secs(60), events.recv()).await {
            Ok(Some(LeaseEvent::Acquired(grant))) => return grant,
            Ok(Some(_)) => {}
            Ok(None) => panic!("the event stream ended while waiting for a grant"),
            Err(_) => panic!("no grant within 60 s"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_without_progress_for_the_window_is_stalled_until_the_application_reports_some() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let config = WorkerConfig::default().progress_window(Some(secs(30)));
    let (worker, mut events) = start(store, config, &["s", "t"]).await;
    let monitor = worker.monitor();
    let (s, t) = (next_grant(&mut events).await, next_grant(&mut events).await);
    let (s, t) = if *s.key() == key("s") { (s, t) } else { (t, s) };
    let checkpointer = t.checkpointer();

    tokio::time::sleep(secs(20)).await;
    s.progress();
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    // t: 31 s since its grant, nothing; s: 11 s since its progress.
    tokio::time::sleep(secs(11)).await;
    assert_eq!(monitor.stalled_leases(), [(key("t"), Stall::NoProgress)]);
    assert!(!monitor.healthy());
    assert!(!monitor.nothing_stalled());
    assert!(monitor.ready(), "progress is not a readiness matter");

    // A checkpoint is progress too (here from a clone of the checkpointer).
    checkpointer.checkpoint("42").await.unwrap();
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    tokio::time::sleep(secs(25)).await;
    assert_eq!(monitor.stalled_leases(), [(key("s"), Stall::NoProgress)]);
    s.progress();
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    drop((s, t));
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_window_a_quiet_lease_is_not_stalled() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    assert_eq!(WorkerConfig::default().progress_window, None);
    let (worker, mut events) = start(store, WorkerConfig::default(), &["s"]).await;
    let monitor = worker.monitor();
    let grant = next_grant(&mut events).await;
    tokio::time::sleep(secs(3600)).await;
    assert_eq!(worker.held_leases(), [key("s")]);
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    drop(grant);
    worker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_asked_to_stop_is_judged_by_its_stop_deadline_not_by_progress() {
    let store: Arc<dyn LeaseStore> = Arc::new(InMemoryStore::new());
    let config = WorkerConfig::default()
        .progress_window(Some(secs(5)))
        .shutdown_timeout(secs(30));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (worker, mut events) = Worker::builder(store, WorkerId::new("a").unwrap())
        .config(config)
        .shards(vec![key("s")])
        .graceful_shutdown_on(async move {
            let _ = rx.await;
        })
        .start()
        .await
        .unwrap();
    let monitor = worker.monitor();
    let mut grant = next_grant(&mut events).await;
    assert!(monitor.ready() && monitor.healthy());
    tx.send(()).unwrap();
    grant.stopped().await;
    // Leaving, the application still finishing: not ready, still alive.
    tokio::time::sleep(secs(10)).await;
    assert!(!monitor.ready());
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    grant.finish();
    worker.stopped().await;
    assert!(!monitor.ready());
    assert!(!monitor.healthy(), "a stopped worker is not alive");
}

/// A worker cut off from its store stops being ready, and is ready again once the store
/// answers; it stays alive throughout (a restart would not help).
async fn ready_follows_the_store(
    fault: &str,
    cut: impl Fn(&shardlease::store::fault::Faults, bool),
) {
    let (faulty, faults) = FaultyStore::new(InMemoryStore::new());
    let config = WorkerConfig::default();
    let (worker, mut events) = start(Arc::new(faulty), config.clone(), &["s"]).await;
    let monitor = worker.monitor();
    let grant = next_grant(&mut events).await;
    assert!(monitor.ready());
    cut(&faults, true);
    tokio::time::sleep(config.lease_duration * 2).await;
    assert!(!monitor.ready(), "{fault}: ready while cut off");
    assert!(monitor.healthy(), "{:?}", monitor.stalled_leases());
    cut(&faults, false);
    let mut waited = Duration::ZERO;
    while !monitor.ready() {
        assert!(
            waited < config.lease_duration * 3,
            "{fault}: never ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    drop(grant);
    worker.shutdown().await;
    assert!(!monitor.ready() && !monitor.healthy());
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_session_lapsed_is_not_ready_until_a_beat_lands() {
    ready_follows_the_store("cut off", |faults, on| faults.set_cut_off(on)).await;
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_store_does_not_answer_is_not_ready_until_it_does() {
    ready_follows_the_store("hung", |faults, on| faults.set_hang(on)).await;
}
