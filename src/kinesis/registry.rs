//! The streams of a consumer as its record loops and its discoverer use them.
//!
//! A consumer of one stream has one [`ReaderContext`] and keys its leases by shard id. A
//! consumer of several ([`Registry`]) asks its [`StreamTracker`] at every discovery round,
//! resolves each stream once (`DescribeStreamSummary`: its ARN, so its account, and its
//! creation time; with enhanced fan-out, its stream consumer registered), and keys its leases
//! `<account>:<name>:<creation epoch>:<shard id>` as KCL does. The discoverer's listing is every
//! tracked stream's shards, those of a stream removed from the tracker included for
//! `removed_stream_wait`; a record loop finds its stream by its lease's key.
//!
//! A stream whose listing fails (throttled, passing errors) contributes its last good listing,
//! so a stream that cannot be listed for a while is not taken for one whose shards vanished;
//! one that no longer exists contributes nothing, and its leases retire. A lease of a stream
//! this worker's tracker does not name (another worker's tracker named it) is read with the
//! consumer's own client, by name, if that client reaches the very stream the key names.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::{ConsumerConfig, Retrieval};
use super::context::ReaderContext;
use super::event::{ConsumerEvent, Observer};
use super::fan_out;
use super::source::{unreadable, KinesisShardSource, ShardRanges};
use super::streams::{StreamConfig, StreamId, StreamTracker};
use super::{describe, UNKNOWN_ENDPOINT};
use crate::lease::LeaseKey;
use crate::source::{Shard, ShardSource, SourceError};
use crate::store::sdk::EndpointRecorder;

/// How long a refresh waits for the streams it started to resolve (the rest are installed at
/// a later refresh, as they finish): long enough for `DescribeStreamSummary`, so a stream
/// added with polling is listed in the round that first sees it.
const RESOLVE_WAIT: Duration = Duration::from_secs(3);

/// The least time between two refreshes a record loop asks for (a lease of a stream this
/// worker does not know); the discoverer's rounds refresh regardless.
const LOOKUP_REFRESH_GAP: Duration = Duration::from_secs(5);

/// How the tracker is named in events.
const TRACKER: &str = "the stream tracker";

/// The streams of a consumer.
pub(crate) enum Streams {
    /// One stream, its leases keyed by shard id.
    One(Arc<ReaderContext>),
    /// Several, from a tracker, their leases keyed `<stream id>:<shard id>`.
    Several(Arc<Registry>),
}

impl Streams {
    /// The context of the stream `key` belongs to, and the shard's id; or why the lease
    /// cannot be read here.
    pub(crate) async fn context_for(
        &self,
        key: &LeaseKey,
    ) -> Result<(Arc<ReaderContext>, String), String> {
        match self {
            Self::One(context) => Ok((Arc::clone(context), key.as_str().to_owned())),
            Self::Several(registry) => registry.context_for(key).await,
        }
    }
}

/// A stream resolved: what its record loops share, and its shard listing.
struct Resolved {
    id: StreamId,
    context: Arc<ReaderContext>,
    source: Arc<KinesisShardSource>,
}

/// The streams of a multi-stream consumer.
pub(crate) struct Registry {
    tracker: Arc<dyn StreamTracker>,
    client: aws_sdk_kinesis::Client,
    config: ConsumerConfig,
    observer: Observer,
    /// Every stream resolved so far, by id (never forgotten: a lease of a removed stream may
    /// still be read while it retires).
    known: RwLock<HashMap<StreamId, Arc<Resolved>>>,
    tracked: tokio::sync::Mutex<Tracked>,
}

/// What the tracker said, and what the listings keep.
#[derive(Default)]
struct Tracked {
    /// The configurations the tracker names that were resolved, with their ids.
    resolved: Vec<(StreamConfig, StreamId)>,
    /// Resolutions under way.
    pending: Vec<(StreamConfig, JoinHandle<Result<Resolved, String>>)>,
    /// The streams the tracker names now.
    active: BTreeSet<StreamId>,
    /// Streams it named and no longer does, since when.
    removed: BTreeMap<StreamId, Instant>,
    /// Each listed stream's last good listing, keyed for the table.
    listings: HashMap<StreamId, Vec<Shard>>,
    last_refresh: Option<Instant>,
}

