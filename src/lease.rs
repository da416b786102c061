//! The lease data model: keys, worker ids, leases and membership records.
//!
//! These are plain data. Every decision about them (expiry, balance) is made elsewhere, over
//! values of these types, and every change to them goes through a
//! [`LeaseStore`](crate::store::LeaseStore) conditional write.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// Prefix reserved for the library's own items in the lease table (membership records).
/// Lease keys and worker ids may not start with it.
pub const RESERVED_PREFIX: &str = "shardlease#";

/// The checkpoint that marks a shard as processed to its end (a Kinesis `SHARD_END`). Set it
/// with [`Checkpointer::end_of_shard`](crate::worker::Checkpointer::end_of_shard); a child
/// shard's lease becomes ready once every parent lease holds it or no longer exists. The
/// application's own checkpoints may not start with [`RESERVED_PREFIX`].
pub const SHARD_END: &str = "shardlease#SHARD_END";

/// The worker id an operator's tool holds a lease under while it writes the lease's checkpoint
/// (the `shardlease` command line, through [`admin`](crate::admin)): a handoff asked for this
/// id is completed to it and left there, and the tool then gives the lease back to the fleet.
/// No worker may use it ([`WorkerBuilder::start`](crate::WorkerBuilder::start) refuses it).
pub const OPERATOR: &str = "shardlease-operator";

/// The `handoff_to` value that asks a lease's owner to retire it: its shard no longer exists
/// in the source. Not a worker; the owner deletes the lease once its application finished.
pub(crate) const RETIRE: &str = "shardlease#retire";

/// Longest lease key or worker id accepted, in bytes. DynamoDB allows 2,048 bytes for a hash
/// key; the reserved prefix and room for future suffixes are kept out of that.
pub const MAX_KEY_LEN: usize = 1024;

/// A rejected lease key or worker id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidId {
    /// The value is empty.
    #[error("{what} must not be empty")]
    Empty {
        /// "lease key" or "worker id".
        what: &'static str,
    },
    /// The value is longer than [`MAX_KEY_LEN`] bytes.
    #[error("{what} is {len} bytes long; at most {MAX_KEY_LEN} are allowed")]
    TooLong {
        /// "lease key" or "worker id".
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The value starts with [`RESERVED_PREFIX`].
    #[error("{what} {value:?} starts with the reserved prefix {RESERVED_PREFIX:?}")]
    Reserved {
        /// "lease key" or "worker id".
        what: &'static str,
        /// The rejected value.
        value: String,
    },
    /// The value contains a control character (they make logs and consoles unreadable).
    #[error("{what} {value:?} contains a control character")]
    ControlCharacter {
        /// "lease key" or "worker id".
        what: &'static str,
        /// The rejected value.
        value: String,
    },
}

fn validate(what: &'static str, value: &str) -> Result<(), InvalidId> {
    if value.is_empty() {
        return Err(InvalidId::Empty { what });
    }
    if value.len() > MAX_KEY_LEN {
        return Err(InvalidId::TooLong {
            what,
            len: value.len(),
        });
    }
    if value.starts_with(RESERVED_PREFIX) {
        return Err(InvalidId::Reserved {
            what,
            value: value.to_owned(),
        });
    }
    if value.chars().any(char::is_control) {
        return Err(InvalidId::ControlCharacter {
            what,
            value: value.to_owned(),
        });
    }
    Ok(())
}

macro_rules! validated_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        // Shared, immutable text: every scan clones every key and owner, and a clone is a
        // reference count, not an allocation.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates and wraps `value`.
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                validate($what, &value)?;
                Ok(Self(Arc::from(value)))
            }

            /// The value as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;
            fn try_from(value: &str) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

validated_id!(
    /// The key of a lease: usually a shard id. Non-empty, at most [`MAX_KEY_LEN`] bytes, no
    /// control characters, and not starting with [`RESERVED_PREFIX`].
    LeaseKey,
    "lease key"
);

validated_id!(
    /// A worker's stable identity. A worker restarted with the same id gets back the leases it
    /// still owns (as forced takes: see [`Incarnation`]). Same rules as [`LeaseKey`].
    WorkerId,
    "worker id"
);

/// One process's run of a worker id: a random number drawn when the worker starts, written
/// into every lease it takes and into its membership record.
///
/// A worker id is stable (a host or pod name), so two processes can share one: a restarted
/// process while the old one is paused or partitioned, or two containers whose default ids
/// collide. The incarnation tells them apart. A lease owned by this worker's id but by another
/// incarnation is *foreign*: nobody can know whether that process is dead, so it is taken back
/// like a forced take, reported only once the other process's validity has surely ended.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(u64);

