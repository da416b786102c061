//! An Aliyun LogHub (Simple Log Service) consumer on top of the leases (feature `loghub`),
//! over the official `aliyun-log-rust-sdk`: a [`LogHubShardSource`] that lists a logstore's
//! shards for the discoverer (a `readonly` shard is closed; parents are derived from the
//! shards' hash-key ranges, since `ListShards` names none), a record loop per ready lease
//! (`GetCursor`, then `PullLogs` from cursor to cursor), and the [`LogGroupProcessor`] trait
//! the application implements, with the same failure policy as the Kinesis consumer.
//!
//! ```no_run
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use shardlease::loghub::{
//!     BatchOutcome, CursorCheckpointer, LogBatch, LogGroupProcessor, LogHubConsumer,
//!     ProcessError,
//! };
//! use shardlease::store::memory::InMemoryStore;
//! use shardlease::{LeaseKey, WorkerId};
//!
//! struct Counter;
//!
//! #[async_trait]
//! impl LogGroupProcessor for Counter {
//!     async fn process(
//!         &mut self,
//!         batch: &LogBatch,
//!         checkpointer: &CursorCheckpointer,
//!     ) -> Result<BatchOutcome, ProcessError> {
//!         let logs: usize = batch.log_groups.iter().map(|g| g.logs().len()).sum();
//!         println!("shard {}: {logs} logs", batch.shard_id);
//!         // The next cursor: a new owner reads on from there. Refused only when the lease
//!         // was lost.
//!         checkpointer.checkpoint(batch).await?;
//!         Ok(BatchOutcome::Continue)
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use aliyun_log_rust_sdk::{Client, Config, FromConfig};
//! let config = Config::builder()
//!     .endpoint("cn-hangzhou.log.aliyuncs.com")
//!     .access_key("access-key-id", "access-key-secret")
//!     .build()?;
//! let consumer = LogHubConsumer::builder(
//!     Client::from_config(config)?,
//!     "my-project",
//!     "my-logstore",
//!     Arc::new(InMemoryStore::new()),
//!     WorkerId::new("host-a")?,
//! )
//! .processor(|_shard: &LeaseKey| Counter)
//! .start()
//! .await?;
//! tokio::signal::ctrl_c().await?;
//! consumer.shutdown().await; // every processor is asked to checkpoint, leases are released
//! # Ok(())
//! # }
//! ```
//!
//! Each lease reads one shard from its checkpoint (a cursor) and checkpoints the cursor after
//! a batch ([`CursorCheckpointer::checkpoint`]); checkpoints are fenced by the lease's tenure,
//! so one from a worker that lost the lease is refused. A `readonly` shard (split or merged)
//! is read to its end, then its processor's [`LogGroupProcessor::shard_ended`] checkpoints the
//! end and its children start. A lease moved to balance the fleet is handed over gracefully:
//! its processor gets `stop_requested` and may checkpoint, then the new owner starts from that
//! checkpoint, after [`WorkerConfig::quiet_period`](crate::WorkerConfig::quiet_period) if one is
//! set (a hold after every move, for state backed up elsewhere). Optionally, every accepted
//! checkpoint is mirrored into a LogHub consumer group ([`ConsumerGroup`]) so that the SLS
//! console shows the application's lag.

mod config;
mod consumer;
mod event;
mod mirror;
mod processor;
mod ranges;
mod reader;
mod source;

pub use aliyun_log_sdk_protobuf::{Log, LogContent, LogGroup, LogTag};
pub use config::{ConsumerGroup, FailureAction, InitialPosition, LogHubConfig};
pub use consumer::{ConsumerError, LogHubConsumer, LogHubConsumerBuilder, NoProcessor};
pub use event::ConsumerEvent;
pub use processor::{
    BatchFailure, BatchOutcome, CursorCheckpointer, LogBatch, LogGroupProcessor, ProcessError,
    ProcessorFactory, ShardStart, StartPosition,
};
pub use ranges::RangeError;
pub use source::{LogHubError, LogHubShardSource};

use aliyun_log_rust_sdk::Error as SdkError;

/// How a failed LogHub call is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// LogHub asked us to slow down (a quota code, HTTP 429): back off with jitter.
    Throttled,
    /// The cursor is not one of the shard's (its data expired, or it was edited by hand).
    InvalidCursor,
    /// A dropped or refused connection, a timeout, a 5xx, an answer that did not parse:
    /// retry after a backoff.
    Transient,
    /// A call that cannot succeed as sent (no such project, logstore or shard, refused
    /// credentials, a bad argument).
    Fatal,
}

pub(crate) fn classify(err: &SdkError) -> Failure {
    match err {
        SdkError::Server {
            error_code,
            http_status,
            ..
        } => {
            // LogHub's quota codes (`ReadQuotaExceed`, `ShardReadQuotaExceed`,
            // `ExceedQPSLimit`, ...) and HTTP 429.
            if *http_status == 429
                || error_code.contains("Quota")
                || error_code.contains("QPS")
                || error_code.contains("Throttl")
            {
                Failure::Throttled
            } else if error_code == "InvalidCursor" {
                Failure::InvalidCursor
            } else if *http_status >= 500 {
                Failure::Transient
            } else {
                Failure::Fatal
            }
        }
        SdkError::Network(_) | SdkError::ResponseParse(_) => Failure::Transient,
        _ => Failure::Fatal,
    }
}

/// The error's code and message, for logs: one line.
pub(crate) fn describe(err: &SdkError) -> String {
    match err {
        SdkError::Server {
            error_code,
            error_message,
            http_status,
            ..
        } => format!("{error_code} (HTTP {http_status}): {error_message}"),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, status: u32) -> SdkError {
        SdkError::Server {
            error_code: code.into(),
            error_message: "m".into(),
            http_status: status,
            request_id: None,
        }
    }

    #[test]
    fn every_server_answer_maps_to_a_retry_or_a_stop() {
        assert_eq!(
            classify(&server("ReadQuotaExceed", 403)),
            Failure::Throttled
        );
        assert_eq!(
            classify(&server("ShardReadQuotaExceed", 403)),
            Failure::Throttled
        );
        assert_eq!(classify(&server("ExceedQPSLimit", 403)), Failure::Throttled);
        assert_eq!(classify(&server("Anything", 429)), Failure::Throttled);
        assert_eq!(
            classify(&server("InvalidCursor", 400)),
            Failure::InvalidCursor
        );
        assert_eq!(
            classify(&server("InternalServerError", 500)),
            Failure::Transient
        );
        assert_eq!(classify(&server("ServerBusy", 503)), Failure::Transient);
        for code in [
            "ShardNotExist",
            "LogStoreNotExist",
            "ProjectNotExist",
            "Unauthorized",
        ] {
            assert_eq!(classify(&server(code, 404)), Failure::Fatal, "{code}");
        }
        assert_eq!(
            describe(&server("ShardNotExist", 404)),
            "ShardNotExist (HTTP 404): m"
        );
    }
}
