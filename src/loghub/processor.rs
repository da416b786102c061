//! What the application implements ([`LogGroupProcessor`]) and what it is given: the log groups
//! of one `PullLogs` with the cursors around them, where reading starts, and a fenced
//! checkpointer of cursors.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use super::event::{ConsumerEvent, Observer};
use super::mirror::Mirror;
use super::LogGroup;
pub use crate::consumer::{BatchFailure, BatchOutcome, ProcessError};
use crate::lease::LeaseKey;
use crate::worker::{CheckpointError, Checkpointer, StopReason};

/// The log groups one `PullLogs` returned, in the shard's order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogBatch {
    /// The shard's id.
    pub shard_id: i32,
    /// The cursor they were read from.
    pub cursor: String,
    /// The cursor after the last of them: checkpoint it
    /// ([`CursorCheckpointer::checkpoint`]) to resume after this batch.
    pub next_cursor: String,
    /// The log groups (never empty: a read that finds nothing is not delivered).
    pub log_groups: Vec<LogGroup>,
}

/// Where the reading of a shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartPosition {
    /// At this cursor (the lease's checkpoint).
    Cursor(String),
    /// The oldest log group still in the shard.
    Begin,
    /// Log groups written from now on.
    End,
    /// Log groups received from this moment on.
    AtTime(SystemTime),
}

/// What a processor learns when its shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStart {
    /// The lease key (the shard id in decimal).
    pub shard: LeaseKey,
    /// The shard's id.
    pub shard_id: i32,
    /// The lease's checkpoint when it was acquired, if any (a cursor).
    pub checkpoint: Option<String>,
    /// Where reading starts.
    pub position: StartPosition,
    /// The shard's parents, all processed to their end by now.
    pub parents: Vec<LeaseKey>,
}

/// The application's handling of one shard. One processor serves one lease for as long as
/// this worker holds it; every call is awaited before the next, and while a call runs no log
/// groups are read.
///
/// Log groups are delivered at least once: after a crash, or a handoff the processor did not
/// checkpoint, the next owner starts at the last checkpoint. Checkpoints are fenced: one from
/// a worker that lost the lease is refused.
///
/// A batch that fails (an error, or [`BatchOutcome::Retry`]) is delivered again in place, the
/// lease kept, up to [`batch_attempts`](super::LogHubConfig::batch_attempts) times; then the
/// consumer's [`on_failure`](super::LogHubConfig::on_failure) skips it (to
/// [`dead_letter`](Self::dead_letter)) or stops the shard here. A panic is caught: the
/// processor is not called again and the lease is released after
/// [`max_backoff`](super::LogHubConfig::max_backoff).
#[async_trait]
pub trait LogGroupProcessor: Send + 'static {
    /// The shard starts here.
    async fn initialize(&mut self, _start: &ShardStart) {}

    /// The log groups of one read, in order. Checkpoint the batch
    /// ([`CursorCheckpointer::checkpoint`]) once its effects are saved; nothing is
    /// checkpointed for you. Return what comes next ([`BatchOutcome::Continue`] to read on),
    /// or an error for the failure policy.
    async fn process(
        &mut self,
        batch: &LogBatch,
        checkpointer: &CursorCheckpointer,
    ) -> Result<BatchOutcome, ProcessError>;

    /// A batch given up: it failed `batch_attempts` times with
    /// [`FailureAction::Skip`](super::FailureAction::Skip) configured, or the processor asked
    /// to skip it. The default logs the failure and checkpoints after the batch.
    async fn dead_letter(
        &mut self,
        batch: &LogBatch,
        failure: &BatchFailure,
        checkpointer: &CursorCheckpointer,
    ) {
        tracing::error!(lease_key = %checkpointer.key(), log_groups = batch.log_groups.len(), %failure, "a batch was skipped");
        if let Err(err) = checkpointer.checkpoint(batch).await {
            tracing::warn!(lease_key = %checkpointer.key(), error = %err, "could not checkpoint after the skipped batch");
        }
    }

    /// Every log group of the (readonly) shard was delivered. Checkpoint the end
    /// ([`CursorCheckpointer::end_of_shard`], the default does it) so the children can start;
    /// until the end is checkpointed this is called again every idle interval.
    async fn shard_ended(&mut self, checkpointer: &CursorCheckpointer) {
        if let Err(err) = checkpointer.end_of_shard().await {
            tracing::warn!(lease_key = %checkpointer.key(), error = %err, "could not checkpoint the end of the shard");
        }
    }

    /// The lease was lost (taken over, deleted, or not kept alive in time): stop; no
    /// checkpoint is possible.
    async fn lease_lost(&mut self) {}

    /// The lease is being handed over, the worker is shutting down, or the shard was retired:
    /// the last chance to checkpoint, before the reason's deadline (the call is cut off there).
    async fn stop_requested(&mut self, _reason: &StopReason, _checkpointer: &CursorCheckpointer) {}
}

