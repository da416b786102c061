//! The consumer: a worker whose discoverer follows the stream's shards, and a record loop for
//! every lease the worker hands to the application.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::collections::HashMap;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::processor::ProcessorFactory;
use super::reader::{self, ReaderContext};
use super::source::{KinesisShardSource, StreamError};
use crate::config::WorkerConfig;
use crate::lease::{LeaseKey, WorkerId};
use crate::source::{Shard, ShardSource, SourceError};
use crate::store::LeaseStore;
use crate::worker::{LeaseEvent, StopReason, Worker, WorkerError};

/// Where a shard with no checkpoint and no parents starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialPosition {
    /// The oldest record still in the stream.
    TrimHorizon,
    /// Records written from the moment the lease is first read. The moment is checkpointed
    /// at once, so a lease that moves before its first checkpoint resumes from that moment
    /// instead of skipping what came in between (KCL starts such a lease at the new latest).
    Latest,
    /// Records written from this moment on.
    AtTimestamp(SystemTime),
}

/// How the record loops read. Every default says where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerConfig {
    /// Where a new shard with no parents starts. A child shard with no checkpoint starts at
    /// its beginning (its parents' data ran up to its first record), or at the moment of an
    /// `AtTimestamp` position. With `Latest`, shards that closed before the consumer first
    /// started get no lease and their children start at `Latest` too, so a stream resharded
    /// within its retention period is not replayed. Default: `Latest` (as KCL).
    pub initial_position: InitialPosition,
    /// Most records per `GetRecords` call, 1 to 10,000. Default: 10,000 (the service's
    /// maximum, as KCL).
    pub max_records: i32,
    /// Least time between two `GetRecords` calls on one shard. Default: 200 ms (the service
    /// allows 5 calls per second per shard, shared by every consumer of the stream).
    pub min_call_interval: Duration,
    /// The wait after a call that returned no records. Default: 1 s (KCL's
    /// `idleTimeBetweenReadsInMillis`).
    pub idle_time_between_reads: Duration,
    /// The longest wait after throttling or errors; the wait doubles from
    /// `min_call_interval` with full jitter. Also how long a lease whose processor panicked,
    /// or that Kinesis refused to serve, is held before it is released. Default: 10 s.
    pub max_backoff: Duration,
    /// The longest a `GetRecords` or `GetShardIterator` call may go unanswered: then it is
    /// abandoned as a transient failure and retried after a backoff (a connection that
    /// accepted the request and never answers would otherwise stall the shard for good).
    /// Default: 10 s (`GetRecords` answers in well under a second, and the SDK's own timeouts
    /// bound only the connect).
    pub call_timeout: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            initial_position: InitialPosition::Latest,
            max_records: 10_000,
            min_call_interval: Duration::from_millis(200),
            idle_time_between_reads: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            call_timeout: Duration::from_secs(10),
        }
    }
}

impl ConsumerConfig {
    /// Checks that the values can work.
    pub fn validate(&self) -> Result<(), ConsumerError> {
        if !(1..=10_000).contains(&self.max_records) {
            return Err(ConsumerError::Config(format!(
                "max_records {} must be between 1 and 10,000 (the GetRecords limit)",
                self.max_records
            )));
        }
        for (name, value) in [
            ("min_call_interval", self.min_call_interval),
            ("idle_time_between_reads", self.idle_time_between_reads),
            ("call_timeout", self.call_timeout),
        ] {
            if value.is_zero() {
                return Err(ConsumerError::Config(format!("{name} must be non-zero")));
            }
        }
        if self.max_backoff < self.min_call_interval {
            return Err(ConsumerError::Config(format!(
                "max_backoff {:?} must be at least min_call_interval {:?}",
                self.max_backoff, self.min_call_interval
            )));
        }
        Ok(())
    }
}

/// Why a consumer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The consumer configuration cannot work.
    #[error("invalid consumer configuration: {0}")]
    Config(String),
    /// The stream cannot be read: it does not exist, the Kinesis client has no region or
    /// credentials, nothing listens at its endpoint, or Kinesis refuses the listing.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The worker could not start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
}

