//! A policy that steals (KCL's, `KclBalance`) moves leases from live owners by handoff: the
//! owner is asked, its application finishes and checkpoints, and it hands the lease over;
//! nobody takes a lease from under a live session. (A take would be reported only once the
//! owner acknowledged it, but that wait lives in the taking process alone: should it die
//! first, the table names its dead session, whose leases the fleet gives on at once while the
//! old owner may still process them.) Paused time, in-memory store.

use std::sync::Arc;
use std::time::Duration;

use shardlease::balance::KclBalance;
use shardlease::store::memory::InMemoryStore;
use shardlease::worker::{LeaseEvent, LeaseEvents};
use shardlease::{LeaseKey, Worker, WorkerId};

/// Runs an application that finishes each lease as soon as it is asked to stop; returns the
/// events it saw.
fn application(mut events: LeaseEvents) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(mut grant) => {
                    seen.push(format!("acquired {}", grant.key()));
                    tokio::spawn(async move {
                        grant.stopped().await;
                        grant.finish();
                    });
                }
                LeaseEvent::HandedOff { key, to } => seen.push(format!("handed {key} to {to}")),
                LeaseEvent::Lost { key } => seen.push(format!("lost {key}")),
                _ => {}
            }
        }
        seen
    })
}

#[tokio::test(start_paused = true)]
async fn a_kcl_steal_from_a_live_owner_is_a_graceful_handoff() {
    let store = Arc::new(InMemoryStore::new());
    let keys: Vec<LeaseKey> = (0..4)
        .map(|i| LeaseKey::new(format!("s{i}")).unwrap())
        .collect();
    let (first, first_events) = Worker::builder(store.clone(), WorkerId::new("a").unwrap())
        .policy(KclBalance::default())
        .shards(keys.clone())
        .start()
        .await
        .unwrap();
    let first_app = application(first_events);
    tokio::time::sleep(Duration::from_secs(30)).await;

    let (second, second_events) = Worker::builder(store.clone(), WorkerId::new("b").unwrap())
        .policy(KclBalance::default())
        .start()
        .await
        .unwrap();
    let second_app = application(second_events);
    tokio::time::sleep(Duration::from_secs(120)).await;

    second.shutdown().await;
    first.shutdown().await;
    let (first_seen, second_seen) = (first_app.await.unwrap(), second_app.await.unwrap());
    let handed = first_seen
        .iter()
        .filter(|e| e.starts_with("handed"))
        .count();
    assert!(
        handed >= 2,
        "b took its share from a by handoff: a saw {first_seen:?}, b saw {second_seen:?}"
    );
    let lost: Vec<&String> = first_seen
        .iter()
        .filter(|e| e.starts_with("lost"))
        .collect();
    assert!(lost.is_empty(), "a lease was taken from under a: {lost:?}");
}
