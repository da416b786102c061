//! KCL's lease table format, as `DynamoDBLeaseSerializer` writes it (KCL 2.x and 3.x,
//! `amazon-kinesis-client/src/main/java/software/amazon/kinesis/leases/dynamodb/`): its
//! attribute names, telling its items from ours, and decoding its leases.
//!
//! KCL keys its table by `leaseKey` (S) like we do, and shares `leaseOwner`, `leaseCounter`,
//! `checkpoint` and `ownerSwitchesSinceCheckpoint` with us, so a KCL table passes our key
//! schema check. Its items never carry our `leaseTenure` or `lastOp`, and always carry
//! attributes we never write (`checkpointSubSequenceNumber` on every KCL 2.x/3.x lease).

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::lease::{LeaseKey, RESERVED_PREFIX};
use crate::store::dynamodb::schema::{self, Item};

/// The KCL lease's checkpoint sub-sequence number: the user record within a KPL-aggregated
/// Kinesis record (N; 0 when not aggregated).
pub const CHECKPOINT_SUB_SEQUENCE: &str = "checkpointSubSequenceNumber";
/// A checkpoint prepared and not yet committed (S).
pub const PENDING_CHECKPOINT: &str = "pendingCheckpoint";
/// The prepared checkpoint's sub-sequence number (N).
pub const PENDING_SUB_SEQUENCE: &str = "pendingCheckpointSubSequenceNumber";
/// The application's state saved with a prepared checkpoint (B; KCL 2.x/3.x writes a number
/// there by mistake, so any type is accepted).
pub const PENDING_STATE: &str = "pendingCheckpointState";
/// Parent shard ids (SS).
pub const PARENT_SHARD_IDS: &str = "parentShardId";
/// Child shard ids, set when the shard ended (SS).
pub const CHILD_SHARD_IDS: &str = "childShardIds";
/// The shard's hash key range (S, decimal).
pub const STARTING_HASH_KEY: &str = "startingHashKey";
/// The end of the shard's hash key range (S, decimal).
pub const ENDING_HASH_KEY: &str = "endingHashKey";
/// KCL 3.x: the lease's throughput, for its load-based assignment (N).
pub const THROUGHPUT: &str = "throughputKBps";
/// KCL 3.x: the worker that still processes the lease during a graceful handoff to
/// `leaseOwner` (S).
pub const CHECKPOINT_OWNER: &str = "checkpointOwner";
/// KCL 3.x: the kind of item (S): `LEASE`, or, once KCL 3.5 moved its other tables into the
/// lease table, `WORKER_METRIC_STATS`, `LEADER`, `STREAM`, `CLIENT_VERSION_MIGRATION`,
/// `TABLE_MIGRATION`. Absent on leases written before it existed.
pub const ENTITY_TYPE: &str = "entityType";
/// The `entityType` of a lease.
pub const LEASE_ENTITY: &str = "LEASE";
/// A multi-stream application's lease: the stream's identifier (S),
/// `account:stream:creation-epoch` (KCL keeps the name `streamName` for it). Its lease key is
/// the identifier, `:`, the shard id.
pub const STREAM_NAME: &str = "streamName";
/// A multi-stream application's lease: the shard id (S).
pub const SHARD_ID: &str = "shardId";

/// Attributes KCL writes and shardlease never does, most common first.
const KCL_ONLY: &[&str] = &[
    CHECKPOINT_SUB_SEQUENCE,
    PARENT_SHARD_IDS,
    CHILD_SHARD_IDS,
    PENDING_CHECKPOINT,
    PENDING_SUB_SEQUENCE,
    PENDING_STATE,
    STARTING_HASH_KEY,
    ENDING_HASH_KEY,
    THROUGHPUT,
    CHECKPOINT_OWNER,
    ENTITY_TYPE,
];

