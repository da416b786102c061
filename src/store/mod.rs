//! The lease store: one trait, two backends with identical conditional semantics.
//!
//! Every write is a single-item conditional write. A write whose condition does not hold
//! returns [`Outcome::LostRace`] with the item as it is now (`None` when it does not exist);
//! that is a normal answer, not an error. [`StoreError`] is kept for "no definite answer".
//!
//! The worker is the usual user of a store; used directly, it reads like this:
//!
//! ```
//! use std::time::Duration;
//! use shardlease::store::{memory::InMemoryStore, LeaseStore, Outcome};
//! use shardlease::{LeaseKey, WorkerId};
//! use shardlease::lease::{Incarnation, NewLease};
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
//! let Outcome::Done(mine) = store.take(&key, lease.nonce, &me, process, lease.counter, deadline).await?
//! else {
//!     panic!("somebody else took it first");
//! };
//! store.checkpoint(&key, mine.nonce, &me, mine.tenure, 1, "seq-42", deadline).await?;
//! assert_eq!(store.get(&key, deadline).await?.unwrap().checkpoint.as_deref(), Some("seq-42"));
//! # Ok(())
//! # }
//! ```
//!
//! # Conditions
//!
//! | operation | condition | effect |
//! |---|---|---|
//! | [`create`](LeaseStore::create) | key absent | lease at counter 0, tenure 0, unowned, a fresh random [`nonce`](Lease::nonce) |
//! | [`renew`](LeaseStore::renew) | the item observed, owner = me, tenure = mine | counter + 1 |
//! | [`take`](LeaseStore::take) | the item observed, counter = observed | owner := me, owner incarnation := mine, counter + 1, tenure + 1, switches + 1, no handoff |
//! | [`request_handoff`](LeaseStore::request_handoff) | the item observed, owner and tenure as observed, no other handoff pending | handoff_to := requester |
//! | [`complete_handoff`](LeaseStore::complete_handoff) | the item observed, owner = me, tenure = mine, handoff_to = to | owner := to, no owner incarnation, counter + 1, tenure + 1, switches + 1, no handoff |
//! | [`release`](LeaseStore::release) | the item observed, owner = me, tenure = mine | unowned, no owner incarnation, counter + 1, no handoff |
//! | [`checkpoint`](LeaseStore::checkpoint) | the item observed, owner = me, tenure = mine, no checkpoint of this tenure numbered as high or higher stored | checkpoint := value, its tenure and number stored, switches := 0, counter + 1 |
//! | [`delete`](LeaseStore::delete) | the item observed, counter and tenure as observed | item removed |
//! | [`heartbeat`](LeaseStore::heartbeat) | absent or a membership record | heartbeat + 1, incarnation and capacity set; with a [`LoadReport`], weight, utilisation (`load`) and lease loads set (each absent one removed); without, all three left as they are |
//! | [`remove_member`](LeaseStore::remove_member) | a membership record (with the observed heartbeat, if given) | item removed |
//! | [`give`](LeaseStore::give) | the item observed, counter = observed | owner := to, no owner incarnation, counter + 1, tenure + 1, switches + 1, no handoff |
//! | [`open_session`](LeaseStore::open_session) | no item, or the record as observed (incarnation and heartbeat) | a fresh record: incarnation := mine, heartbeat + 1, no notices, no weight, utilisation or lease loads |
//! | [`beat`](LeaseStore::beat) | a membership record of my incarnation | heartbeat + 1, capacity set, the notices seen removed; a [`LoadReport`] as for `heartbeat` |
//! | [`end_session`](LeaseStore::end_session) | a membership record of that incarnation at the observed heartbeat | item removed |
//! | [`notify`](LeaseStore::notify) | a membership record of that incarnation | notices added |
//!
//! "The item observed" is the `nonce` argument every lease write takes: the
//! [`nonce`](Lease::nonce) of the item the caller read, drawn at random when the item was
//! created. A lease deleted (by an operator, or when its shard is gone) and created again is a
//! new item at counter 0 and tenure 0, which walks through the same owners and tenures again;
//! without the nonce a write meant for the old item (a checkpoint that lands late, a take
//! decided on an old view) would find its counter or tenure matching in the new one. An item
//! stored without a nonce (written before nonces existed) is observed as nonce 0, and a write
//! naming 0 applies only to an item without one.
//!
//! A [`LoadReport`] is checked ([`LoadReport::validate`]) before anything is sent: a report
//! with a figure that is not finite, is negative, or a weight of 0 is refused with
//! [`StoreError::Fatal`] (its source an
//! [`InvalidLoadReport`](crate::lease::InvalidLoadReport)) and nothing is written. An
//! empty map of lease loads removes the stored one. `None` leaves the stored report alone, so
//! a worker need not republish figures that did not change.
//!
//! The last four are the session protocol (see `docs/ARCHITECTURE.md`, "Sessions"): a worker's
//! membership record is its session, kept alive by `beat`; a session ends only by
//! `end_session` (its owner leaving, or an observer that saw it expire) or by another process of
//! the id replacing it with `open_session`, and a session that has ended never beats again. Its
//! notices are how other workers tell it to look at a lease (a handoff asked for, a lease given
//! to it, a lease changed by hand): they are returned by every `beat` until the owner names
//! them as seen.
//!
//! The owner's [`Incarnation`] (which process of the owner's id took the lease) is written by
//! `take` and cleared by every other change of owner; no condition reads it. Workers use it to
//! tell a lease of their own process from one of another process with the same id.
//!
//! Renewals are conditioned on the tenure, not on the counter, so a renewal and a checkpoint of
//! the same owner never make each other fail, and a renewal whose response was lost can simply
//! be sent again.
//!
//! # Ambiguous writes
//!
//! A write can be applied by the backend and its answer lost (a timeout, a dropped
//! connection). The DynamoDB backend retries such writes itself and recognises its own earlier
//! write by a per-call token stored in the item, so a retried write whose first attempt landed
//! returns [`Outcome::Done`].
//!
//! Only the writes that move the counter (and `create`) store their token: `request_handoff`
//! stores none. It needs none (its condition accepts a request to the same worker again, so
//! its retry simply succeeds), and storing one would hide the write before it: a take lands,
//! its answer is lost, a third worker asks the new owner for the lease, and the take's retry,
//! failing its condition, would no longer find its token and read as a lost race although the
//! caller owns the lease. With the token left alone, a landed write is recognised as long as no
//! other write moved the counter since; a write that did was somebody else's (a take, a delete),
//! so the lease is no longer the caller's, and the lost race is the truth.
//!
//! When the caller's deadline runs out first, the error says
//! [`is_ambiguous`](StoreError::is_ambiguous) and the caller recovers with a
//! [`get`](LeaseStore::get):
//!
//! - `renew`, `checkpoint`: conditioned on owner and tenure only, so they are idempotent: send
//!   them again.
//! - `take`: applied if the lease is now owned by the caller's incarnation with `tenure` one
//!   more than observed.
//! - `complete_handoff`: applied if the owner is now `to` with the tenure one more than the
//!   caller's.
//! - `release`: either way the caller no longer owns the lease.
//! - `request_handoff`: applied if `handoff_to` names the requester.
//! - `create`: the lease exists either way; compare its fields if it matters.
//! - `delete`, `remove_member`, `end_session`: gone either way, unless someone re-created it.
//! - `give`: applied if the lease is now owned by `to` with `tenure` one more than observed
//!   and no owner incarnation (the stored token tells, as for `take`).
//! - `open_session`: applied if the record now names the caller's incarnation (no other
//!   process draws the same incarnation).
//! - `beat`, `notify`: conditioned on the incarnation only: send them again.

