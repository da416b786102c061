//! The DynamoDB item format: every condition and update expression, and the encoding and
//! decoding of items. The attribute names are those of `src/store/attributes.rs`, shared with
//! the Redis store and re-exported here; nothing else in the crate names an attribute.
//!
//! One table, hash key `leaseKey` (string). A lease item is keyed by its lease key; a
//! membership record by [`RESERVED_PREFIX`]`member#<worker id>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::lease::{
    CheckpointWrite, Incarnation, Lease, LeaseKey, LoadReport, Member, WorkerId, RESERVED_PREFIX,
};
pub use crate::store::decoded::{member_key, Decoded};
use crate::store::StoreError;

// The attribute names, shared with the Redis store's hashes; re-exported so that this module
// still names every attribute the format uses.
pub use crate::store::attributes::{
    CAPACITY, CHECKPOINT, CHECKPOINT_SEQ, CHECKPOINT_TENURE, COUNTER, HALTED, HANDOFF_TO,
    HEARTBEAT, KEY, LAST_OP, LEASE_LOAD, LEASE_LOADS, MEMBER_INCARNATION, MEMBER_LOAD,
    MEMBER_PROTOCOL, NONCE, NOTICES, OWNER, OWNER_INCARNATION, OWNER_SWITCHES, PARENTS, SESSIONS,
    TENURE, UPDATED_AT, WEIGHT, WORKER,
};

/// Every lease write but `create`, beside its own condition: the item is the one the caller
/// read (its `leaseNonce`), not one created later under the same key.
pub const COND_ITEM: &str = "leaseNonce = :nonce";
/// [`COND_ITEM`] for an item the caller read without a nonce (written before nonces existed).
pub const COND_ITEM_WITHOUT_NONCE: &str = "attribute_not_exists(leaseNonce)";

/// The condition of a write to the lease item `nonce`: `condition` and [`COND_ITEM`] (or
/// [`COND_ITEM_WITHOUT_NONCE`] for nonce 0, with no `:nonce` value: see [`nonce_value`]).
pub fn of_item(nonce: u64, condition: &str) -> String {
    let item = if nonce == 0 {
        COND_ITEM_WITHOUT_NONCE
    } else {
        COND_ITEM
    };
    format!("{item} AND ({condition})")
}

/// The `:nonce` value [`of_item`]'s condition reads: none for nonce 0 (DynamoDB refuses a
/// value the expressions do not use).
pub fn nonce_value(nonce: u64) -> Option<(&'static str, AttributeValue)> {
    (nonce != 0).then(|| (":nonce", n(nonce)))
}

/// `create`: no item has this key.
pub const COND_CREATE: &str = "attribute_not_exists(leaseKey)";
/// `renew`, `release`: held by the caller in the caller's tenure.
pub const COND_HELD: &str = "leaseOwner = :owner AND leaseTenure = :tenure";
/// `checkpoint`: held by the caller in the caller's tenure, and no checkpoint of that tenure
/// numbered `:seq` or higher stored (one stored in an earlier tenure does not count).
pub const COND_CHECKPOINT: &str = "leaseOwner = :owner AND leaseTenure = :tenure \
     AND (attribute_not_exists(checkpointTenure) OR checkpointTenure <> :tenure \
     OR checkpointSeq < :seq)";
/// `take`: the counter is still the one the taker observed.
pub const COND_TAKE: &str = "leaseCounter = :counter";
/// `request_handoff`: held as observed, and no handoff to somebody else pending.
pub const COND_REQUEST_HANDOFF: &str = "leaseOwner = :owner AND leaseTenure = :tenure \
     AND (attribute_not_exists(handoffTo) OR handoffTo = :to)";
/// `complete_handoff`: held by the caller, and the handoff goes to `:to`.
pub const COND_COMPLETE_HANDOFF: &str =
    "leaseOwner = :owner AND leaseTenure = :tenure AND handoffTo = :to";
/// `delete`: counter and tenure as observed.
pub const COND_DELETE: &str = "leaseCounter = :counter AND leaseTenure = :tenure";
/// `heartbeat`: the item is absent or is a membership record.
pub const COND_HEARTBEAT: &str = "attribute_not_exists(leaseKey) OR attribute_exists(heartbeat)";
/// `remove_member`: the item is a membership record.
pub const COND_MEMBER: &str = "attribute_exists(heartbeat)";
/// `remove_member` with an observed heartbeat.
pub const COND_MEMBER_AT: &str = "heartbeat = :heartbeat";

/// `open_session` where there is no record.
pub const COND_OPEN_SESSION: &str = "attribute_not_exists(leaseKey)";
/// `open_session` replacing the record of a session, as observed.
pub const COND_REPLACE_SESSION: &str = "workerIncarnation = :old AND heartbeat = :heartbeat";
/// `open_session` replacing a record written by an older version (no incarnation), as observed.
pub const COND_REPLACE_OLD_RECORD: &str =
    "attribute_not_exists(workerIncarnation) AND heartbeat = :heartbeat";
/// `beat`, `notify`: the record is still this incarnation's session.
pub const COND_SESSION: &str = "workerIncarnation = :incarnation";
/// `end_session`: the record is still this incarnation's session at the observed heartbeat.
pub const COND_SESSION_AT: &str = "workerIncarnation = :incarnation AND heartbeat = :heartbeat";
/// `give` is conditioned like [`COND_TAKE`] and updates like [`UPDATE_HAND_OVER`].
pub const COND_GIVE: &str = COND_TAKE;
/// `notify`. It leaves `lastOp` alone, for the reason given at [`UPDATE_REQUEST_HANDOFF`]: a
/// notice must not hide the token of an `open_session` whose answer was lost.
pub const UPDATE_NOTIFY: &str = "ADD notices :notices SET updatedAt = :now";

