//! The worker: a renewer, a taker and a control task over one lease store, and the
//! application's view of the leases it holds.
//!
//! ```
//! use std::sync::Arc;
//! use shardlease::store::memory::InMemoryStore;
//! use shardlease::worker::{LeaseEvent, StopReason, Worker};
//! use shardlease::{LeaseKey, WorkerId};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(InMemoryStore::new());
//! let shards = (0..4).map(|i| LeaseKey::new(format!("shard-{i}"))).collect::<Result<_, _>>()?;
//! let (worker, mut events) = Worker::builder(store, WorkerId::new("host-a")?)
//!     .shards(shards)
//!     .start()
//!     .await?;
//! while let Some(event) = events.recv().await {
//!     if let LeaseEvent::Acquired(mut grant) = event {
//!         tokio::spawn(async move {
//!             // ... process records of grant.key() from grant.initial_checkpoint() on ...
//!             let reason = grant.stopped().await;
//!             if !matches!(reason, StopReason::Lost) {
//!                 let _ = grant.checkpoint("last-processed").await;
//!             }
//!             grant.finish();
//!         });
//!     }
//!     if worker.held_leases().len() == 4 {
//!         break;
//!     }
//! }
//! worker.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod bounded;
mod checkpoint;
mod control;
mod discoverer;
mod earlier_build;
mod event;
mod fenced;
mod finish;
mod grant;
mod health;
mod identity;
mod load;
mod metrics;
mod own;
mod parts;
mod session;
mod state;
mod stop;
mod take;
mod taker;
mod watcher;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use self::event::{LeaseEvent, LeaseEvents};
pub use self::grant::{CheckpointError, Checkpointer, LeaseGrant};
pub use self::load::InvalidLoad;
pub use self::state::Stall;
pub use self::stop::StopReason;

use self::finish::spawn_finish;
use self::own::OwnSession;
use self::parts::EventSink;
use self::state::{Holder, Phase};
use crate::balance::{BalancePolicy, CountBalance, LoadBalance};
use crate::clock::{timeout_at, Clock, TokioClock};
use crate::config::Balance;
use crate::config::{ConfigError, WorkerConfig};
use crate::lease::{Incarnation, LeaseKey, NewLease, WorkerId};
use crate::source::ShardSource;
use crate::store::{LeaseStore, StoreError};

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not be reached or refused a startup write.
    #[error("worker {worker} could not start")]
    Store {
        /// The worker.
        worker: WorkerId,
        /// What the store said.
        #[source]
        source: StoreError,
    },
    /// Live workers of an earlier build of this crate, which renewed every lease itself (the
    /// lease protocol, since removed), use the table. The two read each other's items wrongly,
    /// so they never share a table.
    #[error(
        "worker {worker} cannot start: live workers of an earlier shardlease build use this \
         table with the lease protocol, which this build no longer speaks ({}). Stop every \
         worker of the earlier build (or move them all to this build at once), then start this \
         one again: their membership records are cleared once unchanged for a lease duration",
        others.iter().map(|w| w.as_str()).collect::<Vec<_>>().join(", ")
    )]
    EarlierBuild {
        /// The worker refused.
        worker: WorkerId,
        /// The live workers of the earlier build (at most the first ten seen).
        others: Vec<WorkerId>,
    },
    /// The worker id is [`OPERATOR`](crate::lease::OPERATOR), which the operator's tools hold
    /// leases under while they write them.
    #[error(
        "worker id {worker} is reserved for the operator's tools (the shardlease command line); \
         give this worker another id"
    )]
    ReservedId {
        /// The id refused.
        worker: WorkerId,
    },
}

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    store: Arc<dyn LeaseStore>,
    id: WorkerId,
    config: WorkerConfig,
    policy: Option<Arc<dyn BalancePolicy>>,
    shards: Vec<LeaseKey>,
    source: Option<Arc<dyn ShardSource>>,
    clock: Arc<dyn Clock>,
    incarnation: Option<Incarnation>,
    shutdown_signal: Option<ShutdownSignal>,
}

