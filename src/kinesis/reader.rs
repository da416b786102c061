//! The record loop of one lease: where it starts (the checkpoint, or the initial position),
//! the batches the fetcher reads (`fetch.rs`) handed to the processor, the end of the shard,
//! and a prompt stop when the lease's signal fires.
//!
//! A batch the processor fails is delivered again under the failure policy (`delivery.rs`).
//! A loop that cannot go on gives its lease back instead of holding it unprocessed: when the
//! processor panics (the panic is caught, not the end of the task) or Kinesis refuses to serve
//! the shard (stream deleted, access denied), it reports the failure, holds the lease for
//! `max_backoff` (so a processor that panics on every batch does not make the fleet spin) and
//! then releases it for the balance to place again.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::config::{ConsumerConfig, InitialPosition};
use super::context::ReaderContext;
use super::delivery::Deliverer;
use super::event::ConsumerEvent;
use super::event::Observer;
use super::fetch::{Fetched, Fetcher, Queue};
use super::metrics::ShardMeters;
use super::processor::{
    resume_after, RecordCheckpointer, RecordProcessor, ShardStart, StartPosition,
};
use crate::consumer::{self, guarded, Call, Delivered, Stopping};
use crate::lease::{LeaseKey, RESERVED_PREFIX};
use crate::worker::{LeaseGrant, StopReason};

/// The checkpoint that records where a lease read from `Latest` started, so that a lease
/// that moves before its first checkpoint resumes there: the prefix, then unix milliseconds.
const STARTED_AT_PREFIX: &str = "shardlease#AT_TIMESTAMP:";

/// How far before "now" a `Latest` start is placed: Kinesis refuses a timestamp in its future,
/// and the host's clock may be a little ahead of the service's.
const LATEST_MARGIN: Duration = Duration::from_secs(1);

/// Where a lease starts: its checkpoint, else the configured initial position (a `Latest`
/// start is checkpointed at once as a timestamp); a child shard without a checkpoint starts at
/// its beginning (its parents were read to their end) or, with an `AtTimestamp` initial
/// position, at that moment (the records before it are not wanted, even in a child of shards
/// that closed before it). Children of shards that closed before a `Latest` consumer first
/// started are created without those parents (see `KinesisConsumerBuilder::start`), so they
/// start at `Latest` too.
async fn start_position(
    grant: &LeaseGrant,
    config: &ConsumerConfig,
    checkpointer: &RecordCheckpointer,
) -> StartPosition {
    if let Some(checkpoint) = grant.initial_checkpoint() {
        if let Some(millis) = checkpoint
            .strip_prefix(STARTED_AT_PREFIX)
            .and_then(|m| m.parse::<u64>().ok())
        {
            return StartPosition::AtTimestamp(UNIX_EPOCH + Duration::from_millis(millis));
        }
        if let Some(position) = resume_after(checkpoint) {
            return position;
        }
        if !checkpoint.starts_with(RESERVED_PREFIX) {
            // Not written by this consumer (a hand edit, another application): Kinesis
            // judges it.
            return StartPosition::AfterSequenceNumber(checkpoint.to_owned());
        }
        tracing::warn!(lease_key = %grant.key(), checkpoint, "unknown reserved checkpoint; starting from the initial position");
    }
    let at = match &config.initial_position {
        InitialPosition::AtTimestamp(at) => return StartPosition::AtTimestamp(*at),
        InitialPosition::TrimHorizon => return StartPosition::TrimHorizon,
        InitialPosition::Latest if !grant.parents().is_empty() => {
            return StartPosition::TrimHorizon
        }
        InitialPosition::Latest => SystemTime::now() - LATEST_MARGIN,
    };
    let millis = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let marker = format!("{STARTED_AT_PREFIX}{millis}");
    if let Err(err) = checkpointer.inner().checkpoint_reserved(&marker).await {
        tracing::warn!(lease_key = %grant.key(), error = %err, "could not record where the lease started");
    }
    StartPosition::AtTimestamp(UNIX_EPOCH + Duration::from_millis(millis as u64))
}

/// Why a record loop ends.
#[derive(Debug)]
enum Exit {
    /// The lease must stop: lost, handed over, shut down or retired.
    Stop(StopReason),
    /// The shard was read to its end and the end checkpointed.
    Ended,
    /// The processor panicked (the panic's message); it is not called again.
    Panicked(String),
    /// Kinesis refused to serve the shard (the error): a fresh iterator did not help.
    Refused(String),
}

/// Reads shard `shard` of the context's stream for as long as `grant` lasts.
pub(crate) async fn run<P: RecordProcessor>(
    context: Arc<ReaderContext>,
    shard: String,
    mut grant: LeaseGrant,
    mut processor: P,
) {
    let key = grant.key().clone();
    let checkpointer = RecordCheckpointer::new(grant.checkpointer(), Arc::clone(&context.observer));
    let position = start_position(&grant, &context.config, &checkpointer).await;
    let start = ShardStart {
        shard: key.clone(),
        shard_id: shard.clone(),
        stream: context.stream.clone(),
        stream_id: context.stream_id.clone(),
        checkpoint: grant.initial_checkpoint().map(str::to_owned),
        position: position.clone(),
        parents: grant.parents().to_vec(),
    };
    tracing::info!(?position, "record loop starts");
    let stream_label = match &context.stream_id {
        Some(id) => id.to_string(),
        None => context.stream.clone(),
    };
    let meters = ShardMeters::new(&stream_label, &shard);
    let exit = match guarded(processor.initialize(&start)).await {
        Ok(()) => {
            read(
                &context,
                shard,
                &mut grant,
                &mut processor,
                &checkpointer,
                position,
                &meters,
            )
            .await
        }
        Err(message) => Exit::Panicked(message),
    };
    meters.ended();
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
            tracing::error!(%error, "Kinesis refuses to serve the shard; the lease is released after a backoff");
            (context.observer)(ConsumerEvent::ReadFailed {
                key: key.clone(),
                error,
            });
            consumer::give_back(context.config.max_backoff, &mut grant).await;
        }
    }
    // Still active (a failure, not a stop): this releases the lease. After a stop request it
    // hands it over, releases or retires it.
    grant.finish();
    tracing::info!("record loop ended");
    (context.observer)(ConsumerEvent::Stopped { key });
}