/// Something that happened to a lease of this consumer, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// The lease was acquired; its record loop starts.
    Acquired {
        /// The shard.
        key: LeaseKey,
        /// Its checkpoint.
        checkpoint: Option<String>,
    },
    /// The record loop of the lease was asked to stop (handoff, shutdown, retirement) and
    /// calls the processor's `stop_requested`.
    StopRequested {
        /// The shard.
        key: LeaseKey,
        /// Why.
        reason: StopReason,
    },
    /// The record loop of the lease ended; nothing of it is processed here any more.
    Stopped {
        /// The shard.
        key: LeaseKey,
    },
    /// The lease was handed over to `to`.
    HandedOff {
        /// The shard.
        key: LeaseKey,
        /// The new owner.
        to: WorkerId,
    },
    /// The lease was released (shutdown).
    Released {
        /// The shard.
        key: LeaseKey,
    },
    /// The lease was lost.
    Lost {
        /// The shard.
        key: LeaseKey,
    },
    /// The shard was processed to its end and its lease released.
    ShardEnded {
        /// The shard.
        key: LeaseKey,
    },
    /// The shard left the stream and its lease was deleted.
    Retired {
        /// The shard.
        key: LeaseKey,
    },
    /// A checkpoint was stored (a sequence number, or `SHARD_END`).
    Checkpointed {
        /// The shard.
        key: LeaseKey,
        /// The checkpoint.
        sequence_number: String,
    },
    /// The processor panicked. The panic was caught: the processor is not called again, and
    /// the lease is released after [`ConsumerConfig::max_backoff`] (at once if a stop comes
    /// first) for the balance to place again, with a fresh processor, here or on a peer.
    ProcessorPanicked {
        /// The shard.
        key: LeaseKey,
        /// The panic's message.
        message: String,
    },
    /// Kinesis refused to serve the shard (`GetShardIterator`, or `GetRecords` even with a
    /// fresh iterator) with an error that retrying cannot fix: the stream was deleted, access
    /// is denied, the checkpoint is not a sequence number of the shard. The record loop ends
    /// and the lease is released after [`ConsumerConfig::max_backoff`], as after a panic.
    ReadFailed {
        /// The shard.
        key: LeaseKey,
        /// The call and the service's error code and message.
        error: String,
    },
}

pub(crate) type Observer = Arc<dyn Fn(ConsumerEvent) + Send + Sync>;

/// Builds a [`KinesisConsumer`].
pub struct KinesisConsumerBuilder<F> {
    client: aws_sdk_kinesis::Client,
    stream: String,
    store: Arc<dyn LeaseStore>,
    id: WorkerId,
    worker_config: WorkerConfig,
    config: ConsumerConfig,
    factory: F,
    observer: Observer,
}

impl<F> std::fmt::Debug for KinesisConsumerBuilder<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisConsumerBuilder")
            .field("stream", &self.stream)
            .field("id", &self.id)
            .field("worker_config", &self.worker_config)
            .field("config", &self.config)
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

    /// Sets the processor factory: one processor per acquired lease.
    pub fn processor<P: ProcessorFactory>(self, factory: P) -> KinesisConsumerBuilder<P> {
        KinesisConsumerBuilder {
            client: self.client,
            stream: self.stream,
            store: self.store,
            id: self.id,
            worker_config: self.worker_config,
            config: self.config,
            factory,
            observer: self.observer,
        }
    }
}

impl<F: ProcessorFactory> KinesisConsumerBuilder<F> {
    /// Validates the configuration, checks that the stream can be listed
    /// ([`KinesisShardSource::check`]: a missing stream or a misconfigured client fails here,
    /// with a one-line [`ConsumerError::Stream`]), and starts the worker and its record loops.
    pub async fn start(self) -> Result<KinesisConsumer, ConsumerError> {
        self.config.validate()?;
        let shards = KinesisShardSource::new(self.client.clone(), self.stream.clone());
        shards.check().await?;
        let source = StreamSource {
            shards,
            latest: self.config.initial_position == InitialPosition::Latest,
        };
        let mut worker = Worker::builder(self.store, self.id.clone())
            .config(self.worker_config)
            .source(source)
            .start()
            .await?;
        let events = worker
            .take_events()
            .expect("a new worker has its event stream");
        let context = Arc::new(ReaderContext {
            client: self.client,
            stream: self.stream,
            config: self.config,
            observer: self.observer,
        });
        let readers = TaskTracker::new();
        let span = tracing::info_span!("shardlease", worker = %self.id, task = "consumer");
        let dispatcher =
            tokio::spawn(dispatch(events, context, self.factory, readers.clone()).instrument(span));
        Ok(KinesisConsumer {
            worker: Some(worker),
            dispatcher,
            readers,
        })
    }
}

