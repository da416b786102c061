//! The store writes that end a lease's tenure here: handoff (and telling the receiver),
//! release, retirement, and placing a lease whose receiver has no session.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::event::LeaseEvent;
use super::metrics;
use super::parts::{Receiver, Told};
use super::state::{Finish, Holder};
use crate::lease::{Lease, LeaseKey, WorkerId};
use crate::store::Outcome;

/// A tenure of an item: its [`Lease::nonce`] and the tenure's number.
type Tenure = (u64, u64);

/// Hands a finished lease over, or releases it, in a tracked task.
pub(crate) fn spawn_finish(shared: &Arc<Holder>, key: LeaseKey, finish: Finish) {
    let task_shared = Arc::clone(shared);
    let cancel = shared.cancel.clone();
    shared.jobs.spawn(
        async move {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = finish_now(&task_shared, key, finish) => {}
            }
        }
        .in_current_span(),
    );
}

async fn finish_now(shared: &Arc<Holder>, key: LeaseKey, finish: Finish) {
    let deadline = shared.now() + shared.config.store_timeout;
    let me = &shared.id;
    match finish {
        // The receiver's record is read after the handoff (see below), not judged by the
        // last round: a round long past, which is all the taker's judgement rests on when
        // rounds are rare, saw a requester between two sessions as gone, and the lease went
        // elsewhere while the requester waited for the slow scan.
        Finish::HandOff { nonce, tenure, to } => {
            match shared
                .store
                .complete_handoff(&key, nonce, me, tenure, &to, deadline)
                .await
            {
                Ok(Outcome::Done(handed)) => {
                    metrics::handed_off(me);
                    tracing::info!(lease_key = %key, to = %to, "lease handed over");
                    // Asked, maybe, by peers that saw this worker publish capacity 0 in a slow
                    // spell just over: it may be left below its share, and no round of its own
                    // would come before the slow scan (seen in `scripts/chaos.sh`: a worker
                    // left with no lease for the last 17 s). A round once the handoffs are
                    // done.
                    let config = &shared.config;
                    if shared
                        .health
                        .recovered_within(shared.now(), config.lease_duration)
                    {
                        shared.rescan.notify_one();
                    }
                    shared.events.emit(LeaseEvent::HandedOff {
                        key: key.clone(),
                        to: to.clone(),
                    });
                    // The handoff may have been asked on its behalf: tell the receiver. One
                    // without a session (it died while the application finished) would never
                    // take it, and it would wait for the slow scan: give it on now.
                    // The operator's tool holds it for a moment and gives it back to the fleet.
                    if !to.is_operator() {
                        if tell(shared, &to, &key, deadline).await {
                            follow_up(shared, handed);
                        } else {
                            tracing::info!(lease_key = %key, to = %to, "the receiver has no session: giving the lease on");
                            place(shared, handed, deadline).await;
                        }
                    }
                }
                Ok(Outcome::LostRace { current }) => {
                    tracing::info!(lease_key = %key, owner = ?current.and_then(|l| l.owner), "handoff already overtaken");
                }
                Err(err) => {
                    metrics::store_error(me, "complete_handoff");
                    tracing::warn!(lease_key = %key, error = %err, "handoff write failed; the requester takes the lease after its timeout");
                }
            }
        }
        Finish::Release {
            nonce,
            tenure,
            ended,
        } => release(shared, key, (nonce, tenure), ended, deadline).await,
        Finish::Retire { nonce, tenure } => retire(shared, &key, (nonce, tenure), deadline).await,
        Finish::GiveUp { nonce, tenure } => give_up(shared, key, (nonce, tenure), deadline).await,
    }
}

/// Releases a lease lost here because its validity ended unrenewed, once the application let
/// go of it: its peers take it at their next round instead of after its expiry, which late
/// renewals may push back. Conditional on this item, owner and tenure, so it never touches the
/// lease once somebody else has taken it.
async fn give_up(shared: &Holder, key: LeaseKey, (nonce, tenure): Tenure, deadline: Instant) {
    let me = &shared.id;
    match shared
        .store
        .release(&key, nonce, me, tenure, deadline)
        .await
    {
        Ok(Outcome::Done(lease)) => {
            tracing::info!(lease_key = %key, tenure, "lease lost here given up in the table");
            place(shared, lease, deadline).await;
        }
        Ok(Outcome::LostRace { .. }) => {
            tracing::info!(lease_key = %key, tenure, "lease lost here had moved on already");
        }
        Err(err) => {
            metrics::store_error(me, "release");
            tracing::warn!(lease_key = %key, error = %err, "could not give up a lease lost here; it will expire instead");
        }
    }
}