/// Makes a processor for each lease this worker acquires. Any
/// `Fn(&LeaseKey) -> impl LogGroupProcessor` is one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a LogHub processor factory",
    label = "not a processor factory",
    note = "a processor factory is any `Fn(&LeaseKey) -> impl LogGroupProcessor + Send + Sync + 'static`",
    note = "a consumer builder needs one from `.processor(..)` before `.start()`"
)]
pub trait ProcessorFactory: Send + Sync + 'static {
    /// The processor type.
    type Processor: LogGroupProcessor;
    /// A processor for `shard`.
    fn create(&self, shard: &LeaseKey) -> Self::Processor;
}

impl<F, P> ProcessorFactory for F
where
    F: Fn(&LeaseKey) -> P + Send + Sync + 'static,
    P: LogGroupProcessor,
{
    type Processor = P;
    fn create(&self, shard: &LeaseKey) -> P {
        self(shard)
    }
}

/// Checkpoints one shard at cursors, fenced by the lease's tenure; each accepted checkpoint is
/// mirrored into the consumer group, if one is configured. Cheap to clone.
#[derive(Clone)]
pub struct CursorCheckpointer {
    inner: Checkpointer,
    ended: Arc<AtomicBool>,
    observer: Observer,
    mirror: Option<Arc<Mirror>>,
}

impl std::fmt::Debug for CursorCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorCheckpointer")
            .field("key", self.inner.key())
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl CursorCheckpointer {
    pub(crate) fn new(
        inner: Checkpointer,
        observer: Observer,
        mirror: Option<Arc<Mirror>>,
    ) -> Self {
        Self {
            inner,
            ended: Arc::default(),
            observer,
            mirror,
        }
    }

    /// The shard.
    pub fn key(&self) -> &LeaseKey {
        self.inner.key()
    }

    /// Checkpoints after `batch`: a new owner reads on from its next cursor.
    pub async fn checkpoint(&self, batch: &LogBatch) -> Result<(), CheckpointError> {
        self.checkpoint_cursor(&batch.next_cursor).await
    }

    /// Checkpoints at a cursor of this shard: a new owner reads on from there.
    pub async fn checkpoint_cursor(&self, cursor: &str) -> Result<(), CheckpointError> {
        if cursor.is_empty() || cursor.starts_with(crate::lease::RESERVED_PREFIX) {
            return Err(CheckpointError::Invalid {
                key: self.key().clone(),
                value: cursor.to_owned(),
                reason: "a LogHub cursor is a non-empty string not starting with shardlease#",
            });
        }
        self.inner.checkpoint(cursor).await?;
        if let Some(mirror) = &self.mirror {
            mirror.checkpointed(cursor);
        }
        (self.observer)(ConsumerEvent::Checkpointed {
            key: self.key().clone(),
            cursor: cursor.to_owned(),
        });
        Ok(())
    }

    /// Checkpoints the end of the shard: every log group was processed; the children start.
    pub async fn end_of_shard(&self) -> Result<(), CheckpointError> {
        self.inner.end_of_shard().await?;
        self.ended.store(true, Ordering::SeqCst);
        (self.observer)(ConsumerEvent::Checkpointed {
            key: self.key().clone(),
            cursor: crate::lease::SHARD_END.to_owned(),
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
