//! The cases of the conformance suite, generic over the backend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use shardlease::lease::{CheckpointWrite, Incarnation};
use shardlease::lease::{InvalidLoadReport, Lease, LoadReport, Member, NewLease};
use shardlease::store::{LeaseStore, Outcome};
use shardlease::{LeaseKey, StoreError, WorkerId, SHARD_END};
use tokio::time::Instant;

use super::Target;

/// The process every case's writes come from, unless a case says otherwise.
const PROCESS: Incarnation = Incarnation::new(1);

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

fn worker(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

fn done<T: std::fmt::Debug>(outcome: Outcome<T>, what: &str) -> T {
    match outcome {
        Outcome::Done(value) => value,
        other => panic!("{what}: expected Done, got {other:?}"),
    }
}

fn lost<T: std::fmt::Debug>(outcome: Outcome<T>, what: &str) -> Option<T> {
    match outcome {
        Outcome::LostRace { current } => current,
        other => panic!("{what}: expected LostRace, got {other:?}"),
    }
}

async fn created<S: LeaseStore>(store: &S, name: &str) -> Lease {
    done(
        store
            .create(NewLease::new(key(name)), deadline())
            .await
            .unwrap(),
        "create",
    )
}

/// Creates `name` and takes it for `owner`.
async fn held_by<S: LeaseStore>(store: &S, name: &str, owner: &WorkerId) -> Lease {
    let lease = created(store, name).await;
    done(
        store
            .take(
                &lease.key,
                lease.nonce,
                owner,
                PROCESS,
                lease.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take",
    )
}

pub async fn create_is_conditional_on_absence<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let new = NewLease::new(key("shard-1"))
        .with_parents(vec![key("shard-0")])
        .with_checkpoint("100");
    let lease = done(
        store.create(new.clone(), deadline()).await.unwrap(),
        "create",
    );
    assert_ne!(lease.nonce, 0, "the store draws a creation nonce");
    assert_eq!(
        lease,
        Lease {
            nonce: lease.nonce,
            ..new.clone().into_lease()
        }
    );
    let again = NewLease::new(key("shard-1")).with_checkpoint("other");
    let current = lost(
        store.create(again, deadline()).await.unwrap(),
        "second create",
    );
    assert_eq!(
        current,
        Some(lease),
        "the existing lease is returned unchanged"
    );
}

pub async fn get_reads_what_was_written_and_none_when_absent<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    assert_eq!(store.get(&key("nope"), deadline()).await.unwrap(), None);
    let a = worker("a");
    let lease = held_by(&store, "shard-1", &a).await;
    assert_eq!(
        store.get(&lease.key, deadline()).await.unwrap(),
        Some(lease)
    );
}

pub async fn renew_needs_owner_and_tenure<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let lease = held_by(&store, "shard-1", &a).await;
    let renewed = done(
        store
            .renew(
                &lease.key,
                lease.nonce,
                &a,
                lease.tenure,
                Some(2.5),
                deadline(),
            )
            .await
            .unwrap(),
        "renew",
    );
    assert_eq!(renewed.counter, lease.counter + 1);
    assert_eq!((renewed.tenure, renewed.load), (lease.tenure, Some(2.5)));
    let again = done(
        store
            .renew(&lease.key, lease.nonce, &a, lease.tenure, None, deadline())
            .await
            .unwrap(),
        "renew without load",
    );
    assert_eq!(
        again.load,
        Some(2.5),
        "a renewal without a figure keeps the last one"
    );

    let current = lost(
        store
            .renew(&lease.key, lease.nonce, &b, lease.tenure, None, deadline())
            .await
            .unwrap(),
        "renew by a non-owner",
    );
    assert_eq!(current, Some(again.clone()));
    let current = lost(
        store
            .renew(
                &lease.key,
                lease.nonce,
                &a,
                lease.tenure + 1,
                None,
                deadline(),
            )
            .await
            .unwrap(),
        "renew in another tenure",
    );
    assert_eq!(current, Some(again));
    let current = lost(
        store
            .renew(&key("missing"), 1, &a, 1, None, deadline())
            .await
            .unwrap(),
        "renew of a missing lease",
    );
    assert_eq!(current, None);
}

pub async fn take_is_conditional_on_the_observed_counter<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let lease = created(&store, "shard-1").await;
    let taken = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &a,
                PROCESS,
                lease.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take unowned",
    );
    assert_eq!(taken.owner, Some(a.clone()));
    assert_eq!((taken.counter, taken.tenure), (1, 1));
    assert_eq!(taken.owner_switches_since_checkpoint, 1);

    let current = lost(
        store
            .take(
                &lease.key,
                lease.nonce,
                &b,
                PROCESS,
                lease.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take with a stale counter",
    );
    assert_eq!(current, Some(taken.clone()));

    let stolen = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &b,
                PROCESS,
                taken.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "steal with the current counter",
    );
    assert_eq!(stolen.owner, Some(b));
    assert_eq!((stolen.counter, stolen.tenure), (2, 2));
    assert_eq!(stolen.owner_switches_since_checkpoint, 2);
    let current = lost(
        store
            .take(&key("missing"), 1, &a, PROCESS, 0, deadline())
            .await
            .unwrap(),
        "take of a missing lease",
    );
    assert_eq!(current, None);
}

pub async fn request_handoff_names_one_requester<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b, c) = (worker("a"), worker("b"), worker("c"));
    let lease = held_by(&store, "shard-1", &a).await;
    let requested = done(
        store
            .request_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "request",
    );
    assert_eq!(requested.handoff_to, Some(b.clone()));
    assert_eq!(
        requested.counter, lease.counter,
        "a request is not a sign of life of the owner"
    );
    let again = done(
        store
            .request_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "the same request again",
    );
    assert_eq!(again.handoff_to, Some(b.clone()));
    let current = lost(
        store
            .request_handoff(&lease.key, lease.nonce, &a, lease.tenure, &c, deadline())
            .await
            .unwrap(),
        "a second requester",
    );
    assert_eq!(current.unwrap().handoff_to, Some(b.clone()));
    let current = lost(
        store
            .request_handoff(&lease.key, lease.nonce, &c, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "a request naming the wrong owner",
    );
    assert!(current.is_some());
}

