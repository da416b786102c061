//! The shard source of a Kinesis stream: `ListShards`, page after page.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::config::http::HttpResponse;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::operation::list_shards::{ListShardsError, ListShardsOutput};
use tokio::time::Instant;

use super::aggregation::HashKeyRange;
use super::{classify, describe, unreachable, Failure, UNKNOWN_ENDPOINT};
use crate::lease::LeaseKey;
use crate::source::{Shard, ShardSource, SourceError};
use crate::store::sdk::{send_failure, EndpointRecorder, SendFailure};
use crate::store::{BoxError, Misconfiguration, RetryPolicy};

/// Tries of one page before the listing fails (the discoverer then backs off on its own).
const PAGE_ATTEMPTS: u32 = 4;
/// The first backoff after a throttled or failed page; doubles, with full jitter.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Least time between two `ListShards` calls of this source: 10 a second, well under the
/// service's 100 per second per stream, which other consumers of the stream share.
const MIN_CALL_GAP: Duration = Duration::from_millis(100);

type ListShardsFailure = SdkError<ListShardsError, HttpResponse>;

/// Why a stream cannot be read at all, found by [`KinesisShardSource::check`] when a
/// consumer starts. Each message is one line that says what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// No stream of this name at the client's endpoint, in its region and account.
    #[error(
        "stream {stream:?} does not exist: check the stream name, and the region and \
         endpoint of the Kinesis client"
    )]
    NotFound {
        /// The stream's name.
        stream: String,
    },
    /// The Kinesis client has no region or no credentials.
    #[error("{problem}")]
    Misconfigured {
        /// What the configuration lacks, and how to provide it.
        problem: Misconfiguration,
        /// What the SDK said.
        #[source]
        source: BoxError,
    },
    /// Nothing listens at the Kinesis endpoint: the connection was refused.
    #[error("{}", unreachable(.endpoint))]
    Unreachable {
        /// The endpoint's URL.
        endpoint: String,
        /// What the SDK said.
        #[source]
        source: BoxError,
    },
    /// Kinesis refused a call for a reason that retrying will not cure (access denied, an
    /// invalid name).
    #[error("{call} on stream {stream:?} was refused: {reason}")]
    Refused {
        /// The call (`ListShards`, `DescribeStreamSummary`).
        call: String,
        /// The stream's name.
        stream: String,
        /// The error's code and message.
        reason: String,
    },
}

/// The [`StreamError`] a failed call of `call` at startup means, or `None` (with a warning)
/// for a throttled or passing failure, which the consumer's loops retry: a stream that does
/// not exist, a client without region or credentials, an endpoint where nothing listens (as
/// `recorder` saw it), a refusal that retrying will not cure.
pub(crate) fn unreadable<E, R>(
    call: &str,
    stream: &str,
    err: SdkError<E, R>,
    recorder: &EndpointRecorder,
) -> Option<StreamError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let failure = classify(&err);
    let code = err.as_service_error().and_then(|e| e.code());
    if code == Some("ResourceNotFoundException") {
        return Some(StreamError::NotFound {
            stream: stream.to_owned(),
        });
    }
    match send_failure(&err) {
        Some(SendFailure::Misconfigured(problem)) => {
            return Some(StreamError::Misconfigured {
                problem,
                source: Box::new(err),
            })
        }
        Some(SendFailure::Refused) => {
            return Some(StreamError::Unreachable {
                endpoint: recorder.endpoint_or(UNKNOWN_ENDPOINT),
                source: Box::new(err),
            })
        }
        None => {}
    }
    if failure == Failure::Fatal {
        return Some(StreamError::Refused {
            call: call.to_owned(),
            stream: stream.to_owned(),
            reason: describe(&err),
        });
    }
    tracing::warn!(stream, call, error = %describe(&err), "the stream could not be read at startup; the consumer keeps trying");
    None
}

