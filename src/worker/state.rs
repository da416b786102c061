//! The worker's local state, shared by its tasks under one mutex that is never held across an
//! `.await`.
//!
//! A lease this worker owns in the table is in `held` from the moment its take (or adoption)
//! succeeds until it is lost, handed over or released. The application considers it held
//! only in the `Active` and `Stopping` phases, and only while `now < valid_until`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::event::LeaseEvent;
use super::fenced::Fences;
use super::grant::{LeaseGrant, Ledger};
use super::health::Health;
use super::load::Loads;
use super::metrics;
use super::parts::{Base, EventSink, Receiver, Receivers};
use super::stop::{Finished, LetGo, StopReason};
use crate::clock::Clock;
use crate::config::WorkerConfig;
use crate::lease::{ByKey, Incarnation, Lease, LeaseKey, WorkerId, SHARD_END};
use crate::store::LeaseStore;

/// Why a lease held here is processed by nobody; see
/// [`WorkerMonitor::stalled_leases`](super::WorkerMonitor::stalled_leases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stall {
    /// Reported to the application, but its grant waits unread in the event stream
    /// ([`LeaseEvents`](super::LeaseEvents)) while the lease is renewed.
    Undelivered,
    /// Its grant was dropped while active (without `finish` or a stop request) and its
    /// release is not answered yet; if the release fails, until the lease's validity here ends
    /// (then peers may take it).
    Abandoned,
    /// Active, and its application made no progress (no checkpoint, no
    /// [`LeaseGrant::progress`]) for longer than
    /// [`progress_window`](crate::WorkerConfig::progress_window) since the grant was given or
    /// since its last progress. Only with a window configured.
    NoProgress,
    /// Its application stopped processing it for a failure it cannot get past (a poison
    /// record; [`LeaseGrant::halt`](super::LeaseGrant::halt)): the lease stays held here,
    /// unprocessed, until its tenure ends or the application makes progress again.
    Halted,
}

/// Where a held lease is in its life at this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Owned in the table, not yet reported: a forced take waits for the previous owner's
    /// validity to end, or a quiet period runs.
    Waiting { report_at: Instant },
    /// Reported to the application.
    Active,
    /// The application was told to stop and has not finished yet.
    Stopping(StopReason),
}

#[derive(Debug)]
pub(crate) struct Held {
    /// The item held (its [`Lease::nonce`]): every write of the tenure names it.
    pub nonce: u64,
    pub tenure: u64,
    pub valid_until: Instant,
    pub phase: Phase,
    pub checkpoint: Option<String>,
    /// How many checkpoint writes of this tenure were started here: the next one is numbered
    /// one more (see [`CheckpointWrite`](crate::lease::CheckpointWrite)).
    pub checkpoints: u64,
    pub parents: Vec<LeaseKey>,
    /// The application dropped or finished its grant already.
    pub app_done: bool,
    /// The application checkpointed the end of the shard.
    pub ended: bool,
    /// When the application last made progress (a checkpoint or `LeaseGrant::progress`), or
    /// was given the grant.
    pub progress_at: Instant,
    /// The application halted the lease (a failure it cannot get past) and made no progress
    /// since.
    pub halted: bool,
    pub stop: watch::Sender<Option<StopReason>>,
}

impl Held {
    /// Halted by its application and still in its hands (not asked to stop): a stall, and
    /// named in the worker's record so that the balance leaves it here.
    fn is_halted(&self) -> bool {
        self.halted && self.phase == Phase::Active
    }
}

/// Resolves once the application has let go of a lease lost here (its grant finished or
/// dropped; at once when it was never given one).
pub(crate) struct LetGoWait(watch::Sender<Option<StopReason>>);

impl LetGoWait {
    pub async fn let_go(&self) {
        self.0.closed().await;
    }
}

/// What [`Holder::checkpoint_slot`] found.
pub(crate) enum CheckpointSlot {
    /// Held in the tenure of item `nonce`: write by `valid_until`, numbered `seq`.
    Open {
        nonce: u64,
        valid_until: Instant,
        seq: u64,
    },
    /// Checkpointed at the end of its shard already.
    Ended,
    /// Not held here in the tenure (or not yet reported, or its validity passed).
    NotHeld,
}

