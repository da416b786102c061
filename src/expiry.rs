//! Expiry judged on the observer's own monotonic clock.
//!
//! A lease (or a membership record) is expired when its value has not changed for a lease
//! duration since *this observer* first saw that value. No wall clock is ever compared between
//! hosts: the only time used is the observer's `Instant`.
//!
//! What counts as "the same value" must identify one state of one item: a lease's counter
//! alone does not, because a lease deleted and re-created starts its counter again at 0 and
//! can climb back to a value the observer saw before (with an old first-seen time, so it
//! would look expired at once). Leases are therefore tracked by [`LeaseVersion`]: the counter,
//! the tenure and the nonce the store drew when it created the item.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::Lease;

/// One state of one lease item, as far as expiry is concerned: it changes with every write
/// that moves the counter, and differs between two items created under the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseVersion {
    /// The liveness counter.
    pub counter: u64,
    /// The fencing token.
    pub tenure: u64,
    /// The item's creation nonce ([`Lease::nonce`]).
    pub nonce: u64,
}

impl LeaseVersion {
    /// The version of `lease` as read.
    pub fn of(lease: &Lease) -> Self {
        Self {
            counter: lease.counter,
            tenure: lease.tenure,
            nonce: lease.nonce,
        }
    }
}

/// Remembers, per item, the last value seen (a counter, a [`LeaseVersion`]) and when it was
/// first seen.
#[derive(Debug, Clone)]
pub struct ExpiryTracker<K, V = u64> {
    seen: HashMap<K, (V, Instant)>,
    duration: Duration,
}

impl<K: Eq + Hash + Clone, V: PartialEq> ExpiryTracker<K, V> {
    /// A tracker for items that expire after `duration` without a change of value.
    pub fn new(duration: Duration) -> Self {
        Self {
            seen: HashMap::new(),
            duration,
        }
    }

    /// Records that `key` had `value` at `now`. A changed value restarts the clock.
    /// Returns when the value it has now will count as expired.
    pub fn observe(&mut self, key: &K, value: V, now: Instant) -> Instant {
        let first = match self.seen.get_mut(key) {
            Some((seen, first)) if *seen == value => *first,
            Some(entry) => {
                *entry = (value, now);
                now
            }
            None => {
                self.seen.insert(key.clone(), (value, now));
                now
            }
        };
        first + self.duration
    }

    /// How many keys it remembers.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Forgets every key for which `keep` is false (items that disappeared).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.seen.retain(|key, _| keep(key));
    }

    /// When `key`'s current value will count as expired (`None`: never observed).
    pub fn expires_at(&self, key: &K) -> Option<Instant> {
        self.seen.get(key).map(|(_, first)| *first + self.duration)
    }

    /// True when `key` has kept the same value for the whole duration up to `now`.
    pub fn is_expired(&self, key: &K, now: Instant) -> bool {
        self.expires_at(key).is_some_and(|at| now >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LeaseKey, NewLease};

    #[test]
    fn an_item_expires_only_after_a_full_duration_without_change() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut tracker = ExpiryTracker::new(10 * second);
        tracker.observe(&"a", 1, t0);
        assert!(!tracker.is_expired(&"a", t0 + 9 * second));
        tracker.observe(&"a", 1, t0 + 9 * second);
        assert!(
            tracker.is_expired(&"a", t0 + 10 * second),
            "same value: clock keeps running"
        );
        tracker.observe(&"a", 2, t0 + 10 * second);
        assert!(
            !tracker.is_expired(&"a", t0 + 19 * second),
            "a change restarts the clock"
        );
        assert_eq!(tracker.expires_at(&"a"), Some(t0 + 20 * second));
        assert!(!tracker.is_expired(&"never-seen", t0 + 100 * second));
        tracker.retain(|k| *k != "a");
        assert_eq!(tracker.expires_at(&"a"), None);
    }

    #[test]
    fn a_recreated_lease_back_at_an_old_counter_is_a_new_value() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut tracker = ExpiryTracker::new(10 * second);
        let key = LeaseKey::new("s").unwrap();
        let mut first = NewLease::new(key.clone()).into_lease();
        first.nonce = 1;
        (first.counter, first.tenure) = (5, 1);
        tracker.observe(&key, LeaseVersion::of(&first), t0);
        // Deleted and re-created between two scans, taken and renewed back to counter 5 in
        // tenure 1.
        let mut again = first.clone();
        again.nonce = 2;
        let seen = tracker.observe(&key, LeaseVersion::of(&again), t0 + 10 * second);
        assert_eq!(seen, t0 + 20 * second);
        assert!(!tracker.is_expired(&key, t0 + 19 * second));
    }
}
