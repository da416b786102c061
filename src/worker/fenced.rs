//! The sessions this process knows to be over (it fenced them after seeing them
//! expire, or replaced their record), whose leases it may start at once. A session is kept
//! while the table still names it (a lease's owner incarnation or a membership record): once
//! nothing names it, nothing can be started on its account, and a fleet that fences a session
//! a minute would otherwise grow this set for as long as the process runs.

use std::collections::HashSet;

use crate::lease::{Incarnation, WorkerId};

/// One session: a worker id and the incarnation of the process that opened it.
pub(crate) type SessionId = (WorkerId, Incarnation);

/// The sessions known here to be over, and how many were ever added.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fenced {
    sessions: HashSet<SessionId>,
    added: u64,
}

impl Fenced {
    /// Records that `session` is over; true if it was not known yet.
    pub fn insert(&mut self, session: SessionId) -> bool {
        let new = self.sessions.insert(session);
        if new {
            self.added += 1;
        }
        new
    }

    /// Whether `worker`'s session `incarnation` is known here to be over.
    pub fn contains(&self, worker: &WorkerId, incarnation: Incarnation) -> bool {
        // Asked for every lease of every round: no id is copied while nothing is fenced.
        !self.is_empty() && self.sessions.contains(&(worker.clone(), incarnation))
    }

    /// How many sessions were ever recorded: it only grows, so a reader that compares it with
    /// its last reading learns of every new fence, whatever was forgotten meanwhile.
    pub fn added(&self) -> u64 {
        self.added
    }

    /// Forgets the sessions `judged` knew that `named` does not name; those added since
    /// `judged` was copied are kept.
    pub fn forget_unnamed(&mut self, judged: &Fenced, named: &HashSet<SessionId>) {
        self.sessions
            .retain(|s| !judged.sessions.contains(s) || named.contains(s));
    }

    /// Whether no session is kept.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// How many sessions are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sessions.len()
    }
}

/// The sessions this process knows to be over, shared by the loops that fence (the watcher,
/// the taker, a hand-over) and those that judge by them.
pub(crate) struct Fences {
    base: std::sync::Arc<super::parts::Base>,
    /// Wakes the taker: a session fenced outside a round has leases to place.
    rescan: std::sync::Arc<tokio::sync::Notify>,
    fenced: std::sync::Mutex<Fenced>,
}

impl Fences {
    pub fn new(
        base: std::sync::Arc<super::parts::Base>,
        rescan: std::sync::Arc<tokio::sync::Notify>,
    ) -> Self {
        Self {
            base,
            rescan,
            fenced: std::sync::Mutex::default(),
        }
    }

    /// Ends `worker`'s session `incarnation` as seen at `heartbeat`, after it was seen
    /// unchanged for a lease duration (the fence). `Ok(true)` when it is over (fenced here,
    /// or gone already): its leases may then be started at once; `Ok(false)` when it beat in
    /// between.
    pub async fn fence(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        heartbeat: u64,
        deadline: tokio::time::Instant,
    ) -> Result<bool, crate::store::StoreError> {
        let ended = self
            .base
            .store
            .end_session(worker, incarnation, heartbeat, deadline)
            .await?;
        if !matches!(
            ended,
            crate::store::Outcome::Done(_) | crate::store::Outcome::LostRace { current: None }
        ) {
            return Ok(false);
        }
        tracing::warn!(worker = %worker, %incarnation, heartbeat, "session expired: fenced; its leases are placed again");
        super::metrics::fenced(&self.base.id);
        self.note(worker, incarnation);
        // Its other leases are placed by a round. A fence made outside one (by the watcher, or
        // by a hander-over whose receiver never took the lease) must start it: nothing else
        // would before the slow scan
        // (`sessions_place_the_leases_of_a_session_fenced_by_a_follow_up` in
        // `sim/tests/simulate.rs`).
        self.rescan.notify_one();
        Ok(true)
    }

    /// Records that `worker`'s session `incarnation` is over (fenced here, or its record
    /// replaced here after it was seen unchanged for a lease duration).
    pub fn note(&self, worker: &WorkerId, incarnation: Incarnation) {
        self.lock().insert((worker.clone(), incarnation));
    }

    /// The sessions known here to be over.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Fenced> {
        self.fenced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `worker`'s session `incarnation` is known here to be over.
    pub fn contains(&self, worker: &WorkerId, incarnation: Incarnation) -> bool {
        self.lock().contains(worker, incarnation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(worker: &str, incarnation: u64) -> SessionId {
        (
            WorkerId::new(worker).unwrap(),
            Incarnation::new(incarnation),
        )
    }

    #[test]
    fn sessions_nothing_names_are_forgotten_and_every_fence_still_counts() {
        let mut fenced = Fenced::default();
        assert!(fenced.insert(session("a", 1)));
        assert!(!fenced.insert(session("a", 1)));
        assert!(fenced.insert(session("b", 2)));
        assert_eq!((fenced.len(), fenced.added()), (2, 2));

        // The table names only b's session now: a's is forgotten.
        let judged = fenced.clone();
        fenced.forget_unnamed(&judged, &HashSet::from([session("b", 2), session("c", 3)]));
        assert!(!fenced.contains(&WorkerId::new("a").unwrap(), Incarnation::new(1)));
        assert!(fenced.contains(&WorkerId::new("b").unwrap(), Incarnation::new(2)));
        assert_eq!(fenced.len(), 1);

        // A fence made after the round copied the set survives that round's pruning; the
        // next round, which judges it, forgets it once nothing names it.
        let before = fenced.added();
        let judged = fenced.clone();
        assert!(fenced.insert(session("c", 3)));
        fenced.forget_unnamed(&judged, &HashSet::new());
        assert!(fenced.contains(&WorkerId::new("c").unwrap(), Incarnation::new(3)));
        assert_eq!(fenced.len(), 1);
        // It leaves the size where it was, yet counts as news.
        assert!(fenced.added() > before);
        let judged = fenced.clone();
        fenced.forget_unnamed(&judged, &HashSet::new());
        assert!(fenced.is_empty());

        // A thousand sessions fenced one after another, each forgotten once its leases moved
        // on: the set stays at one.
        for i in 0..1000 {
            fenced.insert(session("d", 100 + i));
            let judged = fenced.clone();
            fenced.forget_unnamed(&judged, &HashSet::from([session("d", 100 + i)]));
            assert_eq!(fenced.len(), 1);
        }
        assert_eq!(fenced.added(), before + 1001);
    }
}