/// The processor's last call: `lease_lost`, or `stop_requested` until the reason's deadline.
async fn stop<P: RecordProcessor>(
    context: &ReaderContext,
    key: &LeaseKey,
    processor: &mut P,
    checkpointer: &RecordCheckpointer,
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
    checkpointer: &'a RecordCheckpointer,
    key: &'a LeaseKey,
    observer: &'a Observer,
}

impl<P: RecordProcessor> Stopping for Stop<'_, P> {
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

/// A lease this consumer cannot read at all (its key names no stream this worker can
/// resolve: `error` says why): reported as a refused read, held for `max_backoff` and
/// released, as after a refusal, with no processor made for it.
pub(crate) async fn unreadable(
    config: &ConsumerConfig,
    observer: &Observer,
    mut grant: LeaseGrant,
    error: String,
) {
    let key = grant.key().clone();
    tracing::error!(%error, "the lease's stream cannot be read here; the lease is released after a backoff");
    observer(ConsumerEvent::ReadFailed {
        key: key.clone(),
        error,
    });
    consumer::give_back(config.max_backoff, &mut grant).await;
    grant.finish();
    observer(ConsumerEvent::Stopped { key });
}

/// Reads until the lease must stop, its shard ended and the end was checkpointed, the
/// processor panicked, or Kinesis refused the shard: the [`Fetcher`] reads (ahead of the
/// processor, within the prefetch limits), and this loop hands each batch to the processor
/// under the failure policy. When the loop ends, whatever was read ahead is dropped unseen:
/// the next reader of the shard starts from the last checkpoint.
///
/// Each batch the processor returns from, and each empty answer (nothing to process), is
/// progress of the lease's application ([`LeaseGrant::progress`]): a loop stuck in a
/// processor, or backing off for good, stops counting as progress.
async fn read<P: RecordProcessor>(
    context: &ReaderContext,
    shard: String,
    grant: &mut LeaseGrant,
    processor: &mut P,
    checkpointer: &RecordCheckpointer,
    position: StartPosition,
    meters: &ShardMeters,
) -> Exit {
    let queue = Queue::new(&context.config);
    let (sink, mut fetched) = mpsc::unbounded_channel();
    let fetcher = Fetcher {
        context,
        shard,
        meters,
        queue: &queue,
        sink,
    };
    let deliverer = Deliverer {
        config: &context.config,
        observer: &context.observer,
        meters,
        checkpointer,
    };
    let reading = async {
        match &context.consumer_arn {
            None => fetcher.run(position).await,
            Some(consumer) => fetcher.subscribed(consumer, position).await,
        }
        // Its last item is handed on: the loop below ends with it.
        std::future::pending::<()>().await;
    };
    let processing = async {
        loop {
            let next = tokio::select! {
                biased;
                reason = grant.stopped() => return Exit::Stop(reason),
                next = fetched.recv() => next,
            };
            let (records, bytes, load) = match next {
                Some(Fetched::Batch {
                    records,
                    bytes,
                    load,
                }) => (records, bytes, load),
                Some(Fetched::End) => {
                    return end_of_shard(context, grant, processor, checkpointer).await
                }
                Some(Fetched::Refused(error)) => return Exit::Refused(error),
                None => unreachable!("the fetcher hands its last item on before it ends"),
            };
            if let Some(load) = load {
                // A finite rate at least 0: never refused.
                let _ = grant.report_load(load);
            }
            if !records.is_empty() {
                match deliverer.deliver(processor, &records, grant).await {
                    Delivered::Done => {}
                    Delivered::Stop(reason) => return Exit::Stop(reason),
                    Delivered::Panicked(message) => return Exit::Panicked(message),
                }
            }
            queue.done(records.len(), bytes);
            grant.progress();
        }
    };
    tokio::select! {
        exit = processing => exit,
        () = reading => unreachable!("reading never ends by itself"),
    }
}

/// The shard was read to its end: the processor checkpoints the end (asked again every idle
/// interval until it does, or until the lease must stop).
async fn end_of_shard<P: RecordProcessor>(
    context: &ReaderContext,
    grant: &mut LeaseGrant,
    processor: &mut P,
    checkpointer: &RecordCheckpointer,
) -> Exit {
    tracing::info!("end of shard reached");
    loop {
        if let Err(message) = guarded(processor.shard_ended(checkpointer)).await {
            return Exit::Panicked(message);
        }
        if checkpointer.is_ended() {
            return Exit::Ended;
        }
        tracing::warn!("the processor did not checkpoint the end of the shard; its children wait");
        tokio::select! {
            biased;
            reason = grant.stopped() => return Exit::Stop(reason),
            _ = tokio::time::sleep(context.config.idle_time_between_reads) => {}
        }
    }
}
