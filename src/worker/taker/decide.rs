//! The taker's decisions as plain functions over plain data: what to do with each lease of a
//! round's snapshot, the fleet as the balance policy sees it, the jobs that carry a round's
//! moves out, and, on the worker doing the chores, which sessions to tell of what. Nothing
//! here reads a clock, locks or awaits: the round (`mod.rs`) reads, calls these, and writes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::alive;
use crate::balance::{FleetView, Holder, LeaseView, Move, WorkerView};
use crate::config::WorkerConfig;
use crate::fasthash::FastMap;
use crate::lease::{ByKey, Incarnation, Lease, LeaseKey, Member, Snapshot, WorkerId};
use crate::lifecycle::LeaseStatus;
use crate::worker::identity::{Identity, Ownership};
use crate::worker::parts::Receiver;
use crate::worker::state::Pending;
use crate::worker::take::{Job, Report};

/// The live workers of a round and their capacities (`None`: no limit of their own).
pub(crate) type Live = FastMap<WorkerId, Option<u32>>;

/// What the taker does with one lease of the snapshot before planning.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Taken by this process but not held here: its validity ran out while the store was
    /// unreachable, or the answer of its take was lost. Take it back in a new tenure.
    Resume(Lease),
    /// Owned by this worker's id but by another process (see [`Identity`]): take it.
    Foreign(Lease),
    /// A handoff we asked for was completed: start it.
    Adopt(Lease),
    /// A handoff we asked for was not completed in time: take it anyway.
    Force(Lease),
    /// Given to this worker's id (by a placement round, or a handoff nobody
    /// here waits on): its giver made sure nobody works on it.
    Given(Lease),
}

impl Action {
    pub(crate) fn key(&self) -> &LeaseKey {
        match self {
            Action::Resume(lease)
            | Action::Foreign(lease)
            | Action::Adopt(lease)
            | Action::Force(lease)
            | Action::Given(lease) => &lease.key,
        }
    }
}

/// A handoff asked by this worker and not done in time, whose owner is told to give the lease
/// up (see `REVOKE` in `notice.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Revoke {
    pub owner: WorkerId,
    pub session: Incarnation,
    pub key: LeaseKey,
}

/// What a round knows when it decides: who it is, its settings, its reading of the sessions.
pub(crate) struct Judge<'a> {
    pub me: &'a WorkerId,
    pub config: &'a WorkerConfig,
    pub identity: &'a Identity,
    /// When each lease of the round may be started by others (its owner's session surely
    /// over); a lease whose session lives is absent.
    pub expiry: &'a FastMap<LeaseKey, Instant>,
    pub now: Instant,
}

impl Judge<'_> {
    /// The lease's owner's session is surely over on this worker's clock.
    pub(crate) fn expired(&self, key: &LeaseKey) -> bool {
        self.expiry.get(key).is_some_and(|at| *at <= self.now)
    }

    /// How to report a take of a lease someone else may still be working on (a forced
    /// handoff, a steal, a lease of another process with this id): at once if it has expired
    /// here (its owner's validity has surely ended), else once its owner acknowledged.
    pub(crate) fn forced_report(&self, lease: &Lease) -> Report {
        if self.expired(&lease.key) {
            Report::Quiet
        } else {
            Report::Acknowledged {
                owner: lease.owner.clone().unwrap_or_else(|| self.me.clone()),
                incarnation: lease.owner_incarnation,
            }
        }
    }
}

/// What [`decide_actions`] decided.
#[derive(Debug, Default)]
pub(crate) struct Decided {
    pub actions: Vec<Action>,
    /// The handoffs this worker still waits on (replacing the ones it waited on).
    pub pending: BTreeMap<LeaseKey, Pending>,
    pub revokes: Vec<Revoke>,
}

/// What to do with each lease of `snapshot` (with its lifecycle `statuses`) before planning,
/// for a worker that holds `held` and waits on the handoffs `pending`.
pub(crate) fn decide_actions<H>(
    judge: &Judge<'_>,
    snapshot: &Snapshot,
    statuses: &[LeaseStatus],
    held: &BTreeMap<LeaseKey, H>,
    pending: &BTreeMap<LeaseKey, Pending>,
) -> Decided {
    let mut room = (judge.config.max_leases_per_worker as usize).saturating_sub(held.len());
    let mut decided = Decided::default();
    for (lease, status) in snapshot.leases.iter().zip(statuses) {
        if let Some(pending) = pending.get(&lease.key) {
            let held_here = held.contains_key(&lease.key);
            decide_pending(judge, lease, held_here, pending, &mut decided);
            continue;
        }
        // Ours or foreign in the table, not held here, ready, and not on its way to somebody
        // else.
        let on_its_way = lease.handoff_to.as_ref().is_some_and(|to| to != judge.me);
        let ready = *status == LeaseStatus::Ready;
        if on_its_way || !ready || room == 0 {
            continue;
        }
        let ownership = judge.identity.ownership(lease);
        // Held here only if this id's: the others' leases (nearly all) are not looked up.
        if ownership == Ownership::Other || held.contains_key(&lease.key) {
            continue;
        }
        let action = match ownership {
            Ownership::Ours => Action::Resume(Lease::clone(lease)),
            // Given to this id: one session per id, so it is this one's.
            Ownership::Foreign if lease.owner_incarnation.is_none() => {
                Action::Given(Lease::clone(lease))
            }
            // Another process with this id works on it: never taken before its session is
            // surely over. That session may be the one that replaced this process's own, and
            // a take from it would leave the table naming a session that, once fenced, nobody
            // waits on, while the other process still works on the lease.
            Ownership::Foreign if judge.expired(&lease.key) => Action::Foreign(Lease::clone(lease)),
            Ownership::Foreign | Ownership::Other => continue,
        };
        room -= 1;
        decided.actions.push(action);
    }
    decided
}

