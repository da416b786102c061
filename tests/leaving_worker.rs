//! A leaving worker takes nothing more, and its peers know it at once: the leases it releases
//! while others are still winding down are taken by the peers straight away, not left to it
//! until its shutdown ends (paused time, in-memory store).
//!
//! Found by the fault campaign (schedule 1983287793525533643): a worker that left while a
//! peer waited on handoffs from it was still counted at its membership record, so the balance
//! gave the leases it had just released back to it, and they went unprocessed until its
//! shutdown ended 30 s later.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/leaving_worker.rs");
