//! Records aggregated in the Kinesis Producer Library's format: one Kinesis record that holds
//! many user records. The KPL writes it, and so do the producers that share its format (the
//! kinesis-aggregation libraries, aws-for-fluent-bit with aggregation on). A record is an
//! aggregate when its data is the magic `F3 89 9A C2`, a protobuf `AggregatedRecord`, and the
//! MD5 digest of that protobuf.
//!
//! Each user record is delivered as a [`KinesisRecord`] of its own, with the aggregate's
//! sequence number and its index in the aggregate as its sub-sequence number, as KCL delivers
//! them:
//!
//! - a record with the magic whose digest does not match, or whose protobuf does not parse,
//!   is delivered as it is (it may be a user's payload that starts with the same four bytes);
//! - an aggregate holding a user record whose hash key is outside the shard's range is
//!   dropped whole: KCL removes the user records it took from the aggregate so far and skips
//!   the rest. The KPL puts an aggregate on the shard of its records' hash keys; one that holds
//!   a key of another shard was written for a shard map that has changed since.

use md5::{Digest, Md5};
use prost::Message;

use super::processor::KinesisRecord;

/// The first four bytes of an aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// The length of the MD5 digest that ends an aggregated record.
const DIGEST_LEN: usize = 16;

/// The protobuf of an aggregated record (the KPL's `messages.proto`, proto2).
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<UserRecord>,
}

#[derive(Clone, PartialEq, Message)]
struct UserRecord {
    #[prost(uint64, required, tag = "1")]
    partition_key_index: u64,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", required, tag = "3")]
    data: Vec<u8>,
    #[prost(message, repeated, tag = "4")]
    tags: Vec<Tag>,
}

#[derive(Clone, PartialEq, Message)]
struct Tag {
    #[prost(string, required, tag = "1")]
    key: String,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
}

/// A shard's range of hash keys, both ends included (`HashKeyRange` of `ListShards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashKeyRange {
    /// The smallest hash key of the shard.
    pub start: u128,
    /// The largest hash key of the shard.
    pub end: u128,
}

impl HashKeyRange {
    /// The range of `ListShards`' decimal strings; `None` if either is not a 128-bit number.
    pub fn parse(start: &str, end: &str) -> Option<Self> {
        Some(Self {
            start: start.parse().ok()?,
            end: end.parse().ok()?,
        })
    }

    fn contains(&self, key: u128) -> bool {
        self.start <= key && key <= self.end
    }
}