/// A handoff this worker asked for and waits on.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub since: Instant,
    pub from: WorkerId,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    // Ordered maps: the renewer and the handoff poll walk them, and a seeded simulation must
    // replay the same order of store calls.
    pub held: BTreeMap<LeaseKey, Held>,
    pub pending: BTreeMap<LeaseKey, Pending>,
    /// Leases whose grant was abandoned, until their release is answered (or, if it fails,
    /// until the validity they had here ends), by that validity.
    pub abandoned: BTreeMap<LeaseKey, Instant>,
    /// Leases lost here because their validity ended unrenewed (not refused), by tenure and
    /// item: given up in the table once the application lets go of the grant (see
    /// [`Holder::expire`]).
    pub unrenewed: BTreeMap<LeaseKey, (u64, u64)>,
    /// Leases revoked here (a handoff not done in time), by tenure and item, with the
    /// worker they go to: handed over once the application lets go of the grant.
    pub revoked: BTreeMap<LeaseKey, (u64, u64, WorkerId)>,
    pub shutting_down: bool,
    /// Leases a take of this worker is in flight for.
    pub taking: HashSet<LeaseKey>,
    /// Handoff requests of this worker whose owner may not have been told yet
    /// (the request is out, or landed and its notice is not sent), with the owner's session.
    /// A worker that leaves tells those owners, so that no request of a worker gone waits for
    /// the chores to be told, long after the fleet settled
    /// (`sessions_a_leaving_worker_tells_the_owners_it_asked` in `sim/tests/simulate.rs`).
    pub asking: BTreeMap<LeaseKey, (WorkerId, Incarnation)>,
    /// The item and tenure each lease was last taken in by this process: a later take that
    /// finds the lease in that tenure under this incarnation met this earlier take, not its
    /// own. Pruned by [`Holder::forget_takes`].
    pub took: HashMap<LeaseKey, Took>,
}

/// A take of this process: the item, the tenure it made, and when its answer came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Took {
    pub nonce: u64,
    pub tenure: u64,
    pub at: Instant,
}

pub(crate) use crate::notice::{
    drain_notice, joined_notice, member_notice, notice_text, revoke_notice, EXPECT_NOTICE,
    REVOKE_PREFIX,
};

/// The worker as a holder of leases: the leases held here, the incarnation whose takes hold
/// them, and what the writes that take, report and let go of them need (the event sink, the
/// jobs in flight, the fences, the receivers). Handed to the session loop, the taker and the
/// control loop, which each hold, report and lose leases; what only some of them use is
/// handed to those alone (the session itself: [`OwnSession`](super::own::OwnSession); the
/// session loop's wake-ups: [`Beats`](super::session::Beats); the taker's view, ring and
/// announcements: [`TakerParts`](super::taker::TakerParts)). Reads [`Base`] through `Deref`:
/// who the worker is, its settings, its clock and its store.
pub(crate) struct Holder {
    pub base: Arc<Base>,
    /// This process's incarnation: written by its takes and beats. It
    /// names the session: a process whose session ended opens the next one as a new
    /// incarnation, so that a fence of the old session never covers the new one's leases.
    incarnation: std::sync::atomic::AtomicU64,
    /// Whether the store's round trips are fast enough to hold leases.
    pub health: Health,
    /// The load figures this worker publishes.
    pub loads: Loads,
    state: Mutex<State>,
    /// Wakes the fencer when a validity or report time changed.
    pub changed: Notify,
    /// Wakes the session loop for a beat now: the load report changed in a way the fleet must
    /// see at once (a lease halted, which the balance must leave where it is).
    pub publish: Notify,
    /// Wakes the taker for a round now (the discoverer changed the table, a session was
    /// fenced outside a round).
    pub rescan: Arc<Notify>,
    /// Wakes `shutdown` when a lease leaves `held`.
    released: Notify,
    /// The application's event stream.
    pub events: EventSink,
    finished: mpsc::UnboundedSender<Finished>,
    /// Handoff completions and releases in flight.
    pub jobs: TaskTracker,
    /// Cancelled when the worker stops (shutdown or drop).
    pub cancel: CancellationToken,
    /// Sessions this process ended by a fence after seeing them expire (or whose record it
    /// replaced); their leases may be started at once. Each round of the taker forgets those
    /// the table no longer names.
    pub fences: Arc<Fences>,
    /// Where a lease released here goes.
    pub receivers: Receivers,
}

impl std::ops::Deref for Holder {
    type Target = Base;

