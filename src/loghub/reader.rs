//! The record loop of one LogHub lease: where it starts (the checkpoint's cursor, or a cursor
//! for the initial position), `PullLogs` after `PullLogs` (paced, backed off on quotas and
//! errors, every call bounded by `call_timeout` and racing the lease's stop), each batch handed
//! to the processor under the failure policy, and the end of a `readonly` shard.
//!
//! The end of a shard: a read that finds nothing (the next cursor is the cursor given) ends
//! the shard only if the shard was seen `readonly` before that read began (the first empty
//! read asks, and a second read follows at once), so no log group written before the shard
//! closed is skipped.
//!
//! A loop that cannot go on (the processor panicked, LogHub refuses the shard) reports it,
//! holds the lease for `max_backoff` and releases it, as the Kinesis consumer's does.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use aliyun_log_rust_sdk::{Client, Error as SdkError};
use metrics::{Counter, Histogram};
use tokio::time::Instant;

use super::config::{InitialPosition, LogHubConfig};
use super::event::{ConsumerEvent, Observer};
use super::mirror::{Mirror, MirrorTask, Target};
use super::processor::{
    BatchFailure, BatchOutcome, CursorCheckpointer, LogBatch, LogGroupProcessor, ProcessError,
    ShardStart, StartPosition,
};
use super::source::LogHubShardSource;
use super::{classify, describe, Failure};
use crate::consumer::{self, guarded, Attempt, Backoff, Call, Delivered, Stopping};
use crate::lease::LeaseKey;
use crate::metrics::{
    LOGHUB_BATCH_FAILURES, LOGHUB_LOG_GROUPS, LOGHUB_PULL_SECONDS, LOGHUB_THROTTLES,
};
use crate::worker::{LeaseGrant, StopReason};

/// What every record loop of a consumer shares.
pub(crate) struct ReaderContext {
    pub source: Arc<LogHubShardSource>,
    pub client: Arc<Client>,
    pub config: LogHubConfig,
    pub observer: Observer,
}

/// Why a record loop ends.
enum Exit {
    /// The lease must stop: lost, handed over, shut down or retired.
    Stop(StopReason),
    /// The shard was read to its end and the end checkpointed.
    Ended,
    /// The processor panicked (the panic's message).
    Panicked(String),
    /// LogHub refused to serve the shard (the call and the error).
    Refused(String),
}

/// The metrics of one shard's loop.
struct Meters {
    log_groups: Counter,
    pulls: Histogram,
    throttles: Counter,
    failures: [Counter; 3],
}

impl Meters {
    fn new(source: &LogHubShardSource, shard: &str) -> Self {
        let logstore = format!("{}/{}", source.project(), source.logstore());
        let failed = |then: &'static str| metrics::counter!(LOGHUB_BATCH_FAILURES, "logstore" => logstore.clone(), "shard" => shard.to_owned(), "then" => then);
        Self {
            log_groups: metrics::counter!(LOGHUB_LOG_GROUPS, "logstore" => logstore.clone(), "shard" => shard.to_owned()),
            pulls: metrics::histogram!(LOGHUB_PULL_SECONDS, "logstore" => logstore.clone()),
            throttles: metrics::counter!(LOGHUB_THROTTLES, "logstore" => logstore.clone(), "shard" => shard.to_owned()),
            failures: [failed("retry"), failed("skip"), failed("stop")],
        }
    }

    fn batch_failed(&self, then: BatchOutcome) {
        let index = match then {
            BatchOutcome::Retry => 0,
            BatchOutcome::Skip => 1,
            _ => 2,
        };
        self.failures[index].increment(1);
    }
}

