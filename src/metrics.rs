//! Every metric of the crate: its name, kind, unit and meaning ([`ALL`]), and [`describe`],
//! which tells the installed `metrics` recorder about them (a Prometheus exporter prints them as
//! `# HELP` and `# TYPE`). The worker describes them when it starts, and the DynamoDB store
//! when it connects; call [`describe`] again after installing a recorder later.
//!
//! The values go through the `metrics` facade: install any recorder (Prometheus, StatsD, ...)
//! to collect them; without one they cost next to nothing. Labels:
//!
//! - the worker's metrics: `worker` (its id), and a few more where their meaning says;
//! - the DynamoDB store's: `table`, `operation` (the store call: `take`, `renew`, `beat`,
//!   `scan`, ...), on requests also `request` (the DynamoDB API: `GetItem`, `PutItem`,
//!   `UpdateItem`, `DeleteItem`, `Scan`) and `outcome`;
//! - the Kinesis consumer's (feature `kinesis`): `stream` (the name; `account:name:epoch` for
//!   a consumer of several streams), and `shard` (the shard id) where per shard;
//! - the LogHub consumer's (feature `loghub`): `logstore` (`<project>/<logstore>`), and
//!   `shard` (the shard id) where per shard.
//!
//! This file names no other module of the crate, so that the worker, the store and the
//! consumer can all depend on it.

use metrics::Unit;

/// Gauge: leases this worker holds.
pub const LEASES_HELD: &str = "shardlease_leases_held";
/// Counter: leases taken (unowned, expired, forced, resumed, or received in a handoff).
pub const LEASES_TAKEN: &str = "shardlease_leases_taken_total";
/// Counter: handoffs this worker asked for to balance the fleet.
pub const HANDOFFS_REQUESTED: &str = "shardlease_handoffs_requested_total";
/// Counter: leases this worker handed over gracefully.
pub const LEASES_HANDED_OFF: &str = "shardlease_leases_handed_off_total";
/// Counter: leases taken by force, reported only once the previous holder's validity has surely
/// ended: after a handoff the owner did not finish in time, a policy's steal, a lease of another
/// process with this worker's id, or a take whose answer was lost.
pub const LEASES_STOLEN: &str = "shardlease_leases_stolen_total";
/// Counter: leases whose grant the application dropped while active, without finishing it or
/// being asked to stop (a panicking or forgotten task); each is released at once.
pub const LEASES_ABANDONED: &str = "shardlease_leases_abandoned_total";
/// Counter: leases lost (taken over, deleted, or expired locally).
pub const LEASES_LOST: &str = "shardlease_leases_lost_total";
/// Histogram: seconds one successful session beat took.
pub const RENEWAL_SECONDS: &str = "shardlease_renewal_seconds";
/// Counter: leases the discoverer created for new (or re-listed) shards.
pub const LEASES_CREATED: &str = "shardlease_leases_created_total";
/// Counter: leases deleted by the discoverer or their retiring owner (label `reason`:
/// `parent_done`, `vanished`, `retired`).
pub const LEASES_DELETED: &str = "shardlease_leases_deleted_total";
/// Counter: failed shard listings (label `kind`: `throttled`, `failed`, `timeout`).
pub const SOURCE_ERRORS: &str = "shardlease_source_errors_total";
/// Counter: store calls that failed with an error (label `op`).
pub const STORE_ERRORS: &str = "shardlease_store_errors_total";
/// Counter: times this worker found another live process using its worker id (a
/// `LeaseEvent::DuplicateWorkerId` each).
pub const DUPLICATE_WORKER_ID: &str = "shardlease_duplicate_worker_id_total";
/// Gauge: 1 while this worker's store round trips are too slow to hold leases (it takes
/// none and publishes capacity 0), else 0.
pub const SLOW_STORE: &str = "shardlease_slow_store";

/// Counter: sessions this worker ended after seeing them expire.
pub const SESSIONS_FENCED: &str = "shardlease_sessions_fenced_total";