/// A future that asks a worker to leave gracefully when it completes. In a mutex only so that
/// the builders holding it stay `Sync` (a `Send` future need not be).
pub(crate) struct ShutdownSignal(
    std::sync::Mutex<Pin<Box<dyn Future<Output = ()> + Send + 'static>>>,
);

impl ShutdownSignal {
    pub(crate) fn new(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(std::sync::Mutex::new(Box::pin(signal)))
    }

    fn into_future(self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("id", &self.id)
            .field("config", &self.config)
            .field("shards", &self.shards.len())
            .field("source", &self.source.is_some())
            .field("incarnation", &self.incarnation)
            .field("shutdown_signal", &self.shutdown_signal.is_some())
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Sets the configuration. Default: [`WorkerConfig::default`].
    #[must_use]
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the balancing policy. Default: the one [`WorkerConfig::balance`] names
    /// ([`CountBalance`] unless set).
    #[must_use]
    pub fn policy(mut self, policy: impl BalancePolicy) -> Self {
        self.policy = Some(Arc::new(policy));
        self
    }

    /// Leases to create at start if they do not exist (conditional creates: workers starting
    /// together do not conflict). For a set of shards that changes while the fleet runs, use
    /// [`source`](Self::source) instead.
    #[must_use]
    pub fn shards(mut self, shards: Vec<LeaseKey>) -> Self {
        self.shards = shards;
        self
    }

    /// The shard source the discoverer follows: leases for new shards, children after their
    /// parents, retirement of vanished shards. Give every worker of a fleet the same source:
    /// discovery runs on the live worker with the smallest id.
    #[must_use]
    pub fn source(mut self, source: impl ShardSource) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The clock the worker reads its time from and sleeps on. Default: [`TokioClock`].
    /// Every lease decision compares instants of this one clock; see [`crate::clock`].
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// This process's incarnation. Default: [`Incarnation::random`], drawn at
    /// [`start`](Self::start). Set it only where a test or a simulation prepared the table for
    /// this very process: two running processes with one id and one incarnation would both
    /// work on the same leases.
    #[must_use]
    pub fn incarnation(mut self, incarnation: Incarnation) -> Self {
        self.incarnation = Some(incarnation);
        self
    }

    /// Leaves gracefully, as [`Worker::shutdown`] does, when `signal` completes (a SIGTERM, a
    /// Ctrl-C, a cancellation token, the end of a test). [`Worker::stopped`] resolves once the
    /// worker has left; calling [`Worker::shutdown`] meanwhile waits for the same departure.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use shardlease::{store::memory::InMemoryStore, Worker, WorkerId};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let (worker, mut events) = Worker::builder(Arc::new(InMemoryStore::new()), WorkerId::new("w1")?)
    ///     .graceful_shutdown_on(async {
    ///         let _ = tokio::signal::ctrl_c().await;
    ///     })
    ///     .start()
    ///     .await?;
    /// tokio::spawn(async move {
    ///     while let Some(_event) = events.recv().await {
    ///         // ... start and stop the work on each lease ...
    ///     }
    /// });
    /// worker.stopped().await; // after Ctrl-C, once every lease was finished and released
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn graceful_shutdown_on(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.shutdown_signal = Some(ShutdownSignal::new(signal));
        self
    }

    /// [`graceful_shutdown_on`](Self::graceful_shutdown_on) with a signal already wrapped (the
    /// Kinesis consumer's builder passes its own on).
    #[cfg(any(feature = "kinesis", feature = "loghub"))]
    pub(crate) fn shutdown_signal(mut self, signal: Option<ShutdownSignal>) -> Self {
        self.shutdown_signal = signal;
        self
    }

    /// Validates the configuration, creates the missing leases, registers the worker's
    /// membership and starts its tasks. Returns the worker and its event stream: read the
    /// stream for as long as the worker runs (see [`LeaseEvents`]).
    ///
    /// Every store call the worker makes, from here on, ends by its deadline (on the worker's
    /// clock) whether or not the store answers: one that does not is a transient, ambiguous
    /// failure, as for a store that gives up by itself.
    pub async fn start(mut self) -> Result<(Worker, LeaseEvents), WorkerError> {
        let (store, deadline) = self.preflight().await?;
        let incarnation = self.incarnation.unwrap_or_else(Incarnation::random);
        let (sink, events) = EventSink::new();
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let policy: Arc<dyn BalancePolicy> = match self.policy.take() {
            Some(policy) => policy,
            None => match self.config.balance {
                Balance::Load => Arc::new(LoadBalance::default()),
                _ => Arc::new(CountBalance),
            },
        };
        let shared = Arc::new(Holder::new(
            self.id.clone(),
            incarnation,
            store,
            self.clock,
            self.config,
            sink,
            finished_tx,
        ));
        let own = Arc::new(OwnSession::new(Arc::clone(&shared.base)));
        open_first_session(&shared, &own, deadline).await?;
        let leaving = spawn_loops(&shared, &own, policy, self.source, finished_rx);
        let signal = self.shutdown_signal.map(ShutdownSignal::into_future);
        spawn_leave_on(&shared, &leaving, signal);
        tracing::info!(worker = %shared.id, %incarnation, "worker started");
        let worker = Worker {
            shared,
            leaving,
            stopped: false,
        };
        Ok((worker, events))
    }

    /// Before a session opens: validates the configuration and the id, bounds the store's
    /// calls by their deadlines, refuses a table an earlier build's workers use, and creates
    /// the leases given to [`shards`](Self::shards). Returns the store as the worker calls it
    /// (bounded) and the deadline the session's opening keeps to.
    async fn preflight(
        &mut self,
    ) -> Result<(Box<dyn LeaseStore>, tokio::time::Instant), WorkerError> {
        metrics::describe();
        self.config.validate()?;
        if self.id.is_operator() {
            return Err(WorkerError::ReservedId {
                worker: self.id.clone(),
            });
        }
        // A box, not an `Arc`: the worker calls the bounded store itself, not through the
        // forwarding of `Arc<S>` (see `store::layer`).
        let store: Box<dyn LeaseStore> = Box::new(bounded::Bounded::new(
            Arc::clone(&self.store),
            Arc::clone(&self.clock),
        ));
        let deadline = self.clock.now() + self.config.store_timeout;
        earlier_build::before_start(
            store.as_ref(),
            self.clock.as_ref(),
            self.config.lease_duration,
            self.config.store_timeout,
            deadline,
        )
        .await
        .map_err(|r| refused(&self.id, r))?;
        let deadline = deadline.max(self.clock.now() + self.config.store_timeout);
        for key in &self.shards {
            let _ = store
                .create(NewLease::new(key.clone()), deadline)
                .await
                .map_err(|source| WorkerError::Store {
                    worker: self.id.clone(),
                    source,
                })?;
        }
        Ok((store, deadline))
    }
}

/// The error for a start refused because of an earlier build's workers.
fn refused(worker: &WorkerId, refusal: earlier_build::Refusal) -> WorkerError {
    match refusal {
        earlier_build::Refusal::Store(source) => WorkerError::Store {
            worker: worker.clone(),
            source,
        },
        earlier_build::Refusal::Live(mut others) => {
            others.truncate(10);
            WorkerError::EarlierBuild {
                worker: worker.clone(),
                others,
            }
        }
    }
}

/// Opens the worker's first session by `deadline`; if a worker of an earlier build started
/// meanwhile, removes the record again and refuses.
async fn open_first_session(
    shared: &Holder,
    own: &OwnSession,
    deadline: tokio::time::Instant,
) -> Result<(), WorkerError> {
    let fail = |source| WorkerError::Store {
        worker: shared.id.clone(),
        source,
    };
    if !session::open(shared, own, deadline).await.map_err(fail)? {
        return Err(fail(StoreError::Transient {
            operation: "open_session",
            key: shared.id.to_string(),
            ambiguous: false,
            source: "the worker's membership record kept changing while the session was \
                     being opened: is another process starting with this worker id?"
                .into(),
        }));
    }
    if let Err(refusal) = earlier_build::after_start(shared.store.as_ref(), deadline).await {
        // A worker of an earlier build started meanwhile: this one leaves no record.
        let deadline = shared.now() + shared.config.store_timeout;
        let heartbeat = own.lock().heartbeat;
        let removed = shared
            .store
            .end_session(&shared.id, shared.incarnation(), heartbeat, deadline)
            .await;
        if let Err(error) = removed {
            tracing::warn!(%error, "could not remove this worker's membership record after refusing to start");
        }
        return Err(refused(&shared.id, refusal));
    }
    Ok(())
}

/// Starts the worker's loops: the session's beat, the watcher, the control loop, the taker
/// and (with a shard source) the discoverer.
fn spawn_loops(
    shared: &Arc<Holder>,
    own: &Arc<OwnSession>,
    policy: Arc<dyn BalancePolicy>,
    source: Option<Arc<dyn ShardSource>>,
    finished: mpsc::UnboundedReceiver<stop::Finished>,
) -> Arc<Leaving> {
    let loops = TaskTracker::new();
    let taker_cancel = shared.cancel.child_token();
    let heartbeat_cancel = shared.cancel.child_token();
    let span = |task: &'static str| tracing::info_span!("shardlease", worker = %shared.id, task);
    // Beats go on while the worker leaves (publishing capacity 0), and stop before
    // `shutdown` ends the session.
    let beats = Arc::new(session::Beats::default());
    let announced = Arc::new(parts::Announced::default());
    let unacknowledged = Arc::new(take::Unacknowledged::default());
    let ring = Arc::new(parts::Ring::default());
    let view = source.as_ref().map(|_| watch::Sender::new(None));
    let session = session::SessionLoop {
        holder: Arc::clone(shared),
        own: Arc::clone(own),
        beats: Arc::clone(&beats),
        announced: Arc::clone(&announced),
        unacknowledged: Arc::clone(&unacknowledged),
        watched: ring.watched.subscribe(),
    };
    loops.spawn(
        session::run(Arc::new(session), heartbeat_cancel.clone()).instrument(span("session")),
    );
    let watcher = watcher::WatcherParts {
        base: Arc::clone(&shared.base),
        ring: Arc::clone(&ring),
        fences: Arc::clone(&shared.fences),
        rescan: Arc::clone(&shared.rescan),
    };
    loops.spawn(watcher::run(watcher, taker_cancel.clone()).instrument(span("watcher")));
    loops.spawn(
        control::control(Arc::clone(shared), finished, shared.cancel.clone())
            .instrument(span("control")),
    );
    let subscribed = view.as_ref().map(watch::Sender::subscribe);
    let taker = taker::TakerParts {
        own: Arc::clone(own),
        ring,
        view,
        announced,
        unacknowledged,
    };
    loops.spawn(
        taker::Taker::new(Arc::clone(shared), taker, policy)
            .run(taker_cancel.clone())
            .instrument(span("taker")),
    );
    if let (Some(source), Some(view)) = (source, subscribed) {
        loops.spawn(
            discoverer::run(
                Arc::clone(&shared.base),
                view,
                Arc::clone(&shared.rescan),
                source,
                taker_cancel.clone(),
            )
            .instrument(span("discoverer")),
        );
    }
    Arc::new(Leaving {
        own: Arc::clone(own),
        beats,
        loops,
        taker_cancel,
        heartbeat_cancel,
        started: AtomicBool::new(false),
        done: CancellationToken::new(),
    })
}

/// Leaves gracefully on the shutdown signal, if any, or when an operator asks this process to
/// drain (`shardlease drain`).
fn spawn_leave_on(
    shared: &Arc<Holder>,
    leaving: &Arc<Leaving>,
    signal: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
) {
    let span = tracing::info_span!("shardlease", worker = %shared.id, task = "shutdown-signal");
    let shared = Arc::clone(shared);
    let leaving = Arc::clone(leaving);
    tokio::spawn(
        async move {
            let signal = async {
                match signal {
                    Some(signal) => signal.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                // Dropped (a crash) or already left.
                _ = shared.cancel.cancelled() => {}
                _ = leaving.done.cancelled() => {}
                _ = signal => {
                    tracing::info!(worker = %shared.id, "shutdown signal received");
                    leave(&shared, &leaving).await;
                }
                _ = leaving.beats.drain.cancelled() => {
                    leave(&shared, &leaving).await;
                }
            }
        }
        .instrument(span),
    );
}

/// A running worker. Call [`shutdown`](Self::shutdown) to leave gracefully; dropping it
/// without that behaves like a crash (its leases expire), except that every grant is told
/// its lease is lost, so nothing goes on processing.
pub struct Worker {
    shared: Arc<Holder>,
    leaving: Arc<Leaving>,
    stopped: bool,
}

/// What a graceful departure needs, shared by [`Worker::shutdown`] and the shutdown signal's
/// task: whichever comes first leaves, the other waits for it.
struct Leaving {
    /// This process's session: ended as the worker leaves.
    own: Arc<OwnSession>,
    /// The session loop's wake-ups: a departure beats at once, and starts on a drain notice.
    beats: Arc<session::Beats>,
    loops: TaskTracker,
    taker_cancel: CancellationToken,
    heartbeat_cancel: CancellationToken,
    started: AtomicBool,
    done: CancellationToken,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.shared.id)
            .field("held", &self.held_leases())
            .finish()
    }
}

