//! Moving from KCL: copy the checkpoints of a KCL 2.x/3.x lease table into a shardlease table.
//!
//! shardlease cannot share a table with KCL (the attribute names collide and the protocols
//! differ; [`DynamoStore::connect`] refuses a KCL table with [`ConnectError::KclTable`](super::ConnectError::KclTable)). An
//! import reads the KCL table (consistent, paged scans: nothing is written there), decodes
//! every lease, and plans one [`NewLease`] per lease for a shardlease table. The plan is a
//! dry run; [`ImportPlan::apply`] creates the leases with the store's conditional `create`,
//! so a lease that already exists is never overwritten, and a second apply changes nothing.
//! Operators run it as `shardlease import-kcl --from KCL_TABLE --to TABLE [--apply]`.
//!
//! | KCL lease | shardlease lease |
//! |---|---|
//! | `leaseKey` | the key (a multi-stream application's, `<account>:<stream>:<creation epoch>:<shard id>`, as it is: the key `KinesisConsumer::multi_stream` gives the shard) |
//! | `parentShardId` | the parents (in a multi-stream table, each shard id prefixed with the lease's `streamName`, as the parent's key is) |
//! | `checkpoint` = a sequence number, `checkpointSubSequenceNumber` = *sub* | `<sequence>:<sub>`: the Kinesis consumer reads that record again and starts after its user record *sub* (a record not aggregated counts as user record 0), as KCL does |
//! | `checkpoint` = `SHARD_END` | [`SHARD_END`]: finished |
//! | `checkpoint` = `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP` | no checkpoint: the consumer's initial position applies |
//! | `pendingCheckpoint` | a warning: not copied, the committed checkpoint is |
//! | `leaseOwner`, `leaseCounter`, `ownerSwitchesSinceCheckpoint` | not copied: the lease starts unowned |
//! | items of other kinds (KCL 3.x worker metrics, coordinator state), undecodable items | skipped, with the reason |
//!
//! Stop the KCL application before applying: a checkpoint it writes after the plan's scan is
//! not copied.
//!
//! ```no_run
//! use shardlease::store::dynamodb::{kcl, DynamoConfig, DynamoStore};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let source = aws_sdk_dynamodb::Client::new(&sdk);
//! let to = DynamoStore::connect(source.clone(), DynamoConfig::new("my-app-leases")).await?;
//! let plan = kcl::plan(&source, "MyKclApplication", &to).await?;
//! print!("{plan}"); // the dry run, as a table
//! let report = plan.apply(&to).await?;
//! print!("{report}");
//! # Ok(())
//! # }
//! ```

pub(super) mod format;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use super::classify::classify;
use super::schema::Item;
use super::DynamoStore;
use crate::lease::{Lease, LeaseKey, NewLease, SHARD_END};
use crate::store::{LeaseStore, Outcome, StoreError, StoreResult};

pub use self::format::{KclCheckpoint, KclLease, SkippedItem};

/// How long one request of an import (a page of a scan, one create) may take, retries by the
/// destination store's [`RetryPolicy`](crate::store::RetryPolicy) included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the Kinesis consumer resumes an imported lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Resume {
    /// After the checkpoint (its sequence number and sub-sequence number), as KCL would have.
    AfterCheckpoint,
    /// Nowhere: the shard was processed to its end (the lease is finished).
    Finished,
    /// KCL had checkpointed nothing (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`): no
    /// checkpoint is written and the consumer's configured initial position applies (for a
    /// child of finished parents: `TRIM_HORIZON`, unless that position is `AT_TIMESTAMP`).
    InitialPosition,
}

impl fmt::Display for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AfterCheckpoint => "after the checkpoint",
            Self::Finished => "finished",
            Self::InitialPosition => "initial position",
        })
    }
}

