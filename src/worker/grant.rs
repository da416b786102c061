//! What the application receives: events, and per lease a grant with its stop signal and a
//! fenced checkpointer.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use async_trait::async_trait;

use super::load::InvalidLoad;
use super::stop::{Finished, LetGo, StopReason};
use crate::lease::{LeaseKey, WorkerId, RESERVED_PREFIX, SHARD_END};
use crate::store::StoreError;

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
    /// A later checkpoint of the same grant was stored before this one reached the table (two
    /// calls at once, or this one retried after its first answer was lost): the table keeps
    /// the later value, and this one was not stored. The lease is still held.
    #[error("checkpoint {value:?} of lease {key} was not stored: a later checkpoint of this grant was stored first")]
    Superseded {
        /// The lease.
        key: LeaseKey,
        /// The value not stored.
        value: String,
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

/// Where a grant's checkpoints go: the worker's fenced checkpoint write (implemented in
/// `checkpoint.rs`, so that this file needs nothing of the worker's state).
#[async_trait]
pub(crate) trait Ledger: Send + Sync {
    /// Stores `value` as the checkpoint of `key` in `tenure`, fenced by that tenure.
    async fn store(&self, key: &LeaseKey, tenure: u64, value: &str) -> Result<(), CheckpointError>;

    /// The shard of `key` was checkpointed at its end in `tenure`: let the lease go once the
    /// application has finished.
    fn shard_ended(&self, key: &LeaseKey, tenure: u64);

    /// The application made progress on `key` in `tenure` (no store write).
    fn progress(&self, key: &LeaseKey, tenure: u64);

    /// The application reported a load figure for `key` in `tenure` (no store write).
    fn load(&self, key: &LeaseKey, tenure: u64, value: f64);

    /// The application halted `key` in `tenure` (no store write).
    fn halt(&self, key: &LeaseKey, tenure: u64);
}

/// Stores checkpoints for one lease, fenced by the tenure it was granted in. Cheap to clone.
#[derive(Clone)]
pub struct Checkpointer {
    ledger: Arc<dyn Ledger>,
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
        self.ledger.shard_ended(&self.key, self.tenure);
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
        // Asking to checkpoint is progress, whatever the store answers: its trouble is
        // reported elsewhere (store errors, a slow store, a lost lease).
        self.progress();
        self.ledger.store(&self.key, self.tenure, value).await
    }

    /// Tells the worker that the application is making progress on the lease, without writing
    /// anything: cheap enough to call for every record. Every checkpoint counts as progress
    /// too. With [`WorkerConfig::progress_window`](crate::WorkerConfig::progress_window) set,
    /// a lease with no progress for that long is reported stalled
    /// ([`Stall::NoProgress`](super::Stall::NoProgress)). Does nothing once the grant's tenure
    /// is over.
    pub fn progress(&self) {
        self.ledger.progress(&self.key, self.tenure);
    }

    /// Tells the worker that the application stopped processing the lease for a failure it
    /// cannot get past (a poison record it will not skip), without writing anything: the
    /// lease stays held here, and [`WorkerMonitor::stalled_leases`](super::WorkerMonitor::stalled_leases)
    /// reports it as [`Stall::Halted`](super::Stall::Halted) (so a health probe fails and
    /// names it) until the tenure ends or the application makes [`progress`](Self::progress)
    /// again. The worker's next beat, sent at once, names the lease in its record
    /// ([`Member::halted`](crate::lease::Member::halted)): no worker moves it for balance
    /// meanwhile (a lease that fails wherever it goes would travel round the fleet), and
    /// `shardlease status` marks it. `reason` is logged. Does nothing once the grant's tenure
    /// is over.
    pub fn halt(&self, reason: &str) {
        tracing::error!(lease_key = %self.key, tenure = self.tenure, reason, "the application halted the lease: it stays held here, unprocessed");
        self.ledger.halt(&self.key, self.tenure);
    }

    /// Reports the lease's load: a figure of how much work it is now (records or bytes per
    /// second, or anything, as long as every worker of the fleet reports the same unit).
    /// Cheap (no store write): call it whenever you measure, every batch or every few seconds.
    /// The worker keeps a short and a long moving average and publishes the long one (the
    /// short one when it is more than 20 % higher: a lease turning hot) with its
    /// membership record (see [`WorkerConfig::load_publish_interval`](crate::WorkerConfig::load_publish_interval));
    /// with [`Balance::Load`](crate::Balance::Load) the fleet is balanced by these figures.
    /// Refuses a figure that is not a finite number at least 0; does nothing once the grant's
    /// tenure is over.
    pub fn report_load(&self, load: f64) -> Result<(), InvalidLoad> {
        let load = super::load::check(load)?;
        self.ledger.load(&self.key, self.tenure, load);
        Ok(())
    }

    /// The lease this checkpointer writes to.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }
}

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
/// released too, and reported ([`LeaseEvent::Abandoned`](super::LeaseEvent::Abandoned), a metric and a warning). Either way
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
        ledger: Arc<dyn Ledger>,
        key: LeaseKey,
        tenure: u64,
        checkpoint: Option<String>,
        parents: Vec<LeaseKey>,
        stop: watch::Receiver<Option<StopReason>>,
        finished: mpsc::UnboundedSender<Finished>,
    ) -> Self {
        Self {
            checkpointer: Checkpointer {
                ledger,
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

    /// The checkpoint stored when the lease was acquired: where to resume. (To store one,
    /// [`checkpoint`](Self::checkpoint).)
    pub fn initial_checkpoint(&self) -> Option<&str> {
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
    pub async fn checkpoint(&self, value: &str) -> Result<(), CheckpointError> {
        self.checkpointer.checkpoint(value).await
    }

    /// Tells the worker the application is making progress on the lease (no store write); see
    /// [`Checkpointer::progress`].
    pub fn progress(&self) {
        self.checkpointer.progress();
    }

    /// Halts the lease (no store write); see [`Checkpointer::halt`].
    pub fn halt(&self, reason: &str) {
        self.checkpointer.halt(reason);
    }

    /// Reports the lease's load (no store write); see [`Checkpointer::report_load`].
    pub fn report_load(&self, load: f64) -> Result<(), InvalidLoad> {
        self.checkpointer.report_load(load)
    }

    /// Marks the shard as processed to its end; see [`Checkpointer::end_of_shard`].
    pub async fn end_of_shard(&self) -> Result<(), CheckpointError> {
        self.checkpointer.end_of_shard().await
    }

    /// The application has finished with the lease: hand it over or release it now (after a
    /// stop request: as the request says; while active: release it for the balance to place
    /// again, reported as [`LeaseEvent::Released`](super::LeaseEvent::Released), not as an abandonment).
    pub fn finish(mut self) {
        self.finish.finished = true;
    }
}