/// The KCL attribute that shows `item` was written by KCL, not by shardlease: `None` for
/// every item of ours (a lease carries `leaseTenure` and `lastOp`, a membership record the
/// reserved key prefix) and for items that carry none of KCL's own attributes.
pub(crate) fn kcl_attribute(item: &Item) -> Option<&'static str> {
    let ours = item.contains_key(schema::TENURE)
        || item.contains_key(schema::LAST_OP)
        || matches!(item.get(schema::KEY), Some(AttributeValue::S(key)) if key.starts_with(RESERVED_PREFIX));
    if ours {
        return None;
    }
    KCL_ONLY
        .iter()
        .copied()
        .find(|name| item.contains_key(*name))
}

/// The key of an item, as a string for messages.
pub(crate) fn key_of(item: &Item) -> String {
    match item.get(schema::KEY) {
        Some(AttributeValue::S(key)) => key.clone(),
        _ => "<missing>".to_owned(),
    }
}

/// A KCL checkpoint: one of KCL's sentinels (`SentinelCheckpoint`) or a sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum KclCheckpoint {
    /// `TRIM_HORIZON`: nothing processed yet; KCL would start at the oldest record.
    TrimHorizon,
    /// `LATEST`: nothing processed yet; KCL would start at the newest record.
    Latest,
    /// `AT_TIMESTAMP`: nothing processed yet; KCL would start at its configured timestamp
    /// (the timestamp is KCL's configuration, not stored in the lease).
    AtTimestamp,
    /// `SHARD_END`: the shard was processed to its end.
    ShardEnd,
    /// The sequence number of the last record processed (1 to 128 decimal digits).
    Sequence(String),
}

impl KclCheckpoint {
    /// Reads a stored `checkpoint` value; `None` when it is neither a sentinel nor a
    /// sequence number.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "TRIM_HORIZON" => Self::TrimHorizon,
            "LATEST" => Self::Latest,
            "AT_TIMESTAMP" => Self::AtTimestamp,
            "SHARD_END" => Self::ShardEnd,
            digits
                if (1..=128).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Self::Sequence(digits.to_owned())
            }
            _ => return None,
        })
    }
}

impl fmt::Display for KclCheckpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
            Self::AtTimestamp => "AT_TIMESTAMP",
            Self::ShardEnd => "SHARD_END",
            Self::Sequence(number) => number,
        })
    }
}

/// One lease of a KCL table, as KCL stored it.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KclLease {
    /// `leaseKey`: the shard id; in a multi-stream application's table,
    /// `<account>:<stream>:<creation epoch>:<shard id>`.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::key"))]
    pub key: LeaseKey,
    /// `streamName`: a multi-stream application's lease names its stream,
    /// `<account>:<stream>:<creation epoch>`.
    pub stream: Option<String>,
    /// `leaseOwner`: the KCL worker holding it, if any.
    pub owner: Option<String>,
    /// `leaseCounter`.
    pub counter: u64,
    /// `checkpoint`.
    pub checkpoint: KclCheckpoint,
    /// `checkpointSubSequenceNumber` (0 when absent).
    pub sub_sequence_number: u64,
    /// `pendingCheckpoint`: a checkpoint prepared and not committed.
    pub pending_checkpoint: Option<String>,
    /// `pendingCheckpointSubSequenceNumber`.
    pub pending_sub_sequence_number: Option<u64>,
    /// Whether `pendingCheckpointState` is present.
    pub pending_checkpoint_state: bool,
    /// `ownerSwitchesSinceCheckpoint` (0 when absent).
    pub owner_switches_since_checkpoint: u64,
    /// `parentShardId`: the parents' lease keys (KCL stores the parent shards' ids; in a
    /// multi-stream table each is prefixed here with the stream, as the parent's lease key is).
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::keys"))]
    pub parents: Vec<LeaseKey>,
    /// `childShardIds`: the child shards' ids, once the shard ended.
    pub children: Vec<String>,
    /// `checkpointOwner` (KCL 3.x): the worker still processing the lease while it is handed
    /// to `owner`.
    pub checkpoint_owner: Option<String>,
}

