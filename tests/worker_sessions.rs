//! The session protocol on paused time over the in-memory store. A lease deleted or taken by
//! hand under its holder is noticed by the fleet's slow scan and dropped by the holder, which
//! renews nothing any more and so would otherwise never learn of it. Notices read between
//! beats (a join's handoff request), what a worker at rest sends, a load figure missing
//! from its holder's record, and a give whose answer and notice were lost.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use shardlease::lease::{Incarnation, Lease, LoadReport};
use shardlease::store::layer::{Request, Response, StoreLayer};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::{LeaseStore, StoreError, StoreResult};
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
        .map(std::sync::Arc::unwrap_or_clone)
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

/// Runs an application that reports a load of 1 for each lease it holds, every second, and
/// finishes a lease as soon as it is asked to stop; the leases it holds now, shared.
fn reporting(mut events: LeaseEvents) -> Arc<Mutex<BTreeSet<LeaseKey>>> {
    let held = Arc::new(Mutex::new(BTreeSet::new()));
    let shared = held.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let LeaseEvent::Acquired(mut grant) = event else {
                continue;
            };
            let held = shared.clone();
            held.lock().unwrap().insert(grant.key().clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = grant.stopped() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {
                            grant.report_load(1.0).unwrap();
                        }
                    }
                }
                held.lock().unwrap().remove(grant.key());
                grant.finish();
            });
        }
    });
    held
}

/// Waits until the application of `held` holds `n` leases, or until `by`; returns when it
/// stopped waiting (checked every 10 ms).
async fn holding(held: &Mutex<BTreeSet<LeaseKey>>, n: usize, by: Instant) -> Instant {
    while held.lock().unwrap().len() < n && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Instant::now()
}

