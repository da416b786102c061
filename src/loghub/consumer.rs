//! The LogHub consumer: a worker whose discoverer follows the logstore's shards, and a record
//! loop for every lease the worker hands to the application.

use std::future::Future;
use std::sync::Arc;

use aliyun_log_rust_sdk::Client;

use super::config::LogHubConfig;
use super::event::{ConsumerEvent, Observer};
use super::mirror;
use super::processor::ProcessorFactory;
use super::reader::{self, ReaderContext};
use super::source::{LogHubError, LogHubShardSource};
use crate::config::{ConfigError, WorkerConfig};
use crate::consumer::Running;
use crate::lease::WorkerId;
use crate::store::LeaseStore;
use crate::worker::{LeaseGrant, ShutdownSignal, Worker, WorkerError};

/// Why a LogHub consumer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The consumer configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The logstore cannot be read: the project or logstore does not exist, LogHub refuses
    /// the credentials or the listing, the endpoint cannot be reached.
    #[error(transparent)]
    LogHub(#[from] LogHubError),
    /// The worker could not start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The consumer group that mirrors the checkpoints could not be created or found.
    #[error("consumer group {group:?} of {project}/{logstore}: {reason}")]
    ConsumerGroup {
        /// The project.
        project: String,
        /// The logstore.
        logstore: String,
        /// The group.
        group: String,
        /// What failed (the call, LogHub's error code and message).
        reason: String,
    },
}

/// The processor factory of a [`LogHubConsumerBuilder`] before
/// [`processor`](LogHubConsumerBuilder::processor) set one: not a factory, so that
/// [`start`](LogHubConsumerBuilder::start) without one does not compile.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProcessor;

/// Builds a [`LogHubConsumer`].
pub struct LogHubConsumerBuilder<F = NoProcessor> {
    client: Client,
    project: String,
    logstore: String,
    store: Arc<dyn LeaseStore>,
    id: WorkerId,
    worker_config: WorkerConfig,
    config: LogHubConfig,
    factory: F,
    observer: Observer,
    shutdown_signal: Option<ShutdownSignal>,
}

impl<F> std::fmt::Debug for LogHubConsumerBuilder<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHubConsumerBuilder")
            .field("project", &self.project)
            .field("logstore", &self.logstore)
            .field("id", &self.id)
            .field("worker_config", &self.worker_config)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<F> LogHubConsumerBuilder<F> {
    /// Sets the worker's configuration (lease duration, intervals; its
    /// [`quiet_period`](WorkerConfig::quiet_period) is the hold after every move before the
    /// new owner starts). Default: [`WorkerConfig::default`].
    #[must_use]
    pub fn worker_config(mut self, config: WorkerConfig) -> Self {
        self.worker_config = config;
        self
    }

    /// Sets how log groups are read. Default: [`LogHubConfig::default`].
    #[must_use]
    pub fn config(mut self, config: LogHubConfig) -> Self {
        self.config = config;
        self
    }

    /// Calls `observer` for every [`ConsumerEvent`] (on the consumer's tasks: return quickly).
    #[must_use]
    pub fn on_event(mut self, observer: impl Fn(ConsumerEvent) + Send + Sync + 'static) -> Self {
        self.observer = Arc::new(observer);
        self
    }

    /// Leaves gracefully, as [`LogHubConsumer::shutdown`] does, when `signal` completes;
    /// [`LogHubConsumer::stopped`] resolves once it has.
    #[must_use]
    pub fn graceful_shutdown_on(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.shutdown_signal = Some(ShutdownSignal::new(signal));
        self
    }

    /// Sets the processor factory: one processor per acquired lease.
    pub fn processor<P: ProcessorFactory>(self, factory: P) -> LogHubConsumerBuilder<P> {
        LogHubConsumerBuilder {
            client: self.client,
            project: self.project,
            logstore: self.logstore,
            store: self.store,
            id: self.id,
            worker_config: self.worker_config,
            config: self.config,
            factory,
            observer: self.observer,
            shutdown_signal: self.shutdown_signal,
        }
    }

    /// Validates the configuration, checks that the logstore can be listed
    /// ([`LogHubShardSource::check`]: a missing project or logstore, refused credentials or
    /// an unreachable endpoint fail here, in one line), creates the consumer group of the
    /// checkpoints' mirror if one is configured and missing, and starts the worker and its
    /// record loops.
    pub async fn start(self) -> Result<LogHubConsumer, ConsumerError>
    where
        F: ProcessorFactory,
    {
        self.config.validate()?;
        let client = Arc::new(self.client);
        let source = Arc::new(LogHubShardSource::new(
            Arc::clone(&client),
            self.project.clone(),
            self.logstore.clone(),
        ));
        source.check().await?;
        if let Some(group) = &self.config.consumer_group {
            let timeout = self.config.call_timeout;
            mirror::ensure(&client, &self.project, &self.logstore, group, timeout)
                .await
                .map_err(|reason| ConsumerError::ConsumerGroup {
                    project: self.project.clone(),
                    logstore: self.logstore.clone(),
                    group: group.name.clone(),
                    reason,
                })?;
        }
        let (worker, events) = Worker::builder(self.store, self.id.clone())
            .config(self.worker_config)
            .source(Arc::clone(&source))
            .shutdown_signal(self.shutdown_signal)
            .start()
            .await?;
        let observer = self.observer;
        let context = Arc::new(ReaderContext {
            source,
            client,
            config: self.config,
            observer: Arc::clone(&observer),
        });
        let factory = self.factory;
        let record_loop = move |grant: LeaseGrant| {
            let key = grant.key().clone();
            (context.observer)(ConsumerEvent::Acquired {
                key: key.clone(),
                checkpoint: grant.initial_checkpoint().map(str::to_owned),
            });
            reader::run(Arc::clone(&context), grant, factory.create(&key))
        };
        let span = tracing::info_span!("shardlease", worker = %self.id, task = "loghub-consumer");
        let running = Running::start(worker, events, span, record_loop, move |event| {
            observer(ConsumerEvent::Lease(event));
        });
        Ok(LogHubConsumer { running })
    }
}

/// A running LogHub consumer. [`shutdown`](Self::shutdown) leaves gracefully (every processor
/// is asked to checkpoint, leases are released); dropping it is a crash for the lease table
/// (its leases expire), while its processors are told their leases are lost.
#[derive(Debug)]
pub struct LogHubConsumer {
    running: Running,
}

impl LogHubConsumer {
    /// A builder for a consumer of `logstore` in `project` through `client`, keeping leases
    /// in `store` as worker `id`. Set the processor factory with
    /// [`processor`](LogHubConsumerBuilder::processor).
    pub fn builder(
        client: Client,
        project: impl Into<String>,
        logstore: impl Into<String>,
        store: Arc<dyn LeaseStore>,
        id: WorkerId,
    ) -> LogHubConsumerBuilder<NoProcessor> {
        LogHubConsumerBuilder {
            client,
            project: project.into(),
            logstore: logstore.into(),
            store,
            id,
            worker_config: WorkerConfig::default(),
            config: LogHubConfig::default(),
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

    /// Resolves once the consumer has left gracefully and every record loop has ended (after
    /// the signal of `graceful_shutdown_on`, after [`shutdown`](Self::shutdown), or after an
    /// operator drained its worker). Pending until then.
    pub async fn stopped(&self) {
        self.running.stopped().await;
    }
}