/// The `open_session` update: a fresh record at `:heartbeat`, with or without a capacity, and
/// no notices and no load report.
pub fn open_session_update(capacity: bool) -> String {
    let set = "SET workerId = :worker, workerIncarnation = :incarnation, \
               heartbeat = :next, workerProtocol = :protocol, lastOp = :op, updatedAt = :now";
    let remove = "REMOVE notices, workerLoad, workerWeight, leaseLoads, haltedLeases";
    if capacity {
        format!("{set}, workerCapacity = :capacity {remove}")
    } else {
        format!("{set} {remove}, workerCapacity")
    }
}

/// The figures a heartbeat or a beat writes: `, attr = :value` for each one set, and the
/// attributes removed. The capacity is set or removed; with a report, its weight is set and
/// its utilisation (`:load`), lease loads and halted leases are set or removed; without, all
/// four are left alone.
fn figures(capacity: bool, report: Option<&LoadReport>) -> (String, Vec<&'static str>) {
    let mut set = String::new();
    let mut remove = Vec::new();
    let mut figure = |present: bool, attr: &'static str, value: &str| {
        if present {
            set.push_str(&format!(", {attr} = {value}"));
        } else {
            remove.push(attr);
        }
    };
    figure(capacity, CAPACITY, ":capacity");
    if let Some(report) = report {
        figure(true, WEIGHT, ":weight");
        figure(report.utilisation.is_some(), MEMBER_LOAD, ":load");
        figure(!report.leases.is_empty(), LEASE_LOADS, ":leaseLoads");
        figure(!report.halted.is_empty(), HALTED, ":halted");
    }
    (set, remove)
}

/// The values of a load report's figures for [`heartbeat_update`] and [`beat_update`]
/// (`:weight`, `:load`, `:leaseLoads`, `:halted`, those the update names); none without a
/// report.
pub fn report_values(report: Option<&LoadReport>) -> Vec<(&'static str, AttributeValue)> {
    let Some(report) = report else {
        return Vec::new();
    };
    let mut values = vec![(":weight", n(report.weight))];
    if let Some(utilisation) = report.utilisation {
        values.push((":load", n(utilisation)));
    }
    if !report.leases.is_empty() {
        values.push((":leaseLoads", lease_loads(&report.leases)));
    }
    if !report.halted.is_empty() {
        let keys = report.halted.iter().map(ToString::to_string).collect();
        values.push((":halted", AttributeValue::Ss(keys)));
    }
    values
}

/// Encodes lease loads as a map attribute: lease key to number.
pub fn lease_loads(loads: &BTreeMap<LeaseKey, f64>) -> AttributeValue {
    AttributeValue::M(
        loads
            .iter()
            .map(|(key, load)| (key.to_string(), n(load)))
            .collect(),
    )
}

/// The `beat` update: heartbeat + 1, the capacity set or removed, a load report's figures
/// written (see [`report_values`]), the notices seen removed.
pub fn beat_update(capacity: bool, report: Option<&LoadReport>, seen: bool) -> String {
    let (set, remove) = figures(capacity, report);
    let mut update =
        format!("SET heartbeat = heartbeat + :one, lastOp = :op, updatedAt = :now{set}");
    if !remove.is_empty() {
        update.push_str(&format!(" REMOVE {}", remove.join(", ")));
    }
    if seen {
        update.push_str(" DELETE notices :seen");
    }
    update
}

/// `renew` (`:load` variant sets the load figure too).
pub const UPDATE_RENEW: &str =
    "SET leaseCounter = leaseCounter + :one, lastOp = :op, updatedAt = :now";
/// `renew` with a load figure.
pub const UPDATE_RENEW_LOAD: &str =
    "SET leaseCounter = leaseCounter + :one, leaseLoad = :load, lastOp = :op, updatedAt = :now";
/// `take`: a new owner, its incarnation, and a new tenure.
pub const UPDATE_TAKE: &str = "SET leaseOwner = :to, ownerIncarnation = :incarnation, \
     leaseCounter = leaseCounter + :one, leaseTenure = leaseTenure + :one, \
     ownerSwitchesSinceCheckpoint = ownerSwitchesSinceCheckpoint + :one, \
     lastOp = :op, updatedAt = :now REMOVE handoffTo";
/// `complete_handoff`: a new owner and a new tenure; the new owner's process takes it next.
pub const UPDATE_HAND_OVER: &str = "SET leaseOwner = :to, leaseCounter = leaseCounter + :one, \
     leaseTenure = leaseTenure + :one, \
     ownerSwitchesSinceCheckpoint = ownerSwitchesSinceCheckpoint + :one, \
     lastOp = :op, updatedAt = :now REMOVE handoffTo, ownerIncarnation";
/// `request_handoff`. It leaves `lastOp` alone: it does not move the counter, and its
/// condition accepts a request to the same worker again, so it needs no token to recognise
/// itself; writing one would overwrite the token of an owner's write whose answer was lost
/// (a take landed, its answer lost, and a third party asks for a handoff before the retry).
pub const UPDATE_REQUEST_HANDOFF: &str = "SET handoffTo = :to, updatedAt = :now";
/// `release`.
pub const UPDATE_RELEASE: &str = "SET leaseCounter = leaseCounter + :one, lastOp = :op, \
     updatedAt = :now REMOVE leaseOwner, ownerIncarnation, handoffTo";
