//! The shard source of a Kinesis stream: `ListShards`, page after page.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{classify, describe, Failure};
use crate::lease::LeaseKey;
use crate::source::{Shard, ShardSource, SourceError};
use crate::store::RetryPolicy;

/// Tries of one page before the listing fails (the discoverer then backs off on its own).
const PAGE_ATTEMPTS: u32 = 4;
/// The first backoff after a throttled or failed page; doubles, with full jitter.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Least time between two `ListShards` calls of this source: 10 a second, well under the
/// service's 100 per second per stream, which other consumers of the stream share.
const MIN_CALL_GAP: Duration = Duration::from_millis(100);

/// Lists the shards of one stream: id, parent and adjacent parent (a merge), and closed (the
/// shard has an ending sequence number).
#[derive(Debug)]
pub struct KinesisShardSource {
    client: aws_sdk_kinesis::Client,
    stream: String,
    last_call: tokio::sync::Mutex<Option<Instant>>,
}

impl KinesisShardSource {
    /// A source for `stream` (its name).
    pub fn new(client: aws_sdk_kinesis::Client, stream: impl Into<String>) -> Self {
        Self {
            client,
            stream: stream.into(),
            last_call: tokio::sync::Mutex::new(None),
        }
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    async fn page(
        &self,
        next: Option<&str>,
    ) -> Result<aws_sdk_kinesis::operation::list_shards::ListShardsOutput, SourceError> {
        let backoff = RetryPolicy {
            base_delay: FIRST_BACKOFF,
            max_delay: FIRST_BACKOFF * (1 << PAGE_ATTEMPTS),
            max_attempts: PAGE_ATTEMPTS,
            ..RetryPolicy::default()
        };
        let mut attempt = 1;
        loop {
            self.pace().await;
            // With a next token the stream name must not be sent.
            let request = match next {
                Some(token) => self.client.list_shards().next_token(token),
                None => self.client.list_shards().stream_name(&self.stream),
            };
            let err = match request.send().await {
                Ok(page) => return Ok(page),
                Err(err) => err,
            };
            let failure = classify(&err);
            let text = describe(&err);
            let retry = matches!(failure, Failure::Throttled | Failure::Transient);
            if !retry || attempt >= PAGE_ATTEMPTS {
                return Err(match failure {
                    Failure::Throttled => SourceError::Throttled(text.into()),
                    _ => SourceError::Failed(format!("ListShards {}: {text}", self.stream).into()),
                });
            }
            tracing::debug!(stream = %self.stream, attempt, error = %text, "ListShards failed; retrying");
            tokio::time::sleep(backoff.backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// Keeps calls at least [`MIN_CALL_GAP`] apart.
    async fn pace(&self) {
        let mut last = self.last_call.lock().await;
        if let Some(at) = *last {
            tokio::time::sleep_until(at + MIN_CALL_GAP).await;
        }
        *last = Some(Instant::now());
    }
}

fn to_shard(shard: &aws_sdk_kinesis::types::Shard) -> Result<Shard, SourceError> {
    let key = |id: &str| {
        LeaseKey::new(id).map_err(|e| SourceError::Failed(format!("shard id {id:?}: {e}").into()))
    };
    let parents = [shard.parent_shard_id(), shard.adjacent_parent_shard_id()]
        .into_iter()
        .flatten()
        .map(key)
        .collect::<Result<Vec<_>, _>>()?;
    let closed = shard
        .sequence_number_range()
        .is_some_and(|range| range.ending_sequence_number().is_some());
    Ok(Shard {
        key: key(shard.shard_id())?,
        parents,
        closed,
    })
}

#[async_trait]
impl ShardSource for KinesisShardSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        let mut shards = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = self.page(next.as_deref()).await?;
            for shard in page.shards() {
                shards.push(to_shard(shard)?);
            }
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_owned()),
                _ => return Ok(shards),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::{SequenceNumberRange, Shard as KShard};

    #[test]
    fn parents_and_closed_come_from_the_shard_description() {
        let range = |end: Option<&str>| {
            SequenceNumberRange::builder()
                .starting_sequence_number("1")
                .set_ending_sequence_number(end.map(str::to_owned))
                .build()
                .unwrap()
        };
        let merged = KShard::builder()
            .shard_id("shardId-000000000004")
            .parent_shard_id("shardId-000000000001")
            .adjacent_parent_shard_id("shardId-000000000002")
            .sequence_number_range(range(None))
            .build()
            .unwrap();
        let shard = to_shard(&merged).unwrap();
        assert_eq!(shard.key.as_str(), "shardId-000000000004");
        assert_eq!(shard.parents.len(), 2);
        assert!(!shard.closed);
        let closed = KShard::builder()
            .shard_id("shardId-000000000001")
            .sequence_number_range(range(Some("99")))
            .build()
            .unwrap();
        let shard = to_shard(&closed).unwrap();
        assert!(shard.closed && shard.parents.is_empty());
    }
}
