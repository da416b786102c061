//! The worker's configuration: one struct of [`Duration`]s and limits, validated when the
//! worker starts.

use std::time::Duration;

/// A configuration value that cannot work: which field, and why. Every configuration of this
/// crate ([`WorkerConfig`], the DynamoDB store's and the Kinesis consumer's) reports with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `field` holds a value that cannot work.
    #[error("invalid configuration: {reason}")]
    Invalid {
        /// The field, as named in its struct (`renew_interval`, `table_name`, ...).
        field: &'static str,
        /// Why the value cannot work, with the value and what would.
        reason: String,
    },
}

impl ConfigError {
    /// `field` holds a value that cannot work, because of `reason`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Invalid { field, .. } => field,
        }
    }

    /// Why its value cannot work.
    pub fn reason(&self) -> &str {
        match self {
            Self::Invalid { reason, .. } => reason,
        }
    }
}

/// How the fleet is balanced, when the worker is not given a policy of its own
/// ([`WorkerBuilder::policy`](crate::worker::WorkerBuilder::policy)). In a configuration file:
/// `"count"` or `"load"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Balance {
    /// The default: every worker holds as many leases as the others, within one
    /// ([`CountBalance`](crate::balance::CountBalance)).
    #[default]
    Count,
    /// Every worker holds a share of the fleet's load in proportion to its
    /// [`weight`](WorkerConfig::weight), by the load figures the application reports
    /// ([`LoadBalance`](crate::balance::LoadBalance) with its defaults). Every worker of a
    /// fleet must balance the same way.
    Load,
}

