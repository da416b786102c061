//! Jittered exponential backoff for throttled and transient failures, bounded by a deadline,
//! and a timeout on every attempt, so that a request nobody answers cannot hold a caller.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{StoreError, StoreResult};

/// How a backend retries throttled and transient failures. Other errors are returned at once.
///
/// With the `serde` feature it deserializes from a table of its fields, each optional,
/// durations as humantime text (`base_delay = "25ms"`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Backoff before the first retry; doubled on each further retry.
    /// Default: 25 ms (the AWS SDKs' base delay for DynamoDB).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub base_delay: Duration,
    /// Upper bound on one backoff. Default: 1 s, so that a renewal deadline of a few seconds
    /// still gets several attempts.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub max_delay: Duration,
    /// Most attempts in all, first one included. Default: 10.
    pub max_attempts: u32,
    /// How long one attempt may go unanswered before it is abandoned and counts as a
    /// transient, ambiguous failure (the request may still have been applied). It bounds a
    /// request on a half-open connection (accepted, never answered), which no other timeout
    /// does. Default: 2 s: a hundred times a slow DynamoDB round trip, and short enough that
    /// a beat or renewal sent at the default `renew_interval` (4.5 s with sessions, 3.3 s
    /// with leases) gets a second attempt long before the validity (9.5 s) ends.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub attempt_timeout: Duration,
    /// How a backoff is drawn below its ceiling. Default: [`Jitter::Full`].
    pub jitter: Jitter,
}

/// How a backoff is drawn below its ceiling, `min(max_delay, base_delay * 2^(retry - 1))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[0, ceiling]`: spreads a crowd of retries the most, and may retry at once.
    /// The store's requests use it.
    #[default]
    Full,
    /// Uniform in `[ceiling / 2, ceiling]`: never sooner than half the ceiling. For calls a
    /// rate limit or a cost bounds: Kinesis reads, the discoverer's listings.
    Equal,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(25),
            max_delay: Duration::from_secs(1),
            max_attempts: 10,
            attempt_timeout: Duration::from_secs(2),
            jitter: Jitter::Full,
        }
    }
}

impl RetryPolicy {
    /// Sets [`base_delay`](Self::base_delay).
    #[must_use]
    pub fn base_delay(mut self, value: Duration) -> Self {
        self.base_delay = value;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    #[must_use]
    pub fn max_delay(mut self, value: Duration) -> Self {
        self.max_delay = value;
        self
    }

    /// Sets [`max_attempts`](Self::max_attempts).
    #[must_use]
    pub fn max_attempts(mut self, value: u32) -> Self {
        self.max_attempts = value;
        self
    }

    /// Sets [`attempt_timeout`](Self::attempt_timeout).
    #[must_use]
    pub fn attempt_timeout(mut self, value: Duration) -> Self {
        self.attempt_timeout = value;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    #[must_use]
    pub fn jitter(mut self, value: Jitter) -> Self {
        self.jitter = value;
        self
    }

    /// The backoff before retry number `retry` (1-based), drawn per [`jitter`](Self::jitter)
    /// below the ceiling `min(max_delay, base_delay * 2^(retry-1))`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base_delay
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
            .min(self.max_delay);
        let low = match self.jitter {
            Jitter::Full => 0.0,
            Jitter::Equal => 0.5,
        };
        ceiling.mul_f64(crate::jitter::uniform(low, 1.0))
    }

    /// Runs `attempt` until it succeeds, fails with a non-retryable error, runs out of
    /// attempts, or the next backoff would end at or past `deadline` (the timer wakes on whole
    /// milliseconds, so a backoff ending within one of the deadline counts as ending at it). Each attempt is abandoned
    /// after [`attempt_timeout`](Self::attempt_timeout), or at `deadline` if that comes
    /// first, with [`StoreError::Transient`] `{ ambiguous: true }` naming `operation` and
    /// `key`. `attempt` is told whether an earlier attempt may have been applied (an
    /// ambiguous failure), so it can recognise its own write.
    pub async fn run<T, F, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        mut attempt: F,
    ) -> StoreResult<T>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        let mut maybe_applied = false;
        let mut retry = 0;
        loop {
            let started = Instant::now();
            let give_up = (started + self.attempt_timeout).min(deadline);
            let err = match tokio::time::timeout_at(give_up, attempt(maybe_applied)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(err)) => err,
                Err(_) => StoreError::unanswered(operation, key, give_up - started),
            };
            retry += 1;
            if !err.is_retryable() || retry >= self.max_attempts {
                return Err(err.maybe_applied_before(maybe_applied));
            }
            let pause = self.backoff(retry);
            if Instant::now() + pause + TIMER_TICK >= deadline {
                return Err(err.maybe_applied_before(maybe_applied));
            }
            maybe_applied |= err.is_ambiguous();
            tracing::debug!(error = %err, retry, ?pause, "retrying store operation");
            tokio::time::sleep(pause).await;
        }
    }
}

