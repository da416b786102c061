//! What the application receives: events, and per lease a grant with its stop signal and a
//! fenced checkpointer.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::finish::spawn_finish;
use super::state::Shared;
use crate::lease::{LeaseKey, WorkerId, RESERVED_PREFIX, SHARD_END};
use crate::store::{Outcome, StoreError};

/// Why the application must stop working on a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The lease is no longer this worker's (taken over, deleted, or its validity ran out
    /// without a renewal). Stop at once; no checkpoint is possible.
    Lost,
    /// Another worker asked for the lease to balance the fleet. Finish in-flight work,
    /// checkpoint, then call [`LeaseGrant::finish`] (or drop the grant) before `deadline`;
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

/// Why a checkpoint was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The lease is no longer held in the tenure this grant was given for.
    #[error("lease {key} is no longer held by {worker} in tenure {tenure}; the checkpoint was not stored")]
    NotHeld {
        /// The lease.
        key: LeaseKey,
        /// This worker.
        worker: WorkerId,
        /// The tenure of the grant.
        tenure: u64,
    },
    /// The value starts with the reserved prefix; use
    /// [`Checkpointer::end_of_shard`] for the end of a shard.
    #[error(
        "checkpoint {value:?} of lease {key} starts with the reserved prefix {RESERVED_PREFIX:?}"
    )]
    Reserved {
        /// The lease.
        key: LeaseKey,
        /// The refused value.
        value: String,
    },
    /// The value is not a valid checkpoint for this consumer (for example not a Kinesis
    /// sequence number).
    #[error("checkpoint {value:?} of lease {key} is invalid: {reason}")]
    Invalid {
        /// The lease.
        key: LeaseKey,
        /// The refused value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// The shard was already checkpointed at its end; no later checkpoint is taken.
    #[error("lease {key} was already checkpointed at the end of its shard")]
    ShardEnded {
        /// The lease.
        key: LeaseKey,
    },
    /// The store gave no definite answer.
    #[error("checkpoint of lease {key} failed")]
    Store {
        /// The lease.
        key: LeaseKey,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// Stores checkpoints for one lease, fenced by the tenure it was granted in. Cheap to clone.
#[derive(Clone)]
pub struct Checkpointer {
    shared: Arc<Shared>,
    key: LeaseKey,
    tenure: u64,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("key", &self.key)
            .field("tenure", &self.tenure)
            .finish()
    }
}

impl Checkpointer {
    /// Stores `value` as the lease's checkpoint. Fails with [`CheckpointError::NotHeld`]
    /// without writing when this worker already knows the lease is gone, and when the store
    /// refuses it because the lease changed hands (even if it came back in a later tenure).
    /// Values starting with [`RESERVED_PREFIX`] are refused.
    pub async fn checkpoint(&self, value: &str) -> Result<(), CheckpointError> {
        if value.starts_with(RESERVED_PREFIX) {
            return Err(CheckpointError::Reserved {
                key: self.key.clone(),
                value: value.to_owned(),
            });
        }
        self.store(value).await
    }

    /// Marks the shard as processed to its end ([`SHARD_END`]). Call it once the last record
    /// of a closed shard was processed; then finish (or drop) the grant: the lease is released
    /// and never taken again, and the shard's children become ready. Later checkpoints are
    /// refused with [`CheckpointError::ShardEnded`].
    pub async fn end_of_shard(&self) -> Result<(), CheckpointError> {
        self.store(SHARD_END).await?;
        if let Some(finish) = self.shared.mark_ended(&self.key, self.tenure) {
            spawn_finish(&self.shared, self.key.clone(), finish);
        }
        tracing::info!(lease_key = %self.key, tenure = self.tenure, "shard processed to its end");
        Ok(())
    }

    /// Stores a checkpoint in the reserved namespace (the Kinesis consumer's start marker).
    #[cfg(feature = "kinesis")]
    pub(crate) async fn checkpoint_reserved(&self, value: &str) -> Result<(), CheckpointError> {
        debug_assert!(value.starts_with(RESERVED_PREFIX) && value != SHARD_END);
        self.store(value).await
    }

    async fn store(&self, value: &str) -> Result<(), CheckpointError> {
        let not_held = || CheckpointError::NotHeld {
            key: self.key.clone(),
            worker: self.shared.id.clone(),
            tenure: self.tenure,
        };
        let Some((valid_until, ended)) = self.shared.valid_until(&self.key, self.tenure) else {
            return Err(not_held());
        };
        if ended {
            return Err(CheckpointError::ShardEnded {
                key: self.key.clone(),
            });
        }
        let deadline = valid_until.min(self.shared.now() + self.shared.config.store_timeout);
        let outcome = self
            .shared
            .store
            .checkpoint(&self.key, &self.shared.id, self.tenure, value, deadline)
            .await
            .map_err(|source| CheckpointError::Store {
                key: self.key.clone(),
                source,
            })?;
        match outcome {
            Outcome::Done(_) => {
                tracing::debug!(lease_key = %self.key, tenure = self.tenure, "checkpointed");
                Ok(())
            }
            Outcome::LostRace { .. } => {
                // The lease moved on under this grant (a take, a hand edit): it is lost here,
                // whatever else told this worker so far.
                self.shared.lose(
                    &self.key,
                    Some(self.tenure),
                    "a checkpoint found the lease no longer held in this tenure",
                );
                Err(not_held())
            }
        }
    }

    /// The lease this checkpointer writes to.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }
}

/// How the application let go of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetGo {
    /// [`LeaseGrant::finish`]: done with the lease.
    Finished,
    /// The grant was dropped without `finish`.
    Dropped,
    /// The grant was dropped while its thread unwound a panic.
    Panicked,
}