/// `checkpoint`.
pub const UPDATE_CHECKPOINT: &str = "SET checkpoint = :checkpoint, \
     checkpointTenure = :tenure, checkpointSeq = :seq, ownerSwitchesSinceCheckpoint = :zero, leaseCounter = leaseCounter + :one, \
     lastOp = :op, updatedAt = :now";
/// `heartbeat`; the capacity and a load report's figures are set or removed by
/// [`heartbeat_update`].
pub const UPDATE_HEARTBEAT: &str = "SET workerId = :worker, workerIncarnation = :incarnation, \
     heartbeat = if_not_exists(heartbeat, :zero) + :one, lastOp = :op, updatedAt = :now";

/// The heartbeat update expression for the figures a worker reports (see
/// [`report_values`]).
pub fn heartbeat_update(capacity: bool, report: Option<&LoadReport>) -> String {
    let (set, removed) = figures(capacity, report);
    let mut remove = vec![MEMBER_PROTOCOL];
    remove.extend(removed);
    format!("{UPDATE_HEARTBEAT}{set} REMOVE {}", remove.join(", "))
}

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Encodes a number attribute.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// Encodes a string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// Encodes a freshly created lease as a full item.
pub fn encode_lease(lease: &Lease, op: &str, now: &str) -> Item {
    let mut item = Item::from([
        (KEY.to_owned(), s(lease.key.as_str())),
        (COUNTER.to_owned(), n(lease.counter)),
        (TENURE.to_owned(), n(lease.tenure)),
        (
            OWNER_SWITCHES.to_owned(),
            n(lease.owner_switches_since_checkpoint),
        ),
        (LAST_OP.to_owned(), s(op)),
        (UPDATED_AT.to_owned(), s(now)),
    ]);
    if lease.nonce != 0 {
        item.insert(NONCE.to_owned(), n(lease.nonce));
    }
    let optional = [
        (OWNER, lease.owner.as_ref().map(|o| s(o.as_str()))),
        (
            OWNER_INCARNATION,
            lease.owner_incarnation.map(|i| n(i.get())),
        ),
        (CHECKPOINT, lease.checkpoint.as_ref().map(|c| s(c.as_str()))),
        (
            CHECKPOINT_TENURE,
            lease.checkpoint_write.map(|w| n(w.tenure)),
        ),
        (CHECKPOINT_SEQ, lease.checkpoint_write.map(|w| n(w.seq))),
        (HANDOFF_TO, lease.handoff_to.as_ref().map(|h| s(h.as_str()))),
        (LEASE_LOAD, lease.load.map(n)),
        (
            PARENTS,
            (!lease.parents.is_empty())
                .then(|| AttributeValue::L(lease.parents.iter().map(|p| s(p.as_str())).collect())),
        ),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            item.insert(name.to_owned(), value);
        }
    }
    item
}

/// Length of the per-call token stored in `lastOp` (a hyphenated UUID).
const OP_TOKEN_LEN: usize = 36;
/// Length of `updatedAt` (RFC 3339 in UTC with milliseconds).
const UPDATED_AT_LEN: usize = 24;

/// The size DynamoDB bills for a number: one byte per two significant digits, plus one. The
/// rule as written; the sizes computed without a string ([`float_size`], [`integer_size`])
/// are checked against it.
#[cfg(test)]
fn number_size(value: &str) -> usize {
    let digits = value
        .trim_start_matches('-')
        .split(['e', 'E'])
        .next()
        .unwrap_or("")
        .replace('.', "");
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

/// [`number_size`] of a float as it is written (its `Display`), counted as it is formatted,
/// without a string (a simulated beat measures every load figure of its record).
fn float_size(value: f64) -> usize {
    use std::fmt::Write;

    /// Counts the significant digits of the text written to it as [`number_size`] does:
    /// leading minus signs, the exponent and the points left out, then leading and trailing
    /// zeros.
    #[derive(Default)]
    struct Digits {
        /// Past the leading minus signs.
        signed: bool,
        exponent: bool,
        /// Bytes from the first one that is not a leading zero.
        counted: usize,
        /// Zeros since the last other byte.
        zeros: usize,
    }

    impl Write for Digits {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            for c in text.chars() {
                if self.exponent {
                    break;
                }
                if c == '-' && !self.signed {
                    continue;
                }
                self.signed = true;
                match c {
                    'e' | 'E' => self.exponent = true,
                    '.' => {}
                    '0' if self.counted == 0 => {}
                    '0' => {
                        self.counted += 1;
                        self.zeros += 1;
                    }
                    _ => {
                        self.counted += c.len_utf8();
                        self.zeros = 0;
                    }
                }
            }
            Ok(())
        }
    }

    let mut digits = Digits::default();
    // Writing to `Digits` cannot fail.
    let _ = write!(digits, "{value}");
    let significant = digits.counted - digits.zeros;
    significant.max(1).div_ceil(2) + 1
}

/// [`number_size`] of a whole number, without formatting it (it runs for every item of
/// every simulated scan).
fn integer_size(mut value: u64) -> usize {
    while value >= 10 && value.is_multiple_of(10) {
        value /= 10;
    }
    // Digits counted without a division per digit (a nonce has 19 or 20).
    let digits = value.checked_ilog10().map_or(1, |log| log as usize + 1);
    digits.div_ceil(2) + 1
}

/// The length of [`member_key`] of `worker`, without formatting it.
fn member_key_len(worker: &WorkerId) -> usize {
    RESERVED_PREFIX.len() + "member#".len() + worker.as_str().len()
}

