//! The session: opens this
//! process's membership record, beats it every `renew_interval` (each accepted beat extends the
//! validity of the session and of every lease it holds), and acts on the notices other workers
//! leave in it: a handoff asked of a lease held here, a lease given to this worker, a lease
//! changed under it, a change of membership.
//!
//! A beat refused means the session has ended under this process (a watcher fenced it after
//! seeing it expire, or another process with this id replaced it): every lease is lost at
//! once. The process then opens a new session: at once if the record is gone, and only after
//! seeing another process's record unchanged for a lease duration if there is one (two live
//! processes with one id must not take the record from each other in turn).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::event::LeaseEvent;
use super::finish::{place, spawn_finish};
use super::metrics;
use super::own::OwnSession;
use super::parts::Announced;
use super::state::{
    drain_notice, notice_text, Finish, Holder, Phase, EXPECT_NOTICE, REVOKE_PREFIX,
};
use super::stop::StopReason;
use super::take::{take, Answer, Report, Unacknowledged};
use crate::clock::timeout_at;
use crate::expiry::ExpiryTracker;
use crate::lease::{Incarnation, Lease, LeaseKey, Member, WorkerId, RESERVED_PREFIX};
use crate::notice::{joined_of_notice, member_of_notice, DRAIN_PREFIX};
use crate::store::{Outcome, StoreError};

/// The session loop's wake-ups, and the departure an operator asked for: used by the session
/// loop and by the worker's departure, nothing else.
#[derive(Default)]
pub(crate) struct Beats {
    /// Wakes the session loop for a beat now (the worker began to leave).
    pub beat_now: Notify,
    /// Until when this worker reads its own record often, because leases may
    /// be given to it any moment (see [`EXPECT_NOTICE`]).
    expecting: Mutex<Option<Instant>>,
    /// Cancelled when an operator asked this process to leave the fleet (a drain notice).
    pub drain: CancellationToken,
}

impl Beats {
    /// Reads the own record often for a while: leases may be given to this worker any moment.
    pub fn expect(&self, until: Instant) {
        let mut expecting = self.expecting.lock().unwrap_or_else(|e| e.into_inner());
        if expecting.is_none_or(|at| at < until) {
            *expecting = Some(until);
        }
        drop(expecting);
        self.beat_now.notify_one();
    }

    /// Starts the graceful departure when `notices` (this process's record's) include a drain
    /// notice for this process (`worker`'s session `incarnation`).
    pub fn drain_if_asked<'a>(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: impl IntoIterator<Item = &'a String>,
    ) {
        let drain = drain_notice(incarnation);
        if !self.drain.is_cancelled() && notices.into_iter().any(|n| notice_text(n) == drain) {
            tracing::info!(%worker, "an operator asked this worker to drain: leaving the fleet");
            self.drain.cancel();
        }
    }
}

/// What the session loop is handed: the [`Holder`] (through `Deref`), the session it keeps
/// ([`OwnSession`]), its wake-ups, and the
/// parts it shares with the taker (the workers announced to it, the takes awaiting an
/// acknowledgement: it takes the leases given to this worker).
pub(crate) struct SessionLoop {
    pub holder: Arc<Holder>,
    pub own: Arc<OwnSession>,
    pub beats: Arc<Beats>,
    pub announced: Arc<Announced>,
    pub unacknowledged: Arc<Unacknowledged>,
    /// The sessions the watcher watches, as the taker named them (see
    /// [`Ring::watched`](super::parts::Ring::watched)).
    pub watched: watch::Receiver<Vec<WorkerId>>,
}

impl std::ops::Deref for SessionLoop {
    type Target = Holder;

    fn deref(&self) -> &Holder {
        &self.holder
    }
}

