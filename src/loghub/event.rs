//! What the LogHub consumer reports about its leases: [`ConsumerEvent`], and the observer the
//! record loops report through.

use std::sync::Arc;

use super::BatchOutcome;
use crate::lease::LeaseKey;
use crate::worker::{LeaseEvent, StopReason};

/// Something that happened to a lease of this consumer, for logs and metrics: what its record
/// loops did, and the worker's own [`LeaseEvent`]s.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// What the worker reported of one of its leases (handed off, released, lost, processed to
    /// its end, retired, abandoned) or of itself, as the worker reported it. Never
    /// [`LeaseEvent::Acquired`]: the consumer reports [`Acquired`](Self::Acquired) instead.
    Lease(LeaseEvent),
    /// The lease was acquired; its record loop starts.
    Acquired {
        /// The shard.
        key: LeaseKey,
        /// Its checkpoint (a cursor), if any.
        checkpoint: Option<String>,
    },
    /// The record loop of the lease was asked to stop (handoff, shutdown, retirement) and
    /// calls the processor's `stop_requested`.
    StopRequested {
        /// The shard.
        key: LeaseKey,
        /// Why.
        reason: StopReason,
    },
    /// The record loop of the lease ended; nothing of it is processed here any more.
    Stopped {
        /// The shard.
        key: LeaseKey,
    },
    /// A checkpoint was stored: a cursor, or `SHARD_END`.
    Checkpointed {
        /// The shard.
        key: LeaseKey,
        /// The cursor (or `SHARD_END`).
        cursor: String,
    },
    /// The processor panicked; it is not called again and the lease is released after
    /// [`max_backoff`](super::LogHubConfig::max_backoff).
    ProcessorPanicked {
        /// The shard.
        key: LeaseKey,
        /// The panic's message.
        message: String,
    },
    /// A delivery of a batch failed; `then` says what follows (retry, skip or stop).
    BatchFailed {
        /// The shard.
        key: LeaseKey,
        /// Which delivery of the batch failed (1 for the first).
        attempt: u32,
        /// The error, or `None` when the processor returned an outcome instead.
        error: Option<String>,
        /// What follows.
        then: BatchOutcome,
    },
    /// The checkpoint cursor was not one of the shard's (`InvalidCursor`: its data expired
    /// past the logstore's retention, or it was edited): reading starts again at the
    /// shard's oldest log group.
    CursorInvalid {
        /// The shard.
        key: LeaseKey,
        /// The cursor refused.
        cursor: String,
    },
    /// LogHub refused to serve the shard (`GetCursor` or `PullLogs`) with an error that
    /// retrying cannot fix: the shard, logstore or project is gone, access is denied. The
    /// record loop ends and the lease is released after
    /// [`max_backoff`](super::LogHubConfig::max_backoff).
    ReadFailed {
        /// The shard.
        key: LeaseKey,
        /// The call and LogHub's error code and message.
        error: String,
    },
    /// A checkpoint could not be written to the consumer group (it stays in the lease table,
    /// the source of truth; the next one is tried at the next interval).
    MirrorFailed {
        /// The shard.
        key: LeaseKey,
        /// LogHub's error.
        error: String,
    },
}

/// Where the record loops report their events.
pub(crate) type Observer = Arc<dyn Fn(ConsumerEvent) + Send + Sync>;