impl Registry {
    /// Resolves the tracker's streams (every one must resolve: a stream that does not exist,
    /// a client without credentials, a refusal fails here) and lists each once.
    pub(crate) async fn start(
        tracker: Arc<dyn StreamTracker>,
        client: aws_sdk_kinesis::Client,
        config: ConsumerConfig,
        observer: Observer,
    ) -> Result<Arc<Self>, StartError> {
        let streams = tracker
            .streams()
            .await
            .map_err(|err| StartError::Tracker(err.to_string()))?;
        let registry = Arc::new(Self {
            tracker,
            client,
            config,
            observer,
            known: RwLock::default(),
            tracked: tokio::sync::Mutex::default(),
        });
        let mut tracked = registry.tracked.lock().await;
        for config in streams {
            if tracked.resolved.iter().any(|(known, _)| *known == config) {
                continue;
            }
            let resolved = resolve(
                config.clone(),
                registry.client.clone(),
                registry.config.clone(),
                Arc::clone(&registry.observer),
            )
            .await
            .map_err(|reason| StartError::Stream {
                stream: config.name().to_owned(),
                reason,
            })?;
            let id = resolved.id.clone();
            let source = Arc::clone(&resolved.source);
            registry.install(resolved);
            tracked.resolved.push((config, id.clone()));
            if tracked.active.insert(id.clone()) {
                (registry.observer)(ConsumerEvent::StreamAdded { stream: id.clone() });
            }
            match source.shards().await {
                Ok(shards) => {
                    let keyed = keyed(&id, shards).map_err(|e| StartError::Stream {
                        stream: id.to_string(),
                        reason: std::error::Error::source(&e)
                            .map_or_else(|| e.to_string(), ToString::to_string),
                    })?;
                    tracked.listings.insert(id, keyed);
                }
                Err(failure) => {
                    tracing::warn!(stream = %id, error = %failure.error, "the stream could not be listed at startup; the discoverer keeps trying");
                }
            }
        }
        tracked.last_refresh = Some(Instant::now());
        drop(tracked);
        Ok(registry)
    }