/// Opens this process's session: writes a fresh record, or replaces the record of this id as
/// it is now (a restart: the process that wrote it is gone or paused; the leases of its
/// session are taken back as forced takes, see the taker). `Ok(false)` when other writers kept
/// changing the record.
pub(crate) async fn open(
    shared: &Holder,
    own: &OwnSession,
    deadline: Instant,
) -> Result<bool, StoreError> {
    // The other sessions of this id read in the record: each is replaced by the time the
    // session opens (see `OwnSession::opened`).
    let mut replaced = Vec::new();
    for _ in 0..3 {
        let start = shared.now();
        let current = shared.store.get_member(&shared.id, true, deadline).await?;
        if current
            .as_ref()
            .is_some_and(|m| m.incarnation == Some(shared.incarnation()))
        {
            if adopt(shared, own, &replaced, deadline).await? {
                return Ok(true);
            }
            continue;
        }
        replaced.extend(current.as_ref().and_then(|m| m.incarnation));
        let opened = shared
            .store
            .open_session(
                &shared.id,
                shared.incarnation(),
                shared.published_capacity(),
                current.as_ref(),
                deadline,
            )
            .await?;
        if let Outcome::Done(member) = opened {
            if let Some(old) = current.and_then(|m| m.incarnation) {
                tracing::info!(replaced = %old, "session opened in place of an earlier process of this id");
            }
            beaten(shared, own, start, member.heartbeat);
            own.opened(replaced);
            return Ok(true);
        }
    }
    Ok(false)
}

/// Takes up this process's own session, found in its record (opened by an attempt whose
/// answer was lost, or written for it): its validity runs from that write, which others may
/// have seen long before the read that found it, so it is never counted from the read. The
/// record is beaten first: the validity counts from that beat's start, and the new heartbeat
/// restarts every observer's count. `Ok(false)` when the beat was refused (the record moved on
/// meanwhile).
async fn adopt(
    shared: &Holder,
    own: &OwnSession,
    replaced: &[Incarnation],
    deadline: Instant,
) -> Result<bool, StoreError> {
    let start = shared.now();
    let beat = shared
        .store
        .beat(
            &shared.id,
            shared.incarnation(),
            shared.published_capacity(),
            None,
            &[],
            deadline,
        )
        .await?;
    match beat {
        Outcome::Done(member) => {
            beaten(shared, own, start, member.heartbeat);
            // The opening it adopts landed before the read that found it was answered, so
            // before this beat's answer.
            own.opened(replaced.to_vec());
            // Opened without a load report: the next beat publishes it.
            shared.loads.unpublished();
            Ok(true)
        }
        Outcome::LostRace { .. } => Ok(false),
    }
}

/// A beat (or the opening of the session) that started at `start` was accepted, writing
/// `heartbeat`: the session and every lease it holds are valid a lease validity from `start`.
fn beaten(shared: &Holder, own: &OwnSession, start: Instant, heartbeat: u64) {
    let (valid_until, lapsed) = own.beaten(start, heartbeat);
    shared.extend(valid_until, lapsed);
}

/// The session ended under this process (a beat refused: fenced by a peer that saw it
/// expire, or replaced by another process with this id): every lease it held is lost at
/// once.
fn lose_session(shared: &SessionLoop, why: &str) {
    shared.own.close();
    shared.own.ended(shared.incarnation());
    shared.session_lost(why);
}

/// Notices being handled, those handled and not yet named as seen in a beat, and those that
/// could not be acted on yet (tried again with the next beat's answer).
#[derive(Default)]
struct Notices {
    in_progress: HashSet<String>,
    handled: Vec<String>,
    deferred: HashSet<String>,
}

impl Notices {
    /// Whether `notice`, in a beat's answer, is still to be acted on: neither being handled
    /// nor handled (one that could not be acted on yet is tried again).
    fn unhandled(&self, notice: &String) -> bool {
        !self.in_progress.contains(notice) && !self.handled.contains(notice)
    }

    /// Whether `notice`, read in this worker's record between beats, is one it has not seen:
    /// worth a beat now. One that could not be acted on waits for the next beat, or a read
    /// between beats would beat again every time it read it.
    fn is_new(&self, notice: &String) -> bool {
        self.unhandled(notice) && !self.deferred.contains(notice)
    }
}

