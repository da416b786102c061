//! A worker's identity on paused tokio time over the in-memory store: takes whose answer was
//! lost, two live processes with one worker id, and a restart with the same id after a crash.
//! Every test also checks, at every lease start and every 5 ms, that no two workers (processes)
//! hold or process one lease at once.
//!
//! Every case runs on both protocols: `sessions::` (the default) and `leases::`.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/protocols.rs"]
mod protocols;

on_both_protocols!("cases/worker_identity.rs");
