//! The record loop of one lease: an iterator from the checkpoint (or the initial position),
//! `GetRecords` within the service limits, the processor's calls, the end of the shard, and a
//! prompt stop when the lease's signal fires.
//!
//! A batch the processor fails is delivered again under the failure policy (`delivery.rs`).
//! A loop that cannot go on gives its lease back instead of holding it unprocessed: when the
//! processor panics (the panic is caught, not the end of the task) or Kinesis refuses to serve
//! the shard (stream deleted, access denied), it reports the failure, holds the lease for
//! `max_backoff` (so a processor that panics on every batch does not make the fleet spin) and
//! then releases it for the balance to place again.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use tokio::time::Instant;

use super::aggregation::{self, Expanded, HashKeyRange, MAGIC};
use super::config::{ConsumerConfig, InitialPosition, LoadFigure};
use super::delivery::{guarded, Delivered, Deliverer};
use super::event::{ConsumerEvent, Observer};
use super::metrics::ShardMeters;
use super::processor::{
    resume_after, KinesisRecord, RecordCheckpointer, RecordProcessor, ShardStart, StartPosition,
};
use super::source::ShardRanges;
use super::{classify, describe, Failure};
use crate::lease::{LeaseKey, RESERVED_PREFIX};
use crate::store::{Jitter, RetryPolicy};
use crate::worker::{LeaseGrant, StopReason};

/// The checkpoint that records where a lease read from `Latest` started, so that a lease
/// that moves before its first checkpoint resumes there: the prefix, then unix milliseconds.
const STARTED_AT_PREFIX: &str = "shardlease#AT_TIMESTAMP:";

/// How far before "now" a `Latest` start is placed: Kinesis refuses a timestamp in its future,
/// and the host's clock may be a little ahead of the service's.
const LATEST_MARGIN: Duration = Duration::from_secs(1);

/// The least time a record loop measures over before it reports its lease's load.
pub const LOAD_SAMPLE: Duration = Duration::from_secs(1);

/// What a record loop read since it last reported its lease's load.
struct Rate {
    figure: LoadFigure,
    since: Instant,
    records: u64,
    bytes: u64,
}

impl Rate {
    fn new(figure: LoadFigure) -> Self {
        Self {
            figure,
            since: Instant::now(),
            records: 0,
            bytes: 0,
        }
    }

    /// Counts an answer; once [`LOAD_SAMPLE`] has passed, returns the figure per second and
    /// starts again.
    fn read(&mut self, records: usize, bytes: usize) -> Option<f64> {
        self.records += records as u64;
        self.bytes += bytes as u64;
        let elapsed = self.since.elapsed();
        if elapsed < LOAD_SAMPLE {
            return None;
        }
        let count = match self.figure {
            LoadFigure::Bytes => self.bytes,
            LoadFigure::Records => self.records,
            LoadFigure::None => return None,
        };
        *self = Self::new(self.figure);
        Some(count as f64 / elapsed.as_secs_f64())
    }
}

pub(crate) struct ReaderContext {
    pub client: aws_sdk_kinesis::Client,
    /// The shards' hash key ranges, for expanding aggregates.
    pub ranges: ShardRanges,
    pub stream: String,
    pub config: ConsumerConfig,
    pub observer: Observer,
}

/// The record loop's backoff: doubling from `first` to `max` with equal jitter (never sooner
/// than half the ceiling), and back to `first` after a success.
struct Backoff {
    policy: RetryPolicy,
    retries: u32,
}

impl Backoff {
    fn new(first: Duration, max: Duration) -> Self {
        Self {
            policy: RetryPolicy::default()
                .base_delay(first)
                .max_delay(max)
                .jitter(Jitter::Equal),
            retries: 0,
        }
    }

    fn wait(&mut self) -> Duration {
        self.retries = self.retries.saturating_add(1);
        self.policy.backoff(self.retries)
    }

    fn reset(&mut self) {
        self.retries = 0;
    }
}

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