pub(crate) async fn run(shared: Arc<SessionLoop>, cancel: CancellationToken) {
    let interval = shared.config.effective_renew_interval();
    // Balancing by load, the first beat goes at once: it publishes this worker's weight,
    // which the others plan with (1 until then).
    let mut next = if shared.config.balance == crate::config::Balance::Load {
        shared.now()
    } else {
        shared.now() + interval
    };
    let notices = Arc::new(Mutex::new(Notices::default()));
    let mut closed = Closed::new(shared.config.lease_duration);
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = shared.beats.beat_now.notified() => {}
            _ = shared.publish.notified() => {}
            _ = shared.clock.sleep_until(next) => {}
            _ = expected(&shared, &notices) => {}
        }
        // The next beat a whole interval after this one, whatever woke this one (an early
        // beat must not push the schedule further out each time).
        next = shared.now() + interval;
        if !shared.own.lock().open {
            // Closed: look at the record more often than a beat, to open the session again
            // as soon as it may be.
            next = shared.now() + interval / 4;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = reopen(&shared, &mut closed, next) => {}
            }
            continue;
        }
        // Only the store's answer is awaited in a beat: cancelled, the beat ends there.
        next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            next = beat(&shared, &notices, next) => next,
        };
    }
}

/// One beat of the open session, due by `next`: publishes capacity and load, names the
/// notices handled, and hands the new ones on. Returns when the next beat is due.
async fn beat(shared: &Arc<SessionLoop>, notices: &Arc<Mutex<Notices>>, next: Instant) -> Instant {
    let interval = shared.config.effective_renew_interval();
    let seen = std::mem::take(&mut lock(notices).handled);
    let start = shared.now();
    let capacity = shared.published_capacity();
    let report = shared.load_report();
    let result = shared
        .store
        .beat(
            &shared.id,
            shared.incarnation(),
            capacity,
            report.as_ref(),
            &seen,
            next,
        )
        .await;
    match &result {
        Ok(_) => {
            if shared.health.answered(&shared.id, start, shared.now()) {
                // This beat may have published capacity 0 (sent while the spell lasted):
                // publish the real one at once, and look at the fleet (see `finish`).
                shared.beats.beat_now.notify_one();
                shared.rescan.notify_one();
            }
        }
        Err(err) if err.is_ambiguous() => shared.health.unanswered(&shared.id, start),
        Err(_) => {}
    }
    match result {
        Ok(Outcome::Done(member)) => {
            metrics::renewal(&shared.id, shared.now() - start);
            beaten(shared, &shared.own, start, member.heartbeat);
            if let Some(report) = report {
                // New figures may change the assignment: this worker's next round places by
                // them (it asks handoffs on the receivers' behalf), as nothing else would
                // bring a round. A refresh of the same figures does not.
                if shared.loads.published(report, start) {
                    shared.rescan.notify_one();
                }
            }
            dispatch(shared, notices, member);
            next
        }
        Ok(Outcome::LostRace { current }) => {
            lost(shared, current.as_ref());
            *lock(notices) = Notices::default();
            next
        }
        Err(err) => {
            // Tried again soon: the session's validity runs out a lease duration after the
            // last accepted beat began, and a beat interval may be half of that.
            let next = next.min(shared.now() + interval / 4);
            // Named again in the next beat: removing a notice twice is harmless.
            lock(notices).handled.extend(seen);
            metrics::store_error(&shared.id, "beat");
            tracing::warn!(error = %err, "session beat failed");
            next
        }
    }
}

/// What the session loop keeps while the session is closed.
struct Closed {
    /// The record of another process with this id.
    other: ExpiryTracker<(), (Option<Incarnation>, u64)>,
    /// An open of this incarnation whose answer was lost: it may have landed unseen.
    unseen_open: bool,
}

