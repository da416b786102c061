//! How the consumer's record loops read: [`ConsumerConfig`] and where a new shard starts.

use std::time::{Duration, SystemTime};

use crate::config::ConfigError;
pub use crate::consumer::FailureAction;

/// Where a shard with no checkpoint and no parents starts.
///
/// In a configuration file: `"latest"`, `"trim_horizon"`, or
/// `{ at_timestamp = "2026-11-30T00:00:00Z" }` (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum InitialPosition {
    /// The oldest record still in the stream.
    TrimHorizon,
    /// Records written from the moment the lease is first read. The moment is checkpointed
    /// at once, so a lease that moves before its first checkpoint resumes from that moment
    /// instead of skipping what came in between (KCL starts such a lease at the new latest).
    Latest,
    /// Records written from this moment on.
    AtTimestamp(#[cfg_attr(feature = "serde", serde(with = "humantime_serde"))] SystemTime),
}

/// What the record loop reports as a lease's load
/// ([`LeaseGrant::report_load`](crate::LeaseGrant::report_load)), for
/// [`Balance::Load`](crate::Balance::Load). In a configuration file: `"bytes"`, `"records"` or
/// `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum LoadFigure {
    /// Bytes of record data handed to the processor per second (a shard's read limit is
    /// 2 MB/s). The default.
    #[default]
    Bytes,
    /// Records handed to the processor per second.
    Records,
    /// Nothing: the application reports its own figure.
    None,
}

/// How the record loops get their shards' records. In a configuration file: `"polling"`, or
/// `{ fan_out = "my-application" }` (the stream consumer's name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Retrieval {
    /// `GetRecords`, paced by [`ConsumerConfig::min_call_interval`]: the shard's 2 MB/s and 5
    /// reads a second are shared by every polling consumer of the stream, and a record reaches
    /// the processor after about `idle_time_between_reads` when the shard is quiet. Works on
    /// every emulator, costs nothing beyond the stream. The default.
    #[default]
    Polling,
    /// Enhanced fan-out: the stream consumer of this name (registered at start if missing, and
    /// waited for until it is active) gets 2 MB/s per shard of its own, pushed over
    /// `SubscribeToShard` (HTTP/2) as records arrive (about 70 ms on Kinesis). One
    /// subscription per held lease, renewed from the last record delivered when its 5 minutes
    /// end. Kinesis bills each consumer-shard hour and the data it pushes. Give every
    /// application of the stream a name of its own (KCL uses the application's name); at most
    /// 20 consumers per stream.
    FanOut(String),
}

/// The longest stream consumer name Kinesis takes.
const MAX_CONSUMER_NAME: usize = 128;

/// The least `call_timeout` with enhanced fan-out: Kinesis sends a subscription's events at
/// least every 5 s, so a shorter wait would end quiet subscriptions for nothing.
const FAN_OUT_MIN_CALL_TIMEOUT: Duration = Duration::from_secs(6);

