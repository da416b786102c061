//! The streams a consumer reads: [`StreamConfig`] (a name or an ARN, and the client to read it
//! with), [`StreamId`] (`account:name:creationEpoch`, the stream's part of a multi-stream lease
//! key, as KCL 2.3+ writes it), and where the set of streams comes from: a [`StreamTracker`]
//! that the consumer asks at every discovery round, such as a [`StreamSet`] the application
//! changes at run time.

use std::fmt;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use crate::lease::{InvalidId, LeaseKey};
use crate::store::BoxError;

/// The longest stream name Kinesis takes.
const MAX_NAME: usize = 128;

/// A stream name, an ARN or a stream identifier that Kinesis would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidStream {
    /// Not a stream name: 1 to 128 letters, digits, `_`, `.` or `-`.
    #[error("{name:?} is not a Kinesis stream name (1 to 128 letters, digits, '_', '.' or '-')")]
    Name {
        /// What was given.
        name: String,
    },
    /// Not a stream ARN: `arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>`.
    #[error(
        "{arn:?} is not a Kinesis stream ARN \
         (arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>)"
    )]
    Arn {
        /// What was given.
        arn: String,
    },
    /// Not a stream identifier: `<account>:<name>:<creation epoch>`, both numbers decimal and
    /// the epoch above 0.
    #[error(
        "{identifier:?} is not a stream identifier \
         (<account>:<name>:<creation epoch in seconds, above 0>)"
    )]
    Identifier {
        /// What was given.
        identifier: String,
    },
}

fn is_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_account(account: &str) -> bool {
    !account.is_empty() && account.bytes().all(|b| b.is_ascii_digit())
}

/// The parts of a stream ARN: account and name.
fn parse_arn(arn: &str) -> Option<(&str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("kinesis"), Some(region), Some(account), Some(rest)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let name = rest.strip_prefix("stream/")?;
    let region_ok = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (partition.starts_with("aws")
        && region_ok
        && account.len() == 12
        && is_account(account)
        && is_name(name))
    .then_some((account, name))
}

/// One stream for a consumer to read: by name, or by ARN (then every Kinesis call for it
/// names `StreamARN`, which reading another account's stream through its resource policy
/// needs), with the Kinesis client to read it with (another account's credentials, another
/// region) if not the consumer's own.
#[derive(Clone)]
pub struct StreamConfig {
    name: String,
    arn: Option<String>,
    account: Option<String>,
    creation_epoch: Option<u64>,
    client: Option<aws_sdk_kinesis::Client>,
}

impl fmt::Debug for StreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamConfig")
            .field("name", &self.name)
            .field("arn", &self.arn)
            .field("account", &self.account)
            .field("creation_epoch", &self.creation_epoch)
            .field("own_client", &self.client.is_some())
            .finish()
    }
}

impl PartialEq for StreamConfig {
    /// Two configurations name the same stream (the clients are not compared).
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.arn == other.arn
            && self.account == other.account
            && self.creation_epoch == other.creation_epoch
    }
}

impl StreamConfig {
    /// A stream by name (`orders`) or by ARN
    /// (`arn:aws:kinesis:eu-west-1:111122223333:stream/orders`).
    pub fn new(name_or_arn: impl AsRef<str>) -> Result<Self, InvalidStream> {
        let given = name_or_arn.as_ref();
        if given.starts_with("arn:") {
            let (account, name) = parse_arn(given).ok_or_else(|| InvalidStream::Arn {
                arn: given.to_owned(),
            })?;
            return Ok(Self {
                name: name.to_owned(),
                arn: Some(given.to_owned()),
                account: Some(account.to_owned()),
                creation_epoch: None,
                client: None,
            });
        }
        if !is_name(given) {
            return Err(InvalidStream::Name {
                name: given.to_owned(),
            });
        }
        Ok(Self {
            name: given.to_owned(),
            arn: None,
            account: None,
            creation_epoch: None,
            client: None,
        })
    }

    /// A stream by KCL's serialized identifier, `<account>:<name>:<creation epoch>` (the
    /// `streamName` attribute of a KCL multi-stream lease). Its leases are keyed with exactly
    /// this identifier, whatever the stream's creation time is now.
    pub fn from_identifier(identifier: &str) -> Result<Self, InvalidStream> {
        let id = StreamId::parse(identifier)?;
        Ok(Self {
            name: id.name,
            arn: None,
            account: Some(id.account),
            creation_epoch: Some(id.creation_epoch),
            client: None,
        })
    }

    /// Keys the stream's leases with this creation time (seconds since the epoch) instead of
    /// the one Kinesis reports (`StreamCreationTimestamp`): for leases a KCL application
    /// created with an epoch of its own choosing.
    #[must_use]
    pub fn creation_epoch(mut self, seconds: u64) -> Self {
        self.creation_epoch = Some(seconds);
        self
    }