impl Incarnation {
    /// An incarnation with the given value. Two running processes must never share one; use
    /// [`Incarnation::random`] unless a test or simulation prepares the table for this process.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// A fresh incarnation, drawn from the crate's generator (seeded by `clock::seed_thread`,
    /// feature `testing`, in a simulation, so a run replays).
    pub fn random() -> Self {
        Self(crate::jitter::next_u64())
    }

    /// The value as stored.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl WorkerId {
    /// The marker stored in `handoff_to` to ask the owner to retire a lease.
    pub(crate) fn retire_marker() -> Self {
        Self(Arc::from(RETIRE))
    }

    /// True for the retire marker.
    pub fn is_retire_marker(&self) -> bool {
        &*self.0 == RETIRE
    }

    /// The operator's id, [`OPERATOR`].
    pub fn operator() -> Self {
        Self(Arc::from(OPERATOR))
    }

    /// True for the operator's id, [`OPERATOR`].
    pub fn is_operator(&self) -> bool {
        &*self.0 == OPERATOR
    }

    /// Parses a stored `handoff_to` value: a worker id or the retire marker.
    #[cfg(any(feature = "dynamodb", feature = "redis"))]
    pub(crate) fn parse_handoff_target(value: &str) -> Result<Self, InvalidId> {
        if value == RETIRE {
            Ok(Self::retire_marker())
        } else {
            Self::new(value)
        }
    }
}

/// One lease as stored in the lease table.
///
/// `counter` is the liveness counter: it changes on every renewal, checkpoint and change of
/// owner, so an observer that sees it unchanged for a lease duration of its own clock knows the
/// owner has stopped renewing. `tenure` is the fencing token: it changes only when the owner
/// changes (take, handoff), so a checkpoint is accepted only from the owner *of this tenure*,
/// and renewals (which change `counter`, not `tenure`) never make a checkpoint fail.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The lease's key.
    pub key: LeaseKey,
    /// The current owner; `None` when unowned (new or released).
    pub owner: Option<WorkerId>,
    /// The incarnation (process) of `owner` that took the lease; `None` when unowned, when
    /// handed over and not yet taken by the requester, or written by an older version.
    pub owner_incarnation: Option<Incarnation>,
    /// Liveness counter, see the type's documentation.
    pub counter: u64,
    /// Fencing token, see the type's documentation.
    pub tenure: u64,
    /// The application's checkpoint, opaque to the library.
    pub checkpoint: Option<String>,
    /// Which write stored `checkpoint` (`None` before the first checkpoint of a numbered
    /// write): a checkpoint is refused once a later write of its tenure was stored.
    pub checkpoint_write: Option<CheckpointWrite>,
    /// How many times the owner changed since the last checkpoint.
    pub owner_switches_since_checkpoint: u64,
    /// Keys of the parent leases (a split has one parent, a merge two).
    pub parents: Vec<LeaseKey>,
    /// The worker this lease is being handed to, while a graceful handoff is pending (or the
    /// retire marker, see [`Lease::is_retiring`]).
    pub handoff_to: Option<WorkerId>,
    /// The application's load figure for this lease (records/s, bytes/s, ...), if it reports one.
    pub load: Option<f64>,
    /// Drawn at random by the store when it creates the item and never changed: a lease
    /// deleted and re-created under the same key has another one, so an observer never takes
    /// the new item's counter for the old one's.
    /// 0 for items written before nonces existed.
    pub nonce: u64,
}

/// Which write stored a lease's checkpoint: its tenure and its number among that tenure's
/// checkpoints. The owner numbers its checkpoints 1, 2, 3... in the order its application
/// made them; a checkpoint is stored only if no write of the same tenure with the same or a
/// higher number was stored before, so a write that lands late (its caller gave up, or the
/// store retried it after its attempt timeout) never replaces a newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointWrite {
    /// The tenure the checkpoint was written in.
    pub tenure: u64,
    /// Its number among that tenure's checkpoints, from 1.
    pub seq: u64,
}

impl CheckpointWrite {
    /// True when a checkpoint numbered `seq` in `tenure` may replace the one this write
    /// stored: it is of another tenure (an earlier one: the store also checks the owner and
    /// tenure), or a later write of the same one.
    pub fn accepts(&self, tenure: u64, seq: u64) -> bool {
        self.tenure != tenure || self.seq < seq
    }
}

