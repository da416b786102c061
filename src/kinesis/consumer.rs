//! The consumer: a worker whose discoverer follows the stream's shards, and a record loop for
//! every lease the worker hands to the application.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use super::config::{ConsumerConfig, InitialPosition, Retrieval};
use super::context::ReaderContext;
use super::event::{ConsumerEvent, Observer};
use super::fan_out;
use super::processor::ProcessorFactory;
use super::reader;
use super::registry::{Registry, SeveralStreams, StartError, Streams};
use super::source::{KinesisShardSource, ShardRanges, StreamError};
use super::streams::{InvalidStream, StreamConfig, StreamTracker};
use crate::config::{ConfigError, WorkerConfig};
use crate::consumer::Running;
use crate::lease::WorkerId;
use crate::source::{Shard, ShardSource, SourceError};
use crate::store::LeaseStore;
use crate::worker::{LeaseGrant, ShutdownSignal, Worker, WorkerError};

/// Why a consumer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The consumer configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The stream cannot be read: it does not exist, the Kinesis client has no region or
    /// credentials, nothing listens at its endpoint, or Kinesis refuses the listing.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The stream's name or ARN is not one Kinesis takes.
    #[error(transparent)]
    InvalidStream(#[from] InvalidStream),
    /// A consumer of several streams: the stream tracker's first answer was an error.
    #[error("the stream tracker failed: {reason}")]
    Tracker {
        /// Its error.
        reason: String,
    },
    /// A consumer of several streams: a stream of the tracker's first answer cannot be read
    /// (it does not exist, its client has no region or credentials, nothing listens at its
    /// endpoint, Kinesis refuses it, or its stream consumer could not be registered).
    #[error("{reason}")]
    Streams {
        /// The stream (its name, or its identifier).
        stream: String,
        /// What failed, in one line that names the stream.
        reason: String,
    },
    /// The worker could not start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Enhanced fan-out: the stream consumer could not be registered, or found, or did not
    /// become active in time.
    #[error("stream consumer {consumer:?} of stream {stream:?}: {reason}")]
    FanOut {
        /// The stream's name.
        stream: String,
        /// The consumer's name.
        consumer: String,
        /// What failed (the call, the service's error code and message).
        reason: String,
    },
}

/// Builds a [`KinesisConsumer`].
///
/// `F` is the processor factory: [`NoProcessor`] until [`processor`](Self::processor) sets
/// one, and [`start`](Self::start) needs one.
pub struct KinesisConsumerBuilder<F = NoProcessor> {
    client: aws_sdk_kinesis::Client,
    streams: Given,
    store: Arc<dyn LeaseStore>,
    id: WorkerId,
    worker_config: WorkerConfig,
    config: ConsumerConfig,
    factory: F,
    observer: Observer,
    shutdown_signal: Option<ShutdownSignal>,
}

/// The processor factory of a [`KinesisConsumerBuilder`] before
/// [`processor`](KinesisConsumerBuilder::processor) set one: not a factory, so that
/// [`start`](KinesisConsumerBuilder::start) without one does not compile.
///
/// ```compile_fail
/// # async fn run(client: aws_sdk_kinesis::Client, store: std::sync::Arc<dyn shardlease::LeaseStore>) {
/// use shardlease::kinesis::KinesisConsumer;
/// let id = shardlease::WorkerId::new("w1").unwrap();
/// // error: `NoProcessor` is not a processor factory
/// let consumer = KinesisConsumer::builder(client, "my-stream", store, id).start().await;
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProcessor;

impl<F> std::fmt::Debug for KinesisConsumerBuilder<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisConsumerBuilder")
            .field("streams", &self.streams)
            .field("id", &self.id)
            .field("worker_config", &self.worker_config)
            .field("config", &self.config)
            .field("shutdown_signal", &self.shutdown_signal.is_some())
            .finish_non_exhaustive()
    }
}

impl<F> KinesisConsumerBuilder<F> {
    /// Sets the worker's configuration (lease duration, intervals). Default:
    /// [`WorkerConfig::default`].
    #[must_use]
    pub fn worker_config(mut self, config: WorkerConfig) -> Self {
        self.worker_config = config;
        self
    }

    /// Sets how records are read. Default: [`ConsumerConfig::default`].
    #[must_use]
    pub fn config(mut self, config: ConsumerConfig) -> Self {
        self.config = config;
        self
    }

    /// Calls `observer` for every [`ConsumerEvent`] (on the consumer's tasks: return quickly).
    #[must_use]
    pub fn on_event(mut self, observer: impl Fn(ConsumerEvent) + Send + Sync + 'static) -> Self {
        self.observer = Arc::new(observer);
        self
    }

    /// Leaves gracefully, as [`KinesisConsumer::shutdown`] does, when `signal` completes;
    /// [`KinesisConsumer::stopped`] resolves once it has. See
    /// [`WorkerBuilder::graceful_shutdown_on`](crate::worker::WorkerBuilder::graceful_shutdown_on).
    #[must_use]
    pub fn graceful_shutdown_on(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.shutdown_signal = Some(ShutdownSignal::new(signal));
        self
    }