    fn deref(&self) -> &Base {
        &self.base
    }
}

/// What to do after the application finished with a lease: each write names the item
/// (`nonce`) and the tenure it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finish {
    HandOff {
        nonce: u64,
        tenure: u64,
        to: WorkerId,
    },
    /// Give the lease up; `ended`: because its shard was processed to the end.
    Release {
        nonce: u64,
        tenure: u64,
        ended: bool,
    },
    /// Delete the lease: its shard left the source.
    Retire { nonce: u64, tenure: u64 },
    /// Release the lease, lost here because its validity ended unrenewed: the application
    /// was told it is lost and has let go.
    GiveUp { nonce: u64, tenure: u64 },
}

impl Finish {
    /// Hand the lease over to `to` (retire it, if `to` is the retirement marker).
    pub(crate) fn handing_over(nonce: u64, tenure: u64, to: WorkerId) -> Self {
        if to.is_retire_marker() {
            Finish::Retire { nonce, tenure }
        } else {
            Finish::HandOff { nonce, tenure, to }
        }
    }
}

/// The taker's reading of the table at the end of one round.
#[derive(Debug, Default)]
pub(crate) struct TableView {
    pub leases: Vec<Arc<Lease>>,
    /// Leases whose owner this worker judges alive; empty unless `discoverer` or `standby`
    /// (nobody else lists the source).
    pub owner_alive: HashSet<LeaseKey>,
    pub malformed: usize,
    /// This worker has the smallest id among the live workers: it runs discovery.
    pub discoverer: bool,
    /// This worker has the second smallest id among the live workers: it lists the source
    /// now and then in case the discoverer cannot (see `discoverer.rs`).
    pub standby: bool,
}

