//! How the LogHub consumer's record loops read: [`LogHubConfig`], where a new shard starts,
//! and the consumer group its checkpoints are mirrored into.

use std::time::{Duration, SystemTime};

use crate::config::ConfigError;
pub use crate::consumer::FailureAction;

/// Where a shard with no checkpoint and no parents starts (a child shard with no checkpoint
/// starts at its beginning: its parents were read to their end).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum InitialPosition {
    /// The oldest log group still in the shard (`GetCursor from=begin`). The default: nothing
    /// is skipped.
    #[default]
    Begin,
    /// Log groups written from the moment the lease is first read (`from=end`). The cursor is
    /// checkpointed at once, so a lease that moves before its first checkpoint resumes there.
    End,
    /// Log groups received from this moment on (`from=<unix seconds>`).
    AtTime(SystemTime),
}

/// A LogHub consumer group that mirrors the consumer's checkpoints, so that the SLS console's
/// lag view and its alarms work for this application. The lease table stays the source of
/// truth: each lease's latest accepted (fenced) checkpoint is written to the group with
/// `UpdateCheckPoint` and `forceSuccess`, under `consumer`'s name, without ever heartbeating
/// the group (the group does not assign shards to anybody here).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerGroup {
    /// The group's name; created at start if missing.
    pub name: String,
    /// The consumer name the checkpoints are written under. Default: `shardlease`.
    pub consumer: String,
    /// How often at most a lease's checkpoint is written to the group (the latest one wins;
    /// the last is written when the lease stops). Default: 10 s.
    pub interval: Duration,
}

impl ConsumerGroup {
    /// A group of this name, checkpoints written as consumer `shardlease` at most every 10 s.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            consumer: "shardlease".to_owned(),
            interval: Duration::from_secs(10),
        }
    }

    /// Sets [`consumer`](Self::consumer).
    #[must_use]
    pub fn consumer(mut self, consumer: impl Into<String>) -> Self {
        self.consumer = consumer.into();
        self
    }

    /// Sets [`interval`](Self::interval).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
}

/// How the record loops read: [`LogHubConfig::default`], then a setter per field to change.
/// Every default says where it comes from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogHubConfig {
    /// Where a new shard with no parents starts. Default: [`InitialPosition::Begin`].
    pub initial_position: InitialPosition,
    /// Most log groups per `PullLogs` call, 1 to 1,000. Default: 1,000 (LogHub's maximum; its
    /// consumer library asks for 1,000 too).
    pub pull_count: u32,
    /// Least time between two `PullLogs` calls on one shard. Default: 200 ms.
    pub min_call_interval: Duration,
    /// The wait after a call that returned nothing. Default: 1 s.
    pub idle_time_between_reads: Duration,
    /// The longest wait after throttling or errors (the wait doubles from
    /// `min_call_interval`, with equal jitter); also how long a lease whose processor
    /// panicked, or that LogHub refused to serve, is held before it is released. Default: 10 s.
    pub max_backoff: Duration,
    /// The longest a LogHub call may take, the SDK's own retries included: then it is
    /// abandoned as a passing failure and tried again after a backoff. Default: 10 s.
    pub call_timeout: Duration,
    /// Deliveries of a failing batch (the first included) before
    /// [`on_failure`](Self::on_failure) applies. At least 1. Default: 10.
    pub batch_attempts: u32,
    /// The wait before a failed batch is delivered again, doubling up to `max_backoff`.
    /// Default: 1 s.
    pub retry_backoff: Duration,
    /// What happens to a batch that failed `batch_attempts` times. Default:
    /// [`FailureAction::Stop`].
    pub on_failure: FailureAction,
    /// A consumer group to mirror the checkpoints into. Default: none.
    pub consumer_group: Option<ConsumerGroup>,
}

impl Default for LogHubConfig {
    fn default() -> Self {
        Self {
            initial_position: InitialPosition::Begin,
            pull_count: 1_000,
            min_call_interval: Duration::from_millis(200),
            idle_time_between_reads: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            call_timeout: Duration::from_secs(10),
            batch_attempts: 10,
            retry_backoff: Duration::from_secs(1),
            on_failure: FailureAction::Stop,
            consumer_group: None,
        }
    }
}

/// The longest consumer group name LogHub takes.
const MAX_GROUP_NAME: usize = 128;

impl LogHubConfig {
    /// Sets [`initial_position`](Self::initial_position).
    #[must_use]
    pub fn initial_position(mut self, value: InitialPosition) -> Self {
        self.initial_position = value;
        self
    }

    /// Sets [`pull_count`](Self::pull_count).
    #[must_use]
    pub fn pull_count(mut self, value: u32) -> Self {
        self.pull_count = value;
        self
    }

