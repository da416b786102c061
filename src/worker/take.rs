//! One take, from the write to the report: the store writes the taker makes (take, adopt a
//! handoff, ask for one), when a taken lease is reported to the application, and, with
//! sessions, the wait for a live previous owner to acknowledge that it dropped the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;
use tracing::Instrument;

use super::finish::spawn_finish;
use super::metrics;
use super::own::OwnSession;
use super::state::{notice_text, Holder, Pending, Took};
use crate::config::WorkerConfig;
use crate::expiry::ExpiryTracker;
use crate::lease::{Incarnation, Lease, LeaseKey, WorkerId};
use crate::store::Outcome;

/// Leases taken here from a live session whose acknowledgement has not come yet, with that
/// session. Taken again here (its validity here ran out meanwhile), such a lease still waits
/// for it: the other session may still be working on it. Shared by the takes of the taker
/// and of the session loop (a lease given to this worker).
#[derive(Default)]
pub(crate) struct Unacknowledged(Mutex<HashMap<LeaseKey, (WorkerId, Option<Incarnation>)>>);

impl Unacknowledged {
    /// The leases waiting, by key.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<LeaseKey, (WorkerId, Option<Incarnation>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Far enough in the future to mean "not while its session lives".
pub(crate) const FAR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// When a take is reported to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// After the quiet period: nobody else can still be working on the lease (it was unowned,
    /// expired on this worker's clock, ours, or handed over after its owner finished).
    Quiet,
    /// A lease duration after an earlier take of the lease whose answer was lost started:
    /// that take may have landed while the previous holder was still working.
    ForcedSince(Instant),
    /// The previous holder's session lives, and its beats would go on
    /// extending the lease there. It is notified, and the lease is reported once it has
    /// acknowledged (dropped the lease) or its session is surely over.
    Acknowledged {
        owner: WorkerId,
        incarnation: Option<Incarnation>,
    },
}

impl Report {
    /// When a take started at `start` is reported to the application. A forced take must not
    /// be reported before the previous owner's local validity has certainly ended: its last
    /// renewal started before this take (or before the earlier attempt that may have landed),
    /// so it ends before that start + lease duration. Never before the quiet period.
    fn time(&self, start: Instant, config: &WorkerConfig) -> Instant {
        let quiet = start + config.quiet_period;
        match self {
            Report::Quiet => quiet,
            Report::ForcedSince(since) => quiet.max(*since + config.lease_duration),
            // Reported by the acknowledgement (see `acknowledged`).
            Report::Acknowledged { .. } => start + FAR,
        }
    }
}

/// Reads the parents of a lease about to be taken: it may be taken only when each of them is
/// finished or gone. The scan already said so, but a paged scan is not one moment: a parent
/// created just before its child may be missing from the pages read before it existed.
async fn parents_done(shared: &Holder, lease: &Lease, deadline: Instant) -> bool {
    for parent in &lease.parents {
        match shared.store.get(parent, deadline).await {
            Ok(None) => {}
            Ok(Some(parent)) if parent.is_finished() => {}
            Ok(Some(_)) => {
                tracing::debug!(lease_key = %lease.key, parent = %parent, "not taken: a parent is not finished");
                return false;
            }
            Err(err) => {
                metrics::store_error(&shared.id, "get");
                tracing::warn!(lease_key = %lease.key, parent = %parent, error = %err, "not taken: could not read a parent");
                return false;
            }
        }
    }
    true
}

/// One store write the taker makes.
pub(crate) enum Job {
    Take {
        lease: Lease,
        report: Report,
    },
    Request {
        lease: Lease,
        from: WorkerId,
    },
    /// Starts a lease handed over to this worker's id, with a take of this process: two
    /// processes with one id may both have asked for it, and only one may work on it.
    Adopt(Lease),
}

/// What became of a take, for the taker to remember.
pub(crate) enum Answer {
    /// The lease was taken (its answer seen).
    Taken(LeaseKey),
    /// The take may have landed, but its answer was lost; `observed`: the lease as the take
    /// read it, `since`: when the first unanswered attempt started.
    Unanswered { observed: Lease, since: Instant },
    /// Somebody else changed the lease first.
    LostRace,
    /// No take landed, or no take was made.
    None,
}

