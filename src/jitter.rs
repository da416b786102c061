//! The randomness behind every jitter and backoff in the crate, from one generator per thread.
//!
//! By default each thread's generator is seeded from the operating system. A simulation that
//! runs a whole fleet on one thread (a `current_thread` tokio runtime on paused time) calls
//! `seed_thread` first (`clock::seed_thread`, feature `testing`), and the run replays
//! exactly: the discovery interval, the store retries and the Kinesis backoffs all draw from
//! the seeded generator, in an order the single-threaded scheduler fixes.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    static RNG: RefCell<StdRng> = RefCell::new(StdRng::from_entropy());
}

/// Re-seeds this thread's generator, the one every jitter and backoff of the crate draws from:
/// from here on, this thread draws the same numbers for the same seed, so that a simulation run
/// on one thread (a `current_thread` runtime on paused time) replays exactly.
///
/// Needs the `testing` feature: simulation machinery (the simulator, `sim/`, uses it), which no
/// worker needs.
#[cfg(any(test, feature = "testing"))]
pub fn seed_thread(seed: u64) {
    RNG.with(|rng| *rng.borrow_mut() = StdRng::seed_from_u64(seed));
}

/// A number drawn uniformly from `[low, high)` (`low` when the range is empty).
pub(crate) fn uniform(low: f64, high: f64) -> f64 {
    if high <= low {
        return low;
    }
    RNG.with(|rng| rng.borrow_mut().gen_range(low..high))
}

/// A number drawn uniformly from all of `u64` (worker incarnations).
pub(crate) fn next_u64() -> u64 {
    RNG.with(|rng| rng.borrow_mut().gen())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_numbers() {
        seed_thread(7);
        let first: Vec<f64> = (0..5).map(|_| uniform(0.0, 1.0)).collect();
        seed_thread(7);
        let second: Vec<f64> = (0..5).map(|_| uniform(0.0, 1.0)).collect();
        assert_eq!(first, second);
        seed_thread(8);
        let other: Vec<f64> = (0..5).map(|_| uniform(0.0, 1.0)).collect();
        assert_ne!(first, other);
        assert!(first.iter().all(|x| (0.0..1.0).contains(x)));
        assert_eq!(uniform(2.0, 2.0), 2.0);
    }
}