/// The size DynamoDB bills for the lease's item, in bytes (attribute names plus values, by
/// the rules of the DynamoDB developer guide's "item sizes"): what a read or a write of it
/// costs in capacity units. Computed without encoding the item; a test checks it against
/// the encoding (`encode_lease`).
pub fn lease_item_size(lease: &Lease) -> usize {
    let string = |name: &str, len: usize| name.len() + len;
    let number = |name: &str, value: u64| name.len() + integer_size(value);
    let mut size = string(KEY, lease.key.as_str().len())
        + number(COUNTER, lease.counter)
        + number(TENURE, lease.tenure)
        + number(OWNER_SWITCHES, lease.owner_switches_since_checkpoint)
        + string(LAST_OP, OP_TOKEN_LEN)
        + string(UPDATED_AT, UPDATED_AT_LEN);
    if lease.nonce != 0 {
        size += number(NONCE, lease.nonce);
    }
    if let Some(owner) = &lease.owner {
        size += string(OWNER, owner.as_str().len());
    }
    if let Some(incarnation) = lease.owner_incarnation {
        size += number(OWNER_INCARNATION, incarnation.get());
    }
    if let Some(checkpoint) = &lease.checkpoint {
        size += string(CHECKPOINT, checkpoint.len());
    }
    if let Some(write) = lease.checkpoint_write {
        size += number(CHECKPOINT_TENURE, write.tenure) + number(CHECKPOINT_SEQ, write.seq);
    }
    if let Some(to) = &lease.handoff_to {
        size += string(HANDOFF_TO, to.as_str().len());
    }
    if let Some(load) = lease.load {
        size += LEASE_LOAD.len() + float_size(load);
    }
    if !lease.parents.is_empty() {
        // A list costs 3 bytes plus one byte and the size of each element.
        size += PARENTS.len()
            + 3
            + lease
                .parents
                .iter()
                .map(|p| 1 + p.as_str().len())
                .sum::<usize>();
    }
    size
}

/// The size DynamoDB bills for `member`'s membership record, in bytes.
pub fn member_item_size(member: &Member) -> usize {
    let mut size = KEY.len()
        + member_key_len(&member.worker)
        + WORKER.len()
        + member.worker.as_str().len()
        + HEARTBEAT.len()
        + integer_size(member.heartbeat)
        + LAST_OP.len()
        + OP_TOKEN_LEN
        + UPDATED_AT.len()
        + UPDATED_AT_LEN;
    if let Some(incarnation) = member.incarnation {
        size += MEMBER_INCARNATION.len() + integer_size(incarnation.get());
    }
    if let Some(load) = member.load {
        size += MEMBER_LOAD.len() + float_size(load);
    }
    if let Some(capacity) = member.capacity {
        size += CAPACITY.len() + integer_size(u64::from(capacity));
    }
    if let Some(weight) = member.weight {
        size += WEIGHT.len() + float_size(weight);
    }
    if !member.lease_loads.is_empty() {
        // A map costs 3 bytes plus, for each element, one byte, its name and its value.
        size += LEASE_LOADS.len()
            + 3
            + member
                .lease_loads
                .iter()
                .map(|(key, load)| 1 + key.as_str().len() + float_size(*load))
                .sum::<usize>();
    }
    if !member.halted.is_empty() {
        size += HALTED.len()
            + member
                .halted
                .iter()
                .map(|k| k.as_str().len())
                .sum::<usize>();
    }
    if member.session {
        size += MEMBER_PROTOCOL.len() + SESSIONS.len();
    }
    if !member.notices.is_empty() {
        size += NOTICES.len() + member.notices.iter().map(String::len).sum::<usize>();
    }
    size
}

/// Reads attributes of one item, naming the item and the field in every error.
struct Fields<'a> {
    item: &'a Item,
    key: &'a str,
}

impl<'a> Fields<'a> {
    fn err(&self, field: &'static str, reason: impl Into<String>) -> StoreError {
        StoreError::Malformed {
            key: self.key.to_owned(),
            field,
            reason: reason.into(),
        }
    }

