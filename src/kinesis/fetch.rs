//! Reading a shard by polling: `GetShardIterator` from the start position, `GetRecords` within
//! the service limits (paced, backed off with jitter on throttling and errors, a fresh iterator
//! after an expired one, each call bounded by `call_timeout`), aggregates expanded and a resume
//! inside one skipped to its checkpoint. The [`Fetcher`] hands what it read to the record loop
//! through a queue it fills ahead of the processor while fewer than
//! [`prefetch_records`](super::ConsumerConfig::prefetch_records) records and
//! [`prefetch_bytes`](super::ConsumerConfig::prefetch_bytes) bytes wait (the batch in the
//! processor's hands included), so the next `GetRecords` overlaps `process_records`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::aggregation::{self, Expanded, HashKeyRange, MAGIC};
use super::config::{ConsumerConfig, LoadFigure};
use super::context::ReaderContext;
use super::metrics::ShardMeters;
use super::processor::{KinesisRecord, StartPosition};
use super::{classify, describe, Failure};
pub(super) use crate::consumer::Backoff;

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

/// What the fetcher hands the record loop, in the shard's order.
#[derive(Debug)]
pub(super) enum Fetched {
    /// An answer of `GetRecords`: its records as the processor gets them (none for an empty
    /// answer, which is progress all the same), their bytes, and the lease's load when one
    /// is due.
    Batch {
        records: Vec<KinesisRecord>,
        bytes: usize,
        load: Option<f64>,
    },
    /// The shard was read to its end (after every batch before it).
    End,
    /// Kinesis refused to serve the shard (the call and the error): a fresh iterator did not
    /// help.
    Refused(String),
}

/// The most answers read ahead beyond the one in the processor's hands, empty ones included
/// (KCL's `maxPendingProcessRecordsInput`): an idle shard whose processor is busy, or halted,
/// is not polled on and on.
const BATCHES_AHEAD: usize = 3;

/// The answers, records and bytes handed to the record loop and not yet done with (the batch
/// in the processor's hands included), and the wake-up of a fetcher waiting for room.
pub(super) struct Queue {
    batches: AtomicUsize,
    records: AtomicUsize,
    bytes: AtomicUsize,
    room: Notify,
    max_batches: usize,
    max_records: usize,
    max_bytes: usize,
}

impl Queue {
    pub(super) fn new(config: &ConsumerConfig) -> Self {
        let ahead = config.prefetch_records > 0 && config.prefetch_bytes > 0;
        Self {
            batches: AtomicUsize::new(0),
            records: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            room: Notify::new(),
            max_batches: if ahead { BATCHES_AHEAD } else { 0 },
            max_records: config.prefetch_records as usize,
            max_bytes: usize::try_from(config.prefetch_bytes).unwrap_or(usize::MAX),
        }
    }

    /// True while more waits than the limits allow: the fetcher reads ahead only up to them
    /// (with prefetch off, only once the loop is done with everything handed to it).
    fn full(&self) -> bool {
        self.batches.load(Ordering::SeqCst) > self.max_batches
            || self.records.load(Ordering::SeqCst) > self.max_records
            || self.bytes.load(Ordering::SeqCst) > self.max_bytes
    }

    /// Resolves once there is room.
    pub(super) async fn room(&self) {
        while self.full() {
            // A permit stored by `done` between the check and the wait is not lost.
            self.room.notified().await;
        }
    }

    pub(super) fn handed(&self, records: usize, bytes: usize) {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.records.fetch_add(records, Ordering::SeqCst);
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    /// The record loop is done with a batch (processed, skipped): room for more.
    pub(super) fn done(&self, records: usize, bytes: usize) {
        self.batches.fetch_sub(1, Ordering::SeqCst);
        self.records.fetch_sub(records, Ordering::SeqCst);
        self.bytes.fetch_sub(bytes, Ordering::SeqCst);
        self.room.notify_one();
    }
}

/// What a fetcher keeps from one answer to the next to hand them on: the aggregates'
/// expansion (with a resume's skip) and the load measured.
pub(super) struct Handing {
    users: UserRecords,
    rate: Rate,
}

impl Handing {
    /// For a read that starts at `start`.
    pub(super) fn new(config: &ConsumerConfig, start: &StartPosition) -> Self {
        Self {
            users: UserRecords::new(config.deaggregate, start),
            rate: Rate::new(config.load_figure),
        }
    }
}

/// Reads one shard for its record loop, into the queue.
pub(super) struct Fetcher<'a> {
    pub context: &'a ReaderContext,
    /// The shard's id (the lease key of a single-stream consumer; the key's last part in a
    /// multi-stream one).
    pub shard: String,
    pub meters: &'a ShardMeters,
    pub queue: &'a Queue,
    pub sink: mpsc::UnboundedSender<Fetched>,
}

