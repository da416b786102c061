//! The load figures a worker publishes: per lease a short and a long moving average of what
//! the application reports ([`LeaseGrant::report_load`](super::LeaseGrant::report_load)),
//! and the worker's weight and utilisation.
//!
//! A lease's published figure is its long average, or its short one when that is higher by more
//! than twice [`CHANGE`]: a lease turning hot shows at the pace of the short one, a lease
//! cooling down at the pace of the long one, so a dip never moves leases about, and the short
//! average's noise (with ±20 % noise on each report, a few percent) never goes out: a worker
//! whose load is mostly one lease would otherwise leave its band on a noisy figure. The report
//! rides on the membership write the worker makes anyway (the session's beat): it is sent when
//! a figure moved by more than [`CHANGE`] since it was last published, or the set of leases changed, and not more
//! often than [`WorkerConfig::load_publish_interval`](crate::WorkerConfig::load_publish_interval),
//! except that a figure that doubled or halved ([`JUMP`]) goes out with the next write, and a
//! lease's first figure goes out with the next write once it has been measured for a publish
//! interval. Until then the fleet plans with its previous holder's figure and does not move it
//! again: the cool-down of a lease that just moved. A lease nobody published a figure for (a
//! fleet just started) is awaited meanwhile, and moves nothing: a first figure is the mean of
//! an interval's reports, not one report with all its noise, which would move leases that the
//! next figures moved back.
//! A lease the worker let go stays in its report for [`LINGER`] beats' worth of time, so that
//! its next holder is planned with its figure until it publishes its own.
//!
//! An unchanged report is sent again every [`REFRESH`] publish intervals. A beat whose answer
//! was lost may land later than the beats after it (see the fault model in
//! `docs/ARCHITECTURE.md`) and put an older report back in the record, one that may name none
//! of the leases held now; the worker believes its newer report is there and, its figures
//! unchanged, would never send it again, so the fleet would see its leases as unmeasured and
//! never move them. The refresh bounds how long such a report stays.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::WorkerConfig;
use crate::lease::{LeaseKey, LoadReport};

/// A figure that moved by more than this fraction of its published value is published early.
pub const CHANGE: f64 = 0.10;

/// A figure that grew or shrank by this factor since it was published goes out with the next
/// write, within the publish interval.
pub const JUMP: f64 = 2.0;

/// How many publish intervals a lease let go stays in the report.
pub const LINGER: u32 = 3;

/// After how many publish intervals an unchanged report is sent again (see the module
/// documentation).
pub const REFRESH: u32 = 3;

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
    /// Figures recorded so far: until a window has as many, its average is their plain mean
    /// (see [`Loads::record`]).
    samples: u32,
    /// From when it may be published: a publish interval after its first figure.
    publish_from: Instant,
}