    fn string(&self, field: &'static str) -> Result<Option<&'a str>, StoreError> {
        match self.item.get(field) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(value)) => Ok(Some(value)),
            Some(other) => Err(self.err(field, format!("is not a string: {other:?}"))),
        }
    }

    fn number<T: std::str::FromStr>(&self, field: &'static str) -> Result<Option<T>, StoreError> {
        match self.item.get(field) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(value)) => value.parse().map(Some).map_err(|_| {
                self.err(
                    field,
                    format!("{value:?} is not a {}", std::any::type_name::<T>()),
                )
            }),
            Some(other) => Err(self.err(field, format!("is not a number: {other:?}"))),
        }
    }

    fn required<T: std::str::FromStr>(&self, field: &'static str) -> Result<T, StoreError> {
        self.number(field)?
            .ok_or_else(|| self.err(field, "is missing"))
    }

    fn worker(&self, field: &'static str) -> Result<Option<WorkerId>, StoreError> {
        self.string(field)?
            .map(|v| WorkerId::new(v).map_err(|e| self.err(field, e.to_string())))
            .transpose()
    }

    fn incarnation(&self, field: &'static str) -> Result<Option<Incarnation>, StoreError> {
        Ok(self.number(field)?.map(Incarnation::new))
    }

    fn string_set(&self, field: &'static str) -> Result<BTreeSet<String>, StoreError> {
        match self.item.get(field) {
            None | Some(AttributeValue::Null(_)) => Ok(BTreeSet::new()),
            Some(AttributeValue::Ss(set)) => Ok(set.iter().cloned().collect()),
            Some(other) => Err(self.err(field, format!("is not a string set: {other:?}"))),
        }
    }

    /// A string set of lease keys.
    fn lease_keys(&self, field: &'static str) -> Result<BTreeSet<LeaseKey>, StoreError> {
        self.string_set(field)?
            .into_iter()
            .map(|key| LeaseKey::new(key).map_err(|e| self.err(field, e.to_string())))
            .collect()
    }

    /// A number that must be finite and above 0 (`positive`) or at least 0.
    fn figure(&self, field: &'static str, value: &str, positive: bool) -> Result<f64, StoreError> {
        match value.parse::<f64>() {
            Ok(v) if v.is_finite() && (v > 0.0 || (!positive && v >= 0.0)) => Ok(v),
            _ if positive => Err(self.err(field, format!("{value:?} is not a number above 0"))),
            _ => Err(self.err(field, format!("{value:?} is not a number of at least 0"))),
        }
    }

    fn weight(&self) -> Result<Option<f64>, StoreError> {
        match self.item.get(WEIGHT) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(value)) => self.figure(WEIGHT, value, true).map(Some),
            Some(other) => Err(self.err(WEIGHT, format!("is not a number: {other:?}"))),
        }
    }

    fn lease_loads(&self) -> Result<BTreeMap<LeaseKey, f64>, StoreError> {
        let map = match self.item.get(LEASE_LOADS) {
            None | Some(AttributeValue::Null(_)) => return Ok(BTreeMap::new()),
            Some(AttributeValue::M(map)) => map,
            Some(other) => return Err(self.err(LEASE_LOADS, format!("is not a map: {other:?}"))),
        };
        map.iter()
            .map(|(key, value)| {
                let key = LeaseKey::new(key.as_str())
                    .map_err(|e| self.err(LEASE_LOADS, e.to_string()))?;
                match value {
                    AttributeValue::N(load) => Ok((key, self.figure(LEASE_LOADS, load, false)?)),
                    other => Err(self.err(
                        LEASE_LOADS,
                        format!("holds a non-number for {key}: {other:?}"),
                    )),
                }
            })
            .collect()
    }

    /// The checkpoint's write: both numbers or neither.
    fn checkpoint_write(&self) -> Result<Option<CheckpointWrite>, StoreError> {
        match (
            self.number(CHECKPOINT_TENURE)?,
            self.number(CHECKPOINT_SEQ)?,
        ) {
            (Some(tenure), Some(seq)) => Ok(Some(CheckpointWrite { tenure, seq })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(self.err(CHECKPOINT_SEQ, "is missing beside checkpointTenure")),
            (None, Some(_)) => Err(self.err(CHECKPOINT_TENURE, "is missing beside checkpointSeq")),
        }
    }

    fn handoff_target(&self) -> Result<Option<WorkerId>, StoreError> {
        self.string(HANDOFF_TO)?
            .map(|v| {
                WorkerId::parse_handoff_target(v).map_err(|e| self.err(HANDOFF_TO, e.to_string()))
            })
            .transpose()
    }

    fn parents(&self) -> Result<Vec<LeaseKey>, StoreError> {
        let list = match self.item.get(PARENTS) {
            None | Some(AttributeValue::Null(_)) => return Ok(Vec::new()),
            Some(AttributeValue::L(list)) => list.iter().collect::<Vec<_>>(),
            Some(AttributeValue::Ss(set)) => {
                return set
                    .iter()
                    .map(|p| {
                        LeaseKey::new(p.as_str()).map_err(|e| self.err(PARENTS, e.to_string()))
                    })
                    .collect()
            }
            Some(other) => {
                return Err(self.err(PARENTS, format!("is not a list of strings: {other:?}")))
            }
        };
        list.into_iter()
            .map(|value| match value {
                AttributeValue::S(p) => {
                    LeaseKey::new(p.as_str()).map_err(|e| self.err(PARENTS, e.to_string()))
                }
                other => Err(self.err(PARENTS, format!("holds a non-string: {other:?}"))),
            })
            .collect()
    }
}

/// Decodes any item of the lease table.
pub fn decode(item: &Item) -> Result<Decoded, StoreError> {
    let raw_key = match item.get(KEY) {
        Some(AttributeValue::S(key)) => key.as_str(),
        _ => {
            return Err(StoreError::Malformed {
                key: "<missing>".into(),
                field: KEY,
                reason: "is missing or not a string".into(),
            })
        }
    };
    let fields = Fields { item, key: raw_key };
    let last_op = fields.string(LAST_OP)?.map(str::to_owned);
    if let Some(worker) = raw_key.strip_prefix(RESERVED_PREFIX) {
        let Some(worker) = worker.strip_prefix("member#") else {
            return Err(fields.err(KEY, "uses the reserved prefix for an unknown kind of item"));
        };
        let worker = WorkerId::new(worker).map_err(|e| fields.err(KEY, e.to_string()))?;
        let member = Member {
            worker,
            heartbeat: fields.required(HEARTBEAT)?,
            incarnation: fields.incarnation(MEMBER_INCARNATION)?,
            load: fields.number(MEMBER_LOAD)?,
            weight: fields.weight()?,
            lease_loads: fields.lease_loads()?,
            halted: fields.lease_keys(HALTED)?,
            capacity: fields.number(CAPACITY)?,
            notices: fields.string_set(NOTICES)?,
            session: match fields.string(MEMBER_PROTOCOL)? {
                None => false,
                Some(SESSIONS) => true,
                Some(other) => {
                    return Err(fields.err(
                        MEMBER_PROTOCOL,
                        format!("names a protocol this version does not know: {other:?}"),
                    ))
                }
            },
        };
        return Ok(Decoded::Member(member, last_op));
    }
    let key = LeaseKey::new(raw_key).map_err(|e| fields.err(KEY, e.to_string()))?;
    let load: Option<f64> = fields.number(LEASE_LOAD)?;
    if load.is_some_and(|l| !l.is_finite()) {
        return Err(fields.err(LEASE_LOAD, "is not a finite number"));
    }
    let lease = Lease {
        key,
        owner: fields.worker(OWNER)?,
        owner_incarnation: fields.incarnation(OWNER_INCARNATION)?,
        counter: fields.required(COUNTER)?,
        tenure: fields.required(TENURE)?,
        checkpoint: fields.string(CHECKPOINT)?.map(str::to_owned),
        checkpoint_write: fields.checkpoint_write()?,
        owner_switches_since_checkpoint: fields.number(OWNER_SWITCHES)?.unwrap_or(0),
        parents: fields.parents()?,
        handoff_to: fields.handoff_target()?,
        load,
        nonce: fields.number(NONCE)?.unwrap_or(0),
    };
    Ok(Decoded::Lease(lease, last_op))
}

