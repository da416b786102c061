//! Shard discovery and the shard lifecycle on paused tokio time over the in-memory store, with
//! a source the test changes while the workers run. Every test also checks, at every lease
//! start and every 5 ms, that no two workers hold or process one lease at once.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/discovery_fleet.rs");
