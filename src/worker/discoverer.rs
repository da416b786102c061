//! The discoverer: on the one worker with the smallest live id, lists the shard source and
//! brings the lease table in line with it (creates, deletes finished parents, retires leases
//! of vanished shards). It reads the table through the taker's latest round, so it costs no
//! scan of its own; every write is conditional, so two workers that both believe they are the
//! discoverer for a moment (until their views of the membership agree) do no harm.
//!
//! # A discoverer that cannot list
//!
//! The elected worker may be unable to list the source while it still renews its leases (its
//! host is denied the listing call, its network path to the source is broken): the election
//! cannot see that, and nobody else would ever discover. So the worker with the *second*
//! smallest live id is a **standby**: it lists the source too, every
//! [`STANDBY_INTERVALS`] discovery intervals (one listing a minute by default), and applies
//! what it finds. With a healthy discoverer it finds nothing to do (or races it harmlessly on a
//! change seen by both: every write is conditional). With a discoverer that cannot list, the
//! standby's listing finds the pending work and does it, and then lists at the full discovery
//! interval until [`STANDBY_QUIET_LISTINGS`] listings in a row found nothing to do. Nothing is
//! published and nobody has to notice the failure: discovery continues within one standby
//! period (about 66 s by default) whatever the discoverer's source does. No worker but these
//! two lists the source.
//!
//! Grace periods restart whenever a worker's role changes (see [`Discovery::step_down`]): a
//! missing mark only counts while every listing since it was set missed the shard.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::timeout_at;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::metrics;
use super::state::{Shared, TableView};
use crate::lease::{NewLease, WorkerId};
use crate::lifecycle::{DeleteReason, Discovery, DiscoveryAction, DiscoveryPlan, TableState};
use crate::source::{ShardSource, SourceError};
use crate::store::Outcome;
use crate::store::{Jitter, RetryPolicy};

/// The longest wait after failed listings, in discovery intervals.
const MAX_BACKOFF_INTERVALS: u32 = 8;

/// The standby lists the source once every this many discovery intervals.
pub(crate) const STANDBY_INTERVALS: u32 = 6;

/// After a listing that found work, the standby lists at the full discovery interval until this
/// many listings in a row found nothing to do.
pub(crate) const STANDBY_QUIET_LISTINGS: u32 = 3;

/// What this worker does about discovery, by the rank of its id among the live workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The smallest live id: lists every discovery interval.
    Elected,
    /// The second smallest: lists every [`STANDBY_INTERVALS`] intervals, in case the elected
    /// worker cannot.
    Standby,
    /// Anybody else: does not list.
    Idle,
}

impl Role {
    fn of(view: Option<&TableView>) -> Self {
        match view {
            Some(view) if view.discoverer => Role::Elected,
            Some(view) if view.standby => Role::Standby,
            _ => Role::Idle,
        }
    }
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    source: Arc<dyn ShardSource>,
    cancel: CancellationToken,
) {
    let config = shared.config.clone();
    let mut views = shared.view.subscribe();
    let mut discovery = Discovery::new(config.retire_after)
        .skipping_closed_ancestors(source.skips_closed_ancestors());
    let mut role = Role::Idle;
    let mut next_call = shared.now();
    let mut failures: u32 = 0;
    // Listings left at the full interval for a standby that found work.
    let mut busy: u32 = 0;
    loop {
        let view = views.borrow_and_update().clone();
        if let Some(view) = &view {
            // Every worker remembers the checkpoints, so whoever takes over discovery can
            // re-create a lease deleted by hand from where it was.
            discovery.observe(&view.leases, shared.now());
        }
        let now_role = Role::of(view.as_deref());
        if now_role != role {
            tracing::debug!(worker = %shared.id, from = ?role, to = ?now_role, "discovery role changed");
            discovery.step_down();
            (failures, busy) = (0, 0);
            next_call = match now_role {
                Role::Elected => shared.now(),
                Role::Standby => shared.now() + jittered(standby_period(config.discovery_interval)),
                Role::Idle => next_call,
            };
            role = now_role;
        }
        let period = match role {
            Role::Standby if busy == 0 => standby_period(config.discovery_interval),
            _ => config.discovery_interval,
        };
        let due = async {
            if role == Role::Idle {
                std::future::pending::<()>().await;
            } else {
                shared.clock.sleep_until(next_call).await;
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
        let listed = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            listed = listing => listed,
        };
        let shards = match listed {
            Ok(Ok(shards)) => shards,
            failed => {
                let kind = match failed {
                    Ok(Err(SourceError::Throttled(_))) => "throttled",
                    Ok(Err(_)) => "failed",
                    _ => "timeout",
                };
                failures = failures.saturating_add(1);
                let wait = backoff(period, failures);
                metrics::source_error(&shared.id, kind);
                match failed {
                    Ok(Err(err)) => {
                        tracing::warn!(error = %err, source = ?std::error::Error::source(&err), ?wait, failures, ?role, "shard listing failed; backing off");
                    }
                    _ => tracing::warn!(
                        ?wait,
                        failures,
                        ?role,
                        "shard listing timed out; backing off"
                    ),
                }
                if role == Role::Elected && failures == STANDBY_QUIET_LISTINGS {
                    tracing::error!(failures, "this worker cannot list the shard source; the standby discoverer carries on within a standby period while it keeps failing");
                }
                next_call = shared.now() + wait;
                continue;
            }
        };
        failures = 0;
        // The freshest reading of the table; the conditions make an older one harmless.
        let Some(view) = views.borrow().clone() else {
            next_call = shared.now() + jittered(period);
            continue;
        };
        let table = TableState {
            leases: &view.leases,
            owner_alive: &view.owner_alive,
            malformed: view.malformed,
        };
        let plan = discovery.plan(&shards, table, shared.now());
        let work = !(plan.creates.is_empty() && plan.actions.is_empty());
        if role == Role::Standby {
            if work {
                if busy == 0 {
                    tracing::info!("the standby discoverer found work the discoverer has not done; discovering at the full interval");
                }
                busy = STANDBY_QUIET_LISTINGS;
            } else {
                busy = busy.saturating_sub(1);
            }
        }
        let period = match role {
            Role::Standby if busy == 0 => standby_period(config.discovery_interval),
            _ => config.discovery_interval,
        };
        next_call = shared.now() + jittered(period);
        if !work {
            continue;
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = apply(&shared, &mut discovery, plan) => {}
        }
        // Let the taker pick up the new leases now rather than at its next round.
        shared.rescan.notify_one();
    }
}

/// How often the standby lists while it finds nothing to do.
fn standby_period(interval: Duration) -> Duration {
    interval * STANDBY_INTERVALS
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
    RetryPolicy::default()
        .base_delay(interval)
        .max_delay(interval * MAX_BACKOFF_INTERVALS)
        .jitter(Jitter::Equal)
        .backoff(failures)
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
                    .delete(
                        &lease.key,
                        lease.nonce,
                        lease.counter,
                        lease.tenure,
                        deadline,
                    )
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
                        lease.nonce,
                        owner,
                        lease.tenure,
                        &WorkerId::retire_marker(),
                        deadline,
                    )
                    .await;
                match outcome {
                    Ok(Outcome::Done(_)) => {
                        tracing::info!(lease_key = %lease.key, owner = %owner, "retirement requested: its shard left the source");
                        // The owner learns of it from a notice.
                        if let Some(incarnation) = lease.owner_incarnation {
                            let notice = [lease.key.as_str().to_owned()];
                            shared.notify(owner, incarnation, &notice, deadline).await;
                        }
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