pub async fn complete_handoff_moves_to_the_requester_in_a_new_tenure<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b, c) = (worker("a"), worker("b"), worker("c"));
    let lease = held_by(&store, "shard-1", &a).await;
    let current = lost(
        store
            .complete_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "complete without a request",
    );
    assert_eq!(current.unwrap().owner, Some(a.clone()));
    done(
        store
            .request_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "request",
    );
    let current = lost(
        store
            .complete_handoff(&lease.key, lease.nonce, &a, lease.tenure, &c, deadline())
            .await
            .unwrap(),
        "complete to somebody who did not ask",
    );
    assert_eq!(current.unwrap().handoff_to, Some(b.clone()));
    let moved = done(
        store
            .complete_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "complete",
    );
    assert_eq!(moved.owner, Some(b.clone()));
    assert_eq!(moved.handoff_to, None);
    assert_eq!(
        (moved.counter, moved.tenure),
        (lease.counter + 1, lease.tenure + 1)
    );
    assert_eq!(moved.owner_switches_since_checkpoint, 2);
    done(
        store
            .renew(&lease.key, lease.nonce, &b, moved.tenure, None, deadline())
            .await
            .unwrap(),
        "the new owner renews",
    );
    lost(
        store
            .renew(&lease.key, lease.nonce, &a, lease.tenure, None, deadline())
            .await
            .unwrap(),
        "the old owner renews",
    );
}

pub async fn the_owner_incarnation_follows_every_change_of_owner<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let (first, second) = (Incarnation::new(7), Incarnation::new(u64::MAX));
    let lease = created(&store, "shard-1").await;
    assert_eq!(lease.owner_incarnation, None, "a new lease has no owner");
    let taken = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &a,
                first,
                lease.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take",
    );
    assert_eq!(taken.owner_incarnation, Some(first));
    assert!(taken.is_owned_by_incarnation(&a, first));
    let renewed = done(
        store
            .renew(&lease.key, lease.nonce, &a, taken.tenure, None, deadline())
            .await
            .unwrap(),
        "renew",
    );
    let checkpointed = done(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &a,
                taken.tenure,
                1,
                "10",
                deadline(),
            )
            .await
            .unwrap(),
        "checkpoint",
    );
    let asked = done(
        store
            .request_handoff(&lease.key, lease.nonce, &a, taken.tenure, &b, deadline())
            .await
            .unwrap(),
        "request",
    );
    for (what, lease) in [
        ("renew", &renewed),
        ("checkpoint", &checkpointed),
        ("request", &asked),
    ] {
        assert_eq!(lease.owner_incarnation, Some(first), "{what} keeps it");
    }
    let handed = done(
        store
            .complete_handoff(&lease.key, lease.nonce, &a, taken.tenure, &b, deadline())
            .await
            .unwrap(),
        "complete",
    );
    assert_eq!(
        (handed.owner.as_ref(), handed.owner_incarnation),
        (Some(&b), None),
        "a handoff names the worker, not its process: the requester takes it next"
    );
    let again = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &b,
                second,
                handed.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "the requester's take",
    );
    assert_eq!(again.owner_incarnation, Some(second));
    let by_a = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &a,
                second,
                again.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "another worker with the same incarnation value",
    );
    assert!(by_a.is_owned_by_incarnation(&a, second));
    let released = done(
        store
            .release(&lease.key, lease.nonce, &a, by_a.tenure, deadline())
            .await
            .unwrap(),
        "release",
    );
    assert_eq!(
        (released.owner.as_ref(), released.owner_incarnation),
        (None, None)
    );
    assert_eq!(
        store.get(&lease.key, deadline()).await.unwrap(),
        Some(released),
        "what a write returns is what a read finds"
    );

    let member = done(
        store
            .heartbeat(&a, first, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat of the first process",
    );
    assert_eq!(member.incarnation, Some(first));
    let member = done(
        store
            .heartbeat(&a, second, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat of a second process with the same id",
    );
    assert_eq!((member.heartbeat, member.incarnation), (2, Some(second)));
    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.members, vec![Arc::new(member)]);
}

pub async fn release_leaves_the_lease_unowned<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let lease = held_by(&store, "shard-1", &a).await;
    done(
        store
            .request_handoff(&lease.key, lease.nonce, &a, lease.tenure, &b, deadline())
            .await
            .unwrap(),
        "request",
    );
    let released = done(
        store
            .release(&lease.key, lease.nonce, &a, lease.tenure, deadline())
            .await
            .unwrap(),
        "release",
    );
    assert_eq!(
        (released.owner.clone(), released.handoff_to.clone()),
        (None, None)
    );
    assert_eq!(released.counter, lease.counter + 1);
    assert_eq!(released.tenure, lease.tenure);
    let current = lost(
        store
            .release(&lease.key, lease.nonce, &a, lease.tenure, deadline())
            .await
            .unwrap(),
        "release twice",
    );
    assert_eq!(current, Some(released.clone()));
    let retaken = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &b,
                PROCESS,
                released.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take after release",
    );
    assert_eq!(retaken.tenure, lease.tenure + 1);
}