/// How a worker keeps, takes and hands over leases.
///
/// One flat struct, so that a file, the environment and a program name each setting alike
/// (`docs/decisions/0019-the-worker-config-stays-flat.md`); its fields, by group:
///
/// - the lease and its intervals: [`lease_duration`](Self::lease_duration),
///   [`renew_interval`](Self::renew_interval), [`taker_interval`](Self::taker_interval),
///   [`drift_allowance`](Self::drift_allowance);
/// - handoffs and departures: [`handoff_timeout`](Self::handoff_timeout),
///   [`handoff_poll_interval`](Self::handoff_poll_interval),
///   [`notice_poll_interval`](Self::notice_poll_interval),
///   [`quiet_period`](Self::quiet_period), [`shutdown_timeout`](Self::shutdown_timeout);
/// - limits: [`max_leases_per_worker`](Self::max_leases_per_worker),
///   [`max_concurrent_writes`](Self::max_concurrent_writes),
///   [`store_timeout`](Self::store_timeout);
/// - the fleet's chores: [`discovery_interval`](Self::discovery_interval),
///   [`retire_after`](Self::retire_after), [`slow_scan_interval`](Self::slow_scan_interval);
/// - health: [`progress_window`](Self::progress_window);
/// - balance by load: [`balance`](Self::balance), [`weight`](Self::weight),
///   [`load_short_window`](Self::load_short_window),
///   [`load_long_window`](Self::load_long_window),
///   [`load_publish_interval`](Self::load_publish_interval).
///
/// Every default says where it comes from. [`WorkerConfig::validate`] explains what is wrong
/// with a combination that cannot work.
///
/// With the `serde` feature it reads from a file or the environment: every field optional,
/// durations as [`humantime`](https://docs.rs/humantime) text (`"10s"`, `"250ms"`,
/// `"1m 30s"`), an unknown field refused by name, the result [validated](Self::validate).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    // `remote = "Self"`: the derived code is `WorkerConfig::deserialize`, which the
    // `Deserialize` implementation below calls before it validates.
    serde(
        remote = "Self",
        default,
        deny_unknown_fields,
        expecting = "a table of WorkerConfig fields (the worker configuration)"
    )
)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// How long a lease stays valid without a renewal: the failover time after a crash.
    /// Default: 10 s (KCL's `failoverTimeMillis`). A session rides out a stall of its store
    /// round trips shorter than 55 % of it (5.5 s at 10 s); shorter leases fail over faster
    /// and write more (one beat per 45 %), and at 6 s and under the simulator's heavy-tail
    /// model (one 3 s stall per worker-hour) moved healthy workers' leases
    /// (`docs/ARCHITECTURE.md`, "Choosing the lease").
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub lease_duration: Duration,
    /// How often the worker's session (its membership record) is beaten: every lease it holds
    /// is valid as long as the session. Default: 45 % of `lease_duration` (4.5 s of 10 s). At
    /// rest a worker then sends five requests per beat: its beat, one read of the record of
    /// each of the two workers it watches (one in a fleet of two) and two reads of its own
    /// record between beats (see [`notice_poll_interval`](Self::notice_poll_interval)): two
    /// workers send 108 a minute, three 201. A failed beat is retried every
    /// quarter of an interval, so a session survives four failed attempts in a row. A crashed
    /// worker's leases are started elsewhere a lease duration after its last beat whatever
    /// the interval; notices wait for their receiver's next read of its record. A shorter
    /// beat (at most half the lease duration) costs more writes at rest. `None` (unset)
    /// follows `lease_duration`; [`effective_renew_interval`](Self::effective_renew_interval)
    /// is the value the worker uses.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub renew_interval: Option<Duration>,
    /// How soon the taker scans the table again after a round that failed (a scan the store
    /// refused or did not answer), counted from that round's start. Rounds otherwise run when
    /// something changed, plus the slow scan (`slow_scan_interval`). Default:
    /// `lease_duration / 2`: `None` (unset) follows `lease_duration`;
    /// [`effective_taker_interval`](Self::effective_taker_interval) is the value the worker
    /// uses.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub taker_interval: Option<Duration>,
    /// Safety margin taken off the local validity of a lease: a lease is valid locally until
    /// (start of the last successful renewal request) + `lease_duration` - this. It covers
    /// clock-rate drift between hosts and the time the application needs to notice its stop
    /// signal. Default: `lease_duration / 20` (500 ms): `None` (unset) follows
    /// `lease_duration`; [`effective_drift_allowance`](Self::effective_drift_allowance) is the
    /// value the worker uses.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub drift_allowance: Option<Duration>,
    /// How long the owner of a lease asked for in a graceful handoff has to finish and hand it
    /// over before the requester takes it anyway. Default: 30 s (KCL 3.x's graceful handoff
    /// timeout).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub handoff_timeout: Duration,
    /// How often a worker waiting for a handoff reads the lease to start the moment it is
    /// handed over. Default: 250 ms (a handful of reads, only while a handoff is pending).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub handoff_poll_interval: Duration,
    /// How often, between its beats, the worker reads its own membership record for notices
    /// (a handoff a joining worker asks of it, a lease given to it), and beats at once when
    /// one came: a notice waits this long at most, not a whole beat. Default: a third of the
    /// beat interval (1.5 s of 4.5 s): two eventually consistent reads per beat, half a read
    /// unit each, against a join that waited for the holder's next beat (up to 4.5 s). A value
    /// of the beat interval or more turns the reads off. `None` (unset) follows
    /// `renew_interval`; [`effective_notice_poll_interval`](Self::effective_notice_poll_interval)
    /// is the value the worker uses.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub notice_poll_interval: Option<Duration>,
    /// The hold after every move: a lease taken is given to the application this long after
    /// its take began, whatever the take (a graceful handoff for balance, a leaving worker's
    /// lease, a failover, a shard's first owner). For applications that keep a shard's state
    /// elsewhere (Redis, a database) and back it up when they let the shard go: the old
    /// owner saves the state when its application is asked to stop (and, after a crash, the
    /// new owner finds what the last save left), and the new owner loads it only after the
    /// hold. It adds to every failover and to every start. Default: zero.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub quiet_period: Duration,
    /// How long `shutdown()` lets the application finish and checkpoint before it stops
    /// waiting; leases not finished by then are left to expire instead of being released.
    /// Default: 30 s (as `handoff_timeout`).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub shutdown_timeout: Duration,
    /// The most leases this worker holds. Default: `u32::MAX` (no limit; KCL's
    /// `maxLeasesForWorker` default is also unlimited).
    pub max_leases_per_worker: u32,
    /// The most lease writes of one batch in flight at once: the creates of a wave of new
    /// leases, the takes of a taker round, the placements of released leases. Default: 64: at
    /// 10 ms a request, 10,000 takes are written in about 1.6 s. (KCL: 20 renewer threads.)
    pub max_concurrent_writes: usize,
    /// Deadline of one store call made by the taker (scans, takes). Default: 5 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub store_timeout: Duration,
    /// How often the discoverer lists the [`ShardSource`](crate::source::ShardSource), on
    /// the one worker of the fleet that runs it. Failed listings back off with jitter up to
    /// 8 x this. A listing may take up to this long (or `store_timeout`, if longer).
    /// Default: 10 s (KCL syncs shards every 60 s).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub discovery_interval: Duration,
    /// How long a shard must be missing from the source before its lease is retired: the
    /// holder is told to stop ([`StopReason::Retired`](crate::worker::StopReason::Retired))
    /// and deletes the lease once its application finished. It keeps a shard that drops out
    /// of one listing from being retired. Default: 60 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub retire_after: Duration,
    /// How often one worker of the fleet (the smallest live id)
    /// scans the whole table for what nobody announced (a lease edited or deleted by hand, a
    /// session that stopped beating unnoticed, a lease nobody holds). Default: 50 s, so that a
    /// hand edit is noticed within a minute.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub slow_scan_interval: Duration,
    /// How long a lease reported to the application may go without progress (a checkpoint,
    /// or a call of [`LeaseGrant::progress`](crate::worker::LeaseGrant::progress)) before the
    /// worker's monitor reports it stalled
    /// ([`Stall::NoProgress`](crate::worker::Stall::NoProgress), and
    /// [`WorkerMonitor::healthy`](crate::worker::WorkerMonitor::healthy) fails). The window
    /// starts when the grant is given to the application. The Kinesis consumer reports
    /// progress by itself after every batch its processor returns from and every empty read.
    ///
    /// Default: `None` (off): only the application knows how often it makes progress (a
    /// lease of a quiet source may see nothing to checkpoint for hours), and a window that is
    /// too short makes a liveness probe restart healthy processes. Set it to several times
    /// the longest pause between two checkpoints or `progress()` calls your application makes
    /// on a busy lease.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub progress_window: Option<Duration>,
    /// How the fleet is balanced. Default: [`Balance::Count`].
    pub balance: Balance,
    /// How much load this worker takes relative to the others, published with its membership
    /// record: with [`Balance::Load`], a worker of weight 2 is given twice the load of a
    /// worker of weight 1 (an instance twice the size). Default: 1.
    pub weight: f64,
    /// The time constant of the short moving average of each lease's reported load: how fast
    /// a lease turning hot shows. Default: 10 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub load_short_window: Duration,
    /// The time constant of the long moving average: how slowly a lease cooling down is
    /// forgotten (a lease's published figure is this one, unless the short one is more than
    /// 20 % higher). Default: 2 min.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub load_long_window: Duration,
    /// The shortest time between two publications of this worker's load figures (sent with a
    /// beat or heartbeat, when a figure moved by more than 10 % or the leases changed; an
    /// unchanged report is sent again every three intervals). Default: 10 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub load_publish_interval: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(10),
            renew_interval: None,
            taker_interval: None,
            drift_allowance: None,
            handoff_timeout: Duration::from_secs(30),
            handoff_poll_interval: Duration::from_millis(250),
            notice_poll_interval: None,
            quiet_period: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(30),
            max_leases_per_worker: u32::MAX,
            max_concurrent_writes: 64,
            store_timeout: Duration::from_secs(5),
            discovery_interval: Duration::from_secs(10),
            retire_after: Duration::from_secs(60),
            slow_scan_interval: Duration::from_secs(50),
            progress_window: None,
            balance: Balance::Count,
            weight: 1.0,
            load_short_window: Duration::from_secs(10),
            load_long_window: Duration::from_secs(120),
            load_publish_interval: Duration::from_secs(10),
        }
    }
}