impl Lease {
    /// True when `worker` owns this lease.
    pub fn is_owned_by(&self, worker: &WorkerId) -> bool {
        self.owner.as_ref() == Some(worker)
    }

    /// True when `worker`'s incarnation `incarnation` (this very process) owns this lease.
    pub fn is_owned_by_incarnation(&self, worker: &WorkerId, incarnation: Incarnation) -> bool {
        self.is_owned_by(worker) && self.owner_incarnation == Some(incarnation)
    }

    /// True when the shard was processed to its end (the checkpoint is [`SHARD_END`]).
    pub fn is_finished(&self) -> bool {
        self.checkpoint.as_deref() == Some(SHARD_END)
    }

    /// True when the owner was asked to retire the lease (its shard left the source).
    pub fn is_retiring(&self) -> bool {
        self.handoff_to
            .as_ref()
            .is_some_and(WorkerId::is_retire_marker)
    }
}

/// What is needed to create a lease: its key, parents and a starting checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLease {
    /// The lease's key.
    pub key: LeaseKey,
    /// Keys of the parent leases.
    pub parents: Vec<LeaseKey>,
    /// The checkpoint to start from, if any (for example when re-creating a deleted lease).
    pub checkpoint: Option<String>,
}

impl NewLease {
    /// A new lease with no parents and no checkpoint.
    pub fn new(key: LeaseKey) -> Self {
        Self {
            key,
            parents: Vec::new(),
            checkpoint: None,
        }
    }

    /// Sets the parent keys.
    #[must_use]
    pub fn with_parents(mut self, parents: Vec<LeaseKey>) -> Self {
        self.parents = parents;
        self
    }

    /// Sets the starting checkpoint.
    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: impl Into<String>) -> Self {
        self.checkpoint = Some(checkpoint.into());
        self
    }

    /// The lease as it is stored right after creation.
    pub fn into_lease(self) -> Lease {
        Lease {
            key: self.key,
            owner: None,
            owner_incarnation: None,
            counter: 0,
            tenure: 0,
            checkpoint: self.checkpoint,
            checkpoint_write: None,
            owner_switches_since_checkpoint: 0,
            parents: self.parents,
            handoff_to: None,
            load: None,
            nonce: 0,
        }
    }
}

/// A worker's membership record: proof that it is alive, even when it holds no lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The worker.
    pub worker: WorkerId,
    /// Changes on every heartbeat; observers judge liveness by it, on their own clock.
    pub heartbeat: u64,
    /// The incarnation (process) that wrote the last heartbeat; `None` when written by an older
    /// version. Another incarnation than one's own here means a second live process uses the id.
    pub incarnation: Option<Incarnation>,
    /// The worker's own utilisation figure (CPU share, or anything the application supplies),
    /// if it reports one: [`LoadReport::utilisation`].
    pub load: Option<f64>,
    /// How much load the worker takes relative to others, if it reports one:
    /// [`LoadReport::weight`].
    pub weight: Option<f64>,
    /// The load figure of each lease the worker holds (or handed on moments ago), as last
    /// reported: [`LoadReport::leases`]. Empty when it reports none.
    pub lease_loads: BTreeMap<LeaseKey, f64>,
    /// The leases the worker holds whose application halted them (a failure it cannot get
    /// past; [`LoadReport::halted`]): no worker moves them for balance. Empty when none.
    pub halted: BTreeSet<LeaseKey>,
    /// How many leases the worker may hold at most, if it declares a limit.
    pub capacity: Option<u32>,
    /// What other workers asked this session to look at (lease keys, or markers), until its
    /// owner names them as seen in a [`beat`](crate::store::LeaseStore::beat).
    pub notices: BTreeSet<String>,
    /// True for a session's record (written by `open_session`); false for a record written by
    /// [`heartbeat`](crate::store::LeaseStore::heartbeat), as an earlier build's lease
    /// protocol kept them. A worker refuses to start while live workers of an earlier build
    /// use the table.
    pub session: bool,
}

