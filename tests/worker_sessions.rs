//! The session protocol on paused time over the in-memory store: a lease deleted or taken by
//! hand under its holder is noticed by the fleet's slow scan and dropped by the holder, which
//! renews nothing any more and so would otherwise never learn of it.

use std::sync::Arc;
use std::time::Duration;

use shardlease::lease::{Incarnation, Lease};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseEvents};
use shardlease::{LeaseKey, Worker, WorkerConfig, WorkerId};
use tokio::time::Instant;

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

fn config() -> WorkerConfig {
    WorkerConfig::default()
}

/// Keeps every grant alive (a processing application) until `key` is lost (`lost`) or
/// acquired (`!lost`) here; `false` if not by `by`.
async fn until(events: &mut LeaseEvents, key: &LeaseKey, lost: bool, by: Instant) -> bool {
    let mut grants = Vec::new();
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(LeaseEvent::Acquired(grant)) => {
                    let hit = !lost && grant.key() == key;
                    grants.push(grant);
                    if hit {
                        return true;
                    }
                }
                Some(LeaseEvent::Lost { key: gone }) if lost && gone == *key => return true,
                Some(_) => {}
                None => return false,
            },
            _ = tokio::time::sleep_until(by) => return false,
        }
    }
}

/// Starts two workers over `shards`; returns them with their event streams once every lease
/// is held (grants kept by a task each).
async fn fleet(store: &InMemoryStore, shards: &[&str]) -> Vec<(Worker, LeaseEvents)> {
    let mut workers = Vec::new();
    for id in ["a", "b"] {
        let (worker, events) = Worker::builder(Arc::new(store.clone()), WorkerId::new(id).unwrap())
            .config(config())
            .shards(shards.iter().map(|s| key(s)).collect())
            .start()
            .await
            .unwrap();
        workers.push((worker, events));
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    workers
}

/// A lease `worker` holds, as the table has it now.
async fn held_by(store: &InMemoryStore, worker: &str) -> Lease {
    let snapshot = store
        .snapshot(Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
    snapshot
        .leases
        .into_iter()
        .find(|l| l.owner.as_ref().is_some_and(|o| o.as_str() == worker))
        .unwrap_or_else(|| panic!("{worker} holds a lease"))
}

/// An operator gives `victim` to somebody else, by hand.
async fn take_by_hand(store: &InMemoryStore, victim: &Lease) {
    let taken = store
        .take(
            &victim.key,
            victim.nonce,
            &WorkerId::new("operator").unwrap(),
            Incarnation::new(7),
            victim.counter,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(taken.is_done(), "{taken:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_deleted_by_hand_is_dropped_by_its_holder_within_the_slow_scan() {
    let store = InMemoryStore::new();
    let mut workers = fleet(&store, &["s1", "s2", "s3", "s4"]).await;
    let victim = held_by(&store, "b").await;
    // Let the slow scan see it held before the edit.
    tokio::time::sleep(config().slow_scan_interval).await;
    let deleted = store
        .delete(
            &victim.key,
            victim.nonce,
            victim.counter,
            victim.tenure,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(deleted.is_done(), "{deleted:?}");
    let edited = Instant::now();
    let config = config();
    let by = edited + config.slow_scan_interval + config.effective_renew_interval() * 2;
    let (_, events) = &mut workers[1];
    assert!(
        until(events, &victim.key, true, by).await,
        "b still holds {} {:?} after the edit",
        victim.key,
        Instant::now() - edited
    );
    let noticed = Instant::now() - edited;
    eprintln!("a lease deleted by hand was dropped by its holder {noticed:?} after the edit");
    assert!(noticed <= config.slow_scan_interval + config.effective_renew_interval() * 2);
    for (worker, _) in workers {
        worker.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_by_hand_is_dropped_by_its_holder_within_the_slow_scan() {
    let store = InMemoryStore::new();
    let mut workers = fleet(&store, &["s1", "s2", "s3", "s4"]).await;
    let victim = held_by(&store, "a").await;
    tokio::time::sleep(config().slow_scan_interval).await;
    // An operator gives the lease to somebody else, by hand.
    take_by_hand(&store, &victim).await;
    let edited = Instant::now();
    let config = config();
    let by = edited + config.slow_scan_interval + config.effective_renew_interval() * 2;
    let (_, events) = &mut workers[0];
    assert!(
        until(events, &victim.key, true, by).await,
        "a still holds {} after the edit",
        victim.key
    );
    for (worker, _) in workers {
        worker.shutdown().await;
    }
}

/// A lease given whose notice never reached its receiver (the give's answer was lost, or
/// the notice failed; here, given by hand) was nobody's to start: its receiver did not know,
/// and a lease given to a live session never expires. The worker doing the chores tells the
/// receiver again once it has seen the lease given and untaken for a lease duration.
#[tokio::test(start_paused = true)]
async fn a_lease_given_without_a_notice_is_taken_by_its_receiver() {
    let store = InMemoryStore::new();
    let mut workers = fleet(&store, &["s1", "s2", "s3", "s4"]).await;
    let victim = held_by(&store, "a").await;
    let given = store
        .give(
            &victim.key,
            victim.nonce,
            &WorkerId::new("b").unwrap(),
            victim.counter,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(given.is_done(), "{given:?}");
    let edited = Instant::now();
    let config = config();
    let by = edited
        + config.slow_scan_interval
        + config.lease_duration
        + config.effective_renew_interval() * 2
        + config.quiet_period;
    let (_, events) = &mut workers[1];
    assert!(
        until(events, &victim.key, false, by).await,
        "b has not taken {} {:?} after it was given to it",
        victim.key,
        Instant::now() - edited
    );
    eprintln!(
        "a lease given without a notice was taken {:?} after the give",
        Instant::now() - edited
    );
    for (worker, _) in workers {
        worker.shutdown().await;
    }
}

/// The next grant of `key` among `events` (grants of other leases are kept alive in `keep`).
async fn grant_of(
    events: &mut LeaseEvents,
    key: &LeaseKey,
    keep: &mut Vec<shardlease::worker::LeaseGrant>,
) -> shardlease::worker::LeaseGrant {
    loop {
        match events.recv().await {
            Some(LeaseEvent::Acquired(grant)) if grant.key() == key => return grant,
            Some(LeaseEvent::Acquired(grant)) => keep.push(grant),
            Some(_) => {}
            None => panic!("no grant of {key}"),
        }
    }
}

/// A checkpoint refused (the lease moved on under its holder, here by hand) loses the lease
/// at once: the application is told, instead of working on until the slow scan tells it.
#[tokio::test(start_paused = true)]
async fn a_refused_checkpoint_loses_the_lease_at_once() {
    let store = InMemoryStore::new();
    let mut workers = fleet(&store, &["s1", "s2", "s3", "s4"]).await;
    let victim = held_by(&store, "a").await;
    let (_, events) = &mut workers[0];
    let mut keep = Vec::new();
    let mut grant = grant_of(events, &victim.key, &mut keep).await;
    take_by_hand(&store, &victim).await;
    let refused = grant.checkpoint("42").await;
    assert!(refused.is_err(), "{refused:?}");
    // Paused time: the loss is immediate, not a matter of speed.
    let lost = tokio::time::timeout(Duration::from_millis(100), grant.lost()).await;
    assert!(lost.is_ok(), "the grant was not told its lease was lost");
    for (worker, _) in workers {
        worker.shutdown().await;
    }
}

/// A lease given to this worker's id while held here in an earlier tenure (another process
/// of the id took it meanwhile, and it was given back) is no longer what the application
/// works on: it is lost here and taken anew, in the new tenure.
#[tokio::test(start_paused = true)]
async fn a_lease_given_back_in_a_new_tenure_is_dropped_and_taken_anew() {
    let store = InMemoryStore::new();
    let mut workers = fleet(&store, &["s1", "s2", "s3", "s4"]).await;
    let victim = held_by(&store, "a").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let a = WorkerId::new("a").unwrap();
    let twin = store
        .take(
            &victim.key,
            victim.nonce,
            &a,
            Incarnation::new(7),
            victim.counter,
            deadline,
        )
        .await
        .unwrap()
        .done()
        .expect("taken by a twin");
    let given = store
        .give(&victim.key, victim.nonce, &a, twin.counter, deadline)
        .await
        .unwrap()
        .done()
        .expect("given back");
    let member = store
        .get_member(&a, true, deadline)
        .await
        .unwrap()
        .expect("a has a session");
    let told = store
        .notify(
            &a,
            member.incarnation.expect("open"),
            &[victim.key.as_str().to_owned()],
            deadline,
        )
        .await
        .unwrap();
    assert!(told.is_done(), "{told:?}");
    let config = config();
    let (_, events) = &mut workers[0];
    let by = Instant::now() + config.effective_renew_interval() * 2 + config.quiet_period;
    assert!(
        until(events, &victim.key, true, by).await,
        "a kept its grant of {} in tenure {}",
        victim.key,
        victim.tenure
    );
    let by = Instant::now() + config.effective_renew_interval() * 2 + config.quiet_period;
    assert!(
        until(events, &victim.key, false, by).await,
        "a did not take {} again",
        victim.key
    );
    let now = store.get(&victim.key, deadline).await.unwrap().unwrap();
    assert!(now.tenure > given.tenure, "{now:?}");
    for (worker, _) in workers {
        worker.shutdown().await;
    }
}

/// A process that finds its own session already open (an open whose answer was lost) must not
/// count that session's validity from its own read: observers may have seen the record long
/// before. It beats at once, so the validity counts from a write, and the heartbeat they
/// watch moves.
#[tokio::test(start_paused = true)]
async fn a_session_found_open_is_beaten_before_it_is_used() {
    let store = InMemoryStore::new();
    let id = WorkerId::new("a").unwrap();
    let incarnation = Incarnation::new(7);
    let deadline = Instant::now() + Duration::from_secs(5);
    let opened = store
        .open_session(&id, incarnation, None, None, deadline)
        .await
        .unwrap();
    let heartbeat = opened.done().unwrap().heartbeat;
    // Observers see that heartbeat from now; the process only reads it 8 s later, 2 s before
    // they may judge the session over.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (worker, _events) = Worker::builder(Arc::new(store.clone()), id.clone())
        .incarnation(incarnation)
        .config(config())
        .shards(vec![key("s1")])
        .start()
        .await
        .unwrap();
    let now = store
        .get_member(&id, true, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the session's record");
    assert_eq!(now.incarnation, Some(incarnation));
    assert!(
        now.heartbeat > heartbeat,
        "the session was used without a beat: heartbeat still {}",
        now.heartbeat
    );
    worker.shutdown().await;
}
