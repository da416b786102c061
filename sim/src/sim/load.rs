//! What each lease weighs and what each worker can carry: the lease load models
//! (`--load`), the workers' capacities (`--capacities`), and the load imbalance the report
//! measures over them.
//!
//! Loads are normalised so that the mean lease load is 1: with uniform loads a lease weighs
//! 1, and held load equals the lease count.

use std::fmt;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// How much a hot lease weighs against the others under `hot:K`.
pub const HOT_FACTOR: f64 = 10.0;

/// How much hotter the lease `--hot-after` picks turns.
pub const TURN_HOT_FACTOR: f64 = 20.0;

/// A worker holding more than this times its fair share of the load is overloaded (above
/// 100 % of its capacity). Default of `--headroom`.
pub const DEFAULT_HEADROOM: f64 = 1.25;

/// Mixed into the run's seed for the loads' draws, so that they do not shift the draws the
/// fleet makes (which workers crash, which shards go): a run with uniform loads is the run
/// it was before load models existed.
const LOAD_STREAM: u64 = 0x6c6f_6164_7300_0001;

/// The load settings of a run: how leases weigh, what workers carry, when a lease turns hot.
#[derive(Debug, Clone, PartialEq)]
pub struct Loads {
    pub model: LoadModel,
    /// Capacity weights cycled over the workers in start order (empty: all 1).
    pub capacities: Vec<f64>,
    /// A worker above `headroom` times its fair share of the load is overloaded.
    pub headroom: f64,
    /// This long into the rest, one lease (drawn by the seed) turns 20 times as heavy.
    pub hot_after: Option<std::time::Duration>,
    /// A diurnal wave of this period: the leases fall into [`REGIONS`] regions drawn by the
    /// seed, and each lease's load is its drawn load times `1 + WAVE_AMPLITUDE x sin(2 pi (t /
    /// period + region / REGIONS))`, t counted from the first step, updated every
    /// [`WAVE_STEP`].
    pub wave: Option<std::time::Duration>,
    /// Under the load policies, each figure an application reports is the lease's load times
    /// a factor drawn uniformly from [1 - noise, 1 + noise].
    pub noise: f64,
    /// This many leases (the first in key order) have applications that never report a figure.
    pub unreported: usize,
}

impl Default for Loads {
    /// Uniform loads, every worker of capacity 1, [`DEFAULT_HEADROOM`], no lease turning hot:
    /// the simulator as it was before load models.
    fn default() -> Self {
        Self {
            model: LoadModel::Uniform,
            capacities: Vec::new(),
            headroom: DEFAULT_HEADROOM,
            hot_after: None,
            wave: None,
            noise: 0.0,
            unreported: 0,
        }
    }
}

/// How many regions (time zones) the leases of a wave fall into.
pub const REGIONS: u64 = 3;

/// How far a wave takes a lease's load above and below its drawn load (0.5: from half to one
/// and a half times).
pub const WAVE_AMPLITUDE: f64 = 0.5;

/// How often a wave's loads change.
pub const WAVE_STEP: std::time::Duration = std::time::Duration::from_secs(10);

/// The factor of a wave of `period` on lease `key` at `t` since the first step.
pub fn wave_factor(
    key: &shardlease::LeaseKey,
    seed: u64,
    period: std::time::Duration,
    t: f64,
) -> f64 {
    let region = noise_seed(key, seed as usize) % REGIONS;
    let phase = t / period.as_secs_f64() + region as f64 / REGIONS as f64;
    1.0 + WAVE_AMPLITUDE * (std::f64::consts::TAU * phase).sin()
}

/// The seed of the noise draws of lease `key` on worker `index`: its own stream, so that the
/// reports draw nothing from the fleet's generators.
pub fn noise_seed(key: &shardlease::LeaseKey, index: usize) -> u64 {
    key.as_str()
        .bytes()
        .fold(LOAD_STREAM ^ (index as u64).rotate_left(32), |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// A factor drawn uniformly from [1 - noise, 1 + noise] (1 without noise).
pub fn noisy(rng: &mut StdRng, noise: f64) -> f64 {
    use rand::Rng;
    if noise > 0.0 {
        1.0 + rng.gen_range(-noise..=noise)
    } else {
        1.0
    }
}

/// How the leases' loads are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LoadModel {
    /// Every lease weighs 1.
    #[default]
    Uniform,
    /// The lease of rank r weighs in proportion to 1 / r^S (S > 0); the ranks are shuffled
    /// over the leases by the run's seed.
    Zipf(f64),
    /// K leases, chosen by the run's seed, weigh 10 times as much as the others.
    Hot(usize),
}

impl fmt::Display for LoadModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadModel::Uniform => write!(f, "uniform"),
            LoadModel::Zipf(s) => write!(f, "zipf:{s}"),
            LoadModel::Hot(k) => write!(f, "hot:{k}"),
        }
    }
}