// The attribute names both backends' schemas use (the in-memory store keeps no items): gated
// on either backend, so that each has it without the other.
#[cfg(any(feature = "dynamodb", feature = "redis"))]
mod attributes;
// What both backends' decoders make of an item (`Decoded`), gated as `attributes`.
#[cfg(any(feature = "dynamodb", feature = "redis"))]
mod decoded;
mod error;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod fault;
pub mod layer;
pub mod memory;
pub(crate) mod retry;

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
#[cfg(any(feature = "dynamodb", feature = "kinesis"))]
pub(crate) mod sdk;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

pub use error::{BoxError, Misconfiguration, StoreError, StoreResult};
pub use retry::{Jitter, RetryPolicy};

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::lease::{
    Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, Snapshot, WorkerId, RESERVED_PREFIX,
};

/// The answer to a conditional write.
///
/// Deliberately exhaustive (unlike the crate's other public enums): a single-item conditional
/// write either lands or finds its condition false, and callers, your own [`LeaseStore`]
/// included, match both. A third answer would be a new protocol, and a major version.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Outcome<T> {
    /// The write was applied; carries the item as written.
    Done(T),
    /// The condition did not hold; carries the item as it is now (`None`: no such item).
    LostRace {
        /// The current item.
        current: Option<T>,
    },
}

impl<T> Outcome<T> {
    /// True for [`Outcome::Done`].
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done(_))
    }

    /// The written item, if the write was applied.
    pub fn done(self) -> Option<T> {
        match self {
            Self::Done(value) => Some(value),
            Self::LostRace { .. } => None,
        }
    }
}