/// Where a fetcher stands between two calls: the iterator to read with next (none: a fresh one
/// is needed, from the last record read), when the next call may go, the backoff, and whether
/// `GetRecords` was refused since the last answer (the next refusal ends the loop).
struct Cursor {
    iterator: Option<String>,
    next_call: Instant,
    backoff: Backoff,
    refused: bool,
}

impl Cursor {
    /// The next call after a failure: at once for an expired iterator, after `max_backoff`
    /// for a refusal, after the growing backoff otherwise; returns the wait.
    fn back_off(&mut self, failure: Failure, config: &ConsumerConfig) -> Duration {
        let wait = pause(failure, &mut self.backoff, config);
        self.next_call = Instant::now() + wait;
        wait
    }
}

/// The type of a `GetRecords` answer.
type Answer = aws_sdk_kinesis::operation::get_records::GetRecordsOutput;

impl Fetcher<'_> {
    /// Reads from `position` until the shard ends or Kinesis refuses it, handing each answer
    /// on; returns after the last item (or when the record loop is gone). The record loop
    /// drops it when the lease must stop.
    pub(super) async fn run(self, mut position: StartPosition) {
        let config = &self.context.config;
        let mut cursor = Cursor {
            iterator: None,
            next_call: Instant::now(),
            backoff: Backoff::new(config.min_call_interval, config.max_backoff),
            refused: false,
        };
        let mut handing = Handing::new(config, &position);
        loop {
            self.queue.room().await;
            tokio::time::sleep_until(cursor.next_call).await;
            let current = match cursor.iterator.take() {
                Some(current) => current,
                None => match self.fresh_iterator(&mut cursor, &position).await {
                    Ok(Some(fresh)) => fresh,
                    Ok(None) => continue,
                    Err(refused) => return self.hand(refused),
                },
            };
            let called = Instant::now();
            let output = match self.get_records(&mut cursor, current).await {
                Ok(Some(output)) => output,
                Ok(None) => continue,
                Err(refused) => return self.hand(refused),
            };
            cursor.backoff.reset();
            cursor.refused = false;
            let records: Vec<KinesisRecord> = output.records().iter().map(to_record).collect();
            if let Some(last) = records.last() {
                position = StartPosition::AfterSequenceNumber(last.sequence_number.clone());
            }
            let behind = output.millis_behind_latest();
            let Some(handed) = self.hand_records(records, behind, &mut handing).await else {
                return;
            };
            let Some(next) = output.next_shard_iterator() else {
                return self.hand(Fetched::End);
            };
            cursor.iterator = Some(next.to_owned());
            let gap = if handed == 0 {
                config.idle_time_between_reads
            } else {
                config.min_call_interval
            };
            cursor.next_call = called + gap;
        }
    }

    /// Hands one answer's records on (Kinesis records, in the shard's order), expanded, counted,
    /// and with the lease's load when one is due: how many records the processor gets (none:
    /// the shard is quiet, which the loop counts as progress all the same), or `None` when the
    /// record loop is gone.
    pub(super) async fn hand_records(
        &self,
        records: Vec<KinesisRecord>,
        millis_behind: Option<i64>,
        handing: &mut Handing,
    ) -> Option<usize> {
        let records = handing
            .users
            .expand(records, self.context, &self.shard, self.meters)
            .await;
        let count = records.len();
        let bytes = records.iter().map(|r| r.data.len()).sum();
        self.meters.read(count, bytes, millis_behind);
        let load = handing.rate.read(count, bytes);
        self.queue.handed(count, bytes);
        let batch = Fetched::Batch {
            records,
            bytes,
            load,
        };
        self.sink.send(batch).ok().map(|()| count)
    }

    /// A fresh iterator at `position`; `None` after a failure worth retrying (the cursor says
    /// when), the item that ends the loop when Kinesis refuses.
    async fn fresh_iterator(
        &self,
        cursor: &mut Cursor,
        position: &StartPosition,
    ) -> Result<Option<String>, Fetched> {
        let config = &self.context.config;
        let call = shard_iterator(self.context, &self.shard, position);
        match tokio::time::timeout(config.call_timeout, call).await {
            Ok(Ok(fresh)) => Ok(Some(fresh)),
            Ok(Err((Failure::Fatal, error))) => {
                Err(Fetched::Refused(format!("GetShardIterator: {error}")))
            }
            Ok(Err((failure, _))) => {
                if failure == Failure::Throttled {
                    self.meters.iterator_throttled();
                }
                cursor.back_off(failure, config);
                Ok(None)
            }
            Err(_) => {
                let wait = cursor.back_off(Failure::Transient, config);
                tracing::warn!(timeout = ?config.call_timeout, ?wait, "GetShardIterator unanswered; backing off");
                Ok(None)
            }
        }
    }

    /// `GetRecords` with `current`; `None` after a failure worth retrying (the cursor says
    /// when, and with which iterator), the item that ends the loop when Kinesis refuses twice.
    async fn get_records(
        &self,
        cursor: &mut Cursor,
        current: String,
    ) -> Result<Option<Answer>, Fetched> {
        let config = &self.context.config;
        let called = Instant::now();
        let request = self
            .context
            .client
            .get_records()
            .shard_iterator(&current)
            .set_stream_arn(self.context.stream_arn.clone())
            // At most 10,000 (validated), so it fits the SDK's i32.
            .limit(i32::try_from(config.max_records).unwrap_or(i32::MAX))
            .send();
        let answer = tokio::time::timeout(config.call_timeout, request).await;
        self.meters.get_records(called.elapsed());
        let Ok(answer) = answer else {
            let wait = cursor.back_off(Failure::Transient, config);
            tracing::warn!(timeout = ?config.call_timeout, ?wait, "GetRecords unanswered; backing off");
            cursor.iterator = Some(current);
            return Ok(None);
        };
        let err = match answer {
            Ok(output) => return Ok(Some(output)),
            Err(err) => err,
        };
        let failure = classify(&err);
        let text = describe(&err);
        match failure {
            Failure::ExpiredIterator => {
                tracing::info!(error = %text, "shard iterator expired; getting a fresh one");
                cursor.next_call = Instant::now();
            }
            Failure::Fatal if cursor.refused => {
                return Err(Fetched::Refused(format!("GetRecords: {text}")));
            }
            Failure::Fatal => {
                // The iterator itself may be what is wrong: try once more with a fresh one
                // from the last record read.
                tracing::warn!(error = %text, "GetRecords refused; trying once more with a fresh iterator");
                cursor.refused = true;
                cursor.next_call = Instant::now() + config.min_call_interval;
            }
            _ => {
                if failure == Failure::Throttled {
                    self.meters.read_throttled();
                }
                let wait = cursor.back_off(failure, config);
                tracing::warn!(error = %text, ?failure, ?wait, "GetRecords failed; backing off");
                cursor.iterator = Some(current);
            }
        }
        Ok(None)
    }

    /// Hands the last item on.
    pub(super) fn hand(&self, last: Fetched) {
        // The record loop may be gone already: nothing waits for it then.
        let _ = self.sink.send(last);
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
        shard: &str,
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
                let lookup = context.ranges.get(shard);
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

/// Where `position` starts, as Kinesis names it: the type, and the sequence number or the
/// timestamp it needs. A resume inside an aggregate reads the aggregate again (its user records
/// up to the checkpoint are skipped).
pub(super) fn starting(
    position: &StartPosition,
) -> (ShardIteratorType, Option<&str>, Option<DateTime>) {
    match position {
        StartPosition::TrimHorizon => (ShardIteratorType::TrimHorizon, None, None),
        StartPosition::AtTimestamp(at) => (
            ShardIteratorType::AtTimestamp,
            None,
            Some(DateTime::from(*at)),
        ),
        StartPosition::AfterSequenceNumber(sequence) => {
            (ShardIteratorType::AfterSequenceNumber, Some(sequence), None)
        }
        StartPosition::AfterSubSequenceNumber {
            sequence_number, ..
        } => (
            ShardIteratorType::AtSequenceNumber,
            Some(sequence_number),
            None,
        ),
    }
}

/// A fresh iterator at `position`, or why not (with the error's text).
async fn shard_iterator(
    context: &ReaderContext,
    shard: &str,
    position: &StartPosition,
) -> Result<String, (Failure, String)> {
    let request = context
        .client
        .get_shard_iterator()
        .stream_name(&context.stream)
        .set_stream_arn(context.stream_arn.clone())
        .shard_id(shard);
    let (kind, sequence, at) = starting(position);
    let request = request
        .shard_iterator_type(kind)
        .set_starting_sequence_number(sequence.map(str::to_owned))
        .set_timestamp(at);
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

pub(super) fn to_record(record: &aws_sdk_kinesis::types::Record) -> KinesisRecord {
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

    #[test]
    fn the_queue_reads_ahead_within_its_limits_and_not_at_all_with_prefetch_off() {
        let config = ConsumerConfig::default()
            .prefetch_records(100)
            .prefetch_bytes(1_000);
        let queue = Queue::new(&config);
        queue.handed(60, 500);
        queue.handed(40, 500);
        assert!(!queue.full(), "at the limits: one more read");
        queue.handed(1, 0);
        assert!(queue.full(), "over the records");
        queue.done(60, 500);
        assert!(!queue.full());
        // Empty answers count as answers: an idle shard with a busy processor is read at most
        // BATCHES_AHEAD times ahead.
        let idle = Queue::new(&config);
        for _ in 0..=BATCHES_AHEAD {
            assert!(!idle.full());
            idle.handed(0, 0);
        }
        assert!(idle.full());
        let off = Queue::new(&config.clone().prefetch_records(0));
        assert!(!off.full());
        off.handed(0, 0);
        assert!(off.full(), "nothing ahead of the batch being processed");
        off.done(0, 0);
        assert!(!off.full());
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
}
