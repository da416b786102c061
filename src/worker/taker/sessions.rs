//! The taker's judgement of the fleet by sessions (which live, which ended,
//! which to fence), the placement of leases on others' behalf, the worker's rank and what it
//! publishes, and when the next event-driven round is due.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::decide::Live;
use super::{alive, incarnations, Taker, FIGURE_WAIT, NO_RECORD};
use crate::balance::{Assignment, Move};
use crate::fasthash::FastMap;
use crate::lease::{ByKey, Incarnation, LeaseKey, Snapshot, WorkerId};
use crate::store::Outcome;
use crate::worker::fenced::{Fenced, SessionId};
use crate::worker::metrics;
use crate::worker::state::{Holder, TableView};
use crate::worker::take::FAR;

/// A round's first judgement of the sessions its leases name (see `Taker::first_expiry`).
struct Judged {
    /// When each lease of the snapshot may be started by others.
    expiry: Vec<Instant>,
    /// The sessions named by leases that have no record of their own.
    named: HashSet<(WorkerId, Option<Incarnation>)>,
    /// The sessions fenced here that the leases still name.
    still_fenced: HashSet<SessionId>,
}

impl Taker {
    /// Records the members' beats, fences every session seen unchanged for a
    /// lease duration, and returns, per lease of the snapshot, when it may be started by
    /// another worker: at once if its owner's session was fenced here, a lease duration after
    /// this worker first saw that session without a record of its own, and not while the
    /// session has its record (a far instant).
    pub(super) async fn observe_sessions(
        &mut self,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Vec<Instant> {
        self.note_beats(snapshot, now);
        self.fence_expired(snapshot, now).await;
        let fenced = self.fenced().clone();
        let judged = self.first_expiry(snapshot, &fenced, now);
        self.ended.retain(|s| judged.named.contains(s));
        self.replaced.retain(|s, _| judged.named.contains(s));
        let confirmed_live = self.confirm_ended(&judged.named, now).await;
        let expiry = self.confirmed_expiry(snapshot, judged.expiry, &confirmed_live, now);
        // The sessions fenced here that the table no longer names: nothing can be started on
        // their account any more, so they are forgotten. Only those this round judged: a fence
        // made since it copied the set is kept for the next round. (Were one forgotten too
        // early, its leases would wait a lease duration, as any session's without a record.)
        if !fenced.is_empty() {
            let mut still_fenced = judged.still_fenced;
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
        let far = now + FAR;
        self.expiry = snapshot
            .leases
            .iter()
            .zip(&expiry)
            .filter(|(_, at)| **at < far)
            .map(|(l, at)| (l.key.clone(), *at))
            .collect();
        expiry
    }

    /// Records each member's (session, heartbeat) as seen now, here and for the watcher;
    /// forgets the members the scan does not show.
    fn note_beats(&mut self, snapshot: &Snapshot, now: Instant) {
        let ids: HashSet<&WorkerId> = snapshot.members.iter().map(|m| &m.worker).collect();
        self.members.retain(|w| ids.contains(w));
        for member in &snapshot.members {
            self.members
                .observe(&member.worker, (member.incarnation, member.heartbeat), now);
        }
        let mut seen = self.parts.ring.members_seen();
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

    /// Fences every other member's session seen unchanged for a lease duration.
    async fn fence_expired(&self, snapshot: &Snapshot, now: Instant) {
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
                .fences
                .fence(&member.worker, incarnation, member.heartbeat, deadline)
                .await;
            if let Err(err) = fenced {
                metrics::store_error(&self.shared.id, "end_session");
                tracing::warn!(worker = %member.worker, error = %err, "could not fence an expired session");
            }
        }
    }

    /// When each lease of the snapshot may be started by others, as the scan shows its
    /// owner's session (before the sessions without a record are read again).
    fn first_expiry(&mut self, snapshot: &Snapshot, fenced: &Fenced, now: Instant) -> Judged {
        let records: FastMap<&WorkerId, Option<Incarnation>> = snapshot
            .members
            .iter()
            .map(|m| (&m.worker, m.incarnation))
            .collect();
        let mut named = HashSet::new();
        let mut still_fenced: HashSet<SessionId> = HashSet::new();
        let far = now + FAR;
        let predecessors = self.parts.own.predecessors();
        let expiry: Vec<Instant> = snapshot
            .leases
            .iter()
            .map(|lease| {
                let Some(owner) = &lease.owner else {
                    return now;
                };
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
                // A session of this worker's id that this one's opening replaced is over a
                // lease duration after that (`OwnSession::predecessors`), even while an eventually
                // consistent scan still shows its record: its leases wait no longer than that.
                let mine = *owner == self.shared.id;
                let over = predecessors
                    .as_ref()
                    .filter(|(_, replaced)| {
                        mine && lease
                            .owner_incarnation
                            .is_some_and(|i| replaced.contains(&i))
                    })
                    .map(|(at, _)| (*at).max(now));
                // A session of this process's own that ended here: its leases were lost here
                // at once, and nobody else works on them.
                let own_earlier = mine
                    .then_some(lease.owner_incarnation)
                    .flatten()
                    .and_then(|i| self.parts.own.earlier_over(i));
                if let Some(at) = own_earlier {
                    return at.max(now);
                }
                let capped = |at: Instant| over.map_or(at, |over| at.min(over));
                if has_record {
                    return capped(far);
                }
                let session = (owner.clone(), lease.owner_incarnation);
                named.insert(session.clone());
                capped(self.ended.observe(&session, NO_RECORD, now))
            })
            .collect();
        Judged {
            expiry,
            named,
            still_fenced,
        }
    }

    /// `expiry` once the sessions without a record were read again: a session a consistent
    /// read showed live (or could not read) is not over; one replaced by another process of
    /// its id is over a lease duration after the read that first showed it so (a session this
    /// one's opening replaced is judged by `OwnSession::predecessors` instead).
    fn confirmed_expiry(
        &self,
        snapshot: &Snapshot,
        expiry: Vec<Instant>,
        confirmed_live: &HashSet<(WorkerId, Option<Incarnation>)>,
        now: Instant,
    ) -> Vec<Instant> {
        if confirmed_live.is_empty() && self.replaced.is_empty() {
            return expiry;
        }
        let (far, lease_duration) = (now + FAR, self.shared.config.lease_duration);
        snapshot
            .leases
            .iter()
            .zip(expiry)
            .map(|(lease, at)| {
                let Some(owner) = &lease.owner else {
                    return at;
                };
                let session = (owner.clone(), lease.owner_incarnation);
                if confirmed_live.contains(&session) {
                    return far;
                }
                match self.replaced.get(&session) {
                    Some(seen) if *owner != self.shared.id => at.max(*seen + lease_duration),
                    _ => at,
                }
            })
            .collect()
    }

    /// The sessions `named` without a record of their own whose leases this round would
    /// start or place (a lease duration since this worker first saw them so) are read again,
    /// consistently: the scan that showed no record may have been served by a replica that
    /// had not seen it yet (a session just opened), and a live session's leases must never
    /// be taken for orphans. A record that is there, of that session, means the session lives:
    /// it is forgotten here. A record that is gone is a fact: that session can never beat
    /// again, and its validity has ended (a record is removed by its owner leaving, or by a
    /// fence after it expired). A record of another session of the same id means the first
    /// can never beat again, but not that its validity ended: a new process of the id (a
    /// restart, a twin) replaces the record at once, and the session it replaced may have
    /// beaten just before. Its leases wait a lease duration from the first read that showed
    /// it replaced (`Taker::replaced`; a twin started a lease its other process still held:
    /// `a_session_replaced_by_a_twin_is_over_a_lease_duration_after_the_read_that_showed_it`
    /// in `sim/tests/campaign_holes.rs`). A failed read keeps the session waiting. Returns the
    /// sessions whose leases wait this round.
    async fn confirm_ended(
        &mut self,
        named: &HashSet<(WorkerId, Option<Incarnation>)>,
        now: Instant,
    ) -> HashSet<(WorkerId, Option<Incarnation>)> {
        let due: Vec<(WorkerId, Option<Incarnation>)> = {
            let mut due: Vec<_> = named
                .iter()
                .filter(|s| self.ended.is_expired(s, now))
                .cloned()
                .collect();
            due.sort();
            due
        };
        let (mut live, mut waiting) = (HashSet::new(), HashSet::new());
        let deadline = now + self.shared.config.store_timeout;
        for session in due {
            let (worker, incarnation) = &session;
            let read = self.shared.store.get_member(worker, true, deadline).await;
            match read {
                Ok(Some(record)) if incarnation.is_some() && record.incarnation == *incarnation => {
                    tracing::info!(worker = %worker, "a scan showed no record of a live session: its leases stay");
                    live.insert(session);
                }
                Ok(Some(_)) => {
                    self.replaced.entry(session).or_insert(now);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::debug!(worker = %worker, error = %err, "could not read a session's record; its leases wait");
                    waiting.insert(session);
                }
            }
        }
        self.ended.retain(|s| !live.contains(s));
        waiting.extend(live);
        waiting
    }

    pub(super) fn fenced(&self) -> std::sync::MutexGuard<'_, Fenced> {
        self.shared.fences.lock()
    }

    /// The live workers are the members whose session is open and has not
    /// been seen unchanged for a lease duration, and this worker.
    pub(super) fn live_sessions(&self, snapshot: &Snapshot, now: Instant) -> Live {
        let fenced = self.fenced().clone();
        let mut live: Live = snapshot
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

    /// The leases nobody alive holds that the assignment gives to other
    /// workers are given to them, and each receiver is told in one notice. (What it gives to
    /// this worker, the policy takes.) While `gathering` (see [`Taker::gathering`]), only the
    /// leases of ended sessions.
    pub(super) async fn place(
        &mut self,
        snapshot: &Snapshot,
        assignment: &Assignment,
        by_key: &ByKey<'_>,
        gathering: bool,
        now: Instant,
    ) {
        if self.shared.health.is_slow() || !self.parts.own.valid() {
            return;
        }
        let incarnations = incarnations(snapshot);
        tracing::debug!(
            counts = ?assignment.counts.iter().collect::<BTreeMap<_, _>>(),
            targets = ?assignment.targets.iter().collect::<BTreeMap<_, _>>(),
            moves = ?assignment.moves.iter().collect::<BTreeMap<_, _>>(),
            "placement"
        );
        let (placements, unproven) =
            self.placements(snapshot, assignment, by_key, &incarnations, gathering, now);
        self.unproven = unproven;
        let deadline = now + self.shared.config.store_timeout;
        let limit = Arc::new(Semaphore::new(self.shared.config.max_concurrent_writes));
        let mut gives = JoinSet::new();
        for placement in placements {
            let (shared, limit) = (Arc::clone(&self.shared), Arc::clone(&limit));
            gives.spawn(
                async move {
                    let _permit = limit.acquire_owned().await.ok()?;
                    placement.write(&shared, deadline).await
                }
                .in_current_span(),
            );
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

    /// The gives and handoff requests this round makes on other workers' behalf, in id
    /// order of the receivers (a seeded simulation must replay the same store calls), and
    /// whether a receiver was skipped because it is not yet known to live.
    fn placements(
        &self,
        snapshot: &Snapshot,
        assignment: &Assignment,
        by_key: &ByKey<'_>,
        incarnations: &HashMap<&WorkerId, Incarnation>,
        gathering: bool,
        now: Instant,
    ) -> (Vec<Placement>, bool) {
        let me = &self.shared.id;
        let mut receivers: Vec<(&WorkerId, &Vec<Move>)> = assignment.moves.iter().collect();
        receivers.sort_by(|a, b| a.0.cmp(b.0));
        let (mut placements, mut unproven) = (Vec::new(), false);
        for (worker, moves) in receivers {
            if worker == me || !incarnations.contains_key(worker) {
                continue;
            }
            let proven = snapshot
                .members
                .iter()
                .find(|m| m.worker == *worker)
                .is_some_and(|m| self.proven(m));
            if !proven {
                unproven = true;
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
                if from.is_none() {
                    let startable = self.expiry.get(key).is_some_and(|at| *at <= now);
                    if lease.owner.is_some() && !startable || lease.owner.is_none() && gathering {
                        continue;
                    }
                } else if gathering || lease.owner_incarnation.is_none() {
                    // Given and not yet taken: its receiver is about to start it.
                    continue;
                }
                placements.push(Placement {
                    key: key.clone(),
                    to: worker.clone(),
                    from,
                    nonce: lease.nonce,
                    counter: lease.counter,
                    tenure: lease.tenure,
                    owner_incarnation: lease.owner_incarnation,
                });
            }
        }
        (placements, unproven)
    }

    /// The next round comes only when something is due: a handoff we wait on
    /// times out; a lease whose session has no record becomes startable; this round moved
    /// something (to see that it converged); and, on the worker with the smallest live id,
    /// the slow scan.
    pub(super) fn next_session_round(
        &self,
        snapshot: &Snapshot,
        live: &Live,
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
                let due = *since + what.patience(config);
                if due > now {
                    next = next.min(due);
                }
            }
            // A held lease waiting for its first figure holds a load policy's moves back
            // (see `FIGURE_WAIT`), and its holder's publication brings no round of its own if
            // its figures did not change to it (a twin's beats overwrote them between): look
            // again when the wait ends and the lease counts as settled.
            let wait = config.load_publish_interval * FIGURE_WAIT;
            for since in self.unmeasured.values() {
                let due = *since + wait;
                if due > now {
                    next = next.min(due);
                }
            }
        }
        if moved {
            next = next.min(now + config.effective_renew_interval() / 2);
        }
        // The sessions this process's opening replaced are over a lease after it: their
        // leases may be taken then, whatever this round's scan showed of them (a lagging
        // replica may not show them at all, and nothing else would bring a round).
        if let Some((over, replaced)) = self.parts.own.predecessors() {
            if !replaced.is_empty() && over > now {
                next = next.min(over);
            }
        }
        if self.unproven {
            next = next.min(now + config.effective_renew_interval());
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
    /// come on this worker's clock (its owner's session is surely over).
    /// This worker has the smallest id among the live ones: it does the fleet's chores
    /// (membership clean-up, discovery).
    /// This worker's rank by id among the live workers that are not leaving (a leaving
    /// worker publishes capacity 0 and has stopped its taker and discoverer).
    pub(super) fn rank(&self, live: &Live) -> usize {
        live.iter()
            .filter(|(id, capacity)| **id < self.shared.id && **capacity != Some(0))
            .count()
    }

    pub(super) fn is_smallest(&self, live: &Live) -> bool {
        self.rank(live) == 0
    }

    /// Hands this round's reading of the table to the discoverer, if there is one.
    pub(super) fn publish(
        &self,
        snapshot: Snapshot,
        live: &Live,
        expiry: &[Instant],
        now: Instant,
    ) {
        let Some(published) = &self.parts.view else {
            return;
        };
        let rank = self.rank(live);
        // Only the discoverer and its standby plan with it (see `discoverer.rs`): the others
        // would build a set of every lease each round for nothing.
        let owner_alive = if rank <= 1 {
            snapshot
                .leases
                .iter()
                .zip(expiry)
                .filter(|(l, at)| alive(l, **at, now))
                .map(|(l, _)| l.key.clone())
                .collect()
        } else {
            HashSet::new()
        };
        let view = TableView {
            leases: snapshot.leases,
            owner_alive,
            malformed: snapshot.malformed,
            discoverer: rank == 0,
            standby: rank == 1,
        };
        published.send_replace(Some(Arc::new(view)));
    }
}

/// A lease given to a worker (nobody alive holds it), or asked of its owner in a handoff to a
/// worker, on that worker's behalf.
struct Placement {
    key: LeaseKey,
    /// The worker it goes to.
    to: WorkerId,
    /// The owner asked for a handoff (none: a give).
    from: Option<WorkerId>,
    nonce: u64,
    counter: u64,
    tenure: u64,
    owner_incarnation: Option<Incarnation>,
}

impl Placement {
    /// Writes it by `deadline`; returns whom to tell (the receiver of a give, the owner asked
    /// for a handoff, which tells the receiver once it has handed the lease over), when it
    /// landed or may have.
    async fn write(
        self,
        shared: &Holder,
        deadline: Instant,
    ) -> Option<(WorkerId, Option<Incarnation>, LeaseKey)> {
        let Placement {
            key,
            to,
            from,
            nonce,
            counter,
            tenure,
            owner_incarnation,
        } = self;
        let (written, what) = match &from {
            None => (
                shared.store.give(&key, nonce, &to, counter, deadline).await,
                "give",
            ),
            Some(owner) => (
                shared
                    .store
                    .request_handoff(&key, nonce, owner, tenure, &to, deadline)
                    .await,
                "request_handoff",
            ),
        };
        let landed = match written {
            Ok(Outcome::Done(_)) => true,
            Ok(Outcome::LostRace { current }) => {
                tracing::debug!(lease_key = %key, what, current = ?current.map(|l| (l.owner, l.tenure, l.handoff_to)), "not placed: the lease changed");
                false
            }
            Err(err) => {
                metrics::store_error(&shared.id, what);
                tracing::warn!(lease_key = %key, error = %err, "could not place a lease");
                // It may have landed: the notice is harmless if it did not.
                err.is_ambiguous()
            }
        };
        landed.then_some(match from {
            None => (to, None, key),
            Some(owner) => (owner, owner_incarnation, key),
        })
    }
}
