//! Why and how the work on a lease stops: the reason the worker gives the application
//! ([`StopReason`]) and the way the application lets go of its grant ([`LetGo`]).

use tokio::time::Instant;

use crate::lease::{LeaseKey, WorkerId};

/// Why the application must stop working on a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The lease is no longer this worker's (taken over, deleted, or its validity ran out
    /// without a renewal). Stop at once; no checkpoint is possible.
    Lost,
    /// Another worker asked for the lease to balance the fleet. Finish in-flight work,
    /// checkpoint, then call [`LeaseGrant::finish`](super::LeaseGrant::finish) (or drop the grant) before `deadline`;
    /// after it, the lease is taken anyway.
    Handoff {
        /// The worker the lease goes to.
        to: WorkerId,
        /// When the requester stops waiting.
        deadline: Instant,
    },
    /// The worker is shutting down. Checkpoint and finish before `deadline`; the lease is
    /// then released for a peer to take at once.
    Shutdown {
        /// When the worker stops waiting.
        deadline: Instant,
    },
    /// The lease's shard no longer exists in the source. Finish before `deadline`; the
    /// lease is then deleted (after it, the application is told the lease is lost and the
    /// lease is deleted anyway).
    Retired {
        /// When the worker stops waiting.
        deadline: Instant,
    },
}

impl std::fmt::Display for StopReason {
    /// One short phrase for logs: `lost`, `handoff to W`, `shutdown`, `retired`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lost => f.write_str("lost"),
            Self::Handoff { to, .. } => write!(f, "handoff to {to}"),
            Self::Shutdown { .. } => f.write_str("shutdown"),
            Self::Retired { .. } => f.write_str("retired: its shard left the source"),
        }
    }
}

/// How the application let go of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetGo {
    /// [`LeaseGrant::finish`](super::LeaseGrant::finish): done with the lease.
    Finished,
    /// The grant was dropped without `finish`.
    Dropped,
    /// The grant was dropped while its thread unwound a panic.
    Panicked,
}

/// A grant let go of: the lease, the tenure of the grant, and how.
pub(crate) type Finished = (LeaseKey, u64, LetGo);
