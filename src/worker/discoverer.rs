//! The discoverer: on the one worker with the smallest live id, lists the shard source and
//! brings the lease table in line with it (creates, deletes finished parents, retires leases
//! of vanished shards). It reads the table through the taker's latest round, so it costs no
//! scan of its own; every write is conditional, so two workers that both believe they are the
//! discoverer for a moment (until their views of the membership agree) do no harm.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::timeout_at;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::metrics;
use super::state::Shared;
use crate::lease::{NewLease, WorkerId};
use crate::lifecycle::{DeleteReason, Discovery, DiscoveryAction, DiscoveryPlan, TableState};
use crate::source::{ShardSource, SourceError};
use crate::store::Outcome;

/// The longest wait after failed listings, in discovery intervals.
const MAX_BACKOFF_INTERVALS: u32 = 8;

pub(crate) async fn run(
    shared: Arc<Shared>,
    source: Arc<dyn ShardSource>,
    cancel: CancellationToken,
) {
    let config = shared.config.clone();
    let mut views = shared.view.subscribe();
    let mut discovery = Discovery::new(config.retire_after)
        .skipping_closed_ancestors(source.skips_closed_ancestors());
    let mut next_call = shared.now();
    let mut failures: u32 = 0;
    loop {
        let view = views.borrow_and_update().clone();
        if let Some(view) = &view {
            // Every worker remembers the checkpoints, so whoever takes over discovery can
            // re-create a lease deleted by hand from where it was.
            discovery.observe(&view.leases);
        }
        let elected = view.as_ref().is_some_and(|v| v.discoverer);
        let due = async {
            if elected {
                shared.clock.sleep_until(next_call).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            changed = views.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
            _ = due => {}
        }
        let listing = timeout_at(
            &*shared.clock,
            shared.now() + config.discovery_interval.max(config.store_timeout),
            source.list_shards(),
        );
        let shards = match listing.await {
            Ok(Ok(shards)) => shards,
            failed => {
                let kind = match failed {
                    Ok(Err(SourceError::Throttled(_))) => "throttled",
                    Ok(Err(_)) => "failed",
                    _ => "timeout",
                };
                failures = failures.saturating_add(1);
                let wait = backoff(config.discovery_interval, failures);
                metrics::source_error(&shared.id, kind);
                match failed {
                    Ok(Err(err)) => {
                        tracing::warn!(error = %err, source = ?std::error::Error::source(&err), ?wait, "shard listing failed; backing off");
                    }
                    _ => tracing::warn!(?wait, "shard listing timed out; backing off"),
                }
                next_call = shared.now() + wait;
                continue;
            }
        };
        failures = 0;
        next_call = shared.now() + jittered(config.discovery_interval);
        // The freshest reading of the table; the conditions make an older one harmless.
        let Some(view) = views.borrow().clone() else {
            continue;
        };
        let table = TableState {
            leases: &view.leases,
            owner_alive: &view.owner_alive,
            malformed: view.malformed,
        };
        let plan = discovery.plan(&shards, table, shared.now());
        if plan.creates.is_empty() && plan.actions.is_empty() {
            continue;
        }
        apply(&shared, &mut discovery, plan).await;
        // Let the taker pick up the new leases now rather than at its next round.
        shared.rescan.notify_one();
    }
}

/// The wait before the next listing: the interval give or take a tenth, so fleets started
/// together do not call the source in step.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(crate::jitter::uniform(0.9, 1.1))
}

/// The wait after `failures` failed listings in a row: doubling from one interval, capped at
/// [`MAX_BACKOFF_INTERVALS`], with equal jitter (half fixed, half random), so the source is
/// never called more often than every half interval.
fn backoff(interval: Duration, failures: u32) -> Duration {
    let ceiling = interval * (1u32 << failures.saturating_sub(1).min(3)).min(MAX_BACKOFF_INTERVALS);
    ceiling.mul_f64(crate::jitter::uniform(0.5, 1.0))
}