/// What a worker publishes about its load with its heartbeat or beat: read by every worker's
/// balance policy from the table.
///
/// Every figure is a finite number, none negative, and the weight above 0
/// ([`validate`](Self::validate)); a store refuses a report that breaks this before it writes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadReport {
    /// How much load the worker takes relative to others; a load policy gives it a share in proportion.
    pub weight: f64,
    /// A utilisation figure the application supplies (CPU share, or anything), if any.
    pub utilisation: Option<f64>,
    /// The load figure of each lease it holds (or handed on moments ago).
    pub leases: BTreeMap<LeaseKey, f64>,
    /// The leases it holds whose application halted them
    /// ([`LeaseGrant::halt`](crate::LeaseGrant::halt)): they stay where they are, so the
    /// fleet's balance leaves them out (a lease that fails wherever it goes would otherwise
    /// travel round the fleet, halting every worker it reaches).
    pub halted: BTreeSet<LeaseKey>,
}

impl LoadReport {
    /// Checks every figure: finite, not negative, and the weight above 0. The first figure at
    /// fault is named in the error.
    ///
    /// ```
    /// use shardlease::lease::LoadReport;
    /// let mut report = LoadReport { weight: 1.0, ..LoadReport::default() };
    /// assert!(report.validate().is_ok());
    /// report.utilisation = Some(f64::NAN);
    /// assert_eq!(report.validate().unwrap_err().figure, "utilisation");
    /// ```
    pub fn validate(&self) -> Result<(), InvalidLoadReport> {
        let refuse = |figure: String, value: f64, rule: &'static str| {
            Err(InvalidLoadReport {
                figure,
                value,
                rule,
            })
        };
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return refuse("weight".into(), self.weight, "a finite number above 0");
        }
        const AT_LEAST_0: &str = "a finite number of at least 0";
        if let Some(utilisation) = self.utilisation {
            if !(utilisation.is_finite() && utilisation >= 0.0) {
                return refuse("utilisation".into(), utilisation, AT_LEAST_0);
            }
        }
        for (key, &load) in &self.leases {
            if !(load.is_finite() && load >= 0.0) {
                return refuse(format!("load of lease {key}"), load, AT_LEAST_0);
            }
        }
        Ok(())
    }
}

/// A [`LoadReport`] figure that cannot be published.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("load report refused: the {figure} is {value}, not {rule}")]
#[non_exhaustive]
pub struct InvalidLoadReport {
    /// The figure at fault: `weight`, `utilisation`, or `load of lease <key>`.
    pub figure: String,
    /// Its value.
    pub value: f64,
    /// What it must be.
    pub rule: &'static str,
}

/// Everything in the lease table at one moment: leases, members, and how many items could not
/// be decoded (they are logged and skipped, never overwritten).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every lease, in key order. Shared, not copied: a store that keeps its items in memory
    /// lists them without copying one, and a round hands its reading on without copying it.
    pub leases: Vec<Arc<Lease>>,
    /// Every membership record, in worker id order (shared, as the leases are).
    pub members: Vec<Arc<Member>>,
    /// Items that could not be decoded and were skipped.
    pub malformed: usize,
}

/// The leases of one scan by key (a round looks up the leases it takes, gives and remembers
/// in it, a listing the parents of its leases): binary search over the leases in key order, as
/// a listing has them, so that a round builds no map of every lease (at 100,000 leases that
/// was a tenth of a round's work). Leases out of order are indexed in order first.
pub(crate) struct ByKey<'a, L = Arc<Lease>>(Sorted<'a, L>);

enum Sorted<'a, L> {
    Leases(&'a [L]),
    Index(Vec<&'a L>),
}

impl<'a, L: Borrow<Lease>> ByKey<'a, L> {
    /// `leases` by key; each key once (a table holds one item per key).
    pub(crate) fn new(leases: &'a [L]) -> Self {
        if leases.windows(2).all(|w| key_of(&w[0]) < key_of(&w[1])) {
            return Self(Sorted::Leases(leases));
        }
        let mut index: Vec<&L> = leases.iter().collect();
        index.sort_by(|a, b| key_of(*a).cmp(key_of(*b)));
        Self(Sorted::Index(index))
    }

    /// The lease of `key`, if the leases have it.
    pub(crate) fn get(&self, key: &LeaseKey) -> Option<&'a Lease> {
        match &self.0 {
            Sorted::Leases(leases) => leases
                .binary_search_by(|l| key_of(l).cmp(key))
                .ok()
                .map(|at| leases[at].borrow()),
            Sorted::Index(index) => index
                .binary_search_by(|l| key_of(*l).cmp(key))
                .ok()
                .map(|at| index[at].borrow()),
        }
    }
}