/// What the import does, or did, with one lease. Nothing is ever overwritten.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case", tag = "action")
)]
#[non_exhaustive]
pub enum Action {
    /// The dry run: the lease does not exist in the destination and would be created.
    WouldCreate,
    /// The lease was created.
    Created,
    /// The lease exists in the destination with the same checkpoint and parents.
    Exists,
    /// The lease exists in the destination with other values, left as they are.
    Differs {
        /// The destination's checkpoint.
        checkpoint: Option<String>,
        /// The destination's parents.
        #[cfg_attr(feature = "serde", serde(serialize_with = "format::ser::keys"))]
        parents: Vec<LeaseKey>,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WouldCreate => f.write_str("would create"),
            Self::Created => f.write_str("created"),
            Self::Exists => f.write_str("exists, same values"),
            Self::Differs {
                checkpoint,
                parents,
            } => write!(
                f,
                "exists and differs (checkpoint {}, parents {}): not overwritten",
                checkpoint.as_deref().unwrap_or("-"),
                keys(parents)
            ),
        }
    }
}

/// One KCL lease and the shardlease lease it becomes.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LeaseImport {
    /// The lease as KCL stored it.
    pub kcl: KclLease,
    /// The checkpoint written: `<sequence>:<sub>` (the Kinesis consumer's form), [`SHARD_END`], or
    /// none.
    pub checkpoint: Option<String>,
    /// The parents written.
    #[cfg_attr(feature = "serde", serde(serialize_with = "format::ser::keys"))]
    pub parents: Vec<LeaseKey>,
    /// True when the checkpoint written is [`SHARD_END`].
    pub finished: bool,
    /// Where the consumer resumes.
    pub resume: Resume,
    /// What an operator should know about this lease (a pending checkpoint, a KCL handoff
    /// in progress).
    pub warnings: Vec<String>,
    /// What the import does or did.
    pub action: Action,
}

impl LeaseImport {
    /// The lease's key.
    pub fn key(&self) -> &LeaseKey {
        &self.kcl.key
    }

    /// The lease to create.
    pub fn new_lease(&self) -> NewLease {
        let lease = NewLease::new(self.kcl.key.clone()).with_parents(self.parents.clone());
        match &self.checkpoint {
            Some(checkpoint) => lease.with_checkpoint(checkpoint.clone()),
            None => lease,
        }
    }

    /// Maps a KCL lease (see the module's table); the action is [`Action::WouldCreate`] until
    /// the destination is read.
    fn mapped(kcl: KclLease) -> Self {
        let mut warnings = Vec::new();
        let (checkpoint, resume) = match &kcl.checkpoint {
            // Where KCL resumes: after user record `sub` of the record (its own
            // `ExtendedSequenceNumber`; a record not aggregated is user record 0), which the
            // Kinesis consumer reads as `<sequence>:<sub>`. A bare sequence number would skip
            // the rest of an aggregate KCL checkpointed at its first user record.
            KclCheckpoint::Sequence(number) => (
                Some(format!("{number}:{}", kcl.sub_sequence_number)),
                Resume::AfterCheckpoint,
            ),
            KclCheckpoint::ShardEnd => (Some(SHARD_END.to_owned()), Resume::Finished),
            _ => (None, Resume::InitialPosition),
        };
        if let Some(pending) = &kcl.pending_checkpoint {
            warnings.push(format!(
                "a pending checkpoint {pending} (sub-sequence {}) was prepared and not committed: \
                 not copied, the lease resumes from the committed checkpoint",
                kcl.pending_sub_sequence_number.unwrap_or(0)
            ));
        }
        if let Some(from) = &kcl.checkpoint_owner {
            warnings.push(format!(
                "KCL was handing this lease from {from} to {}: stop KCL before applying",
                kcl.owner.as_deref().unwrap_or("nobody")
            ));
        }
        Self {
            finished: resume == Resume::Finished,
            parents: kcl.parents.clone(),
            kcl,
            checkpoint,
            resume,
            warnings,
            action: Action::WouldCreate,
        }
    }

