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
//!
//! This file holds the round (scan, judge expiry on this worker's clock, clean up members,
//! schedule the next round) and the wait on handoffs this worker asked for; `moves.rs` decides
//! and writes what to do with each lease; `sessions.rs` judges the fleet by sessions and places
//! leases; `chores.rs` is the session chores of the worker that does them. The take itself is
//! `../take.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::identity::{Identity, Ownership};
use super::metrics;
use super::own::OwnSession;
use super::parts::SessionVersion;
use super::parts::{Announced, Ring};
use super::state::{revoke_notice, Holder, TableView};
use super::take::{Job, Unacknowledged};
use crate::balance::{BalancePolicy, Move};
use crate::expiry::ExpiryTracker;
use crate::fasthash::FastMap;
use crate::lease::{ByKey, Incarnation, Lease, LeaseKey, Member, Snapshot, WorkerId};
use crate::lifecycle;
use crate::store::StoreError;
use decide::Live;

mod chores;
mod decide;
mod moves;
mod sessions;

/// What the taker is handed beside the [`Holder`]: the parts only it (and the loop it shares
/// each with) uses.
pub(crate) struct TakerParts {
    /// This process's session: may it take, and since when are the sessions its opening
    /// replaced over?
    pub own: Arc<OwnSession>,
    /// Between the taker and the watcher: the session to watch, and what was seen of it.
    pub ring: Arc<Ring>,
    /// Where the taker publishes its latest reading of the table for the discoverer; `None`
    /// without a shard source.
    pub view: Option<watch::Sender<Option<Arc<TableView>>>>,
    /// Workers that announced themselves to the session loop.
    pub announced: Arc<Announced>,
    /// The takes awaiting an acknowledgement (shared with the session loop's takes).
    pub unacknowledged: Arc<Unacknowledged>,
}

pub(crate) struct Taker {
    shared: Arc<Holder>,
    parts: TakerParts,
    policy: Arc<dyn BalancePolicy>,
    /// Members by (incarnation, heartbeat): a record removed and written again by another
    /// process (or another session) starts its heartbeat again, and must
    /// not match a value seen before.
    members: ExpiryTracker<WorkerId, SessionVersion>,
    identity: Identity,
    /// Sessions named by leases whose record is gone or names another
    /// incarnation (they can never beat again), by when this worker first saw them so.
    ended: ExpiryTracker<(WorkerId, Option<Incarnation>)>,
    /// Sessions of `ended` whose record a consistent read showed replaced by another
    /// process of the same id, by when this worker first read it so (see
    /// `Taker::confirm_ended`).
    replaced: HashMap<(WorkerId, Option<Incarnation>), Instant>,
    /// When each lease of the last round may be started by others (its owner's
    /// session surely over); a lease whose session lives is absent.
    expiry: FastMap<LeaseKey, Instant>,
    /// The workers watching this one (the two before it) that it last told it joined.
    announced_to: Vec<WorkerId>,
    /// The live workers of the last round, to see the fleet change.
    last_fleet: Vec<WorkerId>,
    /// Since when the rounds have seen workers join, and when one last saw
    /// one join (see [`Taker::gathering`]).
    joining: Option<(Instant, Instant)>,
    /// The worker that does the fleet's chores, as the last round saw it.
    chores: Option<WorkerId>,
    /// On the worker doing the chores: who held each lease at its last round.
    holders: HashMap<LeaseKey, decide::Holding>,
    /// On the worker doing the chores: each lease that waits on a worker (given
    /// and not yet taken, or asked of its holder in a handoff not yet done), and since when
    /// (this worker's clock) it has waited so.
    waiting: HashMap<LeaseKey, (decide::Waiting, Instant)>,
    /// On the worker doing the chores: when it last looked for leases waiting.
    last_look: Option<Instant>,
    /// Handoffs asked by this worker and not done in time, whose owners this
    /// round tells to give them up (see `REVOKE`).
    revokes: Vec<decide::Revoke>,
    /// How many sessions this process had fenced at its last round.
    fenced_told: u64,
    /// Held leases without a load figure, since when this worker has seen them so (a lease
    /// that waited longer than [`FIGURE_WAIT`] publish intervals counts as settled: see
    /// [`LeaseView::settled`](crate::balance::LeaseView::settled)).
    unmeasured: HashMap<LeaseKey, Instant>,
    /// Each member's session and the heartbeat this worker first saw it at: a member whose
    /// heartbeat has not moved since is not yet known to live (see [`Taker::proven`]).
    first_beats: HashMap<WorkerId, (Option<Incarnation>, u64)>,
    /// A placement this round skipped a receiver not yet known to live: look again once it
    /// may have beaten.
    unproven: bool,
}