    /// Sets the processor factory: one processor per acquired lease.
    pub fn processor<P: ProcessorFactory>(self, factory: P) -> KinesisConsumerBuilder<P> {
        KinesisConsumerBuilder {
            client: self.client,
            streams: self.streams,
            store: self.store,
            id: self.id,
            worker_config: self.worker_config,
            config: self.config,
            factory,
            observer: self.observer,
            shutdown_signal: self.shutdown_signal,
        }
    }

    /// Validates the configuration, checks that the stream can be listed
    /// ([`KinesisShardSource::check`]: a missing stream or a misconfigured client fails here,
    /// with a one-line [`ConsumerError::Stream`]), and starts the worker and its record loops.
    /// A consumer of several streams resolves each stream of its tracker's first answer
    /// instead (one that cannot be read fails with [`ConsumerError::Streams`]).
    /// Needs a processor factory: call [`processor`](Self::processor) first.
    pub async fn start(self) -> Result<KinesisConsumer, ConsumerError>
    where
        F: ProcessorFactory,
    {
        self.config.validate()?;
        let latest = self.config.initial_position == InitialPosition::Latest;
        let (streams, source): (Streams, Arc<dyn ShardSource>) = match self.streams {
            Given::One(stream) => {
                let stream = StreamConfig::new(&stream)?;
                let (context, shards) =
                    one_stream(&self.client, &stream, &self.config, &self.observer).await?;
                let source = StreamSource { shards, latest };
                (Streams::One(Arc::new(context)), Arc::new(source))
            }
            Given::Several(tracker) => {
                let registry = Registry::start(
                    tracker,
                    self.client.clone(),
                    self.config.clone(),
                    Arc::clone(&self.observer),
                )
                .await
                .map_err(|error| match error {
                    StartError::Tracker(reason) => ConsumerError::Tracker { reason },
                    StartError::Stream { stream, reason } => {
                        ConsumerError::Streams { stream, reason }
                    }
                })?;
                let source = SeveralStreams {
                    registry: Arc::clone(&registry),
                    latest,
                };
                (Streams::Several(registry), Arc::new(source))
            }
        };
        let (worker, events) = Worker::builder(self.store, self.id.clone())
            .config(self.worker_config)
            .source(source)
            .shutdown_signal(self.shutdown_signal)
            .start()
            .await?;
        let span = tracing::info_span!("shardlease", worker = %self.id, task = "consumer");
        let streams = Arc::new(streams);
        let (config, observer, factory) = (self.config, self.observer, self.factory);
        let reported = Arc::clone(&observer);
        let record_loop = move |grant: LeaseGrant| {
            let key = grant.key().clone();
            (observer)(ConsumerEvent::Acquired {
                key: key.clone(),
                checkpoint: grant.initial_checkpoint().map(str::to_owned),
            });
            let processor = factory.create(&key);
            let (streams, config, observer) =
                (Arc::clone(&streams), config.clone(), Arc::clone(&observer));
            async move {
                match streams.context_for(&key).await {
                    Ok((context, shard)) => reader::run(context, shard, grant, processor).await,
                    Err(error) => reader::unreadable(&config, &observer, grant, error).await,
                }
            }
        };
        let running = Running::start(worker, events, span, record_loop, move |event| {
            reported(ConsumerEvent::Lease(event));
        });
        Ok(KinesisConsumer { running })
    }
}

/// The streams a builder was given.
enum Given {
    /// One stream, by name or ARN.
    One(String),
    /// Several, from a tracker.
    Several(Arc<dyn StreamTracker>),
}

impl std::fmt::Debug for Given {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::One(stream) => f.debug_tuple("One").field(stream).finish(),
            Self::Several(_) => f.write_str("Several(..)"),
        }
    }
}

/// The record loops' context of a single-stream consumer and its shard source: the stream
/// checked (listed once), its stream consumer registered with enhanced fan-out.
async fn one_stream(
    client: &aws_sdk_kinesis::Client,
    stream: &StreamConfig,
    config: &ConsumerConfig,
    observer: &Observer,
) -> Result<(ReaderContext, KinesisShardSource), ConsumerError> {
    let source = || {
        let source = KinesisShardSource::new(client.clone(), stream.name());
        match stream.arn() {
            Some(arn) => source.stream_arn(arn),
            None => source,
        }
    };
    let shards = source();
    shards.check().await?;
    let consumer_arn = match &config.retrieval {
        Retrieval::Polling => None,
        Retrieval::FanOut(name) => Some(
            fan_out::register(client, stream.name(), stream.arn(), name)
                .await
                .map_err(|reason| ConsumerError::FanOut {
                    stream: stream.name().to_owned(),
                    consumer: name.clone(),
                    reason,
                })?,
        ),
    };
    let context = ReaderContext {
        ranges: ShardRanges::new(source()),
        client: client.clone(),
        stream: stream.name().to_owned(),
        stream_arn: stream.arn().map(str::to_owned),
        stream_id: None,
        config: config.clone(),
        observer: Arc::clone(observer),
        consumer_arn,
    };
    Ok((context, shards))
}

