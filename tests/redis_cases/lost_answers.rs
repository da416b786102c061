//! Every conditional write whose answer is lost on the wire (the [`Proxy`] drops it after
//! the server ran the script) is retried by the store, and the retry tells the truth: `Done`
//! when the write stands, recognised by its `lastOp` token (create, take, complete_handoff,
//! give, release, open_session) or applied again where its condition allows it (renew,
//! checkpoint, request_handoff, heartbeat, beat, notify); `LostRace` when another worker's
//! write covered it before the retry. The deletes (delete, remove_member, end_session) leave
//! no item to recognise: gone either way, as the `store` module documents.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use shardlease::lease::{Incarnation, Lease, LoadReport, Member, NewLease};
use shardlease::store::redis::RedisStore;
use shardlease::store::Outcome;
use shardlease::store::{Jitter, RetryPolicy, StoreResult};
use shardlease::{LeaseKey, LeaseStore, WorkerId};

use crate::{config, connect, deadline, key, worker, Proxy, PROCESS};

/// The incarnation of the other workers' processes.
const OTHER: Incarnation = Incarnation::new(8);

/// One table seen through the proxy and directly.
struct Lossy {
    proxy: Proxy,
    /// The caller's store, through the proxy. It retries 150 to 300 ms after a lost answer:
    /// time for another worker's write to land first.
    store: RedisStore,
    /// The other workers, on connections of their own.
    direct: RedisStore,
    /// The caller.
    me: WorkerId,
    /// Another worker, who takes leases from under the caller.
    thief: WorkerId,
}

impl Lossy {
    async fn new(test: &str) -> Self {
        let proxy = Proxy::start().await;
        let config = config(test);
        let direct = connect(config.clone()).await;
        let slow = RetryPolicy::default()
            .base_delay(Duration::from_millis(300))
            .jitter(Jitter::Equal);
        let store = connect(config.url(&proxy.url).retry(slow)).await;
        Self {
            proxy,
            store,
            direct,
            me: worker("me"),
            thief: worker("thief"),
        }
    }

    /// Runs `write` with the answer of its first attempt lost.
    async fn lose<T>(&self, write: impl Future<Output = StoreResult<Outcome<T>>>) -> Outcome<T> {
        self.lose_covered(write, async {}).await
    }

    /// As [`lose`](Self::lose), running `cover` once the write has landed (the server has
    /// answered it) and before the store sends it again.
    async fn lose_covered<T>(
        &self,
        write: impl Future<Output = StoreResult<Outcome<T>>>,
        cover: impl Future<Output = ()>,
    ) -> Outcome<T> {
        let lost = self.proxy.swallowed.load(SeqCst) + 1;
        self.proxy.armed.store(true, SeqCst);
        let cover = async {
            while self.proxy.swallowed.load(SeqCst) < lost {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            cover.await;
        };
        let (written, ()) = tokio::join!(write, cover);
        assert_eq!(self.proxy.swallowed.load(SeqCst), lost, "one answer lost");
        written.expect("the retry answers")
    }

    /// A lease created and taken by `me` (tenure 1, counter 1).
    async fn held(&self, name: &str) -> Lease {
        let lease = self.create(name).await;
        let taken = self
            .direct
            .take(&lease.key, lease.nonce, &self.me, PROCESS, 0, deadline());
        taken.await.unwrap().done().unwrap()
    }

    async fn create(&self, name: &str) -> Lease {
        let created = self.direct.create(NewLease::new(key(name)), deadline());
        created.await.unwrap().done().unwrap()
    }

    /// Another worker takes the lease at its current counter.
    async fn steal(&self, key: &LeaseKey) {
        let now = self.direct.get(key, deadline()).await.unwrap().unwrap();
        let taken = self
            .direct
            .take(key, now.nonce, &self.thief, OTHER, now.counter, deadline());
        assert!(taken.await.unwrap().is_done());
    }

    /// `me`'s session, opened by its process.
    async fn session(&self) -> Member {
        let opened = self
            .direct
            .open_session(&self.me, PROCESS, None, None, deadline());
        opened.await.unwrap().done().unwrap()
    }

    /// Another process of `me`'s id replaces its session as it now is.
    async fn replace(&self) {
        let now = self.direct.get_member(&self.me, true, deadline()).await;
        let now = now.unwrap().unwrap();
        let opened = self
            .direct
            .open_session(&self.me, OTHER, None, Some(&now), deadline());
        assert!(opened.await.unwrap().is_done());
    }
}

fn done<T: Debug>(outcome: Outcome<T>, op: &str) -> T {
    match outcome {
        Outcome::Done(value) => value,
        other => panic!("{op} landed; its retry must read as done, got {other:?}"),
    }
}

/// The item as a covered write's retry found it.
fn lost<T: Debug>(outcome: Outcome<T>, op: &str) -> T {
    match outcome {
        Outcome::LostRace {
            current: Some(current),
        } => current,
        other => panic!("{op} was covered by another write: a lost race, got {other:?}"),
    }
}

/// A delete's retry: the item is gone (by the caller's write), nothing says whose.
fn gone<T: Debug>(outcome: Outcome<T>, op: &str) {
    assert!(
        matches!(
            outcome,
            Outcome::LostRace { current: None } | Outcome::Done(_)
        ),
        "{op}: {outcome:?}"
    );
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_create").await;
    let created = t.lose(t.store.create(NewLease::new(key("shard-1")), deadline()));
    assert_eq!(done(created.await, "create").key, key("shard-1"));
    let second = key("shard-2");
    let (write, cover) = (
        t.store.create(NewLease::new(second.clone()), deadline()),
        t.steal(&second),
    );
    let current = lost(t.lose_covered(write, cover).await, "create");
    assert_eq!(current.owner, Some(t.thief.clone()));
}

#[tokio::test]
async fn a_renewal_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_renew").await;
    let lease = t.held("shard-1").await;
    let renewed = t.lose(
        t.store
            .renew(&lease.key, lease.nonce, &t.me, 1, None, deadline()),
    );
    let renewed = done(renewed.await, "renew");
    assert_eq!(renewed.counter, lease.counter + 2, "applied, and again");
    let write = t
        .store
        .renew(&lease.key, lease.nonce, &t.me, 1, None, deadline());
    let current = lost(t.lose_covered(write, t.steal(&lease.key)).await, "renew");
    assert_eq!(current.owner, Some(t.thief.clone()));
}

