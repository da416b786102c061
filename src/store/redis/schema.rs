//! The Redis item format: the key layout, and the encoding and decoding of items. The field
//! names are the DynamoDB attribute names, from `src/store/attributes.rs`, re-exported here;
//! the conditions and updates are the Lua scripts of `src/store/redis/scripts.rs`.
//!
//! A table named `T` under the key prefix `P` is, all under the hash tag `{T}` (so that every
//! script's keys are in one slot of a Redis Cluster):
//!
//! - `P:{T}:item:<item key>`: one hash per item, its fields named as the DynamoDB attributes
//!   (`leaseKey`, `leaseOwner`, `leaseCounter`, ...). The item key is the lease key, or
//!   [`RESERVED_PREFIX`]`member#<worker id>` for a membership record, as in DynamoDB.
//! - `P:{T}:index`: a sorted set of every item key, all at score 0, so that listings page
//!   through it in key order (`ZRANGEBYLEX`) without `KEYS` or `SCAN`. The scripts that create
//!   and delete items keep it.
//!
//! Numbers are decimal text, as `HINCRBY` writes them; lists and sets (parent keys, notices)
//! are JSON arrays of strings; a member's lease loads are lines `<lease key>\t<number>` joined
//! by `\n` (a lease key holds no control character).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::lease::{
    CheckpointWrite, Incarnation, Lease, LeaseKey, LoadReport, Member, WorkerId, RESERVED_PREFIX,
};
pub use crate::store::decoded::{member_key, Decoded};
use crate::store::StoreError;

// The field names: the DynamoDB attribute names, from the list both stores share; re-exported
// so that this module still names every field the format uses.
pub use crate::store::attributes::{
    CAPACITY, CHECKPOINT, CHECKPOINT_SEQ, CHECKPOINT_TENURE, COUNTER, HALTED, HANDOFF_TO,
    HEARTBEAT, KEY, LAST_OP, LEASE_LOAD, LEASE_LOADS, MEMBER_INCARNATION, MEMBER_LOAD,
    MEMBER_PROTOCOL, NONCE, NOTICES, OWNER, OWNER_INCARNATION, OWNER_SWITCHES, PARENTS, SESSIONS,
    TENURE, UPDATED_AT, WEIGHT, WORKER,
};

/// The field named `name`, as the format's constant ([`KEY`] for a name it does not use).
pub fn field_name(name: &str) -> &'static str {
    crate::store::attributes::ALL
        .into_iter()
        .find(|f| *f == name)
        .unwrap_or(KEY)
}

/// Largest counter a hash may hold: `HINCRBY` works on signed 64-bit numbers, and the scripts
/// refuse a counter of more than 18 digits, so that no increment can overflow.
const MAX_COUNTER: u64 = 999_999_999_999_999_999;

/// Every membership record's item key starts with this.
pub fn member_key_prefix() -> String {
    format!("{RESERVED_PREFIX}member#")
}

/// The Redis keys of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `P:{T}:item:`, to which an item key is appended.
    item_prefix: String,
    /// `P:{T}:index`.
    index: String,
}

impl Layout {
    /// The layout of table `table` under `prefix`.
    pub fn new(prefix: &str, table: &str) -> Self {
        Self {
            item_prefix: format!("{prefix}:{{{table}}}:item:"),
            index: format!("{prefix}:{{{table}}}:index"),
        }
    }

    /// The hash of item `key`.
    pub fn item(&self, key: &str) -> String {
        format!("{}{key}", self.item_prefix)
    }

    /// The sorted set of every item key.
    pub fn index(&self) -> &str {
        &self.index
    }
}

/// A hash as read: field name to raw value.
pub type Item = HashMap<String, Vec<u8>>;

/// Builds an [`Item`] from the flat field, value, field, value... list `HGETALL` answers.
pub fn item_from_flat(flat: Vec<Vec<u8>>) -> Item {
    let mut item = Item::with_capacity(flat.len() / 2);
    let mut flat = flat.into_iter();
    while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
        item.insert(String::from_utf8_lossy(&field).into_owned(), value);
    }
    item
}

