//! A batch of Kinesis records delivered to its [`RecordProcessor`] under the consumer's
//! failure policy (`crate::consumer::deliver`): [`Deliverer::deliver`] counts each failed
//! delivery in the shard's metrics and reports it as a [`ConsumerEvent::BatchFailed`].

use super::config::ConsumerConfig;
use super::event::{ConsumerEvent, Observer};
use super::metrics::ShardMeters;
use super::processor::{
    BatchFailure, BatchOutcome, KinesisRecord, ProcessError, RecordCheckpointer, RecordProcessor,
};
use crate::consumer::{self, Attempt, Call, Delivered, Policy};
use crate::lease::LeaseKey;
use crate::worker::LeaseGrant;

/// What one delivery loop needs besides the processor and the batch.
pub(super) struct Deliverer<'a> {
    pub config: &'a ConsumerConfig,
    pub observer: &'a Observer,
    pub meters: &'a ShardMeters,
    pub checkpointer: &'a RecordCheckpointer,
}

impl Deliverer<'_> {
    /// Delivers `records` until the processor is done with them (or skips them): see
    /// [`crate::consumer::deliver`].
    pub(super) async fn deliver<P: RecordProcessor>(
        &self,
        processor: &mut P,
        records: &[KinesisRecord],
        grant: &mut LeaseGrant,
    ) -> Delivered {
        let policy = Policy {
            batch_attempts: self.config.batch_attempts,
            retry_backoff: self.config.retry_backoff,
            max_backoff: self.config.max_backoff,
            on_failure: self.config.on_failure,
        };
        let mut batch = Batch {
            processor,
            records,
            key: grant.key().clone(),
            deliverer: self,
        };
        consumer::deliver(&policy, &mut batch, grant).await
    }
}

/// One batch with its processor.
struct Batch<'a, P> {
    processor: &'a mut P,
    records: &'a [KinesisRecord],
    key: LeaseKey,
    deliverer: &'a Deliverer<'a>,
}

impl<P: RecordProcessor> Attempt for Batch<'_, P> {
    fn process(&mut self) -> Call<'_, Result<BatchOutcome, ProcessError>> {
        self.processor
            .process_records(self.records, self.deliverer.checkpointer)
    }

    fn dead_letter<'a>(&'a mut self, failure: &'a BatchFailure) -> Call<'a, ()> {
        self.processor
            .dead_letter(self.records, failure, self.deliverer.checkpointer)
    }

    fn failed(&self, attempt: u32, error: Option<String>, then: BatchOutcome) {
        self.deliverer.meters.batch_failed(then);
        (self.deliverer.observer)(ConsumerEvent::BatchFailed {
            key: self.key.clone(),
            attempt,
            error,
            then,
        });
    }
}