/// A grant let go of: the lease, the tenure of the grant, and how.
pub(crate) type Finished = (LeaseKey, u64, LetGo);

/// Tells the worker, once, that the application has let go of a grant, and how.
#[derive(Debug)]
pub(crate) struct FinishGuard {
    pub(crate) key: LeaseKey,
    pub(crate) tenure: u64,
    pub(crate) tx: mpsc::UnboundedSender<Finished>,
    pub(crate) finished: bool,
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        let how = if self.finished {
            LetGo::Finished
        } else if std::thread::panicking() {
            LetGo::Panicked
        } else {
            LetGo::Dropped
        };
        let _ = self.tx.send((self.key.clone(), self.tenure, how));
    }
}

/// One lease handed to the application: its last checkpoint, its stop signal and its
/// checkpointer.
///
/// Keep the grant while working on the lease. When [`stopped`](Self::stopped) fires with a
/// handoff or shutdown, checkpoint and call [`finish`](Self::finish) (or drop the grant): the
/// worker then hands the lease over (or releases it) at once.
///
/// A grant let go of while the lease is active, with no stop requested, gives the lease back
/// to the fleet at once: [`finish`](Self::finish) releases it (the application is done with
/// it); dropping the grant without `finish` (a panicking or forgotten task) abandons it: it is
/// released too, and reported ([`LeaseEvent::Abandoned`], a metric and a warning). Either way
/// the balance places the lease again, possibly back here with a new grant.
#[derive(Debug)]
pub struct LeaseGrant {
    key: LeaseKey,
    tenure: u64,
    checkpoint: Option<String>,
    parents: Vec<LeaseKey>,
    stop: watch::Receiver<Option<StopReason>>,
    checkpointer: Checkpointer,
    finish: FinishGuard,
}

impl LeaseGrant {
    pub(crate) fn new(
        shared: Arc<Shared>,
        key: LeaseKey,
        tenure: u64,
        checkpoint: Option<String>,
        parents: Vec<LeaseKey>,
        stop: watch::Receiver<Option<StopReason>>,
        finished: mpsc::UnboundedSender<Finished>,
    ) -> Self {
        Self {
            checkpointer: Checkpointer {
                shared,
                key: key.clone(),
                tenure,
            },
            finish: FinishGuard {
                key: key.clone(),
                tenure,
                tx: finished,
                finished: false,
            },
            key,
            tenure,
            checkpoint,
            parents,
            stop,
        }
    }

    /// The lease.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The tenure (fencing token) this grant is for.
    pub fn tenure(&self) -> u64 {
        self.tenure
    }

    /// The checkpoint stored when the lease was acquired.
    pub fn checkpoint(&self) -> Option<&str> {
        self.checkpoint.as_deref()
    }

    /// The lease's parents (a split child has one, a merged child two). A consumer starts a
    /// child with no checkpoint at the beginning of its shard, whatever its initial position
    /// for new shards: the parents' data ran up to the child's first record.
    pub fn parents(&self) -> &[LeaseKey] {
        &self.parents
    }

    /// The stop reason, if a stop was already requested.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.borrow().clone()
    }

    /// Resolves when the application must stop working on the lease.
    pub async fn stopped(&mut self) -> StopReason {
        match self.stop.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or(StopReason::Lost),
            // The worker is gone: nothing proves ownership any more.
            Err(_) => StopReason::Lost,
        }
    }

    /// Resolves when the lease is lost, even after a handoff or shutdown stop was requested
    /// (for example when the requester took it after its timeout). Use it to cut a graceful
    /// finish short.
    pub async fn lost(&mut self) {
        let _ = self
            .stop
            .wait_for(|reason| matches!(reason, Some(StopReason::Lost)))
            .await;
    }

    /// A fenced checkpointer for this lease (clone it into the processing code).
    pub fn checkpointer(&self) -> Checkpointer {
        self.checkpointer.clone()
    }

    /// Stores a checkpoint; see [`Checkpointer::checkpoint`].
    pub async fn checkpoint_at(&self, value: &str) -> Result<(), CheckpointError> {
        self.checkpointer.checkpoint(value).await
    }

    /// Marks the shard as processed to its end; see [`Checkpointer::end_of_shard`].
    pub async fn end_of_shard(&self) -> Result<(), CheckpointError> {
        self.checkpointer.end_of_shard().await
    }

    /// The application has finished with the lease: hand it over or release it now (after a
    /// stop request: as the request says; while active: release it for the balance to place
    /// again, reported as [`LeaseEvent::Released`], not as an abandonment).
    pub fn finish(mut self) {
        self.finish.finished = true;
    }
}