/// The fields of a freshly created lease, field and value in turn, as the create script's
/// arguments.
pub fn encode_lease(lease: &Lease, op: &str, now: &str) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        (KEY, lease.key.to_string()),
        (COUNTER, lease.counter.to_string()),
        (TENURE, lease.tenure.to_string()),
        (
            OWNER_SWITCHES,
            lease.owner_switches_since_checkpoint.to_string(),
        ),
        (LAST_OP, op.to_owned()),
        (UPDATED_AT, now.to_owned()),
    ];
    if lease.nonce != 0 {
        fields.push((NONCE, lease.nonce.to_string()));
    }
    let optional = [
        (OWNER, lease.owner.as_ref().map(WorkerId::to_string)),
        (
            OWNER_INCARNATION,
            lease.owner_incarnation.map(|i| i.get().to_string()),
        ),
        (CHECKPOINT, lease.checkpoint.clone()),
        (
            CHECKPOINT_TENURE,
            lease.checkpoint_write.map(|w| w.tenure.to_string()),
        ),
        (
            CHECKPOINT_SEQ,
            lease.checkpoint_write.map(|w| w.seq.to_string()),
        ),
        (
            HANDOFF_TO,
            lease.handoff_to.as_ref().map(WorkerId::to_string),
        ),
        (LEASE_LOAD, lease.load.map(|l| l.to_string())),
        (
            PARENTS,
            (!lease.parents.is_empty())
                .then(|| json_list(lease.parents.iter().map(|p| p.as_str()))),
        ),
    ];
    fields.extend(
        optional
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| (name, v))),
    );
    fields
}

/// Lease loads as one field: a line `<lease key>\t<number>` per lease, joined by `\n`.
pub fn encode_lease_loads(loads: &BTreeMap<LeaseKey, f64>) -> String {
    let lines: Vec<String> = loads
        .iter()
        .map(|(key, load)| format!("{key}\t{load}"))
        .collect();
    lines.join("\n")
}

/// A load report as the heartbeat and beat scripts take it: the weight (empty: no report),
/// the utilisation, the lease loads and the halted leases (each empty when absent).
pub fn report_args(report: Option<&LoadReport>) -> [String; 4] {
    match report {
        None => Default::default(),
        Some(report) => [
            report.weight.to_string(),
            report
                .utilisation
                .map_or_else(String::new, |u| u.to_string()),
            encode_lease_loads(&report.leases),
            encode_lease_keys(&report.halted),
        ],
    }
}

/// Lease keys as one field: the keys joined by `\n`.
pub fn encode_lease_keys(keys: &BTreeSet<LeaseKey>) -> String {
    let keys: Vec<&str> = keys.iter().map(LeaseKey::as_str).collect();
    keys.join("\n")
}

/// A JSON array of strings.
pub fn json_list<'a>(values: impl Iterator<Item = &'a str>) -> String {
    serde_json::Value::Array(values.map(serde_json::Value::from).collect()).to_string()
}