impl Closed {
    fn new(lease_duration: std::time::Duration) -> Self {
        Self {
            other: ExpiryTracker::new(lease_duration),
            unseen_open: false,
        }
    }
}

/// Reads this worker's own record between beats (eventually consistent), and returns as soon
/// as it holds a notice not yet handled, so that the loop beats at once and gets it: every
/// [`notice_poll_interval`](crate::WorkerConfig::notice_poll_interval) (a joiner's handoff
/// request waits that long, not a whole beat), and every `handoff_poll_interval` while leases
/// may be given to this worker any moment (an expectation notice). Pending when neither.
async fn expected(shared: &SessionLoop, notices: &Mutex<Notices>) {
    let standing = shared.config.effective_notice_poll_interval();
    loop {
        let until = *shared
            .beats
            .expecting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = shared.now();
        let poll = match until {
            Some(until) if now < until => shared.config.handoff_poll_interval,
            _ => {
                if until.is_some() {
                    *shared
                        .beats
                        .expecting
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                }
                match standing {
                    Some(poll) => poll,
                    None => return std::future::pending().await,
                }
            }
        };
        shared.clock.sleep_until(now + poll).await;
        let deadline = shared.now() + shared.config.store_timeout;
        if let Ok(Some(member)) = shared.store.get_member(&shared.id, false, deadline).await {
            let notices = lock(notices);
            if let Some(notice) = member.notices.iter().find(|n| notices.is_new(n)) {
                tracing::debug!(notice = %notice_text(notice), "a notice between beats: beating now");
                return;
            }
        }
    }
}

fn lock(notices: &Mutex<Notices>) -> std::sync::MutexGuard<'_, Notices> {
    notices.lock().unwrap_or_else(|e| e.into_inner())
}

/// The session ended under this process.
fn lost(shared: &SessionLoop, current: Option<&Member>) {
    match current {
        Some(member) => {
            tracing::error!(
                worker = %shared.id,
                incarnation = %shared.incarnation(),
                other = ?member.incarnation,
                "session replaced by another process with this worker id: every lease is lost \
                 here; give every process an id of its own"
            );
            metrics::duplicate_worker_id(&shared.id);
            shared.events.emit(LeaseEvent::DuplicateWorkerId {
                worker: shared.id.clone(),
            });
            lose_session(shared, "session replaced by another process with this id");
        }
        None => {
            tracing::warn!("session ended by a peer that saw it expire: every lease is lost here; opening a new one");
            lose_session(shared, "session ended by a peer that saw it expire");
        }
    }
}

/// While the session is closed: opens a new one once nobody else holds this id's record.
async fn reopen(shared: &SessionLoop, closed: &mut Closed, deadline: Instant) {
    let start = shared.now();
    let current = match shared.store.get_member(&shared.id, true, deadline).await {
        Ok(current) => current,
        Err(err) => {
            tracing::warn!(error = %err, "could not read this worker's record to open a session");
            return;
        }
    };
    let replacing = match current {
        None => None,
        // This process's own session, opened by an attempt whose answer was lost: taken up
        // with a beat, never counted from this read.
        Some(member) if member.incarnation == Some(shared.incarnation()) => {
            take_up_own(shared, closed, deadline).await;
            return;
        }
        Some(member) => {
            let version = (member.incarnation, member.heartbeat);
            let now = shared.now();
            closed.other.observe(&(), version, now);
            if !closed.other.is_expired(&(), now) {
                return;
            }
            Some(member)
        }
    };
    if std::mem::take(&mut closed.unseen_open) {
        // An earlier open of this incarnation may have landed and been fenced since (its
        // record is gone, or replaced): a peer that fenced it holds its leases for orphans.
        // Opened again under the same incarnation, at the same heartbeat, the new session
        // would be that fenced one in the peer's eyes
        // (`sessions_open_anew_after_an_open_that_may_have_landed` in `sim/tests/simulate.rs`).
        let next = shared.new_incarnation();
        tracing::info!(incarnation = %next, "an earlier open may have landed unseen: the next session is this incarnation");
    }
    open_again(shared, closed, replacing, start, deadline).await;
}