/// A fresh creation nonce for a lease item ([`Lease::nonce`]): random, never 0. Drawn from the
/// crate's jitter generator, so a seeded simulation replays it.
pub(crate) fn new_nonce() -> u64 {
    // Below 2^53: exact as a float, and as a DynamoDB number.
    (crate::jitter::uniform(1.0, (1u64 << 53) as f64) as u64).max(1)
}

/// Refuses `report` when [`LoadReport::validate`] does: a fatal error (the same report can
/// never be written) on `worker`'s record, whose source is the
/// [`InvalidLoadReport`](crate::lease::InvalidLoadReport). Every
/// backend calls it before it sends anything.
pub(crate) fn check_report(
    operation: &'static str,
    worker: &WorkerId,
    report: Option<&LoadReport>,
) -> StoreResult<()> {
    let Some(Err(err)) = report.map(LoadReport::validate) else {
        return Ok(());
    };
    Err(StoreError::Fatal {
        operation,
        key: format!("{RESERVED_PREFIX}member#{worker}"),
        source: Box::new(err),
    })
}

/// A position in a paged listing. Opaque to callers; a store of your own builds its tokens
/// with [`PageToken::new`] (for example from the last key of a page) and reads them back with
/// [`PageToken::as_str`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken(pub(crate) String);

impl PageToken {
    /// A token carrying `position`, in whatever form the store that hands it out reads back.
    ///
    /// ```
    /// use shardlease::store::PageToken;
    /// let next = PageToken::new("shard-0042"); // the last key of this page
    /// assert_eq!(next.as_str(), "shard-0042");
    /// ```
    pub fn new(position: impl Into<String>) -> Self {
        Self(position.into())
    }

    /// The position this token carries.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// Leases on this page (see [`Snapshot::leases`]).
    pub leases: Vec<Arc<Lease>>,
    /// Membership records on this page (shared, as the leases are).
    pub members: Vec<Arc<Member>>,
    /// Items on this page that could not be decoded (logged and skipped).
    pub malformed: usize,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PageToken>,
}