/// Reads a worker's held leases, and whether any of them is stalled, from anywhere; see
/// [`Worker::monitor`]. [`ready`](Self::ready) and [`healthy`](Self::healthy) are the answers
/// of a readiness and a liveness probe (`examples/prometheus.rs` serves them over HTTP).
#[derive(Clone)]
pub struct WorkerMonitor {
    shared: Arc<Holder>,
    own: Arc<OwnSession>,
}

impl WorkerMonitor {
    /// The worker's id.
    pub fn id(&self) -> &WorkerId {
        &self.shared.id
    }

    /// As [`Worker::held_leases`].
    pub fn held_leases(&self) -> Vec<LeaseKey> {
        self.shared.held_now()
    }

    /// The leases this worker holds in the table that nobody processes, with the reason, in
    /// key order. A lease is stalled when:
    ///
    /// - [`Stall::Undelivered`]: it was reported to the application (it is active, or asked
    ///   to stop) but its grant waits unread in the event stream ([`LeaseEvents`]) while the
    ///   lease is renewed;
    /// - [`Stall::Abandoned`]: its grant was dropped while active, without `finish` or a stop
    ///   request, and its release is not answered yet; if the release fails, until the
    ///   validity the lease had here ends (then peers may take it);
    /// - [`Stall::NoProgress`], only with
    ///   [`progress_window`](crate::WorkerConfig::progress_window) set: it is active and its
    ///   application made no progress (a checkpoint, [`LeaseGrant::progress`]) within the
    ///   window;
    /// - [`Stall::Halted`]: it is active and its application halted it
    ///   ([`LeaseGrant::halt`]) for a failure it cannot get past, and made no progress since.
    ///
    /// Without a progress window, a lease whose grant the application holds counts as
    /// processed: the worker cannot see inside the application (a task stuck in a loop while
    /// keeping its grant is caught only by the window; the Kinesis consumer catches its
    /// processors' panics and releases, and reports progress by itself).
    pub fn stalled_leases(&self) -> Vec<(LeaseKey, Stall)> {
        self.shared.stalled()
    }

