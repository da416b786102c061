//! How the simulated network draws the latency of a request: today's log-normal model, or a
//! heavy-tailed one with stalls (`--latency-model heavy-tail`).
//!
//! The heavy tail keeps the log-normal body of `--latency` (median 5 ms, p99 25 ms by
//! default) for 99 % of requests and replaces its top 1 % with a Pareto tail through the
//! body's p99 and [`HeavyTail::p999`] (1 s at the 99.9th percentile), whose top 0.1 % lies
//! between 1 s and [`HeavyTail::max`] (2 s, log-uniform). On top of that each worker has one
//! [`HeavyTail::stall`] (3 s) in every [`HeavyTail::stall_every`] (an hour) of simulated time,
//! starting at an instant drawn uniformly within that hour: every request the worker starts
//! during a stall waits until the stall ends before it is sent (requests already on their way
//! are not held), then takes its drawn latency.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::net::Latency;

/// The standard normal's 99th percentile.
const Z99: f64 = 2.326;

/// Which latency model the network runs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LatencyModel {
    /// Log-normal, by its median and 99th percentile (`--latency`): today's model.
    #[default]
    LogNormal,
    /// The log-normal body with a heavy tail and per-worker stalls.
    HeavyTail(HeavyTail),
}

impl LatencyModel {
    /// The name `--latency-model` takes.
    pub fn name(&self) -> &'static str {
        match self {
            LatencyModel::LogNormal => "lognormal",
            LatencyModel::HeavyTail(_) => "heavy-tail",
        }
    }

    /// The model named `name` (`lognormal`, `heavy-tail` with [`HeavyTail::default`]).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "lognormal" => Ok(LatencyModel::LogNormal),
            "heavy-tail" => Ok(LatencyModel::HeavyTail(HeavyTail::default())),
            other => Err(format!("lognormal or heavy-tail expected, not {other:?}")),
        }
    }

    /// A latency drawn for one request whose body is `latency`.
    pub fn sample(&self, latency: &Latency, rng: &mut StdRng) -> Duration {
        match self {
            LatencyModel::LogNormal => latency.sample(rng),
            LatencyModel::HeavyTail(tail) => tail.sample(latency, rng),
        }
    }
}

/// The heavy tail's parameters (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeavyTail {
    /// The 99.9th percentile of a request's latency. Default: 1 s.
    pub p999: Duration,
    /// The longest latency drawn (a stall aside). Default: 2 s.
    pub max: Duration,
    /// How long a stall lasts. Default: 3 s.
    pub stall: Duration,
    /// One stall per worker in each span this long. Default: an hour.
    pub stall_every: Duration,
}

impl Default for HeavyTail {
    fn default() -> Self {
        Self {
            p999: Duration::from_secs(1),
            max: Duration::from_secs(2),
            stall: Duration::from_secs(3),
            stall_every: Duration::from_secs(3600),
        }
    }
}

impl HeavyTail {
    /// One request's latency: the log-normal body of `body` below its 99th percentile (99 %
    /// of draws), else the tail: Pareto from the body's p99 up to [`p999`](Self::p999) (the
    /// next 0.9 %), then log-uniform up to [`max`](Self::max) (the last 0.1 %).
    pub fn sample(&self, body: &Latency, rng: &mut StdRng) -> Duration {
        if body.median.is_zero() {
            return Duration::ZERO;
        }
        let (median, p99) = (body.median.as_secs_f64(), body.p99.as_secs_f64());
        let z = standard_normal(rng);
        if z <= Z99 {
            let sigma = (p99 / median).ln().max(0.0) / Z99;
            return Duration::from_secs_f64(median * (sigma * z).exp());
        }
        let p999 = self.p999.as_secs_f64().max(p99);
        let max = self.max.as_secs_f64().max(p999);
        // Within the tail: P(X > x | tail) = (x / p99)^-alpha down to 0.1 at p999.
        let v: f64 = rng.gen();
        let seconds = if v < 0.9 {
            if p999 > p99 {
                let alpha = 10f64.ln() / (p999 / p99).ln();
                p99 * (1.0 - v).powf(-1.0 / alpha)
            } else {
                p99
            }
        } else {
            p999 * (max / p999).powf((v - 0.9) / 0.1)
        };
        Duration::from_secs_f64(seconds.min(max))
    }
}