    /// Sets [`min_call_interval`](Self::min_call_interval).
    #[must_use]
    pub fn min_call_interval(mut self, value: Duration) -> Self {
        self.min_call_interval = value;
        self
    }

    /// Sets [`idle_time_between_reads`](Self::idle_time_between_reads).
    #[must_use]
    pub fn idle_time_between_reads(mut self, value: Duration) -> Self {
        self.idle_time_between_reads = value;
        self
    }

    /// Sets [`max_backoff`](Self::max_backoff).
    #[must_use]
    pub fn max_backoff(mut self, value: Duration) -> Self {
        self.max_backoff = value;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    #[must_use]
    pub fn call_timeout(mut self, value: Duration) -> Self {
        self.call_timeout = value;
        self
    }

    /// Sets [`batch_attempts`](Self::batch_attempts).
    #[must_use]
    pub fn batch_attempts(mut self, value: u32) -> Self {
        self.batch_attempts = value;
        self
    }

    /// Sets [`retry_backoff`](Self::retry_backoff).
    #[must_use]
    pub fn retry_backoff(mut self, value: Duration) -> Self {
        self.retry_backoff = value;
        self
    }

    /// Sets [`on_failure`](Self::on_failure).
    #[must_use]
    pub fn on_failure(mut self, value: FailureAction) -> Self {
        self.on_failure = value;
        self
    }

    /// Sets [`consumer_group`](Self::consumer_group).
    #[must_use]
    pub fn consumer_group(mut self, value: ConsumerGroup) -> Self {
        self.consumer_group = Some(value);
        self
    }

    /// The failure policy, as the shared delivery loop takes it.
    pub(crate) fn policy(&self) -> crate::consumer::Policy {
        crate::consumer::Policy {
            batch_attempts: self.batch_attempts,
            retry_backoff: self.retry_backoff,
            max_backoff: self.max_backoff,
            on_failure: self.on_failure,
        }
    }

    /// Checks that the values can work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1_000).contains(&self.pull_count) {
            return Err(ConfigError::invalid(
                "pull_count",
                format!(
                    "pull_count {} must be between 1 and 1,000 (the PullLogs limit)",
                    self.pull_count
                ),
            ));
        }
        for (name, value) in [
            ("min_call_interval", self.min_call_interval),
            ("idle_time_between_reads", self.idle_time_between_reads),
            ("call_timeout", self.call_timeout),
            ("retry_backoff", self.retry_backoff),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(
                    name,
                    format!("{name} must be non-zero"),
                ));
            }
        }
        if self.batch_attempts == 0 {
            return Err(ConfigError::invalid(
                "batch_attempts",
                "batch_attempts must be at least 1 (the first delivery counts)",
            ));
        }
        for (name, floor) in [
            ("retry_backoff", self.retry_backoff),
            ("min_call_interval", self.min_call_interval),
        ] {
            if self.max_backoff < floor {
                return Err(ConfigError::invalid(
                    "max_backoff",
                    format!(
                        "max_backoff {:?} must be at least {name} {floor:?}",
                        self.max_backoff
                    ),
                ));
            }
        }
        if let Some(group) = &self.consumer_group {
            let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c);
            let name = &group.name;
            if name.len() < 2 || name.len() > MAX_GROUP_NAME || !name.chars().all(valid) {
                return Err(ConfigError::invalid(
                    "consumer_group",
                    format!(
                        "the consumer group name {name:?} must be 2 to {MAX_GROUP_NAME} \
                         lowercase letters, digits, '_' or '-'"
                    ),
                ));
            }
            if group.consumer.is_empty() || group.interval.is_zero() {
                return Err(ConfigError::invalid(
                    "consumer_group",
                    "the consumer group's consumer name must be non-empty and its interval \
                     non-zero",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bad_value_names_its_field() {
        LogHubConfig::default().validate().unwrap();
        let field = |config: LogHubConfig| config.validate().unwrap_err().field();
        let base = LogHubConfig::default;
        assert_eq!(field(base().pull_count(0)), "pull_count");
        assert_eq!(field(base().pull_count(1_001)), "pull_count");
        assert_eq!(field(base().call_timeout(Duration::ZERO)), "call_timeout");
        assert_eq!(field(base().batch_attempts(0)), "batch_attempts");
        let slow = base().retry_backoff(Duration::from_secs(11));
        assert_eq!(field(slow), "max_backoff");
        for bad in ["", "a", "Upper", "with space", &"x".repeat(129)] {
            let group = base().consumer_group(ConsumerGroup::new(bad));
            assert_eq!(field(group), "consumer_group", "{bad:?}");
        }
        base()
            .consumer_group(ConsumerGroup::new("orders-console_1"))
            .validate()
            .unwrap();
        let silent = ConsumerGroup::new("orders").interval(Duration::ZERO);
        assert_eq!(field(base().consumer_group(silent)), "consumer_group");
    }
}