/// What to do with a lease this worker asked for in a handoff.
fn decide_pending(
    judge: &Judge<'_>,
    lease: &Lease,
    held_here: bool,
    pending: &Pending,
    decided: &mut Decided,
) {
    let (config, now) = (judge.config, judge.now);
    match judge.identity.ownership(lease) {
        // Handed over to this id: start it with a take of this process (and keep waiting on it
        // until that take lands or loses the race).
        Ownership::Foreign if lease.owner_incarnation.is_none() && !held_here => {
            decided.actions.push(Action::Adopt(lease.clone()));
            decided.pending.insert(lease.key.clone(), pending.clone());
        }
        // Our take of it landed (a forced take, or an adoption, whose answer was lost).
        Ownership::Ours if !held_here => decided.actions.push(Action::Resume(lease.clone())),
        // Not handed over in time, or its owner died meanwhile (its lease expired): take it
        // (reported at once if expired).
        _ if lease.owner.as_ref() == Some(&pending.from)
            && lease.handoff_to.as_ref() == Some(judge.me) =>
        {
            let expired = judge.expired(&lease.key);
            let late = now >= pending.since + config.handoff_timeout;
            match (expired, late, lease.owner_incarnation) {
                // A live owner is never taken from: the table would then name neither the
                // session still finishing the lease nor anything to wait for, should this
                // worker's own session end before the owner let go. The owner is told to give
                // the lease up now (it tells its application the lease is lost, then hands it
                // over); told again each lease duration until it does, or its session is over.
                (false, true, Some(session)) => {
                    decided.revokes.push(Revoke {
                        owner: pending.from.clone(),
                        session,
                        key: lease.key.clone(),
                    });
                    let again = (now + config.lease_duration)
                        .checked_sub(config.handoff_timeout)
                        .unwrap_or(now);
                    let from = pending.from.clone();
                    let again = Pending { since: again, from };
                    decided.pending.insert(lease.key.clone(), again);
                }
                (true, _, _) | (_, true, _) => decided.actions.push(Action::Force(lease.clone())),
                _ => {
                    decided.pending.insert(lease.key.clone(), pending.clone());
                }
            }
        }
        // Taken by somebody else (another process with this id included).
        _ => {}
    }
}

/// The jobs that carry out a round's `actions`. `unacknowledged`: the leases taken here from a
/// live session that has not acknowledged yet, with that session.
pub(crate) fn action_jobs(
    judge: &Judge<'_>,
    actions: Vec<Action>,
    unacknowledged: &HashMap<LeaseKey, (WorkerId, Option<Incarnation>)>,
) -> Vec<Job> {
    actions
        .into_iter()
        .map(|action| match action {
            // Ours: nobody else worked on it since, unless our take's answer was lost.
            Action::Resume(lease) => {
                let waiting = unacknowledged.get(&lease.key).cloned();
                let report = match (
                    waiting,
                    judge.identity.unanswered_since(&lease.key, lease.nonce),
                ) {
                    // Forced from a session that has not acknowledged yet: still waits.
                    (Some((owner, incarnation)), _) => Report::Acknowledged { owner, incarnation },
                    (None, Some(since)) => Report::ForcedSince(since),
                    (None, None) => Report::Quiet,
                };
                Job::Take { lease, report }
            }
            // The other process of this id may still beat (it may have replaced this one's
            // record, unknown here yet): its lease is reported once it acknowledges or its
            // session is surely over, as any forced take.
            Action::Foreign(lease) | Action::Force(lease) => {
                let report = judge.forced_report(&lease);
                Job::Take { lease, report }
            }
            Action::Adopt(lease) => Job::Adopt(lease),
            Action::Given(lease) => Job::Take {
                lease,
                report: Report::Quiet,
            },
        })
        .collect()
}