    /// True when no lease is stalled ([`stalled_leases`](Self::stalled_leases) is empty).
    /// Unlike [`healthy`](Self::healthy) it says nothing of the worker itself: it stays true
    /// after the worker stopped.
    pub fn nothing_stalled(&self) -> bool {
        self.stalled_leases().is_empty()
    }

    /// The readiness answer: the worker takes part in the fleet now. True while all of these
    /// hold:
    ///
    /// - it is running: started, not leaving ([`Worker::shutdown`] or the signal of
    ///   [`graceful_shutdown_on`](WorkerBuilder::graceful_shutdown_on)), not stopped or
    ///   dropped;
    /// - its session is open and valid here (its last beat landed within the lease
    ///   validity); while it reopens a lost session, it is not ready;
    /// - its store round trips are fast enough to hold leases (the beats answered within
    ///   `renew_interval`); otherwise it takes nothing and publishes capacity 0.
    ///
    /// It says nothing of the application: see [`healthy`](Self::healthy). Not ready is a
    /// reason to keep traffic or new work away, not to restart the process: it comes back by
    /// itself when the store does.
    pub fn ready(&self) -> bool {
        let shared = &self.shared;
        !shared.cancel.is_cancelled()
            && !shared.lock().shutting_down
            && !shared.health.is_slow()
            && self.own.valid()
    }

