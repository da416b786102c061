//! A leaving worker takes nothing more, and its peers know it at once: the leases it releases
//! while others are still winding down are taken by the peers straight away, not left to it
//! until its shutdown ends (paused time, in-memory store).
//!
//! Found by the fault campaign (schedule 1983287793525533643): a worker that left while a
//! peer waited on handoffs from it was still counted at its membership record, so the balance
//! gave the leases it had just released back to it, and they went unprocessed until its
//! shutdown ended 30 s later.

use crate::cases::{base, figure};
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::store::memory::InMemoryStore;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn the_leases_a_leaving_worker_releases_are_taken_while_it_winds_down() {
    let config = base();
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), config.clone(), 8);
    // a's application lets go of half its leases at once and of the others after 25 s.
    let app = App::Uneven {
        fast: Duration::from_millis(100),
        slow: secs(25),
    };
    fleet.start("a", app).await;
    fleet.until(secs(30), |f| f.counts() == [8]).await;
    fleet
        .start("b", App::FinishAfter(Duration::from_millis(100)))
        .await;
    // Let b ask a for its share: a's application takes 25 s to hand the slow ones over.
    fleet.idle(config.effective_taker_interval() * 2).await;

    let shutdown = fleet.begin_leave("a");

    // The leases a released at once are processed by b within a taker round or two, long
    // before a's slow leases let a go.
    let released = fleet
        .until(secs(20), |f| {
            let released: Vec<String> = f
                .records()
                .into_iter()
                .filter_map(|r| match r {
                    Record::Released { worker, key } if worker == "a" => Some(key),
                    _ => None,
                })
                .collect();
            !released.is_empty()
                && released
                    .iter()
                    .all(|key| f.first_start("b", Some(key.as_str())).is_some())
        })
        .await;
    figure(
        "leaving worker: its released leases processed by a peer",
        released,
    );
    assert!(
        released <= config.effective_taker_interval() * 2,
        "b took a's released leases {released:?} after a began to leave"
    );
    assert!(
        !shutdown.is_finished(),
        "a's shutdown ended before its slow leases let go"
    );
    shutdown.await.unwrap();
    fleet.until(secs(60), |f| f.counts() == [8]).await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_signal_leaves_gracefully_and_stopped_resolves_once_the_lease_is_released() {
    use shardlease::{LeaseEvent, LeaseKey, LeaseStore, StopReason, Worker, WorkerId};
    use tokio::time::{timeout, Instant};

    let store = Arc::new(InMemoryStore::new());
    let key = LeaseKey::new("shard-0").unwrap();
    let (fire, signal) = tokio::sync::oneshot::channel::<()>();
    let (worker, mut events) = Worker::builder(store.clone(), WorkerId::new("a").unwrap())
        .config(base())
        .shards(vec![key.clone()])
        .graceful_shutdown_on(async {
            let _ = signal.await;
        })
        .start()
        .await
        .unwrap();
    let mut grant = loop {
        if let LeaseEvent::Acquired(grant) = events.recv().await.unwrap() {
            break grant;
        }
    };
    assert!(
        timeout(secs(60), worker.stopped()).await.is_err(),
        "stopped before any signal"
    );

    fire.send(()).unwrap();
    let reason = grant.stopped().await;
    assert!(matches!(reason, StopReason::Shutdown { .. }), "{reason:?}");
    assert!(
        timeout(secs(1), worker.stopped()).await.is_err(),
        "stopped before the application finished its lease"
    );
    grant.checkpoint("42").await.unwrap();
    grant.finish();
    timeout(base().shutdown_timeout, worker.stopped())
        .await
        .expect("the worker left after the signal");

    let lease = store
        .get(&key, Instant::now() + secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.owner, None, "the lease was released: {lease:?}");
    assert_eq!(lease.checkpoint.as_deref(), Some("42"));
    let mut released = false;
    while let Some(event) = events.recv().await {
        released |= matches!(event, LeaseEvent::Released { key: k } if k == key);
    }
    assert!(released, "no Released event before the stream ended");
    // A shutdown after the signal's departure has nothing left to do.
    timeout(secs(1), worker.shutdown())
        .await
        .expect("shutdown after the departure returns at once");
}