    /// Reads the stream with this client (credentials of another account, another region or
    /// endpoint) instead of the consumer's own.
    #[must_use]
    pub fn client(mut self, client: aws_sdk_kinesis::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream's ARN, if it was given one.
    pub fn arn(&self) -> Option<&str> {
        self.arn.as_deref()
    }

    /// The account given (by the ARN or the identifier), if any.
    pub fn account(&self) -> Option<&str> {
        self.account.as_deref()
    }

    /// The creation epoch given, if any.
    pub fn given_creation_epoch(&self) -> Option<u64> {
        self.creation_epoch
    }

    /// The client given, if any.
    pub(crate) fn own_client(&self) -> Option<&aws_sdk_kinesis::Client> {
        self.client.as_ref()
    }

    /// True when `name_or_arn` names this stream (its name, or its ARN).
    pub fn is(&self, name_or_arn: &str) -> bool {
        self.name == name_or_arn || self.arn.as_deref() == Some(name_or_arn)
    }
}

/// A stream as a multi-stream lease key names it: `<account>:<name>:<creation epoch>`, KCL's
/// `StreamIdentifier`. A stream deleted and created again under the same name has another
/// creation epoch, so its leases are other leases.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    /// The AWS account that owns the stream (12 digits on AWS).
    pub account: String,
    /// The stream's name.
    pub name: String,
    /// When the stream was created, in seconds since the epoch.
    pub creation_epoch: u64,
}

impl StreamId {
    /// Reads `<account>:<name>:<creation epoch>`.
    pub fn parse(identifier: &str) -> Result<Self, InvalidStream> {
        let invalid = || InvalidStream::Identifier {
            identifier: identifier.to_owned(),
        };
        let mut parts = identifier.split(':');
        let (Some(account), Some(name), Some(epoch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let epoch = epoch
            .parse::<u64>()
            .ok()
            .filter(|e| *e > 0 && epoch.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(invalid)?;
        if !is_account(account) || !is_name(name) {
            return Err(invalid());
        }
        Ok(Self {
            account: account.to_owned(),
            name: name.to_owned(),
            creation_epoch: epoch,
        })
    }

    /// The lease key of one of the stream's shards: `<account>:<name>:<epoch>:<shard id>`.
    pub fn lease_key(&self, shard_id: &str) -> Result<LeaseKey, InvalidId> {
        LeaseKey::new(format!("{self}:{shard_id}"))
    }

    /// The stream and the shard id of a multi-stream lease key; `None` for a key of another
    /// form (a single-stream consumer's keys are plain shard ids).
    pub fn split_lease_key(key: &LeaseKey) -> Option<(Self, &str)> {
        let key = key.as_str();
        let (stream, shard) = key.rsplit_once(':')?;
        if shard.is_empty() {
            return None;
        }
        Some((Self::parse(stream).ok()?, shard))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.account, self.name, self.creation_epoch)
    }
}

/// Where a multi-stream consumer learns which streams to read. It is asked on the worker that
/// runs the fleet's discovery at every discovery round
/// ([`discovery_interval`](crate::WorkerConfig::discovery_interval)), and on any worker that
/// acquires a lease of a stream it does not know yet. Give every worker of the application the
/// same streams.
///
/// A stream that appears gets leases for its shards at the next round. A stream that
/// disappears is read on for [`removed_stream_wait`](super::ConsumerConfig::removed_stream_wait),
/// then its leases are retired as those of vanished shards are: after
/// [`retire_after`](crate::WorkerConfig::retire_after) each held lease's processor is asked to
/// stop ([`StopReason::Retired`](crate::worker::StopReason::Retired)) and may checkpoint, and
/// the lease is deleted. Added again before then, it is read on from its checkpoints.
#[async_trait]
pub trait StreamTracker: Send + Sync + 'static {
    /// The streams to read now. An error keeps the streams of the last answer (and is
    /// reported as a [`ConsumerEvent::StreamFailed`](super::ConsumerEvent::StreamFailed)).
    async fn streams(&self) -> Result<Vec<StreamConfig>, BoxError>;
}

/// A set of streams kept in memory and changed by the application at run time. Cloning gives
/// another handle on the same set.
///
/// ```
/// use shardlease::kinesis::{StreamConfig, StreamSet};
///
/// # fn main() -> Result<(), shardlease::kinesis::InvalidStream> {
/// let streams = StreamSet::new([
///     StreamConfig::new("orders")?,
///     StreamConfig::new("arn:aws:kinesis:eu-west-1:111122223333:stream/payments")?,
/// ]);
/// // Later, while the consumer runs: its leases are created within a discovery interval.
/// streams.add(StreamConfig::new("refunds")?);
/// // Its leases are retired (each processor asked to stop and checkpoint, then deleted).
/// streams.remove("orders");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct StreamSet {
    streams: Arc<RwLock<Vec<StreamConfig>>>,
}