pub async fn checkpoint_is_fenced_by_tenure<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let lease = held_by(&store, "shard-1", &a).await;
    assert_eq!(lease.owner_switches_since_checkpoint, 1);
    let saved = done(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &a,
                lease.tenure,
                1,
                "seq-10",
                deadline(),
            )
            .await
            .unwrap(),
        "checkpoint",
    );
    assert_eq!(saved.checkpoint.as_deref(), Some("seq-10"));
    assert_eq!(saved.owner_switches_since_checkpoint, 0);
    assert_eq!(
        saved.counter,
        lease.counter + 1,
        "a checkpoint is a sign of life"
    );
    let current = lost(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &b,
                lease.tenure,
                2,
                "seq-99",
                deadline(),
            )
            .await
            .unwrap(),
        "checkpoint by a non-owner",
    );
    assert_eq!(current.unwrap().checkpoint.as_deref(), Some("seq-10"));
}

pub async fn a_stale_checkpoint_after_re_take_is_rejected<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let first = held_by(&store, "shard-1", &a).await;
    let by_b = done(
        store
            .take(
                &first.key,
                first.nonce,
                &b,
                PROCESS,
                first.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "b steals",
    );
    let again = done(
        store
            .take(
                &first.key,
                first.nonce,
                &a,
                PROCESS,
                by_b.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "a takes it back",
    );
    assert_eq!(again.owner, Some(a.clone()));
    let current = lost(
        store
            .checkpoint(
                &first.key,
                first.nonce,
                &a,
                first.tenure,
                1,
                "from-the-first-tenure",
                deadline(),
            )
            .await
            .unwrap(),
        "a checkpoint of the earlier tenure",
    );
    assert_eq!(current.unwrap().checkpoint, None);
    done(
        store
            .checkpoint(
                &first.key,
                first.nonce,
                &a,
                again.tenure,
                1,
                "from-this-tenure",
                deadline(),
            )
            .await
            .unwrap(),
        "a checkpoint of this tenure",
    );
}

pub async fn renewals_and_checkpoints_do_not_race<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    let lease = held_by(&store, "shard-1", &a).await;
    let mut renewals = Vec::new();
    for _ in 0..10 {
        let (store, key, a) = (store.clone(), lease.key.clone(), a.clone());
        renewals.push(tokio::spawn(async move {
            store
                .renew(&key, lease.nonce, &a, lease.tenure, None, deadline())
                .await
        }));
    }
    // The owner's checkpoints, one after the other as an application makes them, while the
    // renewals land.
    for seq in 1..=10 {
        let value = format!("seq-{seq}");
        done(
            store
                .checkpoint(
                    &lease.key,
                    lease.nonce,
                    &a,
                    lease.tenure,
                    seq,
                    &value,
                    deadline(),
                )
                .await
                .unwrap(),
            "a checkpoint among renewals",
        );
    }
    for task in renewals {
        done(task.await.unwrap().unwrap(), "a renewal among checkpoints");
    }
    let last = store.get(&lease.key, deadline()).await.unwrap().unwrap();
    assert_eq!(last.counter, lease.counter + 20);
    assert_eq!(last.checkpoint.as_deref(), Some("seq-10"));
}

/// A checkpoint that lands after a later one of its tenure (its caller gave up on it, or the
/// store retried it after its attempt timeout) is refused: the table keeps the later value,
/// and the end of a shard is never turned back into a position.
pub async fn a_late_checkpoint_never_replaces_a_later_one_of_its_tenure<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let lease = held_by(&store, "shard-1", &a).await;
    let stored = done(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &a,
                lease.tenure,
                2,
                SHARD_END,
                deadline(),
            )
            .await
            .unwrap(),
        "the second checkpoint, first to land",
    );
    assert_eq!(
        stored.checkpoint_write,
        Some(CheckpointWrite {
            tenure: lease.tenure,
            seq: 2
        })
    );
    for (seq, what) in [(1, "an earlier checkpoint"), (2, "the same number again")] {
        let current = lost(
            store
                .checkpoint(
                    &lease.key,
                    lease.nonce,
                    &a,
                    lease.tenure,
                    seq,
                    "seq-10",
                    deadline(),
                )
                .await
                .unwrap(),
            what,
        );
        assert_eq!(
            current.unwrap().checkpoint.as_deref(),
            Some(SHARD_END),
            "{what}"
        );
    }
    let later = done(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &a,
                lease.tenure,
                3,
                "seq-30",
                deadline(),
            )
            .await
            .unwrap(),
        "a later checkpoint",
    );
    assert_eq!(later.checkpoint.as_deref(), Some("seq-30"));
    // A new tenure numbers its checkpoints from 1 again.
    let by_b = done(
        store
            .take(
                &lease.key,
                lease.nonce,
                &b,
                PROCESS,
                later.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "b takes it",
    );
    let first_of_b = done(
        store
            .checkpoint(
                &lease.key,
                lease.nonce,
                &b,
                by_b.tenure,
                1,
                "seq-40",
                deadline(),
            )
            .await
            .unwrap(),
        "the first checkpoint of a new tenure",
    );
    assert_eq!(first_of_b.checkpoint.as_deref(), Some("seq-40"));
    let read = store.get(&lease.key, deadline()).await.unwrap().unwrap();
    assert_eq!(
        read, first_of_b,
        "what the write answered is what is stored"
    );
}