impl Job {
    pub(crate) async fn run(
        self,
        shared: &Arc<Holder>,
        own: &OwnSession,
        acks: &Arc<Unacknowledged>,
    ) -> Answer {
        let me = &shared.id;
        let config = &shared.config;
        let start = shared.now();
        let deadline = start + config.store_timeout;
        match self {
            Job::Take { lease, report } => {
                if !parents_done(shared, &lease, deadline).await {
                    return Answer::None;
                }
                take(shared, own, acks, lease, report, start).await
            }
            Job::Request { lease, from } => {
                // The owner learns of a request from a notice. Until it is sent, a worker
                // leaving tells the owner instead (see `State::asking`).
                let session = lease.owner_incarnation;
                if let Some(incarnation) = session {
                    shared
                        .lock()
                        .asking
                        .insert(lease.key.clone(), (from.clone(), incarnation));
                }
                let request = shared.store.request_handoff(
                    &lease.key,
                    lease.nonce,
                    &from,
                    lease.tenure,
                    me,
                    deadline,
                );
                let tell = match request.await {
                    Ok(Outcome::Done(_)) => {
                        metrics::handoff_requested(me);
                        tracing::info!(lease_key = %lease.key, owner = %from, "handoff requested");
                        shared.lock().pending.insert(
                            lease.key.clone(),
                            Pending {
                                since: start,
                                from: from.clone(),
                            },
                        );
                        true
                    }
                    Ok(Outcome::LostRace { .. }) => false,
                    Err(err) => {
                        metrics::store_error(me, "request_handoff");
                        tracing::warn!(lease_key = %lease.key, error = %err, "handoff request failed");
                        // It may have landed: the notice is harmless if it did not.
                        err.is_ambiguous()
                    }
                };
                if let (true, Some(incarnation)) = (tell, session) {
                    let notice = [lease.key.as_str().to_owned()];
                    shared.notify(&from, incarnation, &notice, deadline).await;
                }
                shared.lock().asking.remove(&lease.key);
                Answer::None
            }
            Job::Adopt(lease) => {
                if shared.lock().held.contains_key(&lease.key) {
                    return Answer::None;
                }
                let key = lease.key.clone();
                // The old owner finished before it handed the lease over: nobody works on it.
                let answer = take(shared, own, acks, lease, Report::Quiet, start).await;
                if matches!(answer, Answer::LostRace) {
                    // Somebody else took it first (another process with this id, or the
                    // previous owner's peers after it expired): stop waiting for it.
                    shared.lock().pending.remove(&key);
                }
                answer
            }
        }
    }
}

/// Takes `lease` for this process, started at `start`, and holds it when the take landed.
pub(crate) async fn take(
    shared: &Arc<Holder>,
    own: &OwnSession,
    acks: &Arc<Unacknowledged>,
    lease: Lease,
    report: Report,
    start: Instant,
) -> Answer {
    let me = &shared.id;
    let deadline = start + shared.config.store_timeout;
    if !begin_take(shared, &lease.key) {
        return Answer::None;
    }
    let incarnation = shared.incarnation();
    let needs_ack = await_ack_before_sending(acks, &lease.key, &report);
    let outcome = shared
        .store
        .take(
            &lease.key,
            lease.nonce,
            me,
            incarnation,
            lease.counter,
            deadline,
        )
        .await;
    let took_before = {
        let mut state = shared.lock();
        state.taking.remove(&lease.key);
        state.took.get(&lease.key).map(|t| (t.nonce, t.tenure))
    };
    let landed_maybe = match &outcome {
        Ok(Outcome::Done(_)) => true,
        Ok(Outcome::LostRace { current }) => current
            .as_ref()
            .is_some_and(|c| c.is_owned_by_incarnation(me, incarnation)),
        Err(err) => err.is_ambiguous(),
    };
    if needs_ack && !landed_maybe {
        // Surely not applied: nothing waits on that session.
        acks.lock().remove(&lease.key);
    }
    let previous = (lease.owner.clone(), lease.owner_incarnation);
    let taken = match judge_take(shared, lease, outcome, incarnation, took_before) {
        Ok(taken) => taken,
        Err(Judged::Lost) => return Answer::LostRace,
        Err(Judged::NotApplied) => return Answer::None,
        Err(Judged::Unanswered(observed)) => {
            let since = match report {
                Report::ForcedSince(since) => since,
                Report::Quiet | Report::Acknowledged { .. } => start,
            };
            return Answer::Unanswered {
                observed: *observed,
                since,
            };
        }
    };
    if shared.incarnation() != incarnation {
        // Taken for a session that has ended since (fenced while the answer was on its way):
        // a peer that fenced it may have started the lease already, taking it for an orphan
        // of that session. Held under the next session, it would be processed twice
        // (`sessions_do_not_hold_a_lease_taken_for_an_ended_session` in
        // `sim/tests/simulate.rs`). A placement round looks at it again.
        tracing::info!(lease_key = %taken.key, tenure = taken.tenure, "taken for a session that has ended since: not held");
        shared.rescan.notify_one();
        return Answer::LostRace;
    }
    hold_taken(shared, own, acks, taken, previous, report, start)
}