/// The jobs that carry out the balance policy's `moves`, leaving out the leases an action of
/// this round (`acted`) takes already.
pub(crate) fn move_jobs(
    judge: &Judge<'_>,
    moves: Vec<Move>,
    by_key: &ByKey<'_>,
    acted: &HashSet<LeaseKey>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for step in moves {
        let key = match &step {
            Move::Take(key) | Move::RequestHandoff { key, .. } => key,
        };
        let Some(lease) = by_key.get(key).filter(|_| !acted.contains(key)) else {
            continue;
        };
        let lease = lease.clone();
        // A take of a lease whose owner is alive is a steal (a policy like KCL's): the owner
        // may still be working. It is asked as a handoff instead, which the owner completes
        // once its application let go (or gives up when told the handoff is late). A take
        // could not be reported before that session acknowledged it; but that wait lives only
        // in this process, and should this process die first (its answer lost, say), the
        // table would show the lease as its dead session's, which the fleet gives on at once
        // while the old owner still processes it (`tests/steal_handoff.rs`).
        let owner_alive = lease.owner.is_some() && !judge.expired(&lease.key);
        let steal = judge.identity.ownership(&lease) != Ownership::Ours && owner_alive;
        let step = match (step, &lease.owner) {
            (Move::Take(key), Some(owner)) if steal && lease.owner_incarnation.is_some() => {
                Move::RequestHandoff {
                    key,
                    from: owner.clone(),
                }
            }
            (step, _) => step,
        };
        // A lease given and not yet taken is about to be started by its receiver, whose take
        // would clear the request unseen: ask once it has.
        if matches!(step, Move::RequestHandoff { .. }) && lease.owner_incarnation.is_none() {
            continue;
        }
        jobs.push(match step {
            // Not a steal: nobody, or no live session, holds it.
            Move::Take(_) => Job::Take {
                lease,
                report: Report::Quiet,
            },
            Move::RequestHandoff { from, .. } => Job::Request { lease, from },
        });
    }
    jobs
}

/// The load figures a round reads: from each member's record, and how long a held lease
/// without one is waited for.
pub(crate) struct Figures<'a> {
    /// Held leases without a load figure, since when this worker has seen them so.
    pub unmeasured: &'a HashMap<LeaseKey, Instant>,
    /// How long a held lease's first figure is waited for (see `FIGURE_WAIT`).
    pub wait: Duration,
}

/// The fleet as the balance policy sees it: ready leases only (blocked, finished and retiring
/// ones are nobody's to take or ask for, and neither is one its live holder's record names as
/// halted by its application), each lease's holder among the `live` workers (with their
/// capacity), `expiry` in the order of `snapshot.leases`.
pub(crate) fn fleet_view(
    snapshot: &Snapshot,
    statuses: &[LeaseStatus],
    live: &Live,
    expiry: &[Instant],
    figures: &Figures<'_>,
    now: Instant,
) -> FleetView {
    let mut members: Vec<&Member> = snapshot.members.iter().map(|m| &**m).collect();
    members.sort_by(|a, b| a.worker.cmp(&b.worker));
    let reported: FastMap<&WorkerId, &Member> = members.iter().map(|m| (&m.worker, *m)).collect();
    let loads = Loads::read(&members, &reported, figures, now);
    // Asked of every lease: nobody's record names a halted lease most of the time.
    let any_halted = members.iter().any(|m| !m.halted.is_empty());
    // Sized for every lease at once: grown by doubling, the vector of 100,000 views was
    // copied again and again.
    let mut leases = Vec::with_capacity(snapshot.leases.len());
    leases.extend(
        snapshot
            .leases
            .iter()
            .zip(statuses)
            .zip(expiry)
            .filter(|((_, status), _)| **status == LeaseStatus::Ready)
            .filter_map(|((lease, _), at)| {
                // Each lease's owner is looked up once: a round asks it of every lease.
                let alive = alive(lease, *at, now);
                let live_owner = lease
                    .owner
                    .as_ref()
                    .filter(|owner| alive && live.contains_key(*owner));
                // A lease whose session may still live but is not counted live (not yet
                // fenced, or without a record for less than a lease duration) is nobody's to
                // plan with until it is.
                if alive && live_owner.is_none() {
                    return None;
                }
                let holder = match live_owner {
                    Some(owner) => match &lease.handoff_to {
                        Some(to) if live.contains_key(to) => Holder::Moving {
                            from: owner.clone(),
                            to: to.clone(),
                        },
                        _ => Holder::Held(owner.clone()),
                    },
                    None => Holder::Available,
                };
                // Halted by its holder's application: it stays where it is, out of the balance
                // (it would fail wherever it went), until its holder lets it go or dies.
                if let Holder::Held(owner) = &holder {
                    if any_halted
                        && reported
                            .get(owner)
                            .is_some_and(|m| m.halted.contains(&lease.key))
                    {
                        return None;
                    }
                }
                let (load, settled) = loads.figure(lease);
                Some(LeaseView {
                    key: lease.key.clone(),
                    settled: holder == Holder::Available || settled,
                    holder,
                    load,
                })
            }),
    );
    let workers = live
        .iter()
        .map(|(id, capacity)| {
            let member = reported.get(id);
            WorkerView {
                id: id.clone(),
                capacity: capacity.unwrap_or(u32::MAX),
                weight: member.and_then(|m| m.weight).unwrap_or(1.0),
                reported: member.is_some_and(|m| m.weight.is_some()),
                load: member.and_then(|m| m.load),
            }
        })
        .collect();
    FleetView { leases, workers }
}

