//! The taker: scans the table, judges expiry on this worker's clock, and takes, resumes or asks
//! for leases as the balance policy decides. It also waits on the handoffs it asked for.
//!
//! Every lease this process works on is one it took itself (a take writes its incarnation; a
//! lease handed over to it is started with a take too), and a take is reported only once the
//! previous holder's validity has surely ended: at once (after the quiet period) when the lease
//! was unowned, expired on this worker's clock, ours, or handed over; a lease duration after the
//! take started when the previous holder may still be working (a forced handoff, a steal, a
//! lease of another process with this worker's id); a lease duration after the first attempt
//! started when the answer of an earlier take was lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::event::LeaseEvent;
use super::fenced::{Fenced, SessionId};
use super::identity::{Identity, Ownership};
use super::metrics;
use super::state::{
    member_notice, revoke_notice, Pending, Receiver, SessionVersion, Shared, TableView,
    EXPECT_NOTICE,
};
use super::take::{Answer, Job, Report, FAR};
use crate::balance::{Assignment, BalancePolicy, FleetView, Holder, LeaseView, Move, WorkerView};
use crate::expiry::{ExpiryTracker, LeaseVersion};
use crate::lease::{Incarnation, Lease, LeaseKey, Snapshot, WorkerId};
use crate::lifecycle::{self, LeaseStatus};
use crate::store::{Outcome, StoreError};

pub(crate) struct Taker {
    shared: Arc<Shared>,
    policy: Arc<dyn BalancePolicy>,
    leases: ExpiryTracker<LeaseKey, LeaseVersion>,
    /// Members by (incarnation, heartbeat): a record removed and written again by another
    /// process (or, with sessions, another session) starts its heartbeat again, and must
    /// not match a value seen before.
    members: ExpiryTracker<WorkerId, SessionVersion>,
    identity: Identity,
    /// With sessions: sessions named by leases whose record is gone or names another
    /// incarnation (they can never beat again), by when this worker first saw them so.
    ended: ExpiryTracker<(WorkerId, Option<Incarnation>)>,
    /// With sessions: when each lease of the last round may be started by others (its owner's
    /// session surely over); a lease whose session lives is absent.
    expiry: HashMap<LeaseKey, Instant>,
    /// With sessions: the predecessor this worker last told that it joined next to it.
    announced_to: Option<WorkerId>,
    /// The live workers of the last round, to see the fleet change.
    last_fleet: Vec<WorkerId>,
    /// With sessions: the worker that does the fleet's chores, as the last round saw it.
    chores: Option<WorkerId>,
    /// With sessions, on the worker doing the chores: who held each lease at its last round.
    holders: HashMap<LeaseKey, Holding>,
    /// With sessions, on the worker doing the chores: each lease that waits on a worker (given
    /// and not yet taken, or asked of its holder in a handoff not yet done), and since when
    /// (this worker's clock) it has waited so.
    waiting: HashMap<LeaseKey, (Waiting, Instant)>,
    /// With sessions, on the worker doing the chores: when it last looked for leases waiting.
    last_look: Option<Instant>,
    /// With sessions: handoffs asked by this worker and not done in time, whose owners this
    /// round tells to give them up (see `REVOKE`).
    revokes: Vec<(WorkerId, Incarnation, LeaseKey)>,
    /// With sessions: how many sessions this process had fenced at its last round.
    fenced_told: u64,
}

/// Who holds a lease, as the worker doing the chores last saw it: the session, the tenure,
/// and the worker a handoff was asked for.
type Holding = (WorkerId, Incarnation, u64, Option<WorkerId>);

/// A lease that waits on a worker, as [`Taker::waiting`] saw it: its owner, that owner's
/// session (none: given to the id, not yet taken), its counter when given or its tenure when
/// asked for, and the worker that asked for it.
type Waiting = (WorkerId, Option<Incarnation>, u64, Option<WorkerId>);

/// How long the worker doing the chores lets a lease wait before it tells the worker it waits
/// on again. A receiver takes a lease given to it within a beat of the notice: two beats
/// without a take mean the notice never came (its giver died between the give and the notice:
/// seed 2087271171323689699). An owner asked for a handoff first lets its application finish:
/// a lease duration.
fn patience(config: &crate::config::WorkerConfig, what: &Waiting) -> std::time::Duration {
    match what.3 {
        None => (config.renew_interval * 2).min(config.lease_duration),
        Some(_) => config.lease_duration,
    }
}

/// A value of [`Taker::ended`]: the session has no record of its own any more.
const NO_RECORD: u64 = u64::MAX;

/// What the taker does with one lease of the snapshot before planning.
enum Action {
    /// Taken by this process but not held here: its validity ran out while the store was
    /// unreachable, or the answer of its take was lost. Take it back in a new tenure.
    Resume(Lease),
    /// Owned by this worker's id but by another process (see [`Identity`]): take it.
    Foreign(Lease),
    /// A handoff we asked for was completed: start it.
    Adopt(Lease),
    /// A handoff we asked for was not completed in time: take it anyway.
    Force(Lease),
    /// With sessions: given to this worker's id (by a placement round, or a handoff nobody
    /// here waits on): its giver made sure nobody works on it.
    Given(Lease),
}

impl Action {
    fn key(&self) -> &LeaseKey {
        match self {
            Action::Resume(lease)
            | Action::Foreign(lease)
            | Action::Adopt(lease)
            | Action::Force(lease)
            | Action::Given(lease) => &lease.key,
        }
    }
}