async fn apply(shared: &Arc<Shared>, discovery: &mut Discovery, plan: DiscoveryPlan) {
    let deadline = shared.now() + shared.config.store_timeout;
    for wave in plan.creates {
        // A child must not reach the table before its parent: stop at a wave that failed.
        if !create_wave(shared, wave, deadline).await {
            break;
        }
    }
    for action in plan.actions {
        match action {
            DiscoveryAction::Delete { lease, reason } => {
                let outcome = shared
                    .store
                    .delete(&lease.key, lease.counter, lease.tenure, deadline)
                    .await;
                let (label, why) = match reason {
                    DeleteReason::ParentDone => {
                        ("parent_done", "finished and its children started")
                    }
                    DeleteReason::Vanished => ("vanished", "its shard left the source"),
                };
                match outcome {
                    Ok(Outcome::Done(_)) => {
                        discovery.forget(&lease.key);
                        metrics::deleted(&shared.id, label);
                        tracing::info!(lease_key = %lease.key, why, "lease deleted");
                    }
                    Ok(Outcome::LostRace { .. }) => {
                        tracing::debug!(lease_key = %lease.key, "lease changed since it was read; not deleted");
                    }
                    Err(err) => {
                        metrics::store_error(&shared.id, "delete");
                        tracing::warn!(lease_key = %lease.key, error = %err, "delete failed; trying again next round");
                    }
                }
            }
            DiscoveryAction::Retire { lease } => {
                let Some(owner) = &lease.owner else { continue };
                let outcome = shared
                    .store
                    .request_handoff(
                        &lease.key,
                        owner,
                        lease.tenure,
                        &WorkerId::retire_marker(),
                        deadline,
                    )
                    .await;
                match outcome {
                    Ok(Outcome::Done(_)) => {
                        tracing::info!(lease_key = %lease.key, owner = %owner, "retirement requested: its shard left the source");
                    }
                    Ok(Outcome::LostRace { .. }) => {}
                    Err(err) => {
                        metrics::store_error(&shared.id, "request_handoff");
                        tracing::warn!(lease_key = %lease.key, error = %err, "retirement request failed; trying again next round");
                    }
                }
            }
        }
    }
}

/// Creates one wave of leases concurrently; false if any create gave no answer.
async fn create_wave(shared: &Arc<Shared>, wave: Vec<NewLease>, deadline: Instant) -> bool {
    let limit = Arc::new(Semaphore::new(shared.config.max_concurrent_renewals));
    let mut creates = JoinSet::new();
    for lease in wave {
        let (shared, limit) = (Arc::clone(shared), Arc::clone(&limit));
        creates.spawn(
            async move {
                let _permit = limit.acquire_owned().await.ok()?;
                let key = lease.key.clone();
                match shared.store.create(lease, deadline).await {
                    Ok(Outcome::Done(created)) => {
                        tracing::info!(lease_key = %key, parents = ?created.parents, checkpoint = ?created.checkpoint, "lease created");
                        Some(true)
                    }
                    Ok(Outcome::LostRace { .. }) => Some(false),
                    Err(err) => {
                        metrics::store_error(&shared.id, "create");
                        tracing::warn!(lease_key = %key, error = %err, "create failed; trying again next round");
                        None
                    }
                }
            }
            .in_current_span(),
        );
    }
    let (mut created, mut answered) = (0, true);
    while let Some(result) = creates.join_next().await {
        match result {
            Ok(Some(true)) => created += 1,
            Ok(Some(false)) => {}
            _ => answered = false,
        }
    }
    metrics::created(&shared.id, created);
    answered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_eight_intervals_and_never_drops_below_half_of_one() {
        let interval = Duration::from_secs(10);
        for failures in 1..20 {
            let wait = backoff(interval, failures);
            let ceiling = interval * (1u32 << (failures - 1).min(3));
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{failures}: {wait:?}"
            );
            assert!(wait <= interval * MAX_BACKOFF_INTERVALS);
            assert!(wait >= interval / 2);
        }
    }

    #[test]
    fn the_regular_interval_is_jittered_by_a_tenth() {
        let interval = Duration::from_secs(10);
        for _ in 0..100 {
            let wait = jittered(interval);
            assert!(wait >= interval.mul_f64(0.9) && wait <= interval.mul_f64(1.1));
        }
    }
}