/// The load figures published in the members' records.
struct Loads<'a> {
    reported: &'a FastMap<&'a WorkerId, &'a Member>,
    /// Each lease's figure in the first record (by worker id) that publishes one.
    anyone: FastMap<&'a LeaseKey, f64>,
    figures: &'a Figures<'a>,
    now: Instant,
}

impl<'a> Loads<'a> {
    fn read(
        members: &[&'a Member],
        reported: &'a FastMap<&'a WorkerId, &'a Member>,
        figures: &'a Figures<'a>,
        now: Instant,
    ) -> Self {
        let mut anyone: FastMap<&LeaseKey, f64> = FastMap::default();
        for member in members {
            for (key, load) in &member.lease_loads {
                anyone.entry(key).or_insert(*load);
            }
        }
        Self {
            reported,
            anyone,
            figures,
            now,
        }
    }

    /// A lease's figure: from its holder's record, else from the record of a worker that held
    /// it moments ago (kept there until the new holder publishes its own), else from the lease
    /// item (written there by an earlier build's renewals); and whether it is settled: the
    /// holder published the figure itself (a renewal's figure is its holder's too), or nobody
    /// published one although its holder has had the time to.
    fn figure(&self, lease: &Lease) -> (Option<f64>, bool) {
        // No record publishes a figure when `anyone` has none: no holder's record is looked up.
        let own = lease
            .owner
            .as_ref()
            .filter(|_| !self.anyone.is_empty())
            .and_then(|o| self.reported.get(o))
            .and_then(|m| m.lease_loads.get(&lease.key))
            .copied();
        let load = own
            .or_else(|| self.anyone.get(&lease.key).copied())
            .or(lease.load);
        let waited =
            |since: &Instant| self.now.saturating_duration_since(*since) >= self.figures.wait;
        let settled = own.is_some()
            || lease.load.is_some() && !self.anyone.contains_key(&lease.key)
            || load.is_none() && self.figures.unmeasured.get(&lease.key).is_some_and(waited);
        (load, settled)
    }
}

/// Who holds a lease, as the worker doing the chores last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    pub owner: WorkerId,
    pub session: Incarnation,
    pub tenure: u64,
    /// The worker a handoff of the lease was asked for.
    pub handoff_to: Option<WorkerId>,
}

/// A lease that waits on a worker, as the worker doing the chores saw it: given and not yet
/// taken, or asked of its holder in a handoff not yet done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// The worker it waits on: the receiver of a give, the owner asked for a handoff.
    pub on: WorkerId,
    /// That owner's session (none: given to the id, not yet taken).
    pub session: Option<Incarnation>,
    /// Its counter when given, its tenure when asked for: a change is a new wait.
    pub mark: u64,
    /// The worker that asked for it in a handoff (none: given).
    pub asked_by: Option<WorkerId>,
}

impl Waiting {
    /// How long the worker doing the chores lets a lease wait before it tells the worker it
    /// waits on again. A receiver takes a lease given to it within a beat of the notice: two
    /// beats without a take mean the notice never came (its giver died between the give and
    /// the notice: `sessions_tell_again_a_lease_given_by_a_process_that_died` in
    /// `sim/tests/simulate.rs`). An owner asked for a handoff first lets its application finish:
    /// a lease duration.
    pub(crate) fn patience(&self, config: &WorkerConfig) -> Duration {
        match self.asked_by {
            None => (config.effective_renew_interval() * 2).min(config.lease_duration),
            Some(_) => config.lease_duration,
        }
    }
}

/// The notices the worker doing the chores sends, by session: the keys to look at.
pub(crate) type Told = BTreeMap<(WorkerId, Incarnation), Vec<String>>;

/// Who holds each lease of `snapshot` in a session.
pub(crate) fn holdings(snapshot: &Snapshot) -> HashMap<LeaseKey, Holding> {
    snapshot
        .leases
        .iter()
        .filter_map(|l| match (&l.owner, l.owner_incarnation) {
            (Some(owner), Some(session)) => Some((
                l.key.clone(),
                Holding {
                    owner: owner.clone(),
                    session,
                    tenure: l.tenure,
                    handoff_to: l.handoff_to.clone(),
                },
            )),
            _ => None,
        })
        .collect()
}

/// The open sessions of `snapshot`'s members.
pub(crate) fn open_sessions(snapshot: &Snapshot) -> HashSet<(&WorkerId, Incarnation)> {
    snapshot
        .members
        .iter()
        .filter_map(|m| m.incarnation.map(|i| (&m.worker, i)))
        .collect()
}