/// Reads fields of one hash, naming the item and the field in every error.
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
        self.item
            .get(field)
            .map(|raw| std::str::from_utf8(raw).map_err(|_| self.err(field, "is not UTF-8 text")))
            .transpose()
    }

    /// A canonical decimal (no sign, no leading zero): what the scripts compare as text.
    fn number<T: std::str::FromStr>(&self, field: &'static str) -> Result<Option<T>, StoreError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        let canonical = text == "0"
            || (!text.starts_with('0')
                && !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit()));
        match text.parse() {
            Ok(value) if canonical => Ok(Some(value)),
            _ => Err(self.err(
                field,
                format!("{text:?} is not a {}", std::any::type_name::<T>()),
            )),
        }
    }

    /// A counter the scripts raise with `HINCRBY`.
    fn counter(&self, field: &'static str) -> Result<Option<u64>, StoreError> {
        match self.number::<u64>(field)? {
            Some(value) if value > MAX_COUNTER => {
                Err(self.err(field, format!("{value} is above {MAX_COUNTER}")))
            }
            other => Ok(other),
        }
    }

    fn required(&self, field: &'static str) -> Result<u64, StoreError> {
        self.counter(field)?
            .ok_or_else(|| self.err(field, "is missing"))
    }

    fn float(&self, field: &'static str) -> Result<Option<f64>, StoreError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(Some(value)),
            _ => Err(self.err(field, format!("{text:?} is not a finite number"))),
        }
    }

    /// A load report's figure: a finite number above 0 (`positive`) or at least 0.
    fn figure(&self, field: &'static str, text: &str, positive: bool) -> Result<f64, StoreError> {
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() && (v > 0.0 || (!positive && v >= 0.0)) => Ok(v),
            _ if positive => Err(self.err(field, format!("{text:?} is not a number above 0"))),
            _ => Err(self.err(field, format!("{text:?} is not a number of at least 0"))),
        }
    }

    fn weight(&self) -> Result<Option<f64>, StoreError> {
        self.string(WEIGHT)?
            .map(|text| self.figure(WEIGHT, text, true))
            .transpose()
    }

    /// The lease loads: lines `<lease key>\t<number>` joined by `\n`, at least one, no key
    /// twice (the scripts' `lease_loads` applies the same rules).
    fn lease_loads(&self) -> Result<BTreeMap<LeaseKey, f64>, StoreError> {
        let Some(text) = self.string(LEASE_LOADS)? else {
            return Ok(BTreeMap::new());
        };
        let mut loads = BTreeMap::new();
        for line in text.split('\n') {
            let Some((key, load)) = line.split_once('\t') else {
                return Err(self.err(
                    LEASE_LOADS,
                    format!("line {line:?} is not a lease key, a tab and a number"),
                ));
            };
            let key = LeaseKey::new(key).map_err(|e| self.err(LEASE_LOADS, e.to_string()))?;
            let load = self.figure(LEASE_LOADS, load, false)?;
            if loads.insert(key.clone(), load).is_some() {
                return Err(self.err(LEASE_LOADS, format!("names lease {key} twice")));
            }
        }
        Ok(loads)
    }

    /// Lease keys joined by `\n`, at least one, none twice (the scripts' `lease_keys` applies
    /// the same rules).
    fn lease_keys(&self, field: &'static str) -> Result<BTreeSet<LeaseKey>, StoreError> {
        let Some(text) = self.string(field)? else {
            return Ok(BTreeSet::new());
        };
        let mut keys = BTreeSet::new();
        for key in text.split('\n') {
            let key = LeaseKey::new(key).map_err(|e| self.err(field, e.to_string()))?;
            if !keys.insert(key.clone()) {
                return Err(self.err(field, format!("names lease {key} twice")));
            }
        }
        Ok(keys)
    }

    fn worker(&self, field: &'static str) -> Result<Option<WorkerId>, StoreError> {
        self.string(field)?
            .map(|v| WorkerId::new(v).map_err(|e| self.err(field, e.to_string())))
            .transpose()
    }

    fn incarnation(&self, field: &'static str) -> Result<Option<Incarnation>, StoreError> {
        Ok(self.number(field)?.map(Incarnation::new))
    }

    fn strings(&self, field: &'static str) -> Result<Vec<String>, StoreError> {
        match self.string(field)? {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(text)
                .map_err(|e| self.err(field, format!("is not a JSON array of strings: {e}"))),
        }
    }

    fn handoff_target(&self) -> Result<Option<WorkerId>, StoreError> {
        self.string(HANDOFF_TO)?
            .map(|v| {
                WorkerId::parse_handoff_target(v).map_err(|e| self.err(HANDOFF_TO, e.to_string()))
            })
            .transpose()
    }
}