/// Counter: requests the DynamoDB store sent (labels `table`, `operation`, `request`,
/// `outcome`). Outcomes: `done` (answered with success), `lost_race` (a condition failed:
/// another writer got there first, or the item is not as expected), `throttled`, `transient`
/// (a server error or a broken connection), `unanswered` (abandoned at the attempt timeout or
/// the caller's deadline), `unreachable` (nothing listens at the endpoint), `fatal` (refused:
/// access denied, validation, misconfiguration). Each attempt of a retried call counts, and so
/// does the read that follows a failed condition where the server does not return the item.
pub const STORE_REQUESTS: &str = "shardlease_store_requests_total";
/// Histogram: seconds one DynamoDB request took, from sending to its answer or to being
/// abandoned (labels `table`, `operation`, `request`).
pub const STORE_REQUEST_SECONDS: &str = "shardlease_store_request_seconds";
/// Counter: DynamoDB requests refused for lack of capacity (labels `table`, `operation`).
pub const STORE_THROTTLES: &str = "shardlease_store_throttles_total";
/// Counter: write requests whose answer was lost (unanswered, or the connection broke after
/// sending): they may have been applied. The store recognises its own write when it retries
/// (labels `table`, `operation`).
pub const STORE_AMBIGUOUS_WRITES: &str = "shardlease_store_ambiguous_writes_total";
/// Gauge that only grows: read capacity units DynamoDB reported consumed by `GetItem` and
/// `Scan` since the process started (label `table`). A gauge because the facade's counters
/// count whole numbers and reads cost halves; `rate()` works on it all the same. DynamoDB
/// reports no units for a failed request.
pub const STORE_READ_CAPACITY: &str = "shardlease_store_read_capacity_units";
/// Gauge that only grows: write capacity units DynamoDB reported consumed by `PutItem`,
/// `UpdateItem` and `DeleteItem` since the process started (label `table`). A write whose
/// condition failed is billed by DynamoDB but reported with no units, so it is not counted.
pub const STORE_WRITE_CAPACITY: &str = "shardlease_store_write_capacity_units";

/// Counter: records the Kinesis consumer handed to its processors (labels `stream`, `shard`).
pub const KINESIS_RECORDS: &str = "shardlease_kinesis_records_total";
/// Counter: bytes of record data the Kinesis consumer handed to its processors (labels
/// `stream`, `shard`).
pub const KINESIS_BYTES: &str = "shardlease_kinesis_bytes_total";
/// Gauge: how far the record loop of a shard is behind the tip of the stream, in
/// milliseconds, as the last `GetRecords` answer said (`MillisBehindLatest`; labels `stream`,
/// `shard`). Set to 0 when the loop ends here, so that the largest value over the processes
/// of a fleet is the holder's.
pub const KINESIS_MILLIS_BEHIND: &str = "shardlease_kinesis_millis_behind_latest";
/// Histogram: seconds one `GetRecords` call took, answered or not (label `stream`).
pub const KINESIS_GET_RECORDS_SECONDS: &str = "shardlease_kinesis_get_records_seconds";
/// Counter: Kinesis calls refused for lack of capacity, as the record loop sees them: after
/// the retries of the Kinesis client it was given, if any (labels `stream`, `shard`, `call`:
/// `GetRecords` or `GetShardIterator`).
pub const KINESIS_THROTTLES: &str = "shardlease_kinesis_throttles_total";
/// Counter: Kinesis records in the KPL's aggregated format that the consumer did not expand
/// (labels `stream`, `shard`, `reason`: `corrupt`, its digest or protobuf wrong, delivered as
/// it is; `out_of_range`, it holds a user record hashed outside the shard, dropped whole as
/// KCL drops it).
pub const KINESIS_UNEXPANDED: &str = "shardlease_kinesis_aggregates_not_expanded_total";
/// Counter: failed deliveries of a batch to the processor (an error, or a retry asked for),
/// by what followed (labels `stream`, `shard`, `then`: `retry`, the batch is delivered again;
/// `skip`, it went to the dead-letter hook; `stop`, the shard was halted here). A batch the
/// processor asked to skip or stop counts too.
pub const KINESIS_BATCH_FAILURES: &str = "shardlease_kinesis_batch_failures_total";
/// Counter: log groups the LogHub consumer handed to its processors (labels `logstore`
/// (`<project>/<logstore>`), `shard`).
pub const LOGHUB_LOG_GROUPS: &str = "shardlease_loghub_log_groups_total";
/// Histogram: seconds one `PullLogs` call took, answered or not (label `logstore`).
pub const LOGHUB_PULL_SECONDS: &str = "shardlease_loghub_pull_logs_seconds";
/// Counter: LogHub calls refused for a quota (labels `logstore`, `shard`).
pub const LOGHUB_THROTTLES: &str = "shardlease_loghub_throttles_total";
/// Counter: failed deliveries of a batch to the LogHub processor, by what followed (labels
/// `logstore`, `shard`, `then`: `retry`, `skip`, `stop`).
pub const LOGHUB_BATCH_FAILURES: &str = "shardlease_loghub_batch_failures_total";