/// Tells each open session that held a lease at the last look (`before`) and holds it no
/// longer the same way (`now`) to look at it: it may have been edited or deleted by hand.
pub(crate) fn tell_changed(
    before: &HashMap<LeaseKey, Holding>,
    now: &HashMap<LeaseKey, Holding>,
    open: &HashSet<(&WorkerId, Incarnation)>,
    told: &mut Told,
) {
    for (key, holding) in before {
        // Unchanged. (A handoff asked since is told to its holder too: the requester may have
        // died before it told the owner, and nothing else would.)
        if now.get(key) == Some(holding) {
            continue;
        }
        if open.contains(&(&holding.owner, holding.session)) {
            told.entry((holding.owner.clone(), holding.session))
                .or_default()
                .push(key.as_str().to_owned());
        }
    }
}

/// What the chores last saw waiting, and when they looked.
pub(crate) struct Looked<'a> {
    pub waiting: &'a HashMap<LeaseKey, (Waiting, Instant)>,
    pub at: Option<Instant>,
}

/// The leases of `snapshot` that wait on a worker, with since when (this worker's clock);
/// each that waited longer than its patience has the worker it waits on told again (in
/// `told`), and waits from `now`.
pub(crate) fn look_for_waiting(
    snapshot: &Snapshot,
    open: &HashSet<(&WorkerId, Incarnation)>,
    last: &Looked<'_>,
    config: &WorkerConfig,
    now: Instant,
    told: &mut Told,
) -> HashMap<LeaseKey, (Waiting, Instant)> {
    let incarnations = super::incarnations(snapshot);
    let mut waiting = HashMap::new();
    for lease in &snapshot.leases {
        let Some(owner) = &lease.owner else {
            continue;
        };
        let (what, session) = match (lease.owner_incarnation, &lease.handoff_to) {
            (None, _) => {
                let given = Waiting {
                    on: owner.clone(),
                    session: None,
                    mark: lease.counter,
                    asked_by: None,
                };
                (given, incarnations.get(owner).copied())
            }
            (Some(incarnation), Some(to)) => {
                let asked = Waiting {
                    on: owner.clone(),
                    session: Some(incarnation),
                    mark: lease.tenure,
                    asked_by: Some(to.clone()),
                };
                let open = open.contains(&(owner, incarnation));
                (asked, open.then_some(incarnation))
            }
            (Some(_), None) => continue,
        };
        // A give first seen now happened since this worker last looked, and may be as old as
        // that look: its giver may have died before it told the receiver, and nothing may
        // have made this worker look for a while. If it is fresh after all, the receiver is
        // told twice, harmlessly.
        let first_seen = match (&what.asked_by, last.at) {
            (None, Some(looked)) => looked,
            _ => now,
        };
        let since = match last.waiting.get(&lease.key) {
            Some((seen, since)) if *seen == what => *since,
            _ => first_seen,
        };
        let since = match session {
            Some(session) if now.saturating_duration_since(since) >= what.patience(config) => {
                match &what.asked_by {
                    None => {
                        tracing::info!(lease_key = %lease.key, to = %owner, "a lease given long ago is not taken yet: telling its receiver again")
                    }
                    Some(to) => {
                        tracing::info!(lease_key = %lease.key, owner = %owner, to = %to, "a handoff asked long ago is not done yet: telling the owner again")
                    }
                }
                told.entry((owner.clone(), session))
                    .or_default()
                    .push(lease.key.as_str().to_owned());
                now
            }
            _ => since,
        };
        waiting.insert(lease.key.clone(), (what, since));
    }
    waiting
}

/// How many sessions each worker watches: the next ones in id order. Two, so that a session
/// is still watched when the worker before it dies with it.
pub(crate) const WATCHED: usize = 2;

/// The [`WATCHED`] workers after `me` in id order among the `live` ones, and the [`WATCHED`]
/// before it (those that watch it), nearest first, around (fewer in a smaller fleet; none
/// while `me` is alone).
pub(crate) fn neighbours(live: &Live, me: &WorkerId) -> (Vec<WorkerId>, Vec<WorkerId>) {
    let mut ids: Vec<&WorkerId> = live.keys().collect();
    ids.sort();
    let n = ids.len();
    let position = ids.iter().position(|w| *w == me).unwrap_or(0);
    let around = |step: usize| -> Vec<WorkerId> {
        (1..n.min(WATCHED + 1))
            .map(|i| ids[(position + step * i) % n].clone())
            .collect()
    };
    (around(1), around(n - 1))
}

/// The worker that does the fleet's chores: the smallest live id not leaving.
pub(crate) fn chores_worker(live: &Live) -> Option<WorkerId> {
    live.iter()
        .filter(|(_, capacity)| **capacity != Some(0))
        .map(|(w, _)| w)
        .min()
        .cloned()
}

