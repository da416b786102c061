//! A listener trait over the event stream, for applications that prefer callbacks.

use tokio::sync::mpsc;

use super::event::LeaseEvent;
use super::grant::LeaseGrant;
use super::stop::StopReason;
use crate::lease::{LeaseKey, WorkerId};

/// Callbacks for lease events; every method but [`on_acquired`](Self::on_acquired) defaults
/// to doing nothing. Methods run on the listener's own task, one event at a time, and must
/// return quickly: spawn the processing of a lease onto a task of its own.
pub trait LeaseListener: Send + 'static {
    /// A lease was acquired. Keep the grant while working on it, and finish (or drop) it once
    /// asked to stop. There is no default: a grant dropped while its lease is active abandons
    /// the lease (it is released and reported, see [`LeaseEvent::Abandoned`]), so a listener
    /// that ignored its grants would hold no lease for long, and do so noisily.
    fn on_acquired(&mut self, grant: LeaseGrant);

    /// The application must stop working on `key` (the grant's signal fires too).
    fn on_stop_requested(&mut self, _key: &LeaseKey, _reason: &StopReason) {}

    /// `key` was handed over to `to`.
    fn on_handed_off(&mut self, _key: &LeaseKey, _to: &WorkerId) {}

    /// `key` was released on shutdown.
    fn on_released(&mut self, _key: &LeaseKey) {}

    /// `key` was lost.
    fn on_lost(&mut self, _key: &LeaseKey) {}

    /// `key`'s shard was processed to its end and its lease released.
    fn on_shard_ended(&mut self, _key: &LeaseKey) {}

    /// `key`'s shard left the source and its lease was deleted.
    fn on_retired(&mut self, _key: &LeaseKey) {}

    /// Another live process uses this worker's id `worker` (see
    /// [`LeaseEvent::DuplicateWorkerId`]).
    fn on_duplicate_worker_id(&mut self, _worker: &WorkerId) {}

    /// `key`'s grant was dropped while active, without a finish or a stop request; the lease
    /// is being released.
    fn on_abandoned(&mut self, _key: &LeaseKey) {}
}

/// Feeds `events` to `listener` until the stream ends (when the worker stops).
pub(crate) async fn dispatch(
    mut events: mpsc::UnboundedReceiver<LeaseEvent>,
    mut listener: impl LeaseListener,
) {
    while let Some(event) = events.recv().await {
        match event {
            LeaseEvent::Acquired(grant) => listener.on_acquired(grant),
            LeaseEvent::StopRequested { key, reason } => listener.on_stop_requested(&key, &reason),
            LeaseEvent::HandedOff { key, to } => listener.on_handed_off(&key, &to),
            LeaseEvent::Released { key } => listener.on_released(&key),
            LeaseEvent::Lost { key } => listener.on_lost(&key),
            LeaseEvent::ShardEnded { key } => listener.on_shard_ended(&key),
            LeaseEvent::Retired { key } => listener.on_retired(&key),
            LeaseEvent::DuplicateWorkerId { worker } => listener.on_duplicate_worker_id(&worker),
            LeaseEvent::Abandoned { key } => listener.on_abandoned(&key),
        }
    }
}
