//! Expiry judged on the observer's own monotonic clock.
//!
//! A session (a membership record) is expired when its value has not changed for a lease
//! duration since *this observer* first saw that value. No wall clock is ever compared between
//! hosts: the only time used is the observer's `Instant`.
//!
//! What counts as "the same value" must identify one state of one record: a heartbeat alone
//! does not, because a record ended and opened again starts its heartbeat again at 1 and can
//! climb back to a value the observer saw before (with an old first-seen time, so it would
//! look expired at once). Sessions are therefore tracked by (incarnation, heartbeat).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Remembers, per item, the last value seen (a heartbeat, an (incarnation, heartbeat)) and
/// when it was first seen.
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
}
