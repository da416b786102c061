//! What the worker tells the application: one [`LeaseEvent`] per change to its leases, in the
//! one stream [`LeaseEvents`] that [`WorkerBuilder::start`](super::WorkerBuilder::start)
//! returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::grant::LeaseGrant;
use crate::lease::{LeaseKey, WorkerId};

/// Something that happened to one of this worker's leases.
///
/// A request to stop is not an event: it reaches the holder of the lease through its grant
/// ([`LeaseGrant::stopped`]), with its reason.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// The application may start working on a lease.
    Acquired(LeaseGrant),
    /// The lease was handed over to `to` after the application finished.
    HandedOff {
        /// The lease.
        key: LeaseKey,
        /// The new owner.
        to: WorkerId,
    },
    /// The lease was released (on shutdown) for a peer to take.
    Released {
        /// The lease.
        key: LeaseKey,
    },
    /// The lease was lost without a graceful stop.
    Lost {
        /// The lease.
        key: LeaseKey,
    },
    /// The shard was processed to its end (checkpointed
    /// [`SHARD_END`](crate::lease::SHARD_END)) and, the application having finished, its
    /// lease was released; its children can start.
    ShardEnded {
        /// The lease.
        key: LeaseKey,
    },
    /// The lease's shard left the source; the application finished and the lease was deleted.
    Retired {
        /// The lease.
        key: LeaseKey,
    },
    /// Another live process uses this worker's id (a restarted process whose old one is
    /// paused or partitioned, or two hosts with one id). A configuration error: give every
    /// process an id of its own. Until then neither processes a lease the other holds, each
    /// keeps what it has, and the fleet counts both as one worker. Reported once per episode
    /// (again after a lease duration without a sign of the other process).
    DuplicateWorkerId {
        /// This worker's id.
        worker: WorkerId,
    },
    /// The application dropped the lease's grant while it was active, without calling
    /// [`LeaseGrant::finish`] and without a stop request (a task that panicked, or forgot the
    /// grant). Nobody processes the lease here any more, so it is released at once (a
    /// [`Released`](Self::Released) event follows once the release is written) and the
    /// balance places it again, here or on a peer. Counted in
    /// [`LEASES_ABANDONED`](super::metrics::LEASES_ABANDONED) and logged as a warning.
    Abandoned {
        /// The lease.
        key: LeaseKey,
    },
}

/// The grants given to the application and not read yet, by lease, with their tenure: a lease
/// whose grant waits here is held and renewed while nobody processes it
/// ([`Stall::Undelivered`](super::Stall::Undelivered)). A lease has one tenure here at a
/// time; an entry of an earlier tenure is only replaced or left, never mistaken for the
/// current one, since every look-up compares the tenure.
pub(crate) type Unread = Arc<Mutex<HashMap<LeaseKey, u64>>>;

/// The worker's events, in order, as [`WorkerBuilder::start`](super::WorkerBuilder::start)
/// returns them beside the worker. The stream ends when the worker stops.
///
/// Read it for as long as the worker runs: events queue here (unbounded) until read, and a
/// lease whose [`Acquired`](LeaseEvent::Acquired) grant waits unread is held and renewed
/// while nobody processes it; [`WorkerMonitor::stalled_leases`](super::WorkerMonitor::stalled_leases)
/// reports it as [`Stall::Undelivered`](super::Stall::Undelivered), so a probe on
/// [`healthy`](super::WorkerMonitor::healthy) fails. Dropping the stream drops every later
/// grant with its event: each lease is abandoned ([`LeaseEvent::Abandoned`]) and released,
/// so a worker whose stream is dropped holds nothing for long. Keep it in a binding that
/// lives as long as the worker (`let (worker, _events) = ...`, not `let (worker, _) = ...`,
/// which drops it at once).
#[derive(Debug)]
pub struct LeaseEvents {
    events: mpsc::UnboundedReceiver<LeaseEvent>,
    unread: Unread,
}

impl LeaseEvents {
    pub(crate) fn new(events: mpsc::UnboundedReceiver<LeaseEvent>, unread: Unread) -> Self {
        Self { events, unread }
    }

    /// The next event; `None` once the worker stopped and every event was read.
    /// Cancel-safe: an event is only taken from the stream when this returns it.
    pub async fn recv(&mut self) -> Option<LeaseEvent> {
        let event = self.events.recv().await?;
        self.read(&event);
        Some(event)
    }

    /// The next event if one is waiting; `None` if none is (or the stream ended).
    pub fn try_recv(&mut self) -> Option<LeaseEvent> {
        let event = self.events.try_recv().ok()?;
        self.read(&event);
        Some(event)
    }

    fn read(&self, event: &LeaseEvent) {
        if let LeaseEvent::Acquired(grant) = event {
            let mut unread = self.unread.lock().unwrap_or_else(|e| e.into_inner());
            if unread.get(grant.key()) == Some(&grant.tenure()) {
                unread.remove(grant.key());
            }
        }
    }
}