    /// The liveness answer: nothing here needs a restart. True while the worker has not
    /// stopped (starting, running, not ready, or leaving gracefully all count) and no lease
    /// it holds is stalled ([`stalled_leases`](Self::stalled_leases) is empty: every grant
    /// delivered and kept, and, with
    /// [`progress_window`](crate::WorkerConfig::progress_window) set, every active lease made
    /// progress within the window). False once the worker stopped or was dropped: the
    /// process has nothing left to do.
    pub fn healthy(&self) -> bool {
        !self.shared.cancel.is_cancelled() && self.nothing_stalled()
    }
}

impl std::fmt::Debug for WorkerMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMonitor")
            .field("id", &self.shared.id)
            .finish()
    }
}

impl Worker {
    /// A builder for a worker `id` over `store`. It prints what it was given (`{:?}`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use shardlease::store::memory::InMemoryStore;
    /// use shardlease::{Worker, WorkerId};
    ///
    /// let builder = Worker::builder(Arc::new(InMemoryStore::new()), WorkerId::new("host-a")?);
    /// assert!(format!("{builder:?}").contains("host-a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(store: Arc<dyn LeaseStore>, id: WorkerId) -> WorkerBuilder {
        WorkerBuilder {
            store,
            id,
            config: WorkerConfig::default(),
            policy: None,
            shards: Vec::new(),
            source: None,
            clock: Arc::new(TokioClock),
            incarnation: None,
            shutdown_signal: None,
        }
    }

    /// This worker's id.
    pub fn id(&self) -> &WorkerId {
        &self.shared.id
    }

    /// Reports this worker's utilisation (1.0: fully used; CPU share, or anything the
    /// application measures the same way on every worker), published with its next load
    /// report; `None` withdraws it. With [`Balance::Load`], a worker reporting more than
    /// 85 % sheds its hottest leases until it would be at 85 %. Refuses a figure that is not
    /// a finite number at least 0.
    pub fn report_utilisation(&self, utilisation: Option<f64>) -> Result<(), InvalidLoad> {
        let utilisation = utilisation.map(load::check).transpose()?;
        self.shared.loads.set_utilisation(utilisation);
        Ok(())
    }

    /// This process's incarnation (see [`Incarnation`]).
    pub fn incarnation(&self) -> Incarnation {
        self.shared.incarnation()
    }

    /// The leases the application may work on now (reported, not finished, locally valid).
    pub fn held_leases(&self) -> Vec<LeaseKey> {
        self.shared.held_now()
    }

    /// A cheap, cloneable handle that reads this worker's held and stalled leases (for health
    /// and readiness checks, and tests); it does not keep the worker running.
    pub fn monitor(&self) -> WorkerMonitor {
        WorkerMonitor {
            shared: Arc::clone(&self.shared),
            own: Arc::clone(&self.leaving.own),
        }
    }

    /// Leaves gracefully: stops taking, asks the application to finish every lease, releases
    /// each one as soon as it is finished (peers take it within one taker round), removes the
    /// membership record and waits for every task. Leases the application does not finish
    /// within `shutdown_timeout` are not released: they expire, so nobody overlaps with it.
    ///
    /// Returns within `shutdown_timeout` + `store_timeout` whatever the store does: the
    /// releases still in flight and the removal of the membership record share that last
    /// store timeout, and every task stops at once when told to.
    pub async fn shutdown(mut self) {
        self.stopped = true;
        leave(&self.shared, &self.leaving).await;
    }

    /// Resolves once the worker has left gracefully: after [`shutdown`](Self::shutdown), or
    /// after the signal given to
    /// [`graceful_shutdown_on`](WorkerBuilder::graceful_shutdown_on) completed, or after an
    /// operator drained this process ([`admin`](crate::admin), `shardlease drain`), and every
    /// lease was finished (or left to expire) and released. Pending until then.
    pub async fn stopped(&self) {
        self.leaving.done.cancelled().await;
    }
}