/// An item of the KCL table that is not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SkippedItem {
    /// Its `leaseKey`, or `<missing>`.
    pub key: String,
    /// Why it is not a KCL lease we can copy.
    pub reason: String,
}

/// Reads one item of a KCL lease table.
pub(crate) fn decode(item: &Item) -> Result<KclLease, SkippedItem> {
    let key = key_of(item);
    let skip = |reason: String| SkippedItem {
        key: key.clone(),
        reason,
    };
    let raw_key = match item.get(schema::KEY) {
        Some(AttributeValue::S(raw)) => raw.as_str(),
        _ => return Err(skip(format!("{} is missing or not a string", schema::KEY))),
    };
    if item.contains_key(schema::TENURE)
        || item.contains_key(schema::LAST_OP)
        || raw_key.starts_with(RESERVED_PREFIX)
    {
        return Err(skip("a shardlease item, not a KCL lease".into()));
    }
    match item.get(ENTITY_TYPE) {
        None => {}
        Some(AttributeValue::S(kind)) if kind == LEASE_ENTITY => {}
        Some(AttributeValue::S(kind)) => {
            return Err(skip(format!(
                "a KCL {kind} item (KCL 3.x keeps its worker metrics and coordinator state \
                 beside the leases), not a lease"
            )))
        }
        Some(other) => return Err(skip(format!("{ENTITY_TYPE} is not a string: {other:?}"))),
    }
    let fields = Fields { item };
    let stream = multi_stream(&fields, raw_key).map_err(&skip)?;
    let parent_key = |parent: String| {
        let key = match &stream {
            Some(stream) => format!("{stream}:{parent}"),
            None => parent,
        };
        LeaseKey::new(key).map_err(|e| skip(format!("{PARENT_SHARD_IDS}: {e}")))
    };
    let checkpoint_text = fields
        .string(schema::CHECKPOINT)
        .map_err(&skip)?
        .ok_or_else(|| skip(format!("{} is missing", schema::CHECKPOINT)))?;
    let checkpoint = KclCheckpoint::parse(checkpoint_text).ok_or_else(|| {
        skip(format!(
            "{} {checkpoint_text:?} is neither a KCL sentinel nor a sequence number",
            schema::CHECKPOINT
        ))
    })?;
    let lease = KclLease {
        key: LeaseKey::new(raw_key).map_err(|e| skip(e.to_string()))?,
        stream: stream.clone(),
        owner: fields
            .string(schema::OWNER)
            .map_err(&skip)?
            .map(str::to_owned),
        counter: fields
            .number(schema::COUNTER)
            .map_err(&skip)?
            .ok_or_else(|| skip(format!("{} is missing", schema::COUNTER)))?,
        checkpoint,
        sub_sequence_number: fields
            .number(CHECKPOINT_SUB_SEQUENCE)
            .map_err(&skip)?
            .unwrap_or(0),
        pending_checkpoint: fields
            .string(PENDING_CHECKPOINT)
            .map_err(&skip)?
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        pending_sub_sequence_number: fields.number(PENDING_SUB_SEQUENCE).map_err(&skip)?,
        pending_checkpoint_state: item.contains_key(PENDING_STATE),
        owner_switches_since_checkpoint: fields
            .number(schema::OWNER_SWITCHES)
            .map_err(&skip)?
            .unwrap_or(0),
        parents: fields
            .string_set(PARENT_SHARD_IDS)
            .map_err(&skip)?
            .into_iter()
            .map(parent_key)
            .collect::<Result<_, _>>()?,
        children: fields.string_set(CHILD_SHARD_IDS).map_err(&skip)?,
        checkpoint_owner: fields
            .string(CHECKPOINT_OWNER)
            .map_err(&skip)?
            .map(str::to_owned),
    };
    Ok(lease)
}

