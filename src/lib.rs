//! # shardlease
//!
//! Leaderless lease coordination for the shards of a stream (Kinesis shards, LogHub shards,
//! Kafka-style partitions, any keyed unit of work): every worker of a fleet keeps its leases
//! alive, takes expired or unowned ones and balances the fleet on its own, through a lease
//! table written only with single-item conditional writes. A lease moved for balance is
//! handed over gracefully (the old owner checkpoints, then the new one starts); a worker that
//! cannot prove it still owns a lease stops work on it.
//!
//! ## Where to start
//!
//! - **Any keyed units of work**: a [`Worker`] over a [`LeaseStore`]. The worker gives the
//!   application one [`LeaseEvent::Acquired`] per lease it may work on, with a [`LeaseGrant`]:
//!   where to resume ([`LeaseGrant::initial_checkpoint`]), a fenced
//!   [`checkpoint`](LeaseGrant::checkpoint), and [`stopped`](LeaseGrant::stopped), which says
//!   when and why to stop ([`StopReason`]).
//! - **A Kinesis stream**: `kinesis::KinesisConsumer` (feature `kinesis`): a worker whose
//!   leases follow the stream's shards, and a record loop per lease calling your
//!   `kinesis::RecordProcessor`.
//!
//! ```
//! use std::sync::Arc;
//! use shardlease::store::memory::InMemoryStore;
//! use shardlease::{LeaseEvent, LeaseKey, StopReason, Worker, WorkerConfig, WorkerId};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(InMemoryStore::new()); // or DynamoStore, or your own LeaseStore
//! let shards = vec![LeaseKey::new("shard-0")?, LeaseKey::new("shard-1")?];
//! let (worker, mut events) = Worker::builder(store, WorkerId::new("host-a")?)
//!     .config(WorkerConfig::default()) // a 10 s lease; every field has a setter
//!     .shards(shards)
//!     .start()
//!     .await?;
//! while let Some(event) = events.recv().await {
//!     if let LeaseEvent::Acquired(mut grant) = event {
//!         tokio::spawn(async move {
//!             // ... work on grant.key() from grant.initial_checkpoint() on ...
//!             let reason = grant.stopped().await; // a handoff, a shutdown, a loss
//!             if !matches!(reason, StopReason::Lost) {
//!                 let _ = grant.checkpoint("where-I-stopped").await;
//!             }
//!             grant.finish(); // hand the lease over (or release it) now
//!         });
//!     }
//!     if worker.held_leases().len() == 2 {
//!         break;
//!     }
//! }
//! worker.shutdown().await; // every grant is asked to stop; leases released; the worker leaves
//! # Ok(())
//! # }
//! ```
//!
//! ## The pieces
//!
//! | you need | use |
//! |---|---|
//! | a lease table | [`store::memory::InMemoryStore`] (demos, tests, simulation), [`DynamoStore`](store::dynamodb::DynamoStore) (feature `dynamodb`, on by default), or your own [`LeaseStore`] (check it with the conformance suite in `tests/conformance/`) |
//! | configuration | [`WorkerConfig`] (every duration and limit, each with a setter; [`ConfigError`] names the field at fault) |
//! | the leases to hold | [`WorkerBuilder::shards`](worker::WorkerBuilder::shards) for a fixed set, or a [`ShardSource`] the discoverer follows (new, split, merged and vanished shards, children after their parents) |
//! | to leave | [`Worker::shutdown`], or [`graceful_shutdown_on`](worker::WorkerBuilder::graceful_shutdown_on) a signal, then [`Worker::stopped`] |
//! | what happens to the leases | the [`LeaseEvents`] stream [`WorkerBuilder::start`] returns beside the worker |
//! | health and metrics | [`Worker::monitor`] ([`worker::WorkerMonitor::ready`] and [`healthy`](worker::WorkerMonitor::healthy) for probes); metric names in [`metrics`] |
//! | another balance | [`balance::BalancePolicy`] |
//! | a simulation | [`clock::Clock`], and `clock::seed_thread` (feature `testing`) |
//!
//! ## Features
//!
//! - `dynamodb` (default): [`DynamoStore`](store::dynamodb::DynamoStore), on the AWS SDK.
//! - `kinesis`: the Kinesis consumer, `kinesis::KinesisConsumer`.
//! - `redis`: `store::redis::RedisStore`, the lease table in Redis (one Lua script per
//!   conditional write; see `docs/ARCHITECTURE.md`, "Redis durability", before production).
//! - `loghub`: nothing in the library; the Aliyun LogHub SDK for `examples/loghub_source.rs`,
//!   a [`ShardSource`] over a logstore's shards.
//! - `testing`: test machinery: `store::fault::FaultyStore`, a store layer that cuts off,
//!   delays, hangs or loses answers, and `clock::seed_thread`, which makes a simulation on one
//!   thread replay exactly.
//!
//! ## What is guaranteed
//!
//! Every write is conditional on what the writer last saw, and each worker judges expiry on
//! its own monotonic clock, so no two workers are ever told they hold one lease at once as
//! long as clocks run at nearly the same rate (within `drift_allowance` over a lease
//! duration): a worker that cannot beat its session in time stops work before its leases can be
//! taken.
//! The fault model, every condition expression and why is in `docs/ARCHITECTURE.md`.
// Without the `dynamodb` feature the crate doc's links to the DynamoDB store have no target.
#![cfg_attr(not(feature = "dynamodb"), allow(rustdoc::broken_intra_doc_links))]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod balance;
pub mod clock;
pub mod config;
#[cfg(any(feature = "kinesis", feature = "loghub"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "kinesis", feature = "loghub"))))]
pub mod consumer;
mod expiry;
mod fasthash;
mod jitter;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod kinesis;
pub mod lease;
mod lifecycle;
#[cfg(feature = "loghub")]
#[cfg_attr(docsrs, doc(cfg(feature = "loghub")))]
pub mod loghub;
pub mod metrics;
mod notice;
pub mod source;
pub mod store;
pub mod worker;

pub use config::{Balance, ConfigError, WorkerConfig};
// What an application names; what a store of one's own needs (`Lease`, `Member`, `Outcome`,
// ...) is in `lease` and `store`.
pub use lease::{InvalidId, LeaseKey, WorkerId, SHARD_END};
pub use source::{Shard, ShardSource, StaticShardSource};
pub use store::{LeaseStore, StoreError};
pub use worker::{LeaseEvent, LeaseEvents, LeaseGrant, StopReason, Worker, WorkerBuilder};

/// The README's examples, compiled as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The user guide's examples (`docs/GUIDE.md`), compiled as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../docs/GUIDE.md")]
pub struct GuideDoctests;
