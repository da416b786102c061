//! A consumer's process as both consumers run it: the worker, a dispatcher that starts a
//! record loop on a task of its own for every lease acquired ([`Running::start`]), and the
//! graceful way out ([`Running::shutdown`], [`Running::stopped`]).

use std::collections::HashMap;
use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::lease::LeaseKey;
use crate::worker::{LeaseEvent, LeaseEvents, LeaseGrant, Worker};

/// A running consumer: its worker, its dispatcher and the record loops it started.
pub(crate) struct Running {
    worker: Option<Worker>,
    dispatcher: JoinHandle<()>,
    /// Cancelled when the dispatcher ends (the worker's events ended).
    dispatched: CancellationToken,
    readers: TaskTracker,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Dispatches `events`: every lease acquired gets the record loop `record_loop` makes of
    /// its grant, on a task of its own in `span`'s name; every other event goes to `other`. A
    /// lease lost and acquired again here (a new tenure) while its previous loop still runs
    /// waits for that loop to end first, so one process never has two loops on one shard.
    pub(crate) fn start<L, F>(
        worker: Worker,
        events: LeaseEvents,
        span: tracing::Span,
        record_loop: L,
        other: impl Fn(LeaseEvent) + Send + 'static,
    ) -> Self
    where
        L: Fn(LeaseGrant) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let readers = TaskTracker::new();
        let dispatched = CancellationToken::new();
        let done = dispatched.clone().drop_guard();
        let tracker = readers.clone();
        let dispatcher = tokio::spawn(
            async move {
                let _done = done;
                dispatch(events, tracker, record_loop, other).await;
            }
            .instrument(span),
        );
        Self {
            worker: Some(worker),
            dispatcher,
            dispatched,
            readers,
        }
    }

    /// The worker.
    pub(crate) fn worker(&self) -> &Worker {
        self.worker.as_ref().expect("present until shutdown")
    }

    /// Leaves gracefully: the worker asks every record loop to stop and releases its leases
    /// once they finished; then the loops end and the worker leaves the fleet.
    pub(crate) async fn shutdown(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.shutdown().await;
        }
        self.readers.close();
        self.readers.wait().await;
        let _ = (&mut self.dispatcher).await;
    }

    /// Resolves once the worker has left gracefully and every record loop has ended.
    pub(crate) async fn stopped(&self) {
        self.worker().stopped().await;
        // The worker's events have ended: the dispatcher starts no record loop after this.
        self.dispatched.cancelled().await;
        self.readers.close();
        self.readers.wait().await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The worker's own drop tells every grant its lease is lost; the record loops stop.
        self.dispatcher.abort();
    }
}

async fn dispatch<L, F>(
    mut events: LeaseEvents,
    readers: TaskTracker,
    record_loop: L,
    other: impl Fn(LeaseEvent),
) where
    L: Fn(LeaseGrant) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let mut running: HashMap<LeaseKey, JoinHandle<()>> = HashMap::new();
    while let Some(event) = events.recv().await {
        let grant = match event {
            LeaseEvent::Acquired(grant) => grant,
            // Everything else is reported as the worker reported it. (A record loop finishes
            // its grant on every path: an abandonment means a loop's task ended some other
            // way.)
            event => {
                other(event);
                continue;
            }
        };
        let key = grant.key().clone();
        running.retain(|_, previous| !previous.is_finished());
        let previous = running.remove(&key);
        let span = tracing::info_span!("record_loop", lease_key = %key);
        let reading = record_loop(grant);
        let task = async move {
            if let Some(previous) = previous {
                tracing::info!("waiting for the previous record loop of this shard to end");
                let _ = previous.await;
            }
            reading.await;
        };
        running.insert(key, readers.spawn(task.instrument(span)));
    }
}