/// Gives up a lease this worker owns in `tenure`; `ended`: because its shard was processed to
/// the end.
async fn release(
    shared: &Holder,
    key: LeaseKey,
    (nonce, tenure): Tenure,
    ended: bool,
    deadline: Instant,
) {
    let me = &shared.id;
    let outcome = shared
        .store
        .release(&key, nonce, me, tenure, deadline)
        .await;
    if outcome.is_ok() {
        // An abandoned lease is no longer held here by nobody.
        shared.release_answered(&key);
    }
    match outcome {
        Ok(Outcome::Done(_)) if ended => {
            tracing::info!(lease_key = %key, "lease of a finished shard released");
            shared.events.emit(LeaseEvent::ShardEnded { key });
            // Its children are ready now: look at once rather than at the next round.
            shared.rescan.notify_one();
        }
        Ok(Outcome::Done(lease)) => {
            tracing::info!(lease_key = %key, "lease released");
            shared.events.emit(LeaseEvent::Released { key });
            place(shared, lease, deadline).await;
        }
        Ok(Outcome::LostRace { .. }) => {
            tracing::info!(lease_key = %key, "release overtaken: the lease had moved on");
        }
        Err(err) => {
            // A lease of a live session never expires: a placement round here takes it up
            // again (the table may still name this session) or places it (it landed).
            metrics::store_error(me, "release");
            tracing::warn!(lease_key = %key, error = %err, "release failed; a placement round takes the lease up again");
            shared.rescan.notify_one();
        }
    }
}

/// A lease handed over here (`handed`: its receiver the owner, no session
/// yet) is looked after until its receiver takes it. A receiver that opened its session and
/// died before any peer watched it (it announces itself to its predecessor in id order after
/// its first round) would otherwise hold the lease until the slow scan: nothing else looks at
/// a lease given to a session. So the receiver's record is read now and again each lease
/// duration while the lease still waits on it untaken; seen unchanged across a lease duration
/// (a live session beats every renew interval), the session is surely over: it is fenced, as
/// its watcher would, and the lease given on.
fn follow_up(shared: &Arc<Holder>, handed: Lease) {
    let Some(to) = handed.owner.clone() else {
        return;
    };
    let (task_shared, cancel) = (Arc::clone(shared), shared.cancel.clone());
    shared.jobs.spawn(
        async move {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = follow(&task_shared, &to, handed) => {}
            }
        }
        .in_current_span(),
    );
}

async fn follow(shared: &Holder, to: &WorkerId, handed: Lease) {
    let config = &shared.config;
    let waits = |lease: &Lease| {
        lease.owner.as_ref() == Some(to)
            && lease.owner_incarnation.is_none()
            && lease.counter == handed.counter
    };
    let mut seen = None;
    loop {
        let deadline = shared.now() + config.store_timeout;
        let lease = match shared.store.get(&handed.key, deadline).await {
            Ok(Some(lease)) if waits(&lease) => lease,
            Ok(_) => return,
            Err(_) => handed.clone(),
        };
        let record = match shared.store.get_member(to, true, deadline).await {
            Ok(record) => record.map(|m| (m.incarnation, m.heartbeat)),
            // A read that failed tells nothing of the receiver: taken as "unchanged", it
            // would fence a live session after one failed read. Read again soon.
            Err(err) => {
                tracing::debug!(to = %to, error = %err, "could not read the receiver of a lease handed over; reading again");
                shared
                    .clock
                    .sleep_until(shared.now() + config.effective_renew_interval())
                    .await;
                continue;
            }
        };
        match record {
            Some((Some(incarnation), heartbeat)) if seen == record => {
                match shared
                    .fences
                    .fence(to, incarnation, heartbeat, deadline)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(err) => {
                        tracing::warn!(to = %to, error = %err, "could not fence the silent receiver of a lease handed over");
                        seen = None;
                        shared
                            .clock
                            .sleep_until(shared.now() + config.effective_renew_interval())
                            .await;
                        continue;
                    }
                }
            }
            Some((Some(_), _)) => {
                seen = record;
                shared
                    .clock
                    .sleep_until(shared.now() + config.lease_duration)
                    .await;
                continue;
            }
            // No session (any more): nobody would take it.
            _ => {}
        }
        tracing::info!(lease_key = %lease.key, to = %to, "the receiver of a lease handed over never took it: giving the lease on");
        shared.receivers.drop_worker(to);
        place(shared, lease, deadline).await;
        return;
    }
}

/// Leaves a notice naming `key` in `worker`'s session, whichever it is. `false` when the
/// worker has no session (no record, or a record without one); `true` otherwise, told or not
/// (a notice that could not be left is left again by the slow scan's worker).
async fn tell(shared: &Holder, worker: &WorkerId, key: &LeaseKey, deadline: Instant) -> bool {
    match shared.store.get_member(worker, true, deadline).await {
        Ok(Some(member)) => {
            let Some(incarnation) = member.incarnation else {
                return false;
            };
            let notice = [key.as_str().to_owned()];
            shared.notify(worker, incarnation, &notice, deadline).await;
            true
        }
        Ok(None) => false,
        Err(err) => {
            tracing::warn!(to = %worker, error = %err, "could not read a receiver's session to tell it");
            true
        }
    }
}

