//! A worker's identity on paused tokio time over the in-memory store: takes whose answer was
//! lost, two live processes with one worker id, and a restart with the same id after a crash.
//! Every test also checks, at every lease start and every 5 ms, that no two workers (processes)
//! hold or process one lease at once.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/worker_identity.rs");