/// One take of a lease at a time here, and none of a lease held here: a notice and a round
/// can both see a lease handed over to this worker. False when this take must not be sent.
fn begin_take(shared: &Holder, key: &LeaseKey) -> bool {
    let mut state = shared.lock();
    !state.held.contains_key(key) && state.taking.insert(key.clone())
}

/// A take from a live session needs that session's acknowledgement before the lease is
/// reported. It is recorded before the take is sent: should the answer be lost, the lease
/// turns up as this process's own at a later round, and that round must wait for the same
/// acknowledgement (the owner was never told, and its session keeps beating). True when this
/// take recorded it.
fn await_ack_before_sending(acks: &Unacknowledged, key: &LeaseKey, report: &Report) -> bool {
    match report {
        Report::Acknowledged { owner, incarnation } => acks
            .lock()
            .insert(key.clone(), (owner.clone(), *incarnation))
            .is_none(),
        _ => false,
    }
}

/// Why a take's answer gave no lease.
enum Judged {
    /// Somebody else's write came first.
    Lost,
    /// Throttled, or failed before it was sent: not applied.
    NotApplied,
    /// It may have landed: the lease as observed before the take.
    Unanswered(Box<Lease>),
}

/// The lease a take's answer shows taken by this process (`incarnation`), or why not.
fn judge_take(
    shared: &Holder,
    lease: Lease,
    outcome: crate::store::StoreResult<Outcome<Lease>>,
    incarnation: Incarnation,
    took_before: Option<(u64, u64)>,
) -> Result<Lease, Judged> {
    let me = &shared.id;
    match outcome {
        Ok(Outcome::Done(taken)) => Ok(taken),
        // Our own take, read back as a lost race: its answer was lost, and a retry found the
        // item changed since by somebody else's request. Only this process writes its
        // incarnation, one tenure on from what it observed; unless an earlier take of this
        // process (a round's and a notice's, one after the other, from one observation) made
        // that tenure, and it may be over already.
        Ok(Outcome::LostRace {
            current: Some(current),
        }) if current.is_owned_by_incarnation(me, incarnation)
            && current.tenure == lease.tenure + 1
            && took_before != Some((current.nonce, current.tenure)) =>
        {
            Ok(current)
        }
        Ok(Outcome::LostRace { .. }) => {
            tracing::debug!(lease_key = %lease.key, "take lost the race");
            Err(Judged::Lost)
        }
        Err(err) if err.is_retryable() && !err.is_ambiguous() => {
            metrics::store_error(me, "take");
            tracing::warn!(lease_key = %lease.key, error = %err, "take failed");
            Err(Judged::NotApplied)
        }
        Err(err) => {
            metrics::store_error(me, "take");
            tracing::warn!(lease_key = %lease.key, error = %err, "take unanswered; if it landed, the lease is reported as a forced take");
            Err(Judged::Unanswered(Box::new(lease)))
        }
    }
}