/// How the record loops read: [`ConsumerConfig::default`], then a setter per field to change.
/// Every default says where it comes from.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "file::ConsumerConfigFile")
)]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// Where a new shard with no parents starts. A child shard with no checkpoint starts at
    /// its beginning (its parents' data ran up to its first record), or at the moment of an
    /// `AtTimestamp` position. With `Latest`, shards that closed before the consumer first
    /// started get no lease and their children start at `Latest` too, so a stream resharded
    /// within its retention period is not replayed. Default: `Latest` (as KCL).
    pub initial_position: InitialPosition,
    /// Most records per `GetRecords` call, 1 to 10,000. Default: 10,000 (the service's
    /// maximum, as KCL).
    pub max_records: u32,
    /// Least time between two `GetRecords` calls on one shard. Default: 200 ms (the service
    /// allows 5 calls per second per shard, shared by every consumer of the stream).
    pub min_call_interval: Duration,
    /// The wait after a call that returned no records. Default: 1 s (KCL's
    /// `idleTimeBetweenReadsInMillis`).
    pub idle_time_between_reads: Duration,
    /// The longest wait after throttling or errors; the wait doubles from
    /// `min_call_interval` with equal jitter (never sooner than half the doubled wait). Also
    /// how long a lease whose processor panicked, or that Kinesis refused to serve, is held
    /// before it is released. Default: 10 s.
    pub max_backoff: Duration,
    /// The longest a `GetRecords` or `GetShardIterator` call may go unanswered: then it is
    /// abandoned as a transient failure and retried after a backoff (a connection that
    /// accepted the request and never answers would otherwise stall the shard for good).
    /// Default: 10 s (`GetRecords` answers in well under a second, and the SDK's own timeouts
    /// bound only the connect).
    pub call_timeout: Duration,
    /// What each record loop reports as its lease's load, measured over at least
    /// [`LOAD_SAMPLE`](crate::kinesis::LOAD_SAMPLE) of reads (idle reads report 0). Default:
    /// [`LoadFigure::Bytes`].
    pub load_figure: LoadFigure,
    /// Expand records in the KPL's aggregated format into the user records they hold, as KCL
    /// does: each is delivered with its aggregate's sequence number and its own
    /// [`sub_sequence_number`](super::KinesisRecord::sub_sequence_number), and a checkpoint of
    /// one resumes with the next user record of its aggregate. A record that looks aggregated
    /// but whose digest does not match is delivered as it is; an aggregate holding a user
    /// record hashed outside its shard is dropped (both counted in
    /// `shardlease_kinesis_aggregates_not_expanded_total`). Off, every Kinesis record is
    /// delivered as it is, and a checkpoint inside an aggregate resumes after the whole
    /// aggregate. Default: on (as KCL).
    pub deaggregate: bool,
    /// How many times a batch is delivered to `process_records` (the first time included)
    /// while it fails (an error, or [`BatchOutcome::Retry`](super::BatchOutcome::Retry)),
    /// the lease kept, before [`on_failure`](Self::on_failure) applies. At least 1.
    /// Default: 10 (with the default backoffs, about a minute of retries: a downstream
    /// outage that short does not stop a shard).
    pub batch_attempts: u32,
    /// The wait before a failed batch is delivered again: doubling from this per attempt, up
    /// to [`max_backoff`](Self::max_backoff), with equal jitter (never less than half the
    /// doubled wait). Default: 1 s.
    pub retry_backoff: Duration,
    /// What happens to a batch that failed [`batch_attempts`](Self::batch_attempts) times.
    /// Default: [`FailureAction::Stop`] (nothing is skipped unless asked for).
    pub on_failure: FailureAction,
    /// Reading ahead: the next `GetRecords` of a shard runs while `process_records` works,
    /// as long as no more than this many records wait (the batch being processed included;
    /// and at most 3 answers ahead of it, empty ones included, as KCL's
    /// `maxPendingProcessRecordsInput`),
    /// so a catching-up shard is bounded by the slower of reading and processing rather than
    /// by their sum. What was read ahead and not delivered when the lease stops is dropped:
    /// the next reader starts from the checkpoint, as always. 0: read only once the processor
    /// is done with the last batch. Default: 30,000 (KCL's `maxRecordsCount`).
    pub prefetch_records: u32,
    /// The bytes of record data that may wait, as
    /// [`prefetch_records`](Self::prefetch_records) bounds the records (the read that crosses
    /// either limit is the last until the processor catches up). 0: no reading ahead.
    /// Default: 8 MiB (KCL's `maxByteSize`).
    pub prefetch_bytes: u64,
    /// How records are read: polling (`GetRecords`) or enhanced fan-out (`SubscribeToShard`).
    /// With fan-out, `max_records`, `min_call_interval` and `idle_time_between_reads` do not
    /// apply; `call_timeout` bounds the wait for the next event of a subscription (Kinesis
    /// sends one at least every 5 s, so it must be at least 6 s). Default:
    /// [`Retrieval::Polling`].
    pub retrieval: Retrieval,
    /// A consumer of several streams
    /// ([`KinesisConsumer::multi_stream`](super::KinesisConsumer::multi_stream)): how long a
    /// stream its [`StreamTracker`](super::StreamTracker) no longer names is read on before
    /// its leases start to retire (KCL's `waitPeriodToDeleteFormerStreams`). Then they retire
    /// as a vanished shard's do, after [`retire_after`](crate::WorkerConfig::retire_after):
    /// each held lease's processor is asked to stop and may checkpoint, and the lease is
    /// deleted. A stream named again before then is read on from its checkpoints. Default:
    /// 0 (the leases retire `retire_after` after the stream left the set).
    pub removed_stream_wait: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            initial_position: InitialPosition::Latest,
            max_records: 10_000,
            min_call_interval: Duration::from_millis(200),
            idle_time_between_reads: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            call_timeout: Duration::from_secs(10),
            load_figure: LoadFigure::Bytes,
            deaggregate: true,
            batch_attempts: 10,
            retry_backoff: Duration::from_secs(1),
            on_failure: FailureAction::Stop,
            prefetch_records: 30_000,
            prefetch_bytes: 8 * 1024 * 1024,
            retrieval: Retrieval::Polling,
            removed_stream_wait: Duration::ZERO,
        }
    }
}

