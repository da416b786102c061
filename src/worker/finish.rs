//! The control task (fencing by local validity, reporting waiting leases, reacting to finished
//! grants) and the store writes that end a lease's tenure here: handoff and release.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::grant::LeaseEvent;
use super::metrics;
use super::state::{Finish, Phase, Shared};
use crate::lease::LeaseKey;
use crate::store::Outcome;

/// Hands a finished lease over, or releases it, in a tracked task.
pub(crate) fn spawn_finish(shared: &Arc<Shared>, key: LeaseKey, finish: Finish) {
    let task_shared = Arc::clone(shared);
    let cancel = shared.cancel.clone();
    shared.jobs.spawn(
        async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = finish_now(&task_shared, key, finish) => {}
            }
        }
        .in_current_span(),
    );
}

async fn finish_now(shared: &Shared, key: LeaseKey, finish: Finish) {
    let deadline = Instant::now() + shared.config.store_timeout;
    let me = &shared.id;
    match finish {
        Finish::HandOff { tenure, to } => {
            match shared
                .store
                .complete_handoff(&key, me, tenure, &to, deadline)
                .await
            {
                Ok(Outcome::Done(_)) => {
                    metrics::handed_off(me);
                    tracing::info!(lease_key = %key, to = %to, "lease handed over");
                    shared.emit(LeaseEvent::HandedOff { key, to });
                }
                Ok(Outcome::LostRace { current }) => {
                    tracing::info!(lease_key = %key, owner = ?current.and_then(|l| l.owner), "handoff already overtaken");
                }
                Err(err) => {
                    metrics::store_error(me, "complete_handoff");
                    tracing::warn!(lease_key = %key, error = %err, "handoff write failed; the requester takes the lease after its timeout");
                }
            }
        }
        Finish::Release { tenure } => {
            match shared.store.release(&key, me, tenure, deadline).await {
                Ok(Outcome::Done(_)) => {
                    tracing::info!(lease_key = %key, "lease released");
                    shared.emit(LeaseEvent::Released { key });
                }
                Ok(Outcome::LostRace { .. }) => {
                    tracing::info!(lease_key = %key, "release overtaken: the lease had moved on");
                }
                Err(err) => {
                    metrics::store_error(me, "release");
                    tracing::warn!(lease_key = %key, error = %err, "release failed; the lease will expire instead");
                }
            }
        }
    }
}

/// Fences leases whose validity ran out, reports waiting leases when their time comes, and
/// acts on grants the application finished.
pub(crate) async fn control(
    shared: Arc<Shared>,
    mut finished: mpsc::UnboundedReceiver<(LeaseKey, u64)>,
    cancel: CancellationToken,
) {
    loop {
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (key, held) in &shared.lock().held {
            if held.valid_until <= now {
                expired.push((key.clone(), held.tenure));
                continue;
            }
            let mut wake = held.valid_until;
            if let Phase::Waiting { report_at } = held.phase {
                if report_at <= now {
                    due.push(key.clone());
                } else {
                    wake = wake.min(report_at);
                }
            }
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
        for (key, tenure) in expired {
            shared.lose(
                &key,
                Some(tenure),
                "validity ended without a successful renewal",
            );
        }
        for key in due {
            shared.report(&key);
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = shared.changed.notified() => {}
            _ = sleep => {}
            message = finished.recv() => {
                let Some((key, tenure)) = message else { return };
                if let Some(finish) = shared.finish(&key, tenure) {
                    spawn_finish(&shared, key, finish);
                }
            }
        }
    }
}
