//! Counters, gauges and histograms through the `metrics` facade. Install any `metrics`
//! recorder (Prometheus, StatsD, ...) to collect them; without one they cost next to nothing.
//! Every series carries the label `worker`. [`ALL`] lists each with its kind, unit and
//! meaning; the worker [`describe`]s them to the recorder when it starts (a Prometheus exporter
//! prints them as `# HELP` and `# TYPE`).

use std::time::Duration;

use metrics::Unit;

use crate::lease::WorkerId;

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
/// Histogram: seconds one successful renewal took.
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
/// [`LeaseEvent::DuplicateWorkerId`](crate::worker::LeaseEvent::DuplicateWorkerId) each).
pub const DUPLICATE_WORKER_ID: &str = "shardlease_duplicate_worker_id_total";
/// Gauge: 1 while this worker's store round trips are too slow to hold leases (it takes
/// none and publishes capacity 0), else 0.
pub const SLOW_STORE: &str = "shardlease_slow_store";

/// Counter: sessions this worker ended after seeing them expire (with sessions).
pub const SESSIONS_FENCED: &str = "shardlease_sessions_fenced_total";

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

/// Every metric the worker records.
pub const ALL: [Description; 15] = [
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

fn worker(id: &WorkerId) -> [(&'static str, String); 1] {
    [("worker", id.to_string())]
}

pub(crate) fn held(id: &WorkerId, count: usize) {
    metrics::gauge!(LEASES_HELD, &worker(id)).set(count as f64);
}

pub(crate) fn taken(id: &WorkerId) {
    metrics::counter!(LEASES_TAKEN, &worker(id)).increment(1);
}

pub(crate) fn handoff_requested(id: &WorkerId) {
    metrics::counter!(HANDOFFS_REQUESTED, &worker(id)).increment(1);
}

pub(crate) fn handed_off(id: &WorkerId) {
    metrics::counter!(LEASES_HANDED_OFF, &worker(id)).increment(1);
}

pub(crate) fn stolen(id: &WorkerId) {
    metrics::counter!(LEASES_STOLEN, &worker(id)).increment(1);
}

pub(crate) fn abandoned(id: &WorkerId) {
    metrics::counter!(LEASES_ABANDONED, &worker(id)).increment(1);
}

pub(crate) fn lost(id: &WorkerId) {
    metrics::counter!(LEASES_LOST, &worker(id)).increment(1);
}

pub(crate) fn renewal(id: &WorkerId, took: Duration) {
    metrics::histogram!(RENEWAL_SECONDS, &worker(id)).record(took.as_secs_f64());
}

pub(crate) fn store_error(id: &WorkerId, op: &'static str) {
    let labels = [("worker", id.to_string()), ("op", op.to_owned())];
    metrics::counter!(STORE_ERRORS, &labels).increment(1);
}

pub(crate) fn created(id: &WorkerId, count: usize) {
    metrics::counter!(LEASES_CREATED, &worker(id)).increment(count as u64);
}

pub(crate) fn deleted(id: &WorkerId, reason: &'static str) {
    let labels = [("worker", id.to_string()), ("reason", reason.to_owned())];
    metrics::counter!(LEASES_DELETED, &labels).increment(1);
}

pub(crate) fn source_error(id: &WorkerId, kind: &'static str) {
    let labels = [("worker", id.to_string()), ("kind", kind.to_owned())];
    metrics::counter!(SOURCE_ERRORS, &labels).increment(1);
}

pub(crate) fn duplicate_worker_id(id: &WorkerId) {
    metrics::counter!(DUPLICATE_WORKER_ID, &worker(id)).increment(1);
}

pub(crate) fn slow_store(id: &WorkerId, slow: bool) {
    metrics::gauge!(SLOW_STORE, &worker(id)).set(if slow { 1.0 } else { 0.0 });
}

pub(crate) fn fenced(id: &WorkerId) {
    metrics::counter!(SESSIONS_FENCED, &worker(id)).increment(1);
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
    fn the_readme_table_lists_every_metric() {
        let readme = include_str!("../../README.md");
        for m in ALL {
            assert!(
                readme.contains(&format!("| `{}` |", m.name)),
                "{} is missing from the README's metrics table",
                m.name
            );
        }
    }
}