fn key_of<L: Borrow<Lease>>(lease: &L) -> &LeaseKey {
    &lease.borrow().key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated() {
        assert!(LeaseKey::new("shardId-000000000001").is_ok());
        assert_eq!(
            LeaseKey::new(""),
            Err(InvalidId::Empty { what: "lease key" })
        );
        assert!(matches!(
            LeaseKey::new("x".repeat(MAX_KEY_LEN + 1)),
            Err(InvalidId::TooLong { len, .. }) if len == MAX_KEY_LEN + 1
        ));
        assert!(matches!(
            WorkerId::new("shardlease#worker#a"),
            Err(InvalidId::Reserved {
                what: "worker id",
                ..
            })
        ));
        assert!(matches!(
            LeaseKey::new("a\nb"),
            Err(InvalidId::ControlCharacter { .. })
        ));
        assert!(LeaseKey::new("x".repeat(MAX_KEY_LEN)).is_ok());
    }

    /// A listing's leases are found by key whether or not they come in key order.
    #[test]
    fn leases_are_found_by_key_in_any_order() {
        let lease = |name: &str| NewLease::new(LeaseKey::new(name).unwrap()).into_lease();
        let in_order: Vec<Lease> = ["a", "b", "c", "d"].into_iter().map(lease).collect();
        let shuffled: Vec<Lease> = ["c", "a", "d", "b"].into_iter().map(lease).collect();
        for leases in [&in_order, &shuffled] {
            let by_key = ByKey::new(leases);
            for name in ["a", "b", "c", "d"] {
                let key = LeaseKey::new(name).unwrap();
                assert_eq!(by_key.get(&key).map(|l| &l.key), Some(&key));
            }
            assert!(by_key.get(&LeaseKey::new("e").unwrap()).is_none());
            assert!(by_key.get(&LeaseKey::new("0").unwrap()).is_none());
        }
        assert!(ByKey::<Lease>::new(&[])
            .get(&LeaseKey::new("a").unwrap())
            .is_none());
    }

    #[test]
    fn a_load_report_names_the_first_figure_at_fault() {
        let good = LoadReport {
            weight: 2.0,
            utilisation: Some(0.0),
            leases: BTreeMap::from([(LeaseKey::new("a b=c:d").unwrap(), 0.0)]),
            halted: BTreeSet::new(),
        };
        assert_eq!(good.validate(), Ok(()));
        let figure = |change: &dyn Fn(&mut LoadReport)| {
            let mut report = good.clone();
            change(&mut report);
            report.validate().map_err(|e| e.figure)
        };
        for weight in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                figure(&|r| r.weight = weight),
                Err("weight".into()),
                "{weight}"
            );
        }
        for value in [-0.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                figure(&|r| r.utilisation = Some(value)),
                Err("utilisation".into()),
                "{value}"
            );
            assert_eq!(
                figure(&|r| {
                    r.leases.insert(LeaseKey::new("k").unwrap(), value);
                }),
                Err("load of lease k".into()),
                "{value}"
            );
        }
        let err = LoadReport::default().validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "load report refused: the weight is 0, not a finite number above 0"
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = WorkerId::new("").unwrap_err();
        assert_eq!(err.to_string(), "worker id must not be empty");
    }

    #[test]
    fn new_lease_starts_unowned_at_zero() {
        let key = LeaseKey::new("a").unwrap();
        let lease = NewLease::new(key.clone())
            .with_checkpoint("42")
            .into_lease();
        assert_eq!((lease.owner, lease.owner_incarnation), (None, None));
        assert_eq!((lease.counter, lease.tenure), (0, 0));
        assert_eq!(lease.checkpoint.as_deref(), Some("42"));
        assert_eq!(lease.key, key);
    }

    #[test]
    fn an_incarnation_tells_two_processes_of_one_id_apart() {
        let me = WorkerId::new("host-a").unwrap();
        let (first, second) = (Incarnation::new(1), Incarnation::new(2));
        let mut lease = NewLease::new(LeaseKey::new("k").unwrap()).into_lease();
        lease.owner = Some(me.clone());
        lease.owner_incarnation = Some(first);
        assert!(lease.is_owned_by_incarnation(&me, first));
        assert!(!lease.is_owned_by_incarnation(&me, second));
        lease.owner_incarnation = None;
        assert!(lease.is_owned_by(&me) && !lease.is_owned_by_incarnation(&me, first));
        assert_eq!(Incarnation::new(255).to_string(), "00000000000000ff");
    }
}
