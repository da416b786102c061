//! # shardlease
//!
//! Leaderless lease coordination for the shards of a stream (Kinesis shards, LogHub shards,
//! Kafka-style partitions, any keyed unit of work) over a lease table with conditional
//! writes: DynamoDB for fleets, an in-memory table for demos, tests and simulation.
//!
//! The entry point today is the [`store::LeaseStore`] trait and its two backends,
//! [`store::memory::InMemoryStore`] and (feature `dynamodb`, on by default)
//! [`store::dynamodb::DynamoStore`]. The smallest working program:
//!
//! ```
//! use std::time::Duration;
//! use shardlease::store::{memory::InMemoryStore, LeaseStore, Outcome};
//! use shardlease::{Incarnation, LeaseKey, NewLease, WorkerId};
//! use tokio::time::Instant;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = InMemoryStore::new();
//! let deadline = Instant::now() + Duration::from_secs(5);
//! let key = LeaseKey::new("shardId-000000000000")?;
//! let me = WorkerId::new("worker-1")?;
//! let process = Incarnation::random(); // tells this process from others with the same id
//!
//! let lease = store.create(NewLease::new(key.clone()), deadline).await?.done().unwrap();
//! let Outcome::Done(mine) = store.take(&key, &me, process, lease.counter, deadline).await? else {
//!     panic!("somebody else took it first");
//! };
//! store.checkpoint(&key, &me, mine.tenure, "seq-42", deadline).await?;
//! assert_eq!(store.get(&key, deadline).await?.unwrap().checkpoint.as_deref(), Some("seq-42"));
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod balance;
pub mod clock;
pub mod config;
pub mod expiry;
pub mod jitter;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod kinesis;
pub mod lease;
pub mod lifecycle;
pub mod source;
pub mod store;
pub mod worker;

pub use config::{ConfigError, Protocol, WorkerConfig};
pub use lease::{
    Incarnation, InvalidId, Lease, LeaseKey, Member, NewLease, Snapshot, WorkerId, SHARD_END,
};
pub use source::{Shard, ShardSource, StaticShardSource};
pub use store::{LeaseStore, Outcome, StoreError, StoreResult};
pub use worker::{LeaseEvent, LeaseGrant, StopReason, Worker};

/// The README's examples, compiled as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