#[tokio::test]
async fn a_take_whose_answer_was_lost_and_that_was_covered_since_is_a_lost_race() {
    let t = Lossy::new("lost_take_covered").await;
    let lease = t.create("shard-1").await;
    let write = t
        .store
        .take(&lease.key, lease.nonce, &t.me, PROCESS, 0, deadline());
    let current = lost(t.lose_covered(write, t.steal(&lease.key)).await, "take");
    assert_eq!((current.owner, current.tenure), (Some(t.thief.clone()), 2));
}

#[tokio::test]
async fn a_handoff_request_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_request").await;
    let lease = t.held("shard-1").await;
    let asker = worker("asker");
    let asked =
        t.lose(
            t.store
                .request_handoff(&lease.key, lease.nonce, &t.me, 1, &asker, deadline()),
        );
    let asked = done(asked.await, "request_handoff");
    assert_eq!(asked.handoff_to.as_ref(), Some(&asker));
    let other = t.held("shard-2").await;
    let write = t
        .store
        .request_handoff(&other.key, other.nonce, &t.me, 1, &asker, deadline());
    let current = lost(
        t.lose_covered(write, t.steal(&other.key)).await,
        "request_handoff",
    );
    assert_eq!(
        (current.owner, current.handoff_to),
        (Some(t.thief.clone()), None)
    );
}

#[tokio::test]
async fn a_completed_handoff_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_complete").await;
    let to = worker("to");
    let (first, second) = (t.held("shard-1").await, t.held("shard-2").await);
    for lease in [&first, &second] {
        let asked = t
            .direct
            .request_handoff(&lease.key, lease.nonce, &t.me, 1, &to, deadline());
        assert!(asked.await.unwrap().is_done());
    }
    let (first, second, n1, n2) = (first.key, second.key, first.nonce, second.nonce);
    let handed = t.lose(
        t.store
            .complete_handoff(&first, n1, &t.me, 1, &to, deadline()),
    );
    let handed = done(handed.await, "complete_handoff");
    assert_eq!((handed.owner, handed.tenure), (Some(to.clone()), 2));
    let write = t
        .store
        .complete_handoff(&second, n2, &t.me, 1, &to, deadline());
    let current = lost(
        t.lose_covered(write, t.steal(&second)).await,
        "complete_handoff",
    );
    assert_eq!(current.owner, Some(t.thief.clone()));
}

#[tokio::test]
async fn a_give_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_give").await;
    let to = worker("to");
    let (first, second) = (t.create("shard-1").await, t.create("shard-2").await);
    let given = t.lose(t.store.give(&first.key, first.nonce, &to, 0, deadline()));
    let given = done(given.await, "give");
    assert_eq!((given.owner, given.tenure), (Some(to.clone()), 1));
    let write = t.store.give(&second.key, second.nonce, &to, 0, deadline());
    let current = lost(t.lose_covered(write, t.steal(&second.key)).await, "give");
    assert_eq!(current.owner, Some(t.thief.clone()));
}