impl WorkerConfig {
    /// The beat interval the worker uses: [`renew_interval`](Self::renew_interval) if set,
    /// else 45 % of `lease_duration`.
    pub fn effective_renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.lease_duration * 9 / 20)
    }

    /// How often the worker reads its own record between beats:
    /// [`notice_poll_interval`](Self::notice_poll_interval) if set, else a third of the beat
    /// interval; `None` when that is the beat interval or more (no reads between beats).
    pub fn effective_notice_poll_interval(&self) -> Option<Duration> {
        let beat = self.effective_renew_interval();
        let poll = self.notice_poll_interval.unwrap_or(beat / 3);
        (poll < beat).then_some(poll)
    }

    /// The retry delay after a failed taker round: [`taker_interval`](Self::taker_interval)
    /// if set, else half of `lease_duration`.
    pub fn effective_taker_interval(&self) -> Duration {
        self.taker_interval.unwrap_or(self.lease_duration / 2)
    }

    /// The margin taken off a lease's local validity:
    /// [`drift_allowance`](Self::drift_allowance) if set, else a twentieth of
    /// `lease_duration`.
    pub fn effective_drift_allowance(&self) -> Duration {
        self.drift_allowance.unwrap_or(self.lease_duration / 20)
    }

    /// Sets [`balance`](Self::balance).
    #[must_use]
    pub fn balance(mut self, value: Balance) -> Self {
        self.balance = value;
        self
    }

    /// Sets [`weight`](Self::weight).
    #[must_use]
    pub fn weight(mut self, value: f64) -> Self {
        self.weight = value;
        self
    }

    /// Sets [`load_short_window`](Self::load_short_window).
    #[must_use]
    pub fn load_short_window(mut self, value: Duration) -> Self {
        self.load_short_window = value;
        self
    }

    /// Sets [`load_long_window`](Self::load_long_window).
    #[must_use]
    pub fn load_long_window(mut self, value: Duration) -> Self {
        self.load_long_window = value;
        self
    }

    /// Sets [`load_publish_interval`](Self::load_publish_interval).
    #[must_use]
    pub fn load_publish_interval(mut self, value: Duration) -> Self {
        self.load_publish_interval = value;
        self
    }

    /// Sets [`lease_duration`](Self::lease_duration). The renew and taker intervals and the
    /// drift allowance follow it unless set, whatever the order of the setters.
    #[must_use]
    pub fn lease_duration(mut self, value: Duration) -> Self {
        self.lease_duration = value;
        self
    }

    /// Sets [`renew_interval`](Self::renew_interval).
    #[must_use]
    pub fn renew_interval(mut self, value: Duration) -> Self {
        self.renew_interval = Some(value);
        self
    }

    /// Sets [`drift_allowance`](Self::drift_allowance).
    #[must_use]
    pub fn drift_allowance(mut self, value: Duration) -> Self {
        self.drift_allowance = Some(value);
        self
    }

    /// Sets [`notice_poll_interval`](Self::notice_poll_interval).
    #[must_use]
    pub fn notice_poll_interval(mut self, value: Duration) -> Self {
        self.notice_poll_interval = Some(value);
        self
    }

    /// Sets [`handoff_poll_interval`](Self::handoff_poll_interval).
    #[must_use]
    pub fn handoff_poll_interval(mut self, value: Duration) -> Self {
        self.handoff_poll_interval = value;
        self
    }

    /// Sets [`max_concurrent_writes`](Self::max_concurrent_writes).
    #[must_use]
    pub fn max_concurrent_writes(mut self, value: usize) -> Self {
        self.max_concurrent_writes = value;
        self
    }

    /// Sets [`store_timeout`](Self::store_timeout).
    #[must_use]
    pub fn store_timeout(mut self, value: Duration) -> Self {
        self.store_timeout = value;
        self
    }

    /// Sets [`slow_scan_interval`](Self::slow_scan_interval).
    #[must_use]
    pub fn slow_scan_interval(mut self, value: Duration) -> Self {
        self.slow_scan_interval = value;
        self
    }

    /// Sets [`progress_window`](Self::progress_window) (`None`: off).
    #[must_use]
    pub fn progress_window(mut self, value: Option<Duration>) -> Self {
        self.progress_window = value;
        self
    }

    /// Sets [`taker_interval`](Self::taker_interval).
    #[must_use]
    pub fn taker_interval(mut self, value: Duration) -> Self {
        self.taker_interval = Some(value);
        self
    }

    /// Sets [`handoff_timeout`](Self::handoff_timeout).
    #[must_use]
    pub fn handoff_timeout(mut self, value: Duration) -> Self {
        self.handoff_timeout = value;
        self
    }

    /// Sets [`quiet_period`](Self::quiet_period).
    #[must_use]
    pub fn quiet_period(mut self, value: Duration) -> Self {
        self.quiet_period = value;
        self
    }

    /// Sets [`max_leases_per_worker`](Self::max_leases_per_worker).
    #[must_use]
    pub fn max_leases_per_worker(mut self, value: u32) -> Self {
        self.max_leases_per_worker = value;
        self
    }

    /// Sets [`discovery_interval`](Self::discovery_interval).
    #[must_use]
    pub fn discovery_interval(mut self, value: Duration) -> Self {
        self.discovery_interval = value;
        self
    }

    /// Sets [`retire_after`](Self::retire_after).
    #[must_use]
    pub fn retire_after(mut self, value: Duration) -> Self {
        self.retire_after = value;
        self
    }

    /// Sets [`shutdown_timeout`](Self::shutdown_timeout).
    #[must_use]
    pub fn shutdown_timeout(mut self, value: Duration) -> Self {
        self.shutdown_timeout = value;
        self
    }

    /// The local validity a renewal buys: `lease_duration - drift_allowance`.
    pub fn validity(&self) -> Duration {
        self.lease_duration
            .saturating_sub(self.effective_drift_allowance())
    }

    /// The capacity this worker publishes in its membership record: `None` when unlimited.
    pub fn published_capacity(&self) -> Option<u32> {
        Some(self.max_leases_per_worker).filter(|c| *c != u32::MAX)
    }

    /// Checks that the values can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field, reason: String| Err(ConfigError::invalid(field, reason));
        let renew_interval = self.effective_renew_interval();
        let drift_allowance = self.effective_drift_allowance();
        if self.lease_duration < Duration::from_millis(100) {
            return fail(
                "lease_duration",
                format!(
                    "lease_duration {:?} is too short: at least 100 ms",
                    self.lease_duration
                ),
            );
        }
        if renew_interval.is_zero() || renew_interval * 2 > self.lease_duration {
            return fail(
                "renew_interval",
                format!(
                    "renew_interval {:?} must be non-zero and at most half of lease_duration {:?} \
                     (the default: 45 %), so that one failed beat does not lose the \
                     session",
                    renew_interval, self.lease_duration
                ),
            );
        }
        if drift_allowance + renew_interval >= self.lease_duration {
            return fail(
                "drift_allowance",
                format!(
                "drift_allowance {:?} + renew_interval {:?} must be less than lease_duration {:?}",
                drift_allowance, renew_interval, self.lease_duration
            ),
            );
        }
        for (name, value) in [
            ("taker_interval", self.effective_taker_interval()),
            ("handoff_poll_interval", self.handoff_poll_interval),
            ("store_timeout", self.store_timeout),
            ("discovery_interval", self.discovery_interval),
            ("slow_scan_interval", self.slow_scan_interval),
            ("load_short_window", self.load_short_window),
            ("load_long_window", self.load_long_window),
            ("load_publish_interval", self.load_publish_interval),
        ] {
            if value.is_zero() {
                return fail(name, format!("{name} must be non-zero"));
            }
        }
        if self.notice_poll_interval.is_some_and(|poll| poll.is_zero()) {
            return fail(
                "notice_poll_interval",
                "notice_poll_interval must be non-zero (the beat interval or more turns the \
                 reads between beats off)"
                    .into(),
            );
        }
        if self.progress_window.is_some_and(|window| window.is_zero()) {
            return fail(
                "progress_window",
                "progress_window must be non-zero (leave it out, or None, to turn the check off)"
                    .into(),
            );
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return fail(
                "weight",
                format!("weight {} must be a finite number above 0", self.weight),
            );
        }
        if self.load_short_window > self.load_long_window {
            return fail(
                "load_short_window",
                format!(
                    "load_short_window {:?} must not be longer than load_long_window {:?}",
                    self.load_short_window, self.load_long_window
                ),
            );
        }
        if self.max_leases_per_worker == 0 {
            return fail(
                "max_leases_per_worker",
                "max_leases_per_worker must be at least 1".into(),
            );
        }
        if self.max_concurrent_writes == 0 {
            return fail(
                "max_concurrent_writes",
                "max_concurrent_writes must be at least 1".into(),
            );
        }
        Ok(())
    }
}

