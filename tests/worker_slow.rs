//! A worker whose requests all land late (a slow link: answered, but after its leases'
//! validity) gives its leases up visibly instead of keeping them alive in the table and
//! processed by nobody: it takes nothing while its round trips stay slow, publishes capacity 0
//! so its peers plan without it, and releases what it lost once its application let go; its
//! peers take over, and it gets its share back once the link is fast again (paused time,
//! in-memory store).

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/worker_slow.rs");
