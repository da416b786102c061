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

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{ByKey, Incarnation, Lease, LeaseKey, WorkerId};

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
    /// Takes whose answer this process did not see, one per key: the one that may still land.
    unanswered: HashMap<LeaseKey, Unanswered>,
}

/// A take whose answer this process did not see: the item (its nonce) and the counter it was
/// conditioned on, and when the first attempt from that observation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unanswered {
    nonce: u64,
    counter: u64,
    since: Instant,
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

    /// A take of `observed` started at `since` went unanswered. Attempts from one observation
    /// count from the first. Of two observations of one item, only the take of the later one
    /// (the higher counter) can still land: the table was past the other's counter when it
    /// was read. Of two items of the key, one was deleted and its take can never land; not
    /// knowing which, the later start is kept, which reports later (the safe side). So a take
    /// never inherits the start of an older one that can no longer land.
    pub fn unanswered(&mut self, observed: &Lease, since: Instant) {
        let new = Unanswered {
            nonce: observed.nonce,
            counter: observed.counter,
            since,
        };
        match self.unanswered.entry(observed.key.clone()) {
            Entry::Vacant(entry) => {
                entry.insert(new);
            }
            Entry::Occupied(mut entry) => {
                let old = entry.get_mut();
                let replace = if old.nonce != new.nonce {
                    new.since > old.since
                } else if new.counter == old.counter {
                    old.since = old.since.min(new.since);
                    false
                } else {
                    new.counter > old.counter
                };
                if replace {
                    *old = new;
                }
            }
        }
    }

    /// When the unanswered take of `key` that may have landed on the item `nonce` started.
    pub fn unanswered_since(&self, key: &LeaseKey, nonce: u64) -> Option<Instant> {
        self.unanswered
            .get(key)
            .filter(|u| u.nonce == nonce)
            .map(|u| u.since)
    }

    /// Forgets the unanswered takes that `by_key` (a view read after they were sent, by key) shows
    /// can no longer matter: the same item, past the counter observed and not this process's
    /// (had the take landed and stayed ours, the lease would show as ours, and its next take
    /// answers it). A take of an item the view does not show (deleted, or not listed yet) is
    /// forgotten once it is `horizon` old.
    pub fn settle(&mut self, by_key: &ByKey<'_>, now: Instant, horizon: Duration) {
        let ours = |lease: &Lease| self.ownership(lease) == Ownership::Ours;
        let settled: Vec<LeaseKey> = self
            .unanswered
            .iter()
            .filter(|(key, u)| match by_key.get(key) {
                Some(lease) if lease.nonce == u.nonce => lease.counter > u.counter && !ours(lease),
                _ => now.saturating_duration_since(u.since) >= horizon,
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in settled {
            self.unanswered.remove(&key);
        }
    }

    /// A take of `key` was answered: earlier unanswered attempts no longer matter.
    pub fn answered(&mut self, key: &LeaseKey) {
        self.unanswered.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
        let observed = lease("k", None, 1, 1);
        id.unanswered(&observed, t0 + 2 * second);
        id.unanswered(&observed, t0);
        id.unanswered(&observed, t0 + 3 * second);
        assert_eq!(id.unanswered_since(&key, observed.nonce), Some(t0));
        assert_eq!(
            id.unanswered_since(&key, observed.nonce + 1),
            None,
            "another item"
        );
        id.answered(&key);
        assert_eq!(id.unanswered_since(&key, observed.nonce), None);
    }

    #[test]
    fn a_later_unanswered_take_never_inherits_the_start_of_one_that_can_no_longer_land() {
        let second = std::time::Duration::from_secs(1);
        let mut id = identity();
        let t0 = Instant::now();
        let key = LeaseKey::new("k").unwrap();
        let first = lease("k", Some(("b", Some(TWIN))), 1, 1);
        id.unanswered(&first, t0);
        // Read again later: the item moved on (another worker took it), and a take of that
        // observation went unanswered too. The first can no longer land.
        let mut later = first.clone();
        later.counter += 2;
        id.unanswered(&later, t0 + 600 * second);
        assert_eq!(
            id.unanswered_since(&key, first.nonce),
            Some(t0 + 600 * second)
        );
        // A take from an older view than one already sent cannot land either.
        id.unanswered(&first, t0 + 700 * second);
        assert_eq!(
            id.unanswered_since(&key, first.nonce),
            Some(t0 + 600 * second)
        );
        // Another item of the key: the later start is kept.
        let mut other = later.clone();
        other.nonce += 1;
        id.unanswered(&other, t0 + 800 * second);
        assert_eq!(
            id.unanswered_since(&key, other.nonce),
            Some(t0 + 800 * second)
        );
        assert_eq!(id.unanswered_since(&key, first.nonce), None);
    }

    #[test]
    fn unanswered_takes_are_forgotten_once_a_view_shows_they_no_longer_matter() {
        let second = std::time::Duration::from_secs(1);
        let horizon = 60 * second;
        let mut id = identity();
        let t0 = Instant::now();
        let taken_away = lease("a", None, 1, 1);
        let landed = lease("b", None, 1, 1);
        let gone = lease("c", None, 1, 1);
        for observed in [&taken_away, &landed, &gone] {
            id.unanswered(observed, t0);
        }
        let mut moved = taken_away.clone();
        moved.counter += 2;
        moved.owner = Some(WorkerId::new("other").unwrap());
        let mut ours = landed.clone();
        ours.counter += 1;
        ours.owner = Some(me());
        ours.owner_incarnation = Some(MINE);
        let view = [Arc::new(moved), Arc::new(ours.clone())];
        let view = ByKey::new(&view);
        id.settle(&view, t0 + second, horizon);
        assert_eq!(id.unanswered_since(&taken_away.key, taken_away.nonce), None);
        assert_eq!(
            id.unanswered_since(&landed.key, landed.nonce),
            Some(t0),
            "ours: still to answer"
        );
        assert_eq!(
            id.unanswered_since(&gone.key, gone.nonce),
            Some(t0),
            "not listed: kept a while"
        );
        id.settle(&view, t0 + horizon, horizon);
        assert_eq!(
            id.unanswered_since(&gone.key, gone.nonce),
            None,
            "not listed for the horizon"
        );
        assert_eq!(id.unanswered_since(&landed.key, landed.nonce), Some(t0));
    }
}
