//! The load figures a worker publishes: per lease a short and a long moving average of what
//! the application reports ([`LeaseGrant::report_load`](super::LeaseGrant::report_load)),
//! and the worker's weight and utilisation.
//!
//! A lease's published figure is the larger of its two averages: a lease turning hot shows at
//! the pace of the short one, a lease cooling down at the pace of the long one, so a dip never
//! moves leases about. The report rides on the membership write the worker makes anyway (the
//! session's beat, or the lease protocol's heartbeat): it is sent when a figure moved by more
//! than [`CHANGE`] since it was last published, or the set of leases changed, and not more
//! often than [`WorkerConfig::load_publish_interval`](crate::WorkerConfig::load_publish_interval),
//! except that a lease's first figure goes out with the next write.
//! A lease the worker let go stays in its report for [`LINGER`] beats' worth of time, so that
//! its next holder is planned with its figure until it publishes its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::WorkerConfig;
use crate::lease::{LeaseKey, LoadReport};

/// A figure that moved by more than this fraction of its published value is published early.
pub const CHANGE: f64 = 0.10;

/// How many publish intervals a lease let go stays in the report.
pub const LINGER: u32 = 3;

/// Why a load figure was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidLoad {
    /// Not a finite number, or below zero.
    #[error("load figure {value} is not a finite number at least 0")]
    NotFinite {
        /// The refused figure.
        value: f64,
    },
}

pub(crate) fn check(value: f64) -> Result<f64, InvalidLoad> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(InvalidLoad::NotFinite { value })
    }
}

/// The moving averages of one lease.
#[derive(Debug, Clone, Copy)]
struct Average {
    short: f64,
    long: f64,
    at: Instant,
}

impl Average {
    fn figure(&self) -> f64 {
        self.short.max(self.long)
    }
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<LeaseKey, Average>,
    /// Leases let go, with their last figure, until when they stay in the report.
    let_go: HashMap<LeaseKey, (f64, Instant)>,
    utilisation: Option<f64>,
    published: Option<(LoadReport, Instant)>,
}

/// A worker's load figures; see the module documentation.
#[derive(Debug)]
pub(crate) struct Loads {
    weight: f64,
    short: Duration,
    long: Duration,
    interval: Duration,
    state: Mutex<State>,
}