/// A lease deleted and created again is a new item at counter 0 and tenure 0, which walks
/// through the same owners and tenures as the old one: every write meant for the old item
/// (named by its nonce) is refused by the new one, however its counter and tenure match.
pub async fn a_write_meant_for_a_deleted_item_never_lands_in_its_successor<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let old = held_by(&store, "shard-1", &a).await;
    let _ = done(
        store
            .delete(&old.key, old.nonce, old.counter, old.tenure, deadline())
            .await
            .unwrap(),
        "delete",
    );
    let new = held_by(&store, "shard-1", &a).await;
    assert_ne!(new.nonce, old.nonce);
    assert_eq!(
        (new.counter, new.tenure),
        (old.counter, old.tenure),
        "the same steps again"
    );
    let (k, n) = (&old.key, old.nonce);
    let writes = [
        (
            "renew",
            store.renew(k, n, &a, old.tenure, None, deadline()).await,
        ),
        (
            "checkpoint",
            store
                .checkpoint(k, n, &a, old.tenure, 1, "old", deadline())
                .await,
        ),
        (
            "take",
            store.take(k, n, &b, PROCESS, old.counter, deadline()).await,
        ),
        ("give", store.give(k, n, &b, old.counter, deadline()).await),
        (
            "request_handoff",
            store
                .request_handoff(k, n, &a, old.tenure, &b, deadline())
                .await,
        ),
        (
            "release",
            store.release(k, n, &a, old.tenure, deadline()).await,
        ),
        (
            "delete",
            store
                .delete(k, n, old.counter, old.tenure, deadline())
                .await,
        ),
    ];
    for (what, written) in writes {
        let current = lost(written.unwrap(), what);
        assert_eq!(
            current.as_ref(),
            Some(&new),
            "{what} left the new item as it was"
        );
    }
    // The handoff completed for the old item: asked of the new one, then completed with the
    // old one's nonce.
    let asked = done(
        store
            .request_handoff(k, new.nonce, &a, new.tenure, &b, deadline())
            .await
            .unwrap(),
        "a request of the new item",
    );
    let current = lost(
        store
            .complete_handoff(k, n, &a, old.tenure, &b, deadline())
            .await
            .unwrap(),
        "complete_handoff",
    );
    assert_eq!(current, Some(asked.clone()));
    // Its own nonce still writes.
    let _ = done(
        store
            .checkpoint(k, new.nonce, &a, new.tenure, 1, "new", deadline())
            .await
            .unwrap(),
        "a checkpoint of the new item",
    );
}

pub async fn delete_is_conditional_on_counter_and_tenure<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    let lease = held_by(&store, "shard-1", &a).await;
    let renewed = done(
        store
            .renew(&lease.key, lease.nonce, &a, lease.tenure, None, deadline())
            .await
            .unwrap(),
        "renew",
    );
    let current = lost(
        store
            .delete(
                &lease.key,
                lease.nonce,
                lease.counter,
                lease.tenure,
                deadline(),
            )
            .await
            .unwrap(),
        "delete with a stale counter",
    );
    assert_eq!(current, Some(renewed.clone()));
    let deleted = done(
        store
            .delete(
                &lease.key,
                lease.nonce,
                renewed.counter,
                renewed.tenure,
                deadline(),
            )
            .await
            .unwrap(),
        "delete",
    );
    assert_eq!(deleted, renewed);
    assert_eq!(store.get(&lease.key, deadline()).await.unwrap(), None);
    let current = lost(
        store
            .delete(&lease.key, lease.nonce, 0, 0, deadline())
            .await
            .unwrap(),
        "delete of a missing lease",
    );
    assert_eq!(current, None);
}

pub async fn a_re_created_lease_has_a_nonce_of_its_own<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    let first = held_by(&store, "shard-1", &a).await;
    assert_ne!(first.nonce, 0);
    let read = store.get(&first.key, deadline()).await.unwrap().unwrap();
    assert_eq!(read.nonce, first.nonce, "kept by every write");
    done(
        store
            .delete(
                &first.key,
                first.nonce,
                first.counter,
                first.tenure,
                deadline(),
            )
            .await
            .unwrap(),
        "delete",
    );
    // Created and taken again: the same counter and tenure as before, another item.
    let again = held_by(&store, "shard-1", &a).await;
    assert_eq!((again.counter, again.tenure), (first.counter, first.tenure));
    assert_ne!(again.nonce, first.nonce);
    assert_ne!(again.nonce, 0);
    let read = store.get(&again.key, deadline()).await.unwrap().unwrap();
    assert_eq!(read, again);
}

pub async fn heartbeat_creates_and_refreshes_membership<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    let first = done(
        store
            .heartbeat(&a, PROCESS, Some(&report(0.5)), Some(10), deadline())
            .await
            .unwrap(),
        "first heartbeat",
    );
    assert_eq!(
        (first.heartbeat, first.load, first.capacity),
        (1, Some(0.5), Some(10))
    );
    let second = done(
        store
            .heartbeat(&a, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "second heartbeat",
    );
    // Without a report, the last one stays.
    assert_eq!(
        (second.heartbeat, second.load, second.capacity),
        (2, Some(0.5), None)
    );
    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.members, vec![Arc::new(second)]);
    assert!(snapshot.leases.is_empty());
}

