//! The simulator's clock: one per worker process, running a little fast or slow against
//! tokio's paused time (clock-rate skew between hosts), and freezable as a SIGSTOPped process
//! is: while frozen no sleep of the process completes, timers included, and afterwards its
//! `now()` has jumped forward by the frozen time, as `CLOCK_MONOTONIC` does across SIGSTOP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardlease::clock::{Clock, Sleep};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A worker process's clock. Cheap to clone; clones are the same clock.
#[derive(Debug, Clone)]
pub struct SimClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Where this clock and tokio's agree: the clock reads `origin + rate x (t - origin)` at
    /// tokio instant `t`.
    origin: Instant,
    rate: f64,
    /// Frozen until this tokio instant (`None`: running).
    frozen: Mutex<Option<Instant>>,
    /// Wakes the sleepers when a freeze begins or ends. Not a `watch` channel: its receivers
    /// are woken in an order drawn from tokio's own unseeded generator, and a thaw wakes
    /// many sleepers at once, so a seed would not replay the same run. `Notify` wakes them
    /// in the order they came.
    changed: Notify,
}

impl SimClock {
    /// A clock running at `rate` (1.01: 1 % fast) from now on.
    pub fn new(rate: f64) -> Self {
        assert!(rate > 0.0 && rate.is_finite(), "a clock rate is positive");
        Self {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                rate,
                frozen: Mutex::new(None),
                changed: Notify::new(),
            }),
        }
    }

    /// How fast this clock runs against tokio's time.
    pub fn rate(&self) -> f64 {
        self.inner.rate
    }

    /// This clock's reading at tokio instant `real`.
    pub fn at(&self, real: Instant) -> Instant {
        let origin = self.inner.origin;
        if real <= origin {
            return real;
        }
        origin + (real - origin).mul_f64(self.inner.rate)
    }

    /// The tokio instant at which this clock reads `local` (rounded up to the nanosecond).
    pub fn real(&self, local: Instant) -> Instant {
        let origin = self.inner.origin;
        if local <= origin {
            return local;
        }
        origin + (local - origin).div_f64(self.inner.rate) + Duration::from_nanos(1)
    }

    /// Freezes the process's time until tokio instant `until`: no sleep completes before it.
    pub fn freeze_until(&self, until: Instant) {
        self.set_frozen(Some(until));
    }

    /// Ends a freeze now.
    pub fn thaw(&self) {
        self.set_frozen(None);
    }

    fn set_frozen(&self, until: Option<Instant>) {
        *self.inner.frozen.lock().unwrap_or_else(|e| e.into_inner()) = until;
        self.inner.changed.notify_waiters();
    }

    fn frozen(&self) -> Option<Instant> {
        *self.inner.frozen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the process is frozen now.
    pub fn is_frozen(&self) -> bool {
        matches!(self.frozen(), Some(until) if until > Instant::now())
    }

    /// Completes at once, or when a freeze in progress ends.
    pub async fn thawed(&self) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.frozen() {
                Some(until) if until > Instant::now() => {
                    tokio::select! {
                        biased;
                        _ = changed => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
                _ => return,
            }
        }
    }

    /// Completes once this clock reads `deadline` and the process is not frozen.
    async fn wait_until(self, deadline: Instant) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let frozen = self.frozen();
            let now = Instant::now();
            let wake = match frozen {
                Some(until) if until > now => until,
                _ if self.at(now) >= deadline => return,
                // tokio's timers have a millisecond grain: never ask for a wake-up at `now`,
                // which would complete without time moving.
                _ => self.real(deadline).max(now + Duration::from_millis(1)),
            };
            tokio::select! {
                biased;
                _ = changed => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.at(Instant::now())
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(self.clone().wait_until(deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_fast_clock_wakes_early_in_real_time() {
        let clock = SimClock::new(1.01);
        let start = Instant::now();
        let local = clock.now();
        clock.sleep_until(local + Duration::from_secs(101)).await;
        let real = start.elapsed();
        assert!(
            (Duration::from_millis(99_999)..=Duration::from_millis(100_001)).contains(&real),
            "{real:?}"
        );
        assert!(clock.now() >= local + Duration::from_secs(101));
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_clock_completes_no_sleep_and_jumps_forward() {
        let clock = SimClock::new(1.0);
        let start = Instant::now();
        clock.freeze_until(start + Duration::from_secs(30));
        let before = clock.now();
        clock.sleep_until(before + Duration::from_secs(1)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(30),
            "held until the thaw"
        );
        assert_eq!(
            clock.now() - before,
            Duration::from_secs(30),
            "time went on"
        );
        assert!(!clock.is_frozen());
    }

    #[tokio::test(start_paused = true)]
    async fn a_thaw_releases_the_sleepers_early() {
        let clock = SimClock::new(1.0);
        let start = Instant::now();
        clock.freeze_until(start + Duration::from_secs(60));
        let thawer = clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            thawer.thaw();
        });
        clock.thawed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