#[tokio::test]
async fn a_release_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_release").await;
    let lease = t.held("shard-1").await;
    let released = t.lose(
        t.store
            .release(&lease.key, lease.nonce, &t.me, 1, deadline()),
    );
    let released = done(released.await, "release");
    assert_eq!(
        (released.owner, released.counter),
        (None, lease.counter + 1)
    );
    let other = t.held("shard-2").await;
    let write = t
        .store
        .release(&other.key, other.nonce, &t.me, 1, deadline());
    let current = lost(t.lose_covered(write, t.steal(&other.key)).await, "release");
    assert_eq!(current.owner, Some(t.thief.clone()));
}

#[tokio::test]
async fn a_checkpoint_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_checkpoint").await;
    let lease = t.held("shard-1").await;
    let saved =
        t.lose(
            t.store
                .checkpoint(&lease.key, lease.nonce, &t.me, 1, 1, "seq-1", deadline()),
        );
    let saved = done(saved.await, "checkpoint");
    assert_eq!(saved.checkpoint.as_deref(), Some("seq-1"));
    assert_eq!(
        saved.counter,
        lease.counter + 1,
        "applied once: the retry, refused by its number, found its own token"
    );
    let write = t
        .store
        .checkpoint(&lease.key, lease.nonce, &t.me, 1, 2, "seq-2", deadline());
    let current = lost(
        t.lose_covered(write, t.steal(&lease.key)).await,
        "checkpoint",
    );
    assert_eq!(
        (current.owner, current.checkpoint.as_deref()),
        (Some(t.thief.clone()), Some("seq-2")),
        "the checkpoint landed before the take"
    );
}

#[tokio::test]
async fn a_delete_whose_answer_was_lost_leaves_the_lease_gone_and_a_stale_one_is_a_lost_race() {
    let t = Lossy::new("lost_delete").await;
    let lease = t.held("shard-1").await;
    let deleted = t.lose(
        t.store
            .delete(&lease.key, lease.nonce, lease.counter, 1, deadline()),
    );
    gone(deleted.await, "delete");
    assert_eq!(t.direct.get(&lease.key, deadline()).await.unwrap(), None);
    // Renewed since it was observed: the delete never lands, answer lost or not.
    let other = t.held("shard-2").await;
    let renewed = t
        .direct
        .renew(&other.key, other.nonce, &t.me, 1, None, deadline());
    assert!(renewed.await.unwrap().is_done());
    let stale = t.lose(
        t.store
            .delete(&other.key, other.nonce, other.counter, 1, deadline()),
    );
    assert_eq!(lost(stale.await, "delete").counter, other.counter + 1);
}

#[tokio::test]
async fn a_heartbeat_whose_answer_was_lost_is_done() {
    let t = Lossy::new("lost_heartbeat").await;
    let report = report();
    let beat = t.lose(
        t.store
            .heartbeat(&t.me, PROCESS, Some(&report), Some(4), deadline()),
    );
    let beat = done(beat.await, "heartbeat");
    assert_eq!(beat.heartbeat, 2, "applied, and again");
    assert_eq!((beat.load, beat.capacity), (Some(0.5), Some(4)));
    assert_eq!(
        (beat.weight, &beat.lease_loads),
        (Some(2.0), &report.leases)
    );
}

/// A load report with every figure.
fn report() -> LoadReport {
    LoadReport {
        weight: 2.0,
        utilisation: Some(0.5),
        leases: BTreeMap::from([(key("shard a=1"), 3.5), (key("shard-2"), 0.0)]),
        halted: [key("shard-2")].into(),
    }
}

#[tokio::test]
async fn a_member_removal_whose_answer_was_lost_leaves_it_gone_and_a_stale_one_is_a_lost_race() {
    let t = Lossy::new("lost_remove_member").await;
    let beat = t.direct.heartbeat(&t.me, PROCESS, None, None, deadline());
    let member = beat.await.unwrap().done().unwrap();
    let removed = t.lose(
        t.store
            .remove_member(&t.me, Some(member.heartbeat), deadline()),
    );
    gone(removed.await, "remove_member");
    assert_eq!(
        t.direct.get_member(&t.me, true, deadline()).await.unwrap(),
        None
    );
    // Beaten since it was observed: the removal never lands.
    for _ in 0..2 {
        let beat = t.direct.heartbeat(&t.me, PROCESS, None, None, deadline());
        assert!(beat.await.unwrap().is_done());
    }
    let stale = t.lose(t.store.remove_member(&t.me, Some(1), deadline()));
    assert_eq!(lost(stale.await, "remove_member").heartbeat, 2);
}

