//! Calling the processor: every call with its panic caught ([`guarded`]), and the delivery of
//! a batch under the failure policy ([`Deliverer::deliver`]): a failed batch is delivered again in place,
//! the lease kept, then skipped to the processor's dead-letter hook or the shard halted here.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::Poll;

use super::config::{ConsumerConfig, FailureAction};
use super::event::{ConsumerEvent, Observer};
use super::fetch::Backoff;
use super::metrics::ShardMeters;
use super::processor::{
    BatchFailure, BatchOutcome, KinesisRecord, RecordCheckpointer, RecordProcessor,
};
use crate::worker::{LeaseGrant, StopReason};

/// One call of the processor, with its panic caught: a panicking processor must not end the
/// record loop's task, which would leave the lease held with nobody reading it. (The
/// `async_trait` calls are boxed futures already, so no dependency is needed to catch it.)
pub(super) async fn guarded<T>(
    mut call: Pin<Box<dyn Future<Output = T> + Send + '_>>,
) -> Result<T, String> {
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

/// How the delivery of a batch ended.
#[derive(Debug)]
pub(super) enum Delivered {
    /// Processed, or skipped: read on.
    Done,
    /// The lease must stop (lost, handed over, shut down, retired), while the batch waited
    /// for another attempt or after the shard was halted.
    Stop(StopReason),
    /// The processor panicked (the panic's message); it is not called again.
    Panicked(String),
}

/// What one delivery loop needs besides the processor and the batch.
pub(super) struct Deliverer<'a> {
    pub config: &'a ConsumerConfig,
    pub observer: &'a Observer,
    pub meters: &'a ShardMeters,
    pub checkpointer: &'a RecordCheckpointer,
}

impl Deliverer<'_> {
    /// Delivers `records` until the processor is done with them (or skips them), retrying a
    /// failed delivery after a backoff up to [`ConsumerConfig::batch_attempts`] times; then
    /// [`ConsumerConfig::on_failure`] skips the batch (to the processor's `dead_letter`) or
    /// halts the shard, which then waits, held and unread, for the lease's stop.
    pub(super) async fn deliver<P: RecordProcessor>(
        &self,
        processor: &mut P,
        records: &[KinesisRecord],
        grant: &mut LeaseGrant,
    ) -> Delivered {
        let mut backoff = Backoff::new(self.config.retry_backoff, self.config.max_backoff);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let call = processor.process_records(records, self.checkpointer);
            let (asked, error) = match guarded(call).await {
                Err(message) => return Delivered::Panicked(message),
                Ok(Ok(BatchOutcome::Continue)) => return Delivered::Done,
                Ok(Ok(outcome)) => (outcome, None),
                Ok(Err(error)) => (BatchOutcome::Retry, Some(error)),
            };
            let then = next_step(self.config, asked, attempt);
            self.report(
                grant,
                attempt,
                error.as_ref().map(ToString::to_string),
                then,
            );
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
                    let call = processor.dead_letter(records, &failure, self.checkpointer);
                    return match guarded(call).await {
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

    /// Logs, counts and reports a failed delivery.
    fn report(&self, grant: &LeaseGrant, attempt: u32, error: Option<String>, then: BatchOutcome) {
        if then == BatchOutcome::Retry {
            tracing::warn!(
                attempt,
                error = error.as_deref(),
                "a batch failed; delivering it again after a backoff"
            );
        } else {
            tracing::error!(
                attempt,
                error = error.as_deref(),
                ?then,
                "a batch failed for good"
            );
        }
        self.meters.batch_failed(then);
        (self.observer)(ConsumerEvent::BatchFailed {
            key: grant.key().clone(),
            attempt,
            error,
            then,
        });
    }
}

/// What follows a failed delivery, numbered `attempt`, that asked for `asked`: a retry while
/// attempts are left, then the policy's action; a skip or stop asked for, at once.
fn next_step(config: &ConsumerConfig, asked: BatchOutcome, attempt: u32) -> BatchOutcome {
    match asked {
        BatchOutcome::Retry if attempt < config.batch_attempts => BatchOutcome::Retry,
        BatchOutcome::Retry => match config.on_failure {
            FailureAction::Skip => BatchOutcome::Skip,
            FailureAction::Stop => BatchOutcome::Stop,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_retried_while_attempts_are_left_then_the_policy_applies() {
        let stop = ConsumerConfig::default().batch_attempts(3);
        let step = |config: &ConsumerConfig, asked, attempt| next_step(config, asked, attempt);
        assert_eq!(step(&stop, BatchOutcome::Retry, 1), BatchOutcome::Retry);
        assert_eq!(step(&stop, BatchOutcome::Retry, 2), BatchOutcome::Retry);
        assert_eq!(step(&stop, BatchOutcome::Retry, 3), BatchOutcome::Stop);
        assert_eq!(step(&stop, BatchOutcome::Skip, 1), BatchOutcome::Skip);
        let skip = stop.clone().on_failure(FailureAction::Skip);
        assert_eq!(step(&skip, BatchOutcome::Retry, 2), BatchOutcome::Retry);
        assert_eq!(step(&skip, BatchOutcome::Retry, 3), BatchOutcome::Skip);
        assert_eq!(step(&skip, BatchOutcome::Stop, 1), BatchOutcome::Stop);
        let once = stop.batch_attempts(1);
        assert_eq!(step(&once, BatchOutcome::Retry, 1), BatchOutcome::Stop);
    }
}