/// A configuration read from a file or the environment is validated as it is read.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for WorkerConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = WorkerConfig::deserialize(deserializer)?;
        config.validate().map_err(serde::de::Error::custom)?;
        Ok(config)
    }
}

/// Moves each field a configuration file gave (`Some`) into the configuration:
/// `set_given!(config, file: field_a, field_b)`. Shared by the file forms of the DynamoDB store's and the Kinesis consumer's configurations.
#[cfg(feature = "serde")]
macro_rules! set_given {
    ($config:ident, $file:ident: $($field:ident),* $(,)?) => {
        $(if let Some(value) = $file.$field {
            $config.$field = value;
        })*
    };
}
#[cfg(feature = "serde")]
pub(crate) use set_given;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_lease_duration_and_are_valid() {
        let config = WorkerConfig::default();
        assert_eq!(config.lease_duration, Duration::from_secs(10));
        assert_eq!(
            config.effective_renew_interval(),
            Duration::from_millis(4500)
        );
        assert_eq!(config.validity(), Duration::from_millis(9500));
        config.validate().unwrap();
        WorkerConfig::default()
            .lease_duration(Duration::from_millis(300))
            .validate()
            .unwrap();
    }

    #[test]
    fn the_order_of_the_setters_does_not_matter() {
        let short = Duration::from_secs(2);
        let beat = Duration::from_millis(700);
        let before = WorkerConfig::default()
            .renew_interval(beat)
            .lease_duration(short);
        let after = WorkerConfig::default()
            .lease_duration(short)
            .renew_interval(beat);
        assert_eq!(before, after);
        assert_eq!(before.effective_renew_interval(), beat);
        // What was not set follows the lease duration, set first or last.
        assert_eq!(before.effective_taker_interval(), Duration::from_secs(1));
        assert_eq!(
            before.effective_drift_allowance(),
            Duration::from_millis(100)
        );
        before.validate().unwrap();
    }

    #[test]
    fn a_renew_interval_close_to_the_lease_duration_is_refused() {
        let config = WorkerConfig::default().renew_interval(Duration::from_secs(9));
        let err = config.validate().unwrap_err();
        assert_eq!(err.field(), "renew_interval", "{err}");
        assert!(err.reason().contains("half of lease_duration"), "{err}");
    }

    #[test]
    fn the_reads_between_beats_follow_the_beat_and_a_beat_or_more_turns_them_off() {
        let config = WorkerConfig::default();
        assert_eq!(
            config.effective_notice_poll_interval(),
            Some(Duration::from_millis(1500))
        );
        let slower = WorkerConfig::default().lease_duration(Duration::from_secs(20));
        assert_eq!(
            slower.effective_notice_poll_interval(),
            Some(Duration::from_secs(3))
        );
        let off = WorkerConfig::default().notice_poll_interval(Duration::from_millis(4500));
        assert_eq!(off.effective_notice_poll_interval(), None);
        let zero = WorkerConfig::default().notice_poll_interval(Duration::ZERO);
        let err = zero.validate().unwrap_err();
        assert_eq!(err.field(), "notice_poll_interval", "{err}");
    }

    #[test]
    fn zero_limits_are_refused() {
        let field = |config: WorkerConfig| config.validate().unwrap_err().field();
        let base = WorkerConfig::default;
        assert_eq!(
            field(base().max_leases_per_worker(0)),
            "max_leases_per_worker"
        );
        assert_eq!(
            field(base().max_concurrent_writes(0)),
            "max_concurrent_writes"
        );
        assert_eq!(
            field(base().taker_interval(Duration::ZERO)),
            "taker_interval"
        );
        assert_eq!(field(base().store_timeout(Duration::ZERO)), "store_timeout");
        assert_eq!(
            field(base().drift_allowance(Duration::from_secs(7))),
            "drift_allowance"
        );
        assert_eq!(
            field(base().lease_duration(Duration::from_millis(50))),
            "lease_duration"
        );
        assert_eq!(
            field(base().progress_window(Some(Duration::ZERO))),
            "progress_window"
        );
        base()
            .progress_window(Some(Duration::from_secs(60)))
            .validate()
            .unwrap();
    }
}