    /// Compares with the lease found in the destination.
    fn judged(&self, current: &Lease) -> Action {
        let set = |keys: &[LeaseKey]| keys.iter().cloned().collect::<BTreeSet<_>>();
        if current.checkpoint == self.checkpoint && set(&current.parents) == set(&self.parents) {
            Action::Exists
        } else {
            Action::Differs {
                checkpoint: current.checkpoint.clone(),
                parents: current.parents.clone(),
            }
        }
    }
}

/// Counts of a plan or a report, by action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Summary {
    /// Leases the dry run would create.
    pub would_create: usize,
    /// Leases created.
    pub created: usize,
    /// Leases that exist with the same values.
    pub exists: usize,
    /// Leases that exist with other values (not overwritten).
    pub differs: usize,
    /// Items of the KCL table skipped.
    pub skipped: usize,
    /// Leases a KCL worker held when the KCL table was read.
    pub held_by_kcl: usize,
}

impl Summary {
    fn of(leases: &[LeaseImport], skipped: &[SkippedItem]) -> Self {
        let mut summary = Self {
            skipped: skipped.len(),
            ..Self::default()
        };
        for lease in leases {
            match lease.action {
                Action::WouldCreate => summary.would_create += 1,
                Action::Created => summary.created += 1,
                Action::Exists => summary.exists += 1,
                Action::Differs { .. } => summary.differs += 1,
            }
            summary.held_by_kcl += usize::from(lease.kcl.owner.is_some());
        }
        summary
    }
}

/// The dry run of an import: what [`apply`](Self::apply) would write. [`Display`](fmt::Display)
/// prints it as a table.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ImportPlan {
    /// The KCL table read.
    pub from_table: String,
    /// The shardlease table read.
    pub to_table: String,
    /// Every KCL lease, parents before their children.
    pub leases: Vec<LeaseImport>,
    /// The items that are not KCL leases we can copy.
    pub skipped: Vec<SkippedItem>,
}

/// What [`ImportPlan::apply`] did. [`Display`](fmt::Display) prints it as a table.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ImportReport {
    /// The KCL table read.
    pub from_table: String,
    /// The shardlease table written.
    pub to_table: String,
    /// Every KCL lease, in the order they were created.
    pub leases: Vec<LeaseImport>,
    /// The items that are not KCL leases we can copy.
    pub skipped: Vec<SkippedItem>,
}

/// Reads the KCL table `from_table` through `source` (consistent, paged scans: read-only) and
/// the shardlease table of `to`, and plans the copy. Nothing is written.
///
/// Fails when a scan fails (retried by `to`'s [`RetryPolicy`](crate::store::RetryPolicy),
/// each request within [`CALL_TIMEOUT`]); a missing `from_table` is a
/// [`StoreError::Fatal`] naming it.
pub async fn plan(source: &Client, from_table: &str, to: &DynamoStore) -> StoreResult<ImportPlan> {
    let items = scan(source, from_table, to).await?;
    let existing = destination(to).await?;
    let mut leases = Vec::new();
    let mut skipped = Vec::new();
    for item in &items {
        match format::decode(item) {
            Ok(kcl) => {
                let mut lease = LeaseImport::mapped(kcl);
                if let Some(current) = existing.get(lease.key()) {
                    lease.action = lease.judged(current);
                }
                leases.push(lease);
            }
            Err(item) => skipped.push(item),
        }
    }
    parents_first(&mut leases);
    skipped.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(ImportPlan {
        from_table: from_table.to_owned(),
        to_table: to.table_name().to_owned(),
        leases,
        skipped,
    })
}

impl ImportPlan {
    /// Counts by action.
    pub fn summary(&self) -> Summary {
        Summary::of(&self.leases, &self.skipped)
    }