/// The timer's resolution: tokio wakes a sleep on the first whole millisecond at or after its
/// end, so a pause may last up to this much longer than asked.
const TIMER_TICK: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn transient(ambiguous: bool) -> StoreError {
        StoreError::Transient {
            operation: "test",
            key: "k".into(),
            ambiguous,
            source: "lost".into(),
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let policy = RetryPolicy::default();
        for _ in 0..100 {
            assert!(policy.backoff(1) <= Duration::from_millis(25));
            assert!(policy.backoff(3) <= Duration::from_millis(100));
            assert!(policy.backoff(30) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn full_jitter_reaches_down_to_zero_and_equal_jitter_stays_above_half_the_ceiling() {
        let full = RetryPolicy::default().base_delay(Duration::from_secs(1));
        let equal = full.clone().jitter(Jitter::Equal);
        let draws = |policy: &RetryPolicy| (0..1000).map(|_| policy.backoff(2)).collect::<Vec<_>>();
        let ceiling = Duration::from_secs(1); // 2 s, capped by max_delay
        let low = draws(&full).into_iter().min().unwrap();
        assert!(low < ceiling / 10, "full jitter never drew below {low:?}");
        for wait in draws(&equal) {
            assert!(wait >= ceiling / 2 && wait <= ceiling, "{wait:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_and_ambiguity_is_reported() {
        let calls = AtomicU32::new(0);
        let policy = RetryPolicy::default();
        let seen = policy
            .run(
                "test",
                "k",
                Instant::now() + Duration::from_secs(10),
                |maybe_applied| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        match n {
                            0 => Err(transient(false)),
                            1 => {
                                assert!(!maybe_applied);
                                Err(transient(true))
                            }
                            _ => Ok(maybe_applied),
                        }
                    }
                },
            )
            .await
            .unwrap();
        assert!(
            seen,
            "the third attempt must know an earlier one may have landed"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    /// The call's answer is its last attempt's error, but the call is ambiguous as soon as one
    /// attempt was: a take whose first attempt went unanswered and whose retries were refused
    /// may have landed (seen as a lease owned by a session that never knew it took it).
    #[tokio::test(start_paused = true)]
    async fn a_call_with_an_ambiguous_attempt_fails_as_ambiguous() {
        let calls = AtomicU32::new(0);
        let result: StoreResult<()> = RetryPolicy::default()
            .run(
                "take",
                "k",
                Instant::now() + Duration::from_secs(10),
                |_| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    async move { Err(transient(n == 0)) }
                },
            )
            .await;
        let err = result.unwrap_err();
        assert!(calls.load(Ordering::SeqCst) > 1);
        assert!(err.is_retryable() && err.is_ambiguous(), "{err:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let result: StoreResult<()> = RetryPolicy::default()
            .run(
                "test",
                "k",
                Instant::now() + Duration::from_secs(10),
                |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        Err(StoreError::Fatal {
                            operation: "test",
                            key: "k".into(),
                            source: "denied".into(),
                        })
                    }
                },
            )
            .await;
        assert!(matches!(result, Err(StoreError::Fatal { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(300);
        let result: StoreResult<()> = RetryPolicy {
            max_attempts: u32::MAX,
            ..RetryPolicy::default()
        }
        .run("test", "k", deadline, |_| async { Err(transient(false)) })
        .await;
        assert!(result.unwrap_err().is_retryable());
        assert!(
            Instant::now() < deadline,
            "no sleep may run past the deadline"
        );
    }

    /// A pause that ends within the last millisecond before the deadline wakes at the
    /// deadline (the timer's tick): such a pause is not taken.
    #[tokio::test(start_paused = true)]
    async fn no_pause_wakes_at_the_deadline_on_the_timers_millisecond_tick() {
        let policy = RetryPolicy {
            max_attempts: u32::MAX,
            base_delay: Duration::from_micros(1_900),
            max_delay: Duration::from_micros(1_900),
            jitter: Jitter::Equal,
            ..RetryPolicy::default()
        };
        for _ in 0..20 {
            // The paused clock stands on a whole millisecond here: 2 ms from the deadline,
            // every pause (0.95 to 1.9 ms) would wake on a tick at or before it.
            let deadline = Instant::now() + Duration::from_millis(2);
            let result: StoreResult<()> = policy
                .run("test", "k", deadline, |_| async { Err(transient(false)) })
                .await;
            assert!(result.unwrap_err().is_retryable());
            assert!(Instant::now() < deadline, "a pause woke at the deadline");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_attempt_is_abandoned_retried_and_known_as_maybe_applied() {
        let calls = AtomicU32::new(0);
        let policy = RetryPolicy::default();
        let start = Instant::now();
        let seen = policy
            .run(
                "renew",
                "k",
                start + Duration::from_secs(10),
                |maybe_applied| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n == 0 {
                            std::future::pending::<()>().await;
                        }
                        Ok(maybe_applied)
                    }
                },
            )
            .await
            .unwrap();
        assert!(seen, "an abandoned attempt may have landed");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let took = start.elapsed();
        assert!(
            took >= policy.attempt_timeout && took <= policy.attempt_timeout + policy.base_delay,
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_nobody_answers_ends_at_its_deadline_as_ambiguous() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(5);
        let result: StoreResult<()> = RetryPolicy::default()
            .run("renew", "shard-7", deadline, |_| std::future::pending())
            .await;
        let err = result.unwrap_err();
        assert!(err.is_retryable() && err.is_ambiguous(), "{err:?}");
        assert!(
            matches!(&err, StoreError::Transient { operation: "renew", key, .. } if key == "shard-7"),
            "{err:?}"
        );
        assert!(
            Instant::now() <= deadline,
            "ended {:?} late",
            Instant::now() - deadline
        );
    }
}