/// Reads the lease's shard for as long as `grant` lasts.
pub(crate) async fn run<P: LogGroupProcessor>(
    context: Arc<ReaderContext>,
    mut grant: LeaseGrant,
    mut processor: P,
) {
    let key = grant.key().clone();
    let Ok(shard_id) = key.as_str().parse::<i32>() else {
        let error = format!("the lease key {key} is not a LogHub shard id");
        report_refused(&context, &key, error);
        consumer::give_back(context.config.max_backoff, &mut grant).await;
        grant.finish();
        (context.observer)(ConsumerEvent::Stopped { key });
        return;
    };
    let mirror = context.config.consumer_group.clone().map(|group| {
        Mirror::start(Target {
            client: Arc::clone(&context.client),
            project: context.source.project().to_owned(),
            logstore: context.source.logstore().to_owned(),
            group,
            shard_id,
            key: key.clone(),
            observer: Arc::clone(&context.observer),
            call_timeout: context.config.call_timeout,
        })
    });
    let checkpointer = CursorCheckpointer::new(
        grant.checkpointer(),
        Arc::clone(&context.observer),
        mirror.as_ref().map(|(mirror, _)| Arc::clone(mirror)),
    );
    let reader = Reader {
        context: &context,
        shard_id,
        meters: Meters::new(&context.source, key.as_str()),
    };
    let position = start_position(&grant, &context.config);
    let start = ShardStart {
        shard: key.clone(),
        shard_id,
        checkpoint: grant.initial_checkpoint().map(str::to_owned),
        position: position.clone(),
        parents: grant.parents().to_vec(),
    };
    tracing::info!(?position, "record loop starts");
    let exit = match guarded(processor.initialize(&start)).await {
        Ok(()) => {
            reader
                .read(&mut grant, &mut processor, &checkpointer, position)
                .await
        }
        Err(message) => Exit::Panicked(message),
    };
    let lost = matches!(exit, Exit::Stop(StopReason::Lost));
    match exit {
        Exit::Stop(reason) => stop(&context, &key, &mut processor, &checkpointer, reason).await,
        Exit::Ended => {}
        Exit::Panicked(message) => {
            tracing::error!(panic = %message, "the processor panicked; the lease is released after a backoff");
            (context.observer)(ConsumerEvent::ProcessorPanicked {
                key: key.clone(),
                message,
            });
            consumer::give_back(context.config.max_backoff, &mut grant).await;
        }
        Exit::Refused(error) => {
            report_refused(&context, &key, error);
            consumer::give_back(context.config.max_backoff, &mut grant).await;
        }
    }
    if let Some((mirror, task)) = mirror {
        finish_mirror(&mirror, task, lost).await;
    }
    // Still active (a failure, not a stop): this releases the lease. After a stop request it
    // hands it over, releases or retires it.
    grant.finish();
    tracing::info!("record loop ended");
    (context.observer)(ConsumerEvent::Stopped { key });
}

/// The mirror's last write before the lease goes (so that the group's checkpoint never moves
/// back behind the next owner's), unless the lease was lost: its new owner mirrors it.
async fn finish_mirror(mirror: &Mirror, task: MirrorTask, lost: bool) {
    if lost {
        task.abort();
    } else {
        mirror.close();
        task.finished().await;
    }
}

fn report_refused(context: &ReaderContext, key: &LeaseKey, error: String) {
    tracing::error!(%error, "LogHub refuses to serve the shard; the lease is released after a backoff");
    (context.observer)(ConsumerEvent::ReadFailed {
        key: key.clone(),
        error,
    });
}

/// Where a lease starts: its checkpoint; else, for a child shard, its beginning (its parents'
/// data ran up to it); else the configured initial position.
fn start_position(grant: &LeaseGrant, config: &LogHubConfig) -> StartPosition {
    if let Some(cursor) = grant.initial_checkpoint() {
        return StartPosition::Cursor(cursor.to_owned());
    }
    if !grant.parents().is_empty() {
        return StartPosition::Begin;
    }
    match &config.initial_position {
        InitialPosition::Begin => StartPosition::Begin,
        InitialPosition::End => StartPosition::End,
        InitialPosition::AtTime(at) => StartPosition::AtTime(*at),
    }
}

/// The processor's last call: `lease_lost`, or `stop_requested` until the reason's deadline.
async fn stop<P: LogGroupProcessor>(
    context: &ReaderContext,
    key: &LeaseKey,
    processor: &mut P,
    checkpointer: &CursorCheckpointer,
    reason: StopReason,
) {
    let mut stopping = Stop {
        processor,
        checkpointer,
        key,
        observer: &context.observer,
    };
    consumer::last_call(&reason, &mut stopping).await;
}

/// A processor at its last call.
struct Stop<'a, P> {
    processor: &'a mut P,
    checkpointer: &'a CursorCheckpointer,
    key: &'a LeaseKey,
    observer: &'a Observer,
}

impl<P: LogGroupProcessor> Stopping for Stop<'_, P> {
    fn lease_lost(&mut self) -> Call<'_, ()> {
        self.processor.lease_lost()
    }

    fn stop_requested<'a>(&'a mut self, reason: &'a StopReason) -> Call<'a, ()> {
        self.processor.stop_requested(reason, self.checkpointer)
    }

    fn requested(&self, reason: &StopReason) {
        (self.observer)(ConsumerEvent::StopRequested {
            key: self.key.clone(),
            reason: reason.clone(),
        });
    }

    fn panicked(&self, message: String) {
        (self.observer)(ConsumerEvent::ProcessorPanicked {
            key: self.key.clone(),
            message,
        });
    }
}