/// What a metric measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Only ever goes up.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

/// One metric: its name, kind, unit and what it means.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Description {
    /// The series' name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its unit.
    pub unit: Unit,
    /// What it means, in one sentence.
    pub help: &'static str,
}

const fn metric(name: &'static str, kind: Kind, unit: Unit, help: &'static str) -> Description {
    Description {
        name,
        kind,
        unit,
        help,
    }
}

/// Every metric of the crate: the worker's, the DynamoDB store's, the Kinesis consumer's and
/// the LogHub consumer's.
pub const ALL: [Description; 32] = [
    metric(
        LEASES_HELD,
        Kind::Gauge,
        Unit::Count,
        "leases this worker holds",
    ),
    metric(
        LEASES_TAKEN,
        Kind::Counter,
        Unit::Count,
        "leases taken (unowned, expired, forced, resumed, or received in a handoff)",
    ),
    metric(
        HANDOFFS_REQUESTED,
        Kind::Counter,
        Unit::Count,
        "handoffs this worker asked for to balance the fleet",
    ),
    metric(
        LEASES_HANDED_OFF,
        Kind::Counter,
        Unit::Count,
        "leases this worker handed over gracefully",
    ),
    metric(
        LEASES_STOLEN,
        Kind::Counter,
        Unit::Count,
        "leases taken by force, reported once the previous holder's validity has surely ended",
    ),
    metric(
        LEASES_ABANDONED,
        Kind::Counter,
        Unit::Count,
        "leases whose grant the application dropped while active (released at once)",
    ),
    metric(
        LEASES_LOST,
        Kind::Counter,
        Unit::Count,
        "leases lost (taken over, deleted, or expired locally)",
    ),
    metric(
        RENEWAL_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "time one successful renewal or session beat took",
    ),
    metric(
        LEASES_CREATED,
        Kind::Counter,
        Unit::Count,
        "leases the discoverer created for new shards",
    ),
    metric(
        LEASES_DELETED,
        Kind::Counter,
        Unit::Count,
        "leases deleted by the discoverer or their retiring owner (label reason)",
    ),
    metric(
        SOURCE_ERRORS,
        Kind::Counter,
        Unit::Count,
        "failed shard listings (label kind: throttled, failed, timeout)",
    ),
    metric(
        STORE_ERRORS,
        Kind::Counter,
        Unit::Count,
        "store calls that failed with an error (label op)",
    ),
    metric(
        DUPLICATE_WORKER_ID,
        Kind::Counter,
        Unit::Count,
        "times another live process was found using this worker's id",
    ),
    metric(
        SLOW_STORE,
        Kind::Gauge,
        Unit::Count,
        "1 while the store's round trips are too slow to hold leases, else 0",
    ),
    metric(
        SESSIONS_FENCED,
        Kind::Counter,
        Unit::Count,
        "sessions this worker ended after seeing them expire",
    ),
    metric(
        STORE_REQUESTS,
        Kind::Counter,
        Unit::Count,
        "DynamoDB requests the store sent (labels table, operation, request, outcome)",
    ),
    metric(
        STORE_REQUEST_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "time one DynamoDB request took, answered or abandoned",
    ),
    metric(
        STORE_THROTTLES,
        Kind::Counter,
        Unit::Count,
        "DynamoDB requests refused for lack of capacity",
    ),
    metric(
        STORE_AMBIGUOUS_WRITES,
        Kind::Counter,
        Unit::Count,
        "DynamoDB writes whose answer was lost: they may have been applied",
    ),
    metric(
        STORE_READ_CAPACITY,
        Kind::Gauge,
        Unit::Count,
        "read capacity units DynamoDB reported consumed since start (only grows)",
    ),
    metric(
        STORE_WRITE_CAPACITY,
        Kind::Gauge,
        Unit::Count,
        "write capacity units DynamoDB reported consumed since start (only grows)",
    ),
    metric(
        KINESIS_RECORDS,
        Kind::Counter,
        Unit::Count,
        "Kinesis records handed to the processors (labels stream, shard)",
    ),
    metric(
        KINESIS_BYTES,
        Kind::Counter,
        Unit::Bytes,
        "bytes of Kinesis record data handed to the processors (labels stream, shard)",
    ),
    metric(
        KINESIS_MILLIS_BEHIND,
        Kind::Gauge,
        Unit::Milliseconds,
        "how far a shard's record loop is behind the tip of the stream (MillisBehindLatest; 0 once the loop ended here)",
    ),
    metric(
        KINESIS_GET_RECORDS_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "time one GetRecords call took, answered or not (label stream)",
    ),
    metric(
        KINESIS_THROTTLES,
        Kind::Counter,
        Unit::Count,
        "Kinesis calls refused for lack of capacity (labels stream, shard, call)",
    ),
    metric(
        KINESIS_UNEXPANDED,
        Kind::Counter,
        Unit::Count,
        "aggregated Kinesis records not expanded (labels stream, shard, reason: corrupt, delivered as they are; out_of_range, dropped)",
    ),
    metric(
        KINESIS_BATCH_FAILURES,
        Kind::Counter,
        Unit::Count,
        "failed deliveries of a batch to the Kinesis processor (labels stream, shard, then: retry, skip or stop)",
    ),
    metric(
        LOGHUB_LOG_GROUPS,
        Kind::Counter,
        Unit::Count,
        "log groups the LogHub consumer handed to its processors (labels logstore, shard)",
    ),
    metric(
        LOGHUB_PULL_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "time one PullLogs call took, answered or not (label logstore)",
    ),
    metric(
        LOGHUB_THROTTLES,
        Kind::Counter,
        Unit::Count,
        "LogHub calls refused for a quota (labels logstore, shard)",
    ),
    metric(
        LOGHUB_BATCH_FAILURES,
        Kind::Counter,
        Unit::Count,
        "failed deliveries of a batch to the LogHub processor (labels logstore, shard, then: retry, skip or stop)",
    ),
];

