//! Which process of this worker's id owns a lease, which takes of this process went
//! unanswered, and whether another live process uses the same worker id.
//!
//! Plain data over the taker's scans, decided without I/O:
//!
//! - A lease owned by this worker's id is *ours* when it names this process's incarnation, and
//!   *foreign* otherwise (another process with the same id took it, or it was handed over to
//!   the id and not yet taken, or an older version wrote it). Nobody can know whether that
//!   other process is dead, so a foreign lease is taken like a forced take.
//! - A take whose answer this process did not see may have landed while the previous owner was
//!   still working; when the lease turns up as ours later, it is reported as a forced take
//!   from the moment the first unanswered attempt started.
//! - *Twin evidence*: a scan shows that another live process uses this id when the membership
//!   record names another incarnation (it was written after this process's own first
//!   heartbeat), or when a foreign lease changed since the previous scan (a take or a renewal
//!   by that process). While it has such evidence, a worker takes foreign leases only once
//!   they expire, so two live processes keep what each holds instead of taking the leases
//!   back and forth.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Incarnation, Lease, LeaseKey, Snapshot, WorkerId};

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

/// What one scan saw of one lease, to compare with the next scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sighting {
    owned_by_my_id: bool,
    incarnation: Option<Incarnation>,
    tenure: u64,
    counter: u64,
}