/// A running consumer. [`shutdown`](Self::shutdown) leaves gracefully (every processor is
/// asked to checkpoint, leases are released); dropping it is a crash for the lease table
/// (its leases expire), while its processors are told their leases are lost.
pub struct KinesisConsumer {
    worker: Option<Worker>,
    dispatcher: JoinHandle<()>,
    readers: TaskTracker,
}

impl std::fmt::Debug for KinesisConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisConsumer")
            .field("worker", &self.worker)
            .finish()
    }
}

impl KinesisConsumer {
    /// A builder for a consumer of `stream` through `client`, keeping leases in `store` as
    /// worker `id`. Set the processor factory with
    /// [`processor`](KinesisConsumerBuilder::processor).
    pub fn builder(
        client: aws_sdk_kinesis::Client,
        stream: impl Into<String>,
        store: Arc<dyn LeaseStore>,
        id: WorkerId,
    ) -> KinesisConsumerBuilder<()> {
        KinesisConsumerBuilder {
            client,
            stream: stream.into(),
            store,
            id,
            worker_config: WorkerConfig::default(),
            config: ConsumerConfig::default(),
            factory: (),
            observer: Arc::new(|_| {}),
        }
    }

    /// The worker under the consumer (its id, held leases, monitor).
    pub fn worker(&self) -> &Worker {
        self.worker.as_ref().expect("present until shutdown")
    }

    /// Leaves gracefully: every processor gets `stop_requested` (shutdown) and its lease is
    /// released once it returns; then the record loops end and the worker leaves the fleet.
    pub async fn shutdown(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.shutdown().await;
        }
        self.readers.close();
        self.readers.wait().await;
        let _ = (&mut self.dispatcher).await;
    }
}

impl Drop for KinesisConsumer {
    fn drop(&mut self) {
        // The worker's own drop tells every grant its lease is lost; the record loops stop.
        self.dispatcher.abort();
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

/// Starts a record loop for every lease acquired. A lease lost and acquired again here
/// (a new tenure) while its previous loop is still inside a processor call waits for that loop
/// to end first, so one process never has two loops on one shard.
async fn dispatch<F: ProcessorFactory>(
    mut events: mpsc::UnboundedReceiver<LeaseEvent>,
    context: Arc<ReaderContext>,
    factory: F,
    readers: TaskTracker,
) {
    let mut running: HashMap<LeaseKey, JoinHandle<()>> = HashMap::new();
    while let Some(event) = events.recv().await {
        let observed = match event {
            LeaseEvent::Acquired(grant) => {
                let key = grant.key().clone();
                let checkpoint = grant.checkpoint().map(str::to_owned);
                (context.observer)(ConsumerEvent::Acquired {
                    key: key.clone(),
                    checkpoint,
                });
                running.retain(|_, previous| !previous.is_finished());
                let previous = running.remove(&key);
                let processor = factory.create(&key);
                let context = Arc::clone(&context);
                let span = tracing::info_span!("record_loop", lease_key = %key);
                let record_loop = async move {
                    if let Some(previous) = previous {
                        tracing::info!("waiting for the previous record loop of this shard to end");
                        let _ = previous.await;
                    }
                    reader::run(context, grant, processor).await;
                };
                running.insert(key, readers.spawn(record_loop.instrument(span)));
                continue;
            }
            // The record loop reports it when it acts on it, so that a lease's events are in
            // order (its `Stopped` comes after).
            LeaseEvent::StopRequested { .. } => continue,
            LeaseEvent::HandedOff { key, to } => ConsumerEvent::HandedOff { key, to },
            LeaseEvent::Released { key } => ConsumerEvent::Released { key },
            LeaseEvent::Lost { key } => ConsumerEvent::Lost { key },
            LeaseEvent::ShardEnded { key } => ConsumerEvent::ShardEnded { key },
            LeaseEvent::Retired { key } => ConsumerEvent::Retired { key },
            // Not about one shard: the worker logs it at error level and counts it
            // (`shardlease_duplicate_worker_id_total`).
            LeaseEvent::DuplicateWorkerId { .. } => continue,
            // A record loop finishes its grant on every path; the worker logs and counts an
            // abandonment, should a loop's task end some other way.
            LeaseEvent::Abandoned { .. } => continue,
        };
        (context.observer)(observed);
    }
}
