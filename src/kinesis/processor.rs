//! What the application implements ([`RecordProcessor`]) and what it is given: records,
//! where reading starts, and a fenced checkpointer that takes any record's sequence number.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use super::event::{ConsumerEvent, Observer};
use super::streams::StreamId;
pub use crate::consumer::{BatchFailure, BatchOutcome, ProcessError};
use crate::lease::LeaseKey;
use crate::worker::{CheckpointError, Checkpointer, StopReason};

/// One record of a shard: a Kinesis record, or one user record of a Kinesis record that
/// aggregates many (the KPL's format; see [`ConsumerConfig::deaggregate`](super::ConsumerConfig::deaggregate)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinesisRecord {
    /// Its sequence number: checkpoint the record ([`RecordCheckpointer::checkpoint`]) to
    /// resume after it. The user records of one aggregate share their aggregate's.
    pub sequence_number: String,
    /// Its index in its aggregate: `Some` for a user record of an aggregate, `None` for a
    /// record that was not aggregated.
    pub sub_sequence_number: Option<u64>,
    /// The producer's partition key.
    pub partition_key: String,
    /// The hash key its producer gave a user record of an aggregate instead of its partition
    /// key's, if any.
    pub explicit_hash_key: Option<String>,
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
    /// The user record after this one of an aggregate (a checkpoint inside an aggregate):
    /// the aggregate is read again and its user records up to this one are skipped.
    AfterSubSequenceNumber {
        /// The aggregate's sequence number.
        sequence_number: String,
        /// The index in the aggregate of the last user record processed.
        sub_sequence_number: u64,
    },
}

/// What a processor learns when its shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStart {
    /// The lease key: the shard id for a consumer of one stream,
    /// `<account>:<stream>:<creation epoch>:<shard id>` for a consumer of several
    /// ([`KinesisConsumer::multi_stream`](super::KinesisConsumer::multi_stream)).
    pub shard: LeaseKey,
    /// The shard's id, as Kinesis names it (`shardId-000000000000`).
    pub shard_id: String,
    /// The stream's name.
    pub stream: String,
    /// The stream as its leases' keys name it, for a consumer of several streams (`None` for
    /// a consumer of one).
    pub stream_id: Option<StreamId>,
    /// The lease's checkpoint when it was acquired, if any: a sequence number, a sequence
    /// number and a sub-sequence number (`<sequence>:<sub>`, inside an aggregate), or the
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
///
/// A batch that fails (an error, or [`BatchOutcome::Retry`]) is delivered again in place,
/// the lease kept, up to [`batch_attempts`](super::ConsumerConfig::batch_attempts) times;
/// then the consumer's [`on_failure`](super::ConsumerConfig::on_failure) skips it (to
/// [`dead_letter`](Self::dead_letter)) or stops the shard here. A panic is caught: the
/// processor is not called again and the lease is released after
/// [`max_backoff`](super::ConsumerConfig::max_backoff).
#[async_trait]
pub trait RecordProcessor: Send + 'static {
    /// The shard starts here.
    async fn initialize(&mut self, _start: &ShardStart) {}

    /// A batch of records, in order. Checkpoint at any record's sequence number
    /// ([`RecordCheckpointer::checkpoint`]); nothing is checkpointed for you. Return what
    /// comes next ([`BatchOutcome::Continue`] to read on), or an error for the failure policy
    /// (the same batch is delivered again, then skipped or the shard stopped).
    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError>;

    /// A batch given up: it failed [`batch_attempts`](super::ConsumerConfig::batch_attempts)
    /// times with [`FailureAction::Skip`](super::FailureAction::Skip) configured, or the
    /// processor asked to skip it. Send it where it can be looked at later; reading goes on
    /// with the next batch once this returns. The default logs the failure and checkpoints
    /// after the batch's last record, so a new owner does not meet it again; a processor that
    /// holds records of earlier batches unsaved (and checkpoints only once they are saved)
    /// overrides it.
    async fn dead_letter(
        &mut self,
        records: &[KinesisRecord],
        failure: &BatchFailure,
        checkpointer: &RecordCheckpointer,
    ) {
        tracing::error!(lease_key = %checkpointer.key(), records = records.len(), %failure, "a batch was skipped");
        if let Some(last) = records.last() {
            if let Err(err) = checkpointer.checkpoint(last).await {
                tracing::warn!(lease_key = %checkpointer.key(), error = %err, "could not checkpoint after the skipped batch");
            }
        }
    }

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

