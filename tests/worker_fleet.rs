//! Workers on paused tokio time over the in-memory store. Every test also checks, at every
//! lease start and every 5 ms, that no two workers hold or process one lease at once.
//!
//! Every case runs on both protocols: `sessions::` (the default) and `leases::`.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/protocols.rs"]
mod protocols;

on_both_protocols!("cases/worker_fleet.rs");
