//! The attribute names of the lease table's items, one list for every backend: a DynamoDB
//! item's attributes and a Redis hash's fields are named alike, so that an operator reads
//! either table with the same words. Each backend's `schema` module encodes the values: the
//! types given here are DynamoDB's; Redis holds numbers as decimal text, lists and sets as
//! JSON arrays of strings, and a map of lease loads as lines (see [`LEASE_LOADS`]).
//!
//! This module names no other module of the crate, so that every backend can use it whatever
//! features are built.

/// The item key, the table's hash key (string): the lease key, or `shardlease#member#<worker
/// id>` for a membership record.
pub const KEY: &str = "leaseKey";
/// Lease owner's worker id (string; absent when unowned).
pub const OWNER: &str = "leaseOwner";
/// The owner's incarnation, the process that took the lease (number; absent when unowned or
/// handed over and not yet taken by the requester).
pub const OWNER_INCARNATION: &str = "ownerIncarnation";
/// Liveness counter (number).
pub const COUNTER: &str = "leaseCounter";
/// Fencing token: changes with each new owner (number).
pub const TENURE: &str = "leaseTenure";
/// The application's checkpoint (string; absent when none).
pub const CHECKPOINT: &str = "checkpoint";
/// The tenure of the write that stored the checkpoint (number; absent before the first
/// numbered checkpoint).
pub const CHECKPOINT_TENURE: &str = "checkpointTenure";
/// The number of the write that stored the checkpoint among its tenure's checkpoints (number;
/// absent with [`CHECKPOINT_TENURE`]).
pub const CHECKPOINT_SEQ: &str = "checkpointSeq";
/// Owner changes since the last checkpoint (number).
pub const OWNER_SWITCHES: &str = "ownerSwitchesSinceCheckpoint";
/// Parent lease keys (list of strings; absent when none).
pub const PARENTS: &str = "parentLeaseKeys";
/// Worker a pending handoff goes to (string; absent when none).
pub const HANDOFF_TO: &str = "handoffTo";
/// Per-lease load figure (number; absent when not reported).
pub const LEASE_LOAD: &str = "leaseLoad";
/// Random nonce drawn when the lease item was created, never changed (number; absent on
/// items written before it existed, read as 0).
pub const NONCE: &str = "leaseNonce";
/// Token of the last write, to recognise one's own write after a lost answer (string).
pub const LAST_OP: &str = "lastOp";
/// Wall-clock time of the last write, for operators only: never read by the library (string
/// in RFC 3339 on DynamoDB, milliseconds since the Unix epoch on Redis).
pub const UPDATED_AT: &str = "updatedAt";
/// Membership record: the worker id (string).
pub const WORKER: &str = "workerId";
/// Membership record: heartbeat counter (number).
pub const HEARTBEAT: &str = "heartbeat";
/// Membership record: the incarnation that wrote the last heartbeat (number).
pub const MEMBER_INCARNATION: &str = "workerIncarnation";
/// Membership record: the worker's utilisation figure, a load report's `utilisation` (number;
/// optional).
pub const MEMBER_LOAD: &str = "workerLoad";
/// Membership record: the worker's weight, from its last load report (number above 0; absent
/// until it reports one).
pub const WEIGHT: &str = "workerWeight";
/// Membership record: the load figure of each lease the worker holds, from its last load
/// report (a map of lease key to number on DynamoDB; on Redis one line `<key>\t<number>` per
/// lease, the lines joined by `\n`; absent when the report names no lease).
pub const LEASE_LOADS: &str = "leaseLoads";
/// Membership record: the leases the worker holds whose application halted them, from its last
/// load report (a string set on DynamoDB; on Redis the keys joined by `\n`; absent when none).
pub const HALTED: &str = "haltedLeases";
/// Membership record: the most leases the worker accepts (number; optional).
pub const CAPACITY: &str = "workerCapacity";
/// Membership record: what other workers asked the session to look at (string set; absent
/// when empty).
pub const NOTICES: &str = "notices";
/// On a membership record: which protocol wrote it. [`SESSIONS`] on a session's record
/// (written by `open_session`); absent on a record of the lease protocol's heartbeat, which
/// removes it (and on every record written before it existed).
pub const MEMBER_PROTOCOL: &str = "workerProtocol";
/// The value of [`MEMBER_PROTOCOL`] on a session's record.
pub const SESSIONS: &str = "sessions";

/// Every attribute name above but [`SESSIONS`] (a value, not a name). The Redis store finds
/// in it the name of the field a script reports at fault.
#[cfg(feature = "redis")]
pub const ALL: [&str; 24] = [
    KEY,
    OWNER,
    OWNER_INCARNATION,
    COUNTER,
    TENURE,
    CHECKPOINT,
    CHECKPOINT_TENURE,
    CHECKPOINT_SEQ,
    OWNER_SWITCHES,
    PARENTS,
    HANDOFF_TO,
    LEASE_LOAD,
    NONCE,
    LAST_OP,
    UPDATED_AT,
    WORKER,
    HEARTBEAT,
    MEMBER_INCARNATION,
    MEMBER_LOAD,
    WEIGHT,
    LEASE_LOADS,
    CAPACITY,
    NOTICES,
    MEMBER_PROTOCOL,
];