impl Average {
    /// The long average, or the short one when it is above by more than twice [`CHANGE`]: a
    /// lease turning hot shows at the short one's pace, one cooling down at the long one's,
    /// and the short one's noise (a tenth of the samples) never goes out.
    fn figure(&self) -> f64 {
        if self.short > self.long * (1.0 + 2.0 * CHANGE) {
            self.short
        } else {
            self.long
        }
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
    /// Whether the fleet balances by load: the weight is published even before any figure.
    eager: bool,
    weight: f64,
    short: Duration,
    long: Duration,
    interval: Duration,
    state: Mutex<State>,
}

impl Loads {
    pub fn new(config: &WorkerConfig) -> Self {
        Self {
            eager: config.balance == crate::config::Balance::Load,
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
                        samples: 1,
                        publish_from: now + self.interval,
                    },
                );
            }
            Some(average) => {
                let elapsed = now.saturating_duration_since(average.at).as_secs_f64();
                // An exponential average started at the first figure would weigh that one
                // figure as much as a whole window of later ones, and a lease's first noisy
                // figure would linger in its long average for minutes: while the samples are
                // fewer than a window's worth, each counts as much as every earlier one.
                average.samples = average.samples.saturating_add(1);
                let warm_up = 1.0 / f64::from(average.samples);
                let weight =
                    |window: Duration| (1.0 - (-elapsed / window.as_secs_f64()).exp()).max(warm_up);
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

    /// The report to send with the next membership write, if one is due (`halted`: the leases
    /// held here whose application halted them, published at once): `held` lists the
    /// leases this worker holds now (asked for only when a report may be due, with this lock
    /// held: it must not call back into `Loads`). Mark it published with
    /// [`published`](Self::published) once the write landed.
    ///
    /// Nothing is due while there is nothing to publish, ever so far: a worker of count
    /// balance whose application reported no figure (its beats then carry no report at all).
    pub fn due(
        &self,
        held: impl FnOnce() -> Vec<LeaseKey>,
        halted: BTreeSet<LeaseKey>,
        now: Instant,
    ) -> Option<LoadReport> {
        let mut state = self.lock();
        let state = &mut *state;
        let quiet = !self.eager
            && state.published.is_none()
            && state.leases.is_empty()
            && state.let_go.is_empty()
            && state.utilisation.is_none()
            && halted.is_empty();
        if quiet {
            return None;
        }
        let held = held();
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
        // A lease measured for less than a publish interval is left out: the fleet plans with its
        // previous holder's figure meanwhile, and does not move it.
        let mut leases: BTreeMap<LeaseKey, f64> = state
            .leases
            .iter()
            .filter(|(_, a)| now >= a.publish_from)
            .map(|(k, a)| (k.clone(), a.figure()))
            .collect();
        for (key, (figure, _)) in &state.let_go {
            leases.entry(key.clone()).or_insert(*figure);
        }
        let report = LoadReport {
            weight: self.weight,
            utilisation: state.utilisation,
            leases,
            halted,
        };
        match &state.published {
            None => Some(report),
            Some((last, at)) => self.again(last, &report, *at, now).then_some(report),
        }
    }

    /// Whether `report` goes out now, `last` having been published at `at`.
    fn again(&self, last: &LoadReport, report: &LoadReport, at: Instant, now: Instant) -> bool {
        // A lease's first figure goes out with the next write: until then the fleet counts it
        // as a guess, and does not move it.
        let first = report.leases.keys().any(|k| !last.leases.contains_key(k));
        // A lease halted (or going again) goes out with the next write: until then the fleet
        // may move it.
        let halted = report.halted != last.halted;
        let moved = |a: f64, b: f64| (a - b).abs() > CHANGE * b.abs().max(f64::EPSILON);
        // In one pass over what was published: a figure that moved, or a lease gone (the set
        // changed); a lease whose figure doubled (or halved) goes out with the next write too:
        // a shard turning hot must not wait out the interval at each step of its rise.
        let (mut changed, mut jumped) = (last.leases.len() != report.leases.len(), false);
        for (key, was) in &last.leases {
            match report.leases.get(key) {
                None => changed = true,
                Some(figure) => {
                    changed |= moved(*figure, *was);
                    jumped |= *figure > JUMP * *was || *figure * JUMP < *was;
                }
            }
        }
        changed |= match (last.utilisation, report.utilisation) {
            (Some(a), Some(b)) => moved(b, a),
            (a, b) => a.is_some() != b.is_some(),
        };
        let since = now.saturating_duration_since(at);
        let waited = since >= self.interval;
        let refresh = since >= self.interval * REFRESH;
        first || halted || jumped || (changed && waited) || refresh
    }

    /// `report` was written at `now`. Whether it may change the fleet's assignment: under
    /// balance by load, when it differs from the report published before (a refresh sends the
    /// same one again, and tells the fleet nothing new); under balance by count, only when its
    /// halted leases differ, since figures place nothing there. The beat rescans the table on
    /// news, so a figure that keeps moving (a shard gone idle, whose long average decays by
    /// more than a tenth every three beats) must not bring a scan to a fleet that balances by
    /// count: it did, every 13.5 s per worker at the default lease
    /// (`new_figures_are_no_news_to_a_fleet_that_balances_by_count` below).
    pub fn published(&self, report: LoadReport, now: Instant) -> bool {
        let mut state = self.lock();
        let last = state.published.as_ref().map(|(last, _)| last);
        let news = if self.eager {
            last != Some(&report)
        } else {
            last.map_or(!report.halted.is_empty(), |last| {
                last.halted != report.halted
            })
        };
        state.published = Some((report, now));
        news
    }

    /// The record was written afresh (a session opened, which writes no load report): nothing
    /// published before is in it, so the next write publishes the whole report. Without this,
    /// a worker whose report did not change (one holding nothing, say) never published it
    /// again, and a fleet balancing by load, which moves nothing to a worker without a report,
    /// left it empty for good.
    pub fn unpublished(&self) {
        self.lock().published = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> LeaseKey {
        LeaseKey::new(k).unwrap()
    }

    fn due(loads: &Loads, held: &[LeaseKey], now: Instant) -> Option<LoadReport> {
        loads.due(|| held.to_vec(), BTreeSet::new(), now)
    }

    fn config() -> WorkerConfig {
        WorkerConfig::default()
            .load_short_window(Duration::from_secs(10))
            .load_long_window(Duration::from_secs(100))
            .load_publish_interval(Duration::from_secs(5))
    }

    /// The loads of a worker of a fleet that balances by load.
    fn loads() -> Loads {
        Loads::new(&config().balance(crate::config::Balance::Load))
    }

    #[tokio::test(start_paused = true)]
    async fn new_figures_are_no_news_to_a_fleet_that_balances_by_count() {
        let (loads, start) = (Loads::new(&config()), Instant::now());
        let a = key("a");
        let held = [a.clone()];
        loads.record(&a, 1000.0, start);
        let t = start + Duration::from_secs(5);
        let first = due(&loads, &held, t).expect("a figure to publish");
        assert!(!loads.published(first, t), "figures place nothing here");
        // The shard went idle: its long average decays by more than a tenth each interval, and
        // each report goes out, but none of them is news.
        let mut t = t;
        for _ in 0..5 {
            t += Duration::from_secs(12);
            loads.record(&a, 0.0, t);
            let report = due(&loads, &held, t).expect("the figure moved by more than a tenth");
            assert!(!loads.published(report, t), "figures place nothing here");
        }
        // A lease halted is news under every policy: the balance leaves it out.
        t += Duration::from_secs(1);
        let halted: BTreeSet<LeaseKey> = held.iter().cloned().collect();
        let report = loads
            .due(|| held.to_vec(), halted, t)
            .expect("a halt goes out at once");
        assert!(loads.published(report, t), "a halt is news");
        t += Duration::from_secs(1);
        let report = loads
            .due(|| held.to_vec(), BTreeSet::new(), t)
            .expect("going again goes out at once");
        assert!(loads.published(report, t), "going again is news");
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
    async fn the_short_averages_noise_does_not_go_out() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        // 100 s at 10, then 5 s at 12: the short average is 5-20 % above the long one.
        for s in 0..100 {
            loads.record(&a, 10.0, start + Duration::from_secs(s));
        }
        for s in 100..105 {
            loads.record(&a, 12.0, start + Duration::from_secs(s));
        }
        let state = loads.lock();
        let average = &state.leases[&a];
        assert!(average.short > average.long * 1.05, "{}", average.short);
        assert_eq!(average.figure(), average.long);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leases_first_figure_weighs_no_more_than_the_next_ones() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        // A first figure 20 % high, then a second each at the true load of 10 for 30 s.
        loads.record(&a, 12.0, start);
        for s in 1..=30 {
            loads.record(&a, 10.0, start + Duration::from_secs(s));
        }
        // The long average (100 s window) holds the first figure at a 31st, not at
        // exp(-30/100) = 74 % as an exponential average started at it would (11.5).
        let figure = loads.figure(&a).unwrap();
        assert!((figure - (10.0 + 2.0 / 31.0)).abs() < 1e-9, "{figure}");
    }

    /// Loads of one lease `a` measured from `start`, and its first report, published 5 s in.
    fn published_once() -> (Loads, [LeaseKey; 1], LoadReport, Instant) {
        let (loads, start) = (loads(), Instant::now());
        let held = [key("a")];
        loads.record(&held[0], 1.0, start);
        let t = start + Duration::from_secs(5);
        let first = due(&loads, &held, t).expect("nothing published yet");
        assert!(
            loads.published(first.clone(), t),
            "the first report is news"
        );
        (loads, held, first, t)
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_written_afresh_gets_the_whole_report_at_the_next_write() {
        let (loads, held, first, t) = published_once();
        let t = t + Duration::from_secs(10);
        assert_eq!(due(&loads, &held, t), None, "nothing changed");
        // A session opened again: its record holds no report.
        loads.unpublished();
        assert_eq!(due(&loads, &held, t), Some(first));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unchanged_report_is_sent_again_after_the_refresh() {
        let (loads, held, first, t) = published_once();
        let a = &held[0];
        // The same figures: nothing due until the refresh (3 intervals of 5 s), then the same
        // report again, which tells the fleet nothing new. A late beat may have put an older
        // report in the record meanwhile; the refresh replaces it.
        loads.record(a, 1.0, t + Duration::from_secs(14));
        assert_eq!(due(&loads, &held, t + Duration::from_secs(14)), None);
        let again = due(&loads, &held, t + Duration::from_secs(15)).expect("a refresh");
        assert_eq!(again, first);
        assert!(!loads.published(again, t + Duration::from_secs(15)));
        assert_eq!(due(&loads, &held, t + Duration::from_secs(16)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_is_due_when_a_figure_moves_by_more_than_a_tenth_and_not_too_often() {
        let (loads, start) = (loads(), Instant::now());
        let (a, b) = (key("a"), key("b"));
        let held = [a.clone(), b.clone()];
        loads.record(&a, 1.0, start);
        loads.record(&b, 2.0, start);
        let t = start + Duration::from_secs(5);
        let first = due(&loads, &held, t).expect("nothing published yet");
        assert_eq!((first.weight, first.leases[&b]), (1.0, 2.0));
        loads.published(first, t);
        // b at 2.1 after 6 s: both averages moved by less than 10 %: nothing due.
        let t = t + Duration::from_secs(6);
        loads.record(&b, 2.1, t);
        assert_eq!(due(&loads, &held, t), None);
        // b at 4 after 3 more seconds: its short average moved by more than 10 %.
        let t = t + Duration::from_secs(3);
        loads.record(&b, 4.0, t);
        let second = due(&loads, &held, t).expect("b moved");
        assert!(second.leases[&b] > 2.2, "{second:?}");
        loads.published(second, t);
        // b at 8 a second later: moved again (by less than twice), but within the publish
        // interval.
        let t = t + Duration::from_secs(1);
        loads.record(&b, 8.0, t);
        assert_eq!(due(&loads, &held, t), None, "within the interval");
        assert!(due(&loads, &held, t + Duration::from_secs(4)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_figure_that_doubles_goes_out_within_the_interval() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        loads.record(&a, 1.0, start);
        let t = start + Duration::from_secs(5);
        loads.record(&a, 1.0, t);
        loads.published(due(&loads, std::slice::from_ref(&a), t).unwrap(), t);
        // 20 times hotter one second later: the short average more than doubles at once.
        let t = t + Duration::from_secs(1);
        loads.record(&a, 20.0, t);
        let report =
            due(&loads, std::slice::from_ref(&a), t).expect("a jump goes out within the interval");
        loads.published(report, t);
        // A rise of less than twice, a second later, waits for the interval.
        let t = t + Duration::from_secs(1);
        loads.record(&a, 20.0, t);
        assert_eq!(due(&loads, std::slice::from_ref(&a), t), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_published_once_measured_for_an_interval() {
        let (loads, start) = (loads(), Instant::now());
        let (a, b) = (key("a"), key("b"));
        // a, measured from the start: left out for an interval (5 s), then out.
        loads.record(&a, 1.0, start);
        let report = due(&loads, std::slice::from_ref(&a), start).expect("the weight");
        assert!(report.leases.is_empty(), "{report:?}");
        loads.published(report, start);
        let t = start + Duration::from_secs(5);
        loads.record(&a, 1.0, t);
        let report = due(&loads, std::slice::from_ref(&a), t).expect("a measured");
        assert_eq!(report.leases[&a], 1.0);
        loads.published(report, t);
        // b, taken later: left out for an interval, then out with the next write, although a
        // report went out less than an interval before.
        let taken = t + Duration::from_secs(1);
        loads.record(&b, 5.0, taken);
        let both = [a.clone(), b.clone()];
        assert_eq!(due(&loads, &both, taken), None, "b cools down");
        let t = t + Duration::from_secs(5);
        loads.record(&a, 2.0, t);
        let report = due(&loads, &both, t).expect("a moved");
        assert!(!report.leases.contains_key(&b), "{report:?}");
        loads.published(report, t);
        let t = taken + Duration::from_secs(5);
        loads.record(&b, 5.0, t);
        let report = due(&loads, &both, t).expect("b measured");
        assert_eq!(report.leases[&b], 5.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_let_go_stays_in_the_report_for_a_while() {
        let (loads, start) = (loads(), Instant::now());
        let a = key("a");
        loads.record(&a, 3.0, start);
        let t = start + Duration::from_secs(5);
        loads.published(due(&loads, std::slice::from_ref(&a), t).unwrap(), t);
        // Let go: the report keeps it (same set, same figure: nothing due).
        let t = t + Duration::from_secs(5);
        assert_eq!(due(&loads, &[], t), None);
        // After LINGER intervals it leaves the report.
        let t = t + Duration::from_secs(5) * LINGER + Duration::from_secs(1);
        let report = due(&loads, &[], t).expect("the set changed");
        assert!(report.leases.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_worker_publishes_nothing_until_its_application_reports() {
        let now = Instant::now();
        let a = key("a");
        let count = Loads::new(&WorkerConfig::default());
        assert_eq!(due(&count, std::slice::from_ref(&a), now), None);
        count.record(&a, 2.0, now);
        let measured = now + Duration::from_secs(10);
        let report = due(&count, std::slice::from_ref(&a), measured).expect("a figure");
        assert_eq!(report.leases[&a], 2.0);
        // Balancing by load, the weight goes out at once, figures or not.
        let load = Loads::new(&WorkerConfig::default().balance(crate::config::Balance::Load));
        let report = due(&load, std::slice::from_ref(&a), now).expect("the weight");
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
