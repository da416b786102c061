//! What the worker tells the application: one [`LeaseEvent`] per change to its leases.

use super::grant::LeaseGrant;
use super::stop::StopReason;
use crate::lease::{LeaseKey, WorkerId};

/// Something that happened to one of this worker's leases.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// The application may start working on a lease.
    Acquired(LeaseGrant),
    /// The application must stop working on a lease (the grant's signal fires too).
    StopRequested {
        /// The lease.
        key: LeaseKey,
        /// Why.
        reason: StopReason,
    },
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
