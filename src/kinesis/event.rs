//! What the consumer reports about its leases: [`ConsumerEvent`], and the observer the record
//! loops report through.

use std::sync::Arc;

use super::streams::StreamId;
use super::BatchOutcome;
use crate::lease::LeaseKey;
use crate::worker::{LeaseEvent, StopReason};

/// Something that happened to a lease of this consumer, for logs and metrics: what its record
/// loops did, and the worker's own [`LeaseEvent`]s.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// What the worker reported of one of its leases (handed off, released, lost, processed to
    /// its end, retired, abandoned) or of itself (another process with its id), as the worker
    /// reported it. Never [`LeaseEvent::Acquired`]: the grant goes to the lease's record loop,
    /// and the consumer reports [`Acquired`](Self::Acquired) instead.
    Lease(LeaseEvent),
    /// The lease was acquired; its record loop starts.
    Acquired {
        /// The shard.
        key: LeaseKey,
        /// Its checkpoint.
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
    /// A checkpoint was stored (a sequence number, or `SHARD_END`).
    Checkpointed {
        /// The shard.
        key: LeaseKey,
        /// The checkpoint's sequence number (or `SHARD_END`).
        sequence_number: String,
        /// Inside an aggregate: the user record's index in it.
        sub_sequence_number: Option<u64>,
    },
    /// The processor panicked. The panic was caught: the processor is not called again, and
    /// the lease is released after [`ConsumerConfig::max_backoff`](super::ConsumerConfig::max_backoff) (at once if a stop comes
    /// first) for the balance to place again, with a fresh processor, here or on a peer.
    ProcessorPanicked {
        /// The shard.
        key: LeaseKey,
        /// The panic's message.
        message: String,
    },
    /// A delivery of a batch to the processor failed (an error, or the processor asked to
    /// retry, skip or stop); `then` says what follows: [`BatchOutcome::Retry`] (delivered
    /// again after a backoff), [`BatchOutcome::Skip`] (given to the processor's
    /// `dead_letter`) or [`BatchOutcome::Stop`] (the shard is halted here).
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
    /// A consumer of several streams: a stream of its tracker was resolved and its shards are
    /// listed from now on (at start, and when the tracker names a new one).
    StreamAdded {
        /// The stream, as its leases' keys name it.
        stream: StreamId,
    },
    /// A consumer of several streams: the tracker no longer names this stream. It is read
    /// on for [`removed_stream_wait`](super::ConsumerConfig::removed_stream_wait), then its
    /// leases retire.
    StreamRemoved {
        /// The stream.
        stream: StreamId,
    },
    /// A consumer of several streams: the tracker failed, or a stream of it could not be
    /// resolved or listed (it is tried again at the next discovery round; a stream whose
    /// listing fails keeps its last listing, one that no longer exists retires).
    StreamFailed {
        /// The stream (its name, or its identifier once resolved), or "the stream tracker".
        stream: String,
        /// What failed.
        error: String,
    },
    /// Kinesis refused to serve the shard (`GetShardIterator`, or `GetRecords` even with a
    /// fresh iterator) with an error that retrying cannot fix: the stream was deleted, access
    /// is denied, the checkpoint is not a sequence number of the shard. The record loop ends
    /// and the lease is released after [`ConsumerConfig::max_backoff`](super::ConsumerConfig::max_backoff), as after a panic.
    ReadFailed {
        /// The shard.
        key: LeaseKey,
        /// The call and the service's error code and message.
        error: String,
    },
}

/// Where the record loops report their events.
pub(crate) type Observer = Arc<dyn Fn(ConsumerEvent) + Send + Sync>;