    /// Creates every lease of the plan in `to`, parents first, each with the store's
    /// conditional create: a lease that exists (now, whatever the plan saw) is compared, never
    /// overwritten. Applying again changes nothing.
    pub async fn apply(&self, to: &DynamoStore) -> StoreResult<ImportReport> {
        let mut leases = Vec::with_capacity(self.leases.len());
        for planned in &self.leases {
            let action = create(to, planned).await?;
            tracing::info!(
                table = to.table_name(),
                lease_key = %planned.key(),
                checkpoint = planned.checkpoint.as_deref().unwrap_or("-"),
                outcome = %action,
                "imported a KCL lease"
            );
            leases.push(LeaseImport {
                action,
                ..planned.clone()
            });
        }
        Ok(ImportReport {
            from_table: self.from_table.clone(),
            to_table: to.table_name().to_owned(),
            leases,
            skipped: self.skipped.clone(),
        })
    }
}

impl ImportReport {
    /// Counts by action.
    pub fn summary(&self) -> Summary {
        Summary::of(&self.leases, &self.skipped)
    }
}

/// Every item of the KCL table.
async fn scan(source: &Client, table: &str, to: &DynamoStore) -> StoreResult<Vec<Item>> {
    let mut items = Vec::new();
    let mut from: Option<Item> = None;
    loop {
        let deadline = Instant::now() + CALL_TIMEOUT;
        let out = to
            .config
            .retry
            .run("scan", table, deadline, |_| {
                let request = source
                    .scan()
                    .table_name(table)
                    .consistent_read(true)
                    .set_exclusive_start_key(from.clone());
                async move { request.send().await.map_err(|e| classify("scan", table, e)) }
            })
            .await?;
        items.extend(out.items.unwrap_or_default());
        match out.last_evaluated_key {
            Some(last) if !last.is_empty() => from = Some(last),
            _ => return Ok(items),
        }
    }
}

/// Every lease of the destination, by key.
async fn destination(to: &DynamoStore) -> StoreResult<HashMap<LeaseKey, Lease>> {
    let mut leases = HashMap::new();
    let mut from = None;
    loop {
        let page = to.list_page(from, Instant::now() + CALL_TIMEOUT).await?;
        leases.extend(
            page.leases
                .into_iter()
                .map(|l| (l.key.clone(), Arc::unwrap_or_clone(l))),
        );
        match page.next {
            Some(next) => from = Some(next),
            None => return Ok(leases),
        }
    }
}

/// How many times a create is tried when the item it collided with is gone by the time it is
/// read (deleted in between).
const CREATE_ROUNDS: u32 = 3;

async fn create(to: &DynamoStore, planned: &LeaseImport) -> StoreResult<Action> {
    for _ in 0..CREATE_ROUNDS {
        match to
            .create(planned.new_lease(), Instant::now() + CALL_TIMEOUT)
            .await?
        {
            Outcome::Done(_) => return Ok(Action::Created),
            Outcome::LostRace {
                current: Some(current),
            } => return Ok(planned.judged(&current)),
            Outcome::LostRace { current: None } => continue,
        }
    }
    Err(StoreError::Transient {
        operation: "create",
        key: planned.key().to_string(),
        ambiguous: false,
        source: format!(
            "the lease existed and was gone when read, {CREATE_ROUNDS} times: something \
             deletes it; apply again once it stops"
        )
        .into(),
    })
}

/// Orders the leases parents first (then by key), so that a fleet already running on the
/// destination never sees a child before its parent.
fn parents_first(leases: &mut [LeaseImport]) {
    let parents: HashMap<LeaseKey, Vec<LeaseKey>> = leases
        .iter()
        .map(|l| (l.key().clone(), l.parents.clone()))
        .collect();
    let mut depths: HashMap<LeaseKey, usize> = HashMap::new();
    for key in parents.keys() {
        depth(key, &parents, &mut depths, &mut Vec::new());
    }
    leases.sort_by(|a, b| (depths[a.key()], a.key()).cmp(&(depths[b.key()], b.key())));
}