/// Takes up this process's own session, whose opening landed unseen, with a beat.
async fn take_up_own(shared: &SessionLoop, closed: &mut Closed, deadline: Instant) {
    match adopt(shared, &shared.own, &[], deadline).await {
        Ok(true) => {
            closed.unseen_open = false;
            tracing::info!("session taken up again from its record");
            shared.rescan.notify_one();
        }
        Ok(false) => {}
        Err(err) => {
            tracing::warn!(error = %err, "could not beat this process's own record to take its session up again");
        }
    }
}

/// Opens a session (started at `start`), replacing `replacing`, a record of another process
/// of this id seen unchanged for a lease duration, if any.
async fn open_again(
    shared: &SessionLoop,
    closed: &mut Closed,
    replacing: Option<Member>,
    start: Instant,
    deadline: Instant,
) {
    let opened = shared
        .store
        .open_session(
            &shared.id,
            shared.incarnation(),
            shared.published_capacity(),
            replacing.as_ref(),
            deadline,
        )
        .await;
    match opened {
        Ok(Outcome::Done(member)) => {
            tracing::info!(heartbeat = member.heartbeat, "session opened again");
            // The record replaced was seen unchanged for a lease duration: as with a fence,
            // that session's validity is over and its leases may be started at once.
            if let Some(old) = replacing.as_ref().and_then(|m| m.incarnation) {
                shared.fences.note(&shared.id, old);
            }
            closed.other = ExpiryTracker::new(shared.config.lease_duration);
            beaten(shared, &shared.own, start, member.heartbeat);
            // The new record has no load report: the next beat publishes it.
            shared.loads.unpublished();
            shared.rescan.notify_one();
        }
        Ok(Outcome::LostRace { .. }) => {}
        Err(err) => {
            closed.unseen_open = err.is_ambiguous();
            tracing::warn!(error = %err, "could not open a session");
        }
    }
}

/// Hands the notices of a beat's answer that are not already being handled to a task.
fn dispatch(shared: &Arc<SessionLoop>, notices: &Arc<Mutex<Notices>>, member: Member) {
    let fresh: Vec<String> = {
        let mut notices = lock(notices);
        notices.deferred.retain(|n| member.notices.contains(n));
        let fresh: Vec<String> = member
            .notices
            .into_iter()
            .filter(|n| notices.unhandled(n))
            .collect();
        notices.in_progress.extend(fresh.iter().cloned());
        for notice in &fresh {
            notices.deferred.remove(notice);
        }
        fresh
    };
    if fresh.is_empty() {
        return;
    }
    let (task_shared, notices) = (Arc::clone(shared), Arc::clone(notices));
    shared.jobs.spawn(
        async move {
            // A few at a time: a worker asked for hundreds of leases at once (a cold start)
            // answers within one beat or two.
            let limit = Arc::new(Semaphore::new(NOTICES_AT_ONCE));
            let mut handling = JoinSet::new();
            for notice in fresh {
                let (shared, notices, limit) = (
                    Arc::clone(&task_shared),
                    Arc::clone(&notices),
                    Arc::clone(&limit),
                );
                handling.spawn(
                    async move {
                        let Ok(_permit) = limit.acquire_owned().await else {
                            return;
                        };
                        let handled = handle(&shared, &notice).await;
                        let mut notices = lock(&notices);
                        notices.in_progress.remove(&notice);
                        if handled {
                            notices.handled.push(notice);
                        } else {
                            notices.deferred.insert(notice);
                        }
                    }
                    .in_current_span(),
                );
            }
            while handling.join_next().await.is_some() {}
        }
        .in_current_span(),
    );
}

/// How many notices one worker handles at once.
const NOTICES_AT_ONCE: usize = 32;