/// The lease table. Implementations: [`memory::InMemoryStore`] and, with the `dynamodb`
/// feature, `dynamodb::DynamoStore`.
///
/// Every operation takes a `deadline` (tokio monotonic time): retries of throttled and
/// transient failures stop there, and the last error is returned. Reads are strongly
/// consistent, but for the `_eventually` ones.
///
/// Every write to a lease names the item it is meant for by `nonce`, the
/// [`Lease::nonce`] the caller read: it applies to that item only, never to one created
/// later under the same key (see the module's conditions).
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Creates `lease` if no item has its key.
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>>;

    /// Reads one lease; `None` when it does not exist.
    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>>;

    /// Lists one page of the table (leases and membership records), starting at `from`.
    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page>;

    /// Renews a lease held by `owner` in tenure `tenure`, setting its load figure if given.
    async fn renew(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        load: Option<f64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Takes a lease whose counter the caller observed as `observed_counter` (unowned,
    /// expired, or stolen) for `taker`'s process `incarnation`.
    async fn take(
        &self,
        key: &LeaseKey,
        nonce: u64,
        taker: &WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Asks `owner` (in `tenure`) to hand the lease over to `requester`.
    async fn request_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        requester: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Hands a lease held by `owner` in `tenure` to the worker that asked for it, `to`. The
    /// owner incarnation is cleared: the requester's process starts it with a take of its own.
    async fn complete_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        to: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Gives up a lease held by `owner` in `tenure`; it becomes unowned at once.
    async fn release(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Stores `checkpoint`, fenced: accepted only from `owner` in `tenure`, and only if no
    /// checkpoint of `tenure` numbered `seq` or higher was stored before (see
    /// [`CheckpointWrite`](crate::lease::CheckpointWrite)): the owner numbers its checkpoints
    /// 1, 2, 3... within a tenure, so that one that lands late never replaces a newer one. A
    /// retry of the same call sends the same number.
    // The item, the owner, its tenure and the write's number are each part of the condition.
    #[allow(clippy::too_many_arguments)]
    async fn checkpoint(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        seq: u64,
        checkpoint: &str,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Deletes a lease if its counter and tenure are still as observed. `Done` carries the
    /// deleted lease.
    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Creates or refreshes `worker`'s membership record, written by its process `incarnation`.
    /// With a `report`, its weight, utilisation and lease loads are written (an absent
    /// utilisation or an empty map removes the stored one); without, the stored ones are left
    /// as they are. A report [`LoadReport::validate`] refuses is a [`StoreError::Fatal`], and
    /// nothing is written.
    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// Removes `worker`'s membership record; with `observed_heartbeat`, only if it has not
    /// been refreshed since.
    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// Gives a lease whose counter the caller observed as `observed_counter` to `to`, not yet
    /// taken: like a completed handoff, the owner incarnation is left empty and `to`'s process
    /// starts it with a [`take`](Self::take) of its own. For leases whose owner's session has
    /// ended, leases a leaving worker hands on, and leases nobody holds.
    async fn give(
        &self,
        key: &LeaseKey,
        nonce: u64,
        to: &WorkerId,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>>;

    /// Reads `worker`'s membership record; `None` when there is none. With `consistent` false
    /// the read may be stale (on DynamoDB, an eventually consistent read at half the cost):
    /// fit for watching a heartbeat, since every action taken on what it shows is conditioned
    /// on the values it showed.
    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>>;

    /// Opens a session of `worker`'s process `incarnation`: writes a fresh membership record
    /// (heartbeat one more than the record it replaces, no notices, no load report) if there is none (without
    /// `replacing`) or, with `replacing`, if the record is still exactly as observed (same
    /// incarnation and heartbeat). Replacing a record ends the session it held. A record that
    /// differs, or is gone when `replacing` names one, is a lost race.
    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// Keeps the session of `worker`'s process `incarnation` alive: heartbeat + 1 and the
    /// capacity set, if the record is still that incarnation's; removes the notices named in
    /// `seen`; writes `report` as [`heartbeat`](Self::heartbeat) does (`None`: the stored
    /// one stays). `Done` carries the record as written, with the notices still pending.
    async fn beat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        report: Option<&LoadReport>,
        seen: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// Ends the session of `worker`'s process `incarnation` by deleting its record, if that
    /// record is still the incarnation's at `observed_heartbeat`. `Done` carries the record
    /// removed.
    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// Adds `notices` to the record of `worker`'s session `incarnation`, if that session is
    /// still open. `Done` carries the record as written.
    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>>;

    /// As [`list_page`](Self::list_page), but the page may be stale where the backend offers
    /// cheaper reads that may be (DynamoDB: an eventually consistent scan, half the read
    /// capacity). The session protocol's scans use it: everything they lead to is a write
    /// conditioned on what they read. By default, `list_page`.
    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        self.list_page(from, deadline).await
    }

    /// Every membership record, strongly consistent, without the leases. A worker checking
    /// who else uses the table before it starts needs only these, and a store that keeps
    /// them apart can list them without reading (or copying) every lease. By default, a
    /// [`snapshot`](Self::snapshot)'s members (on DynamoDB the read costs the same either
    /// way: a scan is billed by what it reads, filtered or not).
    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Arc<Member>>> {
        Ok(self.snapshot(deadline).await?.members)
    }

    /// Lists the whole table, page after page, with
    /// [`list_page_eventually`](Self::list_page_eventually).
    async fn snapshot_eventually(&self, deadline: Instant) -> StoreResult<Snapshot> {
        snapshot_by_pages(self, true, deadline).await
    }

    /// Lists the whole table, page after page.
    async fn snapshot(&self, deadline: Instant) -> StoreResult<Snapshot> {
        snapshot_by_pages(self, false, deadline).await
    }
}

/// The whole table, page after page ([`LeaseStore::list_page_eventually`] with `eventually`,
/// else [`LeaseStore::list_page`]), leases in key order and members in worker id order: what
/// [`LeaseStore::snapshot`] and [`LeaseStore::snapshot_eventually`] do unless a store lists
/// otherwise. A [`StoreLayer`](layer::StoreLayer) that answers every page itself (one that
/// wraps no store) answers [`Request::Snapshot`](layer::Request::Snapshot) with it, so that a
/// listing is the same pages through it as through any store.
pub async fn snapshot_by_pages<S: LeaseStore + ?Sized>(
    store: &S,
    eventually: bool,
    deadline: Instant,
) -> StoreResult<Snapshot> {
    let mut snapshot = Snapshot::default();
    // The pages' leases are moved into one vector of the right size at the end, not grown
    // page by page (at 100,000 leases that copied them twice over).
    let mut pages = Vec::new();
    let mut from = None;
    loop {
        let page = if eventually {
            store.list_page_eventually(from, deadline).await?
        } else {
            store.list_page(from, deadline).await?
        };
        pages.push(page.leases);
        snapshot.members.extend(page.members);
        snapshot.malformed += page.malformed;
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    snapshot.leases = Vec::with_capacity(pages.iter().map(Vec::len).sum());
    for leases in pages {
        snapshot.leases.extend(leases);
    }
    snapshot.leases.sort_by(|a, b| a.key.cmp(&b.key));
    snapshot.members.sort_by(|a, b| a.worker.cmp(&b.worker));
    Ok(snapshot)
}
