//! What the record loops of one stream share: the Kinesis client, the stream (its name, and
//! its ARN when known), the shards' hash key ranges, the enhanced fan-out consumer, the
//! configuration and the observer of the consumer's events.

use super::config::ConsumerConfig;
use super::event::Observer;
use super::source::ShardRanges;
use super::streams::StreamId;

/// What the record loops of one stream share.
pub(crate) struct ReaderContext {
    pub client: aws_sdk_kinesis::Client,
    /// The shards' hash key ranges, for expanding aggregates.
    pub ranges: ShardRanges,
    /// The stream's name, sent with every call that names the stream.
    pub stream: String,
    /// The stream's ARN, sent beside the name when known (`StreamARN`).
    pub stream_arn: Option<String>,
    /// The stream's part of its leases' keys, for a multi-stream consumer.
    pub stream_id: Option<StreamId>,
    pub config: ConsumerConfig,
    pub observer: Observer,
    /// The stream consumer's ARN with enhanced fan-out (records are pushed by
    /// `SubscribeToShard`); `None` when polling.
    pub consumer_arn: Option<String>,
}