    fn lookup(&self, id: &StreamId) -> Option<Arc<Resolved>> {
        self.known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Keeps `resolved` for the record loops (a stream resolved twice keeps its first
    /// context: loops already reading it keep theirs).
    fn install(&self, resolved: Resolved) -> Arc<Resolved> {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            known
                .entry(resolved.id.clone())
                .or_insert_with(|| Arc::new(resolved)),
        )
    }

    /// Asks the tracker for its streams, starts resolving the new ones (and waits a little
    /// for them), and marks the streams it no longer names removed.
    async fn refresh(&self, tracked: &mut Tracked) {
        tracked.last_refresh = Some(Instant::now());
        let answer = match self.tracker.streams().await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::warn!(error = %err, "the stream tracker failed; its last streams stay");
                (self.observer)(ConsumerEvent::StreamFailed {
                    stream: TRACKER.to_owned(),
                    error: err.to_string(),
                });
                return;
            }
        };
        // A configuration the tracker no longer names is resolved afresh if it comes back
        // (the stream may have been deleted and created again meanwhile).
        tracked
            .resolved
            .retain(|(config, _)| answer.contains(config));
        for config in &answer {
            let known = tracked.resolved.iter().any(|(c, _)| c == config)
                || tracked.pending.iter().any(|(c, _)| c == config);
            if !known {
                let resolving = resolve(
                    config.clone(),
                    self.client.clone(),
                    self.config.clone(),
                    Arc::clone(&self.observer),
                );
                tracked
                    .pending
                    .push((config.clone(), tokio::spawn(resolving)));
            }
        }
        self.collect(tracked, Instant::now() + RESOLVE_WAIT).await;
        let now_active: BTreeSet<StreamId> = answer
            .iter()
            .filter_map(|config| {
                let found = tracked.resolved.iter().find(|(c, _)| c == config);
                found.map(|(_, id)| id.clone())
            })
            .collect();
        let now = Instant::now();
        for gone in tracked.active.difference(&now_active) {
            tracing::info!(stream = %gone, wait = ?self.config.removed_stream_wait, "a stream left the stream set; its leases retire after the wait");
            tracked.removed.entry(gone.clone()).or_insert(now);
            (self.observer)(ConsumerEvent::StreamRemoved {
                stream: gone.clone(),
            });
        }
        for new in now_active.difference(&tracked.active) {
            tracing::info!(stream = %new, "a stream joined the stream set");
            tracked.removed.remove(new);
            (self.observer)(ConsumerEvent::StreamAdded {
                stream: new.clone(),
            });
        }
        tracked.active = now_active;
    }

    /// Installs the resolutions that finish by `deadline`; those that failed are reported and
    /// tried again at the next refresh.
    async fn collect(&self, tracked: &mut Tracked, deadline: Instant) {
        let mut still = Vec::new();
        for (config, mut handle) in std::mem::take(&mut tracked.pending) {
            let finished = if handle.is_finished() {
                Some((&mut handle).await)
            } else {
                tokio::time::timeout_at(deadline, &mut handle).await.ok()
            };
            match finished {
                None => still.push((config, handle)),
                Some(Ok(Ok(resolved))) => {
                    let resolved = self.install(resolved);
                    tracked.resolved.push((config, resolved.id.clone()));
                }
                Some(Ok(Err(error))) => {
                    tracing::warn!(stream = config.name(), %error, "a stream of the stream set cannot be read; trying again at the next discovery round");
                    (self.observer)(ConsumerEvent::StreamFailed {
                        stream: config.name().to_owned(),
                        error,
                    });
                }
                Some(Err(panicked)) => {
                    tracing::error!(stream = config.name(), error = %panicked, "resolving a stream panicked");
                }
            }
        }
        tracked.pending = still;
    }

    /// The shards of every stream to list now, keyed for the table.
    async fn list(&self) -> Result<Vec<Shard>, SourceError> {
        let mut tracked = self.tracked.lock().await;
        self.refresh(&mut tracked).await;
        let now = Instant::now();
        let wait = self.config.removed_stream_wait;
        tracked
            .removed
            .retain(|_, since| now.saturating_duration_since(*since) < wait);
        let listed: Vec<StreamId> = tracked
            .active
            .iter()
            .chain(tracked.removed.keys())
            .cloned()
            .collect();
        tracked.listings.retain(|id, _| listed.contains(id));
        let mut shards = Vec::new();
        for id in listed {
            let Some(stream) = self.lookup(&id) else {
                continue;
            };
            match stream.source.shards().await {
                Ok(listing) => {
                    let keyed = keyed(&id, listing)?;
                    shards.extend(keyed.iter().cloned());
                    tracked.listings.insert(id, keyed);
                }
                Err(failure) if failure.not_found => {
                    tracing::warn!(stream = %id, "the stream does not exist any more; its leases retire");
                    (self.observer)(ConsumerEvent::StreamFailed {
                        stream: id.to_string(),
                        error: failure.error.to_string(),
                    });
                    tracked.listings.remove(&id);
                    // Resolved afresh when named again: a stream created again under the
                    // same name is another stream.
                    tracked.resolved.retain(|(_, resolved)| *resolved != id);
                    tracked.active.remove(&id);
                    tracked.removed.remove(&id);
                }
                Err(failure) => {
                    let error = std::error::Error::source(&failure.error)
                        .map_or_else(|| failure.error.to_string(), ToString::to_string);
                    tracing::warn!(stream = %id, %error, "the stream could not be listed; its last listing stands");
                    (self.observer)(ConsumerEvent::StreamFailed {
                        stream: id.to_string(),
                        error,
                    });
                    if let Some(last) = tracked.listings.get(&id) {
                        shards.extend(last.iter().cloned());
                    }
                }
            }
        }
        Ok(shards)
    }

    /// The context of the stream `key` names, and the shard's id.
    async fn context_for(&self, key: &LeaseKey) -> Result<(Arc<ReaderContext>, String), String> {
        let Some((id, shard)) = StreamId::split_lease_key(key) else {
            return Err(format!(
                "the lease key {key} is not <account>:<stream>:<creation epoch>:<shard id>: a \
                 consumer of several streams cannot read it (a lease of a single-stream \
                 consumer in the same table?)"
            ));
        };
        let found = |registry: &Self| {
            registry
                .lookup(&id)
                .map(|stream| (Arc::clone(&stream.context), shard.to_owned()))
        };
        if let Some(found) = found(self) {
            return Ok(found);
        }
        {
            let mut tracked = self.tracked.lock().await;
            let stale = tracked
                .last_refresh
                .is_none_or(|at| at.elapsed() >= LOOKUP_REFRESH_GAP);
            if stale {
                self.refresh(&mut tracked).await;
            } else {
                self.collect(&mut tracked, Instant::now()).await;
            }
        }
        if let Some(found) = found(self) {
            return Ok(found);
        }
        // Not in this worker's stream set: read it with the consumer's own client, by name,
        // if that reaches the stream the key names (and not a namesake in another account,
        // or one created again since).
        let config = StreamConfig::new(&id.name).map_err(|e| e.to_string())?;
        let resolved = resolve(
            config,
            self.client.clone(),
            self.config.clone(),
            Arc::clone(&self.observer),
        )
        .await?;
        if resolved.id != id {
            return Err(format!(
                "the lease's stream {id} is not in this worker's stream set, and its Kinesis \
                 client reaches {} under that name: give this worker the stream (with its \
                 client, for another account)",
                resolved.id
            ));
        }
        tracing::warn!(stream = %id, "a lease of a stream this worker's tracker does not name: read with the consumer's own client");
        let resolved = self.install(resolved);
        Ok((Arc::clone(&resolved.context), shard.to_owned()))
    }
}