/// A standard normal draw (Box-Muller), as the log-normal model draws it.
pub(super) fn standard_normal(rng: &mut StdRng) -> f64 {
    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One worker's stalls: one in each [`HeavyTail::stall_every`] from `epoch`, at an offset
/// drawn from the worker's own stream (so that they draw nothing from its latency draws).
#[derive(Debug)]
pub struct Stalls {
    tail: HeavyTail,
    epoch: Instant,
    seed: u64,
    /// The last span looked at and its stall's start.
    cached: Mutex<Option<(u64, Instant)>>,
}

impl Stalls {
    /// The stalls of the worker whose stream is `seed`, counted from `epoch`.
    pub fn new(tail: HeavyTail, epoch: Instant, seed: u64) -> Self {
        Self {
            tail,
            epoch,
            seed,
            cached: Mutex::new(None),
        }
    }

    /// When the stall in progress at `at` ends; `None` outside a stall.
    pub fn until(&self, at: Instant) -> Option<Instant> {
        let every = self.tail.stall_every;
        if at < self.epoch || every.is_zero() {
            return None;
        }
        let span = ((at - self.epoch).as_nanos() / every.as_nanos()) as u64;
        let start = {
            let mut cached = self.cached.lock().unwrap();
            match *cached {
                Some((s, start)) if s == span => start,
                _ => {
                    let start = self.start_of(span);
                    *cached = Some((span, start));
                    start
                }
            }
        };
        let end = start + self.tail.stall;
        (start <= at && at < end).then_some(end)
    }

    /// The start of the stall in span `span`: uniform in the span, the stall inside it.
    fn start_of(&self, span: u64) -> Instant {
        let every = self.tail.stall_every;
        let mixed = self.seed ^ span.wrapping_add(1).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let offset: f64 = StdRng::seed_from_u64(mixed).gen();
        let room = every.saturating_sub(self.tail.stall);
        self.epoch + every * span as u32 + room.mul_f64(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantile(sorted: &[Duration], q: f64) -> f64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1].as_secs_f64()
    }

    #[test]
    fn the_heavy_tail_has_its_quantiles_on_a_seeded_sample() {
        let body = Latency {
            median: Duration::from_millis(5),
            p99: Duration::from_millis(25),
        };
        let tail = HeavyTail::default();
        let mut rng = StdRng::seed_from_u64(11);
        let mut draws: Vec<Duration> = (0..1_000_000)
            .map(|_| tail.sample(&body, &mut rng))
            .collect();
        draws.sort();
        let near = |got: f64, want: f64, within: f64| {
            assert!(
                (got / want - 1.0).abs() <= within,
                "{got} s where {want} s was expected (within {within})"
            );
        };
        near(quantile(&draws, 0.5), 0.005, 0.02);
        near(quantile(&draws, 0.99), 0.025, 0.05);
        near(quantile(&draws, 0.999), 1.0, 0.10);
        assert!(quantile(&draws, 1.0) <= 2.0);
        assert!(
            quantile(&draws, 0.9999) > 1.5,
            "the last 0.1 % reaches towards 2 s"
        );
    }

    #[test]
    fn the_lognormal_model_draws_what_it_drew_before() {
        let body = Latency {
            median: Duration::from_millis(5),
            p99: Duration::from_millis(25),
        };
        let (mut a, mut b) = (StdRng::seed_from_u64(3), StdRng::seed_from_u64(3));
        for _ in 0..1000 {
            assert_eq!(
                LatencyModel::LogNormal.sample(&body, &mut a),
                body.sample(&mut b)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_stalls_once_an_hour_for_three_seconds() {
        let epoch = Instant::now();
        let stalls = Stalls::new(HeavyTail::default(), epoch, 5);
        let step = Duration::from_millis(100);
        for hour in 0..3u32 {
            let begin = epoch + Duration::from_secs(3600) * hour;
            let (mut stalled, mut first) = (0u32, None);
            let mut at = begin;
            while at < begin + Duration::from_secs(3600) {
                if let Some(end) = stalls.until(at) {
                    stalled += 1;
                    let first = *first.get_or_insert(end);
                    assert_eq!(end, first, "one stall in hour {hour}");
                }
                at += step;
            }
            assert!(
                (29..=30).contains(&stalled),
                "{stalled} samples stalled in hour {hour}"
            );
        }
        // Another worker's stalls come at other instants.
        let other = Stalls::new(HeavyTail::default(), epoch, 6);
        assert_ne!(stalls.start_of(0), other.start_of(0));
    }
}