/// Acts on one notice; `false` when it could not be acted on yet (it stays, and comes back
/// with the next beat).
async fn handle(shared: &Arc<SessionLoop>, notice: &str) -> bool {
    let notice = notice_text(notice);
    if notice == EXPECT_NOTICE {
        let config = &shared.config;
        shared
            .beats
            .expect(shared.now() + config.effective_renew_interval() * 3);
        return true;
    }
    if let Some(key) = notice.strip_prefix(REVOKE_PREFIX) {
        let Ok(key) = LeaseKey::new(key) else {
            tracing::warn!(notice, "ignoring a revocation that names no lease");
            return true;
        };
        return revoke(&shared.holder, key).await;
    }
    if notice.starts_with(DRAIN_PREFIX) {
        // Another process's drain (of an id this one shares) is not for it.
        shared
            .beats
            .drain_if_asked(&shared.id, shared.incarnation(), [&notice.to_owned()]);
        return true;
    }
    if let Some(worker) = joined_of_notice(notice) {
        // A worker joined next to this one. Watched already (its record was there before this
        // worker's last round: every worker of a deployment starting at once), nothing
        // changes here: no round. Else a round watches it, reading it if its scan does not
        // show it yet.
        if !shared.watched.borrow().contains(&worker) {
            shared.announced.push(worker);
            shared.rescan.notify_one();
        }
        return true;
    }
    if notice.starts_with(RESERVED_PREFIX) {
        // The fleet changed next to this worker: a placement round sees who to watch now,
        // reading the worker named if its scan does not show it yet.
        if let Some(worker) = member_of_notice(notice) {
            shared.announced.push(worker);
        }
        shared.rescan.notify_one();
        return true;
    }
    let Ok(key) = LeaseKey::new(notice) else {
        tracing::warn!(notice, "ignoring a notice that names no lease");
        return true;
    };
    let start = shared.now();
    let deadline = start + shared.config.store_timeout;
    match shared.store.get(&key, deadline).await {
        Ok(lease) => look(shared, key, lease, start).await,
        Err(err) => {
            metrics::store_error(&shared.id, "get");
            tracing::warn!(lease_key = %key, error = %err, "could not read a lease named in a notice");
            false
        }
    }
}

/// A handoff asked of a lease of this session was not done in time (the application did
/// not finish): the lease is lost here at once, and handed over. `false` when the lease could
/// not be read (the notice comes back with the next beat).
async fn revoke(shared: &Arc<Holder>, key: LeaseKey) -> bool {
    let deadline = shared.now() + shared.config.store_timeout;
    let lease = match shared.store.get(&key, deadline).await {
        Ok(lease) => lease,
        Err(err) => {
            metrics::store_error(&shared.id, "get");
            tracing::warn!(lease_key = %key, error = %err, "could not read a lease to revoke");
            return false;
        }
    };
    let Some(lease) = lease.filter(|l| l.is_owned_by_incarnation(&shared.id, shared.incarnation()))
    else {
        return true;
    };
    let Some(to) = lease.handoff_to.clone().filter(|to| *to != shared.id) else {
        return true;
    };
    let (nonce, tenure) = (lease.nonce, lease.tenure);
    let (held, waiting) = {
        let state = shared.lock();
        if state.taking.contains(&key) {
            return false;
        }
        if state.revoked.contains_key(&key) {
            // Revoked already: handed over once the application lets go.
            return true;
        }
        match state.held.get(&key) {
            Some(h) if h.tenure != tenure => return true,
            Some(h) => (true, matches!(h.phase, Phase::Waiting { .. })),
            None => (false, false),
        }
    };
    if !held || waiting {
        // Nothing here works on it (never reported to the application): at once.
        tracing::warn!(lease_key = %key, to = %to, "a handoff not done in time: handing the lease over");
        shared.lose(&key, Some(tenure), "a handoff was not finished in time");
        spawn_finish(shared, key, Finish::handing_over(nonce, tenure, to));
        return true;
    }
    // The application is told the lease is lost, and the lease handed over once it let go
    // (it may be inside a checkpoint that takes a while): whoever starts it next must not
    // start it while this application still works. An application that never lets go
    // holds it no longer than a handoff timeout more.
    tracing::warn!(lease_key = %key, to = %to, "the application did not finish a handoff in time: the lease is lost here, and handed over once the application lets go");
    shared
        .lock()
        .revoked
        .insert(key.clone(), (tenure, nonce, to.clone()));
    shared.lose(&key, Some(tenure), "a handoff was not finished in time");
    let task_shared = Arc::clone(shared);
    let limit = shared.now() + shared.config.handoff_timeout;
    shared.jobs.spawn(
        async move {
            task_shared.clock.sleep_until(limit).await;
            let late = {
                let mut state = task_shared.lock();
                match state.revoked.get(&key) {
                    Some((t, _, _)) if *t == tenure => state.revoked.remove(&key),
                    _ => None,
                }
            };
            if let Some((_, nonce, to)) = late {
                tracing::warn!(lease_key = %key, "the application did not let go of a revoked lease in time: handing it over anyway");
                spawn_finish(&task_shared, key, Finish::handing_over(nonce, tenure, to));
            }
        }
        .in_current_span(),
    );
    true
}

