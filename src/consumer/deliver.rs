//! Calling a processor: every call with its panic caught ([`guarded`]), and the delivery of a
//! batch under the failure policy ([`deliver`]): a failed batch is delivered again in place,
//! the lease kept, then skipped to the processor's dead-letter hook or the shard halted here.
//! What a batch and its processor are is the consumer's ([`Attempt`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use super::{BatchFailure, BatchOutcome, FailureAction, ProcessError};
use crate::store::{Jitter, RetryPolicy};
use crate::worker::{LeaseGrant, StopReason};

/// A boxed processor call, as `async_trait` returns it.
pub(crate) type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One call of a processor, with its panic caught: a panicking processor must not end the
/// record loop's task, which would leave the lease held with nobody reading it. (The
/// `async_trait` calls are boxed futures already, so no dependency is needed to catch it.)
pub(crate) async fn guarded<T>(mut call: Call<'_, T>) -> Result<T, String> {
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    })
    .await
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// A record loop's backoff: doubling from `first` to `max` with equal jitter (never sooner
/// than half the ceiling), and back to `first` after a success.
pub(crate) struct Backoff {
    policy: RetryPolicy,
    retries: u32,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self {
            policy: RetryPolicy::default()
                .base_delay(first)
                .max_delay(max)
                .jitter(Jitter::Equal),
            retries: 0,
        }
    }

    pub(crate) fn wait(&mut self) -> Duration {
        self.retries = self.retries.saturating_add(1);
        self.policy.backoff(self.retries)
    }

    pub(crate) fn reset(&mut self) {
        self.retries = 0;
    }
}

/// The failure policy, as a consumer's configuration sets it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Deliveries of a failing batch (the first included) before `on_failure` applies.
    pub batch_attempts: u32,
    /// The first wait before a failed batch is delivered again; doubles up to `max_backoff`.
    pub retry_backoff: Duration,
    pub max_backoff: Duration,
    pub on_failure: FailureAction,
}

/// One batch and its processor, as [`deliver`] calls them.
pub(crate) trait Attempt {
    /// Delivers the batch to the processor once.
    fn process(&mut self) -> Call<'_, Result<BatchOutcome, ProcessError>>;
    /// Gives the batch up to the processor's dead-letter hook.
    fn dead_letter<'a>(&'a mut self, failure: &'a BatchFailure) -> Call<'a, ()>;
    /// A delivery failed, and `then` follows: the consumer counts and reports it.
    fn failed(&self, attempt: u32, error: Option<String>, then: BatchOutcome);
}

/// How the delivery of a batch ended.
#[derive(Debug)]
pub(crate) enum Delivered {
    /// Processed, or skipped: read on.
    Done,
    /// The lease must stop (lost, handed over, shut down, retired), while the batch waited
    /// for another attempt or after the shard was halted.
    Stop(StopReason),
    /// The processor panicked (the panic's message); it is not called again.
    Panicked(String),
}

