//! The worker's clock: where it reads monotonic time and how it sleeps.
//!
//! Every safety decision of a worker is a comparison of two instants of its own clock (when a
//! renewal started and when its validity ends, when a counter was first seen and when it
//! expires), never a comparison with another host's clock. What the protocol needs from a clock
//! is only that it runs at nearly the rate of its peers' clocks: the difference over a lease
//! duration must stay within `drift_allowance` (see [`WorkerConfig`](crate::WorkerConfig)).
//!
//! A worker takes its time through a [`Clock`] it is given ([`TokioClock`] by default, which is
//! tokio's monotonic clock and so follows paused time in tests). The simulator gives each worker
//! a clock of its own that runs a little fast or slow, or stops as a frozen process does, to
//! check the protocol under the clock-rate skew it claims to tolerate.
//!
//! The other thing a simulation must fix is chance: `seed_thread` (feature `testing`) seeds the
//! generator every jitter and backoff of the crate draws from, so that a run on one thread
//! replays exactly.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

// Simulation machinery (the simulator, sim/, uses it), so behind `testing`; its doc is
// `jitter::seed_thread`'s.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use crate::jitter::seed_thread;

/// A sleep on a [`Clock`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A monotonic clock a worker reads its time from.
///
/// Instants of a clock are only compared with instants of the same clock. Implementations must
/// be monotonic (`now` never goes back) and `sleep_until(t)` must not complete before `now()`
/// has reached `t`.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current instant of this clock.
    fn now(&self) -> Instant;

    /// Completes once this clock has reached `deadline` (at once if it already has).
    fn sleep_until(&self, deadline: Instant) -> Sleep;
}

/// tokio's monotonic clock: the host's `CLOCK_MONOTONIC` at run time, and paused,
/// auto-advancing time under `tokio::time::pause` (tests, the simulator). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// A deadline of [`timeout_at`] passed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline passed")]
pub struct Elapsed;

/// Runs `future` until `deadline` of `clock`; [`Elapsed`] if the deadline comes first (the
/// future is then dropped). The future is polled first, so one that is ready wins a tie.
pub async fn timeout_at<F: Future>(
    clock: &dyn Clock,
    deadline: Instant,
    future: F,
) -> Result<F::Output, Elapsed> {
    tokio::select! {
        biased;
        output = future => Ok(output),
        _ = clock.sleep_until(deadline) => Err(Elapsed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_sleeps_until_its_deadline() {
        let clock = TokioClock;
        let start = clock.now();
        clock.sleep_until(start + Duration::from_secs(3)).await;
        assert_eq!(clock.now() - start, Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_at_returns_the_output_or_elapsed() {
        let clock = TokioClock;
        let start = clock.now();
        let quick = timeout_at(&clock, start + Duration::from_secs(1), async { 7 }).await;
        assert_eq!(quick, Ok(7));
        let slow = timeout_at(
            &clock,
            start + Duration::from_secs(1),
            tokio::time::sleep(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(slow, Err(Elapsed));
        assert_eq!(clock.now() - start, Duration::from_secs(1));
    }
}
