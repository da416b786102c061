//! What the record loop of one shard records: records and bytes handed to the processor, how
//! far behind the tip of the stream it reads, how long `GetRecords` takes, throttles, the
//! aggregated records it did not expand, and the batches that failed (names
//! and meanings in [`crate::metrics`]). The handles are registered once per loop.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use super::BatchOutcome;
use crate::metrics::{
    KINESIS_BATCH_FAILURES, KINESIS_BYTES, KINESIS_GET_RECORDS_SECONDS, KINESIS_MILLIS_BEHIND,
    KINESIS_RECORDS, KINESIS_THROTTLES, KINESIS_UNEXPANDED,
};

/// The metrics of one shard's record loop.
pub(super) struct ShardMeters {
    records: Counter,
    bytes: Counter,
    behind: Gauge,
    get_records: Histogram,
    throttled_reads: Counter,
    throttled_iterators: Counter,
    corrupt_aggregates: Counter,
    dropped_aggregates: Counter,
    /// Failed deliveries, by what followed: retry, skip, stop.
    batch_failures: [Counter; 3],
}

impl ShardMeters {
    pub(super) fn new(stream: &str, shard: &str) -> Self {
        let labels = [("stream", stream.to_owned()), ("shard", shard.to_owned())];
        let throttles = |call: &'static str| {
            metrics::counter!(
                KINESIS_THROTTLES,
                "stream" => stream.to_owned(),
                "shard" => shard.to_owned(),
                "call" => call
            )
        };
        let not_expanded = |reason: &'static str| {
            metrics::counter!(
                KINESIS_UNEXPANDED,
                "stream" => stream.to_owned(),
                "shard" => shard.to_owned(),
                "reason" => reason
            )
        };
        let failed = |then: &'static str| {
            metrics::counter!(
                KINESIS_BATCH_FAILURES,
                "stream" => stream.to_owned(),
                "shard" => shard.to_owned(),
                "then" => then
            )
        };
        Self {
            batch_failures: [failed("retry"), failed("skip"), failed("stop")],
            corrupt_aggregates: not_expanded("corrupt"),
            dropped_aggregates: not_expanded("out_of_range"),
            records: metrics::counter!(KINESIS_RECORDS, &labels),
            bytes: metrics::counter!(KINESIS_BYTES, &labels),
            behind: metrics::gauge!(KINESIS_MILLIS_BEHIND, &labels),
            get_records: metrics::histogram!(KINESIS_GET_RECORDS_SECONDS, "stream" => stream.to_owned()),
            throttled_reads: throttles("GetRecords"),
            throttled_iterators: throttles("GetShardIterator"),
        }
    }

    /// A `GetRecords` call took `took`, answered or not.
    pub(super) fn get_records(&self, took: Duration) {
        self.get_records.record(took.as_secs_f64());
    }

    /// A `GetRecords` answer: `records` records of `bytes` bytes, `millis_behind` behind the
    /// tip of the stream (when the answer said).
    pub(super) fn read(&self, records: usize, bytes: usize, millis_behind: Option<i64>) {
        self.records.increment(records as u64);
        self.bytes.increment(bytes as u64);
        if let Some(behind) = millis_behind {
            self.behind.set(behind as f64);
        }
    }

    /// `GetRecords` was throttled.
    pub(super) fn read_throttled(&self) {
        self.throttled_reads.increment(1);
    }

    /// `GetShardIterator` was throttled.
    pub(super) fn iterator_throttled(&self) {
        self.throttled_iterators.increment(1);
    }

    /// A record in the aggregated format was delivered as it is: its digest or protobuf is
    /// wrong.
    pub(super) fn aggregate_corrupt(&self) {
        self.corrupt_aggregates.increment(1);
    }

    /// An aggregate holding a user record hashed outside the shard was dropped.
    pub(super) fn aggregate_dropped(&self) {
        self.dropped_aggregates.increment(1);
    }

    /// A delivery of a batch failed; `then` is what follows: `Retry`, `Skip` or `Stop`.
    pub(super) fn batch_failed(&self, then: BatchOutcome) {
        let index = match then {
            BatchOutcome::Retry | BatchOutcome::Continue => 0,
            BatchOutcome::Skip => 1,
            BatchOutcome::Stop => 2,
        };
        self.batch_failures[index].increment(1);
    }

    /// The loop ended here: another process (or none) reads the shard now.
    pub(super) fn ended(&self) {
        self.behind.set(0.0);
    }
}