impl Taker {
    pub fn new(shared: Arc<Shared>, policy: Arc<dyn BalancePolicy>) -> Self {
        let duration = shared.config.lease_duration;
        let identity = Identity::new(shared.id.clone(), shared.incarnation(), duration);
        Self {
            shared,
            policy,
            leases: ExpiryTracker::new(duration),
            members: ExpiryTracker::new(duration),
            identity,
            ended: ExpiryTracker::new(duration),
            expiry: HashMap::new(),
            announced_to: None,
            last_fleet: Vec::new(),
            chores: None,
            holders: HashMap::new(),
            waiting: HashMap::new(),
            last_look: None,
            revokes: Vec::new(),
            fenced_told: 0,
        }
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let config = self.shared.config.clone();
        let mut next_round = self.shared.now();
        loop {
            let pending = !self.shared.lock().pending.is_empty();
            let poll_at = pending.then(|| self.shared.now() + config.handoff_poll_interval);
            let wake = poll_at.map_or(next_round, |p| p.min(next_round));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = self.shared.clock.sleep_until(wake) => {}
                _ = self.shared.rescan.notified() => next_round = self.shared.now(),
            }
            if self.shared.now() < next_round {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    _ = self.poll_pending() => {}
                }
                continue;
            }
            let started = self.shared.now();
            let round = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                round = self.round() => round,
            };
            next_round = match round {
                Ok(next) => next,
                Err(err) => {
                    metrics::store_error(&self.shared.id, "scan");
                    tracing::warn!(error = %err, "taker round failed");
                    // Counted from the round's start: a scan nobody answered took up to
                    // `store_timeout` already, and the next one must not wait for another
                    // whole interval on top once the store answers again.
                    (started + config.taker_interval).max(self.shared.now())
                }
            };
        }
    }

    /// One round; returns when the next one should run.
    async fn round(&mut self) -> Result<Instant, StoreError> {
        let config = self.shared.config.clone();
        let deadline = self.shared.now() + config.store_timeout;
        // With sessions, every write a round leads to is conditioned on what it read, so a
        // stale read costs a lost race at most: eventually consistent, at half the price.
        let snapshot = if config.sessions() {
            self.shared.store.snapshot_eventually(deadline).await?
        } else {
            self.shared.store.snapshot(deadline).await?
        };
        // Observed at the end of the scan: every value read was written before now, so no
        // owner's validity (counted from before its write) can outlast now + lease duration.
        let now = self.shared.now();
        let sessions = config.sessions();
        let incarnation = self.shared.incarnation();
        if self.identity.ownership_incarnation() != incarnation {
            // A new session: its predecessor must hear of it again.
            self.announced_to = None;
        }
        self.identity.set_incarnation(incarnation);
        tracing::debug!(
            leases = snapshot.leases.len(),
            members = snapshot.members.len(),
            "taker round"
        );
        let expiry = if sessions {
            self.observe_sessions(&snapshot, now).await
        } else {
            let expiry = self.observe(&snapshot, now);
            self.observe_identity(&snapshot, now);
            expiry
        };
        let live = if sessions {
            self.live_sessions(&snapshot, now)
        } else {
            self.live_workers(&snapshot, &expiry, now)
        };
        let statuses = lifecycle::statuses(&snapshot.leases);
        let actions = self.actions(&snapshot, &statuses, now);
        let view = self.view(&snapshot, &statuses, &live, &expiry, now);
        // With sessions the assignment also places others' leases: computed once (at 100,000
        // leases it is a good part of a round's work).
        let placement = sessions.then(|| Assignment::compute(&view));
        let moves = match &placement {
            Some(assignment) => self.policy.plan_with(&view, &self.shared.id, assignment),
            None => self.policy.plan(&view, &self.shared.id),
        };
        // With sessions, nothing else brings the next round: keep looking while this worker
        // moved something or is below its share.
        let mut fleet: Vec<WorkerId> = live.keys().cloned().collect();
        fleet.sort();
        let fleet_changed = fleet != self.last_fleet;
        self.last_fleet = fleet;
        let moved = !moves.is_empty() || !actions.is_empty() || {
            let me = &self.shared.id;
            let below = |a: &Assignment| a.counts.get(me) < a.targets.get(me);
            match &placement {
                Some(assignment) => below(assignment),
                None => below(&Assignment::compute(&view)),
            }
        };
        let by_key: HashMap<&LeaseKey, &Lease> =
            snapshot.leases.iter().map(|l| (&l.key, l)).collect();
        if sessions {
            self.warn(&snapshot, &statuses, &live, &expiry, now).await;
            if self.is_smallest(&live) {
                self.notice_changes(&snapshot, now).await;
            }
            if let Some(assignment) = &placement {
                self.place(&snapshot, assignment, &by_key, now).await;
            }
            let deadline = now + config.store_timeout;
            for (owner, incarnation, key) in std::mem::take(&mut self.revokes) {
                tracing::info!(lease_key = %key, owner = %owner, "handoff not done in time: telling its owner to give the lease up");
                self.shared
                    .notify(&owner, incarnation, &[revoke_notice(&key)], deadline)
                    .await;
            }
        }
        self.execute(actions, moves, &by_key, now).await;
        let next = if sessions {
            self.ring(&snapshot, &live, &view).await;
            let next = self.next_session_round(&snapshot, &live, &expiry, moved, now);
            // Workers joining together see each other one round later: look again soon.
            if fleet_changed {
                next.min(now + config.renew_interval / 8)
            } else {
                next
            }
        } else {
            self.clean_up_members(&snapshot, &live, now).await;
            self.next_round(&snapshot, &expiry, now)
        };
        self.publish(snapshot, &live, &expiry, now);
        Ok(next)
    }

    /// With sessions: records the members' beats, fences every session seen unchanged for a
    /// lease duration, and returns, per lease of the snapshot, when it may be started by
    /// another worker: at once if its owner's session was fenced here, a lease duration after
    /// this worker first saw that session without a record of its own, and not while the
    /// session has its record (a far instant).
    async fn observe_sessions(&mut self, snapshot: &Snapshot, now: Instant) -> Vec<Instant> {
        let ids: HashSet<&WorkerId> = snapshot.members.iter().map(|m| &m.worker).collect();
        self.members.retain(|w| ids.contains(w));
        for member in &snapshot.members {
            self.members
                .observe(&member.worker, (member.incarnation, member.heartbeat), now);
        }
        {
            let mut seen = self
                .shared
                .members_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            seen.retain(|w, _| ids.contains(w));
            for member in &snapshot.members {
                let value = (member.incarnation, member.heartbeat);
                match seen.get(&member.worker) {
                    Some((old, _)) if *old == value => {}
                    _ => {
                        seen.insert(member.worker.clone(), (value, now));
                    }
                }
            }
        }
        let deadline = now + self.shared.config.store_timeout;
        for member in &snapshot.members {
            let Some(incarnation) = member.incarnation else {
                continue;
            };
            if member.worker == self.shared.id || !self.members.is_expired(&member.worker, now) {
                continue;
            }
            let fenced = self
                .shared
                .fence(&member.worker, incarnation, member.heartbeat, deadline)
                .await;
            if let Err(err) = fenced {
                metrics::store_error(&self.shared.id, "end_session");
                tracing::warn!(worker = %member.worker, error = %err, "could not fence an expired session");
            }
        }
        let fresh = snapshot
            .members
            .iter()
            .filter(|m| !self.members.is_expired(&m.worker, now))
            .map(|m| &m.worker)
            .collect();
        self.shared.note_requesters(&snapshot.leases, &fresh);
        let records: HashMap<&WorkerId, Option<Incarnation>> = snapshot
            .members
            .iter()
            .map(|m| (&m.worker, m.incarnation))
            .collect();
        let fenced = self.fenced().clone();
        let mut named = HashSet::new();
        // The sessions fenced here that the table still names.
        let mut still_fenced: HashSet<SessionId> = HashSet::new();
        let far = now + FAR;
        let expiry: Vec<Instant> = snapshot
            .leases
            .iter()
            .map(|lease| {
                let Some(owner) = &lease.owner else {
                    return now;
                };
                let session = (owner.clone(), lease.owner_incarnation);
                if let Some(incarnation) = lease.owner_incarnation {
                    if fenced.contains(owner, incarnation) {
                        still_fenced.insert((owner.clone(), incarnation));
                        return now;
                    }
                }
                let has_record = match (records.get(owner), lease.owner_incarnation) {
                    // Given to the id, not yet taken: any session of the id takes it.
                    (Some(_), None) => true,
                    // Given to an id with no session: nobody works on it, nobody will.
                    (None, None) => return now,
                    (Some(record), Some(incarnation)) => *record == Some(incarnation),
                    (None, _) => false,
                };
                if has_record {
                    return far;
                }
                named.insert(session.clone());
                self.ended.observe(&session, NO_RECORD, now)
            })
            .collect();
        self.ended.retain(|s| named.contains(s));
        // The sessions fenced here that the table no longer names: nothing can be started on
        // their account any more, so they are forgotten. Only those this round judged: a fence
        // made since it copied the set is kept for the next round. (Were one forgotten too
        // early, its leases would wait a lease duration, as any session's without a record.)
        if !fenced.is_empty() {
            still_fenced.extend(
                snapshot
                    .members
                    .iter()
                    .filter_map(|m| Some((m.worker.clone(), m.incarnation?)))
                    .filter(|(worker, incarnation)| fenced.contains(worker, *incarnation)),
            );
            self.fenced().forget_unnamed(&fenced, &still_fenced);
        }
        // Only the leases others may start some day are kept: at rest that is none, and a
        // worker of a large fleet must not hold a map of every lease between rounds.
        self.expiry = snapshot
            .leases
            .iter()
            .zip(&expiry)
            .filter(|(_, at)| **at < far)
            .map(|(l, at)| (l.key.clone(), *at))
            .collect();
        expiry
    }

    fn fenced(&self) -> std::sync::MutexGuard<'_, Fenced> {
        self.shared.fenced()
    }

    /// With sessions: the live workers are the members whose session is open and has not
    /// been seen unchanged for a lease duration, and this worker.
    fn live_sessions(&self, snapshot: &Snapshot, now: Instant) -> HashMap<WorkerId, Option<u32>> {
        let fenced = self.fenced().clone();
        let mut live: HashMap<WorkerId, Option<u32>> = snapshot
            .members
            .iter()
            .filter(|m| !self.members.is_expired(&m.worker, now))
            .filter(|m| m.incarnation.is_none_or(|i| !fenced.contains(&m.worker, i)))
            .map(|m| (m.worker.clone(), m.capacity))
            .collect();
        live.insert(
            self.shared.id.clone(),
            Some(self.shared.config.max_leases_per_worker),
        );
        live
    }

    /// With sessions: the leases nobody alive holds that the assignment gives to other
    /// workers are given to them, and each receiver is told in one notice. (What it gives to
    /// this worker, the policy takes.)
    async fn place(
        &mut self,
        snapshot: &Snapshot,
        assignment: &Assignment,
        by_key: &HashMap<&LeaseKey, &Lease>,
        now: Instant,
    ) {
        if self.shared.health.is_slow() || !self.shared.session_valid() {
            return;
        }
        let me = &self.shared.id;
        let incarnations = incarnations(snapshot);
        tracing::debug!(
            counts = ?assignment.counts.iter().collect::<BTreeMap<_, _>>(),
            targets = ?assignment.targets.iter().collect::<BTreeMap<_, _>>(),
            moves = ?assignment.moves.iter().collect::<BTreeMap<_, _>>(),
            "placement"
        );
        let deadline = now + self.shared.config.store_timeout;
        let limit = Arc::new(Semaphore::new(self.shared.config.max_concurrent_renewals));
        let mut gives = JoinSet::new();
        // In id order: a seeded simulation must replay the same store calls.
        let mut receivers: Vec<(&WorkerId, &Vec<Move>)> = assignment.moves.iter().collect();
        receivers.sort_by(|a, b| a.0.cmp(b.0));
        for (worker, moves) in receivers {
            if worker == me || !incarnations.contains_key(worker) {
                continue;
            }
            for step in moves {
                let (key, from) = match step {
                    Move::Take(key) => (key, None),
                    Move::RequestHandoff { key, from } => (key, Some(from.clone())),
                };
                let Some(lease) = by_key.get(key) else {
                    continue;
                };
                let owner_incarnation = lease.owner_incarnation;
                if from.is_none() {
                    let startable = self.expiry.get(key).is_some_and(|at| *at <= now);
                    if lease.owner.is_some() && !startable {
                        continue;
                    }
                } else if owner_incarnation.is_none() {
                    // Given and not yet taken: its receiver is about to start it.
                    continue;
                }
                let (shared, limit) = (Arc::clone(&self.shared), Arc::clone(&limit));
                let (key, worker, counter, tenure) =
                    (key.clone(), worker.clone(), lease.counter, lease.tenure);
                gives.spawn(
                    async move {
                        let _permit = limit.acquire_owned().await.ok()?;
                        let (written, what) = match &from {
                            None => (
                                shared.store.give(&key, &worker, counter, deadline).await,
                                "give",
                            ),
                            Some(owner) => (
                                shared
                                    .store
                                    .request_handoff(&key, owner, tenure, &worker, deadline)
                                    .await,
                                "request_handoff",
                            ),
                        };
                        match written {
                            // A lease given is announced to its receiver; a handoff asked on a
                            // worker's behalf, to the owner (which tells the receiver once it
                            // has handed the lease over).
                            Ok(Outcome::Done(_)) => Some(match from {
                                None => (worker, None, key),
                                Some(owner) => (owner, owner_incarnation, key),
                            }),
                            Ok(Outcome::LostRace { current }) => {
                                tracing::debug!(lease_key = %key, what, current = ?current.map(|l| (l.owner, l.tenure, l.handoff_to)), "not placed: the lease changed");
                                None
                            }
                            Err(err) => {
                                metrics::store_error(&shared.id, what);
                                tracing::warn!(lease_key = %key, error = %err, "could not place a lease");
                                // It may have landed: the notice is harmless if it did not.
                                err.is_ambiguous().then_some(match from {
                                    None => (worker, None, key),
                                    Some(owner) => (owner, owner_incarnation, key),
                                })
                            }
                        }
                    }
                    .in_current_span(),
                );
            }
        }
        let mut told: BTreeMap<(WorkerId, Option<Incarnation>), Vec<String>> = BTreeMap::new();
        while let Some(done) = gives.join_next().await {
            if let Ok(Some((worker, incarnation, key))) = done {
                told.entry((worker, incarnation))
                    .or_default()
                    .push(key.as_str().to_owned());
            }
        }
        for ((worker, incarnation), mut keys) in told {
            let Some(incarnation) = incarnation.or_else(|| incarnations.get(&worker).copied())
            else {
                continue;
            };
            keys.sort();
            tracing::info!(to = %worker, leases = keys.len(), "leases placed");
            self.shared
                .notify(&worker, incarnation, &keys, deadline)
                .await;
        }
    }

    /// With sessions, on the worker doing the fleet's chores: a lease whose holder changed
    /// since its last round (or that is gone) may have been edited or deleted by hand, and
    /// nothing else would tell the session that held it, which no longer renews anything.
    /// That session is told (a notice naming the lease): it reads the lease and drops it if it
    /// is no longer its own. Moves made by the protocol are told too, harmlessly.
    async fn notice_changes(&mut self, snapshot: &Snapshot, now: Instant) {
        let holders: HashMap<LeaseKey, Holding> = snapshot
            .leases
            .iter()
            .filter_map(|l| match (&l.owner, l.owner_incarnation) {
                (Some(owner), Some(incarnation)) => Some((
                    l.key.clone(),
                    (owner.clone(), incarnation, l.tenure, l.handoff_to.clone()),
                )),
                _ => None,
            })
            .collect();
        let open: HashSet<(&WorkerId, Incarnation)> = snapshot
            .members
            .iter()
            .filter_map(|m| m.incarnation.map(|i| (&m.worker, i)))
            .collect();
        let mut told: BTreeMap<(WorkerId, Incarnation), Vec<String>> = BTreeMap::new();
        for (key, holding) in &self.holders {
            // Unchanged. (A handoff asked since is told to its holder too: the requester may
            // have died before it told the owner, and nothing else would.)
            if holders.get(key) == Some(holding) {
                continue;
            }
            let (owner, incarnation, _, _) = holding;
            if open.contains(&(owner, *incarnation)) {
                told.entry((owner.clone(), *incarnation))
                    .or_default()
                    .push(key.as_str().to_owned());
            }
        }
        self.holders = holders;
        // A lease given whose notice was lost (the give's answer was lost, or the notice
        // failed) waits for a receiver that does not know of it: nobody else would ever move
        // it. So does a lease asked for in a handoff whose owner was never told (the requester
        // was cut off, and lost track of its request when its own session ended) while this
        // worker already saw the request at its first round. After a lease duration the
        // worker it waits on is told again.
        let incarnations = incarnations(snapshot);
        let mut waiting = HashMap::new();
        for lease in &snapshot.leases {
            let Some(owner) = &lease.owner else {
                continue;
            };
            let (what, session) = match (lease.owner_incarnation, &lease.handoff_to) {
                (None, _) => (
                    (owner.clone(), None, lease.counter, None),
                    incarnations.get(owner).copied(),
                ),
                (Some(incarnation), Some(to)) => (
                    (
                        owner.clone(),
                        Some(incarnation),
                        lease.tenure,
                        Some(to.clone()),
                    ),
                    open.contains(&(owner, incarnation)).then_some(incarnation),
                ),
                (Some(_), None) => continue,
            };
            // A give first seen now happened since this worker last looked, and may be as old
            // as that look: its giver may have died before it told the receiver, and nothing
            // may have made this worker look for a while (seen in the campaign, seed
            // 2087271171323689699: a lease given by a process that died at once waited 26 s).
            // If it is fresh after all, the receiver is told twice, harmlessly.
            let first_seen = match (&what.3, self.last_look) {
                (None, Some(looked)) => looked,
                _ => now,
            };
            let since = match self.waiting.get(&lease.key) {
                Some((seen, since)) if *seen == what => *since,
                _ => first_seen,
            };
            let since = match session {
                Some(incarnation)
                    if now.saturating_duration_since(since)
                        >= patience(&self.shared.config, &what) =>
                {
                    match &what.3 {
                        None => {
                            tracing::info!(lease_key = %lease.key, to = %owner, "a lease given long ago is not taken yet: telling its receiver again")
                        }
                        Some(to) => {
                            tracing::info!(lease_key = %lease.key, owner = %owner, to = %to, "a handoff asked long ago is not done yet: telling the owner again")
                        }
                    }
                    told.entry((owner.clone(), incarnation))
                        .or_default()
                        .push(lease.key.as_str().to_owned());
                    now
                }
                _ => since,
            };
            waiting.insert(lease.key.clone(), (what, since));
        }
        self.waiting = waiting;
        self.last_look = Some(now);
        let deadline = now + self.shared.config.store_timeout;
        for ((worker, incarnation), mut keys) in told {
            keys.sort();
            tracing::info!(to = %worker, leases = keys.len(), "leases changed under their holder: telling it");
            self.shared
                .notify(&worker, incarnation, &keys, deadline)
                .await;
        }
    }

    /// With sessions: when the session this worker watches looks dead (see the watcher),
    /// warns the workers its leases would go to if it were, so that they read their own
    /// records often until the leases come (see `EXPECT_NOTICE`).
    async fn warn(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        now: Instant,
    ) {
        let suspect = self
            .shared
            .suspect
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((victim, incarnation)) = suspect else {
            return;
        };
        if self.fenced().contains(&victim, incarnation) {
            return;
        }
        let of_victim = |lease: &Lease| {
            lease.owner.as_ref() == Some(&victim) && lease.owner_incarnation == Some(incarnation)
        };
        let keys: HashSet<&LeaseKey> = snapshot
            .leases
            .iter()
            .filter(|l| of_victim(l))
            .map(|l| &l.key)
            .collect();
        let if_dead: Vec<Instant> = snapshot
            .leases
            .iter()
            .zip(expiry)
            .map(|(l, at)| if of_victim(l) { now } else { *at })
            .collect();
        let mut survivors = live.clone();
        survivors.remove(&victim);
        let view = self.view(snapshot, statuses, &survivors, &if_dead, now);
        let assignment = Assignment::compute(&view);
        let incarnations = incarnations(snapshot);
        let deadline = now + self.shared.config.store_timeout;
        let mut receivers: Vec<&WorkerId> = assignment
            .moves
            .iter()
            .filter(|(_, moves)| {
                moves
                    .iter()
                    .any(|m| matches!(m, Move::Take(k) if keys.contains(k)))
            })
            .map(|(w, _)| w)
            .filter(|w| **w != self.shared.id)
            .collect();
        receivers.sort();
        tracing::info!(suspect = %victim, receivers = receivers.len(), "a watched session looks dead: warning where its leases would go");
        for worker in receivers {
            if let Some(incarnation) = incarnations.get(worker).copied() {
                let notice = [EXPECT_NOTICE.to_owned()];
                self.shared
                    .notify(worker, incarnation, &notice, deadline)
                    .await;
            }
        }
    }

    /// With sessions: names the session this worker watches (the next live id after its own,
    /// around), tells a new predecessor that this worker joined next to it, and keeps the
    /// receivers of released leases.
    async fn ring(
        &mut self,
        snapshot: &Snapshot,
        live: &HashMap<WorkerId, Option<u32>>,
        view: &FleetView,
    ) {
        let me = &self.shared.id;
        let mut ids: Vec<&WorkerId> = live.keys().collect();
        ids.sort();
        let position = ids.iter().position(|w| *w == me).unwrap_or(0);
        let successor = (ids.len() > 1).then(|| ids[(position + 1) % ids.len()].clone());
        let predecessor =
            (ids.len() > 1).then(|| ids[(position + ids.len() - 1) % ids.len()].clone());
        let renamed = self.shared.watch_done.swap(false, Ordering::SeqCst);
        self.shared.successor.send_if_modified(|current| {
            if *current == successor {
                renamed
            } else {
                tracing::info!(successor = ?successor.as_ref().map(|w| w.as_str()), "watching the next session in id order");
                *current = successor.clone();
                true
            }
        });
        let incarnations = incarnations(snapshot);
        // Only with the session open and valid: an announcement made while it is closed reaches a
        // predecessor that finds no record of this worker, watches the next one instead, and
        // would never hear of this worker again (the session reopening starts a round).
        let open = self.shared.session_valid();
        if let Some(predecessor) = predecessor
            .filter(|p| self.announced_to.as_ref() != Some(p))
            .filter(|_| open)
        {
            if let Some(incarnation) = incarnations.get(&predecessor).copied() {
                let deadline = self.shared.now() + self.shared.config.store_timeout;
                let notice = [member_notice(me)];
                self.shared
                    .notify(&predecessor, incarnation, &notice, deadline)
                    .await;
                self.announced_to = Some(predecessor);
            }
        }
        // The smallest live id does the fleet's chores (the slow scan, discovery); with no
        // periodic rounds, a worker that became it must be told to look.
        let chores = live
            .iter()
            .filter(|(_, capacity)| **capacity != Some(0))
            .map(|(w, _)| w)
            .min()
            .cloned();
        // So must it when a session was fenced here (or replaced): its process may have died
        // between giving a lease and telling the receiver, and only the chores tell again.
        let fenced = self.fenced().added();
        let news = fenced > self.fenced_told;
        self.fenced_told = fenced;
        if chores != self.chores || news {
            if let Some(worker) = chores.as_ref().filter(|w| *w != me) {
                if let Some(incarnation) = incarnations.get(worker).copied() {
                    let deadline = self.shared.now() + self.shared.config.store_timeout;
                    let notice = [member_notice(me)];
                    self.shared
                        .notify(worker, incarnation, &notice, deadline)
                        .await;
                }
            }
            self.chores = chores;
        }
        let mut counts: HashMap<&WorkerId, u32> = HashMap::new();
        for lease in &view.leases {
            if let Holder::Held(w) | Holder::Moving { to: w, .. } = &lease.holder {
                *counts.entry(w).or_default() += 1;
            }
        }
        let receivers = live
            .iter()
            .filter(|(w, capacity)| *w != me && **capacity != Some(0))
            .filter_map(|(w, _)| {
                incarnations.get(w).map(|i| Receiver {
                    worker: w.clone(),
                    incarnation: *i,
                    held: counts.get(w).copied().unwrap_or(0),
                })
            })
            .collect();
        *self
            .shared
            .placement
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = receivers;
    }

    /// With sessions, the next round comes only when something is due: a handoff we wait on
    /// times out; a lease whose session has no record becomes startable; this round moved
    /// something (to see that it converged); and, on the worker with the smallest live id,
    /// the slow scan.
    fn next_session_round(
        &self,
        snapshot: &Snapshot,
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        moved: bool,
        now: Instant,
    ) -> Instant {
        let config = &self.shared.config;
        let mut next = now + FAR;
        if self.is_smallest(live) {
            next = next.min(now + config.slow_scan_interval);
            // A lease given and not taken, or asked for and not handed over: look again when
            // the worker it waits on is told again (a receiver without a session is not told:
            // a placement round gives it on).
            for (what, since) in self.waiting.values() {
                let due = *since + patience(config, what);
                if due > now {
                    next = next.min(due);
                }
            }
        }
        if moved {
            next = next.min(now + config.renew_interval / 2);
        }
        for pending in self.shared.lock().pending.values() {
            next = next.min((pending.since + config.handoff_timeout).max(now));
        }
        for (lease, at) in snapshot.leases.iter().zip(expiry) {
            if *at > now && *at < now + FAR / 2 && lease.owner.is_some() {
                next = next.min(*at);
            }
        }
        next
    }

    /// Whether `key` may be taken by this worker without its owner's consent: its expiry has
    /// come on this worker's clock (with sessions: its owner's session is surely over).
    fn lease_expired(&self, key: &LeaseKey, now: Instant) -> bool {
        if self.shared.config.sessions() {
            self.expiry.get(key).is_some_and(|at| *at <= now)
        } else {
            self.leases.is_expired(key, now)
        }
    }

    /// This worker has the smallest id among the live ones: it does the fleet's chores
    /// (membership clean-up, discovery).
    /// This worker's rank by id among the live workers that are not leaving (a leaving
    /// worker publishes capacity 0 and has stopped its taker and discoverer).
    fn rank(&self, live: &HashMap<WorkerId, Option<u32>>) -> usize {
        live.iter()
            .filter(|(id, capacity)| **id < self.shared.id && **capacity != Some(0))
            .count()
    }

    fn is_smallest(&self, live: &HashMap<WorkerId, Option<u32>>) -> bool {
        self.rank(live) == 0
    }

    /// Hands this round's reading of the table to the discoverer, if there is one.
    fn publish(
        &self,
        snapshot: Snapshot,
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        now: Instant,
    ) {
        if !self.shared.discovering {
            return;
        }
        let owner_alive = snapshot
            .leases
            .iter()
            .zip(expiry)
            .filter(|(l, at)| alive(l, **at, now))
            .map(|(l, _)| l.key.clone())
            .collect();
        let rank = self.rank(live);
        let view = TableView {
            leases: snapshot.leases,
            owner_alive,
            malformed: snapshot.malformed,
            discoverer: rank == 0,
            standby: rank == 1,
        };
        self.shared.view.send_replace(Some(Arc::new(view)));
    }

    /// Records this scan's counters; returns when each lease (in snapshot order) expires.
    fn observe(&mut self, snapshot: &Snapshot, now: Instant) -> Vec<Instant> {
        let expiry = snapshot
            .leases
            .iter()
            .map(|lease| {
                self.leases
                    .observe(&lease.key, LeaseVersion::of(lease), now)
            })
            .collect();
        // Every key of the snapshot (they are unique) is remembered now: anything more is a
        // lease that was deleted.
        if self.leases.len() > snapshot.leases.len() {
            let keys: HashSet<&LeaseKey> = snapshot.leases.iter().map(|l| &l.key).collect();
            self.leases.retain(|k| keys.contains(k));
        }
        let ids: HashSet<&WorkerId> = snapshot.members.iter().map(|m| &m.worker).collect();
        self.members.retain(|w| ids.contains(w));
        for member in &snapshot.members {
            self.members
                .observe(&member.worker, (member.incarnation, member.heartbeat), now);
        }
        let fresh = snapshot.members.iter().map(|m| &m.worker);
        let fresh = fresh.filter(|w| !self.members.is_expired(w, now)).collect();
        self.shared.note_requesters(&snapshot.leases, &fresh);
        expiry
    }

    /// Looks for another live process with this worker's id, and reports one when it first
    /// shows up (an error: two processes must not share an id).
    fn observe_identity(&mut self, snapshot: &Snapshot, now: Instant) {
        let pending: HashSet<LeaseKey> = self.shared.lock().pending.keys().cloned().collect();
        if !self
            .identity
            .observe(snapshot, |k| pending.contains(k), now)
        {
            return;
        }
        let me = &self.shared.id;
        tracing::error!(
            worker = %me,
            incarnation = %self.shared.incarnation(),
            "another live process uses this worker id; each keeps the leases it holds, but \
             give every process an id of its own"
        );
        metrics::duplicate_worker_id(me);
        self.shared
            .emit(LeaseEvent::DuplicateWorkerId { worker: me.clone() });
    }

    /// How to report a take of a lease someone else may still be working on (a forced
    /// handoff, a steal, a lease of another process with this id): at once if it has expired
    /// here (its owner's validity has surely ended), else as a forced take bounded by that
    /// expiry.
    fn forced_report(&self, lease: &Lease, now: Instant) -> Report {
        if self.lease_expired(&lease.key, now) {
            Report::Quiet
        } else if self.shared.config.sessions() {
            Report::Acknowledged {
                owner: lease
                    .owner
                    .clone()
                    .unwrap_or_else(|| self.shared.id.clone()),
                incarnation: lease.owner_incarnation,
            }
        } else {
            Report::Forced(self.leases.expires_at(&lease.key))
        }
    }

    fn owner_alive(&self, lease: &Lease, now: Instant) -> bool {
        lease.owner.is_some() && !self.lease_expired(&lease.key, now)
    }

    /// Live workers: fresh membership records, owners of unexpired leases, and this worker.
    fn live_workers(
        &self,
        snapshot: &Snapshot,
        expiry: &[Instant],
        now: Instant,
    ) -> HashMap<WorkerId, Option<u32>> {
        let mut live: HashMap<WorkerId, Option<u32>> = snapshot
            .members
            .iter()
            .filter(|m| !self.members.is_expired(&m.worker, now))
            .map(|m| (m.worker.clone(), m.capacity))
            .collect();
        for (lease, at) in snapshot.leases.iter().zip(expiry) {
            if let (Some(owner), true) = (&lease.owner, alive(lease, *at, now)) {
                live.entry(owner.clone()).or_insert(None);
            }
        }
        live.insert(
            self.shared.id.clone(),
            Some(self.shared.config.max_leases_per_worker),
        );
        live
    }

    fn actions(
        &mut self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        now: Instant,
    ) -> Vec<Action> {
        let me = &self.shared.id;
        let config = &self.shared.config;
        let mut state = self.shared.lock();
        let mut room = (config.max_leases_per_worker as usize).saturating_sub(state.held.len());
        let mut actions = Vec::new();
        let mut still_pending = std::collections::BTreeMap::new();
        let mut revokes = Vec::new();
        let twin = self.identity.sees_twin(now);
        for (lease, status) in snapshot.leases.iter().zip(statuses) {
            let held_here = state.held.contains_key(&lease.key);
            let ownership = self.identity.ownership(lease);
            if let Some(pending) = state.pending.get(&lease.key) {
                match ownership {
                    // Handed over to this id: start it with a take of this process (and
                    // keep waiting on it until that take lands or loses the race).
                    Ownership::Foreign if lease.owner_incarnation.is_none() && !held_here => {
                        actions.push(Action::Adopt(lease.clone()));
                        still_pending.insert(lease.key.clone(), pending.clone());
                    }
                    // Our take of it landed (a forced take, or an adoption, whose answer was
                    // lost).
                    Ownership::Ours if !held_here => actions.push(Action::Resume(lease.clone())),
                    // Not handed over in time, or its owner died meanwhile (its lease
                    // expired): take it (reported at once if expired, see `execute`).
                    _ if lease.owner.as_ref() == Some(&pending.from)
                        && lease.handoff_to.as_ref() == Some(me) =>
                    {
                        let expired = self.lease_expired(&lease.key, now);
                        let late = now >= pending.since + config.handoff_timeout;
                        match (expired, late, lease.owner_incarnation) {
                            // With sessions, a live owner is never taken from: the table would
                            // then name neither the session still finishing the lease nor
                            // anything to wait for, should this worker's own session end
                            // before the owner let go. The owner is told to give the lease up
                            // now (it tells its application the lease is lost, then hands it
                            // over); told again each lease duration until it does, or its
                            // session is over.
                            (false, true, Some(incarnation)) if config.sessions() => {
                                revokes.push((
                                    pending.from.clone(),
                                    incarnation,
                                    lease.key.clone(),
                                ));
                                let again = (now + config.lease_duration)
                                    .checked_sub(config.handoff_timeout)
                                    .unwrap_or(now);
                                still_pending.insert(
                                    lease.key.clone(),
                                    Pending {
                                        since: again,
                                        from: pending.from.clone(),
                                    },
                                );
                            }
                            (true, _, _) | (_, true, _) => {
                                actions.push(Action::Force(lease.clone()));
                            }
                            _ => {
                                still_pending.insert(lease.key.clone(), pending.clone());
                            }
                        }
                    }
                    // Taken by somebody else (another process with this id included).
                    _ => {}
                }
                continue;
            }
            // Ours or foreign in the table, not held here, ready, and not on its way to
            // somebody else.
            let on_its_way = lease.handoff_to.as_ref().is_some_and(|to| to != me);
            let ready = *status == LeaseStatus::Ready;
            if held_here || on_its_way || !ready || room == 0 {
                continue;
            }
            let action = match ownership {
                Ownership::Ours => Action::Resume(lease.clone()),
                // Given to this id, with sessions: one session per id, so it is this one's.
                Ownership::Foreign if config.sessions() && lease.owner_incarnation.is_none() => {
                    Action::Given(lease.clone())
                }
                Ownership::Foreign => {
                    // Another live process with this id works on it: leave it until it
                    // expires, or the two would take their leases back and forth. With
                    // sessions, never before its session is surely over: that session may be
                    // the one that replaced this process's own, and a take from it would
                    // leave the table naming a session that, once fenced, nobody waits on,
                    // while the other process still works on the lease.
                    let expired = self.lease_expired(&lease.key, now);
                    if (twin || config.sessions()) && !expired {
                        continue;
                    }
                    Action::Foreign(lease.clone())
                }
                Ownership::Other => continue,
            };
            room -= 1;
            actions.push(action);
        }
        state.pending = still_pending;
        drop(state);
        self.revokes = revokes;
        actions
    }

    /// The fleet as the balance policy sees it: ready leases only (blocked, finished and
    /// retiring ones are nobody's to take or ask for).
    fn view(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        now: Instant,
    ) -> FleetView {
        let leases = snapshot
            .leases
            .iter()
            .zip(statuses)
            .zip(expiry)
            .filter(|((_, status), _)| **status == LeaseStatus::Ready)
            // With sessions, a lease whose session may still live but is not counted live
            // (not yet fenced, or without a record for less than a lease duration) is
            // nobody's to plan with until it is.
            .filter(|((lease, _), at)| {
                !self.shared.config.sessions()
                    || !alive(lease, **at, now)
                    || lease.owner.as_ref().is_some_and(|o| live.contains_key(o))
            })
            .map(|((lease, _), at)| {
                let holder = match &lease.owner {
                    Some(owner) if alive(lease, *at, now) && live.contains_key(owner) => {
                        match &lease.handoff_to {
                            Some(to) if live.contains_key(to) => Holder::Moving {
                                from: owner.clone(),
                                to: to.clone(),
                            },
                            _ => Holder::Held(owner.clone()),
                        }
                    }
                    _ => Holder::Available,
                };
                LeaseView {
                    key: lease.key.clone(),
                    holder,
                    load: lease.load,
                }
            })
            .collect();
        let workers = live
            .iter()
            .map(|(id, capacity)| WorkerView {
                id: id.clone(),
                capacity: capacity.unwrap_or(u32::MAX),
                load: None,
            })
            .collect();
        FleetView { leases, workers }
    }

    async fn execute(
        &mut self,
        actions: Vec<Action>,
        moves: Vec<Move>,
        by_key: &HashMap<&LeaseKey, &Lease>,
        now: Instant,
    ) {
        // Too slow to hold leases (see `health.rs`): whatever it took now it would lose again,
        // while its late writes kept the leases looking alive to the peers.
        let slow = self.shared.health.is_slow();
        let closed = self.shared.config.sessions() && !self.shared.session_valid();
        if slow || closed {
            if !actions.is_empty() || !moves.is_empty() {
                let why = if slow {
                    "store round trips too slow: taking nothing this round"
                } else {
                    "session not valid here (closed, or no beat landed within its validity): taking nothing this round"
                };
                tracing::info!(skipped = actions.len() + moves.len(), "{why}");
            }
            return;
        }
        let limit = Arc::new(Semaphore::new(self.shared.config.max_concurrent_renewals));
        let mut jobs = JoinSet::new();
        let mut spawn = |job: Job| {
            let (shared, limit) = (Arc::clone(&self.shared), Arc::clone(&limit));
            jobs.spawn(
                async move {
                    let Ok(_permit) = limit.acquire_owned().await else {
                        return Answer::None;
                    };
                    job.run(&shared).await
                }
                .in_current_span(),
            );
        };
        let acted: HashSet<LeaseKey> = actions.iter().map(|a| a.key().clone()).collect();
        for action in actions {
            spawn(match action {
                // Ours: nobody else worked on it since, unless our take's answer was lost.
                Action::Resume(lease) => {
                    let unacknowledged = self
                        .shared
                        .unacknowledged
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&lease.key)
                        .cloned();
                    let report = match (unacknowledged, self.identity.unanswered_since(&lease.key))
                    {
                        // Forced from a session that has not acknowledged yet: still waits.
                        (Some((owner, incarnation)), _) => {
                            Report::Acknowledged { owner, incarnation }
                        }
                        (None, Some(since)) => Report::ForcedSince(since),
                        (None, None) => Report::Quiet,
                    };
                    Job::Take { lease, report }
                }
                // With sessions, the other process of this id may still beat (it may have
                // replaced this one's record, unknown here yet): its lease is reported once it
                // acknowledges or its session is surely over, as any forced take.
                Action::Foreign(lease) | Action::Force(lease) => {
                    let report = self.forced_report(&lease, now);
                    Job::Take { lease, report }
                }
                Action::Adopt(lease) => Job::Adopt(lease),
                Action::Given(lease) => Job::Take {
                    lease,
                    report: Report::Quiet,
                },
            });
        }
        for step in moves {
            let key = match &step {
                Move::Take(key) | Move::RequestHandoff { key, .. } => key,
            };
            let Some(lease) = by_key.get(key).filter(|_| !acted.contains(key)) else {
                continue;
            };
            let lease = (*lease).clone();
            // A take of a lease whose owner is alive is a steal (a policy like KCL's): the
            // owner may still be working until its next renewal fails, so the lease is
            // reported only once its validity has certainly ended, as after a forced handoff.
            let steal =
                self.identity.ownership(&lease) != Ownership::Ours && self.owner_alive(&lease, now);
            let report = if steal {
                self.forced_report(&lease, now)
            } else {
                Report::Quiet
            };
            // With sessions, a lease given and not yet taken is about to be started by its
            // receiver, whose take would clear the request unseen: ask once it has.
            if self.shared.config.sessions()
                && matches!(step, Move::RequestHandoff { .. })
                && lease.owner_incarnation.is_none()
            {
                continue;
            }
            spawn(match step {
                Move::Take(_) => Job::Take { lease, report },
                Move::RequestHandoff { from, .. } => Job::Request { lease, from },
            });
        }
        while let Some(answer) = jobs.join_next().await {
            self.record(answer.unwrap_or(Answer::None));
        }
    }

    /// Remembers which takes went unanswered, and forgets those that were answered since.
    fn record(&mut self, answer: Answer) {
        match answer {
            Answer::Taken(key) => self.identity.answered(&key),
            Answer::Unanswered { key, since } => self.identity.unanswered(key, since),
            Answer::LostRace | Answer::None => {}
        }
    }

    /// Removes membership records that stopped changing a lease duration ago and whose worker
    /// holds nothing. One worker does it (the smallest live id) to spare writes; it is a
    /// conditional delete, so a worker that comes back in between keeps its record.
    async fn clean_up_members(
        &self,
        snapshot: &Snapshot,
        live: &HashMap<WorkerId, Option<u32>>,
        now: Instant,
    ) {
        if !self.is_smallest(live) {
            return;
        }
        let deadline = now + self.shared.config.store_timeout;
        for member in &snapshot.members {
            if live.contains_key(&member.worker) || !self.members.is_expired(&member.worker, now) {
                continue;
            }
            let result = self
                .shared
                .store
                .remove_member(&member.worker, Some(member.heartbeat), deadline)
                .await;
            if let Ok(Outcome::Done(_)) = result {
                tracing::info!(worker = %member.worker, "removed the membership record of a dead worker");
            }
        }
    }

    /// The next round: after the taker interval, or at the moment an observed lease or
    /// member would expire, or a handoff we wait on times out, whichever is first.
    fn next_round(&self, snapshot: &Snapshot, expiry: &[Instant], now: Instant) -> Instant {
        let config = &self.shared.config;
        let mut next = now + config.taker_interval;
        for pending in self.shared.lock().pending.values() {
            next = next.min((pending.since + config.handoff_timeout).max(now));
        }
        if !config.scan_at_expiry {
            return next;
        }
        for (lease, at) in snapshot.leases.iter().zip(expiry) {
            let ours = self.identity.ownership(lease) == Ownership::Ours;
            if *at > now && lease.owner.is_some() && !ours {
                next = next.min(*at);
            }
        }
        for member in &snapshot.members {
            if let Some(at) = self
                .members
                .expires_at(&member.worker)
                .filter(|at| *at > now)
            {
                next = next.min(at);
            }
        }
        next
    }

    /// Reads the leases we wait on; starts those handed over to us.
    async fn poll_pending(&mut self) {
        let keys: Vec<LeaseKey> = self.shared.lock().pending.keys().cloned().collect();
        let deadline = self.shared.now() + self.shared.config.store_timeout;
        for key in keys {
            match self.shared.store.get(&key, deadline).await {
                Ok(Some(lease))
                    if lease.is_owned_by(&self.shared.id) && lease.owner_incarnation.is_none() =>
                {
                    let answer = Job::Adopt(lease).run(&self.shared).await;
                    self.record(answer);
                }
                // Our adoption landed and its answer was lost: the next round resumes it.
                Ok(Some(lease)) if self.identity.ownership(&lease) == Ownership::Ours => {}
                Ok(Some(lease)) if lease.handoff_to.as_ref() == Some(&self.shared.id) => {}
                Ok(_) => {
                    self.shared.lock().pending.remove(&key);
                    // With sessions no periodic round would notice what is still missing.
                    if self.shared.config.sessions() {
                        self.shared.rescan.notify_one();
                    }
                }
                Err(err) => {
                    tracing::debug!(lease_key = %key, error = %err, "handoff poll failed");
                }
            }
        }
    }
}

/// The open session of each member of `snapshot` (records written by an older version,
/// without an incarnation, have none).
fn incarnations(snapshot: &Snapshot) -> HashMap<&WorkerId, Incarnation> {
    snapshot
        .members
        .iter()
        .filter_map(|m| m.incarnation.map(|i| (&m.worker, i)))
        .collect()
}

/// An owned lease whose counter, last changed so that it expires at `expiry`, has not yet
/// stayed unchanged a whole lease duration on this observer's clock.
fn alive(lease: &Lease, expiry: Instant, now: Instant) -> bool {
    lease.owner.is_some() && now < expiry
}