/// Between the sequence number and the sub-sequence number of a checkpoint inside an
/// aggregate.
const SUB_SEPARATOR: char = ':';

/// 1 to 128 decimal digits.
fn is_sequence_number(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_SEQUENCE_DIGITS
        && text.bytes().all(|b| b.is_ascii_digit())
}

/// Where a checkpoint of this consumer resumes: after a record (`<sequence>`), or after a
/// user record of an aggregate (`<sequence>:<sub>`); `None` for any other text.
pub(crate) fn resume_after(checkpoint: &str) -> Option<StartPosition> {
    match checkpoint.split_once(SUB_SEPARATOR) {
        None => is_sequence_number(checkpoint)
            .then(|| StartPosition::AfterSequenceNumber(checkpoint.to_owned())),
        Some((sequence, sub)) => {
            let sub = sub
                .parse()
                .ok()
                .filter(|_| sub.bytes().all(|b| b.is_ascii_digit()))?;
            is_sequence_number(sequence).then(|| StartPosition::AfterSubSequenceNumber {
                sequence_number: sequence.to_owned(),
                sub_sequence_number: sub,
            })
        }
    }
}

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

    /// Checkpoints after `record`: a new owner resumes with the record that follows it (the
    /// next user record of its aggregate, for a user record of an aggregate).
    pub async fn checkpoint(&self, record: &KinesisRecord) -> Result<(), CheckpointError> {
        match record.sub_sequence_number {
            Some(sub) => self.checkpoint_at_sub(&record.sequence_number, sub).await,
            None => self.checkpoint_at(&record.sequence_number).await,
        }
    }

    /// Checkpoints at a sequence number (of a record of this shard): after the whole record,
    /// every user record of it if it is an aggregate.
    pub async fn checkpoint_at(&self, sequence_number: &str) -> Result<(), CheckpointError> {
        self.check(sequence_number)?;
        self.store(sequence_number.to_owned(), sequence_number, None)
            .await
    }

    /// Checkpoints after user record `sub_sequence_number` of the aggregate at
    /// `sequence_number`: a new owner reads the aggregate again and starts with the user
    /// record after it. Stored as `<sequence>:<sub>`.
    pub async fn checkpoint_at_sub(
        &self,
        sequence_number: &str,
        sub_sequence_number: u64,
    ) -> Result<(), CheckpointError> {
        self.check(sequence_number)?;
        let value = format!("{sequence_number}{SUB_SEPARATOR}{sub_sequence_number}");
        self.store(value, sequence_number, Some(sub_sequence_number))
            .await
    }

    /// Refuses what is not a Kinesis sequence number.
    fn check(&self, sequence_number: &str) -> Result<(), CheckpointError> {
        if is_sequence_number(sequence_number) {
            return Ok(());
        }
        Err(CheckpointError::Invalid {
            key: self.key().clone(),
            value: sequence_number.to_owned(),
            reason: "a Kinesis sequence number is 1 to 128 decimal digits",
        })
    }

    async fn store(
        &self,
        value: String,
        sequence_number: &str,
        sub_sequence_number: Option<u64>,
    ) -> Result<(), CheckpointError> {
        self.inner.checkpoint(&value).await?;
        (self.observer)(ConsumerEvent::Checkpointed {
            key: self.key().clone(),
            sequence_number: sequence_number.to_owned(),
            sub_sequence_number,
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
            sub_sequence_number: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_resumes_after_its_record_or_after_its_user_record() {
        assert_eq!(
            resume_after("4959033827"),
            Some(StartPosition::AfterSequenceNumber("4959033827".into()))
        );
        assert_eq!(
            resume_after("4959033827:12"),
            Some(StartPosition::AfterSubSequenceNumber {
                sequence_number: "4959033827".into(),
                sub_sequence_number: 12,
            })
        );
        for other in [
            "",
            ":1",
            "49:",
            "49:+1",
            "49:x",
            "x:1",
            "49:1:2",
            "shardlease#SHARD_END",
        ] {
            assert_eq!(resume_after(other), None, "{other:?}");
        }
    }
}