/// Holds a lease taken by a take started at `start` (under the current session), and, when
/// it was taken from a live session, waits for that session's acknowledgement to report it.
fn hold_taken(
    shared: &Arc<Holder>,
    own: &OwnSession,
    acks: &Arc<Unacknowledged>,
    taken: Lease,
    previous: (Option<WorkerId>, Option<Incarnation>),
    report: Report,
    start: Instant,
) -> Answer {
    let (me, config) = (&shared.id, &shared.config);
    let quiet = start + config.quiet_period;
    let report_at = report.time(start, config);
    let forced = report != Report::Quiet;
    if forced {
        metrics::stolen(me);
    }
    tracing::info!(lease_key = %taken.key, previous = ?previous.0, previous_incarnation = ?previous.1, forced, tenure = taken.tenure, "lease taken");
    let key = taken.key.clone();
    let tenure = taken.tenure;
    let took = Took {
        nonce: taken.nonce,
        tenure,
        at: shared.now(),
    };
    shared.lock().took.insert(key.clone(), took);
    if let Some(release) = shared.hold(taken, own.validity_from(start), report_at) {
        spawn_finish(shared, key.clone(), release);
    }
    if let Report::Acknowledged { owner, incarnation } = report {
        acks.lock()
            .insert(key.clone(), (owner.clone(), incarnation));
        let task_shared = Arc::clone(shared);
        let task_acks = Arc::clone(acks);
        let task_key = key.clone();
        let nonce = took.nonce;
        let waited_on = (owner.clone(), incarnation);
        shared.jobs.spawn(
            async move {
                let at = acknowledged(&task_shared, &task_key, owner, incarnation).await;
                {
                    // Only this take's entry: a later take of the key (of an item created
                    // again) has its own.
                    let mut waiting = task_acks.lock();
                    if waiting.get(&task_key) == Some(&waited_on) {
                        waiting.remove(&task_key);
                    }
                }
                task_shared.report_at(&task_key, nonce, tenure, at.max(quiet));
            }
            .in_current_span(),
        );
    }
    Answer::Taken(key)
}

/// After a lease was taken from a live session: tells its owner and waits
/// until the owner has dropped it (the notice is gone from its record: it reads the lease,
/// drops it, and names the notice as seen in its next beat) or the session is surely over.
/// Returns when the lease may be reported.
async fn acknowledged(
    shared: &Holder,
    key: &LeaseKey,
    owner: WorkerId,
    incarnation: Option<Incarnation>,
) -> Instant {
    let config = &shared.config;
    let Some(incarnation) = incarnation else {
        // Given to the id and not taken: no process works on it.
        return shared.now();
    };
    let notice = [key.as_str().to_owned()];
    let mut noticed = false;
    let mut beats: ExpiryTracker<()> = ExpiryTracker::new(config.lease_duration);
    let fenced = || shared.fences.contains(&owner, incarnation);
    loop {
        // Fenced here: the session was seen unchanged for a lease duration, its validity
        // is over (the leases of a fenced session are startable at once).
        if fenced() {
            return shared.now();
        }
        let deadline = shared.now() + config.store_timeout;
        if !noticed {
            noticed = shared.notify(&owner, incarnation, &notice, deadline).await;
        }
        let read = shared.store.get_member(&owner, true, deadline).await;
        let now = shared.now();
        match read {
            Ok(Some(member)) if member.incarnation == Some(incarnation) => {
                if noticed
                    && !member
                        .notices
                        .iter()
                        .any(|n| notice_text(n) == key.as_str())
                {
                    tracing::info!(lease_key = %key, owner = %owner, "the previous owner dropped the lease");
                    return now;
                }
                beats.observe(&(), member.heartbeat, now);
                if beats.is_expired(&(), now) {
                    return now;
                }
            }
            Ok(_) if fenced() => return now,
            // The session cannot beat any more: its validity ends within a lease duration.
            Ok(_) => return now + config.lease_duration,
            Err(err) => {
                tracing::debug!(lease_key = %key, error = %err, "could not read the previous owner's session");
            }
        }
        shared
            .clock
            .sleep_until(now + config.effective_renew_interval())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(quiet: u64) -> WorkerConfig {
        WorkerConfig::default().quiet_period(Duration::from_secs(quiet))
    }

    #[test]
    fn a_quiet_take_is_reported_after_the_quiet_period() {
        let start = Instant::now();
        assert_eq!(Report::Quiet.time(start, &config(0)), start);
        let quiet = Duration::from_secs(3);
        assert_eq!(Report::Quiet.time(start, &config(3)), start + quiet);
    }

    #[test]
    fn a_take_whose_earlier_answer_was_lost_counts_from_that_attempt() {
        let start = Instant::now();
        let since = start - Duration::from_secs(4);
        let lease = WorkerConfig::default().lease_duration;
        assert_eq!(
            Report::ForcedSince(since).time(start, &config(0)),
            since + lease
        );
    }

    #[test]
    fn a_take_from_a_live_session_waits_for_its_acknowledgement() {
        let start = Instant::now();
        let report = Report::Acknowledged {
            owner: WorkerId::new("a").unwrap(),
            incarnation: None,
        };
        assert!(report.time(start, &config(0)) >= start + Duration::from_secs(3600 * 24 * 365));
    }
}