/// The stream of a multi-stream application's lease (`None` for a single-stream one), checked
/// against its key: `<account>:<stream>:<creation epoch>`, the key being that, `:`, the
/// shard id (which `shardId` repeats, when present).
fn multi_stream(fields: &Fields<'_>, key: &str) -> Result<Option<String>, String> {
    let Some(stream) = fields.string(STREAM_NAME)? else {
        return Ok(None);
    };
    let parts: Vec<&str> = stream.split(':').collect();
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let valid = matches!(parts.as_slice(), [account, name, epoch]
        if digits(account) && !name.is_empty() && digits(epoch));
    if !valid {
        return Err(format!(
            "{STREAM_NAME} {stream:?} is not a KCL stream identifier \
             (<account>:<stream>:<creation epoch>)"
        ));
    }
    let shard = key
        .strip_prefix(stream)
        .and_then(|rest| rest.strip_prefix(':'))
        .filter(|shard| !shard.is_empty() && !shard.contains(':'))
        .ok_or_else(|| {
            format!(
                "{} {key:?} is not {STREAM_NAME} {stream:?}, ':', a shard id",
                schema::KEY
            )
        })?;
    if let Some(named) = fields.string(SHARD_ID)? {
        if named != shard {
            return Err(format!(
                "{SHARD_ID} {named:?} differs from the lease key's shard {shard:?}"
            ));
        }
    }
    Ok(Some(stream.to_owned()))
}

/// Typed reads of a KCL item's attributes; an error is the reason the item is skipped.
struct Fields<'a> {
    item: &'a Item,
}

impl Fields<'_> {
    fn string(&self, name: &str) -> Result<Option<&str>, String> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(value)) => Ok(Some(value)),
            Some(other) => Err(format!("{name} is not a string: {other:?}")),
        }
    }

    fn number(&self, name: &str) -> Result<Option<u64>, String> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(value)) => value
                .parse()
                .map(Some)
                .map_err(|_| format!("{name} {value:?} is not a whole number")),
            Some(other) => Err(format!("{name} is not a number: {other:?}")),
        }
    }

    /// KCL writes its id sets as string sets, sorted here so that a plan reads the same on
    /// every run.
    fn string_set(&self, name: &str) -> Result<Vec<String>, String> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(Vec::new()),
            Some(AttributeValue::Ss(set)) => {
                let mut ids = set.clone();
                ids.sort();
                Ok(ids)
            }
            Some(other) => Err(format!("{name} is not a string set: {other:?}")),
        }
    }
}

/// Lease keys serialized as strings.
#[cfg(feature = "serde")]
pub(super) mod ser {
    use crate::lease::LeaseKey;

    pub(in crate::store::dynamodb::kcl) fn key<S: serde::Serializer>(
        key: &LeaseKey,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(key.as_str())
    }