/// Brings this worker in line with `lease` as just read; `false` when it must look again
/// later (a handoff asked of a lease not yet reported to the application).
async fn look(
    shared: &Arc<SessionLoop>,
    key: LeaseKey,
    lease: Option<Lease>,
    start: Instant,
) -> bool {
    let me = &shared.id;
    let held_tenure = shared.lock().held.get(&key).map(|h| h.tenure);
    let Some(lease) = lease else {
        shared.lock().pending.remove(&key);
        if held_tenure.is_some() {
            shared.lose(&key, None, "the lease was deleted from the table");
        }
        return true;
    };
    if held_tenure.is_some_and(|tenure| tenure > lease.tenure) {
        // Read before this worker's own take was applied: it tells nothing new.
        return true;
    }
    if lease.is_owned_by_incarnation(me, shared.incarnation()) {
        return look_at_ours(&shared.holder, key, lease, held_tenure);
    }
    if lease.is_owned_by(me) && lease.owner_incarnation.is_none() {
        look_at_given(shared, key, lease, held_tenure, start).await;
        return true;
    }
    if held_tenure.is_some() {
        look_at_taken(&shared.holder, key, lease).await;
    }
    true
}

/// `look` at a lease of this session in the table, held here in `held_tenure` (if at all).
fn look_at_ours(
    shared: &Arc<Holder>,
    key: LeaseKey,
    lease: Lease,
    held_tenure: Option<u64>,
) -> bool {
    let me = &shared.id;
    match (held_tenure, &lease.handoff_to) {
        (Some(tenure), Some(to)) if tenure == lease.tenure && to != me => {
            return ask_to_stop(shared, &key, tenure, to.clone());
        }
        (Some(_), _) => {}
        // Ours in the table, not held here (lost when the session's validity ran out), and
        // asked of us: nothing works on it here, so it is handed over (or retired) at once
        // instead of after the requester's handoff timeout.
        (None, Some(to)) if to != me => {
            let (taking, revoked) = {
                let state = shared.lock();
                (
                    state.taking.contains(&key),
                    state.revoked.contains_key(&key),
                )
            };
            if taking {
                // A take of it is still out (its answer late or lost): once it is held, the
                // next beat asks its application to stop. Dropped here, the request would
                // wait for the worker doing the chores to tell of it again.
                return false;
            }
            if revoked {
                // Revoked here a moment ago: it is handed over once the application has let
                // go of it, not before. (A handoff notice told again by the chores, read
                // right after the revocation, handed it over at once while the application
                // still worked on it: `sessions_hand_a_revoked_lease_over_only_once_let_go`
                // in `sim/tests/simulate.rs`.)
                return true;
            }
            tracing::info!(lease_key = %key, to = %to, "a lease of this session not held here was asked for: handing it over");
            spawn_finish(
                shared,
                key,
                Finish::handing_over(lease.nonce, lease.tenure, to.clone()),
            );
        }
        // Ours in the table and not held here: the next placement round resumes it.
        (None, _) => shared.rescan.notify_one(),
    }
    true
}

