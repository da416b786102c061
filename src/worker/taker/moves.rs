//! The taker's decisions and writes for one round: what to do with each lease of the snapshot
//! (resume, adopt, force, take what was given), the fleet as the balance policy sees it, and
//! the takes and handoff requests that carry out its moves.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::{alive, Action, Taker, FIGURE_WAIT};
use crate::balance::{FleetView, Holder, LeaseView, Move, WorkerView};
use crate::lease::{Lease, LeaseKey, Member, Snapshot, WorkerId};
use crate::lifecycle::LeaseStatus;
use crate::worker::identity::Ownership;
use crate::worker::state::Pending;
use crate::worker::take::{Answer, Job, Report};

impl Taker {
    pub(super) fn actions(
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
                            // A live owner is never taken from: the table would
                            // then name neither the session still finishing the lease nor
                            // anything to wait for, should this worker's own session end
                            // before the owner let go. The owner is told to give the lease up
                            // now (it tells its application the lease is lost, then hands it
                            // over); told again each lease duration until it does, or its
                            // session is over.
                            (false, true, Some(incarnation)) => {
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
                // Given to this id: one session per id, so it is this one's.
                Ownership::Foreign if lease.owner_incarnation.is_none() => {
                    Action::Given(lease.clone())
                }
                Ownership::Foreign => {
                    // Another process with this id works on it: never taken before its session
                    // is surely over. That session may be the one that replaced this
                    // process's own, and a take from it would leave the table naming a
                    // session that, once fenced, nobody waits on, while the other process
                    // still works on the lease.
                    if !self.lease_expired(&lease.key, now) {
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

    /// Notes the held leases of `view` without a load figure, from when this worker first saw
    /// each so; forgets the others. None while no lease has a figure (balance by count).
    pub(super) fn note_unmeasured(&mut self, view: &FleetView, now: Instant) {
        let mut still = HashMap::new();
        if view.leases.iter().all(|l| l.load.is_none()) {
            self.unmeasured = still;
            return;
        }
        for lease in &view.leases {
            if lease.load.is_none() && lease.holder != Holder::Available {
                let since = self.unmeasured.get(&lease.key).copied().unwrap_or(now);
                still.insert(lease.key.clone(), since);
            }
        }
        self.unmeasured = still;
    }

    /// The fleet as the balance policy sees it: ready leases only (blocked, finished and
    /// retiring ones are nobody's to take or ask for).
    pub(super) fn view(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        now: Instant,
    ) -> FleetView {
        // Load figures: a lease's from its holder's record, else from the record of a worker
        // that held it moments ago (kept there until the new holder publishes its own), else
        // from the lease item (written there by an earlier build's renewals).
        let mut members: Vec<&Member> = snapshot.members.iter().collect();
        members.sort_by(|a, b| a.worker.cmp(&b.worker));
        let reported: HashMap<&WorkerId, &Member> =
            members.iter().map(|m| (&m.worker, *m)).collect();
        let mut anyone: HashMap<&LeaseKey, f64> = HashMap::new();
        for member in &members {
            for (key, load) in &member.lease_loads {
                anyone.entry(key).or_insert(*load);
            }
        }
        let holders_own = |lease: &Lease| {
            lease
                .owner
                .as_ref()
                .and_then(|o| reported.get(o))
                .and_then(|m| m.lease_loads.get(&lease.key))
                .copied()
        };
        // A lease's figure, and whether it is settled: the holder published the figure itself
        // (a renewal's figure is its holder's too), or nobody published one although its
        // holder has had the time to.
        let wait = self.shared.config.load_publish_interval * FIGURE_WAIT;
        let figure = |lease: &Lease| {
            let own = holders_own(lease);
            let load = own
                .or_else(|| anyone.get(&lease.key).copied())
                .or(lease.load);
            let settled = own.is_some()
                || lease.load.is_some() && !anyone.contains_key(&lease.key)
                || load.is_none()
                    && self
                        .unmeasured
                        .get(&lease.key)
                        .is_some_and(|since| now.saturating_duration_since(*since) >= wait);
            (load, settled)
        };
        let leases = snapshot
            .leases
            .iter()
            .zip(statuses)
            .zip(expiry)
            .filter(|((_, status), _)| **status == LeaseStatus::Ready)
            // A lease whose session may still live but is not counted live (not yet fenced,
            // or without a record for less than a lease duration) is nobody's to plan with
            // until it is.
            .filter(|((lease, _), at)| {
                !alive(lease, **at, now)
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
                let (load, settled) = figure(lease);
                LeaseView {
                    key: lease.key.clone(),
                    settled: holder == Holder::Available || settled,
                    holder,
                    load,
                }
            })
            .collect();
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

    pub(super) async fn execute(
        &mut self,
        actions: Vec<Action>,
        moves: Vec<Move>,
        by_key: &HashMap<&LeaseKey, &Lease>,
        now: Instant,
    ) {
        // Too slow to hold leases (see `health.rs`): whatever it took now it would lose again,
        // while its late writes kept the leases looking alive to the peers.
        let slow = self.shared.health.is_slow();
        let closed = !self.shared.session_valid();
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
                    let report = match (
                        unacknowledged,
                        self.identity.unanswered_since(&lease.key, lease.nonce),
                    ) {
                        // Forced from a session that has not acknowledged yet: still waits.
                        (Some((owner, incarnation)), _) => {
                            Report::Acknowledged { owner, incarnation }
                        }
                        (None, Some(since)) => Report::ForcedSince(since),
                        (None, None) => Report::Quiet,
                    };
                    Job::Take { lease, report }
                }
                // The other process of this id may still beat (it may have
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
            // owner may still be working. It is asked as a handoff instead, which the owner
            // completes once its application let go (or gives up when told the handoff is
            // late). A take could not be reported before that session acknowledged it; but
            // that wait lives only in this process, and should this process die first (its
            // answer lost, say), the table would show the lease as its dead session's, which
            // the fleet gives on at once while the old owner still processes it (`--schedule
            // 14039232530547505955 --faults all`: `overlap at 38.115 s`).
            let steal =
                self.identity.ownership(&lease) != Ownership::Ours && self.owner_alive(&lease, now);
            let step = match (step, &lease.owner) {
                (Move::Take(key), Some(owner)) if steal && lease.owner_incarnation.is_some() => {
                    Move::RequestHandoff {
                        key,
                        from: owner.clone(),
                    }
                }
                (step, _) => step,
            };
            // A lease given and not yet taken is about to be started by its receiver, whose
            // take would clear the request unseen: ask once it has.
            if matches!(step, Move::RequestHandoff { .. }) && lease.owner_incarnation.is_none() {
                continue;
            }
            spawn(match step {
                // Not a steal: nobody, or no live session, holds it.
                Move::Take(_) => Job::Take {
                    lease,
                    report: Report::Quiet,
                },
                Move::RequestHandoff { from, .. } => Job::Request { lease, from },
            });
        }
        while let Some(answer) = jobs.join_next().await {
            self.record(answer.unwrap_or(Answer::None));
        }
    }

    /// Remembers which takes went unanswered, and forgets those that were answered since.
    pub(super) fn record(&mut self, answer: Answer) {
        match answer {
            Answer::Taken(key) => self.identity.answered(&key),
            Answer::Unanswered { observed, since } => self.identity.unanswered(&observed, since),
            Answer::LostRace | Answer::None => {}
        }
    }
}
