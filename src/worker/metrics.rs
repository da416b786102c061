//! Counters, gauges and histograms through the `metrics` facade. Install any `metrics`
//! recorder (Prometheus, StatsD, ...) to collect them; without one they cost next to nothing.
//! Every series carries the label `worker`.

use std::time::Duration;

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