/// `look` at a lease given (or handed over) to this worker's id: whoever gave it made sure
/// that nobody works on it any more. A worker leaving passes it on.
async fn look_at_given(
    shared: &Arc<SessionLoop>,
    key: LeaseKey,
    lease: Lease,
    held_tenure: Option<u64>,
    start: Instant,
) {
    if let Some(tenure) = held_tenure.filter(|t| *t < lease.tenure) {
        // Held here in an earlier tenure, since moved on (taken by another process of this
        // id, then given back): what the application works on is no longer this worker's. It
        // stops; the next placement round takes the lease anew.
        shared.lose(
            &key,
            Some(tenure),
            "the lease was given to this worker again",
        );
        shared.rescan.notify_one();
        return;
    }
    if held_tenure.is_some() {
        return;
    }
    if shared.lock().shutting_down {
        place(shared, lease, start + shared.config.store_timeout).await;
    } else if let Answer::Unanswered { .. } = take(
        &shared.holder,
        &shared.own,
        &shared.unacknowledged,
        lease,
        Report::Quiet,
        start,
    )
    .await
    {
        // It may have landed: then the lease is this session's in the table and held nowhere,
        // and nothing would look at it before the slow scan
        // (`sessions_look_again_after_an_unanswered_take_from_a_notice` in
        // `sim/tests/simulate.rs`). A round a beat later resumes it, or takes it again.
        let later = Arc::clone(shared);
        shared.jobs.spawn(
            async move {
                let at = later.now() + later.config.effective_renew_interval();
                later.clock.sleep_until(at).await;
                later.rescan.notify_one();
            }
            .in_current_span(),
        );
    }
}

/// `look` at a lease held here that the table shows as somebody else's now.
async fn look_at_taken(shared: &Arc<Holder>, key: LeaseKey, lease: Lease) {
    let why = format!(
        "the lease is now {:?}'s (tenure {})",
        lease.owner.as_ref().map(|o| o.as_str()),
        lease.tenure
    );
    if let Some(wait) = shared.lose(&key, None, &why) {
        // Taken from this session (a steal, another process of this id): the taker reports the
        // lease once this notice is named seen, so it is named once the application has let go
        // of the grant (it may still be inside a checkpoint or a read), as a revoked lease is
        // handed over; at most a handoff timeout later.
        let until = shared.now() + shared.config.handoff_timeout;
        if timeout_at(&*shared.clock, until, wait.let_go())
            .await
            .is_err()
        {
            tracing::warn!(lease_key = %key, "the application did not let go of a lease taken from this session within the handoff timeout");
        }
    }
}

/// A handoff (or retirement) was asked of a lease held here: tell the application. `false`
/// while the lease waits to be reported (asked again at the next beat).
fn ask_to_stop(
    shared: &Arc<Holder>,
    key: &LeaseKey,
    tenure: u64,
    to: crate::lease::WorkerId,
) -> bool {
    match shared.lock().held.get(key).map(|h| &h.phase) {
        Some(Phase::Active) => {}
        Some(Phase::Waiting { .. }) => return false,
        _ => return true,
    }
    let deadline = shared.now() + shared.config.handoff_timeout;
    let reason = if to.is_retire_marker() {
        StopReason::Retired { deadline }
    } else {
        StopReason::Handoff { to, deadline }
    };
    if let Some(finish) = shared.request_stop(key, tenure, reason) {
        spawn_finish(shared, key.clone(), finish);
    }
    true
}