/// A running consumer. [`shutdown`](Self::shutdown) leaves gracefully (every processor is
/// asked to checkpoint, leases are released); dropping it is a crash for the lease table
/// (its leases expire), while its processors are told their leases are lost.
#[derive(Debug)]
pub struct KinesisConsumer {
    running: Running,
}

impl KinesisConsumer {
    /// A builder for a consumer of `stream` (its name, or its ARN: then every call names
    /// `StreamARN`) through `client`, keeping leases in `store` as worker `id`, keyed by shard
    /// id. Set the processor factory with [`processor`](KinesisConsumerBuilder::processor).
    pub fn builder(
        client: aws_sdk_kinesis::Client,
        stream: impl Into<String>,
        store: Arc<dyn LeaseStore>,
        id: WorkerId,
    ) -> KinesisConsumerBuilder<NoProcessor> {
        Self::with_streams(client, Given::One(stream.into()), store, id)
    }

    /// A builder for a consumer of several streams, those `tracker` names (a [`StreamSet`]
    /// for a set the application changes itself), through `client` (or a stream's own,
    /// [`StreamConfig::client`]), in one lease table: leases keyed
    /// `<account>:<stream>:<creation epoch>:<shard id>`, as a KCL multi-stream application
    /// keys them (so `shardlease import-kcl` copies such a table one to one), balanced over
    /// all streams together. A stream the tracker adds has its leases at the next discovery
    /// round; one it removes is read on for
    /// [`removed_stream_wait`](ConsumerConfig::removed_stream_wait), then its leases retire.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use shardlease::kinesis::{KinesisConsumer, ProcessorFactory, StreamConfig, StreamSet};
    /// use shardlease::{LeaseStore, WorkerId};
    ///
    /// # async fn run(
    /// #     client: aws_sdk_kinesis::Client,
    /// #     payments_account: aws_sdk_kinesis::Client,
    /// #     store: Arc<dyn LeaseStore>,
    /// #     processors: impl ProcessorFactory,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let streams = StreamSet::new([
    ///     StreamConfig::new("orders")?,
    ///     // Another account's stream, read with that account's credentials.
    ///     StreamConfig::new("arn:aws:kinesis:eu-west-1:222222222222:stream/payments")?
    ///         .client(payments_account),
    /// ]);
    /// let consumer =
    ///     KinesisConsumer::multi_stream(client, streams.clone(), store, WorkerId::new("host-a")?)
    ///         .processor(processors)
    ///         .start()
    ///         .await?;
    /// streams.add(StreamConfig::new("refunds")?); // its leases come at the next discovery round
    /// # consumer.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`StreamSet`]: super::StreamSet
    pub fn multi_stream(
        client: aws_sdk_kinesis::Client,
        tracker: impl StreamTracker,
        store: Arc<dyn LeaseStore>,
        id: WorkerId,
    ) -> KinesisConsumerBuilder<NoProcessor> {
        Self::with_streams(client, Given::Several(Arc::new(tracker)), store, id)
    }

    fn with_streams(
        client: aws_sdk_kinesis::Client,
        streams: Given,
        store: Arc<dyn LeaseStore>,
        id: WorkerId,
    ) -> KinesisConsumerBuilder<NoProcessor> {
        KinesisConsumerBuilder {
            client,
            streams,
            store,
            id,
            worker_config: WorkerConfig::default(),
            config: ConsumerConfig::default(),
            factory: NoProcessor,
            observer: Arc::new(|_| {}),
            shutdown_signal: None,
        }
    }

    /// The worker under the consumer (its id, held leases, monitor).
    pub fn worker(&self) -> &Worker {
        self.running.worker()
    }

    /// Leaves gracefully: every processor gets `stop_requested` (shutdown) and its lease is
    /// released once it returns; then the record loops end and the worker leaves the fleet.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }

    /// Resolves once the consumer has left gracefully and every record loop has ended: after
    /// the signal given to
    /// [`graceful_shutdown_on`](KinesisConsumerBuilder::graceful_shutdown_on), after
    /// [`shutdown`](Self::shutdown), or after an operator drained its worker
    /// ([`admin`](crate::admin), `shardlease drain`). Pending until then. (Dropping the
    /// consumer is a crash for the lease table: its leases expire, and its processors are told
    /// their leases are lost.)
    pub async fn stopped(&self) {
        self.running.stopped().await;
    }
}

/// The stream's shards for the discoverer, which also learns whether the shards that closed
/// before the consumer first started are wanted: not at `Latest`.
#[derive(Debug)]
struct StreamSource {
    shards: KinesisShardSource,
    latest: bool,
}

#[async_trait]
impl ShardSource for StreamSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.shards.list_shards().await
    }

    fn skips_closed_ancestors(&self) -> bool {
        self.latest
    }
}