pub(crate) async fn run<P: RecordProcessor>(
    context: Arc<ReaderContext>,
    mut grant: LeaseGrant,
    mut processor: P,
) {
    let key = grant.key().clone();
    let checkpointer = RecordCheckpointer::new(grant.checkpointer(), Arc::clone(&context.observer));
    let mut position = start_position(&grant, &context.config, &checkpointer).await;
    let start = ShardStart {
        shard: key.clone(),
        checkpoint: grant.initial_checkpoint().map(str::to_owned),
        position: position.clone(),
        parents: grant.parents().to_vec(),
    };
    tracing::info!(?position, "record loop starts");
    let meters = ShardMeters::new(&context.stream, key.as_str());
    let exit = match guarded(processor.initialize(&start)).await {
        Ok(()) => {
            read(
                &context,
                &mut grant,
                &mut processor,
                &checkpointer,
                &mut position,
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
            give_back(&context, &mut grant).await;
        }
        Exit::Refused(error) => {
            tracing::error!(%error, "Kinesis refuses to serve the shard; the lease is released after a backoff");
            (context.observer)(ConsumerEvent::ReadFailed {
                key: key.clone(),
                error,
            });
            give_back(&context, &mut grant).await;
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
    let deadline = match &reason {
        StopReason::Handoff { deadline, .. }
        | StopReason::Shutdown { deadline }
        | StopReason::Retired { deadline } => *deadline,
        StopReason::Lost => {
            if let Err(message) = guarded(processor.lease_lost()).await {
                tracing::error!(panic = %message, "the processor panicked in lease_lost");
                (context.observer)(ConsumerEvent::ProcessorPanicked {
                    key: key.clone(),
                    message,
                });
            }
            return;
        }
    };
    (context.observer)(ConsumerEvent::StopRequested {
        key: key.clone(),
        reason: reason.clone(),
    });
    let last_chance = guarded(processor.stop_requested(&reason, checkpointer));
    match tokio::time::timeout_at(deadline, last_chance).await {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            tracing::error!(panic = %message, "the processor panicked in stop_requested");
            (context.observer)(ConsumerEvent::ProcessorPanicked {
                key: key.clone(),
                message,
            });
        }
        Err(_) => {
            tracing::warn!("the processor did not return from stop_requested before the deadline");
        }
    }
}

/// Holds a lease whose loop failed for `max_backoff` before it is released (at once if a stop
/// comes first), so that a lease failing on every worker moves at most that often.
async fn give_back(context: &ReaderContext, grant: &mut LeaseGrant) {
    tokio::select! {
        biased;
        reason = grant.stopped() => tracing::info!(?reason, "stopped while backing off"),
        _ = tokio::time::sleep(context.config.max_backoff) => {}
    }
}

/// Reads until the lease must stop, its shard ended and the end was checkpointed, the
/// processor panicked, or Kinesis refused the shard.
///
/// Each batch the processor returns from, and each empty answer (nothing to process), is
/// progress of the lease's application ([`LeaseGrant::progress`]): a loop stuck in a
/// processor, or backing off for good, stops counting as progress.
async fn read<P: RecordProcessor>(
    context: &ReaderContext,
    grant: &mut LeaseGrant,
    processor: &mut P,
    checkpointer: &RecordCheckpointer,
    position: &mut StartPosition,
    meters: &ShardMeters,
) -> Exit {
    let config = &context.config;
    let key = grant.key().clone();
    let mut backoff = Backoff::new(config.min_call_interval, config.max_backoff);
    let mut iterator: Option<String> = None;
    let mut next_call = Instant::now();
    // `GetRecords` was refused since the last answer: the next refusal ends the loop.
    let mut refused = false;
    let mut rate = Rate::new(config.load_figure);
    let mut users = UserRecords::new(config.deaggregate, position);
    let deliverer = Deliverer {
        config,
        observer: &context.observer,
        meters,
        checkpointer,
    };
    loop {
        tokio::select! {
           biased;
            reason = grant.stopped() => return Exit::Stop(reason),
            _ = tokio::time::sleep_until(next_call) => {}
        }
        let current = match iterator.take() {
            Some(current) => current,
            None => {
                let fresh = tokio::select! {
                    biased;
                    reason = grant.stopped() => return Exit::Stop(reason),
                    fresh = tokio::time::timeout(
                        config.call_timeout,
                        shard_iterator(context, &key, position),
                    ) => fresh,
                };
                match fresh {
                    Ok(Ok(fresh)) => fresh,
                    Ok(Err((Failure::Fatal, error))) => {
                        return Exit::Refused(format!("GetShardIterator: {error}"))
                    }
                    Ok(Err((failure, _))) => {
                        if failure == Failure::Throttled {
                            meters.iterator_throttled();
                        }
                        next_call = Instant::now() + pause(failure, &mut backoff, config);
                        continue;
                    }
                    Err(_) => {
                        let wait = pause(Failure::Transient, &mut backoff, config);
                        tracing::warn!(timeout = ?config.call_timeout, ?wait, "GetShardIterator unanswered; backing off");
                        next_call = Instant::now() + wait;
                        continue;
                    }
                }
            }
        };
        let called = Instant::now();
        let request = context
            .client
            .get_records()
            .shard_iterator(&current)
            // At most 10,000 (validated), so it fits the SDK's i32.
            .limit(i32::try_from(config.max_records).unwrap_or(i32::MAX))
            .send();
        let answer = tokio::select! {
           biased;
            reason = grant.stopped() => return Exit::Stop(reason),
            answer = tokio::time::timeout(config.call_timeout, request) => answer,
        };
        meters.get_records(called.elapsed());
        let Ok(answer) = answer else {
            let wait = pause(Failure::Transient, &mut backoff, config);
            tracing::warn!(timeout = ?config.call_timeout, ?wait, "GetRecords unanswered; backing off");
            iterator = Some(current);
            next_call = Instant::now() + wait;
            continue;
        };
        let output = match answer {
            Ok(output) => output,
            Err(err) => {
                let failure = classify(&err);
                let text = describe(&err);
                if failure == Failure::Throttled {
                    meters.read_throttled();
                }
                match failure {
                    Failure::ExpiredIterator => {
                        tracing::info!(error = %text, "shard iterator expired; getting a fresh one");
                        next_call = Instant::now();
                    }
                    Failure::Fatal if refused => {
                        return Exit::Refused(format!("GetRecords: {text}"));
                    }
                    Failure::Fatal => {
                        // The iterator itself may be what is wrong: try once more with a fresh
                        // one from the last record handed to the processor.
                        tracing::warn!(error = %text, "GetRecords refused; trying once more with a fresh iterator");
                        refused = true;
                        next_call = Instant::now() + config.min_call_interval;
                    }
                    _ => {
                        let wait = pause(failure, &mut backoff, config);
                        tracing::warn!(error = %text, ?failure, ?wait, "GetRecords failed; backing off");
                        iterator = Some(current);
                        next_call = Instant::now() + wait;
                    }
                }
                continue;
            }
        };
        backoff.reset();
        refused = false;
        let records: Vec<KinesisRecord> = output.records().iter().map(to_record).collect();
        if let Some(last) = records.last() {
            *position = StartPosition::AfterSequenceNumber(last.sequence_number.clone());
        }
        let records = users.expand(records, context, &key, meters).await;
        let empty = records.is_empty();
        let bytes = records.iter().map(|r| r.data.len()).sum();
        meters.read(records.len(), bytes, output.millis_behind_latest());
        if let Some(load) = rate.read(records.len(), bytes) {
            // A finite rate at least 0: never refused.
            let _ = grant.report_load(load);
        }
        if !empty {
            match deliverer.deliver(processor, &records, grant).await {
                Delivered::Done => {}
                Delivered::Stop(reason) => return Exit::Stop(reason),
                Delivered::Panicked(message) => return Exit::Panicked(message),
            }
        }
        grant.progress();
        match output.next_shard_iterator() {
            Some(next) => {
                iterator = Some(next.to_owned());
                let gap = if empty {
                    config.idle_time_between_reads
                } else {
                    config.min_call_interval
                };
                next_call = called + gap;
            }
            None => return end_of_shard(context, grant, processor, checkpointer).await,
        }
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

/// What the record loop hands the processor of what it read: with de-aggregation on, the user
/// records of every aggregate (the shard's hash key range looked up at the first aggregate),
/// and, after a resume inside an aggregate, none of its user records up to the checkpoint.
struct UserRecords {
    deaggregate: bool,
    /// The shard's range, once a lookup found it.
    range: Option<HashKeyRange>,
    /// The aggregate a resume started inside, and the last of its user records processed:
    /// skipped up to there, until a later record is read.
    skip: Option<(String, u64)>,
}

impl UserRecords {
    fn new(deaggregate: bool, start: &StartPosition) -> Self {
        let skip = match start {
            StartPosition::AfterSubSequenceNumber {
                sequence_number,
                sub_sequence_number,
            } => Some((sequence_number.clone(), *sub_sequence_number)),
            _ => None,
        };
        Self {
            deaggregate,
            range: None,
            skip,
        }
    }

    /// The records to hand the processor of `records`, as read.
    async fn expand(
        &mut self,
        records: Vec<KinesisRecord>,
        context: &ReaderContext,
        key: &LeaseKey,
        meters: &ShardMeters,
    ) -> Vec<KinesisRecord> {
        let mut users = Vec::with_capacity(records.len());
        for record in records {
            if !self.deaggregate || !record.data.starts_with(&MAGIC) {
                users.push(record);
                continue;
            }
            if self.range.is_none() {
                // Bounded as every Kinesis call of the loop is; not found (or not listed in
                // time), the aggregate is expanded without the check, and the next one asks
                // again (the listing itself is not repeated within
                // `RELIST_GAP` in `source.rs`).
                let lookup = context.ranges.get(key);
                self.range = tokio::time::timeout(context.config.call_timeout, lookup)
                    .await
                    .ok()
                    .flatten();
            }
            let sequence = record.sequence_number.clone();
            match aggregation::expand(record, self.range) {
                Expanded::Plain(record) => users.push(record),
                Expanded::Aggregate(expanded) => users.extend(expanded),
                Expanded::Corrupt(record, why) => {
                    tracing::warn!(sequence_number = %sequence, why, "a record in the aggregated format is not an aggregate: delivered as it is");
                    meters.aggregate_corrupt();
                    users.push(record);
                }
                Expanded::OutOfRange(count) => {
                    tracing::warn!(sequence_number = %sequence, user_records = count, "an aggregate holds a user record hashed outside this shard: dropped, as KCL drops it");
                    meters.aggregate_dropped();
                }
            }
        }
        self.skip_processed(users)
    }

    /// Leaves out the user records a checkpoint inside an aggregate covers (a record that was
    /// not expanded counts as user record 0, as KCL counts it).
    fn skip_processed(&mut self, mut users: Vec<KinesisRecord>) -> Vec<KinesisRecord> {
        let Some((sequence, last)) = &self.skip else {
            return users;
        };
        users.retain(|u| {
            u.sequence_number != *sequence || u.sub_sequence_number.unwrap_or(0) > *last
        });
        if users.iter().any(|u| u.sequence_number != *sequence) {
            self.skip = None;
        }
        users
    }
}

fn pause(failure: Failure, backoff: &mut Backoff, config: &ConsumerConfig) -> Duration {
    match failure {
        Failure::Fatal => config.max_backoff,
        _ => backoff.wait(),
    }
}

/// A fresh iterator at `position`, or why not (with the error's text).
async fn shard_iterator(
    context: &ReaderContext,
    key: &LeaseKey,
    position: &StartPosition,
) -> Result<String, (Failure, String)> {
    let request = context
        .client
        .get_shard_iterator()
        .stream_name(&context.stream)
        .shard_id(key.as_str());
    let request = match position {
        StartPosition::TrimHorizon => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        StartPosition::AtTimestamp(at) => request
            .shard_iterator_type(ShardIteratorType::AtTimestamp)
            .timestamp(DateTime::from(*at)),
        StartPosition::AfterSequenceNumber(sequence) => request
            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
            .starting_sequence_number(sequence),
        // The aggregate is read again; its user records up to the checkpoint are skipped.
        StartPosition::AfterSubSequenceNumber {
            sequence_number, ..
        } => request
            .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
            .starting_sequence_number(sequence_number),
    };
    match request.send().await {
        Ok(output) => output.shard_iterator().map(str::to_owned).ok_or_else(|| {
            tracing::warn!("GetShardIterator returned no iterator");
            (Failure::Transient, "no iterator in the answer".to_owned())
        }),
        Err(err) => {
            let failure = classify(&err);
            let text = describe(&err);
            tracing::warn!(error = %text, ?failure, "GetShardIterator failed");
            Err((failure, text))
        }
    }
}

fn to_record(record: &aws_sdk_kinesis::types::Record) -> KinesisRecord {
    KinesisRecord {
        sequence_number: record.sequence_number().to_owned(),
        sub_sequence_number: None,
        partition_key: record.partition_key().unwrap_or_default().to_owned(),
        explicit_hash_key: None,
        data: record.data().as_ref().to_vec(),
        approximate_arrival: record
            .approximate_arrival_timestamp()
            .and_then(|at| SystemTime::try_from(*at).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(sequence: &str, sub: Option<u64>) -> KinesisRecord {
        KinesisRecord {
            sequence_number: sequence.into(),
            sub_sequence_number: sub,
            partition_key: "k".into(),
            explicit_hash_key: None,
            data: Vec::new(),
            approximate_arrival: None,
        }
    }

    #[test]
    fn a_resume_inside_an_aggregate_skips_its_user_records_up_to_the_checkpoint_only() {
        let start = StartPosition::AfterSubSequenceNumber {
            sequence_number: "7".into(),
            sub_sequence_number: 1,
        };
        let mut users = UserRecords::new(true, &start);
        // An empty answer leaves the skip in place.
        assert!(users.skip_processed(Vec::new()).is_empty());
        let kept = users.skip_processed(vec![user("7", Some(0)), user("7", Some(1))]);
        assert!(kept.is_empty());
        let kept = users.skip_processed(vec![user("7", Some(2)), user("9", None)]);
        assert_eq!(kept, [user("7", Some(2)), user("9", None)]);
        // A later record was read: nothing is skipped any more.
        assert_eq!(users.skip_processed(vec![user("7", Some(0))]).len(), 1);
        // A record that was not expanded counts as user record 0.
        let mut users = UserRecords::new(false, &start);
        assert!(users.skip_processed(vec![user("7", None)]).is_empty());
        let mut users = UserRecords::new(true, &StartPosition::AfterSequenceNumber("7".into()));
        assert_eq!(users.skip_processed(vec![user("7", Some(0))]).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_load_is_what_was_read_per_second_over_at_least_a_sample() {
        let mut bytes = Rate::new(LoadFigure::Bytes);
        assert_eq!(bytes.read(10, 1_000), None, "less than a sample");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(bytes.read(5, 500), Some(1_000.0));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(bytes.read(0, 0), Some(0.0), "idle reads report 0");
        let mut records = Rate::new(LoadFigure::Records);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(records.read(30, 9_000), Some(15.0));
        let mut none = Rate::new(LoadFigure::None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(none.read(30, 9_000), None);
    }

    #[test]
    fn backoff_doubles_to_its_ceiling_with_jitter_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        let mut ceiling = Duration::from_millis(200);
        for _ in 0..10 {
            let wait = backoff.wait();
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{wait:?} vs {ceiling:?}"
            );
            ceiling = (ceiling * 2).min(Duration::from_secs(10));
        }
        backoff.reset();
        assert!(backoff.wait() <= Duration::from_millis(200));
    }
}