/// Decodes any hash of the table.
pub fn decode(item: &Item) -> Result<Decoded, StoreError> {
    let raw_key = match item.get(KEY).map(|raw| std::str::from_utf8(raw)) {
        Some(Ok(key)) => key,
        _ => {
            return Err(StoreError::Malformed {
                key: "<missing>".into(),
                field: KEY,
                reason: "is missing or not UTF-8 text".into(),
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
            load: fields.float(MEMBER_LOAD)?,
            weight: fields.weight()?,
            lease_loads: fields.lease_loads()?,
            halted: fields.lease_keys(HALTED)?,
            capacity: fields.number(CAPACITY)?,
            notices: fields
                .strings(NOTICES)?
                .into_iter()
                .collect::<BTreeSet<_>>(),
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
    let parents = fields
        .strings(PARENTS)?
        .into_iter()
        .map(|p| LeaseKey::new(p).map_err(|e| fields.err(PARENTS, e.to_string())))
        .collect::<Result<_, _>>()?;
    let lease = Lease {
        key,
        owner: fields.worker(OWNER)?,
        owner_incarnation: fields.incarnation(OWNER_INCARNATION)?,
        counter: fields.required(COUNTER)?,
        tenure: fields.required(TENURE)?,
        checkpoint: fields.string(CHECKPOINT)?.map(str::to_owned),
        checkpoint_write: match (
            fields.counter(CHECKPOINT_TENURE)?,
            fields.counter(CHECKPOINT_SEQ)?,
        ) {
            (Some(tenure), Some(seq)) => Some(CheckpointWrite { tenure, seq }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(fields.err(CHECKPOINT_SEQ, "is missing beside checkpointTenure"))
            }
            (None, Some(_)) => {
                return Err(fields.err(CHECKPOINT_TENURE, "is missing beside checkpointSeq"))
            }
        },
        owner_switches_since_checkpoint: fields.counter(OWNER_SWITCHES)?.unwrap_or(0),
        parents,
        handoff_to: fields.handoff_target()?,
        load: fields.float(LEASE_LOAD)?,
        nonce: fields.number(NONCE)?.unwrap_or(0),
    };
    Ok(Decoded::Lease(lease, last_op))
}

/// Decodes a hash that must be a lease.
pub fn decode_lease(item: &Item) -> Result<(Lease, Option<String>), StoreError> {
    decode(item)?.into_lease(KEY)
}

/// Decodes a hash that must be a membership record.
pub fn decode_member(item: &Item) -> Result<(Member, Option<String>), StoreError> {
    decode(item)?.into_member(HEARTBEAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NewLease;

    fn as_item(fields: Vec<(&'static str, String)>) -> Item {
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.into_bytes()))
            .collect()
    }

    fn full_lease() -> Lease {
        let mut lease = NewLease::new(LeaseKey::new("shard-3").unwrap())
            .with_parents(vec![
                LeaseKey::new("shard-1").unwrap(),
                LeaseKey::new("shard \"2\"").unwrap(),
            ])
            .with_checkpoint("49590338271490256608559692538361571095921575989136588898")
            .into_lease();
        lease.owner = Some(WorkerId::new("worker-a").unwrap());
        lease.owner_incarnation = Some(Incarnation::new(u64::MAX));
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
        let item = as_item(encode_lease(&lease, "op-1", "1700000000000"));
        assert_eq!(
            decode(&item).unwrap(),
            Decoded::Lease(lease, Some("op-1".into()))
        );
        let bare = NewLease::new(LeaseKey::new("k").unwrap()).into_lease();
        let item = as_item(encode_lease(&bare, "op-2", "now"));
        assert!(!item.contains_key(OWNER) && !item.contains_key(PARENTS));
        assert_eq!(decode_lease(&item).unwrap().0, bare);
    }

    #[test]
    fn a_membership_record_decodes_and_is_not_a_lease() {
        let item = as_item(vec![
            (KEY, "shardlease#member#w1".into()),
            (HEARTBEAT, "3".into()),
            (CAPACITY, "10".into()),
            (MEMBER_INCARNATION, u64::MAX.to_string()),
            (NOTICES, r#"["b","a"]"#.into()),
            (MEMBER_PROTOCOL, SESSIONS.into()),
        ]);
        let (member, _) = decode_member(&item).unwrap();
        assert_eq!(member.worker.as_str(), "w1");
        assert_eq!((member.heartbeat, member.capacity), (3, Some(10)));
        assert_eq!(member.notices.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(member.session);
        assert!(decode_lease(&item).is_err());
    }

    fn field_of(item: &Item) -> &'static str {
        match decode(item) {
            Err(StoreError::Malformed { field, .. }) => field,
            other => panic!("expected a malformed-item error, got {other:?}"),
        }
    }

    fn with(change: impl FnOnce(&mut Item)) -> Item {
        let mut item = as_item(encode_lease(&full_lease(), "op", "now"));
        change(&mut item);
        item
    }

    fn set(item: &mut Item, field: &str, value: &[u8]) {
        item.insert(field.to_owned(), value.to_vec());
    }

    #[test]
    fn every_malformed_field_is_named() {
        assert_eq!(field_of(&with(|i| drop(i.remove(KEY)))), KEY);
        assert_eq!(field_of(&with(|i| set(i, KEY, b"")),), KEY);
        assert_eq!(field_of(&with(|i| set(i, KEY, b"shardlease#other"))), KEY);
        assert_eq!(field_of(&with(|i| drop(i.remove(COUNTER)))), COUNTER);
        for bad in [
            &b"-1"[..],
            b"007",
            b"1.5",
            b"x",
            b"",
            b"1000000000000000000",
        ] {
            assert_eq!(
                field_of(&with(|i| set(i, COUNTER, bad))),
                COUNTER,
                "{bad:?}"
            );
        }
        assert_eq!(field_of(&with(|i| set(i, TENURE, b"+1"))), TENURE);
        assert_eq!(field_of(&with(|i| set(i, OWNER, b""))), OWNER);
        assert_eq!(field_of(&with(|i| set(i, OWNER, b"a\nb"))), OWNER);
        assert_eq!(field_of(&with(|i| set(i, OWNER, b"\xff"))), OWNER);
        assert_eq!(field_of(&with(|i| set(i, PARENTS, b"[1]"))), PARENTS);
        assert_eq!(field_of(&with(|i| set(i, PARENTS, b"shard-1"))), PARENTS);
        assert_eq!(field_of(&with(|i| set(i, PARENTS, b"[\"\"]"))), PARENTS);
        assert_eq!(field_of(&with(|i| set(i, CHECKPOINT, b"\xc3"))), CHECKPOINT);
        assert_eq!(field_of(&with(|i| set(i, LEASE_LOAD, b"inf"))), LEASE_LOAD);
        assert_eq!(field_of(&with(|i| set(i, HANDOFF_TO, b""))), HANDOFF_TO);
        assert_eq!(
            field_of(&with(|i| set(
                i,
                OWNER_INCARNATION,
                b"18446744073709551616"
            ))),
            OWNER_INCARNATION,
            "one more than u64::MAX"
        );
        assert_eq!(field_of(&with(|i| set(i, NONCE, b"01"))), NONCE);
        let member = |extra: &[(&str, &[u8])]| {
            let mut item = as_item(vec![
                (KEY, "shardlease#member#w".into()),
                (HEARTBEAT, "1".into()),
            ]);
            for (field, value) in extra {
                set(&mut item, field, value);
            }
            item
        };
        assert!(decode_member(&member(&[])).is_ok());
        assert_eq!(field_of(&member(&[(HEARTBEAT, b"")])), HEARTBEAT);
        assert_eq!(
            field_of(&member(&[(MEMBER_INCARNATION, b"0.5")])),
            MEMBER_INCARNATION
        );
        assert_eq!(field_of(&member(&[(CAPACITY, b"4294967296")])), CAPACITY);
        assert_eq!(field_of(&member(&[(NOTICES, b"{}")])), NOTICES);
        assert_eq!(
            field_of(&member(&[(MEMBER_PROTOCOL, b"gossip")])),
            MEMBER_PROTOCOL
        );
        assert_eq!(field_of(&member(&[(MEMBER_LOAD, b"NaN")])), MEMBER_LOAD);
        for bad in [&b"0"[..], b"-1", b"inf", b"", b" 1"] {
            assert_eq!(field_of(&member(&[(WEIGHT, bad)])), WEIGHT, "{bad:?}");
        }
        for bad in [
            &b""[..],
            b"k",
            b"k\t",
            b"k\t-1",
            b"k\t1\n",
            b"\t1",
            b"k\t1\nk\t2",
            b"k\t1\t2",
            b"k\r\t1",
        ] {
            assert_eq!(
                field_of(&member(&[(LEASE_LOADS, bad)])),
                LEASE_LOADS,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_load_report_survives_a_round_trip() {
        let report = LoadReport {
            weight: 0.75,
            utilisation: Some(3.0),
            leases: BTreeMap::from([
                (LeaseKey::new("shard a=b:c").unwrap(), 1e21),
                (LeaseKey::new("shard-2").unwrap(), 0.0),
            ]),
            halted: BTreeSet::from([
                LeaseKey::new("shard a=b:c").unwrap(),
                LeaseKey::new("shard-2").unwrap(),
            ]),
        };
        let [weight, utilisation, loads, halted] = report_args(Some(&report));
        let item = as_item(vec![
            (KEY, "shardlease#member#w".into()),
            (HEARTBEAT, "1".into()),
            (WEIGHT, weight),
            (MEMBER_LOAD, utilisation),
            (LEASE_LOADS, loads),
            (HALTED, halted),
        ]);
        let (member, _) = decode_member(&item).unwrap();
        assert_eq!(
            (
                member.weight,
                member.load,
                member.lease_loads,
                member.halted
            ),
            (
                Some(report.weight),
                report.utilisation,
                report.leases,
                report.halted
            )
        );
        assert_eq!(report_args(None), <[String; 4]>::default());
    }

    #[test]
    fn a_table_lives_under_one_hash_tag() {
        let layout = Layout::new("shardlease", "orders");
        assert_eq!(layout.item("shard-1"), "shardlease:{orders}:item:shard-1");
        assert_eq!(layout.index(), "shardlease:{orders}:index");
        // A key with braces of its own keeps the table's tag: only the first {...} counts.
        assert!(layout.item("{x}").starts_with("shardlease:{orders}:"));
    }
}
