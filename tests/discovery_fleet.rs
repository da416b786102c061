//! Shard discovery and the shard lifecycle on paused tokio time over the in-memory store, with
//! a source the test changes while the workers run. Every test also checks, at every lease
//! start and every 5 ms, that no two workers hold or process one lease at once.
//!
//! Every case runs on both protocols: `sessions::` (the default) and `leases::`.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/protocols.rs"]
mod protocols;

on_both_protocols!("cases/discovery_fleet.rs");