/// Leaves gracefully (see [`Worker::shutdown`]), once: a second caller waits for the first.
async fn leave(shared: &Arc<Holder>, leaving: &Leaving) {
    if leaving.started.swap(true, Ordering::SeqCst) {
        leaving.done.cancelled().await;
        return;
    }
    leaving.taker_cancel.cancel();
    let deadline = shared.now() + shared.config.shutdown_timeout;
    let (asking, leases) = stop_taking(shared);
    tracing::info!(worker = %shared.id, leases = leases.len(), "shutting down");
    // Where the released leases go: read now, not at the last placement round.
    let _ = timeout_at(
        &*shared.clock,
        deadline,
        shared.refresh_receivers(shared.now() + shared.config.store_timeout),
    )
    .await;
    // Tell the peers at once that this worker takes nothing more (a heartbeat with capacity
    // 0), so that they take the leases it releases instead of leaving them to it.
    leaving.beats.beat_now.notify_one();
    // Handoffs asked by this worker whose owners were not told yet (the taker stopped in
    // the middle): told now, they are done (and given on) at once, not when the chores
    // find them long after the fleet settled
    // (`sessions_a_leaving_worker_tells_the_owners_it_asked` in `sim/tests/simulate.rs`).
    tell_owners(shared, asking, deadline).await;
    for (key, nonce, tenure, phase) in leases {
        if let Some(finish) = finish_on_leaving(shared, &key, nonce, tenure, phase, deadline) {
            spawn_finish(shared, key, finish);
        }
    }
    let _ = timeout_at(&*shared.clock, deadline, shared.all_finished()).await;
    let unfinished: Vec<LeaseKey> = shared.lock().held.keys().cloned().collect();
    for key in unfinished {
        shared.lose(
            &key,
            None,
            "the application did not finish before the shutdown timeout; left to expire",
        );
    }
    leaving.heartbeat_cancel.cancel();
    end_everything(shared, leaving, deadline).await;
    tracing::info!(worker = %shared.id, "worker stopped");
    leaving.done.cancel();
}