impl FromStr for LoadModel {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let expected = || "uniform, zipf:S (S > 0) or hot:K (K >= 1) expected".to_string();
        match value.trim().split_once(':') {
            None if value.trim() == "uniform" => Ok(LoadModel::Uniform),
            Some(("zipf", s)) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(LoadModel::Zipf)
                .ok_or_else(|| format!("zipf:S needs an exponent S > 0, not {s:?}")),
            Some(("hot", k)) => match k.trim().parse::<usize>() {
                Ok(0) | Err(_) => Err(format!("hot:K needs K >= 1 hot leases, not {k:?}")),
                Ok(k) => Ok(LoadModel::Hot(k)),
            },
            _ => Err(expected()),
        }
    }
}

impl LoadModel {
    /// The loads of `leases` leases, in lease order, with a mean of 1. `Err` when the model
    /// asks for more hot leases than there are.
    pub fn loads(self, leases: usize, seed: u64) -> Result<Vec<f64>, String> {
        let mut rng = StdRng::seed_from_u64(seed ^ LOAD_STREAM);
        let mut loads = match self {
            LoadModel::Uniform => vec![1.0; leases],
            LoadModel::Zipf(s) => (1..=leases).map(|r| (r as f64).powf(-s)).collect(),
            LoadModel::Hot(k) if k > leases => {
                return Err(format!(
                    "hot:{k} asks for more hot leases than the {leases}"
                ));
            }
            LoadModel::Hot(k) => (0..leases)
                .map(|i| if i < k { HOT_FACTOR } else { 1.0 })
                .collect(),
        };
        loads.shuffle(&mut rng);
        Ok(normalised(loads))
    }
}

/// `loads` scaled so that their mean is 1 (unchanged if empty or all zero).
fn normalised(mut loads: Vec<f64>) -> Vec<f64> {
    let total: f64 = loads.iter().sum();
    if total > 0.0 {
        let scale = loads.len() as f64 / total;
        loads.iter_mut().for_each(|l| *l *= scale);
    }
    loads
}

/// The lease `--hot-after` turns hot: one drawn by the run's seed (its own draw, after the
/// loads').
pub fn turning_hot(leases: usize, seed: u64) -> usize {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(seed ^ LOAD_STREAM ^ 1);
    rng.gen_range(0..leases.max(1))
}

/// `--capacities`: positive weights, comma-separated, cycled over the workers in start order.
pub fn parse_capacities(value: &str) -> Result<Vec<f64>, String> {
    value
        .split(',')
        .enumerate()
        .map(|(i, part)| {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("capacity #{} is empty", i + 1));
            }
            part.parse::<f64>()
                .ok()
                .filter(|c| c.is_finite() && *c > 0.0)
                .ok_or_else(|| format!("capacity #{} ({part:?}) is not a number above 0", i + 1))
        })
        .collect()
}

/// The capacity weight of the worker started `index`-th: `capacities` cycled (1 if empty).
pub fn capacity(capacities: &[f64], index: usize) -> f64 {
    if capacities.is_empty() {
        return 1.0;
    }
    capacities[index % capacities.len()]
}

/// One worker at an instant: the load it holds and its capacity weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    pub load: f64,
    pub capacity: f64,
    /// How many leases it holds.
    pub leases: usize,
}

/// The load imbalance of an assignment: the highest utilisation (held load ÷ capacity) over
/// the mean utilisation, the mean being total held load ÷ total capacity. 1 is perfect;
/// `None` when nothing is held (or there is no worker).
///
/// A worker that holds a single lease heavier than its fair share is as balanced as a lease
/// that cannot be split allows: it is left out (its load and its capacity), and so on while
/// the fair share of the workers left makes another one so. Under Zipf(1.0) over 1,000 leases
/// the heaviest lease alone weighs 2.67 times a twentieth of the total: counted in, no
/// assignment of 20 workers could get below 2.67. [`raw_imbalance`] counts every worker.
pub fn imbalance(workers: &[Held]) -> Option<f64> {
    let mut left: Vec<&Held> = workers.iter().collect();
    loop {
        let held: f64 = left.iter().map(|w| w.load).sum();
        let capacity: f64 = left.iter().map(|w| w.capacity).sum();
        if held <= 0.0 || capacity <= 0.0 {
            return None;
        }
        let share = held / capacity;
        let before = left.len();
        left.retain(|w| !(w.leases == 1 && w.load > w.capacity * share));
        if left.len() == before || left.is_empty() {
            let left = if left.is_empty() {
                workers.iter().collect()
            } else {
                left
            };
            return raw(&left);
        }
    }
}