#[tokio::test]
async fn an_opened_session_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_open").await;
    let opened = t.lose(
        t.store
            .open_session(&t.me, PROCESS, Some(3), None, deadline()),
    );
    let opened = done(opened.await, "open_session");
    assert_eq!((opened.incarnation, opened.heartbeat), (Some(PROCESS), 1));
    // Replacing the record as observed, by the next process of the id.
    let next = Incarnation::new(9);
    let reopened = t
        .store
        .open_session(&t.me, next, None, Some(&opened), deadline());
    let reopened = done(t.lose(reopened).await, "open_session replacing");
    assert_eq!((reopened.incarnation, reopened.heartbeat), (Some(next), 2));
    // Replaced by yet another process before the retry.
    let write = t
        .store
        .open_session(&t.me, PROCESS, None, Some(&reopened), deadline());
    let current = lost(t.lose_covered(write, t.replace()).await, "open_session");
    assert_eq!(current.incarnation, Some(OTHER));
}

#[tokio::test]
async fn a_beat_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_beat").await;
    let session = t.session().await;
    let beat = t.lose(t.store.beat(&t.me, PROCESS, Some(2), None, &[], deadline()));
    let beat = done(beat.await, "beat");
    assert_eq!(beat.heartbeat, session.heartbeat + 2, "applied, and again");
    let write = t.store.beat(&t.me, PROCESS, None, None, &[], deadline());
    let current = lost(t.lose_covered(write, t.replace()).await, "beat");
    assert_eq!(current.incarnation, Some(OTHER));
}

#[tokio::test]
async fn a_beat_with_a_load_report_whose_answer_was_lost_is_done_with_the_report_unless_covered() {
    let t = Lossy::new("lost_beat_report").await;
    let session = t.session().await;
    let report = report();
    let beat = t
        .store
        .beat(&t.me, PROCESS, None, Some(&report), &[], deadline());
    let beat = done(t.lose(beat).await, "beat");
    assert_eq!(beat.heartbeat, session.heartbeat + 2, "applied, and again");
    assert_eq!(
        (beat.weight, beat.load, &beat.lease_loads),
        (Some(2.0), Some(0.5), &report.leases)
    );
    // Covered by another process's session: its record keeps no report of this one's.
    let write = t
        .store
        .beat(&t.me, PROCESS, None, Some(&report), &[], deadline());
    let current = lost(t.lose_covered(write, t.replace()).await, "beat");
    assert_eq!(current.incarnation, Some(OTHER));
    assert_eq!((current.weight, current.load), (None, None));
    assert!(current.lease_loads.is_empty());
}

#[tokio::test]
async fn an_ended_session_whose_answer_was_lost_is_gone_and_a_stale_end_is_a_lost_race() {
    let t = Lossy::new("lost_end").await;
    let session = t.session().await;
    let ended = t.lose(
        t.store
            .end_session(&t.me, PROCESS, session.heartbeat, deadline()),
    );
    gone(ended.await, "end_session");
    assert_eq!(
        t.direct.get_member(&t.me, true, deadline()).await.unwrap(),
        None
    );
    // Beaten since it was observed: the end never lands.
    let session = t.session().await;
    let beat = t.direct.beat(&t.me, PROCESS, None, None, &[], deadline());
    assert!(beat.await.unwrap().is_done());
    let stale = t
        .store
        .end_session(&t.me, PROCESS, session.heartbeat, deadline());
    let current = lost(t.lose(stale).await, "end_session");
    assert_eq!(current.heartbeat, session.heartbeat + 1);
}

#[tokio::test]
async fn a_notice_whose_answer_was_lost_is_done_unless_covered_since() {
    let t = Lossy::new("lost_notify").await;
    t.session().await;
    let notices = ["shard-1".to_owned()];
    let noticed = t.lose(t.store.notify(&t.me, PROCESS, &notices, deadline()));
    let noticed = done(noticed.await, "notify");
    assert_eq!(noticed.notices.iter().collect::<Vec<_>>(), ["shard-1"]);
    let write = t.store.notify(&t.me, PROCESS, &notices, deadline());
    let current = lost(t.lose_covered(write, t.replace()).await, "notify");
    assert_eq!(current.incarnation, Some(OTHER));
    assert!(current.notices.is_empty(), "the new session starts without");
}