/// One shard's reading.
struct Reader<'a> {
    context: &'a ReaderContext,
    shard_id: i32,
    meters: Meters,
}

/// What one call led to.
enum Called<T> {
    Done(T),
    /// A failure worth retrying, waited out already (or, for an invalid cursor, reported).
    Again(Failure),
    /// The loop ends.
    Exit(Exit),
}

impl Reader<'_> {
    /// Runs `call` within `call_timeout`, racing the lease's stop.
    async fn call<T>(
        &self,
        grant: &mut LeaseGrant,
        name: &str,
        call: impl std::future::Future<Output = Result<T, SdkError>>,
        backoff: &mut Backoff,
    ) -> Called<T> {
        let config = &self.context.config;
        let answer = tokio::select! {
            biased;
            reason = grant.stopped() => return Called::Exit(Exit::Stop(reason)),
            answer = tokio::time::timeout(config.call_timeout, call) => answer,
        };
        let (failure, text) = match answer {
            Ok(Ok(value)) => {
                backoff.reset();
                return Called::Done(value);
            }
            Ok(Err(err)) => (classify(&err), describe(&err)),
            Err(_) => (
                Failure::Transient,
                format!("unanswered within {:?}", config.call_timeout),
            ),
        };
        match failure {
            Failure::Fatal => return Called::Exit(Exit::Refused(format!("{name}: {text}"))),
            Failure::InvalidCursor => return Called::Again(failure),
            Failure::Throttled => self.meters.throttles.increment(1),
            Failure::Transient => {}
        }
        let wait = backoff.wait();
        tracing::warn!(call = name, error = %text, ?failure, ?wait, "a LogHub call failed; backing off");
        tokio::select! {
            biased;
            reason = grant.stopped() => Called::Exit(Exit::Stop(reason)),
            _ = tokio::time::sleep(wait) => Called::Again(failure),
        }
    }

    /// A cursor for `position`.
    async fn cursor(
        &self,
        grant: &mut LeaseGrant,
        position: &StartPosition,
        backoff: &mut Backoff,
    ) -> Result<String, Exit> {
        let at = match position {
            StartPosition::Cursor(cursor) => return Ok(cursor.clone()),
            StartPosition::Begin => CursorPos::Begin,
            StartPosition::End => CursorPos::End,
            StartPosition::AtTime(at) => {
                let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
                CursorPos::UnixTimeStamp(i64::try_from(secs).unwrap_or(i64::MAX))
            }
        };
        let source = &self.context.source;
        loop {
            let request = self
                .context
                .client
                .get_cursor(source.project(), source.logstore(), self.shard_id)
                .cursor_pos(at.clone())
                .send();
            match self.call(grant, "GetCursor", request, backoff).await {
                Called::Done(answer) => return Ok(answer.get_body().cursor().to_owned()),
                Called::Again(_) => {}
                Called::Exit(exit) => return Err(exit),
            }
        }
    }

    /// Reads until the lease must stop, its shard ended and the end was checkpointed, the
    /// processor panicked, or LogHub refused the shard.
    async fn read<P: LogGroupProcessor>(
        &self,
        grant: &mut LeaseGrant,
        processor: &mut P,
        checkpointer: &CursorCheckpointer,
        position: StartPosition,
    ) -> Exit {
        let config = &self.context.config;
        let mut backoff = Backoff::new(config.min_call_interval, config.max_backoff);
        let mut cursor = match self.cursor(grant, &position, &mut backoff).await {
            Ok(cursor) => cursor,
            Err(exit) => return exit,
        };
        if matches!(position, StartPosition::End | StartPosition::AtTime(_)) {
            // A lease that moves before its first checkpoint resumes here, not at a new end.
            if let Err(err) = checkpointer.inner().checkpoint(&cursor).await {
                tracing::warn!(error = %err, "could not record where the lease started");
            }
        }
        let mut readonly = false;
        let mut next_call = Instant::now();
        loop {
            tokio::select! {
                biased;
                reason = grant.stopped() => return Exit::Stop(reason),
                () = tokio::time::sleep_until(next_call) => {}
            }
            let was_readonly = readonly;
            let called = Instant::now();
            let source = &self.context.source;
            let request = self
                .context
                .client
                .pull_logs(source.project(), source.logstore(), self.shard_id)
                .cursor(&cursor)
                .count(i32::try_from(config.pull_count).unwrap_or(1_000))
                .send();
            let answer = self.call(grant, "PullLogs", request, &mut backoff).await;
            self.meters.pulls.record(called.elapsed().as_secs_f64());
            let answer = match answer {
                Called::Done(answer) => answer.take_body(),
                Called::Again(Failure::InvalidCursor) => {
                    tracing::warn!(%cursor, "the cursor is not one of the shard's (its data expired?): reading from the shard's oldest log group");
                    (self.context.observer)(ConsumerEvent::CursorInvalid {
                        key: grant.key().clone(),
                        cursor: cursor.clone(),
                    });
                    cursor = match self
                        .cursor(grant, &StartPosition::Begin, &mut backoff)
                        .await
                    {
                        Ok(cursor) => cursor,
                        Err(exit) => return exit,
                    };
                    continue;
                }
                Called::Again(_) => continue,
                Called::Exit(exit) => return exit,
            };
            let next = answer.next_cursor().clone();
            if next == cursor || answer.log_group_list().is_empty() {
                grant.progress();
                if was_readonly {
                    return self.end_of_shard(grant, processor, checkpointer).await;
                }
                readonly = match self.readonly(grant).await {
                    Ok(readonly) => readonly,
                    Err(exit) => return exit,
                };
                next_call = if readonly {
                    Instant::now()
                } else {
                    called + config.idle_time_between_reads
                };
                if next != cursor && !next.is_empty() {
                    cursor = next;
                }
                continue;
            }
            readonly = false;
            let batch = LogBatch {
                shard_id: self.shard_id,
                cursor: std::mem::replace(&mut cursor, next.clone()),
                next_cursor: next,
                log_groups: answer.into_log_group_list(),
            };
            self.meters
                .log_groups
                .increment(batch.log_groups.len() as u64);
            let mut attempt = Batch {
                processor: &mut *processor,
                batch: &batch,
                checkpointer,
                meters: &self.meters,
                observer: &self.context.observer,
                key: grant.key().clone(),
            };
            match consumer::deliver(&config.policy(), &mut attempt, grant).await {
                Delivered::Done => {}
                Delivered::Stop(reason) => return Exit::Stop(reason),
                Delivered::Panicked(message) => return Exit::Panicked(message),
            }
            grant.progress();
            next_call = called + config.min_call_interval;
        }
    }

    /// Whether the shard is `readonly` now (a listing at most 10 s old); a failed listing
    /// counts as not yet (the next empty read asks again).
    async fn readonly(&self, grant: &mut LeaseGrant) -> Result<bool, Exit> {
        let timeout = self.context.config.call_timeout;
        let key = grant.key().clone();
        let asked = tokio::select! {
            biased;
            reason = grant.stopped() => return Err(Exit::Stop(reason)),
            asked = tokio::time::timeout(timeout, self.context.source.is_readonly(&key)) => asked,
        };
        match asked {
            Ok(Ok(readonly)) => Ok(readonly),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "could not list the shards to see whether this one is readonly");
                Ok(false)
            }
            Err(_) => Ok(false),
        }
    }

    /// The shard was read to its end: the processor checkpoints the end (asked again every
    /// idle interval until it does, or until the lease must stop).
    async fn end_of_shard<P: LogGroupProcessor>(
        &self,
        grant: &mut LeaseGrant,
        processor: &mut P,
        checkpointer: &CursorCheckpointer,
    ) -> Exit {
        tracing::info!("end of shard reached");
        loop {
            if let Err(message) = guarded(processor.shard_ended(checkpointer)).await {
                return Exit::Panicked(message);
            }
            if checkpointer.is_ended() {
                return Exit::Ended;
            }
            tracing::warn!(
                "the processor did not checkpoint the end of the shard; its children wait"
            );
            tokio::select! {
                biased;
                reason = grant.stopped() => return Exit::Stop(reason),
                _ = tokio::time::sleep(self.context.config.idle_time_between_reads) => {}
            }
        }
    }
}

/// One batch with its processor, for the shared delivery loop.
struct Batch<'a, P> {
    processor: &'a mut P,
    batch: &'a LogBatch,
    checkpointer: &'a CursorCheckpointer,
    meters: &'a Meters,
    observer: &'a Observer,
    key: LeaseKey,
}

impl<P: LogGroupProcessor> Attempt for Batch<'_, P> {
    fn process(&mut self) -> Call<'_, Result<BatchOutcome, ProcessError>> {
        self.processor.process(self.batch, self.checkpointer)
    }

    fn dead_letter<'a>(&'a mut self, failure: &'a BatchFailure) -> Call<'a, ()> {
        self.processor
            .dead_letter(self.batch, failure, self.checkpointer)
    }

    fn failed(&self, attempt: u32, error: Option<String>, then: BatchOutcome) {
        self.meters.batch_failed(then);
        (self.observer)(ConsumerEvent::BatchFailed {
            key: self.key.clone(),
            attempt,
            error,
            then,
        });
    }
}