impl Loads {
    pub fn new(config: &WorkerConfig) -> Self {
        Self {
            weight: config.weight,
            short: config.load_short_window,
            long: config.load_long_window,
            interval: config.load_publish_interval,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a figure of `key` at `now`.
    pub fn record(&self, key: &LeaseKey, value: f64, now: Instant) {
        let mut state = self.lock();
        state.let_go.remove(key);
        match state.leases.get_mut(key) {
            None => {
                state.leases.insert(
                    key.clone(),
                    Average {
                        short: value,
                        long: value,
                        at: now,
                    },
                );
            }
            Some(average) => {
                let elapsed = now.saturating_duration_since(average.at).as_secs_f64();
                let weight = |window: Duration| 1.0 - (-elapsed / window.as_secs_f64()).exp();
                average.short += weight(self.short) * (value - average.short);
                average.long += weight(self.long) * (value - average.long);
                average.at = now;
            }
        }
    }

    /// Sets the worker's utilisation figure (`None`: none).
    pub fn set_utilisation(&self, value: Option<f64>) {
        self.lock().utilisation = value;
    }

    /// The figure of `key`, if any was recorded.
    #[cfg(test)]
    pub fn figure(&self, key: &LeaseKey) -> Option<f64> {
        self.lock().leases.get(key).map(Average::figure)
    }

    /// The report to send with the next membership write, if one is due: `held` are the
    /// leases this worker holds now. Mark it published with [`published`](Self::published)
    /// once the write landed.
    pub fn due(&self, held: &[LeaseKey], now: Instant) -> Option<LoadReport> {
        let mut state = self.lock();
        let state = &mut *state;
        let held_set: std::collections::HashSet<&LeaseKey> = held.iter().collect();
        let linger = self.interval * LINGER;
        let gone: Vec<LeaseKey> = state
            .leases
            .keys()
            .filter(|k| !held_set.contains(k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(average) = state.leases.remove(&key) {
                state.let_go.insert(key, (average.figure(), now + linger));
            }
        }
        state.let_go.retain(|_, (_, until)| *until > now);
        let mut leases: BTreeMap<LeaseKey, f64> = state
            .leases
            .iter()
            .map(|(k, a)| (k.clone(), a.figure()))
            .collect();
        for (key, (figure, _)) in &state.let_go {
            leases.entry(key.clone()).or_insert(*figure);
        }
        let report = LoadReport {
            weight: self.weight,
            utilisation: state.utilisation,
            leases,
        };
        match &state.published {
            None => Some(report),
            Some((last, at)) => {
                // A lease's first figure goes out with the next write: until then the fleet
                // counts it as a guess, and does not move it.
                let first = report.leases.keys().any(|k| !last.leases.contains_key(k));
                let moved = |a: f64, b: f64| (a - b).abs() > CHANGE * b.abs().max(f64::EPSILON);
                let changed = last.leases.len() != report.leases.len()
                    || last
                        .leases
                        .iter()
                        .zip(&report.leases)
                        .any(|((ka, a), (kb, b))| ka != kb || moved(*b, *a))
                    || match (last.utilisation, report.utilisation) {
                        (Some(a), Some(b)) => moved(b, a),
                        (a, b) => a.is_some() != b.is_some(),
                    };
                let waited = now.saturating_duration_since(*at) >= self.interval;
                (first || (changed && waited)).then_some(report)
            }
        }
    }

    /// `report` was written at `now`.
    pub fn published(&self, report: LoadReport, now: Instant) {
        self.lock().published = Some((report, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> LeaseKey {
        LeaseKey::new(k).unwrap()
    }

    fn loads() -> Loads {
        Loads::new(
            &WorkerConfig::default()
                .load_short_window(Duration::from_secs(10))
                .load_long_window(Duration::from_secs(100))
                .load_publish_interval(Duration::from_secs(5)),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_lease_shows_at_the_short_pace_and_cools_at_the_long_one() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        loads.record(&a, 1.0, start);
        // Ten times hotter for 10 s: the short average is most of the way there.
        loads.record(&a, 10.0, start + Duration::from_secs(10));
        let hot = loads.figure(&a).unwrap();
        assert!(
            (hot - (1.0 + 9.0 * (1.0 - (-1.0f64).exp()))).abs() < 1e-9,
            "{hot}"
        );
        // Back to 1 for 10 s: the long average still remembers.
        loads.record(&a, 1.0, start + Duration::from_secs(20));
        let cooling = loads.figure(&a).unwrap();
        assert!(cooling > 1.5, "{cooling}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_is_due_when_a_figure_moves_by_more_than_a_tenth_and_not_too_often() {
        let (loads, start) = (loads(), Instant::now());
        let (a, b) = (key("a"), key("b"));
        let held = [a.clone(), b.clone()];
        loads.record(&a, 1.0, start);
        loads.record(&b, 2.0, start);
        let first = loads.due(&held, start).expect("nothing published yet");
        assert_eq!((first.weight, first.leases[&b]), (1.0, 2.0));
        loads.published(first, start);
        // b at 2.1 after 6 s: both averages moved by less than 10 %: nothing due.
        let t = start + Duration::from_secs(6);
        loads.record(&b, 2.1, t);
        assert_eq!(loads.due(&held, t), None);
        // b at 4 after 3 more seconds: its short average moved by more than 10 %.
        let t = t + Duration::from_secs(3);
        loads.record(&b, 4.0, t);
        let second = loads.due(&held, t).expect("b moved");
        assert!(second.leases[&b] > 2.2, "{second:?}");
        loads.published(second, t);
        // b at 8 a second later: moved again, but within the publish interval.
        let t = t + Duration::from_secs(1);
        loads.record(&b, 8.0, t);
        assert_eq!(loads.due(&held, t), None, "within the interval");
        assert!(loads.due(&held, t + Duration::from_secs(4)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leases_first_figure_goes_out_with_the_next_write() {
        let (loads, start) = (loads(), Instant::now());
        let (a, b) = (key("a"), key("b"));
        loads.record(&a, 1.0, start);
        loads.published(loads.due(std::slice::from_ref(&a), start).unwrap(), start);
        let t = start + Duration::from_secs(1);
        loads.record(&b, 5.0, t);
        let report = loads
            .due(&[a.clone(), b.clone()], t)
            .expect("b's first figure");
        assert_eq!(report.leases[&b], 5.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_let_go_stays_in_the_report_for_a_while() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        loads.record(&a, 3.0, start);
        loads.published(loads.due(std::slice::from_ref(&a), start).unwrap(), start);
        // Let go: the report keeps it (same set, same figure: nothing due).
        let t = start + Duration::from_secs(5);
        assert_eq!(loads.due(&[], t), None);
        // After LINGER intervals it leaves the report.
        let t = start + Duration::from_secs(5) * (LINGER + 1);
        let report = loads.due(&[], t).expect("the set changed");
        assert!(report.leases.is_empty());
    }

    #[test]
    fn bad_figures_are_refused() {
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            assert!(check(bad).is_err());
        }
        assert_eq!(check(0.0), Ok(0.0));
    }
}
