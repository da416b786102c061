//! The parts of a worker's state that its loops share, each naming who writes it, so that a
//! loop is handed only the parts it uses (see "What each loop is handed" in
//! `docs/ARCHITECTURE.md`):
//!
//! - [`Base`]: who the worker is, its settings, its clock and its store; read by every loop,
//!   changed by none;
//! - [`Ring`]: the sessions the watcher watches and what it saw, between the taker (which
//!   names them) and the watcher (which reads them and reports suspects);
//! - [`EventSink`]: the sending end of the application's event stream;
//! - [`Receivers`]: where a lease released here goes, written by the taker's rounds, read by
//!   the releases;
//! - [`Announced`]: workers that announced themselves, from the session loop to the taker.
//!
//! The sessions known to be over are [`Fences`](super::fenced::Fences); the leases held here
//! are the [`Holder`](super::state::Holder) in `state.rs`; this process's session is
//! [`OwnSession`](super::own::OwnSession) in `own.rs`; the session loop's wake-ups are [`Beats`](super::session::Beats); the takes awaiting an
//! acknowledgement are [`Unacknowledged`](super::take::Unacknowledged).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::event::{LeaseEvent, LeaseEvents, Unread};
use super::metrics;
use crate::clock::Clock;
use crate::config::WorkerConfig;
use crate::lease::{Incarnation, LeaseKey, WorkerId};
use crate::notice::with_nonce;
use crate::store::{LeaseStore, Outcome};

/// What every loop of a worker reads and none changes.
pub(crate) struct Base {
    pub id: WorkerId,
    /// Every store call ends by its deadline (see `bounded.rs`).
    pub store: Box<dyn LeaseStore>,
    /// The clock every lease decision of this worker reads.
    pub clock: Arc<dyn Clock>,
    pub config: WorkerConfig,
}

impl Base {
    /// Now, on this worker's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Leaves `notices` in `worker`'s session `incarnation`; `true` once they are there,
    /// `false` when that session is gone (or the store did not answer).
    pub async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> bool {
        self.tell(worker, incarnation, notices, deadline).await == Told::Yes
    }

    /// [`notify`](Self::notify), telling a session that is gone apart from a store that did
    /// not answer.
    pub async fn tell(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> Told {
        // Each notice is told apart by a nonce: the same lease named again before the receiver
        // acknowledged the first notice must not be removed with it.
        let notices: Vec<String> = notices.iter().map(|text| with_nonce(text)).collect();
        let mut incarnation = incarnation;
        let mut retold = false;
        loop {
            match self
                .store
                .notify(worker, incarnation, &notices, deadline)
                .await
            {
                Ok(Outcome::Done(_)) => return Told::Yes,
                // A later session of the id (a restart this worker had not seen yet) is told
                // instead: what a notice names is read from the table by whoever gets it, and
                // a lease given to the id is that session's to take. Told nothing, it would
                // wait for the chores, up to a slow scan
                // (`sessions_tell_the_current_session_of_a_restarted_receiver` in
                // `sim/tests/simulate.rs`).
                Ok(Outcome::LostRace {
                    current: Some(member),
                }) if !retold && member.session && member.incarnation != Some(incarnation) => {
                    let Some(later) = member.incarnation else {
                        return Told::Gone;
                    };
                    tracing::info!(to = %worker, session = %later, "that session is gone: telling the id's current one");
                    incarnation = later;
                    retold = true;
                }
                Ok(Outcome::LostRace { .. }) => {
                    tracing::info!(to = %worker, "no notice left: that session is gone");
                    return Told::Gone;
                }
                Err(err) => {
                    metrics::store_error(&self.id, "notify");
                    tracing::warn!(to = %worker, error = %err, "could not leave a notice");
                    return Told::Failed;
                }
            }
        }
    }
}

/// What became of a notice (see [`Base::tell`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told {
    /// It is in the session's record.
    Yes,
    /// The session is gone: nobody is there to tell.
    Gone,
    /// The store did not answer: it may or may not be there.
    Failed,
}

/// One state of a session record: the incarnation that wrote it and its heartbeat.
pub(crate) type SessionVersion = (Option<Incarnation>, u64);

/// Between the taker and the watcher: which sessions to watch, and what was seen of them.
#[derive(Default)]
pub(crate) struct Ring {
    /// The workers whose sessions this one watches (the next live ids, nearest first), as the
    /// last placement round saw the fleet. Written by the taker.
    pub watched: watch::Sender<Vec<WorkerId>>,
    /// The watcher is done with a session it was named (fenced or gone) and waits to be
    /// named it again or another, even the same worker again (restarted under a new session).
    /// Set by the watcher, taken by the taker.
    pub watch_done: AtomicBool,
    /// Watched sessions that look dead (not fenced yet), for the next placement round to
    /// warn the workers their leases would go to. Set by the watcher, taken by the taker.
    pub suspects: Mutex<Vec<(WorkerId, Incarnation)>>,
    /// When this worker first saw each member's current (incarnation, heartbeat), as its
    /// placement rounds read them; the watcher starts from there. Written by the taker.
    pub members_seen: Mutex<HashMap<WorkerId, (SessionVersion, Instant)>>,
    /// Sessions the watcher saw open in place of the one it watched (a restart): their
    /// record was written while it watched, so the process is known to live although it has
    /// not beaten yet (see `Taker::proven`). Set by the watcher, read and pruned by the taker.
    pub appeared: Mutex<HashMap<WorkerId, Incarnation>>,
}