/// Why a multi-stream consumer could not start (each one line).
#[derive(Debug)]
pub(crate) enum StartError {
    /// The tracker's first answer was an error.
    Tracker(String),
    /// A stream of its first answer cannot be read.
    Stream { stream: String, reason: String },
}

/// The shards of stream `id` under their lease keys (parents too).
fn keyed(id: &StreamId, shards: Vec<Shard>) -> Result<Vec<Shard>, SourceError> {
    let key = |shard: &LeaseKey| {
        id.lease_key(shard.as_str())
            .map_err(|e| SourceError::Failed(format!("stream {id}, shard {shard}: {e}").into()))
    };
    shards
        .into_iter()
        .map(|shard| {
            let parents = shard
                .parents
                .iter()
                .map(key)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Shard {
                key: key(&shard.key)?,
                parents,
                closed: shard.closed,
            })
        })
        .collect()
}

/// Resolves `config`: `DescribeStreamSummary` for its ARN (its account) and creation time
/// (each taken as given, if given), the stream consumer registered with enhanced fan-out.
/// The error is one line that names the stream.
async fn resolve(
    config: StreamConfig,
    client: aws_sdk_kinesis::Client,
    consumer: ConsumerConfig,
    observer: Observer,
) -> Result<Resolved, String> {
    let client = config.own_client().cloned().unwrap_or(client);
    let name = config.name().to_owned();
    let recorder = EndpointRecorder::default();
    let request = client
        .describe_stream_summary()
        .stream_name(&name)
        .set_stream_arn(config.arn().map(str::to_owned))
        .customize()
        .interceptor(recorder.clone())
        .send();
    let summary = match tokio::time::timeout(consumer.call_timeout, request).await {
        Err(_) => {
            return Err(format!(
                "DescribeStreamSummary on stream {name:?} unanswered within {:?} ({})",
                consumer.call_timeout,
                recorder.endpoint_or(UNKNOWN_ENDPOINT)
            ))
        }
        Ok(Err(err)) => {
            let text = describe(&err);
            return Err(
                match unreadable("DescribeStreamSummary", &name, err, &recorder) {
                    Some(unreadable) => unreadable.to_string(),
                    None => format!("DescribeStreamSummary on stream {name:?}: {text}"),
                },
            );
        }
        Ok(Ok(output)) => output,
    };
    let summary = summary
        .stream_description_summary()
        .ok_or_else(|| format!("DescribeStreamSummary on stream {name:?} returned no summary"))?;
    let described_arn = summary.stream_arn().to_owned();
    let account = match config.account() {
        Some(account) => account.to_owned(),
        None => StreamConfig::new(&described_arn)
            .ok()
            .and_then(|c| c.account().map(str::to_owned))
            .ok_or_else(|| {
                format!("stream {name:?}: its ARN {described_arn:?} names no account")
            })?,
    };
    let creation_epoch = match config.given_creation_epoch() {
        Some(epoch) => epoch,
        None => u64::try_from(summary.stream_creation_timestamp().secs())
            .ok()
            .filter(|secs| *secs > 0)
            .ok_or_else(|| format!("stream {name:?} has no creation time before the epoch"))?,
    };
    let id = StreamId {
        account,
        name: name.clone(),
        creation_epoch,
    };
    let consumer_arn = match &consumer.retrieval {
        Retrieval::Polling => None,
        Retrieval::FanOut(consumer_name) => Some(
            fan_out::register(&client, &name, Some(&described_arn), consumer_name)
                .await
                .map_err(|reason| {
                    format!("stream consumer {consumer_name:?} of stream {id}: {reason}")
                })?,
        ),
    };
    let source = |client: aws_sdk_kinesis::Client| {
        let source = KinesisShardSource::new(client, name.clone());
        match config.arn() {
            Some(arn) => source.stream_arn(arn),
            None => source,
        }
    };
    let context = ReaderContext {
        ranges: ShardRanges::new(source(client.clone())),
        client: client.clone(),
        stream: name.clone(),
        stream_arn: config.arn().map(str::to_owned),
        stream_id: Some(id.clone()),
        config: consumer,
        observer,
        consumer_arn,
    };
    Ok(Resolved {
        id,
        context: Arc::new(context),
        source: Arc::new(source(client)),
    })
}

/// The discoverer's listing of a multi-stream consumer: every tracked stream's shards.
pub(crate) struct SeveralStreams {
    pub registry: Arc<Registry>,
    /// Whether shards that closed before the fleet first read the streams are skipped (a
    /// consumer starting at `Latest`).
    pub latest: bool,
}

impl std::fmt::Debug for SeveralStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeveralStreams")
            .field("latest", &self.latest)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ShardSource for SeveralStreams {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.registry.list().await
    }

    fn skips_closed_ancestors(&self) -> bool {
        self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_shards_and_parents_are_keyed_with_its_identifier() {
        let id = StreamId::parse("111122223333:orders:1700000000").unwrap();
        let parent = LeaseKey::new("shardId-000000000000").unwrap();
        let child = LeaseKey::new("shardId-000000000001").unwrap();
        let keyed = keyed(
            &id,
            vec![
                Shard::new(parent.clone()).closed(),
                Shard::new(child).with_parents([parent]),
            ],
        )
        .unwrap();
        assert_eq!(
            keyed[0].key.as_str(),
            "111122223333:orders:1700000000:shardId-000000000000"
        );
        assert!(keyed[0].closed);
        assert_eq!(keyed[1].parents, vec![keyed[0].key.clone()]);
    }
}
