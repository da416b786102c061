//! What the DynamoDB store records of each request it sends: its outcome, how long it took,
//! throttles, writes whose answer was lost, and the capacity units DynamoDB reported consumed
//! (names and meanings in [`crate::metrics`]).
//!
//! Every request asks for `ReturnConsumedCapacity = TOTAL`. DynamoDB answers with the units
//! of the whole request (`CapacityUnits`), not split into read and write, so the split follows
//! the request: `GetItem` and `Scan` read, the others write. dynalite 4.0.0 and moto 5.2.5 both
//! answer with `CapacityUnits` too, but their figures are not DynamoDB's (dynalite bills a
//! consistent scan as an eventually consistent one; moto bills an update half a unit).

use aws_sdk_dynamodb::types::ConsumedCapacity;
use tokio::time::Instant;

use crate::metrics::{
    STORE_AMBIGUOUS_WRITES, STORE_READ_CAPACITY, STORE_REQUESTS, STORE_REQUEST_SECONDS,
    STORE_THROTTLES, STORE_WRITE_CAPACITY,
};
use crate::store::StoreError;

/// The DynamoDB API a request calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    GetItem,
    PutItem,
    UpdateItem,
    DeleteItem,
    Scan,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::GetItem => "GetItem",
            Api::PutItem => "PutItem",
            Api::UpdateItem => "UpdateItem",
            Api::DeleteItem => "DeleteItem",
            Api::Scan => "Scan",
        }
    }

    fn writes(self) -> bool {
        matches!(self, Api::PutItem | Api::UpdateItem | Api::DeleteItem)
    }
}

/// How one request ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Answered with success.
    Done,
    /// A condition failed.
    LostRace,
}

/// One request in flight. Dropped without [`finish`](Self::finish) (the attempt timed out, or
/// the caller stopped waiting at its deadline), it counts as `unanswered`, and a write as
/// ambiguous.
#[must_use = "finish the request with its answer, or it counts as unanswered"]
pub(super) struct Request<'a> {
    table: &'a str,
    operation: &'static str,
    api: Api,
    started: Instant,
    finished: bool,
}

impl<'a> Request<'a> {
    /// A request of `api` for the store call `operation` is being sent now.
    pub(super) fn start(table: &'a str, operation: &'static str, api: Api) -> Self {
        Self {
            table,
            operation,
            api,
            started: Instant::now(),
            finished: false,
        }
    }

    /// Adds the units DynamoDB reported consumed to the table's read or write total.
    pub(super) fn consumed(&self, capacity: Option<&ConsumedCapacity>) {
        let Some(units) = capacity.and_then(ConsumedCapacity::capacity_units) else {
            return;
        };
        let name = if self.api.writes() {
            STORE_WRITE_CAPACITY
        } else {
            STORE_READ_CAPACITY
        };
        metrics::gauge!(name, "table" => self.table.to_owned()).increment(units);
    }

    /// The request was answered.
    pub(super) fn finish(mut self, answer: Answer) {
        self.finished = true;
        match answer {
            Answer::Done => self.record("done", false),
            Answer::LostRace => self.record("lost_race", false),
        }
    }

    /// The request was answered with `err` (or failed before an answer, as classified);
    /// returns it.
    pub(super) fn failed(mut self, err: StoreError) -> StoreError {
        self.finished = true;
        self.record(outcome(&err), err.is_ambiguous());
        err
    }

    fn record(&self, outcome: &'static str, ambiguous: bool) {
        let table = self.table.to_owned();
        let request = self.api.name();
        metrics::counter!(
            STORE_REQUESTS,
            "table" => table.clone(),
            "operation" => self.operation,
            "request" => request,
            "outcome" => outcome
        )
        .increment(1);
        metrics::histogram!(
            STORE_REQUEST_SECONDS,
            "table" => table.clone(),
            "operation" => self.operation,
            "request" => request
        )
        .record(self.started.elapsed().as_secs_f64());
        if outcome == "throttled" {
            metrics::counter!(STORE_THROTTLES, "table" => table.clone(), "operation" => self.operation)
                .increment(1);
        }
        if ambiguous && self.api.writes() {
            metrics::counter!(STORE_AMBIGUOUS_WRITES, "table" => table, "operation" => self.operation)
                .increment(1);
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.record("unanswered", true);
        }
    }
}

/// The `outcome` label of an error.
fn outcome(err: &StoreError) -> &'static str {
    match err {
        StoreError::Throttled { .. } => "throttled",
        StoreError::Transient { .. } => "transient",
        StoreError::Unreachable { .. } => "unreachable",
        _ => "fatal",
    }
}