/// As [`imbalance`], every worker counted.
pub fn raw_imbalance(workers: &[Held]) -> Option<f64> {
    raw(&workers.iter().collect::<Vec<_>>())
}

fn raw(workers: &[&Held]) -> Option<f64> {
    let held: f64 = workers.iter().map(|w| w.load).sum();
    let capacity: f64 = workers.iter().map(|w| w.capacity).sum();
    if held <= 0.0 || capacity <= 0.0 {
        return None;
    }
    let highest = workers
        .iter()
        .map(|w| w.load / w.capacity)
        .fold(0.0, f64::max);
    Some(highest / (held / capacity))
}

/// How many workers are overloaded: hold more than their capacity in load units, which is
/// `capacity × (total_load ÷ total capacity) × headroom` — their fair share of all the
/// leases' load (`total_load`, held or not) with `headroom`.
pub fn overloaded(workers: &[Held], total_load: f64, headroom: f64) -> usize {
    let capacity: f64 = workers.iter().map(|w| w.capacity).sum();
    if capacity <= 0.0 {
        return 0;
    }
    let per_weight = total_load / capacity * headroom;
    workers
        .iter()
        .filter(|w| w.load > w.capacity * per_weight)
        .count()
}

/// The load figures of a window of time, integrated over the states the fleet went through
/// (each state weighted by how long it lasted).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Meter {
    /// The integral of the imbalance over the seconds when something was held.
    imbalance_seconds: f64,
    /// Those seconds.
    seconds: f64,
    /// The highest imbalance of a state that lasted any time.
    worst: Option<f64>,
    /// The integral of the imbalance with every worker counted ([`raw_imbalance`]).
    raw_seconds: f64,
    /// The integral of the number of overloaded workers.
    pub overloaded_worker_seconds: f64,
}

impl Meter {
    /// Adds a state that lasted `seconds`.
    pub fn add(&mut self, workers: &[Held], total_load: f64, headroom: f64, seconds: f64) {
        if seconds <= 0.0 {
            return;
        }
        if let Some(now) = imbalance(workers) {
            self.imbalance_seconds += now * seconds;
            self.seconds += seconds;
            self.worst = Some(self.worst.map_or(now, |w| w.max(now)));
            self.raw_seconds += raw_imbalance(workers).unwrap_or(now) * seconds;
        }
        self.overloaded_worker_seconds +=
            overloaded(workers, total_load, headroom) as f64 * seconds;
    }

