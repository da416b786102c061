//! Handoffs whose other side goes away (paused time, in-memory store): a handoff whose
//! requester left before the owner's application let go of the lease is not completed to it
//! (the owner releases the lease instead, so it is processed again at once rather than after a
//! lease duration owned by nobody alive; with sessions it hands the lease over, finds that the
//! receiver has no session and places it again at once); and a lease whose owner dies mid-handoff is taken by
//! the requester when it expires, not a lease duration after the handoff timeout.

#[path = "common/fleet.rs"]
mod fleet;

#[macro_use]
#[path = "common/cases.rs"]
mod cases;

fleet_cases!("cases/handoff_requester_left.rs");