/// The live sessions other than `me` that a lease released here may go to (not leaving),
/// with how many leases each holds in `view` (a lease on its way counts as its receiver's).
pub(crate) fn receivers(
    live: &Live,
    view: &FleetView,
    incarnations: &HashMap<&WorkerId, Incarnation>,
    me: &WorkerId,
) -> Vec<Receiver> {
    // Counted over every lease: the fast hasher, not the standard one.
    let mut counts: FastMap<&WorkerId, u32> = FastMap::default();
    for lease in &view.leases {
        if let Holder::Held(w) | Holder::Moving { to: w, .. } = &lease.holder {
            *counts.entry(w).or_default() += 1;
        }
    }
    live.iter()
        .filter(|(w, capacity)| *w != me && **capacity != Some(0))
        .filter_map(|(w, _)| {
            incarnations.get(w).map(|i| Receiver {
                worker: w.clone(),
                incarnation: *i,
                held: counts.get(w).copied().unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The decisions on plain data, without a runtime or a store.

    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::lease::NewLease;

    const MINE: Incarnation = Incarnation::new(1);
    const THEIRS: Incarnation = Incarnation::new(7);

    fn id(name: &str) -> WorkerId {
        WorkerId::new(name).unwrap()
    }

    fn key(name: &str) -> LeaseKey {
        LeaseKey::new(name).unwrap()
    }

    fn lease(name: &str, owner: Option<(&str, Option<Incarnation>)>) -> Lease {
        let mut lease = NewLease::new(key(name)).into_lease();
        if let Some((owner, incarnation)) = owner {
            lease.owner = Some(id(owner));
            lease.owner_incarnation = incarnation;
        }
        lease.tenure = 3;
        lease.counter = 5;
        lease
    }

    fn member(name: &str, incarnation: Incarnation) -> Member {
        Member {
            worker: id(name),
            heartbeat: 1,
            incarnation: Some(incarnation),
            load: None,
            weight: None,
            lease_loads: BTreeMap::new(),
            halted: BTreeSet::new(),
            capacity: None,
            notices: BTreeSet::new(),
            session: true,
        }
    }

    fn snapshot(leases: Vec<Lease>, members: Vec<Member>) -> Snapshot {
        Snapshot {
            leases: leases.into_iter().map(Arc::new).collect(),
            members: members.into_iter().map(Arc::new).collect(),
            malformed: 0,
        }
    }

    /// A round of worker `a` (session `MINE`) at `now`, with the expiries given.
    struct Round {
        me: WorkerId,
        config: WorkerConfig,
        identity: Identity,
        expiry: FastMap<LeaseKey, Instant>,
        now: Instant,
    }

    impl Round {
        fn new() -> Self {
            Self {
                me: id("a"),
                config: WorkerConfig::default(),
                identity: Identity::new(id("a"), MINE),
                expiry: FastMap::default(),
                now: Instant::now(),
            }
        }

        fn judge(&self) -> Judge<'_> {
            Judge {
                me: &self.me,
                config: &self.config,
                identity: &self.identity,
                expiry: &self.expiry,
                now: self.now,
            }
        }

        fn decide(
            &self,
            leases: Vec<Lease>,
            held: &[&str],
            pending: &BTreeMap<LeaseKey, Pending>,
        ) -> Decided {
            let snapshot = snapshot(leases, vec![]);
            let statuses = crate::lifecycle::statuses(&snapshot.leases);
            let held: BTreeMap<LeaseKey, ()> = held.iter().map(|k| (key(k), ())).collect();
            decide_actions(&self.judge(), &snapshot, &statuses, &held, pending)
        }
    }

    fn asked_of(from: &str, since: Instant) -> Pending {
        Pending {
            since,
            from: id(from),
        }
    }

    #[test]
    fn a_lease_handed_over_to_this_id_is_adopted_and_still_waited_on() {
        let round = Round::new();
        let pending = BTreeMap::from([(key("k"), asked_of("b", round.now))]);
        let decided = round.decide(vec![lease("k", Some(("a", None)))], &[], &pending);
        assert!(matches!(&decided.actions[..], [Action::Adopt(l)] if l.key == key("k")));
        assert!(decided.pending.contains_key(&key("k")));
        assert!(decided.revokes.is_empty());
    }

    #[test]
    fn a_late_handoff_of_a_live_owner_is_revoked_never_forced() {
        let round = Round::new();
        let asked = round.now - round.config.handoff_timeout;
        let pending = BTreeMap::from([(key("k"), asked_of("b", asked))]);
        let mut asked_lease = lease("k", Some(("b", Some(THEIRS))));
        asked_lease.handoff_to = Some(id("a"));
        let decided = round.decide(vec![asked_lease], &[], &pending);
        assert!(decided.actions.is_empty(), "{:?}", decided.actions);
        let revoke = Revoke {
            owner: id("b"),
            session: THEIRS,
            key: key("k"),
        };
        assert_eq!(decided.revokes, vec![revoke]);
        // Told again a lease duration later: the wait restarts so that it is late again then.
        let again = decided.pending[&key("k")].since + round.config.handoff_timeout;
        assert_eq!(again, round.now + round.config.lease_duration);
    }

    #[test]
    fn a_handoff_of_an_owner_whose_session_is_over_is_forced() {
        let mut round = Round::new();
        round.expiry.insert(key("k"), round.now);
        let pending = BTreeMap::from([(key("k"), asked_of("b", round.now))]);
        let mut asked_lease = lease("k", Some(("b", Some(THEIRS))));
        asked_lease.handoff_to = Some(id("a"));
        let decided = round.decide(vec![asked_lease], &[], &pending);
        assert!(matches!(&decided.actions[..], [Action::Force(_)]));
        assert!(decided.pending.is_empty());
        assert!(decided.revokes.is_empty());
    }

    #[test]
    fn a_handoff_in_time_is_waited_on() {
        let round = Round::new();
        let pending = BTreeMap::from([(key("k"), asked_of("b", round.now))]);
        let mut asked_lease = lease("k", Some(("b", Some(THEIRS))));
        asked_lease.handoff_to = Some(id("a"));
        let decided = round.decide(vec![asked_lease], &[], &pending);
        assert!(decided.actions.is_empty());
        assert_eq!(decided.pending[&key("k")].since, round.now);
    }

    #[test]
    fn a_lease_of_another_process_of_this_id_waits_for_its_session_to_be_over() {
        let mut round = Round::new();
        let twin = vec![lease("k", Some(("a", Some(THEIRS))))];
        let decided = round.decide(twin.clone(), &[], &BTreeMap::new());
        assert!(decided.actions.is_empty());
        round.expiry.insert(key("k"), round.now);
        let decided = round.decide(twin, &[], &BTreeMap::new());
        assert!(matches!(&decided.actions[..], [Action::Foreign(_)]));
    }

    #[test]
    fn ours_given_and_held_leases_are_resumed_taken_and_left_within_the_room() {
        let mut round = Round::new();
        round.config.max_leases_per_worker = 2;
        let leases = vec![
            lease("held", Some(("a", Some(MINE)))),
            lease("lost", Some(("a", Some(MINE)))),
            lease("given", Some(("a", None))),
            lease("other", Some(("b", Some(THEIRS)))),
        ];
        let decided = round.decide(leases, &["held"], &BTreeMap::new());
        // One room left (two allowed, one held): the first of the two that could be taken.
        assert!(matches!(&decided.actions[..], [Action::Resume(l)] if l.key == key("lost")));
    }

    #[test]
    fn a_take_of_a_live_owners_lease_is_asked_as_a_handoff() {
        let round = Round::new();
        let theirs = Arc::new(lease("k", Some(("b", Some(THEIRS)))));
        let by_key = ByKey::new(std::slice::from_ref(&theirs));
        let moves = vec![Move::Take(key("k"))];
        let jobs = move_jobs(&round.judge(), moves, &by_key, &HashSet::new());
        assert!(matches!(&jobs[..], [Job::Request { from, .. }] if *from == id("b")));
    }

    #[test]
    fn a_take_of_a_lease_whose_session_is_over_is_a_take() {
        let mut round = Round::new();
        round.expiry.insert(key("k"), round.now);
        let theirs = Arc::new(lease("k", Some(("b", Some(THEIRS)))));
        let by_key = ByKey::new(std::slice::from_ref(&theirs));
        let moves = vec![Move::Take(key("k"))];
        let jobs = move_jobs(&round.judge(), moves, &by_key, &HashSet::new());
        let quiet = Report::Quiet;
        assert!(matches!(&jobs[..], [Job::Take { report, .. }] if *report == quiet));
    }

    #[test]
    fn a_handoff_of_a_lease_given_and_not_yet_taken_is_not_asked() {
        let round = Round::new();
        let given = Arc::new(lease("k", Some(("b", None))));
        let by_key = ByKey::new(std::slice::from_ref(&given));
        let moves = vec![Move::RequestHandoff {
            key: key("k"),
            from: id("b"),
        }];
        let jobs = move_jobs(&round.judge(), moves, &by_key, &HashSet::new());
        assert!(jobs.is_empty());
    }

    #[test]
    fn a_resumed_lease_still_waits_for_the_acknowledgement_it_waited_for() {
        let round = Round::new();
        let ours = lease("k", Some(("a", Some(MINE))));
        let unacknowledged = HashMap::from([(key("k"), (id("b"), Some(THEIRS)))]);
        let jobs = action_jobs(&round.judge(), vec![Action::Resume(ours)], &unacknowledged);
        let waits = Report::Acknowledged {
            owner: id("b"),
            incarnation: Some(THEIRS),
        };
        assert!(matches!(&jobs[..], [Job::Take { report, .. }] if *report == waits));
    }

    #[test]
    fn a_lease_on_its_way_counts_as_its_receivers() {
        let mut moving = lease("k", Some(("b", Some(THEIRS))));
        moving.handoff_to = Some(id("c"));
        let snapshot = snapshot(
            vec![moving],
            vec![member("b", THEIRS), member("c", Incarnation::new(9))],
        );
        let statuses = crate::lifecycle::statuses(&snapshot.leases);
        let live: Live = [(id("a"), None), (id("b"), None), (id("c"), None)]
            .into_iter()
            .collect();
        let now = Instant::now();
        let far = now + Duration::from_secs(3600);
        let unmeasured = HashMap::new();
        let figures = Figures {
            unmeasured: &unmeasured,
            wait: Duration::from_secs(1),
        };
        let view = fleet_view(&snapshot, &statuses, &live, &[far], &figures, now);
        let incarnations = super::super::incarnations(&snapshot);
        let mut receivers = receivers(&live, &view, &incarnations, &id("a"));
        receivers.sort_by(|x, y| x.worker.cmp(&y.worker));
        let held: Vec<(WorkerId, u32)> =
            receivers.into_iter().map(|r| (r.worker, r.held)).collect();
        assert_eq!(held, vec![(id("b"), 0), (id("c"), 1)]);
    }

    #[test]
    fn a_lease_its_holder_halted_is_left_out_of_the_balance_until_its_holder_is_gone() {
        let leases = vec![
            lease("h", Some(("b", Some(THEIRS)))),
            lease("k", Some(("b", Some(THEIRS)))),
        ];
        let mut b = member("b", THEIRS);
        b.halted = BTreeSet::from([key("h")]);
        let snapshot = snapshot(leases, vec![b]);
        let statuses = crate::lifecycle::statuses(&snapshot.leases);
        let live: Live = [(id("a"), None), (id("b"), None)].into_iter().collect();
        let now = Instant::now();
        let unmeasured = HashMap::new();
        let figures = Figures {
            unmeasured: &unmeasured,
            wait: Duration::from_secs(1),
        };
        let far = now + Duration::from_secs(3600);
        let view = fleet_view(&snapshot, &statuses, &live, &[far, far], &figures, now);
        let keys: Vec<&str> = view.leases.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["k"], "the halted lease is nobody's to move");
        // Its holder is gone (the lease expired here): it is available like any other.
        let past = now - Duration::from_secs(1);
        let view = fleet_view(&snapshot, &statuses, &live, &[past, far], &figures, now);
        assert_eq!(view.leases.len(), 2);
        assert_eq!(view.leases[0].holder, Holder::Available);
    }

    #[test]
    fn a_lease_given_and_not_taken_within_two_beats_is_told_again() {
        let config = WorkerConfig::default();
        let given = lease("k", Some(("b", None)));
        let snapshot = snapshot(vec![given], vec![member("b", THEIRS)]);
        let open = open_sessions(&snapshot);
        let start = Instant::now();
        let mut told = Told::new();
        let none = HashMap::new();
        let first = Looked {
            waiting: &none,
            at: None,
        };
        let waiting = look_for_waiting(&snapshot, &open, &first, &config, start, &mut told);
        assert!(told.is_empty());
        let patience = waiting[&key("k")].0.patience(&config);
        assert_eq!(
            patience,
            (config.effective_renew_interval() * 2).min(config.lease_duration)
        );
        let later = Looked {
            waiting: &waiting,
            at: Some(start),
        };
        let before = start + patience - Duration::from_millis(1);
        look_for_waiting(&snapshot, &open, &later, &config, before, &mut told);
        assert!(told.is_empty());
        let after = look_for_waiting(
            &snapshot,
            &open,
            &later,
            &config,
            start + patience,
            &mut told,
        );
        assert_eq!(told[&(id("b"), THEIRS)], vec!["k".to_owned()]);
        assert_eq!(
            after[&key("k")].1,
            start + patience,
            "waits from the notice again"
        );
    }

    #[test]
    fn a_changed_holder_is_told_only_while_its_session_is_open() {
        let before = holdings(&snapshot(
            vec![
                lease("k", Some(("b", Some(THEIRS)))),
                lease("j", Some(("c", Some(MINE)))),
            ],
            vec![],
        ));
        let after = snapshot(vec![], vec![member("b", THEIRS)]);
        let mut told = Told::new();
        tell_changed(
            &before,
            &holdings(&after),
            &open_sessions(&after),
            &mut told,
        );
        assert_eq!(told.len(), 1);
        assert_eq!(told[&(id("b"), THEIRS)], vec!["k".to_owned()]);
    }

    #[test]
    fn neighbours_go_around_in_id_order() {
        let live: Live = [(id("a"), None), (id("b"), None), (id("c"), Some(0))]
            .into_iter()
            .collect();
        assert_eq!(
            neighbours(&live, &id("a")),
            (vec![id("b"), id("c")], vec![id("c"), id("b")])
        );
        assert_eq!(
            neighbours(&live, &id("c")),
            (vec![id("a"), id("b")], vec![id("b"), id("a")])
        );
        let four: Live = ["a", "b", "c", "d"].iter().map(|w| (id(w), None)).collect();
        assert_eq!(
            neighbours(&four, &id("c")),
            (vec![id("d"), id("a")], vec![id("b"), id("a")])
        );
        let two: Live = [(id("a"), None), (id("b"), None)].into_iter().collect();
        assert_eq!(neighbours(&two, &id("b")), (vec![id("a")], vec![id("a")]));
        let alone: Live = [(id("a"), None)].into_iter().collect();
        assert_eq!(neighbours(&alone, &id("a")), (vec![], vec![]));
        // A worker leaving (capacity 0) does no chores.
        let leaving: Live = [(id("a"), Some(0)), (id("b"), None)].into_iter().collect();
        assert_eq!(chores_worker(&leaving), Some(id("b")));
    }
}