/// Decodes an item that must be a lease.
pub fn decode_lease(item: &Item) -> Result<(Lease, Option<String>), StoreError> {
    decode(item)?.into_lease(KEY)
}

/// Decodes an item that must be a membership record.
pub fn decode_member(item: &Item) -> Result<(Member, Option<String>), StoreError> {
    decode(item)?.into_member(HEARTBEAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NewLease;

    /// Item size by DynamoDB's rules, over an encoded item.
    fn billed_size(item: &Item) -> usize {
        fn value_size(value: &AttributeValue) -> usize {
            match value {
                AttributeValue::S(s) => s.len(),
                AttributeValue::N(n) => number_size(n),
                // A set: the sum of its elements' sizes.
                AttributeValue::Ss(set) => set.iter().map(String::len).sum(),
                AttributeValue::L(list) => {
                    3 + list.iter().map(|v| 1 + value_size(v)).sum::<usize>()
                }
                AttributeValue::M(map) => {
                    3 + map
                        .iter()
                        .map(|(name, v)| 1 + name.len() + value_size(v))
                        .sum::<usize>()
                }
                other => panic!("not used by the schema: {other:?}"),
            }
        }
        item.iter()
            .map(|(name, value)| name.len() + value_size(value))
            .sum()
    }

    #[test]
    fn item_sizes_match_the_encoded_items() {
        let token = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let at = "2026-11-30T04:27:26.123Z";
        assert_eq!(token.len(), OP_TOKEN_LEN);
        assert_eq!(at.len(), UPDATED_AT_LEN);
        let bare = NewLease::new(LeaseKey::new("shardId-000000000001").unwrap()).into_lease();
        let mut loaded = full_lease();
        loaded.load = Some(0.125);
        loaded.counter = 1_234_567;
        for lease in [bare, full_lease(), loaded] {
            assert_eq!(
                lease_item_size(&lease),
                billed_size(&encode_lease(&lease, token, at)),
                "{lease:?}"
            );
        }
        for value in [
            0u64,
            7,
            9,
            10,
            99,
            100,
            12_345,
            1_234_567,
            1_000_001,
            10_000_000_000_000_000_000,
            12_345_678_901_234_567_891,
            u64::MAX,
        ] {
            assert_eq!(
                integer_size(value),
                number_size(&value.to_string()),
                "{value}"
            );
        }
        for value in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.125,
            -0.125,
            10.5,
            100.0,
            1e-7,
            -3.0e-12,
            1e21,
            1.5e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            123_456.789,
            0.1 + 0.2,
            2.0 / 3.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ] {
            assert_eq!(
                float_size(value),
                number_size(&value.to_string()),
                "{value}"
            );
        }
        assert_eq!(number_size("0"), 2);
        assert_eq!(number_size("100"), 2);
        assert_eq!(number_size("12345"), 4);
        assert_eq!(number_size("0.125"), 3);
        let member = Member {
            worker: WorkerId::new("worker-a").unwrap(),
            heartbeat: 42,
            incarnation: Some(Incarnation::new(u64::MAX)),
            load: None,
            weight: None,
            lease_loads: BTreeMap::new(),
            halted: BTreeSet::new(),
            capacity: Some(100),
            notices: BTreeSet::new(),
            session: true,
        };
        let expected = KEY.len()
            + member_key(&member.worker).len()
            + WORKER.len()
            + 8
            + HEARTBEAT.len()
            + 2
            + LAST_OP.len()
            + 36
            + UPDATED_AT.len()
            + 24
            + CAPACITY.len()
            + 2
            + MEMBER_INCARNATION.len()
            + number_size(&u64::MAX.to_string())
            + MEMBER_PROTOCOL.len()
            + SESSIONS.len();
        assert_eq!(member_item_size(&member), expected);
        assert_eq!(
            member_key_len(&member.worker),
            member_key(&member.worker).len()
        );
        let report = LoadReport {
            weight: 1.5,
            utilisation: Some(0.25),
            leases: BTreeMap::from([
                (LeaseKey::new("shard a").unwrap(), 120.0),
                (LeaseKey::new("b=1:2").unwrap(), 0.0),
            ]),
            halted: BTreeSet::from([LeaseKey::new("shard a").unwrap()]),
        };
        let reported = Member {
            weight: Some(report.weight),
            load: report.utilisation,
            lease_loads: report.leases.clone(),
            halted: report.halted.clone(),
            ..member
        };
        let mut item = Item::from([
            (KEY.into(), s(member_key(&reported.worker))),
            (WORKER.into(), s(reported.worker.as_str())),
            (HEARTBEAT.into(), n(reported.heartbeat)),
            (LAST_OP.into(), s(token)),
            (UPDATED_AT.into(), s(at)),
            (CAPACITY.into(), n(100)),
            (MEMBER_INCARNATION.into(), n(u64::MAX)),
            (MEMBER_PROTOCOL.into(), s(SESSIONS)),
        ]);
        item.extend(
            report_values(Some(&report))
                .into_iter()
                .map(|(value, attr)| (attribute_of(value).to_owned(), attr)),
        );
        assert_eq!(member_item_size(&reported), billed_size(&item));
        assert_eq!(decode_member(&item).unwrap().0, reported);
    }

    /// The attribute a report value is written to, as the updates name it.
    fn attribute_of(value: &str) -> &'static str {
        match value {
            ":weight" => WEIGHT,
            ":load" => MEMBER_LOAD,
            ":leaseLoads" => LEASE_LOADS,
            ":halted" => HALTED,
            other => panic!("not a report value: {other}"),
        }
    }

    fn full_lease() -> Lease {
        let mut lease = NewLease::new(LeaseKey::new("shard-3").unwrap())
            .with_parents(vec![
                LeaseKey::new("shard-1").unwrap(),
                LeaseKey::new("shard-2").unwrap(),
            ])
            .with_checkpoint("49590338271490256608559692538361571095921575989136588898")
            .into_lease();
        lease.owner = Some(WorkerId::new("worker-a").unwrap());
        lease.owner_incarnation = Some(Incarnation::new(0x9e37_79b9_7f4a_7c15));
        lease.handoff_to = Some(WorkerId::new("worker-b").unwrap());
        lease.counter = 17;
        lease.tenure = 4;
        lease.owner_switches_since_checkpoint = 2;
        lease.load = Some(12.5);
        lease.nonce = 6_004_799_503_160_661;
        lease
    }

    #[test]
    fn a_lease_survives_a_round_trip() {
        let lease = full_lease();
        let item = encode_lease(&lease, "op-1", "2026-01-01T00:00:00Z");
        assert_eq!(
            decode(&item).unwrap(),
            Decoded::Lease(lease, Some("op-1".into()))
        );
        let bare = NewLease::new(LeaseKey::new("k").unwrap()).into_lease();
        let item = encode_lease(&bare, "op-2", "now");
        assert!(!item.contains_key(OWNER) && !item.contains_key(PARENTS));
        assert!(!item.contains_key(OWNER_INCARNATION));
        assert_eq!(decode_lease(&item).unwrap().0, bare);
    }

    #[test]
    fn a_retiring_lease_decodes_but_the_marker_is_no_owner() {
        let mut lease = full_lease();
        lease.handoff_to = Some(WorkerId::retire_marker());
        let item = encode_lease(&lease, "op-1", "now");
        let decoded = decode_lease(&item).unwrap().0;
        assert!(decoded.is_retiring());
        lease.owner = Some(WorkerId::retire_marker());
        let item = encode_lease(&lease, "op-1", "now");
        assert!(matches!(
            decode(&item),
            Err(StoreError::Malformed { field: OWNER, .. })
        ));
    }

    #[test]
    fn a_membership_record_decodes() {
        let item = Item::from([
            (KEY.into(), s("shardlease#member#w1")),
            (WORKER.into(), s("w1")),
            (HEARTBEAT.into(), n(3)),
            (CAPACITY.into(), n(10)),
            (MEMBER_INCARNATION.into(), n(u64::MAX)),
        ]);
        let (member, _) = decode_member(&item).unwrap();
        assert_eq!(member.worker.as_str(), "w1");
        assert_eq!(
            (member.heartbeat, member.capacity, member.load),
            (3, Some(10), None)
        );
        assert_eq!(member.incarnation, Some(Incarnation::new(u64::MAX)));
        assert!(decode_lease(&item).is_err());
    }

    #[test]
    fn a_membership_record_says_which_protocol_wrote_it() {
        let record = |protocol: Option<&str>| {
            let mut item = Item::from([
                (KEY.into(), s("shardlease#member#w1")),
                (WORKER.into(), s("w1")),
                (HEARTBEAT.into(), n(3)),
            ]);
            if let Some(protocol) = protocol {
                item.insert(MEMBER_PROTOCOL.into(), s(protocol));
            }
            item
        };
        assert!(!decode_member(&record(None)).unwrap().0.session);
        assert!(decode_member(&record(Some(SESSIONS))).unwrap().0.session);
        // A protocol this version does not know is never taken for one it knows.
        assert_eq!(field_of(&record(Some("gossip"))), MEMBER_PROTOCOL);
    }

    fn field_of(item: &Item) -> &'static str {
        match decode(item) {
            Err(StoreError::Malformed { field, .. }) => field,
            other => panic!("expected a malformed-item error, got {other:?}"),
        }
    }

    fn with(change: impl FnOnce(&mut Item)) -> Item {
        let mut item = encode_lease(&full_lease(), "op", "now");
        change(&mut item);
        item
    }

    #[test]
    fn every_malformed_field_is_named() {
        assert_eq!(field_of(&with(|i| drop(i.remove(KEY)))), KEY);
        assert_eq!(field_of(&with(|i| drop(i.insert(KEY.into(), n(1))))), KEY);
        assert_eq!(field_of(&with(|i| drop(i.insert(KEY.into(), s(""))))), KEY);
        assert_eq!(field_of(&with(|i| drop(i.remove(COUNTER)))), COUNTER);
        assert_eq!(
            field_of(&with(|i| drop(i.insert(COUNTER.into(), s("7"))))),
            COUNTER
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(COUNTER.into(), n(-1))))),
            COUNTER
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(TENURE.into(), n(1.5))))),
            TENURE
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(OWNER.into(), s(""))))),
            OWNER
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(OWNER.into(), n(3))))),
            OWNER
        );
        assert_eq!(
            field_of(&with(|i| drop(
                i.insert(PARENTS.into(), AttributeValue::L(vec![n(1)]))
            ))),
            PARENTS
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(PARENTS.into(), s("p"))))),
            PARENTS
        );
        assert_eq!(
            field_of(&with(|i| drop(
                i.insert(CHECKPOINT.into(), AttributeValue::Bool(true))
            ))),
            CHECKPOINT
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(LEASE_LOAD.into(), s("x"))))),
            LEASE_LOAD
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(KEY.into(), s("shardlease#other"))))),
            KEY
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(OWNER_INCARNATION.into(), s("7"))))),
            OWNER_INCARNATION
        );
        assert_eq!(
            field_of(&with(|i| drop(i.insert(OWNER_INCARNATION.into(), n(-1))))),
            OWNER_INCARNATION
        );
        assert_eq!(
            field_of(&with(|i| drop(
                i.insert(OWNER_INCARNATION.into(), n("18446744073709551616"))
            ))),
            OWNER_INCARNATION,
            "one more than u64::MAX"
        );
        let member_without_heartbeat = Item::from([(KEY.into(), s("shardlease#member#w"))]);
        assert_eq!(field_of(&member_without_heartbeat), HEARTBEAT);
        let member_with_a_bad_incarnation = Item::from([
            (KEY.into(), s("shardlease#member#w")),
            (HEARTBEAT.into(), n(1)),
            (MEMBER_INCARNATION.into(), n(0.5)),
        ]);
        assert_eq!(field_of(&member_with_a_bad_incarnation), MEMBER_INCARNATION);
        let member = |attr: &str, value: AttributeValue| {
            Item::from([
                (KEY.into(), s("shardlease#member#w")),
                (HEARTBEAT.into(), n(1)),
                (attr.into(), value),
            ])
        };
        for bad in [n(0), n(-1), s("1")] {
            assert_eq!(field_of(&member(WEIGHT, bad.clone())), WEIGHT, "{bad:?}");
        }
        let loads = |key: &str, value: AttributeValue| {
            AttributeValue::M(HashMap::from([(key.to_owned(), value)]))
        };
        for bad in [
            loads("k", n(-0.5)),
            loads("k", s("1")),
            loads("", n(1)),
            loads("a\tb", n(1)),
            loads("shardlease#x", n(1)),
            AttributeValue::L(vec![n(1)]),
        ] {
            assert_eq!(
                field_of(&member(LEASE_LOADS, bad.clone())),
                LEASE_LOADS,
                "{bad:?}"
            );
        }
        assert!(decode_member(&member(LEASE_LOADS, loads("k", n(0)))).is_ok());
        assert!(decode_member(&member(WEIGHT, n(0.001))).is_ok());
    }

    #[test]
    fn heartbeat_update_sets_or_removes_each_figure() {
        let full = LoadReport {
            weight: 1.0,
            utilisation: Some(0.5),
            leases: BTreeMap::from([(LeaseKey::new("k").unwrap(), 2.0)]),
            halted: BTreeSet::from([LeaseKey::new("k").unwrap()]),
        };
        assert!(heartbeat_update(true, Some(&full)).ends_with(
            "workerCapacity = :capacity, workerWeight = :weight, workerLoad = :load, \
             leaseLoads = :leaseLoads, haltedLeases = :halted REMOVE workerProtocol"
        ));
        let bare = LoadReport {
            weight: 1.0,
            ..LoadReport::default()
        };
        assert!(heartbeat_update(true, Some(&bare)).ends_with(
            ", workerWeight = :weight REMOVE workerProtocol, workerLoad, leaseLoads, haltedLeases"
        ));
        // No report: the load figures are left as they are.
        assert!(heartbeat_update(true, None)
            .ends_with("updatedAt = :now, workerCapacity = :capacity REMOVE workerProtocol"));
        assert!(heartbeat_update(false, None).ends_with("REMOVE workerProtocol, workerCapacity"));
        assert_eq!(
            beat_update(false, Some(&bare), true),
            "SET heartbeat = heartbeat + :one, lastOp = :op, updatedAt = :now, \
             workerWeight = :weight REMOVE workerCapacity, workerLoad, leaseLoads, haltedLeases \
             DELETE notices :seen"
        );
        assert_eq!(
            beat_update(true, None, false),
            "SET heartbeat = heartbeat + :one, lastOp = :op, updatedAt = :now, \
             workerCapacity = :capacity"
        );
        // Every value an update names is given, and no other (DynamoDB refuses both).
        for report in [Some(&full), Some(&bare), None] {
            let update = beat_update(true, report, false);
            let values = report_values(report);
            for (value, _) in &values {
                assert!(update.contains(value), "{update} lacks {value}");
            }
            for value in [":weight", ":load", ":leaseLoads"] {
                assert_eq!(
                    update.contains(value),
                    values.iter().any(|(v, _)| *v == value),
                    "{update}"
                );
            }
        }
    }
}