pub async fn remove_member_is_conditional<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let member = done(
        store
            .heartbeat(&a, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat",
    );
    let fresh = done(
        store
            .heartbeat(&a, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat again",
    );
    let current = lost(
        store
            .remove_member(&a, Some(member.heartbeat), deadline())
            .await
            .unwrap(),
        "remove with a stale heartbeat",
    );
    assert_eq!(current, Some(fresh.clone()));
    done(
        store
            .remove_member(&a, Some(fresh.heartbeat), deadline())
            .await
            .unwrap(),
        "remove",
    );
    let current = lost(
        store.remove_member(&b, None, deadline()).await.unwrap(),
        "remove a missing member",
    );
    assert_eq!(current, None);
    done(
        store
            .heartbeat(&b, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat b",
    );
    done(
        store.remove_member(&b, None, deadline()).await.unwrap(),
        "remove unconditionally",
    );
    assert!(store.snapshot(deadline()).await.unwrap().members.is_empty());
}

pub async fn listing_pages_through_many_small_pages<T: Target>(target: &T, test: &str) {
    let store = target.paged_store(test, 7).await;
    for i in 0..100 {
        created(&store, &format!("shard-{i:03}")).await;
    }
    let mut pages = 0;
    let mut seen = Vec::new();
    let mut from = None;
    loop {
        let page = store.list_page(from, deadline()).await.unwrap();
        pages += 1;
        assert!(page.leases.len() <= 7, "a page holds at most its limit");
        seen.extend(page.leases.into_iter().map(|l| l.key.clone()));
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    assert!(
        pages >= 15,
        "100 items in pages of 7 take at least 15 pages, got {pages}"
    );
    seen.sort();
    let expected: Vec<_> = (0..100).map(|i| key(&format!("shard-{i:03}"))).collect();
    assert_eq!(seen, expected, "every lease exactly once");
    assert_eq!(store.snapshot(deadline()).await.unwrap().leases.len(), 100);
}

pub async fn listing_separates_leases_from_members<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    held_by(&store, "shard-2", &a).await;
    created(&store, "shard-1").await;
    done(
        store
            .heartbeat(&a, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat",
    );
    let snapshot = store.snapshot(deadline()).await.unwrap();
    let keys: Vec<_> = snapshot.leases.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["shard-1", "shard-2"], "leases in key order");
    assert_eq!(snapshot.members.len(), 1);
    assert_eq!(snapshot.malformed, 0);
    // The eventually consistent listing pages through the same items (the emulators answer
    // every read consistently; DynamoDB may lag by a moment).
    let eventually = store.snapshot_eventually(deadline()).await.unwrap();
    assert_eq!(eventually, snapshot);
    // The members alone, as a starting worker lists them: the same records, no lease.
    let members = store.list_members(deadline()).await.unwrap();
    assert_eq!(members, snapshot.members);
    let b = worker("b");
    done(
        store
            .heartbeat(&b, PROCESS, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat",
    );
    let mut ids: Vec<_> = store
        .list_members(deadline())
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.worker.clone())
        .collect();
    ids.sort();
    assert_eq!(ids, [a, b], "every member");
}

pub async fn sixteen_concurrent_takers_have_exactly_one_winner<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let mut lease = created(&store, "contended").await;
    for round in 0..5 {
        let mut tasks = Vec::new();
        for t in 0..16 {
            let (store, key) = (store.clone(), lease.key.clone());
            let (nonce, observed) = (lease.nonce, lease.counter);
            tasks.push(tokio::spawn(async move {
                let me = worker(&format!("taker-{t}"));
                (
                    me.clone(),
                    store
                        .take(&key, nonce, &me, PROCESS, observed, deadline())
                        .await
                        .unwrap(),
                )
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            let (me, outcome) = task.await.unwrap();
            if let Outcome::Done(won) = outcome {
                assert_eq!(won.owner, Some(me.clone()));
                winners.push(me);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        lease = store.get(&lease.key, deadline()).await.unwrap().unwrap();
        assert_eq!(lease.owner.as_ref(), Some(&winners[0]));
        assert_eq!(lease.tenure, round + 1);
    }
}

/// The notices as a sorted list, for comparisons.
fn notices(member: &shardlease::lease::Member) -> Vec<&str> {
    member.notices.iter().map(String::as_str).collect()
}

fn texts(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

pub async fn give_is_conditional_on_the_observed_counter<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let held = held_by(&store, "k", &a).await;
    let asked = done(
        store
            .request_handoff(
                &held.key,
                held.nonce,
                &a,
                held.tenure,
                &worker("c"),
                deadline(),
            )
            .await
            .unwrap(),
        "request handoff",
    );
    let current = lost(
        store
            .give(&held.key, held.nonce, &b, held.counter - 1, deadline())
            .await
            .unwrap(),
        "give at a stale counter",
    );
    assert_eq!(current, Some(asked.clone()));
    let given = done(
        store
            .give(&held.key, held.nonce, &b, held.counter, deadline())
            .await
            .unwrap(),
        "give",
    );
    assert_eq!(given.owner.as_ref(), Some(&b));
    assert_eq!(given.owner_incarnation, None, "given, not yet taken");
    assert_eq!(
        (
            given.counter,
            given.tenure,
            given.owner_switches_since_checkpoint
        ),
        (
            held.counter + 1,
            held.tenure + 1,
            held.owner_switches_since_checkpoint + 1
        )
    );
    assert_eq!(given.handoff_to, None, "a pending handoff is cleared");
    // The old owner is fenced; the new one's process starts it with a take of its own.
    lost(
        store
            .checkpoint(
                &held.key,
                held.nonce,
                &a,
                held.tenure,
                1,
                "late",
                deadline(),
            )
            .await
            .unwrap(),
        "checkpoint of the old tenure",
    );
    let taken = done(
        store
            .take(
                &held.key,
                held.nonce,
                &b,
                PROCESS,
                given.counter,
                deadline(),
            )
            .await
            .unwrap(),
        "take what was given",
    );
    assert!(taken.is_owned_by_incarnation(&b, PROCESS));
    assert_eq!(store.get(&held.key, deadline()).await.unwrap(), Some(taken));
    let missing = lost(
        store
            .give(&key("nothing"), 1, &b, 0, deadline())
            .await
            .unwrap(),
        "give a missing lease",
    );
    assert_eq!(missing, None);
}

/// A record says which protocol wrote it: a session's (`open_session`, kept by `beat`) or the
/// lease protocol's (`heartbeat`, which also turns a session's record of its id into one of
/// its own). Scans and reads both say so.
pub async fn a_record_says_which_protocol_wrote_it<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let incarnation = Incarnation::new(7);
    let opened = done(
        store
            .open_session(&a, incarnation, None, None, deadline())
            .await
            .unwrap(),
        "open",
    );
    assert!(opened.session);
    let beaten = done(
        store
            .beat(&a, incarnation, None, None, &[], deadline())
            .await
            .unwrap(),
        "beat",
    );
    assert!(beaten.session);
    let heartbeat = done(
        store
            .heartbeat(&b, incarnation, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat",
    );
    assert!(!heartbeat.session);
    let snapshot = store.snapshot(deadline()).await.unwrap();
    let protocols: Vec<(String, bool)> = snapshot
        .members
        .iter()
        .map(|m| (m.worker.to_string(), m.session))
        .collect();
    assert_eq!(protocols, [("a".into(), true), ("b".into(), false)]);
    assert!(
        store
            .get_member(&a, true, deadline())
            .await
            .unwrap()
            .unwrap()
            .session
    );
    // The lease protocol's heartbeat over a session's record makes it its own.
    let over = done(
        store
            .heartbeat(&a, incarnation, None, None, deadline())
            .await
            .unwrap(),
        "heartbeat over a session",
    );
    assert!(!over.session);
    assert!(
        !store
            .get_member(&a, true, deadline())
            .await
            .unwrap()
            .unwrap()
            .session
    );
}

pub async fn a_session_opens_once_and_is_replaced_only_as_observed<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let a = worker("a");
    let (first, second) = (Incarnation::new(7), Incarnation::new(8));
    assert_eq!(store.get_member(&a, true, deadline()).await.unwrap(), None);
    let opened = done(
        store
            .open_session(&a, first, Some(3), None, deadline())
            .await
            .unwrap(),
        "open",
    );
    assert_eq!(
        (opened.heartbeat, opened.incarnation, opened.capacity),
        (1, Some(first), Some(3))
    );
    assert!(opened.notices.is_empty());
    for consistent in [true, false] {
        assert_eq!(
            store.get_member(&a, consistent, deadline()).await.unwrap(),
            Some(opened.clone()),
            "read (consistent: {consistent})"
        );
    }
    // Another process of the id cannot open over it without naming what it replaces.
    let current = lost(
        store
            .open_session(&a, second, None, None, deadline())
            .await
            .unwrap(),
        "open over an open session",
    );
    assert_eq!(current, Some(opened.clone()));
    let beaten = done(
        store
            .beat(&a, first, Some(3), None, &[], deadline())
            .await
            .unwrap(),
        "beat",
    );
    assert_eq!(beaten.heartbeat, 2);
    // Replacing needs the record exactly as it is now: incarnation and heartbeat.
    let current = lost(
        store
            .open_session(&a, second, None, Some(&opened), deadline())
            .await
            .unwrap(),
        "replace a record that has beaten since",
    );
    assert_eq!(current, Some(beaten.clone()));
    let mut other = beaten.clone();
    other.incarnation = Some(Incarnation::new(99));
    lost(
        store
            .open_session(&a, second, None, Some(&other), deadline())
            .await
            .unwrap(),
        "replace naming another incarnation",
    );
    done(
        store
            .notify(&a, first, &texts(&["k1"]), deadline())
            .await
            .unwrap(),
        "notify the first session",
    );
    let noticed = store
        .get_member(&a, true, deadline())
        .await
        .unwrap()
        .unwrap();
    let replaced = done(
        store
            .open_session(&a, second, None, Some(&noticed), deadline())
            .await
            .unwrap(),
        "replace",
    );
    assert_eq!(
        (replaced.heartbeat, replaced.incarnation, replaced.capacity),
        (3, Some(second), None)
    );
    assert!(replaced.notices.is_empty(), "the old session's notices go");
    // The replaced session never beats again.
    let current = lost(
        store
            .beat(&a, first, Some(3), None, &[], deadline())
            .await
            .unwrap(),
        "beat of the replaced session",
    );
    assert_eq!(current, Some(replaced.clone()));
    // Replacing a record that is gone is a lost race with nothing current: the caller reads
    // again and opens without `replacing` (every backend alike).
    done(
        store
            .end_session(&a, second, replaced.heartbeat, deadline())
            .await
            .unwrap(),
        "end the second session",
    );
    let current = lost(
        store
            .open_session(&a, first, None, Some(&replaced), deadline())
            .await
            .unwrap(),
        "replace a record that is gone",
    );
    assert_eq!(current, None);
    assert_eq!(store.get_member(&a, true, deadline()).await.unwrap(), None);
}

pub async fn beats_return_notices_until_they_are_seen<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let me = Incarnation::new(5);
    done(
        store
            .open_session(&a, me, None, None, deadline())
            .await
            .unwrap(),
        "open",
    );
    let noticed = done(
        store
            .notify(&a, me, &texts(&["k1", "k2"]), deadline())
            .await
            .unwrap(),
        "notify",
    );
    assert_eq!(notices(&noticed), ["k1", "k2"]);
    let current = lost(
        store
            .notify(&a, Incarnation::new(6), &texts(&["k9"]), deadline())
            .await
            .unwrap(),
        "notify another session",
    );
    assert_eq!(current.as_ref().map(notices), Some(vec!["k1", "k2"]));
    let current = lost(
        store
            .notify(&b, me, &texts(&["k9"]), deadline())
            .await
            .unwrap(),
        "notify a worker with no session",
    );
    assert_eq!(current, None);
    let beaten = done(
        store
            .beat(&a, me, Some(4), None, &[], deadline())
            .await
            .unwrap(),
        "beat",
    );
    assert_eq!(notices(&beaten), ["k1", "k2"]);
    assert_eq!(beaten.capacity, Some(4));
    done(
        store
            .notify(&a, me, &texts(&["k2", "k3"]), deadline())
            .await
            .unwrap(),
        "notify again",
    );
    let beaten = done(
        store
            .beat(&a, me, None, None, &texts(&["k1", "k2"]), deadline())
            .await
            .unwrap(),
        "beat naming what was seen",
    );
    assert_eq!(
        notices(&beaten),
        ["k3"],
        "a notice seen is gone, even if sent twice"
    );
    assert_eq!(beaten.capacity, None);
    let empty = done(
        store.notify(&a, me, &[], deadline()).await.unwrap(),
        "notify nothing",
    );
    assert_eq!(notices(&empty), ["k3"]);
    let beaten = done(
        store
            .beat(
                &a,
                me,
                None,
                None,
                &texts(&["k3", "never-sent"]),
                deadline(),
            )
            .await
            .unwrap(),
        "beat naming the rest",
    );
    assert!(beaten.notices.is_empty());
    assert_eq!(beaten.heartbeat, 4);
    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.members, vec![Arc::new(beaten)]);
}

pub async fn end_session_is_conditional_on_incarnation_and_heartbeat<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let a = worker("a");
    let me = Incarnation::new(11);
    let opened = done(
        store
            .open_session(&a, me, None, None, deadline())
            .await
            .unwrap(),
        "open",
    );
    let beaten = done(
        store
            .beat(&a, me, None, None, &[], deadline())
            .await
            .unwrap(),
        "beat",
    );
    let current = lost(
        store
            .end_session(&a, me, opened.heartbeat, deadline())
            .await
            .unwrap(),
        "end at a stale heartbeat",
    );
    assert_eq!(current, Some(beaten.clone()));
    let current = lost(
        store
            .end_session(&a, Incarnation::new(12), beaten.heartbeat, deadline())
            .await
            .unwrap(),
        "end another incarnation's session",
    );
    assert_eq!(current, Some(beaten.clone()));
    let ended = done(
        store
            .end_session(&a, me, beaten.heartbeat, deadline())
            .await
            .unwrap(),
        "end",
    );
    assert_eq!(ended, beaten);
    // An ended session is gone for good: it cannot beat or be notified, and its owner must
    // open a new one.
    assert_eq!(
        lost(
            store
                .beat(&a, me, None, None, &[], deadline())
                .await
                .unwrap(),
            "beat after the end"
        ),
        None
    );
    assert_eq!(
        lost(
            store
                .notify(&a, me, &texts(&["k"]), deadline())
                .await
                .unwrap(),
            "notify after the end"
        ),
        None
    );
    assert_eq!(store.get_member(&a, true, deadline()).await.unwrap(), None);
    assert_eq!(
        lost(
            store
                .end_session(&a, me, beaten.heartbeat, deadline())
                .await
                .unwrap(),
            "end twice"
        ),
        None
    );
    let reopened = done(
        store
            .open_session(&a, Incarnation::new(13), None, None, deadline())
            .await
            .unwrap(),
        "open anew",
    );
    assert_eq!(reopened.heartbeat, 1);
}

/// A load report with every figure, `utilisation` its utilisation, and lease keys with
/// spaces, `=`, `:`, quotes and letters outside ASCII (two of them halted).
fn report(utilisation: f64) -> LoadReport {
    LoadReport {
        weight: 1.5,
        utilisation: Some(utilisation),
        leases: BTreeMap::from([
            (key("shard 1"), 12.5),
            (key("a=b:c"), 0.25),
            (key("\"quoted\" {x} [y]"), 0.0),
            (key("schlüssel é"), 123_456.75),
        ]),
        halted: BTreeSet::from([key("a=b:c"), key("schlüssel é")]),
    }
}

/// A record's report figures: weight, utilisation, lease loads, halted leases.
type Figures = (
    Option<f64>,
    Option<f64>,
    BTreeMap<LeaseKey, f64>,
    BTreeSet<LeaseKey>,
);

/// The report figures of a record.
fn figures(member: &Member) -> Figures {
    (
        member.weight,
        member.load,
        member.lease_loads.clone(),
        member.halted.clone(),
    )
}

/// What `report` makes of a record's figures.
fn reported(report: &LoadReport) -> Figures {
    (
        Some(report.weight),
        report.utilisation,
        report.leases.clone(),
        report.halted.clone(),
    )
}

/// The record as read back, strongly consistent.
async fn read_member<S: LeaseStore>(store: &S, worker: &WorkerId) -> Member {
    let read = store.get_member(worker, true, deadline()).await.unwrap();
    read.expect("the record exists")
}

pub async fn a_load_report_round_trips_through_heartbeat_and_beat<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let first = report(0.5);
    let beat = store
        .heartbeat(&a, PROCESS, Some(&first), Some(3), deadline())
        .await
        .unwrap();
    let beat = done(beat, "heartbeat with a report");
    assert_eq!(figures(&beat), reported(&first));
    assert_eq!(read_member(&store, &a).await, beat);

    let session = store
        .open_session(&b, PROCESS, None, None, deadline())
        .await
        .unwrap();
    done(session, "open_session");
    let second = LoadReport {
        weight: 0.125,
        utilisation: Some(0.0),
        leases: BTreeMap::from([(key("shard 1"), 7.0), (key("k:2=3"), 1e-3)]),
        halted: BTreeSet::from([key("k:2=3")]),
    };
    let beat = store
        .beat(&b, PROCESS, Some(2), Some(&second), &[], deadline())
        .await
        .unwrap();
    let beat = done(beat, "beat with a report");
    assert_eq!(figures(&beat), reported(&second));
    assert_eq!(beat.capacity, Some(2));
    assert_eq!(read_member(&store, &b).await, beat);
    let snapshot = store.snapshot(deadline()).await.unwrap();
    let listed: Vec<_> = snapshot.members.iter().map(|m| figures(m)).collect();
    assert_eq!(listed, [reported(&first), reported(&second)]);
}

pub async fn without_a_report_the_last_one_stays_and_an_empty_part_is_removed<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b) = (worker("a"), worker("b"));
    let full = report(0.75);
    let bare = LoadReport {
        weight: 2.0,
        ..LoadReport::default()
    };
    // The lease protocol's heartbeat.
    let heartbeat = |report: Option<LoadReport>| {
        let store = store.clone();
        let a = a.clone();
        async move {
            let beat = store.heartbeat(&a, PROCESS, report.as_ref(), None, deadline());
            done(beat.await.unwrap(), "heartbeat")
        }
    };
    heartbeat(Some(full.clone())).await;
    let kept = heartbeat(None).await;
    assert_eq!((kept.heartbeat, figures(&kept)), (2, reported(&full)));
    assert_eq!(read_member(&store, &a).await, kept);
    let emptied = heartbeat(Some(bare.clone())).await;
    assert_eq!(
        figures(&emptied),
        (Some(2.0), None, BTreeMap::new(), BTreeSet::new())
    );
    assert_eq!(read_member(&store, &a).await, emptied);

    // The session protocol's beat.
    let session = store.open_session(&b, PROCESS, None, None, deadline());
    done(session.await.unwrap(), "open_session");
    let beat = |report: Option<LoadReport>| {
        let store = store.clone();
        let b = b.clone();
        async move {
            let beat = store.beat(&b, PROCESS, None, report.as_ref(), &[], deadline());
            done(beat.await.unwrap(), "beat")
        }
    };
    beat(Some(full.clone())).await;
    let kept = beat(None).await;
    assert_eq!((kept.heartbeat, figures(&kept)), (3, reported(&full)));
    assert_eq!(read_member(&store, &b).await, kept);
    let emptied = beat(Some(bare)).await;
    assert_eq!(
        figures(&emptied),
        (Some(2.0), None, BTreeMap::new(), BTreeSet::new())
    );
    assert_eq!(read_member(&store, &b).await, emptied);
}

