//! The shardlease fleet simulator as a library: the modules of the `simulate` binary
//! (`src/main.rs`, its command line), for it and for the tests in `tests/` (`simulate.rs`,
//! `campaign_holes.rs`), which run simulations and campaign schedules in process.
//!
//! ```sh
//! cargo run --release -p shardlease-sim -- --help
//! cargo test -p shardlease-sim --all-targets
//! ```

pub mod sim;