/// A held lease at the start of a departure: its key, item, tenure and phase here.
type LeavingLease = (LeaseKey, u64, u64, Phase);

/// Marks the worker as shutting down (it takes and asks for nothing more) and returns the
/// handoffs it asked for whose owners may not know yet, and the leases it holds.
fn stop_taking(
    shared: &Holder,
) -> (
    BTreeMap<LeaseKey, (WorkerId, Incarnation)>,
    Vec<LeavingLease>,
) {
    let mut state = shared.lock();
    state.shutting_down = true;
    state.pending.clear();
    let asking = std::mem::take(&mut state.asking);
    let leases = state
        .held
        .iter()
        .map(|(k, h)| (k.clone(), h.nonce, h.tenure, h.phase.clone()))
        .collect();
    (asking, leases)
}

/// What a departure does with one lease held here, by its phase.
fn finish_on_leaving(
    shared: &Holder,
    key: &LeaseKey,
    nonce: u64,
    tenure: u64,
    phase: Phase,
    deadline: tokio::time::Instant,
) -> Option<state::Finish> {
    match phase {
        // Never reported: nothing to finish here. Released at once only when its report time
        // has come (a quiet period): a forced take (a handoff timeout, a steal, another
        // process of this id, an unanswered take) waits for the previous holder's validity to
        // end, and that holder may still be processing; a released lease is started at once
        // by whoever takes it. Such a lease is left to expire instead, which no peer acts on
        // before that validity has ended.
        Phase::Waiting { report_at } => {
            shared.lock().held.remove(key);
            if report_at <= shared.now() {
                Some(state::Finish::Release {
                    nonce,
                    tenure,
                    ended: false,
                })
            } else {
                tracing::info!(lease_key = %key, "taken by force and not yet reported; left to expire rather than released");
                None
            }
        }
        Phase::Active => shared.request_stop(key, tenure, StopReason::Shutdown { deadline }),
        Phase::Stopping(_) => None,
    }
}