/// Nobody scans at rest: a lease released here is given straight to the live session that
/// held the fewest at the last placement round, and that session told. Without one (this
/// worker is alone, or has not placed yet), a placement round here places it. Either way a
/// round here looks again: this worker now holds one lease fewer than its last round planned
/// with (a lease handed to a receiver that died, then given on, leaves its giver below its
/// share, and nothing else would bring the round that asks for one back).
pub(crate) async fn place(shared: &Holder, lease: Lease, deadline: Instant) {
    let mut counter = lease.counter;
    // A receiver whose session ended meanwhile cannot take it: give it to the next one.
    for _ in 0..3 {
        let Some(receiver) = shared.receivers.pick() else {
            break;
        };
        match shared
            .store
            .give(&lease.key, lease.nonce, &receiver.worker, counter, deadline)
            .await
        {
            Ok(Outcome::Done(given)) => {
                tracing::info!(lease_key = %lease.key, to = %receiver.worker, "released lease given");
                let notice = [lease.key.as_str().to_owned()];
                if shared
                    .notify(&receiver.worker, receiver.incarnation, &notice, deadline)
                    .await
                {
                    break;
                }
                shared.receivers.drop_worker(&receiver.worker);
                counter = given.counter;
            }
            Ok(Outcome::LostRace { .. }) => return,
            Err(err) => {
                metrics::store_error(&shared.id, "give");
                tracing::warn!(lease_key = %lease.key, error = %err, "could not give a released lease; a placement round places it");
                if err.is_ambiguous() {
                    // The give may have landed: only its receiver would take it up.
                    tell_given(shared, &receiver, &lease.key, deadline).await;
                }
                break;
            }
        }
    }
    shared.rescan.notify_one();
}

/// Tells `receiver` of `key`, which a give whose answer was lost may have given to it. While
/// the store does not answer, tells it again every quarter of a beat, for up to a lease
/// duration: a round here would not (a lease given and not yet taken is its receiver's to
/// start), and the worker doing the chores tells again only at a round of its own, which may
/// be the slow scan (the lease waited 38 s after the faults ended:
/// `a_lease_given_while_the_store_fails_is_told_once_it_answers` in
/// `tests/worker_sessions.rs`). A notice that did not name a lease given to its reader is
/// read and dropped.
async fn tell_given(shared: &Holder, receiver: &Receiver, key: &LeaseKey, deadline: Instant) {
    let notice = [key.as_str().to_owned()];
    let tell = |deadline| shared.tell(&receiver.worker, receiver.incarnation, &notice, deadline);
    if tell(deadline).await != Told::Failed {
        return;
    }
    let until = shared.now() + shared.config.lease_duration;
    let pause = shared.config.effective_renew_interval() / 4;
    while shared.now() + pause < until {
        shared.clock.sleep_until(shared.now() + pause).await;
        let deadline = (shared.now() + shared.config.store_timeout).min(until);
        if tell(deadline).await != Told::Failed {
            return;
        }
    }
}

/// How many times a retiring owner re-reads and deletes before it leaves the lease to the
/// discoverer: each miss means the counter moved under it (a renewal still in flight).
const RETIRE_ATTEMPTS: usize = 3;

/// Deletes a lease this worker owns in `tenure`, whose shard left the source. The delete is
/// conditioned on the counter just read, so it never removes a lease somebody else has taken
/// or re-created; if it keeps missing, the lease expires and the discoverer deletes it.
async fn retire(shared: &Holder, key: &LeaseKey, (nonce, tenure): Tenure, deadline: Instant) {
    let me = &shared.id;
    for _ in 0..RETIRE_ATTEMPTS {
        let lease = match shared.store.get(key, deadline).await {
            Ok(Some(lease))
                if lease.nonce == nonce && lease.is_owned_by(me) && lease.tenure == tenure =>
            {
                lease
            }
            Ok(_) => {
                tracing::info!(lease_key = %key, "retirement overtaken: the lease had moved on or is gone");
                return;
            }
            Err(err) => {
                metrics::store_error(me, "get");
                tracing::warn!(lease_key = %key, error = %err, "could not read the retiring lease; the discoverer deletes it once it expires");
                return;
            }
        };
        match shared
            .store
            .delete(key, nonce, lease.counter, tenure, deadline)
            .await
        {
            Ok(Outcome::Done(_)) => {
                metrics::deleted(me, "retired");
                tracing::info!(lease_key = %key, "lease retired: its shard left the source");
                shared.events.emit(LeaseEvent::Retired { key: key.clone() });
                // One lease fewer: the fleet's shares changed.
                shared.rescan.notify_one();
                return;
            }
            Ok(Outcome::LostRace { .. }) => {}
            Err(err) => {
                metrics::store_error(me, "delete");
                tracing::warn!(lease_key = %key, error = %err, "could not delete the retiring lease; the discoverer deletes it once it expires");
                return;
            }
        }
    }
    tracing::warn!(lease_key = %key, "the retiring lease kept changing; the discoverer deletes it once it expires");
}