/// How many load publish intervals a held lease without a figure is waited for before a load
/// policy plans with a guess for it: its holder publishes a lease's first figure with its next
/// write after measuring it for one interval.
pub(crate) const FIGURE_WAIT: u32 = 2;

/// A value of [`Taker::ended`]: the session has no record of its own any more.
const NO_RECORD: u64 = u64::MAX;

impl Taker {
    pub fn new(shared: Arc<Holder>, parts: TakerParts, policy: Arc<dyn BalancePolicy>) -> Self {
        let duration = shared.config.lease_duration;
        let identity = Identity::new(shared.id.clone(), shared.incarnation());
        Self {
            shared,
            parts,
            policy,
            members: ExpiryTracker::new(duration),
            identity,
            ended: ExpiryTracker::new(duration),
            replaced: HashMap::new(),
            expiry: FastMap::default(),
            announced_to: Vec::new(),
            last_fleet: Vec::new(),
            joining: None,
            chores: None,
            holders: HashMap::new(),
            waiting: HashMap::new(),
            last_look: None,
            revokes: Vec::new(),
            fenced_told: 0,
            unmeasured: HashMap::new(),
            first_beats: HashMap::new(),
            unproven: false,
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
                    (started + config.effective_taker_interval()).max(self.shared.now())
                }
            };
        }
    }

    /// One round; returns when the next one should run.
    async fn round(&mut self) -> Result<Instant, StoreError> {
        let config = self.shared.config.clone();
        let snapshot = self.read_table().await?;
        // Observed at the end of the scan: every value read was written before now, so no
        // owner's validity (counted from before its write) can outlast now + lease duration.
        let now = self.shared.now();
        let by_key = ByKey::new(&snapshot.leases);
        self.begin_round(&by_key, now);
        tracing::debug!(
            leases = snapshot.leases.len(),
            members = snapshot.members.len(),
            "taker round"
        );
        self.note_first_beats(&snapshot);
        let expiry = self.observe_sessions(&snapshot, now).await;
        let live = self.live_sessions(&snapshot, now);
        let statuses = lifecycle::statuses(&snapshot.leases);
        let actions = self.actions(&snapshot, &statuses, now);
        let view = self.view(&snapshot, &statuses, &live, &expiry, now);
        self.note_unmeasured(&view, now);
        // The assignment also places others' leases: computed once (at 100,000 leases it is a
        // good part of a round's work).
        let placement = self.policy.assign(&view);
        let mut moves = self.policy.plan_with(&view, &self.shared.id, &placement);
        // A first round finds the fleet "changed" from nothing, and gathers. One in which the
        // assignment moves nothing, for this worker or anyone, held nothing back that a look
        // again would do: the fleet it joined is balanced without it (a process started in a
        // running fleet; each worker of a deployment resuming its own leases). What it did
        // brings a round of its own below (`moved`), and so do a give and an announcement of a
        // worker it does not watch yet. The worker doing the chores looks again all the same: the next look at who holds
        // what (`notice_changes`) then sees the others' first takes while they are starting,
        // not later, when telling each holder of them costs it a read of every lease at rest.
        let settled_start = self.last_fleet.is_empty()
            && placement.moves.values().all(Vec::is_empty)
            && !self.is_smallest(&live);
        let (fleet_changed, gathering) = self.see_fleet(&live, now);
        if gathering {
            moves.retain(|step| match step {
                Move::Take(key) => by_key.get(key).is_some_and(|l| l.owner.is_some()),
                Move::RequestHandoff { .. } => false,
            });
        }
        let me = &self.shared.id;
        let below_share = placement.counts.get(me) < placement.targets.get(me);
        self.warn(&snapshot, &statuses, &live, &expiry, now).await;
        if self.is_smallest(&live) {
            self.notice_changes(&snapshot, now).await;
        }
        self.place(&snapshot, &placement, &by_key, gathering, now)
            .await;
        self.tell_revokes(now).await;
        let settled = self.execute(actions, moves, &by_key, now).await;
        // Nothing else brings the next round: keep looking while this worker is below its
        // share, or moved something it has not seen through (a take lost or unanswered, a
        // handoff asked). Takes all answered (its own leases resumed at a start) leave
        // nothing to look at.
        let moved = !settled || below_share;
        self.ring(&snapshot, &live, &view).await;
        let next = self.next_session_round(&snapshot, &live, &expiry, moved, now);
        // Workers joining together see each other one round later: look again soon.
        let next = if (fleet_changed || gathering) && !settled_start {
            next.min(now + config.effective_renew_interval() / 8)
        } else {
            next
        };
        self.publish(snapshot, &live, &expiry, now);
        Ok(next)
    }

    /// The round's reading of the table: an eventually consistent scan, with the workers that
    /// announced themselves and the one doing the chores read consistently. Every write a
    /// round leads to is conditioned on what it read, so a stale read costs a lost race at
    /// most: eventually consistent, at half the price.
    async fn read_table(&self) -> Result<Snapshot, StoreError> {
        let deadline = self.shared.now() + self.shared.config.store_timeout;
        let mut snapshot = self.shared.store.snapshot_eventually(deadline).await?;
        self.see_announced(&mut snapshot, deadline).await;
        self.confirm_chores(&mut snapshot, deadline).await;
        Ok(snapshot)
    }

    /// Follows this process's session (a new one must announce itself to its predecessor
    /// again) and forgets the takes the table no longer needs remembered.
    fn begin_round(&mut self, by_key: &ByKey<'_>, now: Instant) {
        let incarnation = self.shared.incarnation();
        if self.identity.ownership_incarnation() != incarnation {
            // A new session: its watchers must hear of it again.
            self.announced_to.clear();
        }
        self.identity.set_incarnation(incarnation);
        let retire_after = self.shared.config.retire_after;
        self.identity.settle(by_key, now, retire_after);
        self.shared.forget_takes(by_key, retire_after);
    }

    /// Whether the live workers changed since the last round, and whether this round only
    /// gathers (see [`Taker::gathering`]).
    fn see_fleet(&mut self, live: &Live, now: Instant) -> (bool, bool) {
        let mut fleet: Vec<WorkerId> = live.keys().cloned().collect();
        fleet.sort();
        let fleet_changed = fleet != self.last_fleet;
        let joined = fleet
            .iter()
            .any(|w| self.last_fleet.binary_search(w).is_err());
        self.last_fleet = fleet;
        (fleet_changed, self.gathering(joined, now))
    }

    /// Tells the owners of the handoffs this worker asked for and that were not done in time
    /// to give the leases up.
    async fn tell_revokes(&mut self, now: Instant) {
        let deadline = now + self.shared.config.store_timeout;
        for revoke in std::mem::take(&mut self.revokes) {
            let decide::Revoke {
                owner,
                session,
                key,
            } = revoke;
            tracing::info!(lease_key = %key, owner = %owner, "handoff not done in time: telling its owner to give the lease up");
            self.shared
                .notify(&owner, session, &[revoke_notice(&key)], deadline)
                .await;
        }
    }

    /// A worker that announced it joined next to this one (a member notice) brought this
    /// round, whose eventually consistent scan may not show it yet: such a round would watch
    /// the wrong session, and nothing would bring another before the slow scan (a crash of
    /// the newcomer went unseen for 50 s:
    /// `a_worker_that_announced_itself_is_watched_though_a_stale_scan_misses_it` in
    /// `sim/tests/campaign_holes.rs`).
    /// Each one the scan does not show is read consistently and added; one that cannot be
    /// read waits for the next round.
    async fn see_announced(&self, snapshot: &mut Snapshot, deadline: Instant) {
        let announced = self.parts.announced.take();
        let mut unread = Vec::new();
        for worker in announced {
            if snapshot.members.iter().any(|m| m.worker == worker) {
                continue;
            }
            match self.shared.store.get_member(&worker, true, deadline).await {
                Ok(read) => put_member(snapshot, &worker, read),
                Err(err) => {
                    tracing::debug!(worker = %worker, error = %err, "could not read a worker that announced itself; the next round reads it");
                    unread.push(worker);
                }
            }
        }
        if !unread.is_empty() {
            self.parts.announced.put_back(unread);
        }
    }

    /// The worker with the smallest live id does the fleet's chores (the slow scan, discovery),
    /// and a worker that is not it has no round due at rest. An eventually consistent scan may
    /// show a smaller worker that has left (its record gone, or its capacity 0): a worker
    /// that trusted it neither did the chores nor was ever told to, since the others had
    /// seen the change already and told it once (seen in the campaign: leases of removed
    /// shards never retired, the discoverer standing by for a worker that had left:
    /// `a_worker_that_left_shown_by_a_stale_scan_does_not_keep_the_chores` in
    /// `sim/tests/campaign_holes.rs`). So the smallest other worker the scan shows below
    /// this one is read consistently, and, while the read shows it gone or leaving, the next
    /// one. A read that fails leaves the scan's figure: the next round reads again.
    async fn confirm_chores(&self, snapshot: &mut Snapshot, deadline: Instant) {
        let me = &self.shared.id;
        loop {
            let Some(at) = snapshot
                .members
                .iter()
                .position(|m| m.worker < *me && m.capacity != Some(0))
            else {
                return;
            };
            let worker = snapshot.members[at].worker.clone();
            match self.shared.store.get_member(&worker, true, deadline).await {
                Ok(read) => {
                    let gone = read.as_ref().is_none_or(|m| m.capacity == Some(0));
                    put_member(snapshot, &worker, read);
                    if !gone {
                        return;
                    }
                }
                Err(err) => {
                    tracing::debug!(worker = %worker, error = %err, "could not read the worker that does the chores; the next round reads it");
                    return;
                }
            }
        }
    }

    /// Notes the heartbeat each member's session was first seen at here; forgets the members
    /// the scan does not show.
    fn note_first_beats(&mut self, snapshot: &Snapshot) {
        let mut still = HashMap::with_capacity(snapshot.members.len());
        for member in &snapshot.members {
            let first = match self.first_beats.get(&member.worker) {
                Some((incarnation, heartbeat)) if *incarnation == member.incarnation => {
                    (*incarnation, (*heartbeat).min(member.heartbeat))
                }
                _ => (member.incarnation, member.heartbeat),
            };
            still.insert(member.worker.clone(), first);
        }
        self.first_beats = still;
        self.parts
            .ring
            .appeared()
            .retain(|w, _| self.first_beats.contains_key(w));
    }

    /// Whether `member`'s session is known to live: its heartbeat moved since this worker first
    /// saw it. A record first seen now may be that of a process that died long ago, right
    /// after it opened its session (nobody had looked at the table since): leases asked from
    /// their owners on its behalf would wait for it, unprocessed, until its session is fenced
    /// a lease duration later (12 leases unprocessed for 8 s after the fleet had settled:
    /// `leases_are_not_placed_with_a_worker_never_seen_to_beat` in `sim/tests/campaign_holes.rs`).
    /// A worker that joins takes its share by itself meanwhile; others place leases with it
    /// once it has beaten, or once the watcher saw its session open in place of the one it
    /// watched (a restart: the record was written while it watched).
    fn proven(&self, member: &Member) -> bool {
        let beaten = self
            .first_beats
            .get(&member.worker)
            .is_some_and(|(incarnation, first)| {
                *incarnation == member.incarnation && member.heartbeat > *first
            });
        beaten
            || member.incarnation.is_some()
                && self.parts.ring.appeared().get(&member.worker).copied() == member.incarnation
    }

    /// Whether this round only gathers, because it saw workers join (`joined`)
    /// that the last round did not see. Workers that start together (a cold start, a wave of
    /// an autoscaler, a rolling deployment) open their sessions a few milliseconds or seconds
    /// apart, and each one's first rounds see only some of the others: a worker that took or
    /// asked for its share by such a view would take too much and hand most of it on again.
    /// So until `renew_interval / 8` after a round last saw a new worker (the rounds rescan
    /// that soon while the fleet changes), nothing that nobody needs moves: no lease nobody
    /// ever held is taken or given, and no handoff is asked. Leases whose session ended are
    /// still taken and given at once (failover does not wait), and however fast workers keep
    /// joining, a round acts at least once a lease duration.
    fn gathering(&mut self, joined: bool, now: Instant) -> bool {
        let config = &self.shared.config;
        if joined {
            let since = self.joining.map_or(now, |(since, _)| since);
            self.joining = Some((since, now));
        }
        let Some((since, last)) = self.joining else {
            return false;
        };
        if now < last + config.effective_renew_interval() / 8 && now < since + config.lease_duration
        {
            true
        } else {
            self.joining = None;
            false
        }
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
                    let answer = Job::Adopt(lease)
                        .run(&self.shared, &self.parts.own, &self.parts.unacknowledged)
                        .await;
                    self.record(answer);
                }
                // Our adoption landed and its answer was lost: the next round resumes it.
                Ok(Some(lease)) if self.identity.ownership(&lease) == Ownership::Ours => {}
                Ok(Some(lease)) if lease.handoff_to.as_ref() == Some(&self.shared.id) => {}
                Ok(_) => {
                    self.shared.lock().pending.remove(&key);
                    // No periodic round would notice what is still missing.
                    self.shared.rescan.notify_one();
                }
                Err(err) => {
                    tracing::debug!(lease_key = %key, error = %err, "handoff poll failed");
                }
            }
        }
    }
}

/// Puts `read`, a consistent read of `worker`'s record, in `snapshot` in place of what the
/// scan showed of it (`None`: the record is gone), keeping the members in id order.
fn put_member(snapshot: &mut Snapshot, worker: &WorkerId, read: Option<Member>) {
    let at = snapshot.members.partition_point(|m| m.worker < *worker);
    let shown = snapshot
        .members
        .get(at)
        .is_some_and(|m| m.worker == *worker);
    match (read, shown) {
        (Some(member), true) => snapshot.members[at] = Arc::new(member),
        (Some(member), false) => snapshot.members.insert(at, Arc::new(member)),
        (None, true) => {
            snapshot.members.remove(at);
        }
        (None, false) => {}
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