pub async fn open_session_clears_the_load_report<T: Target>(target: &T, test: &str) {
    let store = target.store(test).await;
    let a = worker("a");
    let none = (None, None, BTreeMap::new(), BTreeSet::new());
    // A record of the lease protocol's heartbeat, replaced by a session.
    let first = report(1.0);
    let beat = store.heartbeat(&a, PROCESS, Some(&first), None, deadline());
    let old = done(beat.await.unwrap(), "heartbeat");
    let opened = store.open_session(&a, PROCESS, None, Some(&old), deadline());
    let opened = done(opened.await.unwrap(), "open_session replacing a heartbeat");
    assert_eq!(figures(&opened), none);
    assert_eq!(read_member(&store, &a).await, opened);
    // A session's record with a report, replaced by the next process of the id.
    let second = report(2.0);
    let beat = store.beat(&a, PROCESS, None, Some(&second), &[], deadline());
    let beaten = done(beat.await.unwrap(), "beat");
    assert_eq!(figures(&beaten), reported(&report(2.0)));
    let next = Incarnation::new(2);
    let opened = store.open_session(&a, next, Some(1), Some(&beaten), deadline());
    let opened = done(opened.await.unwrap(), "open_session replacing a session");
    assert_eq!(figures(&opened), none);
    assert_eq!(read_member(&store, &a).await, opened);
}

