//! Whether this worker's store round trips are fast enough to hold leases.
//!
//! A worker whose requests are answered, but late, renews its leases too late for itself (its
//! local validity runs out) and in time for its peers (the late renewals still move the
//! counters they watch): its leases would stay alive in the table and processed by nobody. So
//! the renewer and the heartbeat report every round trip here, and while the last ones were
//! slow (longer than `renew_interval`, or never answered) the worker takes nothing and
//! publishes capacity 0, so that its peers plan without it; the leases it loses are given up
//! in the table (see `Holder::expire`). The first round trip that starts after the latest slow
//! one and is answered in time ends it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::metrics;
use crate::lease::WorkerId;

#[derive(Debug)]
pub(crate) struct Health {
    /// The most a round trip may take for the worker to hold leases (`renew_interval`).
    budget: Duration,
    /// The start of the latest slow round trip since the worker was last healthy.
    slow_since: Mutex<Option<Instant>>,
    /// When round trips were last found fast again after a slow spell.
    recovered_at: Mutex<Option<Instant>>,
}

impl Health {
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            slow_since: Mutex::new(None),
            recovered_at: Mutex::new(None),
        }
    }

    /// Records a round trip started at `started` and answered at `now`.
    /// A request started at `started` was answered at `now`. `true` when this ends a slow
    /// spell.
    pub fn answered(&self, worker: &WorkerId, started: Instant, now: Instant) -> bool {
        let took = now.saturating_duration_since(started);
        if took > self.budget {
            self.slow(worker, started, Some(took));
            return false;
        }
        let mut slow_since = self.slow_since.lock().unwrap_or_else(|e| e.into_inner());
        if slow_since.is_some_and(|since| started >= since) {
            *slow_since = None;
            drop(slow_since);
            *self.recovered_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
            metrics::slow_store(worker, false);
            tracing::info!(took = ?took, "store round trips are fast again; taking leases again");
            return true;
        }
        false
    }

    /// Whether a slow spell ended within `window` before `now`: peers may still act on the
    /// capacity 0 published meanwhile.
    pub fn recovered_within(&self, now: Instant, window: Duration) -> bool {
        self.recovered_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| now.saturating_duration_since(at) <= window)
    }

    /// Records a round trip started at `started` that got no answer in time. (A failure
    /// that was answered says nothing of the latency: it is not recorded.)
    pub fn unanswered(&self, worker: &WorkerId, started: Instant) {
        self.slow(worker, started, None);
    }

    fn slow(&self, worker: &WorkerId, started: Instant, took: Option<Duration>) {
        let mut slow_since = self.slow_since.lock().unwrap_or_else(|e| e.into_inner());
        match *slow_since {
            None => {
                *slow_since = Some(started);
                drop(slow_since);
                metrics::slow_store(worker, true);
                tracing::warn!(took = ?took, budget = ?self.budget, "store round trips too slow to hold leases: taking none and publishing capacity 0 until one is fast again");
            }
            Some(since) if started > since => *slow_since = Some(started),
            Some(_) => {}
        }
    }

    /// The last round trips were too slow to hold leases.
    pub fn is_slow(&self) -> bool {
        self.slow_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}
