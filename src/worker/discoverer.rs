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

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::timeout_at;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::metrics;
use super::parts::Base;
use super::state::TableView;
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

/// When the discoverer lists next, by its role and how its listings went.
struct Cadence {
    role: Role,
    next_call: Instant,
    /// Listings failed in a row.
    failures: u32,
    /// Listings left at the full interval for a standby that found work.
    busy: u32,
    interval: Duration,
}

impl Cadence {
    /// Follows a change of role (`now_role`): an elected discoverer lists at once, a standby
    /// after a standby period.
    fn follow(&mut self, now_role: Role, discovery: &mut Discovery, now: Instant) {
        if now_role == self.role {
            return;
        }
        tracing::debug!(from = ?self.role, to = ?now_role, "discovery role changed");
        discovery.step_down();
        (self.failures, self.busy) = (0, 0);
        self.next_call = match now_role {
            Role::Elected => now,
            Role::Standby => now + jittered(standby_period(self.interval)),
            Role::Idle => self.next_call,
        };
        self.role = now_role;
    }

    /// The time between listings now.
    fn period(&self) -> Duration {
        match self.role {
            Role::Standby if self.busy == 0 => standby_period(self.interval),
            _ => self.interval,
        }
    }

    /// A listing failed (`kind`: throttled, failed or timeout): backs off.
    fn failed(
        &mut self,
        kind: &'static str,
        error: Option<&SourceError>,
        me: &WorkerId,
        now: Instant,
    ) {
        self.failures = self.failures.saturating_add(1);
        let (wait, failures, role) = (
            backoff(self.period(), self.failures),
            self.failures,
            self.role,
        );
        metrics::source_error(me, kind);
        match error {
            Some(err) => {
                tracing::warn!(error = %err, source = ?std::error::Error::source(err), ?wait, failures, ?role, "shard listing failed; backing off");
            }
            None => tracing::warn!(
                ?wait,
                failures,
                ?role,
                "shard listing timed out; backing off"
            ),
        }
        if role == Role::Elected && failures == STANDBY_QUIET_LISTINGS {
            tracing::error!(failures, "this worker cannot list the shard source; the standby discoverer carries on within a standby period while it keeps failing");
        }
        self.next_call = now + wait;
    }

    /// A listing's plan was made; `work`: it has something to do. A standby that found work
    /// lists at the full interval for a while.
    fn planned(&mut self, work: bool, now: Instant) {
        if self.role == Role::Standby {
            if work {
                if self.busy == 0 {
                    tracing::info!("the standby discoverer found work the discoverer has not done; discovering at the full interval");
                }
                self.busy = STANDBY_QUIET_LISTINGS;
            } else {
                self.busy = self.busy.saturating_sub(1);
            }
        }
        self.next_call = now + jittered(self.period());
    }
}

