//! Which process of this worker's id owns a lease, and which takes of this process went
//! unanswered.
//!
//! Plain data over the taker's scans, decided without I/O:
//!
//! - A lease owned by this worker's id is *ours* when it names this process's incarnation (its
//!   current session), and *foreign* otherwise (another process with the same id took it, it
//!   was handed over or given to the id and not yet taken, or an earlier session of this
//!   process held it). Nobody can know whether that other session is over, so a foreign lease
//!   is taken only once it is.
//! - A take whose answer this process did not see may have landed while the previous owner was
//!   still working; when the lease turns up as ours later, it is reported as a forced take
//!   from the moment the first unanswered attempt started.

use std::collections::HashMap;

use tokio::time::Instant;

use crate::lease::{Incarnation, Lease, LeaseKey, WorkerId};

/// Who owns a lease, as seen from this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// This process took it.
    Ours,
    /// Owned by this worker's id, but not by this process.
    Foreign,
    /// Unowned, or owned by another worker.
    Other,
}

#[derive(Debug)]
pub(crate) struct Identity {
    me: WorkerId,
    incarnation: Incarnation,
    /// Takes whose answer this process did not see: when the first such attempt started.
    unanswered: HashMap<LeaseKey, Instant>,
}

impl Identity {
    pub fn new(me: WorkerId, incarnation: Incarnation) -> Self {
        Self {
            me,
            incarnation,
            unanswered: HashMap::new(),
        }
    }

    /// A process that lost its session opens the next one as a new
    /// incarnation; its leases are the new incarnation's from then on.
    pub fn set_incarnation(&mut self, incarnation: Incarnation) {
        self.incarnation = incarnation;
    }

    /// The incarnation whose leases are *ours*.
    pub fn ownership_incarnation(&self) -> Incarnation {
        self.incarnation
    }

    pub fn ownership(&self, lease: &Lease) -> Ownership {
        if !lease.is_owned_by(&self.me) {
            Ownership::Other
        } else if lease.owner_incarnation == Some(self.incarnation) {
            Ownership::Ours
        } else {
            Ownership::Foreign
        }
    }

    /// A take of `key` started at `since` went unanswered (the earliest such start is kept).
    pub fn unanswered(&mut self, key: LeaseKey, since: Instant) {
        let first = self.unanswered.entry(key).or_insert(since);
        *first = (*first).min(since);
    }

    /// When the first unanswered take of `key` started, if one may still matter.
    pub fn unanswered_since(&self, key: &LeaseKey) -> Option<Instant> {
        self.unanswered.get(key).copied()
    }

    /// A take of `key` was answered: earlier unanswered attempts no longer matter.
    pub fn answered(&mut self, key: &LeaseKey) {
        self.unanswered.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NewLease;

    const MINE: Incarnation = Incarnation::new(1);
    const TWIN: Incarnation = Incarnation::new(2);

    fn me() -> WorkerId {
        WorkerId::new("a").unwrap()
    }

    fn lease(
        key: &str,
        owner: Option<(&str, Option<Incarnation>)>,
        tenure: u64,
        counter: u64,
    ) -> Lease {
        let mut lease = NewLease::new(LeaseKey::new(key).unwrap()).into_lease();
        if let Some((owner, incarnation)) = owner {
            lease.owner = Some(WorkerId::new(owner).unwrap());
            lease.owner_incarnation = incarnation;
        }
        lease.tenure = tenure;
        lease.counter = counter;
        lease
    }

    fn identity() -> Identity {
        Identity::new(me(), MINE)
    }

    #[test]
    fn a_lease_of_my_id_is_ours_only_with_my_incarnation() {
        let id = identity();
        assert_eq!(
            id.ownership(&lease("k", Some(("a", Some(MINE))), 1, 1)),
            Ownership::Ours
        );
        assert_eq!(
            id.ownership(&lease("k", Some(("a", Some(TWIN))), 1, 1)),
            Ownership::Foreign
        );
        assert_eq!(
            id.ownership(&lease("k", Some(("a", None)), 1, 1)),
            Ownership::Foreign
        );
        assert_eq!(
            id.ownership(&lease("k", Some(("b", Some(MINE))), 1, 1)),
            Ownership::Other
        );
        assert_eq!(id.ownership(&lease("k", None, 1, 1)), Ownership::Other);
    }

    #[test]
    fn an_unanswered_take_counts_from_its_first_attempt() {
        let second = std::time::Duration::from_secs(1);
        let mut id = identity();
        let t0 = Instant::now();
        let key = LeaseKey::new("k").unwrap();
        id.unanswered(key.clone(), t0 + 2 * second);
        id.unanswered(key.clone(), t0);
        id.unanswered(key.clone(), t0 + 3 * second);
        assert_eq!(id.unanswered_since(&key), Some(t0));
        id.answered(&key);
        assert_eq!(id.unanswered_since(&key), None);
    }
}