/// Balance by load: a beat of b's process carrying an older report (a twin's beat, or a late
/// one of its own) leaves one of b's leases without a figure in b's record. Until a figure
/// comes, or the wait for one ends, held leases do not move for balance; b's figures did not
/// change to it, so its refresh brings no round, and a worker that joins then got its share
/// only at the slow scan (the campaign's `not balanced 60 s after the heal`, with twins). The
/// worker doing the chores looks again when the wait ends.
#[tokio::test(start_paused = true)]
async fn a_lease_whose_figure_was_overwritten_holds_the_balance_back_only_until_the_wait_ends() {
    let store = InMemoryStore::new();
    let shards: Vec<LeaseKey> = (0..6).map(|i| key(&format!("s{i}"))).collect();
    let config = config().balance(shardlease::Balance::Load);
    let start = |id: &str, shards: Vec<LeaseKey>| {
        Worker::builder(Arc::new(store.clone()), WorkerId::new(id).unwrap())
            .config(config.clone())
            .shards(shards)
            .start()
    };
    let (a, a_events) = start("a", shards.clone()).await.unwrap();
    let (b, b_events) = start("b", shards.clone()).await.unwrap();
    let (_a_held, b_held) = (reporting(a_events), reporting(b_events));
    // Two slow scans: every worker has seen every figure.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(b_held.lock().unwrap().len(), 3, "a and b share the leases");

    // b's record loses the figure of one of its leases, as the beats of a twin that does not
    // hold it leave it, for 25 s.
    let b_id = WorkerId::new("b").unwrap();
    let joined = Instant::now();
    let dropped = b_held
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("a lease b holds");
    let twin = {
        let store = store.clone();
        tokio::spawn(async move {
            while Instant::now() < joined + Duration::from_secs(25) {
                let deadline = Instant::now() + Duration::from_secs(5);
                let record = store.get_member(&b_id, true, deadline).await.unwrap();
                let record = record.expect("b's record");
                let mut older = LoadReport {
                    weight: record.weight.expect("b published its weight"),
                    utilisation: None,
                    leases: record.lease_loads.clone(),
                    halted: BTreeSet::new(),
                };
                older.leases.remove(&dropped);
                let incarnation = record.incarnation.expect("b's session");
                let beat = store
                    .beat(
                        &b_id,
                        incarnation,
                        record.capacity,
                        Some(&older),
                        &[],
                        deadline,
                    )
                    .await
                    .unwrap();
                assert!(beat.is_done(), "{beat:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (c, c_events) = start("c", Vec::new()).await.unwrap();
    let c_held = reporting(c_events);
    // The wait for a figure is two publish intervals (20 s) from the join's rounds, then a
    // handoff at its holder's next beat; the slow scan would come 50 s after the last round.
    let took = holding(&c_held, 2, joined + Duration::from_secs(40)).await - joined;
    assert!(
        c_held.lock().unwrap().len() >= 2,
        "c holds {:?} {took:?} after it started",
        c_held.lock().unwrap()
    );
    twin.await.unwrap();
    for worker in [c, b, a] {
        worker.shutdown().await;
    }
}

/// A worker that joins just after its peer's beat asks that peer for its share; the peer reads
/// its own record between beats (a third of a beat apart by default) and hands the leases over
/// then, not at its next beat, 4.5 s later.
#[tokio::test(start_paused = true)]
async fn a_join_just_after_the_holders_beat_has_its_share_within_a_third_of_a_beat() {
    let store = InMemoryStore::new();
    let shards: Vec<LeaseKey> = (0..4).map(|i| key(&format!("s{i}"))).collect();
    let start = |id: &str| {
        Worker::builder(Arc::new(store.clone()), WorkerId::new(id).unwrap())
            .config(config())
            .shards(shards.clone())
            .start()
    };
    let began = Instant::now();
    let (a, a_events) = start("a").await.unwrap();
    let _a_held = reporting(a_events);
    // a beats every 4.5 s from its start: b starts 50 ms after a's second beat.
    let beat = config().effective_renew_interval();
    tokio::time::sleep_until(began + beat * 2 + Duration::from_millis(50)).await;
    let joined = Instant::now();
    let (b, b_events) = start("b").await.unwrap();
    let b_held = reporting(b_events);
    let took = holding(&b_held, 2, joined + Duration::from_secs(10)).await - joined;
    assert!(
        took <= Duration::from_millis(2500),
        "b held {:?} {took:?} after it started",
        b_held.lock().unwrap()
    );
    for worker in [b, a] {
        worker.shutdown().await;
    }
}

/// Counts the beats and the scans of one worker sent through it.
struct CountedBeats {
    inner: InMemoryStore,
    beats: Arc<AtomicU64>,
    scans: Arc<AtomicU64>,
}

impl CountedBeats {
    fn new(inner: &InMemoryStore) -> Self {
        Self {
            inner: inner.clone(),
            beats: Arc::default(),
            scans: Arc::default(),
        }
    }
}

#[async_trait]
impl StoreLayer for CountedBeats {
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        match request {
            Request::Beat { .. } => self.beats.fetch_add(1, Ordering::Relaxed),
            Request::Snapshot { .. } => self.scans.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        request.send_to(&self.inner, deadline).await
    }
}

/// A worker alone at rest scans only for the slow scan: nothing looks again a lease after its
/// session opened unless that opening replaced another process's session (then its leases
/// may be taken: `tests/twin_opening.rs`).
#[tokio::test(start_paused = true)]
async fn a_worker_at_rest_scans_only_for_the_slow_scan() {
    let store = InMemoryStore::new();
    let counted = CountedBeats::new(&store);
    let scans = counted.scans.clone();
    let (a, a_events) = Worker::builder(Arc::new(counted), WorkerId::new("a").unwrap())
        .config(config())
        .shards(vec![key("s0"), key("s1")])
        .start()
        .await
        .unwrap();
    let _held = reporting(a_events);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = scans.load(Ordering::Relaxed);
    // The slow scan comes 50 s after the start's last round.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let during = scans.load(Ordering::Relaxed) - before;
    assert_eq!(during, 0, "{during} scans at rest between 5 s and 45 s");
    a.shutdown().await;
}

/// A notice that cannot be acted on yet (a handoff asked of a lease still held back by the
/// quiet period) stays in the record until the next beat. The reads between beats see it
/// there; were it taken for a new one each time, the worker would beat every read (every
/// 1.5 s) until it could act: it waits for its next beat instead.
#[tokio::test(start_paused = true)]
async fn a_notice_that_cannot_be_acted_on_yet_does_not_bring_a_beat_at_every_read() {
    let store = InMemoryStore::new();
    let shards: Vec<LeaseKey> = (0..2).map(|i| key(&format!("s{i}"))).collect();
    let config = config().quiet_period(Duration::from_secs(30));
    let counted = CountedBeats::new(&store);
    let beats = counted.beats.clone();
    let (a, a_events) = Worker::builder(Arc::new(counted), WorkerId::new("a").unwrap())
        .config(config.clone())
        .shards(shards.clone())
        .start()
        .await
        .unwrap();
    let _a_held = reporting(a_events);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // b asks a for one of the leases a holds back for the quiet period.
    let (b, b_events) = Worker::builder(Arc::new(store.clone()), WorkerId::new("b").unwrap())
        .config(config)
        .shards(shards)
        .start()
        .await
        .unwrap();
    let _b_held = reporting(b_events);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = beats.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(18)).await;
    let during = beats.load(Ordering::Relaxed) - before;
    // 18 s of beats every 4.5 s: 4 (one more if the notice came back at an early beat).
    assert!(during <= 5, "a beat {during} times in 18 s");
    for worker in [b, a] {
        worker.shutdown().await;
    }
}

/// Applies every give of one worker and answers it as lost, and refuses its notices, while
/// the store fails (`from` to `heal`).
struct LostGives {
    inner: InMemoryStore,
    from: Instant,
    heal: Instant,
}

#[async_trait]
impl StoreLayer for LostGives {
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        let failing = (self.from..self.heal).contains(&Instant::now());
        let lost = |operation| StoreError::Transient {
            operation,
            key: "the test's".into(),
            ambiguous: true,
            source: "no answer".into(),
        };
        match request {
            Request::Give { .. } if failing => {
                request.send_to(&self.inner, deadline).await?;
                Err(lost("give"))
            }
            Request::Notify { .. } if failing => Err(lost("notify")),
            _ => request.send_to(&self.inner, deadline).await,
        }
    }
}

/// b's application drops a lease while the store fails: b gives it to a, the give lands but
/// its answer is lost, and so is the notice to a. A round of b leaves a lease given and not
/// taken to its receiver, and a, which does the chores, has no round before its slow scan:
/// a started it 50 s later. b now tells a again while the store fails, and a starts the lease
/// within a beat of the heal (the campaign's schedule 7595227211966863648 at ccdf8bd).
#[tokio::test(start_paused = true)]
async fn a_lease_given_while_the_store_fails_is_told_once_it_answers() {
    let store = InMemoryStore::new();
    let start = Instant::now();
    let heal = start + Duration::from_secs(25);
    let (a, a_events) = Worker::builder(Arc::new(store.clone()), WorkerId::new("a").unwrap())
        .config(config())
        .shards(vec![key("s0"), key("s1")])
        .start()
        .await
        .unwrap();
    let lossy = LostGives {
        inner: store.clone(),
        from: start + Duration::from_secs(15),
        heal,
    };
    let (b, mut b_events) = Worker::builder(Arc::new(lossy), WorkerId::new("b").unwrap())
        .config(config())
        .shards(vec![key("s0"), key("s1")])
        .start()
        .await
        .unwrap();
    let a_held = reporting(a_events);
    let (drop_grants, mut dropped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut grants = Vec::new();
        let mut armed = true;
        loop {
            tokio::select! {
                event = b_events.recv() => match event {
                    Some(LeaseEvent::Acquired(grant)) => grants.push(grant),
                    Some(_) => {}
                    None => return,
                },
                // Dropped without a finish: b releases the lease and gives it on.
                _ = &mut dropped, if armed => {
                    armed = false;
                    grants.clear();
                }
            }
        }
    });
    tokio::time::sleep_until(start + Duration::from_secs(14)).await;
    assert_eq!(
        a_held.lock().unwrap().len(),
        1,
        "balanced before the faults"
    );
    let dropped_key = held_by(&store, "b").await.key;
    tokio::time::sleep_until(start + Duration::from_secs(16)).await;
    drop_grants.send(()).unwrap();
    let by = heal + config().effective_renew_interval();
    let at = holding(&a_held, 2, by).await;
    assert!(
        a_held.lock().unwrap().contains(&dropped_key),
        "a did not start {dropped_key:?} within a beat of the heal (by {:?} after the start)",
        at - start
    );
    a.shutdown().await;
    b.shutdown().await;
}