pub(crate) async fn run(
    base: Arc<Base>,
    mut views: watch::Receiver<Option<Arc<TableView>>>,
    rescan: Arc<Notify>,
    source: Arc<dyn ShardSource>,
    cancel: CancellationToken,
) {
    let config = base.config.clone();
    let mut discovery = Discovery::new(config.retire_after)
        .skipping_closed_ancestors(source.skips_closed_ancestors());
    let mut cadence = Cadence {
        role: Role::Idle,
        next_call: base.now(),
        failures: 0,
        busy: 0,
        interval: config.discovery_interval,
    };
    loop {
        let view = views.borrow_and_update().clone();
        if let Some(view) = &view {
            // Every worker remembers the checkpoints, so whoever takes over discovery can
            // re-create a lease deleted by hand from where it was.
            discovery.observe(&view.leases, base.now());
        }
        cadence.follow(Role::of(view.as_deref()), &mut discovery, base.now());
        let due = async {
            if cadence.role == Role::Idle {
                std::future::pending::<()>().await;
            } else {
                base.clock.sleep_until(cadence.next_call).await;
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
        // Only the listing and the writes are awaited: cancelled, the listing ends there.
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            applied = discover(&base, &*source, &views, &mut discovery, &mut cadence) => {
                if applied {
                    // Let the taker pick up the new leases now rather than at its next round.
                    rescan.notify_one();
                }
            }
        }
    }
}

/// One listing: lists the shards, plans against the freshest reading of the table, and
/// writes the plan; true when there was a plan to write.
async fn discover(
    base: &Arc<Base>,
    source: &dyn ShardSource,
    views: &watch::Receiver<Option<Arc<TableView>>>,
    discovery: &mut Discovery,
    cadence: &mut Cadence,
) -> bool {
    let config = &base.config;
    let listed = timeout_at(
        &*base.clock,
        base.now() + config.discovery_interval.max(config.store_timeout),
        source.list_shards(),
    )
    .await;
    let shards = match listed {
        Ok(Ok(shards)) => shards,
        Ok(Err(err)) => {
            let kind = match err {
                SourceError::Throttled(_) => "throttled",
                _ => "failed",
            };
            cadence.failed(kind, Some(&err), &base.id, base.now());
            return false;
        }
        Err(_) => {
            cadence.failed("timeout", None, &base.id, base.now());
            return false;
        }
    };
    cadence.failures = 0;
    // The freshest reading of the table; the conditions make an older one harmless.
    let Some(view) = views.borrow().clone() else {
        cadence.next_call = base.now() + jittered(cadence.period());
        return false;
    };
    let table = TableState {
        leases: &view.leases,
        owner_alive: &view.owner_alive,
        malformed: view.malformed,
    };
    let plan = discovery.plan(&shards, table, base.now());
    let work = !(plan.creates.is_empty() && plan.actions.is_empty());
    cadence.planned(work, base.now());
    if !work {
        return false;
    }
    apply(base, discovery, plan).await;
    true
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

async fn apply(base: &Arc<Base>, discovery: &mut Discovery, plan: DiscoveryPlan) {
    let deadline = base.now() + base.config.store_timeout;
    for wave in plan.creates {
        // A child must not reach the table before its parent: stop at a wave that failed.
        if !create_wave(base, wave, deadline).await {
            break;
        }
    }
    for action in plan.actions {
        match action {
            DiscoveryAction::Delete { lease, reason } => {
                let outcome = base
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
                        metrics::deleted(&base.id, label);
                        tracing::info!(lease_key = %lease.key, why, "lease deleted");
                    }
                    Ok(Outcome::LostRace { .. }) => {
                        tracing::debug!(lease_key = %lease.key, "lease changed since it was read; not deleted");
                    }
                    Err(err) => {
                        metrics::store_error(&base.id, "delete");
                        tracing::warn!(lease_key = %lease.key, error = %err, "delete failed; trying again next round");
                    }
                }
            }
            DiscoveryAction::Retire { lease } => {
                let Some(owner) = &lease.owner else { continue };
                let outcome = base
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
                            base.notify(owner, incarnation, &notice, deadline).await;
                        }
                    }
                    Ok(Outcome::LostRace { .. }) => {}
                    Err(err) => {
                        metrics::store_error(&base.id, "request_handoff");
                        tracing::warn!(lease_key = %lease.key, error = %err, "retirement request failed; trying again next round");
                    }
                }
            }
        }
    }
}

/// Creates one wave of leases concurrently; false if any create gave no answer.
async fn create_wave(base: &Arc<Base>, wave: Vec<NewLease>, deadline: Instant) -> bool {
    let limit = Arc::new(Semaphore::new(base.config.max_concurrent_writes));
    let mut creates = JoinSet::new();
    for lease in wave {
        let (base, limit) = (Arc::clone(base), Arc::clone(&limit));
        creates.spawn(
            async move {
                let _permit = limit.acquire_owned().await.ok()?;
                let key = lease.key.clone();
                match base.store.create(lease, deadline).await {
                    Ok(Outcome::Done(created)) => {
                        tracing::info!(lease_key = %key, parents = ?created.parents, checkpoint = ?created.checkpoint, "lease created");
                        Some(true)
                    }
                    Ok(Outcome::LostRace { .. }) => Some(false),
                    Err(err) => {
                        metrics::store_error(&base.id, "create");
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
    metrics::created(&base.id, created);
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