#[cfg(all(test, feature = "serde"))]
mod file_tests {
    use super::*;

    fn parse(json: &str) -> Result<WorkerConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(parse("{}").unwrap(), WorkerConfig::default());
    }

    #[test]
    fn the_intervals_follow_the_lease_duration_the_file_gives() {
        let config = parse(r#"{"lease_duration": "20s"}"#).unwrap();
        assert_eq!(
            config,
            WorkerConfig::default().lease_duration(Duration::from_secs(20))
        );
        assert_eq!(config.effective_renew_interval(), Duration::from_secs(9));
        let config = parse(
            r#"{"lease_duration": "20s", "renew_interval": "5s", "handoff_timeout": "1m 30s",
                "max_leases_per_worker": 12}"#,
        )
        .unwrap();
        assert_eq!(config.effective_renew_interval(), Duration::from_secs(5));
        assert_eq!(config.effective_taker_interval(), Duration::from_secs(10));
        assert_eq!(config.handoff_timeout, Duration::from_secs(90));
        assert_eq!(config.max_leases_per_worker, 12);
        assert_eq!(config.progress_window, None);
        let config = parse(r#"{"progress_window": "2m"}"#).unwrap();
        assert_eq!(config.progress_window, Some(Duration::from_secs(120)));
    }

    #[test]
    fn a_typo_a_bad_duration_and_an_invalid_value_are_refused_by_name() {
        let err = parse(r#"{"lease_durration": "20s"}"#).unwrap_err();
        assert!(err.contains("lease_durration"), "{err}");
        let err = parse(r#"{"lease_duration": "20 parsecs"}"#).unwrap_err();
        assert!(
            err.contains("parsecs") || err.contains("unknown time unit"),
            "{err}"
        );
        let err = parse(r#"{"renew_interval": "9s"}"#).unwrap_err();
        assert!(err.contains("renew_interval"), "{err}");
        let err = parse(r#"{"balance": "paxos"}"#).unwrap_err();
        assert!(err.contains("paxos"), "{err}");
        // The lease protocol is gone: a file that still names it is refused by name.
        let err = parse(r#"{"protocol": "leases"}"#).unwrap_err();
        assert!(err.contains("protocol"), "{err}");
        let err = parse(r#"{"progress_window": "0s"}"#).unwrap_err();
        assert!(err.contains("progress_window"), "{err}");
    }

    /// The environment form (`examples/config_file.rs --env`): one variable per field, every
    /// value text, a misspelt variable refused by its name. It needs the flat struct
    /// (`docs/decisions/0019-the-worker-config-stays-flat.md`).
    #[test]
    fn the_environment_names_every_field_flat_and_a_typo_is_refused_by_name() {
        let read = |vars: &[(&str, &str)]| {
            let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            envy::prefixed("SHARDLEASE_WORKER_")
                .from_iter::<_, WorkerConfig>(vars)
                .map_err(|e| e.to_string())
        };
        let config = read(&[
            ("SHARDLEASE_WORKER_LEASE_DURATION", "20s"),
            ("SHARDLEASE_WORKER_HANDOFF_TIMEOUT", "1m"),
            ("SHARDLEASE_WORKER_MAX_LEASES_PER_WORKER", "64"),
            ("SHARDLEASE_WORKER_MAX_CONCURRENT_WRITES", "8"),
            ("SHARDLEASE_WORKER_WEIGHT", "2.5"),
            ("SHARDLEASE_WORKER_BALANCE", "load"),
            ("SHARDLEASE_WORKER_PROGRESS_WINDOW", "5m"),
            ("OTHER_VARIABLE", "ignored"),
        ])
        .unwrap();
        assert_eq!(config.lease_duration, Duration::from_secs(20));
        assert_eq!(config.effective_renew_interval(), Duration::from_secs(9));
        assert_eq!(config.handoff_timeout, Duration::from_secs(60));
        assert_eq!(config.max_leases_per_worker, 64);
        assert_eq!(config.max_concurrent_writes, 8);
        assert_eq!(config.weight, 2.5);
        assert_eq!(config.balance, Balance::Load);
        assert_eq!(config.progress_window, Some(Duration::from_secs(300)));
        let err = read(&[("SHARDLEASE_WORKER_HANDOF_TIMEOUT", "1m")]).unwrap_err();
        assert!(err.contains("handof_timeout"), "{err}");
        let err = read(&[("SHARDLEASE_WORKER_MAX_LEASES_PER_WORKER", "many")]).unwrap_err();
        assert!(err.contains("many"), "{err}");
    }
}
