//! What the application implements ([`RecordProcessor`]) and what it is given: records,
//! where reading starts, and a fenced checkpointer that takes any record's sequence number.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use super::event::{ConsumerEvent, Observer};
use crate::lease::LeaseKey;
use crate::worker::{CheckpointError, Checkpointer, StopReason};

/// One record of a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinesisRecord {
    /// Its sequence number: checkpoint it to resume after this record.
    pub sequence_number: String,
    /// The producer's partition key.
    pub partition_key: String,
    /// The payload.
    pub data: Vec<u8>,
    /// When Kinesis accepted it.
    pub approximate_arrival: Option<SystemTime>,
}

/// Where the reading of a shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartPosition {
    /// The oldest record still in the stream.
    TrimHorizon,
    /// Records written from this moment on.
    AtTimestamp(SystemTime),
    /// The record after this sequence number (a checkpoint).
    AfterSequenceNumber(String),
}

/// What a processor learns when its shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStart {
    /// The shard (the lease key).
    pub shard: LeaseKey,
    /// The lease's checkpoint when it was acquired, if any: a sequence number, or the
    /// consumer's own marker of where a `Latest` start began (`shardlease#AT_TIMESTAMP:<ms>`).
    pub checkpoint: Option<String>,
    /// Where reading starts.
    pub position: StartPosition,
    /// The shard's parents, all processed to their end by now.
    pub parents: Vec<LeaseKey>,
}

/// The application's handling of one shard. One processor serves one lease for as long as
/// this worker holds it; every call is awaited before the next, and while a call runs no
/// records are read.
///
/// Records are delivered at least once: after a crash, or a handoff the processor did not
/// checkpoint, the next owner starts after the last checkpoint. Checkpoints are fenced: one
/// from a worker that lost the lease is refused.
#[async_trait]
pub trait RecordProcessor: Send + 'static {
    /// The shard starts here.
    async fn initialize(&mut self, _start: &ShardStart) {}

    /// A batch of records, in order. Checkpoint at any record's sequence number
    /// ([`RecordCheckpointer::checkpoint`]); nothing is checkpointed for you.
    async fn process_records(
        &mut self,
        records: Vec<KinesisRecord>,
        checkpointer: &RecordCheckpointer,
    );

    /// Every record of the (closed) shard was delivered. Checkpoint the end
    /// ([`RecordCheckpointer::end_of_shard`], the default does it) so the children can start;
    /// until the end is checkpointed this is called again every idle interval.
    async fn shard_ended(&mut self, checkpointer: &RecordCheckpointer) {
        if let Err(err) = checkpointer.end_of_shard().await {
            tracing::warn!(lease_key = %checkpointer.key(), error = %err, "could not checkpoint the end of the shard");
        }
    }

    /// The lease was lost (taken over, deleted, or not renewed in time): stop; no checkpoint
    /// is possible.
    async fn lease_lost(&mut self) {}

    /// The lease is being handed over, the worker is shutting down, or the shard was retired:
    /// the last chance to checkpoint, before the reason's deadline (the call is cut off there).
    async fn stop_requested(&mut self, _reason: &StopReason, _checkpointer: &RecordCheckpointer) {}
}

/// Makes a processor for each lease this worker acquires. Any
/// `Fn(&LeaseKey) -> impl RecordProcessor` is one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a processor factory",
    label = "not a processor factory",
    note = "a processor factory is any `Fn(&LeaseKey) -> impl RecordProcessor + Send + Sync + 'static`",
    note = "a consumer builder needs one from `.processor(..)` before `.start()`"
)]
pub trait ProcessorFactory: Send + Sync + 'static {
    /// The processor type.
    type Processor: RecordProcessor;
    /// A processor for `shard`.
    fn create(&self, shard: &LeaseKey) -> Self::Processor;
}

impl<F, P> ProcessorFactory for F
where
    F: Fn(&LeaseKey) -> P + Send + Sync + 'static,
    P: RecordProcessor,
{
    type Processor = P;
    fn create(&self, shard: &LeaseKey) -> P {
        self(shard)
    }
}

/// Checkpoints one shard at record sequence numbers, fenced by the lease's tenure. Cheap to
/// clone.
#[derive(Clone)]
pub struct RecordCheckpointer {
    inner: Checkpointer,
    ended: Arc<AtomicBool>,
    observer: Observer,
}

impl std::fmt::Debug for RecordCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCheckpointer")
            .field("key", self.inner.key())
            .field("ended", &self.is_ended())
            .finish()
    }
}

/// Longest sequence number accepted (Kinesis uses up to 128 digits).
const MAX_SEQUENCE_DIGITS: usize = 128;

impl RecordCheckpointer {
    pub(crate) fn new(inner: Checkpointer, observer: Observer) -> Self {
        Self {
            inner,
            ended: Arc::default(),
            observer,
        }
    }

    /// The shard.
    pub fn key(&self) -> &LeaseKey {
        self.inner.key()
    }

    /// Checkpoints after `record`: a new owner resumes with the record that follows it.
    pub async fn checkpoint(&self, record: &KinesisRecord) -> Result<(), CheckpointError> {
        self.checkpoint_at(&record.sequence_number).await
    }

    /// Checkpoints at a sequence number (of a record of this shard).
    pub async fn checkpoint_at(&self, sequence_number: &str) -> Result<(), CheckpointError> {
        let digits = !sequence_number.is_empty()
            && sequence_number.len() <= MAX_SEQUENCE_DIGITS
            && sequence_number.bytes().all(|b| b.is_ascii_digit());
        if !digits {
            return Err(CheckpointError::Invalid {
                key: self.key().clone(),
                value: sequence_number.to_owned(),
                reason: "a Kinesis sequence number is 1 to 128 decimal digits",
            });
        }
        self.inner.checkpoint(sequence_number).await?;
        (self.observer)(ConsumerEvent::Checkpointed {
            key: self.key().clone(),
            sequence_number: sequence_number.to_owned(),
        });
        Ok(())
    }

    /// Checkpoints the end of the shard: every record was processed; the children start.
    pub async fn end_of_shard(&self) -> Result<(), CheckpointError> {
        self.inner.end_of_shard().await?;
        self.ended.store(true, Ordering::SeqCst);
        (self.observer)(ConsumerEvent::Checkpointed {
            key: self.key().clone(),
            sequence_number: crate::lease::SHARD_END.to_owned(),
        });
        Ok(())
    }

    /// True once the end of the shard was checkpointed.
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    pub(crate) fn inner(&self) -> &Checkpointer {
        &self.inner
    }
}
