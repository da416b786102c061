//! An Aliyun LogHub (Simple Log Service) server for tests, in memory, answering the official
//! `aliyun-log-rust-sdk` in its own wire format. The entry point is [`Emulator`]:
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use shardlease_loghub_emulator::Emulator;
//!
//! let running = Emulator::start("127.0.0.1:0").await?;
//! // Clients reach it as their HTTP proxy, with any endpoint and project names:
//! //   http_proxy=http://ADDR no_proxy=127.0.0.1,localhost   endpoint loghub.local
//! println!("{}", running.url());
//! running.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Pointing a client at it
//!
//! The SDK puts the project in the host name (`http://<project>.<endpoint>/...`), and
//! `<project>.127.0.0.1` resolves nowhere. So a client uses the emulator as its HTTP proxy:
//! `http_proxy=http://127.0.0.1:4580` and `no_proxy=127.0.0.1,localhost` in its environment
//! before it builds its client (reqwest, under the SDK, reads them then), and any endpoint
//! (`loghub.local`). The emulator takes the request's absolute-form target (or its `Host`) and
//! reads the project from its first label: `demo.loghub.local` is project `demo`.
//!
//! # What it serves
//!
//! Projects (CreateProject, GetProject, ListProject, DeleteProject), logstores
//! (CreateLogStore, GetLogStore, ListLogStores, DeleteLogStore), shards (ListShards,
//! SplitShard, MergeShards: `POST /logstores/{ls}/shards/{id}?action=split[&key=K]
//! [&shardCount=N]` and `?action=merge`, which the SDK has no call for), GetCursor
//! (`from=begin|end|<seconds>`), PullLogs (lz4, deflate or no compression, as
//! `Accept-Encoding` asks; `x-log-cursor`, `x-log-count`, `x-log-bodyrawsize`,
//! `x-log-compresstype`), PutLogs (`/shards/lb`, `/shards/route?key=K`; lz4 or deflate bodies
//! checked against `x-log-bodyrawsize`), and consumer groups (create, list, update, delete,
//! ConsumerGroupHeartBeat with an even assignment, UpdateCheckPoint with and without
//! `forceSuccess`, GetCheckPoint). Errors are LogHub's JSON with the reference's statuses
//! ([`ApiError`]). Every call must carry LogHub's signed-request headers; signatures are
//! checked only with [`Emulator::access_key`] (`--access-key-id`/`--access-key-secret`).
//!
//! Not served: quotas, indexes and queries (GetLogs, SPL in PullLogs), data expiry by `ttl`,
//! persistence, machine groups, shipping, and every other API.
//!
//! # The control API
//!
//! On any host, under `/_emulator/`, without authentication:
//!
//! - `GET /_emulator/ready`: 200 once the emulator serves.
//! - `POST /_emulator/faults` with `{"api": "PullLogs", "project": "p", "logstore": "l",
//!   "shard": 0, "status": 403, "errorCode": "ReadQuotaExceed", "errorMessage": "...",
//!   "times": 3, "delayMs": 0}`: the next `times` (default 1) calls of that API (named as the
//!   reference names them: `ListShards`, `GetCursor`, `PullLogs`, `PutLogs`, `SplitShard`,
//!   `MergeShards`, `ConsumerGroupHeartBeat`, `UpdateCheckPoint`, `GetCheckPoint`, ...) that
//!   match the optional `project`, `logstore` and `shard` wait `delayMs`, then fail with that
//!   answer (a fault with `delayMs` and no `status` only delays). Faults hit in the order added.
//! - `DELETE /_emulator/faults`: removes them all.
//! - `GET /_emulator/requests`: `{"apis": {"PullLogs": 4, ...}, "pullLogs":
//!   {"project/logstore/shard": 3, ...}}`, the calls that passed authentication (those a fault
//!   failed included); `DELETE /_emulator/requests` resets them.
//!
//! Note that the SDK retries 500 to 503 answers itself (three times by default): each retry is
//! a call, and takes a hit of the fault.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
pub mod auth;
pub mod codec;
pub mod control;
pub mod cursor;
mod error;
pub mod groups;
mod handlers;
pub mod keys;
mod server;
pub mod state;

pub use error::ApiError;
pub use server::{Emulator, Running};
