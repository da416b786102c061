//! The edges of the taker's decisions for one round: the state a decision reads, and the
//! takes and handoff requests that carry out what `decide.rs` decided.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::decide::{self, Action, Figures, Judge, Live};
use super::{Taker, FIGURE_WAIT};
use crate::balance::{FleetView, Holder, Move};
use crate::lease::{ByKey, LeaseKey, Snapshot};
use crate::lifecycle::LeaseStatus;
use crate::worker::take::{Answer, Job};

impl Taker {
    /// What this round's decisions read of the taker: who it is and its reading of the
    /// sessions, at `now`.
    pub(super) fn judge(&self, now: Instant) -> Judge<'_> {
        Judge {
            me: &self.shared.id,
            config: &self.shared.config,
            identity: &self.identity,
            expiry: &self.expiry,
            now,
        }
    }

    /// What to do with each lease of the snapshot before planning (see
    /// [`decide::decide_actions`]); the handoffs this worker waits on are replaced by those it
    /// still waits on, and the owners to tell to give a lease up are kept for the round.
    pub(super) fn actions(
        &mut self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        now: Instant,
    ) -> Vec<Action> {
        // Decided and written under one lock: a notice may change the handoffs waited on.
        let (actions, revokes) = {
            let mut state = self.shared.lock();
            let decided = decide::decide_actions(
                &self.judge(now),
                snapshot,
                statuses,
                &state.held,
                &state.pending,
            );
            state.pending = decided.pending;
            (decided.actions, decided.revokes)
        };
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

    /// The fleet as the balance policy sees it (see [`decide::fleet_view`]).
    pub(super) fn view(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &Live,
        expiry: &[Instant],
        now: Instant,
    ) -> FleetView {
        let figures = Figures {
            unmeasured: &self.unmeasured,
            wait: self.shared.config.load_publish_interval * FIGURE_WAIT,
        };
        decide::fleet_view(snapshot, statuses, live, expiry, &figures, now)
    }

    /// Carries out this round's actions, then its moves, at most `max_concurrent_writes`
    /// at a time, and records their answers. `true` when each of them was a take whose
    /// answer came (none skipped, lost, unanswered or waiting on another worker): nothing of
    /// this round is left to see through.
    pub(super) async fn execute(
        &mut self,
        actions: Vec<Action>,
        moves: Vec<Move>,
        by_key: &ByKey<'_>,
        now: Instant,
    ) -> bool {
        // Too slow to hold leases (see `health.rs`): whatever it took now it would lose again,
        // while its late writes kept the leases looking alive to the peers.
        let slow = self.shared.health.is_slow();
        let closed = !self.parts.own.valid();
        if slow || closed {
            if !actions.is_empty() || !moves.is_empty() {
                let why = if slow {
                    "store round trips too slow: taking nothing this round"
                } else {
                    "session not valid here (closed, or no beat landed within its validity): taking nothing this round"
                };
                tracing::info!(skipped = actions.len() + moves.len(), "{why}");
            }
            return actions.is_empty() && moves.is_empty();
        }
        let asked = actions.len() + moves.len();
        let acted: HashSet<LeaseKey> = actions.iter().map(|a| a.key().clone()).collect();
        let mut jobs = {
            let unacknowledged = self.parts.unacknowledged.lock();
            decide::action_jobs(&self.judge(now), actions, &unacknowledged)
        };
        jobs.extend(decide::move_jobs(&self.judge(now), moves, by_key, &acted));
        let mut taken = 0;
        for answer in self.run_jobs(jobs).await {
            taken += usize::from(matches!(answer, Answer::Taken(_)));
            self.record(answer);
        }
        taken == asked
    }

    /// Runs `jobs`, at most `max_concurrent_writes` at a time; their answers as they come.
    async fn run_jobs(&self, jobs: Vec<Job>) -> Vec<Answer> {
        let limit = Arc::new(Semaphore::new(self.shared.config.max_concurrent_writes));
        let mut running = JoinSet::new();
        for job in jobs {
            let (shared, limit) = (Arc::clone(&self.shared), Arc::clone(&limit));
            let acks = Arc::clone(&self.parts.unacknowledged);
            let own = Arc::clone(&self.parts.own);
            running.spawn(
                async move {
                    let Ok(_permit) = limit.acquire_owned().await else {
                        return Answer::None;
                    };
                    job.run(&shared, &own, &acks).await
                }
                .in_current_span(),
            );
        }
        let mut answers = Vec::new();
        while let Some(answer) = running.join_next().await {
            answers.push(answer.unwrap_or(Answer::None));
        }
        answers
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