/// The end of a departure, once the beats stopped: waits for the releases in flight and ends
/// the session (both by one store deadline), then stops the loops and closes the event
/// stream.
async fn end_everything(shared: &Arc<Holder>, leaving: &Leaving, deadline: tokio::time::Instant) {
    shared.jobs.close();
    let store_deadline = shared.now().min(deadline) + shared.config.store_timeout;
    let releases = timeout_at(&*shared.clock, store_deadline, shared.jobs.wait());
    let _ = tokio::join!(
        releases,
        end_own_session(shared, &leaving.own, store_deadline)
    );
    shared.cancel.cancel();
    leaving.loops.close();
    leaving.loops.wait().await;
    shared.events.close();
}

/// Tells the owners of leases this worker asked for (`State::asking`) to look at them, one
/// notice per owner, within `deadline`.
async fn tell_owners(
    shared: &Holder,
    asking: BTreeMap<LeaseKey, (WorkerId, Incarnation)>,
    deadline: tokio::time::Instant,
) {
    let mut by_owner: BTreeMap<_, Vec<String>> = BTreeMap::new();
    for (key, owner) in asking {
        by_owner
            .entry(owner)
            .or_default()
            .push(key.as_str().to_owned());
    }
    for ((owner, incarnation), keys) in by_owner {
        tracing::info!(owner = %owner, leases = keys.len(), "leaving: telling an owner of handoffs asked");
        let told = shared.notify(&owner, incarnation, &keys, deadline);
        let _ = timeout_at(&*shared.clock, deadline, told).await;
    }
}

/// Ends this process's session as it leaves (its record removed, if it is still
/// this process's). A beat cut short by the shutdown may have landed unseen: then the record
/// is read and ended at the heartbeat it shows.
async fn end_own_session(shared: &Holder, own: &OwnSession, deadline: tokio::time::Instant) {
    let mut heartbeat = own.lock().heartbeat;
    for _ in 0..3 {
        let ended = shared
            .store
            .end_session(&shared.id, shared.incarnation(), heartbeat, deadline)
            .await;
        match ended {
            Ok(crate::store::Outcome::Done(_)) => return,
            Ok(crate::store::Outcome::LostRace {
                current: Some(current),
            }) if current.incarnation == Some(shared.incarnation()) => {
                heartbeat = current.heartbeat;
            }
            Ok(crate::store::Outcome::LostRace { .. }) => return,
            Err(err) => {
                tracing::warn!(error = %err, "could not end the session; it will expire");
                return;
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A departure the shutdown signal started goes on without this handle.
        if !self.stopped && !self.leaving.started.load(Ordering::SeqCst) {
            self.shared.cancel.cancel();
            self.shared.lose_all_locally();
            self.shared.events.close();
        }
    }
}