impl ConsumerConfig {
    /// Sets [`initial_position`](Self::initial_position).
    #[must_use]
    pub fn initial_position(mut self, value: InitialPosition) -> Self {
        self.initial_position = value;
        self
    }

    /// Sets [`max_records`](Self::max_records).
    #[must_use]
    pub fn max_records(mut self, value: u32) -> Self {
        self.max_records = value;
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

    /// Sets [`load_figure`](Self::load_figure).
    #[must_use]
    pub fn load_figure(mut self, value: LoadFigure) -> Self {
        self.load_figure = value;
        self
    }

    /// Sets [`deaggregate`](Self::deaggregate).
    #[must_use]
    pub fn deaggregate(mut self, value: bool) -> Self {
        self.deaggregate = value;
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

    /// Sets [`prefetch_records`](Self::prefetch_records).
    #[must_use]
    pub fn prefetch_records(mut self, value: u32) -> Self {
        self.prefetch_records = value;
        self
    }

    /// Sets [`prefetch_bytes`](Self::prefetch_bytes).
    #[must_use]
    pub fn prefetch_bytes(mut self, value: u64) -> Self {
        self.prefetch_bytes = value;
        self
    }

    /// Sets [`retrieval`](Self::retrieval).
    #[must_use]
    pub fn retrieval(mut self, value: Retrieval) -> Self {
        self.retrieval = value;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    #[must_use]
    pub fn call_timeout(mut self, value: Duration) -> Self {
        self.call_timeout = value;
        self
    }

    /// Sets [`removed_stream_wait`](Self::removed_stream_wait).
    #[must_use]
    pub fn removed_stream_wait(mut self, value: Duration) -> Self {
        self.removed_stream_wait = value;
        self
    }

    /// Checks that the values can work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.max_records) {
            return Err(ConfigError::invalid(
                "max_records",
                format!(
                    "max_records {} must be between 1 and 10,000 (the GetRecords limit)",
                    self.max_records
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
        if let Retrieval::FanOut(name) = &self.retrieval {
            let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
            if name.is_empty() || name.len() > MAX_CONSUMER_NAME || !name.chars().all(valid) {
                return Err(ConfigError::invalid(
                    "retrieval",
                    format!(
                        "the stream consumer name {name:?} must be 1 to {MAX_CONSUMER_NAME} \
                         letters, digits, '_', '.' or '-'"
                    ),
                ));
            }
            if self.call_timeout < FAN_OUT_MIN_CALL_TIMEOUT {
                return Err(ConfigError::invalid(
                    "call_timeout",
                    format!(
                        "call_timeout {:?} must be at least {FAN_OUT_MIN_CALL_TIMEOUT:?} with \
                         enhanced fan-out (Kinesis sends a subscription's events up to 5 s \
                         apart)",
                        self.call_timeout
                    ),
                ));
            }
        }
        if self.batch_attempts == 0 {
            return Err(ConfigError::invalid(
                "batch_attempts",
                "batch_attempts must be at least 1 (the first delivery counts)",
            ));
        }
        if self.max_backoff < self.retry_backoff {
            return Err(ConfigError::invalid(
                "max_backoff",
                format!(
                    "max_backoff {:?} must be at least retry_backoff {:?}",
                    self.max_backoff, self.retry_backoff
                ),
            ));
        }
        if self.max_backoff < self.min_call_interval {
            return Err(ConfigError::invalid(
                "max_backoff",
                format!(
                    "max_backoff {:?} must be at least min_call_interval {:?}",
                    self.max_backoff, self.min_call_interval
                ),
            ));
        }
        Ok(())
    }
}

/// The configuration as a file or the environment gives it: every field optional, durations
/// as humantime text (`"200ms"`, `"10s"`).
#[cfg(feature = "serde")]
mod file {
    use std::time::Duration;

    use super::{
        ConfigError, ConsumerConfig, FailureAction, InitialPosition, LoadFigure, Retrieval,
    };

    #[derive(serde::Deserialize)]
    #[serde(
        deny_unknown_fields,
        rename = "ConsumerConfig",
        expecting = "a table of ConsumerConfig fields (the Kinesis consumer configuration)"
    )]
    pub(super) struct ConsumerConfigFile {
        initial_position: Option<InitialPosition>,
        max_records: Option<u32>,
        #[serde(default, with = "humantime_serde")]
        min_call_interval: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        idle_time_between_reads: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        max_backoff: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        call_timeout: Option<Duration>,
        load_figure: Option<LoadFigure>,
        deaggregate: Option<bool>,
        batch_attempts: Option<u32>,
        #[serde(default, with = "humantime_serde")]
        retry_backoff: Option<Duration>,
        on_failure: Option<FailureAction>,
        prefetch_records: Option<u32>,
        prefetch_bytes: Option<u64>,
        retrieval: Option<Retrieval>,
        #[serde(default, with = "humantime_serde")]
        removed_stream_wait: Option<Duration>,
    }

    impl TryFrom<ConsumerConfigFile> for ConsumerConfig {
        type Error = ConfigError;

        fn try_from(file: ConsumerConfigFile) -> Result<Self, ConfigError> {
            let mut config = ConsumerConfig::default();
            crate::config::set_given!(
                config, file:
                initial_position,
                max_records,
                min_call_interval,
                idle_time_between_reads,
                max_backoff,
                call_timeout,
                load_figure,
                deaggregate,
                batch_attempts,
                retry_backoff,
                on_failure,
                prefetch_records,
                prefetch_bytes,
                retrieval,
                removed_stream_wait
            );
            config.validate()?;
            Ok(config)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bad_value_names_its_field() {
        ConsumerConfig::default().validate().unwrap();
        let field = |config: ConsumerConfig| config.validate().unwrap_err().field();
        let base = ConsumerConfig::default;
        assert_eq!(field(base().max_records(0)), "max_records");
        assert_eq!(field(base().max_records(10_001)), "max_records");
        assert_eq!(field(base().call_timeout(Duration::ZERO)), "call_timeout");
        assert_eq!(
            field(base().idle_time_between_reads(Duration::ZERO)),
            "idle_time_between_reads"
        );
        let slow = base().min_call_interval(Duration::from_secs(20));
        assert_eq!(field(slow), "max_backoff");
        assert_eq!(field(base().batch_attempts(0)), "batch_attempts");
        assert_eq!(field(base().retry_backoff(Duration::ZERO)), "retry_backoff");
        let slow_retry = base().retry_backoff(Duration::from_secs(11));
        assert_eq!(field(slow_retry), "max_backoff");
        for bad in ["", "has space", "ü", &"x".repeat(129)] {
            let fan_out = base().retrieval(Retrieval::FanOut(bad.into()));
            assert_eq!(field(fan_out), "retrieval", "{bad:?}");
        }
        let named = base().retrieval(Retrieval::FanOut("orders-app_2.v1".into()));
        named.validate().unwrap();
        let hasty = named.call_timeout(Duration::from_secs(5));
        assert_eq!(field(hasty), "call_timeout");
    }
}

#[cfg(all(test, feature = "serde"))]
mod file_tests {
    use super::*;

    #[test]
    fn a_file_overrides_the_defaults_and_is_validated() {
        let config: ConsumerConfig = toml::from_str(
            "initial_position = { at_timestamp = \"2026-11-30T00:00:00Z\" }\n\
             max_records = 500\n\
             min_call_interval = \"250ms\"\n",
        )
        .unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_996_800);
        assert_eq!(config.initial_position, InitialPosition::AtTimestamp(at));
        assert_eq!(config.max_records, 500);
        assert_eq!(config.min_call_interval, Duration::from_millis(250));
        assert_eq!(config.call_timeout, ConsumerConfig::default().call_timeout);
        let latest: ConsumerConfig = toml::from_str("initial_position = \"trim_horizon\"").unwrap();
        assert_eq!(latest.initial_position, InitialPosition::TrimHorizon);
        let failures: ConsumerConfig = toml::from_str(
            "batch_attempts = 5\nretry_backoff = \"500ms\"\non_failure = \"skip\"\n",
        )
        .unwrap();
        assert_eq!(failures.batch_attempts, 5);
        assert_eq!(failures.retry_backoff, Duration::from_millis(500));
        assert_eq!(failures.on_failure, FailureAction::Skip);
        let fan_out: ConsumerConfig =
            toml::from_str("retrieval = { fan_out = \"orders\" }").unwrap();
        assert_eq!(fan_out.retrieval, Retrieval::FanOut("orders".into()));
        let polling: ConsumerConfig = toml::from_str("retrieval = \"polling\"").unwrap();
        assert_eq!(polling.retrieval, Retrieval::Polling);
        let streams: ConsumerConfig = toml::from_str("removed_stream_wait = \"10m\"").unwrap();
        assert_eq!(streams.removed_stream_wait, Duration::from_secs(600));
        let err = toml::from_str::<ConsumerConfig>("on_failure = \"retry\"").unwrap_err();
        assert!(err.to_string().contains("skip"), "{err}");
        let err = toml::from_str::<ConsumerConfig>("max_records = 20000").unwrap_err();
        assert!(err.to_string().contains("max_records"), "{err}");
    }
}