impl Ring {
    /// The sessions the watcher suspects, taken.
    pub fn take_suspects(&self) -> Vec<(WorkerId, Incarnation)> {
        std::mem::take(&mut *self.suspects.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reports `suspect` to the next placement round.
    pub fn suspect(&self, suspect: (WorkerId, Incarnation)) {
        let mut suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        if !suspects.contains(&suspect) {
            suspects.push(suspect);
        }
    }

    /// The sessions the watcher saw open in place of the one it watched, by worker.
    pub fn appeared(&self) -> std::sync::MutexGuard<'_, HashMap<WorkerId, Incarnation>> {
        self.appeared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member records first seen here, by worker.
    pub fn members_seen(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<WorkerId, (SessionVersion, Instant)>> {
        self.members_seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending end of the application's event stream ([`LeaseEvents`]); closed when the
/// worker stops.
pub(crate) struct EventSink {
    /// Taken (closing the application's stream) when the worker stops.
    events: Mutex<Option<mpsc::UnboundedSender<LeaseEvent>>>,
    /// The grants sent and not read yet, shared with the application's end.
    unread: Unread,
}

impl EventSink {
    /// A sink and the application's end of its stream.
    pub fn new() -> (Self, LeaseEvents) {
        let (tx, rx) = mpsc::unbounded_channel();
        let unread = Unread::default();
        let sink = Self {
            events: Mutex::new(Some(tx)),
            unread: Arc::clone(&unread),
        };
        (sink, LeaseEvents::new(rx, unread))
    }

    pub fn emit(&self, event: LeaseEvent) {
        // A grant counts as unread until the application's end reads it. Once that end is
        // dropped, sending fails and the grant is dropped here: an abandoned grant, released
        // like any other.
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let Some(events) = events.as_ref() else {
            return;
        };
        if let LeaseEvent::Acquired(grant) = &event {
            self.unread().insert(grant.key().clone(), grant.tenure());
        }
        if let Err(mpsc::error::SendError(LeaseEvent::Acquired(grant))) = events.send(event) {
            self.unread().remove(grant.key());
        }
    }

    /// The grants waiting unread in the application's stream: the tenure of each, by lease.
    /// Taken after the held leases' lock, never before.
    pub fn unread(&self) -> MutexGuard<'_, HashMap<LeaseKey, u64>> {
        self.unread.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the application's event stream.
    pub fn close(&self) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// A live session a released lease may be given to, and how many leases it held at the last
/// placement round (see [`Receivers`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Receiver {
    pub worker: WorkerId,
    pub incarnation: Incarnation,
    pub held: u32,
}

/// Where a lease released here goes: the other live sessions at the last placement round,
/// with what they held. Written by the taker's rounds (and by a departure), read by releases.
#[derive(Default)]
pub(crate) struct Receivers(Mutex<Vec<Receiver>>);

impl Receivers {
    /// Replaces the receivers with those a round (or a departure) read.
    pub fn set(&self, receivers: Vec<Receiver>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = receivers;
    }

    /// Forgets a receiver whose session is gone.
    pub fn drop_worker(&self, worker: &WorkerId) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|r| r.worker != *worker);
    }

    /// Picks the live session a lease released here should go to: the one that held the
    /// fewest at the last placement round (counting what was given to it since).
    pub fn pick(&self) -> Option<Receiver> {
        let mut receivers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let receiver = receivers
            .iter_mut()
            .min_by(|a, b| a.held.cmp(&b.held).then(a.worker.cmp(&b.worker)))?;
        receiver.held += 1;
        Some(receiver.clone())
    }
}

/// Workers that told this one they joined (or left) next to it, for the taker's next round to
/// read if its scan does not show them (see `Taker::see_announced`). Written by the session
/// loop, which reads the notices; taken by the taker.
#[derive(Default)]
pub(crate) struct Announced(Mutex<Vec<WorkerId>>);

impl Announced {
    /// A worker announced itself.
    pub fn push(&self, worker: WorkerId) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(worker);
    }

    /// The workers announced since the last call, taken.
    pub fn take(&self) -> Vec<WorkerId> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Announced workers a round could not read, for the next one.
    pub fn put_back(&self, workers: Vec<WorkerId>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(workers);
    }
}