/// What became of one Kinesis record.
#[derive(Debug, PartialEq)]
pub(crate) enum Expanded {
    /// Not an aggregate: delivered as it is.
    Plain(KinesisRecord),
    /// The user records of an aggregate, in order.
    Aggregate(Vec<KinesisRecord>),
    /// It starts with the magic but is no aggregate (why): delivered as it is.
    Corrupt(KinesisRecord, &'static str),
    /// An aggregate with a user record outside the shard's range: dropped whole, as KCL
    /// does; the user records it held.
    OutOfRange(usize),
}

/// Expands `record` into the user records it holds (see the module's doc). With `range`, an
/// aggregate holding a user record hashed outside it is dropped.
pub(crate) fn expand(record: KinesisRecord, range: Option<HashKeyRange>) -> Expanded {
    let data = &record.data;
    if data.len() < MAGIC.len() + DIGEST_LEN || data[..MAGIC.len()] != MAGIC {
        return Expanded::Plain(record);
    }
    let (body, digest) = data[MAGIC.len()..].split_at(data.len() - MAGIC.len() - DIGEST_LEN);
    if Md5::digest(body).as_slice() != digest {
        return Expanded::Corrupt(record, "its MD5 digest does not match");
    }
    let Ok(aggregate) = AggregatedRecord::decode(body) else {
        return Expanded::Corrupt(record, "its protobuf does not parse");
    };
    let count = aggregate.records.len();
    match users(&record, aggregate, range) {
        Ok(users) => Expanded::Aggregate(users),
        Err(Refused::OutOfRange) => Expanded::OutOfRange(count),
        Err(Refused::Corrupt(why)) => Expanded::Corrupt(record, why),
    }
}

/// Why an aggregate's user records are not delivered.
enum Refused {
    OutOfRange,
    Corrupt(&'static str),
}

/// The user records of `aggregate`, read from `record`.
fn users(
    record: &KinesisRecord,
    aggregate: AggregatedRecord,
    range: Option<HashKeyRange>,
) -> Result<Vec<KinesisRecord>, Refused> {
    let AggregatedRecord {
        partition_key_table: keys,
        explicit_hash_key_table: hash_keys,
        records,
    } = aggregate;
    let mut users = Vec::with_capacity(records.len());
    for (index, user) in records.into_iter().enumerate() {
        let partition_key = usize::try_from(user.partition_key_index)
            .ok()
            .and_then(|i| keys.get(i))
            .ok_or(Refused::Corrupt(
                "a partition key index is out of its table",
            ))?;
        let explicit_hash_key = match user.explicit_hash_key_index {
            None => None,
            Some(i) => Some(
                usize::try_from(i)
                    .ok()
                    .and_then(|i| hash_keys.get(i))
                    .ok_or(Refused::Corrupt(
                        "an explicit hash key index is out of its table",
                    ))?,
            ),
        };
        if let Some(range) = range {
            let hash = effective_hash_key(partition_key, explicit_hash_key.map(String::as_str))
                .ok_or(Refused::Corrupt(
                    "an explicit hash key is not a 128-bit number",
                ))?;
            if !range.contains(hash) {
                return Err(Refused::OutOfRange);
            }
        }
        users.push(KinesisRecord {
            sequence_number: record.sequence_number.clone(),
            sub_sequence_number: Some(index as u64),
            partition_key: partition_key.clone(),
            explicit_hash_key: explicit_hash_key.cloned(),
            data: user.data,
            approximate_arrival: record.approximate_arrival,
        });
    }
    Ok(users)
}

/// The hash key Kinesis places a record by: its explicit hash key, else the MD5 digest of its
/// partition key as a big-endian 128-bit number.
fn effective_hash_key(partition_key: &str, explicit_hash_key: Option<&str>) -> Option<u128> {
    match explicit_hash_key {
        Some(key) => key.parse().ok(),
        None => Some(u128::from_be_bytes(
            Md5::digest(partition_key.as_bytes()).into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each fixture is one record's data written by the kinesis-aggregation project's Python
    /// producer (`scripts/kpl_fixtures.py`); `expected.json` is what it holds.
    const THREE: &[u8] = include_bytes!("../../tests/data/kpl/three.bin");
    const HASHED: &[u8] = include_bytes!("../../tests/data/kpl/hashed.bin");
    const MANY: &[u8] = include_bytes!("../../tests/data/kpl/many.bin");
    const BAD_DIGEST: &[u8] = include_bytes!("../../tests/data/kpl/bad-digest.bin");
    const EXPECTED: &str = include_str!("../../tests/data/kpl/expected.json");

    const SEQUENCE: &str = "49590338271490256608559692538361571095921575989136588898";

    fn record(data: &[u8]) -> KinesisRecord {
        KinesisRecord {
            sequence_number: SEQUENCE.to_owned(),
            sub_sequence_number: None,
            partition_key: "outer".to_owned(),
            explicit_hash_key: None,
            data: data.to_vec(),
            approximate_arrival: None,
        }
    }

    fn users(expanded: Expanded) -> Vec<KinesisRecord> {
        match expanded {
            Expanded::Aggregate(users) => users,
            other => panic!("not an aggregate: {other:?}"),
        }
    }

    /// The fixture's user records as the producer's project reads them back.
    fn expected(name: &str) -> Vec<KinesisRecord> {
        let all: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
        all[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|user| KinesisRecord {
                sequence_number: SEQUENCE.to_owned(),
                sub_sequence_number: user["sub_sequence_number"].as_u64(),
                partition_key: user["partition_key"].as_str().unwrap().to_owned(),
                explicit_hash_key: user["explicit_hash_key"].as_str().map(str::to_owned),
                data: user["data"].as_str().unwrap().as_bytes().to_vec(),
                approximate_arrival: None,
            })
            .collect()
    }

    #[test]
    fn an_aggregate_of_another_producer_expands_as_that_producer_reads_it() {
        assert_eq!(users(expand(record(THREE), None)), expected("three.bin"));
        assert_eq!(users(expand(record(HASHED), None)), expected("hashed.bin"));
        let many = users(expand(record(MANY), None));
        assert_eq!(many.len(), 1000);
        for (i, user) in many.iter().enumerate() {
            assert_eq!(user.sub_sequence_number, Some(i as u64));
            assert_eq!(user.partition_key, format!("key-{}", i % 7));
            assert_eq!(user.data, i.to_string().as_bytes());
        }
    }

    #[test]
    fn a_record_that_is_not_an_aggregate_is_delivered_as_it_is() {
        for data in [&b"plain"[..], &[], &MAGIC[..], &THREE[..19]] {
            assert_eq!(expand(record(data), None), Expanded::Plain(record(data)));
        }
    }

    #[test]
    fn an_aggregate_whose_digest_does_not_match_is_delivered_as_it_is() {
        assert_eq!(
            expand(record(BAD_DIGEST), None),
            Expanded::Corrupt(record(BAD_DIGEST), "its MD5 digest does not match")
        );
        // The magic, a body that is no protobuf, and its true digest.
        let body = [0xFF, 0xFF, 0xFF];
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&body);
        data.extend_from_slice(&Md5::digest(body));
        assert_eq!(
            expand(record(&data), None),
            Expanded::Corrupt(record(&data), "its protobuf does not parse")
        );
    }

    #[test]
    fn an_aggregate_with_a_record_outside_the_shards_range_is_dropped_whole() {
        // Explicit hash keys 10, 20 and 30.
        let holds_all = HashKeyRange { start: 10, end: 30 };
        assert_eq!(users(expand(record(HASHED), Some(holds_all))).len(), 3);
        let first_two = HashKeyRange { start: 0, end: 25 };
        assert_eq!(
            expand(record(HASHED), Some(first_two)),
            Expanded::OutOfRange(3)
        );
        let last_two = HashKeyRange {
            start: 15,
            end: u128::MAX,
        };
        assert_eq!(
            expand(record(HASHED), Some(last_two)),
            Expanded::OutOfRange(3)
        );
    }

    #[test]
    fn a_partition_key_is_placed_by_its_md5_digest() {
        let hash = effective_hash_key("pk-0", None).unwrap();
        assert_eq!(hash.to_be_bytes(), <[u8; 16]>::from(Md5::digest(b"pk-0")));
        let whole = HashKeyRange {
            start: 0,
            end: u128::MAX,
        };
        assert_eq!(users(expand(record(THREE), Some(whole))).len(), 3);
        let elsewhere = HashKeyRange {
            start: hash + 1,
            end: u128::MAX,
        };
        assert_eq!(
            expand(record(THREE), Some(elsewhere)),
            Expanded::OutOfRange(3)
        );
        assert_eq!(effective_hash_key("pk", Some("12")), Some(12));
        assert_eq!(effective_hash_key("pk", Some("twelve")), None);
    }

    #[test]
    fn a_range_reads_the_decimal_strings_of_list_shards() {
        let range = HashKeyRange::parse("0", "340282366920938463463374607431768211455").unwrap();
        assert_eq!((range.start, range.end), (0, u128::MAX));
        assert_eq!(
            HashKeyRange::parse("0", "340282366920938463463374607431768211456"),
            None
        );
    }
}