    pub(in crate::store::dynamodb::kcl) fn keys<S: serde::Serializer>(
        keys: &[LeaseKey],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(keys.iter().map(LeaseKey::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{NewLease, WorkerId};
    use crate::store::dynamodb::schema::{encode_lease, member_key, n, s};

    /// A lease as KCL 2.x writes it at creation (`toDynamoRecord`): a child of one parent,
    /// nothing processed yet.
    fn kcl_item() -> Item {
        Item::from([
            (schema::KEY.into(), s("shardId-000000000003")),
            (schema::COUNTER.into(), n(7)),
            (schema::OWNER.into(), s("kcl-worker-1")),
            (schema::OWNER_SWITCHES.into(), n(2)),
            (schema::CHECKPOINT.into(), s("TRIM_HORIZON")),
            (CHECKPOINT_SUB_SEQUENCE.into(), n(0)),
            (
                PARENT_SHARD_IDS.into(),
                AttributeValue::Ss(vec!["shardId-000000000001".into()]),
            ),
            (STARTING_HASH_KEY.into(), s("0")),
            (
                ENDING_HASH_KEY.into(),
                s("170141183460469231731687303715884105727"),
            ),
        ])
    }

    fn with(change: impl FnOnce(&mut Item)) -> Item {
        let mut item = kcl_item();
        change(&mut item);
        item
    }

    fn reason(item: &Item) -> String {
        match decode(item) {
            Err(skipped) => skipped.reason,
            Ok(lease) => panic!("expected the item to be skipped, decoded {lease:?}"),
        }
    }

    #[test]
    fn kcl_items_are_told_from_ours() {
        assert_eq!(kcl_attribute(&kcl_item()), Some(CHECKPOINT_SUB_SEQUENCE));
        let parent_only = with(|i| drop(i.remove(CHECKPOINT_SUB_SEQUENCE)));
        assert_eq!(kcl_attribute(&parent_only), Some(PARENT_SHARD_IDS));
        let metrics = Item::from([
            (schema::KEY.into(), s("kcl-worker-1")),
            (ENTITY_TYPE.into(), s("WORKER_METRIC_STATS")),
            ("lut".into(), n(1_700_000_000)),
        ]);
        assert_eq!(kcl_attribute(&metrics), Some(ENTITY_TYPE));

        let lease = NewLease::new(LeaseKey::new("shardId-000000000003").unwrap())
            .with_parents(vec![LeaseKey::new("shardId-000000000001").unwrap()])
            .with_checkpoint("4959")
            .into_lease();
        assert_eq!(kcl_attribute(&encode_lease(&lease, "op", "now")), None);
        let member = Item::from([
            (
                schema::KEY.into(),
                s(member_key(&WorkerId::new("w1").unwrap())),
            ),
            (schema::WORKER.into(), s("w1")),
            (schema::HEARTBEAT.into(), n(3)),
        ]);
        assert_eq!(kcl_attribute(&member), None);
        // A half-written item of ours is malformed, not KCL's.
        let ours_without_op =
            Item::from([(schema::KEY.into(), s("k")), (schema::COUNTER.into(), n(1))]);
        assert_eq!(kcl_attribute(&ours_without_op), None);
    }

    #[test]
    fn a_kcl_lease_decodes_with_every_field() {
        let item = with(|i| {
            i.insert(
                schema::CHECKPOINT.into(),
                s("49590338271490256608559692538361571095921575989136588898"),
            );
            i.insert(CHECKPOINT_SUB_SEQUENCE.into(), n(3));
            i.insert(
                PENDING_CHECKPOINT.into(),
                s("49590338271490256608559692538361571095921575989136589000"),
            );
            i.insert(PENDING_SUB_SEQUENCE.into(), n(0));
            i.insert(PENDING_STATE.into(), n(3));
            i.insert(CHECKPOINT_OWNER.into(), s("kcl-worker-2"));
            i.insert(ENTITY_TYPE.into(), s(LEASE_ENTITY));
            i.insert(THROUGHPUT.into(), n(12.5));
        });
        let lease = decode(&item).unwrap();
        assert_eq!(lease.key.as_str(), "shardId-000000000003");
        assert_eq!(lease.owner.as_deref(), Some("kcl-worker-1"));
        assert_eq!(
            (lease.counter, lease.owner_switches_since_checkpoint),
            (7, 2)
        );
        assert_eq!(
            lease.checkpoint,
            KclCheckpoint::Sequence(
                "49590338271490256608559692538361571095921575989136588898".into()
            )
        );
        assert_eq!(lease.sub_sequence_number, 3);
        assert_eq!(
            lease.pending_checkpoint.as_deref(),
            Some("49590338271490256608559692538361571095921575989136589000")
        );
        assert_eq!(lease.pending_sub_sequence_number, Some(0));
        assert!(lease.pending_checkpoint_state);
        assert_eq!(
            lease.parents,
            vec![LeaseKey::new("shardId-000000000001").unwrap()]
        );
        assert_eq!(lease.checkpoint_owner.as_deref(), Some("kcl-worker-2"));
    }

    #[test]
    fn sentinels_and_sequence_numbers_are_read_and_anything_else_refused() {
        for (text, expected) in [
            ("TRIM_HORIZON", Some(KclCheckpoint::TrimHorizon)),
            ("LATEST", Some(KclCheckpoint::Latest)),
            ("AT_TIMESTAMP", Some(KclCheckpoint::AtTimestamp)),
            ("SHARD_END", Some(KclCheckpoint::ShardEnd)),
            ("1", Some(KclCheckpoint::Sequence("1".into()))),
            ("", None),
            ("12a", None),
            ("shardlease#SHARD_END", None),
        ] {
            assert_eq!(KclCheckpoint::parse(text), expected, "{text:?}");
            if let Some(parsed) = expected {
                assert_eq!(parsed.to_string(), text);
            }
        }
        assert_eq!(KclCheckpoint::parse(&"9".repeat(128)).map(|_| ()), Some(()));
        assert_eq!(KclCheckpoint::parse(&"9".repeat(129)), None);
    }

    #[test]
    fn a_multi_stream_lease_keeps_its_key_and_its_parents_are_keyed_with_its_stream() {
        let stream = "123456789012:orders:1700000000";
        let item = with(|i| {
            i.insert(
                schema::KEY.into(),
                s(format!("{stream}:shardId-000000000003")),
            );
            i.insert(STREAM_NAME.into(), s(stream));
            i.insert(SHARD_ID.into(), s("shardId-000000000003"));
        });
        let lease = decode(&item).unwrap();
        assert_eq!(
            lease.key.as_str(),
            "123456789012:orders:1700000000:shardId-000000000003"
        );
        assert_eq!(lease.stream.as_deref(), Some(stream));
        assert_eq!(
            lease.parents,
            vec![LeaseKey::new(format!("{stream}:shardId-000000000001")).unwrap()]
        );
        let mismatched = with(|i| {
            i.insert(
                schema::KEY.into(),
                s(format!("{stream}:shardId-000000000003")),
            );
            i.insert(STREAM_NAME.into(), s(stream));
            i.insert(SHARD_ID.into(), s("shardId-000000000004"));
        });
        assert!(reason(&mismatched).contains("differs from the lease key's shard"));
        assert_eq!(decode(&kcl_item()).unwrap().stream, None);
    }

    #[test]
    fn items_that_are_not_kcl_leases_are_skipped_with_the_reason() {
        assert!(reason(&with(|i| drop(i.remove(schema::KEY)))).contains("leaseKey is missing"));
        assert!(
            reason(&with(|i| drop(i.remove(schema::CHECKPOINT)))).contains("checkpoint is missing")
        );
        assert!(
            reason(&with(|i| drop(i.insert(schema::CHECKPOINT.into(), s("x")))))
                .contains("neither a KCL sentinel nor a sequence number")
        );
        assert!(
            reason(&with(|i| drop(i.remove(schema::COUNTER)))).contains("leaseCounter is missing")
        );
        assert!(
            reason(&with(|i| drop(i.insert(schema::COUNTER.into(), s("7")))))
                .contains("leaseCounter is not a number")
        );
        assert!(reason(&with(|i| drop(
            i.insert(CHECKPOINT_SUB_SEQUENCE.into(), n(-1))
        )))
        .contains("not a whole number"));
        assert!(
            reason(&with(|i| drop(i.insert(PARENT_SHARD_IDS.into(), s("p")))))
                .contains("parentShardId is not a string set")
        );
        assert!(
            reason(&with(|i| drop(i.insert(ENTITY_TYPE.into(), s("LEADER")))))
                .contains("a KCL LEADER item")
        );
        assert!(reason(&with(|i| drop(
            i.insert(STREAM_NAME.into(), s("123:orders:1"))
        )))
        .contains("is not streamName \"123:orders:1\", ':', a shard id"));
        assert!(
            reason(&with(|i| drop(i.insert(STREAM_NAME.into(), s("orders")))))
                .contains("not a KCL stream identifier")
        );
        assert!(
            reason(&with(|i| drop(i.insert(schema::TENURE.into(), n(0)))))
                .contains("a shardlease item")
        );
    }
}
