//! The fleet tests, one binary: whole fleets of workers in one process, each checking at every
//! lease start and every 5 ms that no two workers hold or process one lease at once
//! (`fleet.rs`, the fleet and its ledger). Most run on paused tokio time over the in-memory
//! store; `worker_dynalite` (feature `dynamodb`) and `worker_redis` (feature `redis`) run in
//! real time on the emulators. One module a subject: `cargo test --features testing --test fleet worker_fleet::`
//! runs one.

mod cases;
mod fleet;

mod admin;
mod discovery_fleet;
mod handoff_follow;
mod handoff_requester_left;
mod leaving_worker;
mod steals;
mod worker_fleet;
mod worker_hang;
mod worker_identity;
mod worker_slow;

#[cfg(feature = "dynamodb")]
#[path = "../common/dynamo.rs"]
mod dynamo;
#[cfg(any(feature = "dynamodb", feature = "redis"))]
mod real_time;
#[cfg(feature = "dynamodb")]
mod worker_dynalite;
#[cfg(feature = "redis")]
mod worker_redis;