/// Delivers a batch until the processor is done with it (or skips it), retrying a failed
/// delivery after a backoff up to `batch_attempts` times; then `on_failure` skips the batch
/// (to the processor's dead-letter hook) or halts the shard, which then waits, held and
/// unread, for the lease's stop.
pub(crate) async fn deliver(
    policy: &Policy,
    batch: &mut impl Attempt,
    grant: &mut LeaseGrant,
) -> Delivered {
    let mut backoff = Backoff::new(policy.retry_backoff, policy.max_backoff);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (asked, error) = match guarded(batch.process()).await {
            Err(message) => return Delivered::Panicked(message),
            Ok(Ok(BatchOutcome::Continue)) => return Delivered::Done,
            Ok(Ok(outcome)) => (outcome, None),
            Ok(Err(error)) => (BatchOutcome::Retry, Some(error)),
        };
        let then = next_step(policy, asked, attempt);
        let text = error.as_ref().map(ToString::to_string);
        if then == BatchOutcome::Retry {
            tracing::warn!(
                attempt,
                error = text.as_deref(),
                "a batch failed; delivering it again after a backoff"
            );
        } else {
            tracing::error!(
                attempt,
                error = text.as_deref(),
                ?then,
                "a batch failed for good"
            );
        }
        batch.failed(attempt, text, then);
        match then {
            BatchOutcome::Retry => {
                let wait = backoff.wait();
                tokio::select! {
                    biased;
                    reason = grant.stopped() => return Delivered::Stop(reason),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            BatchOutcome::Skip => {
                let failure = BatchFailure {
                    attempts: attempt,
                    error,
                };
                return match guarded(batch.dead_letter(&failure)).await {
                    Ok(()) => Delivered::Done,
                    Err(message) => Delivered::Panicked(message),
                };
            }
            BatchOutcome::Continue | BatchOutcome::Stop => {
                let reason = match &error {
                    Some(error) => format!("a batch failed {attempt} time(s): {error}"),
                    None => "the processor asked to stop the shard".to_owned(),
                };
                grant.halt(&reason);
                return Delivered::Stop(grant.stopped().await);
            }
        }
    }
}

/// A processor's last calls on a stopped lease, and the reports around them, as the consumer
/// has them ([`last_call`]).
pub(crate) trait Stopping {
    /// The lease was lost: no checkpoint is possible.
    fn lease_lost(&mut self) -> Call<'_, ()>;
    /// The last chance to checkpoint.
    fn stop_requested<'a>(&'a mut self, reason: &'a StopReason) -> Call<'a, ()>;
    /// `stop_requested` is about to be called.
    fn requested(&self, reason: &StopReason);
    /// The processor panicked in one of them (the panic's message).
    fn panicked(&self, message: String);
}

/// The processor's last call on a stopped lease: `lease_lost` when it was lost, else
/// `stop_requested`, cut off at the reason's deadline. A panic in either is caught.
pub(crate) async fn last_call(reason: &StopReason, processor: &mut impl Stopping) {
    let deadline = match reason {
        StopReason::Handoff { deadline, .. }
        | StopReason::Shutdown { deadline }
        | StopReason::Retired { deadline } => *deadline,
        StopReason::Lost => {
            if let Err(message) = guarded(processor.lease_lost()).await {
                tracing::error!(panic = %message, "the processor panicked in lease_lost");
                processor.panicked(message);
            }
            return;
        }
    };
    processor.requested(reason);
    let asked = guarded(processor.stop_requested(reason));
    let answered = tokio::time::timeout_at(deadline, asked).await;
    match answered {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            tracing::error!(panic = %message, "the processor panicked in stop_requested");
            processor.panicked(message);
        }
        Err(_) => {
            tracing::warn!("the processor did not return from stop_requested before the deadline");
        }
    }
}

/// Holds a lease whose loop failed for `max_backoff` before it is released (at once if a stop
/// comes first), so that a lease failing on every worker moves at most that often.
pub(crate) async fn give_back(max_backoff: Duration, grant: &mut LeaseGrant) {
    tokio::select! {
        biased;
        reason = grant.stopped() => tracing::info!(?reason, "stopped while backing off"),
        _ = tokio::time::sleep(max_backoff) => {}
    }
}

/// What follows a failed delivery, numbered `attempt`, that asked for `asked`: a retry while
/// attempts are left, then the policy's action; a skip or stop asked for, at once.
fn next_step(policy: &Policy, asked: BatchOutcome, attempt: u32) -> BatchOutcome {
    match asked {
        BatchOutcome::Retry if attempt < policy.batch_attempts => BatchOutcome::Retry,
        BatchOutcome::Retry => match policy.on_failure {
            FailureAction::Skip => BatchOutcome::Skip,
            FailureAction::Stop => BatchOutcome::Stop,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(batch_attempts: u32, on_failure: FailureAction) -> Policy {
        Policy {
            batch_attempts,
            retry_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            on_failure,
        }
    }

    #[test]
    fn a_failure_is_retried_while_attempts_are_left_then_the_policy_applies() {
        let stop = policy(3, FailureAction::Stop);
        assert_eq!(
            next_step(&stop, BatchOutcome::Retry, 1),
            BatchOutcome::Retry
        );
        assert_eq!(
            next_step(&stop, BatchOutcome::Retry, 2),
            BatchOutcome::Retry
        );
        assert_eq!(next_step(&stop, BatchOutcome::Retry, 3), BatchOutcome::Stop);
        assert_eq!(next_step(&stop, BatchOutcome::Skip, 1), BatchOutcome::Skip);
        let skip = policy(3, FailureAction::Skip);
        assert_eq!(
            next_step(&skip, BatchOutcome::Retry, 2),
            BatchOutcome::Retry
        );
        assert_eq!(next_step(&skip, BatchOutcome::Retry, 3), BatchOutcome::Skip);
        assert_eq!(next_step(&skip, BatchOutcome::Stop, 1), BatchOutcome::Stop);
        let once = policy(1, FailureAction::Stop);
        assert_eq!(next_step(&once, BatchOutcome::Retry, 1), BatchOutcome::Stop);
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