impl StreamSet {
    /// A set of these streams.
    pub fn new(streams: impl IntoIterator<Item = StreamConfig>) -> Self {
        let set = Self::default();
        for stream in streams {
            set.add(stream);
        }
        set
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<StreamConfig>> {
        // Every change is a single push, retain or assignment: a poisoned lock is consistent.
        self.streams.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a stream, or replaces the one with its name (and account, when one was given).
    pub fn add(&self, stream: StreamConfig) {
        let mut streams = self.write();
        match streams
            .iter_mut()
            .find(|s| s.name == stream.name && s.account == stream.account)
        {
            Some(existing) => *existing = stream,
            None => streams.push(stream),
        }
    }

    /// Removes the stream with this name or ARN; true if it was there.
    pub fn remove(&self, name_or_arn: &str) -> bool {
        let mut streams = self.write();
        let before = streams.len();
        streams.retain(|s| !s.is(name_or_arn));
        streams.len() != before
    }

    /// The streams now.
    pub fn streams(&self) -> Vec<StreamConfig> {
        self.streams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl StreamTracker for StreamSet {
    async fn streams(&self) -> Result<Vec<StreamConfig>, BoxError> {
        Ok(StreamSet::streams(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_an_arn_and_an_identifier_are_read_or_refused() {
        let by_name = StreamConfig::new("orders.v2_x-1").unwrap();
        assert_eq!(
            (by_name.name(), by_name.arn(), by_name.account()),
            ("orders.v2_x-1", None, None)
        );
        let arn = "arn:aws:kinesis:eu-west-1:111122223333:stream/orders";
        let by_arn = StreamConfig::new(arn).unwrap();
        assert_eq!(
            (by_arn.name(), by_arn.arn(), by_arn.account()),
            ("orders", Some(arn), Some("111122223333"))
        );
        assert!(StreamConfig::new("arn:aws-cn:kinesis:cn-north-1:111122223333:stream/o").is_ok());
        for bad in [
            "",
            "with space",
            "a:b",
            &"x".repeat(129),
            "arn:aws:kinesis:eu-west-1:1111:stream/orders",
            "arn:aws:kinesis:eu-west-1:111122223333:table/orders",
            "arn:aws:sqs:eu-west-1:111122223333:stream/orders",
            "arn:aws:kinesis::111122223333:stream/orders",
            "arn:aws:kinesis:eu-west-1:111122223333:stream/",
            "arn:aws:kinesis:eu-west-1:111122223333:stream/a/b",
        ] {
            assert!(StreamConfig::new(bad).is_err(), "{bad:?}");
        }
        let kcl = StreamConfig::from_identifier("123456789012:orders:1700000000").unwrap();
        assert_eq!(
            (kcl.name(), kcl.account(), kcl.given_creation_epoch()),
            ("orders", Some("123456789012"), Some(1_700_000_000))
        );
        for bad in [
            "123:orders",
            "123:orders:0",
            "123:orders:-1",
            "123:orders:+1",
            "x:orders:1",
            "123:or ders:1",
            "123:orders:1:shardId-0",
        ] {
            assert!(StreamConfig::from_identifier(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_multi_stream_lease_key_splits_into_its_stream_and_shard() {
        let id = StreamId::parse("123456789012:orders:1700000000").unwrap();
        let key = id.lease_key("shardId-000000000007").unwrap();
        assert_eq!(
            key.as_str(),
            "123456789012:orders:1700000000:shardId-000000000007"
        );
        let (stream, shard) = StreamId::split_lease_key(&key).unwrap();
        assert_eq!((stream, shard), (id, "shardId-000000000007"));
        for plain in [
            "shardId-000000000007",
            "a:b",
            "1:orders:0:shard",
            "1:orders:5:",
        ] {
            let key = LeaseKey::new(plain).unwrap();
            assert_eq!(StreamId::split_lease_key(&key), None, "{plain:?}");
        }
    }

    #[test]
    fn a_stream_set_adds_replaces_and_removes_by_name_or_arn() {
        let arn = "arn:aws:kinesis:eu-west-1:111122223333:stream/payments";
        let set = StreamSet::new([
            StreamConfig::new("orders").unwrap(),
            StreamConfig::new(arn).unwrap(),
        ]);
        set.add(StreamConfig::new("orders").unwrap().creation_epoch(7));
        let now = set.streams();
        assert_eq!(now.len(), 2);
        assert_eq!(now[0].given_creation_epoch(), Some(7));
        assert!(set.remove(arn));
        assert!(!set.remove(arn));
        assert!(set.remove("orders"));
        assert!(set.streams().is_empty());
    }
}
