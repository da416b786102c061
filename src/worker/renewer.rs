//! The renewer: keeps every held lease alive and learns of handoff requests from the renewal
//! answers; and, on a loop of its own, heartbeats the membership record.
//!
//! Neither waits on the other, and no renewal waits on another: a renewal still in flight at
//! the next round is left to finish (by its lease's validity at the latest) and is not sent
//! twice, so one request the store never answers costs only its own lease.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::finish::spawn_finish;
use super::metrics;
use super::state::{Phase, Shared};
use super::stop::StopReason;
use crate::clock::timeout_at;
use crate::lease::LeaseKey;
use crate::store::{Outcome, StoreError};

pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let limit = Arc::new(Semaphore::new(shared.config.max_concurrent_renewals));
    let mut renewals = JoinSet::new();
    // The lease (in its tenure) each renewal in flight is for.
    let mut in_flight: HashMap<Id, (LeaseKey, u64)> = HashMap::new();
    let mut renewing: HashSet<(LeaseKey, u64)> = HashSet::new();
    let mut tick = shared.now();
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            Some(done) = renewals.join_next_with_id() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(err) => err.id(),
                };
                if let Some(lease) = in_flight.remove(&id) {
                    renewing.remove(&lease);
                }
                continue;
            }
            _ = shared.clock.sleep_until(tick) => {}
        }
        tick = tick.max(shared.now()) + shared.config.renew_interval;
        let leases: Vec<(LeaseKey, u64, Instant)> = shared
            .lock()
            .held
            .iter()
            .map(|(key, held)| (key.clone(), held.tenure, held.valid_until))
            .collect();
        tracing::debug!(
            leases = leases.len(),
            in_flight = in_flight.len(),
            "renewal round"
        );
        for (key, tenure, valid_until) in leases {
            if !renewing.insert((key.clone(), tenure)) {
                continue;
            }
            let (task_shared, limit) = (Arc::clone(&shared), Arc::clone(&limit));
            let task_key = key.clone();
            let handle = renewals.spawn(
                async move {
                    let Ok(_permit) = limit.acquire_owned().await else {
                        return;
                    };
                    renew_one(&task_shared, task_key, tenure, valid_until).await;
                }
                .in_current_span(),
            );
            in_flight.insert(handle.id(), (key, tenure));
        }
    }
}

/// Refreshes the membership record every `renew_interval` (and at once when `beat_now` is
/// notified), one heartbeat at a time, each bounded by the next one's start: a heartbeat the
/// store never answers delays nothing else.
pub(crate) async fn heartbeats(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut next = shared.now();
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = shared.beat_now.notified() => {}
            _ = shared.clock.sleep_until(next) => {}
        }
        next = next.max(shared.now()) + shared.config.renew_interval;
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = heartbeat(&shared, next) => {}
        }
    }
}

async fn heartbeat(shared: &Shared, deadline: Instant) {
    let capacity = shared.published_capacity();
    let report = shared.load_report();
    let start = shared.now();
    let result = shared
        .store
        .heartbeat(
            &shared.id,
            shared.incarnation(),
            report.as_ref(),
            capacity,
            deadline,
        )
        .await;
    if let (Some(report), Ok(Outcome::Done(_))) = (report, &result) {
        shared.loads.published(report, start);
    }
    // A heartbeat unanswered by the next one's start (its deadline) was too slow.
    match &result {
        Ok(_) => {
            shared.health.answered(&shared.id, start, shared.now());
        }
        Err(err) if err.is_ambiguous() => shared.health.unanswered(&shared.id, start),
        Err(_) => {}
    }
    if let Ok(Outcome::Done(member)) = &result {
        shared.drain_if_asked(&member.notices);
    }
    if let Err(err) = result {
        metrics::store_error(&shared.id, "heartbeat");
        tracing::warn!(error = %err, "membership heartbeat failed");
    }
}

/// Renews one lease. Retries never run past the lease's local validity: once that has
/// passed, the fencer has already told the application to stop.
async fn renew_one(shared: &Arc<Shared>, key: LeaseKey, tenure: u64, valid_until: Instant) {
    let start = shared.now();
    if start >= valid_until {
        return;
    }
    let renewal = shared
        .store
        .renew(&key, &shared.id, tenure, None, valid_until);
    let result = timeout_at(&*shared.clock, valid_until, renewal).await;
    match &result {
        Ok(Ok(_)) => {
            shared.health.answered(&shared.id, start, shared.now());
        }
        Ok(Err(err)) if !err.is_ambiguous() => return failed(shared, &key, err),
        _ => shared.health.unanswered(&shared.id, start),
    }
    match result {
        Ok(Ok(Outcome::Done(lease))) => {
            metrics::renewal(&shared.id, start.elapsed());
            let asked = lease.handoff_to.filter(|to| *to != shared.id);
            renewed(
                shared,
                &key,
                tenure,
                start + shared.config.validity(),
                asked,
            );
        }
        Ok(Ok(Outcome::LostRace { current })) => {
            let why = match current {
                Some(lease) => format!(
                    "renewal refused: now owned by {:?} in tenure {}",
                    lease.owner, lease.tenure
                ),
                None => "renewal refused: the lease item no longer exists".to_owned(),
            };
            shared.lose(&key, Some(tenure), &why);
        }
        Ok(Err(err)) => failed(shared, &key, &err),
        Err(_) => {
            metrics::store_error(&shared.id, "renew");
            tracing::warn!(lease_key = %key, "renewal unanswered until the lease's validity ended");
        }
    }
}

fn failed(shared: &Shared, key: &LeaseKey, err: &StoreError) {
    metrics::store_error(&shared.id, "renew");
    tracing::warn!(lease_key = %key, error = %err, "renewal failed; retrying next round");
}

/// Records a successful renewal: extends the validity, and starts a handoff if one was asked.
fn renewed(
    shared: &Arc<Shared>,
    key: &LeaseKey,
    tenure: u64,
    valid_until: Instant,
    handoff_to: Option<crate::lease::WorkerId>,
) {
    let mut state = shared.lock();
    let Some(held) = state.held.get_mut(key).filter(|h| h.tenure == tenure) else {
        return;
    };
    if valid_until > held.valid_until {
        held.valid_until = valid_until;
    }
    let handoff = match (&held.phase, handoff_to) {
        (Phase::Active, Some(to)) => Some(to),
        _ => None,
    };
    drop(state);
    shared.changed.notify_one();
    if let Some(to) = handoff {
        let deadline = shared.now() + shared.config.handoff_timeout;
        let reason = if to.is_retire_marker() {
            StopReason::Retired { deadline }
        } else {
            StopReason::Handoff { to, deadline }
        };
        if let Some(finish) = shared.request_stop(key, tenure, reason) {
            spawn_finish(shared, key.clone(), finish);
        }
    }
}