/// Reports with one figure that may not be published: not finite, negative, a weight of 0.
fn bad_reports() -> Vec<(&'static str, LoadReport)> {
    let good = report(0.5);
    let with = |change: &dyn Fn(&mut LoadReport)| {
        let mut report = good.clone();
        change(&mut report);
        report
    };
    let lease = key("shard 1");
    vec![
        ("weight", with(&|r| r.weight = f64::NAN)),
        ("weight", with(&|r| r.weight = 0.0)),
        ("weight", with(&|r| r.weight = -1.0)),
        ("weight", with(&|r| r.weight = f64::INFINITY)),
        ("utilisation", with(&|r| r.utilisation = Some(f64::NAN))),
        ("utilisation", with(&|r| r.utilisation = Some(-0.5))),
        (
            "utilisation",
            with(&|r| r.utilisation = Some(f64::INFINITY)),
        ),
        (
            "load of lease shard 1",
            with(&|r| {
                r.leases.insert(lease.clone(), f64::NAN);
            }),
        ),
        (
            "load of lease shard 1",
            with(&|r| {
                r.leases.insert(lease.clone(), -2.0);
            }),
        ),
        (
            "load of lease shard 1",
            with(&|r| {
                r.leases.insert(lease.clone(), f64::NEG_INFINITY);
            }),
        ),
    ]
}