/// Describes every metric of [`ALL`] to the installed recorder. The worker calls it when it
/// starts; call it again after installing a recorder later.
pub fn describe() {
    for m in ALL {
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, m.unit, m.help),
            Kind::Gauge => metrics::describe_gauge!(m.name, m.unit, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::*;

    /// Per metric name: the kind described, and its unit.
    type Descriptions = BTreeMap<String, (&'static str, Option<Unit>)>;

    /// Remembers what was described to it.
    #[derive(Default)]
    struct Described(Mutex<Descriptions>);

    impl Described {
        fn note(&self, key: KeyName, kind: &'static str, unit: Option<Unit>) {
            self.0
                .lock()
                .unwrap()
                .insert(key.as_str().to_owned(), (kind, unit));
        }
    }

    impl Recorder for Described {
        fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            self.note(key, "counter", unit);
        }
        fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            self.note(key, "gauge", unit);
        }
        fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            self.note(key, "histogram", unit);
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn every_metric_this_file_names_is_described_with_its_kind_and_unit() {
        let recorder = Described::default();
        metrics::with_local_recorder(&recorder, describe);
        let described = recorder.0.lock().unwrap().clone();
        // Every `pub const` name in this file, so a metric added without a description fails.
        let source = include_str!("metrics.rs");
        let names: Vec<&str> = source
            .lines()
            .filter_map(|l| l.strip_prefix("pub const "))
            .filter(|l| !l.starts_with("ALL"))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        assert_eq!(names.len(), ALL.len(), "{names:?}");
        for name in names {
            let (kind, unit) = described
                .get(name)
                .unwrap_or_else(|| panic!("{name} undescribed"));
            assert!(unit.is_some(), "{name} has no unit");
            let expected = if name.ends_with("_total") {
                "counter"
            } else if name.ends_with("_seconds") {
                "histogram"
            } else {
                "gauge"
            };
            assert_eq!(*kind, expected, "{name}");
        }
    }

    #[test]
    fn the_operations_guide_table_lists_every_metric() {
        let operations = include_str!("../docs/OPERATIONS.md");
        for m in ALL {
            assert!(
                operations.contains(&format!("| `{}` |", m.name)),
                "{} is missing from the metrics table of docs/OPERATIONS.md (\"Every metric\")",
                m.name
            );
        }
    }
}