impl Holder {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: WorkerId,
        incarnation: Incarnation,
        store: Box<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
        events: EventSink,
        finished: mpsc::UnboundedSender<Finished>,
    ) -> Self {
        let health = Health::new(config.effective_renew_interval());
        let loads = Loads::new(&config);
        let base = Arc::new(Base {
            id,
            store,
            clock,
            config,
        });
        let rescan = Arc::new(Notify::new());
        Self {
            fences: Arc::new(Fences::new(Arc::clone(&base), Arc::clone(&rescan))),
            base,
            incarnation: std::sync::atomic::AtomicU64::new(incarnation.get()),
            health,
            loads,
            state: Mutex::default(),
            changed: Notify::new(),
            publish: Notify::new(),
            rescan,
            released: Notify::new(),
            events,
            finished,
            jobs: TaskTracker::new(),
            cancel: CancellationToken::new(),
            receivers: Receivers::default(),
        }
    }

    /// This process's incarnation (of its current session).
    pub fn incarnation(&self) -> Incarnation {
        Incarnation::new(self.incarnation.load(Ordering::SeqCst))
    }

    /// Draws the incarnation of the next session, after this one ended.
    pub fn new_incarnation(&self) -> Incarnation {
        let next = Incarnation::random();
        self.incarnation.store(next.get(), Ordering::SeqCst);
        next
    }

    /// A beat (or the opening of the session) that started at `start` was accepted: every
    /// lease held here is valid until `valid_until` (see `session::beaten`). `lapsed`: the
    /// session's validity ran out here before this beat, and a placement round resumes its
    /// leases.
    pub fn extend(&self, valid_until: Instant, lapsed: bool) {
        if lapsed {
            self.rescan.notify_one();
        }
        for held in self.lock().held.values_mut() {
            if valid_until > held.valid_until {
                held.valid_until = valid_until;
            }
        }
        self.changed.notify_one();
    }

    /// The session ended under this process (see `session::lost`): every lease it held is
    /// lost at once, no handoff it asked for is awaited, and the next session is a new
    /// incarnation.
    pub fn session_lost(&self, why: &str) {
        let keys: Vec<LeaseKey> = self.lock().held.keys().cloned().collect();
        for key in keys {
            self.lose(&key, None, why);
        }
        self.lock().pending.clear();
        let next = self.new_incarnation();
        tracing::info!(incarnation = %next, "the next session is this incarnation");
    }

    /// Reads the table for where leases released here should go (the sessions that take
    /// leases, with what they hold): a leaving worker's last placement round may be old.
    pub async fn refresh_receivers(&self, deadline: Instant) {
        let snapshot = match self.store.snapshot_eventually(deadline).await {
            Ok(snapshot) => snapshot,
            Err(err) => {
                tracing::warn!(error = %err, "could not read where released leases should go");
                return;
            }
        };
        let mut held: HashMap<&WorkerId, u32> = HashMap::new();
        for lease in &snapshot.leases {
            if let Some(owner) = &lease.owner {
                *held.entry(owner).or_default() += 1;
            }
        }
        let receivers = snapshot
            .members
            .iter()
            .filter(|m| m.worker != self.id && m.capacity != Some(0))
            .filter_map(|m| {
                m.incarnation.map(|incarnation| Receiver {
                    worker: m.worker.clone(),
                    incarnation,
                    held: held.get(&m.worker).copied().unwrap_or(0),
                })
            })
            .collect();
        self.receivers.set(receivers);
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a few assignments; a panic between them cannot
        // leave the map unusable, so a poisoned lock is still consistent enough to go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The capacity this worker publishes in its membership record: none once it is shutting
    /// down or while its store round trips are too slow to hold leases, so that peers plan
    /// without it (a worker still counted would be given the leases it releases or loses, and
    /// nobody would take them).
    pub fn published_capacity(&self) -> Option<u32> {
        if self.lock().shutting_down || self.health.is_slow() {
            Some(0)
        } else {
            self.config.published_capacity()
        }
    }

    /// The leases held here that nobody processes, and why; see
    /// [`WorkerMonitor::stalled_leases`](super::WorkerMonitor::stalled_leases).
    pub fn stalled(&self) -> Vec<(LeaseKey, Stall)> {
        let now = self.now();
        let mut state = self.lock();
        state.abandoned.retain(|_, valid_until| *valid_until > now);
        let mut stalled: Vec<(LeaseKey, Stall)> = state
            .abandoned
            .keys()
            .map(|key| (key.clone(), Stall::Abandoned))
            .collect();
        let reported = state
            .held
            .iter()
            .filter(|(_, h)| h.valid_until > now && !matches!(h.phase, Phase::Waiting { .. }));
        let unread = self.events.unread();
        for (key, held) in reported {
            if unread.get(key) == Some(&held.tenure) {
                stalled.push((key.clone(), Stall::Undelivered));
            } else if held.is_halted() {
                stalled.push((key.clone(), Stall::Halted));
            } else if let Some(window) = self.config.progress_window {
                // Active only: a lease asked to stop has the stop's deadline instead.
                if held.phase == Phase::Active
                    && now.saturating_duration_since(held.progress_at) > window
                {
                    stalled.push((key.clone(), Stall::NoProgress));
                }
            }
        }
        stalled.sort_by(|a, b| a.0.cmp(&b.0));
        stalled
    }

    /// Records a load figure the application reported for `key` in `tenure`, if the lease is
    /// still held here in that tenure.
    pub fn note_load(&self, key: &LeaseKey, tenure: u64, value: f64) {
        let now = self.now();
        if self
            .lock()
            .held
            .get(key)
            .is_some_and(|h| h.tenure == tenure)
        {
            self.loads.record(key, value, now);
        }
    }

    /// The load report due with this membership write, if any (see `load.rs`).
    pub fn load_report(&self) -> Option<crate::lease::LoadReport> {
        let halted = self
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.is_halted())
            .map(|(key, _)| key.clone())
            .collect();
        let held = || self.lock().held.keys().cloned().collect();
        self.loads.due(held, halted, self.now())
    }

    /// The application made progress on `key` in `tenure`.
    pub fn note_progress(&self, key: &LeaseKey, tenure: u64) {
        let now = self.now();
        if let Some(held) = self.lock().held.get_mut(key).filter(|h| h.tenure == tenure) {
            held.progress_at = now;
            held.halted = false;
        }
    }

    /// The application halted `key` in `tenure`: it processes it no further. The next beat,
    /// at once, names it in the record, so that the fleet's balance leaves it here.
    pub fn note_halted(&self, key: &LeaseKey, tenure: u64) {
        if let Some(held) = self.lock().held.get_mut(key).filter(|h| h.tenure == tenure) {
            held.halted = true;
        } else {
            return;
        }
        self.publish.notify_one();
    }

    /// Forgets the takes of this process that no take can meet any more: those `by_key` (a
    /// view read now, by key) shows the item of in a later tenure (tenures only grow), and, once
    /// `horizon` old, those of leases neither held nor being taken here (a take is decided on
    /// a view at most a round old). So `took` holds no more than the leases in the table and
    /// those taken within the horizon, however many keys come and go.
    pub fn forget_takes(&self, by_key: &ByKey<'_>, horizon: Duration) {
        let now = self.now();
        let mut state = self.lock();
        let State {
            took, held, taking, ..
        } = &mut *state;
        took.retain(|key, t| {
            let moved_on = by_key
                .get(key)
                .is_some_and(|l| l.nonce == t.nonce && l.tenure > t.tenure);
            let old = now.saturating_duration_since(t.at) >= horizon
                && !held.contains_key(key)
                && !taking.contains(key);
            !moved_on && !old
        });
    }

    /// The release of an abandoned lease was answered: it is no longer stalled here.
    pub fn release_answered(&self, key: &LeaseKey) {
        self.lock().abandoned.remove(key);
    }

    /// The leases the application may work on now.
    pub fn held_now(&self) -> Vec<LeaseKey> {
        let now = self.now();
        let mut keys: Vec<_> = self
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.valid_until > now && !matches!(h.phase, Phase::Waiting { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Whether a checkpoint of `key` in `tenure` may be written now, and if so until when
    /// (the lease's local validity) and under which number: one more than the last checkpoint
    /// write of the tenure started here (1 for the first). Numbers are drawn in the order the
    /// application's calls reach this point, so the later of two calls wins in the table.
    pub fn checkpoint_slot(&self, key: &LeaseKey, tenure: u64) -> CheckpointSlot {
        let now = self.now();
        let mut state = self.lock();
        let Some(held) = state
            .held
            .get_mut(key)
            .filter(|h| h.tenure == tenure && h.valid_until > now)
            .filter(|h| !matches!(h.phase, Phase::Waiting { .. }))
        else {
            return CheckpointSlot::NotHeld;
        };
        if held.ended {
            return CheckpointSlot::Ended;
        }
        held.checkpoints += 1;
        CheckpointSlot::Open {
            nonce: held.nonce,
            valid_until: held.valid_until,
            seq: held.checkpoints,
        }
    }

    /// Starts holding `lease` (just taken or received by this worker), valid until
    /// `valid_until`; reports it to the application at once, or at `report_at` when that is
    /// later than now. A lease whose shard was already processed to its end is not held: the
    /// release to write is returned instead.
    #[must_use = "a returned release must be written"]
    pub fn hold(
        self: &Arc<Self>,
        lease: Lease,
        valid_until: Instant,
        report_at: Instant,
    ) -> Option<Finish> {
        let Lease {
            key,
            nonce,
            tenure,
            checkpoint,
            parents,
            ..
        } = lease;
        if checkpoint.as_deref() == Some(SHARD_END) {
            // Handed over or resumed after its shard was processed to the end: there is
            // nothing left to do with it but let it go.
            tracing::info!(lease_key = %key, tenure, "lease of a finished shard received; releasing it");
            self.lock().pending.remove(&key);
            return Some(Finish::Release {
                nonce,
                tenure,
                ended: true,
            });
        }
        let (stop, _) = watch::channel(None);
        let mut state = self.lock();
        match state.held.get(&key).map(|h| h.tenure) {
            // Taken twice by this process at once (a notice and a handoff poll saw it handed
            // over together; the second take reads the first as its own): held already.
            Some(held) if held == tenure => return None,
            // Taken again from itself: the grant of the older tenure ends here.
            Some(older) => {
                drop(state);
                self.lose(
                    &key,
                    Some(older),
                    "taken again by this worker in a new tenure",
                );
                state = self.lock();
            }
            None => {}
        }
        state.pending.remove(&key);
        state.abandoned.remove(&key);
        state.unrenewed.remove(&key);
        state.revoked.remove(&key);
        state.held.insert(
            key.clone(),
            Held {
                nonce,
                tenure,
                valid_until,
                phase: Phase::Waiting { report_at },
                checkpoint,
                checkpoints: 0,
                parents,
                app_done: false,
                ended: false,
                progress_at: self.now(),
                halted: false,
                stop,
            },
        );
        drop(state);
        metrics::taken(&self.id);
        // The control task fences on this lease's validity from now on: wake it to re-plan.
        self.changed.notify_one();
        if report_at <= self.now() {
            self.report(&key);
        } else {
            tracing::info!(lease_key = %key, tenure, ?report_at, "lease taken; reported once the previous owner's validity has ended");
        }
        None
    }

    /// Sets when a `Waiting` lease of item `nonce` in `tenure` is reported (the control task
    /// reports it then). The item counts: a lease deleted and created again walks through the
    /// same tenures, and a wait for the old item must not report the new one.
    pub fn report_at(&self, key: &LeaseKey, nonce: u64, tenure: u64, at: Instant) {
        if let Some(held) = self
            .lock()
            .held
            .get_mut(key)
            .filter(|h| h.tenure == tenure && h.nonce == nonce)
        {
            if let Phase::Waiting { report_at } = &mut held.phase {
                *report_at = at;
            }
        }
        self.changed.notify_one();
    }

    /// Moves a `Waiting` lease to `Active` and gives the application its grant.
    pub fn report(self: &Arc<Self>, key: &LeaseKey) {
        let mut state = self.lock();
        let Some(held) = state.held.get_mut(key) else {
            return;
        };
        if !matches!(held.phase, Phase::Waiting { .. }) || held.valid_until <= self.now() {
            return;
        }
        held.phase = Phase::Active;
        held.progress_at = self.now();
        let ledger: Arc<dyn Ledger> = Arc::new(Arc::clone(self));
        let grant = LeaseGrant::new(
            ledger,
            key.clone(),
            held.tenure,
            held.checkpoint.clone(),
            held.parents.clone(),
            held.stop.subscribe(),
            self.finished.clone(),
        );
        let tenure = held.tenure;
        let shutting_down = state.shutting_down;
        drop(state);
        tracing::info!(lease_key = %key, owner = %self.id, tenure, "lease acquired");
        metrics::held(&self.id, self.lock().held.len());
        self.events.emit(LeaseEvent::Acquired(grant));
        if shutting_down {
            let deadline = self.now() + self.config.shutdown_timeout;
            self.request_stop(key, tenure, StopReason::Shutdown { deadline });
        }
    }

    /// Tells the application to stop `key` (a handoff or a shutdown). Returns what to do at
    /// once if the application had already finished with it.
    pub fn request_stop(&self, key: &LeaseKey, tenure: u64, reason: StopReason) -> Option<Finish> {
        let mut state = self.lock();
        let held = state.held.get_mut(key).filter(|h| h.tenure == tenure)?;
        if !matches!(held.phase, Phase::Active) {
            return None;
        }
        held.phase = Phase::Stopping(reason.clone());
        held.stop.send_replace(Some(reason.clone()));
        let app_done = held.app_done;
        drop(state);
        tracing::info!(lease_key = %key, ?reason, "stop requested");
        if app_done {
            self.finish(key, tenure, LetGo::Finished)
        } else {
            None
        }
    }

    /// The application let go of its grant of `key` in `tenure` (`how`). Unless the lease is
    /// still waiting to be reported, it leaves `held` now (so this worker no longer considers
    /// it held) and the caller hands it over, releases or deletes it: as the stop request
    /// says; at its shard's end; and, while active with no stop requested, released for the
    /// balance to place again (an abandonment when the grant was dropped without `finish`:
    /// reported, counted and logged).
    pub fn finish(&self, key: &LeaseKey, tenure: u64, how: LetGo) -> Option<Finish> {
        let mut state = self.lock();
        if state.revoked.get(key).is_some_and(|(t, _, _)| *t == tenure) {
            let (_, nonce, to) = state.revoked.remove(key).expect("present");
            return Some(Finish::handing_over(nonce, tenure, to));
        }
        if let Some(&(_, nonce)) = state.unrenewed.get(key).filter(|(t, _)| *t == tenure) {
            state.unrenewed.remove(key);
            return Some(Finish::GiveUp { nonce, tenure });
        }
        let held = state.held.get_mut(key).filter(|h| h.tenure == tenure)?;
        held.app_done = true;
        let abandoned =
            matches!(held.phase, Phase::Active) && !held.ended && how != LetGo::Finished;
        let (valid_until, nonce) = (held.valid_until, held.nonce);
        let finish = match (&held.phase, held.ended) {
            (Phase::Stopping(StopReason::Retired { .. }), _) => Finish::Retire { nonce, tenure },
            (Phase::Active | Phase::Stopping(_), true) => Finish::Release {
                nonce,
                tenure,
                ended: true,
            },
            (Phase::Stopping(StopReason::Handoff { to, .. }), false) => Finish::HandOff {
                nonce,
                tenure,
                to: to.clone(),
            },
            (Phase::Stopping(StopReason::Shutdown { .. }) | Phase::Active, false) => {
                Finish::Release {
                    nonce,
                    tenure,
                    ended: false,
                }
            }
            _ => return None,
        };
        let active = matches!(held.phase, Phase::Active);
        state.held.remove(key);
        if abandoned {
            state.abandoned.insert(key.clone(), valid_until);
        }
        self.released.notify_waiters();
        let count = state.held.len();
        drop(state);
        metrics::held(&self.id, count);
        if abandoned {
            metrics::abandoned(&self.id);
            let panicked = how == LetGo::Panicked;
            tracing::warn!(lease_key = %key, owner = %self.id, tenure, panicked, "grant dropped while active without finish or stop request; nobody processes the lease here: releasing it");
            self.events.emit(LeaseEvent::Abandoned { key: key.clone() });
        } else if active && !matches!(finish, Finish::Release { ended: true, .. }) {
            tracing::info!(lease_key = %key, tenure, "the application finished an active lease; releasing it");
        }
        Some(finish)
    }

    /// The application checkpointed the end of `key`'s shard in `tenure`. Returns what to do
    /// at once if the application had already finished with it.
    pub fn mark_ended(&self, key: &LeaseKey, tenure: u64) -> Option<Finish> {
        let mut state = self.lock();
        let held = state.held.get_mut(key).filter(|h| h.tenure == tenure)?;
        held.ended = true;
        let app_done = held.app_done;
        drop(state);
        if app_done {
            self.finish(key, tenure, LetGo::Finished)
        } else {
            None
        }
    }

    /// Forgets `key` (in `tenure`, if given) and tells the application it is lost.
    pub fn lose(&self, key: &LeaseKey, tenure: Option<u64>, why: &str) -> Option<LetGoWait> {
        let mut state = self.lock();
        let held = state.held.get(key)?;
        if tenure.is_some_and(|t| t != held.tenure) {
            return None;
        }
        let held = state.held.remove(key).expect("present");
        self.released.notify_waiters();
        let count = state.held.len();
        drop(state);
        held.stop.send_replace(Some(StopReason::Lost));
        metrics::lost(&self.id);
        metrics::held(&self.id, count);
        if matches!(held.phase, Phase::Waiting { .. }) {
            tracing::info!(lease_key = %key, why, "lease lost before it was reported");
        } else {
            tracing::warn!(lease_key = %key, owner = %self.id, tenure = held.tenure, why, "lease lost");
            self.events.emit(LeaseEvent::Lost { key: key.clone() });
        }
        Some(LetGoWait(held.stop))
    }

    /// `key`'s validity here ended in `tenure` without a successful renewal: its renewals
    /// went unanswered or failed, none was refused. It is lost; but the table may still name
    /// this worker its owner, and renewals still on their way may keep it looking alive to the
    /// peers for a while, so it is also given up in the table (a release, conditional on this
    /// owner and tenure) once nobody here can still be processing it: when the application
    /// lets go of its grant. A lease never reported is left to expire instead: it may be a
    /// forced take whose previous holder is still processing it.
    pub fn expire(&self, key: &LeaseKey, tenure: u64) {
        let (reported, nonce) = match self.lock().held.get(key) {
            Some(held) if held.tenure == tenure => {
                (!matches!(held.phase, Phase::Waiting { .. }), held.nonce)
            }
            _ => return,
        };
        self.lose(
            key,
            Some(tenure),
            "validity ended without a successful renewal",
        );
        if reported {
            self.lock().unrenewed.insert(key.clone(), (tenure, nonce));
        }
    }

    /// Completes once no lease is held here any more (finished, handed over, released or
    /// lost).
    pub async fn all_finished(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a lease leaving in between still wakes us.
            released.as_mut().enable();
            if self.lock().held.is_empty() {
                return;
            }
            released.await;
        }
    }

    /// Tells every grant its lease is lost, without touching the store (the worker is being
    /// dropped: a crash as far as the table is concerned, but nobody may go on processing).
    pub fn lose_all_locally(&self) {
        let mut state = self.lock();
        for held in std::mem::take(&mut state.held).into_values() {
            held.stop.send_replace(Some(StopReason::Lost));
        }
    }
}
