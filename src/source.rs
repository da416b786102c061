//! Where the set of shards comes from: the [`ShardSource`] trait the discoverer lists, and
//! [`StaticShardSource`], a list the application sets and changes itself.
//!
//! ```
//! use shardlease::source::{Shard, StaticShardSource};
//! use shardlease::LeaseKey;
//!
//! # fn main() -> Result<(), shardlease::lease::InvalidId> {
//! let source = StaticShardSource::new(vec![Shard::new(LeaseKey::new("shard-0")?)]);
//! // Later, while the workers run: shard-0 splits into two children.
//! source.split(&LeaseKey::new("shard-0")?, [LeaseKey::new("shard-1")?, LeaseKey::new("shard-2")?]);
//! assert!(source.get(&LeaseKey::new("shard-0")?).unwrap().closed);
//! assert_eq!(source.get(&LeaseKey::new("shard-2")?).unwrap().parents.len(), 1);
//! # Ok(())
//! # }
//! ```

use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use crate::lease::LeaseKey;
use crate::store::BoxError;

/// One shard as the source lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard's id, used as its lease key.
    pub key: LeaseKey,
    /// The shards it came from: none, one (a split) or two (a merge).
    pub parents: Vec<LeaseKey>,
    /// No more data will arrive (the shard was split, merged or sealed). The application
    /// still reads it to its end and then checkpoints
    /// [`SHARD_END`](crate::lease::SHARD_END).
    pub closed: bool,
}

impl Shard {
    /// An open shard without parents.
    pub fn new(key: LeaseKey) -> Self {
        Self {
            key,
            parents: Vec::new(),
            closed: false,
        }
    }

    /// Sets the parents.
    #[must_use]
    pub fn with_parents(mut self, parents: impl IntoIterator<Item = LeaseKey>) -> Self {
        self.parents = parents.into_iter().collect();
        self
    }

    /// Marks the shard closed.
    #[must_use]
    pub fn closed(mut self) -> Self {
        self.closed = true;
        self
    }
}

/// A failed listing. The discoverer logs it and tries again after a jittered backoff.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The source asked us to slow down (Kinesis `LimitExceededException`): backed off
    /// like any error, and counted apart in the metrics.
    #[error("the shard source is throttling")]
    Throttled(#[source] BoxError),
    /// Any other failure.
    #[error("listing the shards failed")]
    Failed(#[source] BoxError),
}

/// Lists the shards of a stream. The discoverer calls it on one worker of the fleet at a time,
/// every [`discovery_interval`](crate::WorkerConfig::discovery_interval), backing off on errors.
///
/// A listing must contain every shard that still exists, closed ones included, with their
/// parents: a parent that is listed but has no lease and none of whose descendants has one
/// gets a lease, so its data is not skipped.
#[async_trait]
pub trait ShardSource: Send + Sync + 'static {
    /// Every current shard.
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError>;

    /// True when the application wants nothing written before the fleet first read the
    /// source (a Kinesis consumer starting at `Latest`). The discoverer then gives no lease to
    /// a closed shard that has none, whose descendants have none, and whose parents are gone
    /// too (no lease, and not listed or skipped likewise): it closed before the fleet started.
    /// Its children are created without it as a parent, so they start at the application's
    /// initial position instead of replaying their whole retention. Default: false (every
    /// listed shard gets a lease, parents first).
    fn skips_closed_ancestors(&self) -> bool {
        false
    }
}

/// A shard list kept in memory and changed by the application: for a fixed set of work
/// units, for tests, and for sources the application polls itself. Cloning gives another
/// handle on the same list.
#[derive(Debug, Clone, Default)]
pub struct StaticShardSource {
    shards: Arc<RwLock<Vec<Shard>>>,
}

impl StaticShardSource {
    /// A source listing `shards`.
    pub fn new(shards: Vec<Shard>) -> Self {
        Self {
            shards: Arc::new(RwLock::new(shards)),
        }
    }

    /// A source listing open shards with these keys and no parents.
    pub fn from_keys(keys: impl IntoIterator<Item = LeaseKey>) -> Self {
        Self::new(keys.into_iter().map(Shard::new).collect())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Shard>> {
        // Every change is a single push, retain or assignment: a poisoned lock is consistent.
        self.shards.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Shard>> {
        self.shards.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the whole list.
    pub fn set(&self, shards: Vec<Shard>) {
        *self.write() = shards;
    }

    /// Adds a shard, or replaces the one with the same key.
    pub fn add(&self, shard: Shard) {
        let mut shards = self.write();
        match shards.iter_mut().find(|s| s.key == shard.key) {
            Some(existing) => *existing = shard,
            None => shards.push(shard),
        }
    }

    /// Removes a shard from the list (its lease is retired after the grace period).
    pub fn remove(&self, key: &LeaseKey) {
        self.write().retain(|s| s.key != *key);
    }

    /// Closes `parent` and adds `children` with it as their parent.
    pub fn split(&self, parent: &LeaseKey, children: impl IntoIterator<Item = LeaseKey>) {
        self.close(parent);
        for child in children {
            self.add(Shard::new(child).with_parents([parent.clone()]));
        }
    }

    /// Closes `parents` and adds `child` with them as its parents.
    pub fn merge(&self, parents: &[LeaseKey], child: LeaseKey) {
        for parent in parents {
            self.close(parent);
        }
        self.add(Shard::new(child).with_parents(parents.iter().cloned()));
    }

    /// Marks a shard closed.
    pub fn close(&self, key: &LeaseKey) {
        if let Some(shard) = self.write().iter_mut().find(|s| s.key == *key) {
            shard.closed = true;
        }
    }

    /// The shard with this key, if listed.
    pub fn get(&self, key: &LeaseKey) -> Option<Shard> {
        self.read().iter().find(|s| s.key == *key).cloned()
    }

    /// The current list.
    pub fn shards(&self) -> Vec<Shard> {
        self.read().clone()
    }
}

#[async_trait]
impl ShardSource for StaticShardSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        Ok(self.shards())
    }
}

#[async_trait]
impl<S: ShardSource + ?Sized> ShardSource for Arc<S> {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        (**self).list_shards().await
    }

    fn skips_closed_ancestors(&self) -> bool {
        (**self).skips_closed_ancestors()
    }
}
