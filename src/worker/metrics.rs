//! The worker's counters, gauges and histograms. Every metric of the crate (its name, kind,
//! unit and meaning) is listed in [`crate::metrics`], re-exported here for the worker's own modules; the functions below
//! record the worker's, each series labelled with the worker's id (`worker`).

use std::time::Duration;

use crate::lease::WorkerId;

pub(crate) use crate::metrics::*;

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
