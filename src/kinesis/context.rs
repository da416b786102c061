//! What every record loop of a consumer shares: the Kinesis client, the stream, the shards'
//! hash key ranges, the configuration and the observer of its events.

use super::config::ConsumerConfig;
use super::event::Observer;
use super::source::ShardRanges;

/// What every record loop of a consumer shares.
pub(crate) struct ReaderContext {
    pub client: aws_sdk_kinesis::Client,
    /// The shards' hash key ranges, for expanding aggregates.
    pub ranges: ShardRanges,
    pub stream: String,
    pub config: ConsumerConfig,
    pub observer: Observer,
    /// The stream consumer's ARN with enhanced fan-out (records are pushed by
    /// `SubscribeToShard`); `None` when polling.
    pub consumer_arn: Option<String>,
}
