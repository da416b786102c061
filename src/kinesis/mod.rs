//! A Kinesis Data Streams consumer on top of the leases (feature `kinesis`): a
//! [`KinesisShardSource`] that lists the stream's shards for the discoverer, a record loop per
//! ready lease, and the [`RecordProcessor`] trait the application implements.
//!
//! ```no_run
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use shardlease::kinesis::{
//!     BatchOutcome, KinesisConsumer, KinesisRecord, ProcessError, RecordCheckpointer, RecordProcessor,
//! };
//! use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
//! use shardlease::{LeaseKey, WorkerId};
//!
//! struct Printer;
//!
//! #[async_trait]
//! impl RecordProcessor for Printer {
//!     async fn process_records(
//!         &mut self,
//!         records: &[KinesisRecord],
//!         checkpointer: &RecordCheckpointer,
//!     ) -> Result<BatchOutcome, ProcessError> {
//!         for record in records {
//!             println!("{} {}", record.partition_key, String::from_utf8_lossy(&record.data));
//!         }
//!         if let Some(last) = records.last() {
//!             // Refused only when the lease was lost: the next owner reads from the last
//!             // checkpoint.
//!             let _ = checkpointer.checkpoint(last).await;
//!         }
//!         // An `Err` is delivered again, then skipped or stops the shard (the failure policy).
//!         Ok(BatchOutcome::Continue)
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let aws = aws_config::load_from_env().await;
//! let store = Arc::new(DynamoStore::from_env(DynamoConfig::new("my-app-leases")).await?);
//! let consumer = KinesisConsumer::builder(
//!     aws_sdk_kinesis::Client::new(&aws),
//!     "my-stream",
//!     store,
//!     WorkerId::new("host-a")?,
//! )
//! .processor(|_shard: &LeaseKey| Printer)
//! .start()
//! .await?;
//! tokio::signal::ctrl_c().await?;
//! consumer.shutdown().await; // every processor is asked to checkpoint, leases are released
//! # Ok(())
//! # }
//! ```
//!
//! End of a shard is detected when `GetRecords` returns no next iterator (the `ChildShards`
//! field is not needed); the processor's [`RecordProcessor::shard_ended`] checkpoints the end,
//! and the children start through the discovery rules (parents first).

mod aggregation;
mod config;
mod consumer;
mod context;
mod delivery;
mod event;
mod fan_out;
mod fetch;
mod metrics;
mod processor;
mod reader;
mod registry;
mod source;
mod streams;

pub use config::{ConsumerConfig, FailureAction, InitialPosition, LoadFigure, Retrieval};
pub use consumer::{ConsumerError, KinesisConsumer, KinesisConsumerBuilder, NoProcessor};
pub use event::ConsumerEvent;
pub use fetch::LOAD_SAMPLE;
pub use processor::{
    BatchFailure, BatchOutcome, KinesisRecord, ProcessError, ProcessorFactory, RecordCheckpointer,
    RecordProcessor, ShardStart, StartPosition,
};
pub use source::{KinesisShardSource, StreamError};
pub use streams::{InvalidStream, StreamConfig, StreamId, StreamSet, StreamTracker};

use aws_sdk_kinesis::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::store::sdk::{send_failure, SendFailure};

/// How a failed Kinesis call is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The service asked us to slow down: back off with jitter.
    Throttled,
    /// The shard iterator expired: get a fresh one from the last processed record.
    ExpiredIterator,
    /// A timeout, a dropped or refused connection, a 5xx: retry after a backoff.
    Transient,
    /// A request that cannot succeed as sent (no such stream, bad argument, access denied, a
    /// client without region or credentials): logged as an error, retried slowly in case an
    /// operator fixes it.
    Fatal,
}

/// Error codes that mean "slow down".
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "KMSThrottlingException",
    "ThrottlingException",
];

pub(crate) fn classify<E, R>(err: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    match err {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            if THROTTLING_CODES.contains(&code) {
                Failure::Throttled
            } else if code == "ExpiredIteratorException" {
                Failure::ExpiredIterator
            } else if code == "InternalFailure" || code == "ServiceUnavailable" {
                Failure::Transient
            } else {
                Failure::Fatal
            }
        }
        SdkError::DispatchFailure(_) | SdkError::ConstructionFailure(_)
            if matches!(send_failure(err), Some(SendFailure::Misconfigured(_))) =>
        {
            Failure::Fatal
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Failure::Transient
        }
        _ => Failure::Fatal,
    }
}

/// How an unreachable Kinesis endpoint is named when the request did not record its URL.
pub(crate) const UNKNOWN_ENDPOINT: &str = "the Kinesis endpoint";

/// The one-line text of a refused connection to `endpoint`.
pub(crate) fn unreachable(endpoint: &str) -> String {
    format!(
        "nothing listens at {endpoint} (connection refused): is the Kinesis endpoint right, is \
         Kinesis (or the emulator) running?"
    )
}

/// The error's code and message, for logs: one line, with the fix for a configuration
/// problem.
pub(crate) fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    if matches!(
        err,
        SdkError::DispatchFailure(_) | SdkError::ConstructionFailure(_)
    ) {
        match send_failure(err) {
            Some(SendFailure::Misconfigured(problem)) => return problem.to_string(),
            Some(SendFailure::Refused) => return unreachable(UNKNOWN_ENDPOINT),
            None => {}
        }
    }
    match err {
        SdkError::ServiceError(service) => format!(
            "{}: {}",
            service.err().code().unwrap_or("unknown error"),
            service.err().message().unwrap_or_default()
        ),
        // Every cause, outermost first, as the SDK prints it.
        other => DisplayErrorContext(other).to_string(),
    }
}