    /// The time-averaged imbalance; `None` if nothing was held at any time.
    pub fn average(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.imbalance_seconds / self.seconds)
    }

    pub fn worst(&self) -> Option<f64> {
        self.worst
    }

    /// The time-averaged imbalance with every worker counted.
    pub fn raw_average(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.raw_seconds / self.seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(loads: &[f64]) -> f64 {
        loads.iter().sum::<f64>() / loads.len() as f64
    }

    #[test]
    fn zipf_loads_average_one_and_follow_their_ranks() {
        let loads = LoadModel::Zipf(1.0).loads(1000, 3).unwrap();
        assert!((mean(&loads) - 1.0).abs() < 1e-9);
        let mut sorted = loads.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        // Rank r weighs 1/r of rank 1.
        assert!((sorted[0] / sorted[1] - 2.0).abs() < 1e-9);
        assert!((sorted[0] / sorted[999] - 1000.0).abs() < 1e-6);
        // The heaviest is not simply the first lease, and the seed decides where it is.
        let heaviest = |l: &[f64]| {
            let top = l.iter().copied().fold(0.0, f64::max);
            l.iter().position(|x| *x == top).unwrap()
        };
        let other = LoadModel::Zipf(1.0).loads(1000, 4).unwrap();
        assert_ne!(heaviest(&loads), heaviest(&other));
        assert_eq!(loads, LoadModel::Zipf(1.0).loads(1000, 3).unwrap());
    }

    #[test]
    fn hot_leases_weigh_ten_times_the_others_and_average_one() {
        let loads = LoadModel::Hot(5).loads(100, 1).unwrap();
        assert!((mean(&loads) - 1.0).abs() < 1e-9);
        let cold = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let hot: Vec<f64> = loads.iter().copied().filter(|l| *l > cold).collect();
        assert_eq!(hot.len(), 5);
        assert!(hot.iter().all(|h| (h / cold - HOT_FACTOR).abs() < 1e-9));
        assert!(LoadModel::Hot(101).loads(100, 1).is_err());
    }

    #[test]
    fn uniform_loads_are_all_one() {
        assert_eq!(LoadModel::Uniform.loads(4, 9).unwrap(), vec![1.0; 4]);
    }

    #[test]
    fn load_models_parse_and_bad_ones_say_why() {
        assert_eq!("uniform".parse(), Ok(LoadModel::Uniform));
        assert_eq!("zipf:1.2".parse(), Ok(LoadModel::Zipf(1.2)));
        assert_eq!("hot:3".parse(), Ok(LoadModel::Hot(3)));
        for bad in [
            "zipf:0", "zipf:-1", "zipf:", "zipf:x", "hot:0", "hot:-2", "hot:", "pareto",
        ] {
            let err = bad.parse::<LoadModel>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!("zipf:0".parse::<LoadModel>().unwrap_err().contains("S > 0"));
        assert!("hot:0".parse::<LoadModel>().unwrap_err().contains("K >= 1"));
    }

    #[test]
    fn capacities_parse_and_cycle_over_the_workers() {
        let caps = parse_capacities("1,2, 4").unwrap();
        assert_eq!(caps, vec![1.0, 2.0, 4.0]);
        let cycled: Vec<f64> = (0..5).map(|i| capacity(&caps, i)).collect();
        assert_eq!(cycled, vec![1.0, 2.0, 4.0, 1.0, 2.0]);
        assert_eq!(capacity(&[], 7), 1.0);
        assert!(parse_capacities("1,,2")
            .unwrap_err()
            .contains("#2 is empty"));
        assert!(parse_capacities("1,-2").unwrap_err().contains("#2"));
        assert!(parse_capacities("0").is_err());
        assert!(parse_capacities("1,x").is_err());
        assert!(parse_capacities("").is_err());
    }

    fn held(pairs: &[(f64, f64)]) -> Vec<Held> {
        pairs
            .iter()
            .map(|&(load, capacity)| Held {
                load,
                capacity,
                leases: 10,
            })
            .collect()
    }

    #[test]
    fn a_worker_holding_one_lease_heavier_than_its_share_is_left_out() {
        // A lease of 30 alone, and 10 + 10 on two others: the mean is 50 / 3 = 16.7, the
        // lone lease weighs more, so the imbalance is that of the two others (1.0).
        let mut workers = held(&[(30.0, 1.0), (10.0, 1.0), (10.0, 1.0)]);
        workers[0].leases = 1;
        assert_eq!(imbalance(&workers), Some(1.0));
        assert_eq!(raw_imbalance(&workers), Some(30.0 / (50.0 / 3.0)));
        // The same load in two leases could be split: it counts.
        workers[0].leases = 2;
        assert_eq!(imbalance(&workers), raw_imbalance(&workers));
        // A lone lease lighter than its share counts too.
        let mut light = held(&[(12.0, 1.0), (14.0, 1.0), (10.0, 1.0)]);
        light[0].leases = 1;
        assert_eq!(imbalance(&light), Some(14.0 / 12.0));
    }

    #[test]
    fn imbalance_is_the_highest_utilisation_over_held_load_per_capacity() {
        // Utilisations 10/1, 10/2, 20/4 = 10, 5, 5; mean 40 / 7.
        let workers = held(&[(10.0, 1.0), (10.0, 2.0), (20.0, 4.0)]);
        let expected = 10.0 / (40.0 / 7.0);
        assert!((imbalance(&workers).unwrap() - expected).abs() < 1e-12);
        // Load in proportion to capacity is perfect balance.
        let fair = held(&[(5.0, 1.0), (10.0, 2.0), (20.0, 4.0)]);
        assert!((imbalance(&fair).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(imbalance(&held(&[(0.0, 1.0)])), None);
        assert_eq!(imbalance(&[]), None);
    }

    #[test]
    fn a_worker_is_overloaded_above_its_share_with_headroom() {
        // 70 load units over 7 capacity: a share of 10 per unit, 12.5 with headroom.
        let workers = held(&[(13.0, 1.0), (25.0, 2.0), (32.0, 4.0)]);
        assert_eq!(overloaded(&workers, 70.0, 1.25), 1);
        // Unheld load counts in the share: with 140 in all nobody is above.
        assert_eq!(overloaded(&workers, 140.0, 1.25), 0);
    }

    #[test]
    fn the_meter_weights_each_state_by_how_long_it_lasted() {
        let mut meter = Meter::default();
        let even = held(&[(1.0, 1.0), (1.0, 1.0)]);
        let skewed = held(&[(3.0, 1.0), (1.0, 1.0)]);
        meter.add(&even, 2.0, 1.25, 3.0);
        meter.add(&skewed, 4.0, 1.25, 1.0);
        meter.add(&skewed, 4.0, 1.25, 0.0);
        // (1 × 3 + 1.5 × 1) / 4.
        assert!((meter.average().unwrap() - 1.125).abs() < 1e-12);
        assert_eq!(meter.worst(), Some(1.5));
        // 3 > 2 × 1.25: one worker overloaded for 1 s.
        assert_eq!(meter.overloaded_worker_seconds, 1.0);
        assert_eq!(Meter::default().average(), None);
    }
}