/// Lists the shards of one stream: id, parent and adjacent parent (a merge), and closed (the
/// shard has an ending sequence number).
#[derive(Debug)]
pub struct KinesisShardSource {
    client: aws_sdk_kinesis::Client,
    stream: String,
    arn: Option<String>,
    last_call: tokio::sync::Mutex<Option<Instant>>,
}

impl KinesisShardSource {
    /// A source for `stream` (its name).
    pub fn new(client: aws_sdk_kinesis::Client, stream: impl Into<String>) -> Self {
        Self {
            client,
            stream: stream.into(),
            arn: None,
            last_call: tokio::sync::Mutex::new(None),
        }
    }

    /// Names the stream by this ARN too (`StreamARN`, which a stream of another account read
    /// through its resource policy needs) in every call.
    #[must_use]
    pub fn stream_arn(mut self, arn: impl Into<String>) -> Self {
        self.arn = Some(arn.into());
        self
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Lists the first page of shards once, to find the errors that make the stream
    /// unreadable: a stream that does not exist, a client without region or credentials, an
    /// endpoint where nothing listens, a refusal (access denied). Throttling and passing
    /// failures are retried a few times and then let through with a warning: the discoverer
    /// keeps trying. [`KinesisConsumer`](super::KinesisConsumer) calls it before it starts.
    pub async fn check(&self) -> Result<(), StreamError> {
        let recorder = EndpointRecorder::default();
        // A refused connection at startup is a wrong endpoint, not a blip: not retried.
        let retry = |err: &ListShardsFailure| send_failure(err) != Some(SendFailure::Refused);
        let err = match self.page(None, Some(&recorder), retry).await {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        if let Some(unreadable) = unreadable("ListShards", &self.stream, err, &recorder) {
            return Err(unreadable);
        }
        Ok(())
    }

    /// One page of `ListShards`, throttling and passing failures retried (those for which
    /// `retry` says yes), the request's endpoint recorded by `recorder`.
    async fn page(
        &self,
        next: Option<&str>,
        recorder: Option<&EndpointRecorder>,
        retry: impl Fn(&ListShardsFailure) -> bool,
    ) -> Result<ListShardsOutput, ListShardsFailure> {
        let backoff = RetryPolicy {
            base_delay: FIRST_BACKOFF,
            max_delay: FIRST_BACKOFF * (1 << PAGE_ATTEMPTS),
            max_attempts: PAGE_ATTEMPTS,
            ..RetryPolicy::default()
        };
        let mut attempt = 1;
        loop {
            self.pace().await;
            // With a next token the stream must not be named (KCL sends the token alone).
            let request = match next {
                Some(token) => self.client.list_shards().next_token(token),
                None => self
                    .client
                    .list_shards()
                    .stream_name(&self.stream)
                    .set_stream_arn(self.arn.clone()),
            };
            let sent = match recorder {
                Some(recorder) => {
                    request
                        .customize()
                        .interceptor(recorder.clone())
                        .send()
                        .await
                }
                None => request.send().await,
            };
            let err = match sent {
                Ok(page) => return Ok(page),
                Err(err) => err,
            };
            let passing = matches!(classify(&err), Failure::Throttled | Failure::Transient);
            if !passing || !retry(&err) || attempt >= PAGE_ATTEMPTS {
                return Err(err);
            }
            tracing::debug!(stream = %self.stream, attempt, error = %describe(&err), "ListShards failed; retrying");
            tokio::time::sleep(backoff.backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// Every page of `ListShards`, in order (throttling and passing failures retried).
    async fn pages(&self) -> Result<Vec<ListShardsOutput>, ListShardsFailure> {
        let mut pages = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = self.page(next.as_deref(), None, |_| true).await?;
            next = page
                .next_token()
                .filter(|token| !token.is_empty())
                .map(str::to_owned);
            pages.push(page);
            if next.is_none() {
                return Ok(pages);
            }
        }
    }

    /// Every shard's hash key range, by shard id (a shard whose range does not parse is left
    /// out).
    async fn ranges(&self) -> Result<HashMap<String, HashKeyRange>, ListShardsFailure> {
        let pages = self.pages().await?;
        let ranges = pages
            .iter()
            .flat_map(|page| page.shards())
            .filter_map(|shard| {
                let range = shard.hash_key_range()?;
                let range =
                    HashKeyRange::parse(range.starting_hash_key(), range.ending_hash_key())?;
                Some((shard.shard_id().to_owned(), range))
            });
        Ok(ranges.collect())
    }

    /// A failed listing for the discoverer, in one line that names the stream.
    fn source_error(&self, err: &ListShardsFailure) -> SourceError {
        let text = describe(err);
        let code = err.as_service_error().and_then(|e| e.code());
        match classify(err) {
            Failure::Throttled => SourceError::Throttled(text.into()),
            _ if code == Some("ResourceNotFoundException") => SourceError::Failed(
                format!("stream {:?} does not exist ({text})", self.stream).into(),
            ),
            _ => SourceError::Failed(format!("ListShards {}: {text}", self.stream).into()),
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

/// How soon a record loop may list the shards again for a range it did not find (a shard
/// created since the last listing).
const RELIST_GAP: Duration = Duration::from_secs(10);

/// The shards' hash key ranges, for the record loops that expand aggregated records (an
/// aggregate holding a user record hashed outside its shard is dropped): listed with
/// `ListShards` when a loop first needs a range, once for all of them, and again (at most every
/// [`RELIST_GAP`]) for a shard the last listing did not show.
#[derive(Debug)]
pub(crate) struct ShardRanges {
    source: KinesisShardSource,
    known: tokio::sync::Mutex<KnownRanges>,
}

#[derive(Debug, Default)]
struct KnownRanges {
    ranges: HashMap<String, HashKeyRange>,
    listed: Option<Instant>,
}

impl ShardRanges {
    /// The ranges of the shards `source` lists.
    pub(crate) fn new(source: KinesisShardSource) -> Self {
        Self {
            source,
            known: tokio::sync::Mutex::default(),
        }
    }

    /// `shard`'s range (by shard id), `None` when no listing shows it (or the listing failed:
    /// then the aggregates are expanded without the check, as KCL does without a shard's
    /// range).
    pub(crate) async fn get(&self, shard: &str) -> Option<HashKeyRange> {
        let mut known = self.known.lock().await;
        if let Some(range) = known.ranges.get(shard) {
            return Some(*range);
        }
        if known.listed.is_some_and(|at| at.elapsed() < RELIST_GAP) {
            return None;
        }
        known.listed = Some(Instant::now());
        match self.source.ranges().await {
            Ok(ranges) => known.ranges = ranges,
            Err(err) => {
                tracing::warn!(stream = %self.source.stream, error = %describe(&err), "could not list the shards' hash key ranges; aggregates are expanded without checking them");
            }
        }
        known.ranges.get(shard).copied()
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

/// A listing that failed, and whether because the stream does not exist.
#[derive(Debug)]
pub(crate) struct ListFailure {
    /// Kinesis answered `ResourceNotFoundException`: the stream was deleted (or never was).
    pub not_found: bool,
    pub error: SourceError,
}

impl KinesisShardSource {
    /// Every shard of the stream, or why not.
    pub(crate) async fn shards(&self) -> Result<Vec<Shard>, ListFailure> {
        let pages = self.pages().await.map_err(|err| ListFailure {
            not_found: err
                .as_service_error()
                .and_then(|e| e.code())
                .is_some_and(|code| code == "ResourceNotFoundException"),
            error: self.source_error(&err),
        })?;
        pages
            .iter()
            .flat_map(|page| page.shards())
            .map(to_shard)
            .collect::<Result<_, _>>()
            .map_err(|error| ListFailure {
                not_found: false,
                error,
            })
    }
}

#[async_trait]
impl ShardSource for KinesisShardSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.shards().await.map_err(|failure| failure.error)
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