/// Asserts that `result` is the refusal of a report whose `figure` is at fault.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, StoreError>, figure: &str, op: &str) {
    match result {
        Err(err @ StoreError::Fatal { .. }) => {
            let source = std::error::Error::source(&err).expect("the refusal has a source");
            let invalid = source.downcast_ref::<InvalidLoadReport>();
            let invalid = invalid.unwrap_or_else(|| panic!("{op}: {err:?} names no bad figure"));
            assert_eq!(invalid.figure, figure, "{op}: {err:?}");
        }
        other => panic!("{op}: a report with a bad {figure} must be refused, got {other:?}"),
    }
}

pub async fn a_bad_load_report_is_refused_and_nothing_is_written<T: Target>(
    target: &T,
    test: &str,
) {
    let store = target.store(test).await;
    let (a, b, c) = (worker("a"), worker("b"), worker("c"));
    let good = report(0.5);
    let beat = store.heartbeat(&a, PROCESS, Some(&good), Some(1), deadline());
    done(beat.await.unwrap(), "heartbeat");
    let opened = store.open_session(&b, PROCESS, None, None, deadline());
    done(opened.await.unwrap(), "open_session");
    let beat = store.beat(&b, PROCESS, None, Some(&good), &[], deadline());
    done(beat.await.unwrap(), "beat");
    let (before_a, before_b) = (read_member(&store, &a).await, read_member(&store, &b).await);
    for (figure, bad) in bad_reports() {
        let result = store
            .heartbeat(&a, PROCESS, Some(&bad), None, deadline())
            .await;
        assert_refused(result, figure, "heartbeat");
        let result = store
            .beat(&b, PROCESS, None, Some(&bad), &[], deadline())
            .await;
        assert_refused(result, figure, "beat");
        // Nor does a refused heartbeat create a record.
        let result = store
            .heartbeat(&c, PROCESS, Some(&bad), None, deadline())
            .await;
        assert_refused(result, figure, "first heartbeat");
    }
    assert_eq!(read_member(&store, &a).await, before_a);
    assert_eq!(read_member(&store, &b).await, before_b);
    let absent = store.get_member(&c, true, deadline()).await.unwrap();
    assert_eq!(absent, None);
}
