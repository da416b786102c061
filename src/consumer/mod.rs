//! What the Kinesis and LogHub consumers share (features `kinesis`, `loghub`): what a
//! processor returns for a batch ([`BatchOutcome`], or a [`ProcessError`]), the failure policy
//! that follows a failed batch ([`FailureAction`], with the batch given up as a
//! [`BatchFailure`]), and, inside the crate, the delivery loop that applies it.
//!
//! A batch that fails (an error, or [`BatchOutcome::Retry`]) is delivered again in place, the
//! lease kept, after a backoff, up to the consumer's `batch_attempts` times; then its
//! `on_failure` gives it to the processor's `dead_letter` hook ([`FailureAction::Skip`]) or
//! halts the shard where it is ([`FailureAction::Stop`]).

mod deliver;
mod run;

pub(crate) use deliver::{
    deliver, give_back, guarded, last_call, Attempt, Backoff, Call, Delivered, Policy, Stopping,
};
pub(crate) use run::Running;

/// What the record loop does after the processor's batch call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BatchOutcome {
    /// The batch is done: read on. The default.
    #[default]
    Continue,
    /// Deliver the same batch again, after the failure policy's backoff. Counts as a failed
    /// attempt, as an error does: after the consumer's `batch_attempts` of them its
    /// `on_failure` applies.
    Retry,
    /// Give the batch up now: it goes to the processor's `dead_letter`, then reading goes on.
    Skip,
    /// Process the shard no further: the lease stays held here, nothing more is read, and the
    /// worker reports it stalled ([`Stall::Halted`](crate::worker::Stall::Halted)), until the
    /// lease is asked to stop (a handoff, a shutdown) or lost.
    Stop,
}

/// What a processor's batch call fails with: any error (`?` converts most).
pub type ProcessError = Box<dyn std::error::Error + Send + Sync>;

/// A batch given up, as the processor's `dead_letter` is told of it.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchFailure {
    /// How many times the batch was delivered.
    pub attempts: u32,
    /// The last attempt's error; `None` when the processor asked to skip
    /// ([`BatchOutcome::Skip`]) or to retry ([`BatchOutcome::Retry`]) rather than failing.
    pub error: Option<ProcessError>,
}

impl std::fmt::Display for BatchFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "after {} attempt(s)", self.attempts)?;
        match &self.error {
            Some(error) => write!(f, ": {error}"),
            None => f.write_str(", as the processor asked"),
        }
    }
}

/// What the record loop does with a batch that failed every attempt (the consumer's
/// `on_failure`). In a configuration file: `"skip"` or `"stop"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum FailureAction {
    /// Give the batch up: the processor's `dead_letter` gets it (by default it is logged and
    /// checkpointed past), then reading goes on.
    Skip,
    /// Process the shard no further: the lease stays held here, nothing more is read, the
    /// worker reports it stalled ([`Stall::Halted`](crate::worker::Stall::Halted), which fails
    /// a health probe), and the fleet's balance leaves it where it is
    /// ([`LeaseGrant::halt`](crate::LeaseGrant::halt)), until the lease is asked to stop or
    /// lost. Nothing is lost: the batch waits for an operator. The default.
    #[default]
    Stop,
}