impl Sighting {
    fn of(lease: &Lease, me: &WorkerId) -> Self {
        Self {
            owned_by_my_id: lease.is_owned_by(me),
            incarnation: lease.owner_incarnation,
            tenure: lease.tenure,
            counter: lease.counter,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Identity {
    me: WorkerId,
    incarnation: Incarnation,
    /// How long one piece of twin evidence counts.
    lease_duration: Duration,
    /// Takes whose answer this process did not see: when the first such attempt started.
    unanswered: HashMap<LeaseKey, Instant>,
    /// The previous scan's sightings, by key.
    previous: HashMap<LeaseKey, Sighting>,
    /// When the last twin evidence was seen.
    twin_seen: Option<Instant>,
}

impl Identity {
    pub fn new(me: WorkerId, incarnation: Incarnation, lease_duration: Duration) -> Self {
        Self {
            me,
            incarnation,
            lease_duration,
            unanswered: HashMap::new(),
            previous: HashMap::new(),
            twin_seen: None,
        }
    }

    /// With sessions: a process that lost its session opens the next one as a new
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

    /// Records one scan. `expected(key)`: this process asked for `key` in a handoff, so a
    /// hand-over to this id is its own doing, not a twin's. Returns true when twin evidence
    /// appears after none for a lease duration: a new episode, to be reported.
    pub fn observe(
        &mut self,
        snapshot: &Snapshot,
        expected: impl Fn(&LeaseKey) -> bool,
        now: Instant,
    ) -> bool {
        let mut evidence = snapshot
            .members
            .iter()
            .any(|m| m.worker == self.me && m.incarnation.is_some_and(|i| i != self.incarnation));
        let mut current = HashMap::with_capacity(snapshot.leases.len());
        for lease in &snapshot.leases {
            let seen = Sighting::of(lease, &self.me);
            let changed = self
                .previous
                .get(&lease.key)
                .is_some_and(|before| *before != seen);
            let handed_to_us = lease.owner_incarnation.is_none() && expected(&lease.key);
            if changed && !handed_to_us && self.ownership(lease) == Ownership::Foreign {
                evidence = true;
            }
            current.insert(lease.key.clone(), seen);
        }
        self.previous = current;
        self.unanswered
            .retain(|_, since| now < *since + self.lease_duration);
        if !evidence {
            return false;
        }
        let new_episode = !self.sees_twin(now);
        self.twin_seen = Some(now);
        new_episode
    }

    /// Another live process used this id within the last lease duration.
    pub fn sees_twin(&self, now: Instant) -> bool {
        self.twin_seen
            .is_some_and(|at| now < at + self.lease_duration)
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
    use crate::lease::{Member, NewLease};

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

    fn scan(leases: Vec<Lease>, member: Option<Incarnation>) -> Snapshot {
        Snapshot {
            leases,
            members: vec![Member {
                worker: me(),
                heartbeat: 1,
                incarnation: member,
                load: None,
                weight: None,
                lease_loads: Default::default(),
                capacity: None,
                notices: Default::default(),
                session: true,
            }],
            malformed: 0,
        }
    }

    fn identity() -> Identity {
        Identity::new(me(), MINE, Duration::from_secs(10))
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
    fn a_foreign_lease_seen_once_and_unchanged_is_no_evidence() {
        // A restart after a crash: the dead process's leases do not move.
        let mut id = identity();
        let t0 = Instant::now();
        let old = vec![lease("k", Some(("a", Some(TWIN))), 3, 9)];
        assert!(!id.observe(&scan(old.clone(), Some(MINE)), |_| false, t0));
        assert!(!id.observe(
            &scan(old, Some(MINE)),
            |_| false,
            t0 + Duration::from_secs(5)
        ));
        assert!(!id.sees_twin(t0 + Duration::from_secs(5)));
    }

    #[test]
    fn a_renewal_or_a_take_by_another_process_of_my_id_is_evidence_for_a_lease_duration() {
        let second = Duration::from_secs(1);
        let mut id = identity();
        let t0 = Instant::now();
        let before = vec![
            lease("renewed", Some(("a", Some(TWIN))), 3, 9),
            lease("taken", None, 0, 4),
        ];
        assert!(!id.observe(&scan(before, Some(MINE)), |_| false, t0));
        let after = vec![
            lease("renewed", Some(("a", Some(TWIN))), 3, 10),
            lease("taken", Some(("a", Some(TWIN))), 1, 5),
        ];
        assert!(
            id.observe(&scan(after.clone(), Some(MINE)), |_| false, t0 + 5 * second),
            "a new episode"
        );
        assert!(id.sees_twin(t0 + 14 * second));
        assert!(
            !id.observe(&scan(after.clone(), Some(MINE)), |_| false, t0 + 6 * second),
            "nothing changed"
        );
        assert!(
            !id.sees_twin(t0 + 15 * second),
            "evidence lasts a lease duration"
        );
        let renewed = vec![
            lease("renewed", Some(("a", Some(TWIN))), 3, 11),
            lease("taken", Some(("a", Some(TWIN))), 1, 5),
        ];
        assert!(
            id.observe(&scan(renewed, Some(MINE)), |_| false, t0 + 20 * second),
            "a second episode"
        );
    }

    #[test]
    fn the_membership_record_of_another_process_is_evidence() {
        let mut id = identity();
        let t0 = Instant::now();
        assert!(!id.observe(&scan(vec![], Some(MINE)), |_| false, t0));
        assert!(
            !id.observe(&scan(vec![], None), |_| false, t0),
            "an older version's record"
        );
        assert!(id.observe(&scan(vec![], Some(TWIN)), |_| false, t0));
        assert!(id.sees_twin(t0));
    }

    #[test]
    fn a_lease_handed_over_to_my_id_is_evidence_only_when_i_did_not_ask_for_it() {
        let t0 = Instant::now();
        let before = vec![lease("k", Some(("b", Some(TWIN))), 3, 9)];
        let after = vec![lease("k", Some(("a", None)), 4, 10)];
        let mut id = identity();
        id.observe(&scan(before.clone(), Some(MINE)), |_| false, t0);
        assert!(
            !id.observe(&scan(after.clone(), Some(MINE)), |_| true, t0),
            "asked for here"
        );
        let mut id = identity();
        id.observe(&scan(before, Some(MINE)), |_| false, t0);
        assert!(
            id.observe(&scan(after, Some(MINE)), |_| false, t0),
            "asked for by a twin"
        );
    }

    #[test]
    fn my_own_changes_are_no_evidence() {
        let mut id = identity();
        let t0 = Instant::now();
        id.observe(
            &scan(vec![lease("k", None, 0, 1)], Some(MINE)),
            |_| false,
            t0,
        );
        let taken = vec![lease("k", Some(("a", Some(MINE))), 1, 2)];
        assert!(!id.observe(&scan(taken, Some(MINE)), |_| false, t0));
        let renewed = vec![lease("k", Some(("a", Some(MINE))), 1, 3)];
        assert!(!id.observe(&scan(renewed, Some(MINE)), |_| false, t0));
        assert!(!id.sees_twin(t0));
    }

    #[test]
    fn an_unanswered_take_counts_from_its_first_attempt_for_a_lease_duration() {
        let second = Duration::from_secs(1);
        let mut id = identity();
        let t0 = Instant::now();
        let key = LeaseKey::new("k").unwrap();
        id.unanswered(key.clone(), t0 + 2 * second);
        id.unanswered(key.clone(), t0);
        id.unanswered(key.clone(), t0 + 3 * second);
        assert_eq!(id.unanswered_since(&key), Some(t0));
        id.observe(&scan(vec![], Some(MINE)), |_| false, t0 + 9 * second);
        assert_eq!(id.unanswered_since(&key), Some(t0));
        id.observe(&scan(vec![], Some(MINE)), |_| false, t0 + 10 * second);
        assert_eq!(
            id.unanswered_since(&key),
            None,
            "moot a lease duration after it started"
        );
        id.unanswered(key.clone(), t0);
        id.answered(&key);
        assert_eq!(id.unanswered_since(&key), None);
    }
}