/// 0 for a lease without parents in the plan, else one more than its deepest parent's. A
/// cycle (which Kinesis never makes) is cut where it closes.
fn depth(
    key: &LeaseKey,
    parents: &HashMap<LeaseKey, Vec<LeaseKey>>,
    depths: &mut HashMap<LeaseKey, usize>,
    path: &mut Vec<LeaseKey>,
) -> usize {
    if let Some(known) = depths.get(key) {
        return *known;
    }
    if path.contains(key) {
        return 0;
    }
    path.push(key.clone());
    let mut deepest = 0;
    for parent in parents.get(key).into_iter().flatten() {
        if parents.contains_key(parent) {
            deepest = deepest.max(1 + depth(parent, parents, depths, path));
        }
    }
    path.pop();
    depths.insert(key.clone(), deepest);
    deepest
}

fn keys(keys: &[LeaseKey]) -> String {
    if keys.is_empty() {
        return "-".to_owned();
    }
    keys.iter()
        .map(LeaseKey::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// The table both a plan and a report print.
fn table(
    f: &mut fmt::Formatter<'_>,
    title: &str,
    leases: &[LeaseImport],
    skipped: &[SkippedItem],
    summary: Summary,
) -> fmt::Result {
    writeln!(f, "{title}")?;
    let header = [
        "lease",
        "KCL checkpoint",
        "checkpoint written",
        "parents",
        "resumes",
        "action",
    ];
    let rows: Vec<[String; 6]> = leases
        .iter()
        .map(|l| {
            let mut kcl = l.kcl.checkpoint.to_string();
            if l.kcl.sub_sequence_number > 0 {
                kcl.push_str(&format!(" (sub {})", l.kcl.sub_sequence_number));
            }
            [
                l.key().to_string(),
                kcl,
                l.checkpoint.clone().unwrap_or_else(|| "-".into()),
                keys(&l.parents),
                l.resume.to_string(),
                l.action.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |f: &mut fmt::Formatter<'_>, cells: [&str; 6]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        writeln!(f, "{}", padded.join("  ").trim_end())
    };
    line(f, header)?;
    for (row, lease) in rows.iter().zip(leases) {
        line(f, row.each_ref().map(String::as_str))?;
        for warning in &lease.warnings {
            writeln!(f, "    warning: {warning}")?;
        }
    }
    for item in skipped {
        writeln!(f, "skipped {}: {}", item.key, item.reason)?;
    }
    let Summary {
        would_create,
        created,
        exists,
        differs,
        skipped,
        held_by_kcl,
    } = summary;
    let counts: Vec<String> = [
        (would_create, "to create"),
        (created, "created"),
        (exists, "exist with the same values"),
        (differs, "exist and differ (not overwritten)"),
        (skipped, "items skipped"),
    ]
    .into_iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{count} {what}"))
    .collect();
    if counts.is_empty() {
        writeln!(f, "the KCL table is empty: nothing to import")?;
    } else {
        writeln!(f, "{}", counts.join(", "))?;
    }
    if held_by_kcl > 0 {
        writeln!(
            f,
            "{held_by_kcl} leases were held by KCL workers: stop the KCL application before \
             applying, or checkpoints it writes afterwards are not copied"
        )?;
    }
    Ok(())
}

impl fmt::Display for ImportPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let title = format!(
            "dry run: import KCL table {} into {} (nothing written)",
            self.from_table, self.to_table
        );
        table(f, &title, &self.leases, &self.skipped, self.summary())
    }
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let title = format!(
            "imported KCL table {} into {}",
            self.from_table, self.to_table
        );
        table(f, &title, &self.leases, &self.skipped, self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> LeaseKey {
        LeaseKey::new(k).unwrap()
    }

    fn kcl(k: &str, checkpoint: KclCheckpoint, parents: &[&str]) -> KclLease {
        KclLease {
            key: key(k),
            stream: None,
            owner: Some("kcl-worker-1".into()),
            counter: 12,
            checkpoint,
            sub_sequence_number: 0,
            pending_checkpoint: None,
            pending_sub_sequence_number: None,
            pending_checkpoint_state: false,
            owner_switches_since_checkpoint: 1,
            parents: parents.iter().map(|p| key(p)).collect(),
            children: Vec::new(),
            checkpoint_owner: None,
        }
    }

    #[test]
    fn checkpoints_map_to_what_the_consumer_resumes_from() {
        let seq = LeaseImport::mapped(kcl("a", KclCheckpoint::Sequence("4959".into()), &[]));
        // With KCL's sub-sequence number (0: a record not aggregated).
        assert_eq!(seq.checkpoint.as_deref(), Some("4959:0"));
        assert_eq!((seq.resume, seq.finished), (Resume::AfterCheckpoint, false));
        assert!(seq.warnings.is_empty());
        let end = LeaseImport::mapped(kcl("b", KclCheckpoint::ShardEnd, &[]));
        assert_eq!(end.checkpoint.as_deref(), Some(SHARD_END));
        assert_eq!((end.resume, end.finished), (Resume::Finished, true));
        assert!(end.new_lease().into_lease().is_finished());
        for sentinel in [
            KclCheckpoint::TrimHorizon,
            KclCheckpoint::Latest,
            KclCheckpoint::AtTimestamp,
        ] {
            let start = LeaseImport::mapped(kcl("c", sentinel, &["b"]));
            assert_eq!(start.checkpoint, None);
            assert_eq!(start.resume, Resume::InitialPosition);
            assert_eq!(start.new_lease().parents, vec![key("b")]);
        }
    }

    #[test]
    fn a_checkpoint_inside_an_aggregate_is_copied_and_pending_and_handed_over_leases_warn() {
        let mut lease = kcl("a", KclCheckpoint::Sequence("4959".into()), &[]);
        lease.sub_sequence_number = 3;
        lease.pending_checkpoint = Some("4960".into());
        lease.checkpoint_owner = Some("kcl-worker-2".into());
        let mapped = LeaseImport::mapped(lease);
        assert_eq!(mapped.checkpoint.as_deref(), Some("4959:3"));
        assert_eq!(mapped.warnings.len(), 2, "{:?}", mapped.warnings);
        assert!(mapped.warnings[0].contains("pending checkpoint 4960"));
        assert!(mapped.warnings[1].contains("from kcl-worker-2 to kcl-worker-1"));
    }

    #[test]
    fn parents_come_before_their_children() {
        let mut leases: Vec<LeaseImport> = [
            ("merged", vec!["left", "right"]),
            ("right", vec!["root"]),
            ("left", vec!["root"]),
            ("orphan", vec!["deleted-long-ago"]),
            ("root", vec![]),
        ]
        .into_iter()
        .map(|(k, ps)| LeaseImport::mapped(kcl(k, KclCheckpoint::TrimHorizon, &ps)))
        .collect();
        parents_first(&mut leases);
        let order: Vec<&str> = leases.iter().map(|l| l.key().as_str()).collect();
        assert_eq!(order, ["orphan", "root", "left", "right", "merged"]);
    }

    #[test]
    fn an_existing_lease_is_the_same_only_with_the_same_checkpoint_and_parents() {
        let planned =
            LeaseImport::mapped(kcl("c", KclCheckpoint::Sequence("7".into()), &["a", "b"]));
        let mut current = NewLease::new(key("c"))
            .with_parents(vec![key("b"), key("a")])
            .with_checkpoint("7:0")
            .into_lease();
        assert_eq!(planned.judged(&current), Action::Exists);
        current.checkpoint = Some("8".into());
        assert_eq!(
            planned.judged(&current),
            Action::Differs {
                checkpoint: Some("8".into()),
                parents: vec![key("b"), key("a")],
            }
        );
    }
}
