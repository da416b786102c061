//! What every fleet case starts from.

use std::time::Duration;

/// The configuration every case starts from: the library's defaults.
pub fn base() -> shardlease::WorkerConfig {
    shardlease::WorkerConfig::default()
}

/// Prints a `FIGURE` line (BENCHMARKS.md collects them with `grep FIGURE`).
pub fn figure(name: &str, value: Duration) {
    crate::fleet::Fleet::figure(name, value);
}
