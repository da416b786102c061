//! The shard lifecycle as pure decisions over the lease table and the shard source: which
//! leases may be worked on now ([`status`]), and what the discoverer writes ([`Discovery`]).
//! No I/O here; the worker's taker and discoverer act on the answers.
//!
//! A lease is, in this order of precedence:
//!
//! - **retiring**: its shard left the source and its owner was asked to let go
//!   (`handoff_to` is the retire marker); nobody takes or asks for it; the owner deletes it
//!   once its application finished.
//! - **finished**: checkpointed [`SHARD_END`]; nobody takes it; the discoverer deletes it once
//!   every child has started.
//! - **blocked**: a parent lease exists and is not finished; nobody takes it yet.
//! - **ready**: everything else; balanced over the fleet.
//!
//! [`SHARD_END`]: crate::lease::SHARD_END

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{ByKey, Lease, LeaseKey, NewLease};
use crate::source::Shard;

/// Where a lease is in the shard lifecycle; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// May be taken and worked on.
    Ready,
    /// Waits for a parent to finish.
    Blocked,
    /// Processed to its end.
    Finished,
    /// Being retired: its shard no longer exists.
    Retiring,
}

/// The status of `lease`, looking its parents up with `find`.
pub fn status<'a>(lease: &Lease, find: impl Fn(&LeaseKey) -> Option<&'a Lease>) -> LeaseStatus {
    if lease.is_retiring() {
        LeaseStatus::Retiring
    } else if lease.is_finished() {
        LeaseStatus::Finished
    } else if lease
        .parents
        .iter()
        .any(|p| find(p).is_some_and(|parent| !parent.is_finished()))
    {
        LeaseStatus::Blocked
    } else {
        LeaseStatus::Ready
    }
}

/// The status of every lease of a table listing, in the same order.
pub fn statuses<L: Borrow<Lease>>(leases: &[L]) -> Vec<LeaseStatus> {
    if leases.iter().all(|l| l.borrow().parents.is_empty()) {
        return leases
            .iter()
            .map(|lease| status(lease.borrow(), |_| None))
            .collect();
    }
    let by_key = ByKey::new(leases);
    leases
        .iter()
        .map(|lease| status(lease.borrow(), |k| by_key.get(k)))
        .collect()
}

/// What the discoverer sees of the table.
///
/// `L` is how the leases are held: a [`Snapshot`](crate::lease::Snapshot) shares them
/// (`Arc<Lease>`), a test may own them.
#[derive(Debug)]
pub struct TableState<'a, L = Arc<Lease>> {
    /// Every lease.
    pub leases: &'a [L],
    /// Leases whose owner is alive in the observer's judgement (not expired).
    pub owner_alive: &'a HashSet<LeaseKey>,
    /// Items of the listing that could not be decoded.
    pub malformed: usize,
}

// Copied whatever holds the leases (a derive would ask `L: Copy`).
impl<L> Clone for TableState<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for TableState<'_, L> {}

/// Why the discoverer deletes a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// Finished, and every child has started.
    ParentDone,
    /// Its shard has not been listed for the grace period, and nobody holds it.
    Vanished,
}

/// One write the discoverer makes.
#[derive(Debug, Clone, PartialEq)]
pub enum DiscoveryAction {
    /// Delete `lease`, conditioned on its counter and tenure as seen.
    Delete {
        /// The lease as seen.
        lease: Lease,
        /// Why.
        reason: DeleteReason,
    },
    /// Ask the owner of `lease` (alive, its shard gone) to retire it.
    Retire {
        /// The lease as seen.
        lease: Lease,
    },
}

/// The writes of one discovery round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveryPlan {
    /// Leases to create, in waves: every parent in an earlier wave than its children, so a
    /// child is never in the table while its parent is still to be created.
    pub creates: Vec<Vec<NewLease>>,
    /// Deletions and retirements.
    pub actions: Vec<DiscoveryAction>,
}

/// How many listings in a row must miss a shard before its lease is retired (besides the
/// grace period): one listing that drops a shard (a source hiccup, a listing read from a lagging
/// replica) never retires it, however old its mark.
pub const MIN_MISSED_LISTINGS: u32 = 3;

/// The discoverer's memory across rounds: the last checkpoint seen of every lease (to
/// re-create a lease deleted by hand from where it was) and since when a lease's shard has
/// been missing from the source.
///
/// Both are bounded. A checkpoint is kept while its lease is in the table or its shard is
/// listed, and for the grace period after the lease was last seen (so a worker that takes
/// over discovery can still re-create a lease deleted just before). The missing marks are
/// dropped by [`step_down`](Self::step_down), when this worker stops listing the source: a
/// mark is only good while every listing since it was set missed the shard.
#[derive(Debug, Clone)]
pub struct Discovery {
    retire_after: Duration,
    skip_closed_ancestors: bool,
    known: HashMap<LeaseKey, Known>,
    missing: HashMap<LeaseKey, Missing>,
}

/// A lease's last checkpoint, and when the lease was last seen in the table (or its shard
/// in a listing).
#[derive(Debug, Clone)]
struct Known {
    checkpoint: Option<String>,
    /// The item the checkpoint was read from (its `leaseNonce`) and the write that stored it.
    version: (u64, Option<(u64, u64)>),
    /// Items of this key seen before `version`'s: deleted since, so a view that shows one is
    /// stale.
    replaced: Vec<u64>,
    seen: Instant,
}

/// How many replaced items of one key [`Known`] keeps.
const REPLACED_KEPT: usize = 4;

/// Where a lease's checkpoint stands: the item and the write that stored it.
fn version_of(lease: &Lease) -> (u64, Option<(u64, u64)>) {
    (
        lease.nonce,
        lease.checkpoint_write.map(|w| (w.tenure, w.seq)),
    )
}

/// A shard missing from the source: since the first listing that missed it, and how many
/// listings in a row did.
#[derive(Debug, Clone, Copy)]
struct Missing {
    since: Instant,
    listings: u32,
}

impl Discovery {
    /// A discoverer that retires a lease once its shard has been missing for `retire_after`
    /// (and from at least [`MIN_MISSED_LISTINGS`] listings in a row).
    pub fn new(retire_after: Duration) -> Self {
        Self {
            retire_after,
            skip_closed_ancestors: false,
            known: HashMap::new(),
            missing: HashMap::new(),
        }
    }

    /// Gives no lease to the shards that closed before the fleet first read the source, and
    /// creates their children without them as parents; see
    /// [`ShardSource::skips_closed_ancestors`](crate::source::ShardSource::skips_closed_ancestors).
    #[must_use]
    pub fn skipping_closed_ancestors(mut self, skip: bool) -> Self {
        self.skip_closed_ancestors = skip;
        self
    }

    /// Remembers the checkpoints of a table listing read at `now`, and forgets those of
    /// leases that have been out of the table (and, for the discoverer, out of the source)
    /// for the grace period.
    pub fn observe<L: Borrow<Lease>>(&mut self, leases: &[L], now: Instant) {
        for lease in leases.iter().map(Borrow::borrow) {
            match self.known.get_mut(&lease.key) {
                Some(known) => {
                    known.seen = now;
                    let version = version_of(lease);
                    let (nonce, write) = version;
                    // A view read from a lagging replica may show an older write of the item,
                    // or an item deleted since: it never moves what is remembered back.
                    let newer = if nonce == known.version.0 {
                        write > known.version.1
                    } else if known.replaced.contains(&nonce) {
                        false
                    } else {
                        known.replaced.push(known.version.0);
                        if known.replaced.len() > REPLACED_KEPT {
                            known.replaced.remove(0);
                        }
                        true
                    };
                    if newer {
                        known.version = version;
                        known.checkpoint.clone_from(&lease.checkpoint);
                    }
                }
                None => {
                    let known = Known {
                        checkpoint: lease.checkpoint.clone(),
                        version: version_of(lease),
                        replaced: Vec::new(),
                        seen: now,
                    };
                    self.known.insert(lease.key.clone(), known);
                }
            }
        }
        let grace = self.retire_after;
        self.known
            .retain(|_, known| now.saturating_duration_since(known.seen) < grace);
    }

    /// This worker stopped listing the source (or starts listing it again after a pause):
    /// its missing marks no longer say that *every* listing missed a shard, so they are
    /// dropped and each grace period starts afresh at the next listing.
    pub fn step_down(&mut self) {
        self.missing.clear();
    }

    /// Forgets a lease the discoverer deleted on purpose: if its shard comes back, it starts
    /// afresh.
    pub fn forget(&mut self, key: &LeaseKey) {
        self.known.remove(key);
        self.missing.remove(key);
    }

    /// How many checkpoints and missing marks it remembers.
    #[cfg(test)]
    fn remembered(&self) -> (usize, usize) {
        (self.known.len(), self.missing.len())
    }

    /// The last checkpoint seen of `key`, if any.
    #[cfg(test)]
    fn known_checkpoint(&self, key: &LeaseKey) -> Option<&str> {
        self.known.get(key).and_then(|k| k.checkpoint.as_deref())
    }

    /// Decides the writes that bring the table in line with `shards`.
    pub fn plan<L: Borrow<Lease>>(
        &mut self,
        shards: &[Shard],
        table: TableState<'_, L>,
        now: Instant,
    ) -> DiscoveryPlan {
        let graph = Graph::new(shards, table.leases);
        let mut plan = DiscoveryPlan::default();

        // New shards, parents first; a shard with a leased descendant was consumed already.
        let skipped = if self.skip_closed_ancestors {
            graph.closed_before_start(&self.known)
        } else {
            HashSet::new()
        };
        let mut waves: BTreeMap<usize, Vec<NewLease>> = BTreeMap::new();
        for shard in graph.shards.values() {
            if graph.leases.contains_key(&shard.key)
                || graph.consumed(&shard.key)
                || skipped.contains(&shard.key)
            {
                continue;
            }
            let related = !shard.parents.is_empty() || graph.children.contains_key(&shard.key);
            if table.malformed > 0 && related {
                // A relative's lease may be among the undecodable items: creating this one
                // could process a parent twice or a child before its parent. Wait until the
                // table is readable again.
                tracing::warn!(lease_key = %shard.key, malformed = table.malformed, "not creating the lease of a shard with parents or children while the table has undecodable items");
                continue;
            }
            let parents = shard
                .parents
                .iter()
                .filter(|p| !(self.skip_closed_ancestors && graph.gone(p, &skipped)));
            let mut lease =
                NewLease::new(shard.key.clone()).with_parents(parents.cloned().collect());
            lease.checkpoint = self
                .known
                .get(&shard.key)
                .and_then(|k| k.checkpoint.clone());
            waves
                .entry(graph.depth(&shard.key))
                .or_default()
                .push(lease);
        }
        plan.creates = waves.into_values().collect();

        for lease in table.leases.iter().map(Borrow::borrow) {
            let alive = table.owner_alive.contains(&lease.key) && lease.owner.is_some();
            if lease.is_retiring() && !alive {
                // Its owner died while retiring it (nobody else may take a retiring lease):
                // finish the retirement. A shard listed again gets a new lease next round.
                plan.actions.push(DiscoveryAction::Delete {
                    lease: Lease::clone(lease),
                    reason: DeleteReason::Vanished,
                });
                continue;
            }
            if !graph.shards.contains_key(&lease.key) {
                let mark = self.missing.entry(lease.key.clone()).or_insert(Missing {
                    since: now,
                    listings: 0,
                });
                mark.listings = mark.listings.saturating_add(1);
                if now.saturating_duration_since(mark.since) < self.retire_after
                    || mark.listings < MIN_MISSED_LISTINGS
                {
                    continue;
                }
                if !alive {
                    plan.actions.push(DiscoveryAction::Delete {
                        lease: Lease::clone(lease),
                        reason: DeleteReason::Vanished,
                    });
                } else if lease.handoff_to.is_none() {
                    plan.actions.push(DiscoveryAction::Retire {
                        lease: Lease::clone(lease),
                    });
                }
                // Otherwise a handoff or the retirement is in progress: wait for it.
                continue;
            }
            if lease.is_finished() && !alive && graph.children_started(&lease.key) {
                plan.actions.push(DiscoveryAction::Delete {
                    lease: Lease::clone(lease),
                    reason: DeleteReason::ParentDone,
                });
            }
        }

        self.missing
            .retain(|k, _| graph.leases.contains_key(k) && !graph.shards.contains_key(k));
        // A listed shard keeps its checkpoint while the lease is out of the table (deleted by
        // hand, or its create failed): it is re-created from there.
        self.known.retain(|k, known| {
            if graph.shards.contains_key(k) {
                known.seen = now;
                true
            } else {
                graph.leases.contains_key(k)
            }
        });
        plan
    }
}

/// The lineage of the shards and leases of one round.
struct Graph<'a> {
    shards: BTreeMap<&'a LeaseKey, &'a Shard>,
    leases: HashMap<&'a LeaseKey, &'a Lease>,
    /// Children by parent, from the source and from the leases' own parent lists.
    children: HashMap<&'a LeaseKey, Vec<&'a LeaseKey>>,
}

impl<'a> Graph<'a> {
    fn new<L: Borrow<Lease>>(shards: &'a [Shard], leases: &'a [L]) -> Self {
        let mut by_key = BTreeMap::new();
        for shard in shards {
            if by_key.insert(&shard.key, shard).is_some() {
                tracing::warn!(lease_key = %shard.key, "the source listed a shard twice; the last one counts");
            }
        }
        let mut children: HashMap<&LeaseKey, Vec<&LeaseKey>> = HashMap::new();
        let links = by_key
            .values()
            .flat_map(|s| s.parents.iter().map(move |p| (p, &s.key)))
            .chain(
                leases
                    .iter()
                    .map(Borrow::borrow)
                    .flat_map(|l: &Lease| l.parents.iter().map(move |p| (p, &l.key))),
            );
        for (parent, child) in links {
            if parent == child {
                continue;
            }
            let list = children.entry(parent).or_default();
            if !list.contains(&child) {
                list.push(child);
            }
        }
        Self {
            shards: by_key,
            leases: leases
                .iter()
                .map(|l| (&l.borrow().key, l.borrow()))
                .collect(),
            children,
        }
    }

    /// True when some descendant of `key` has a lease: `key` was processed already (its
    /// lease was deleted after its children started).
    fn consumed(&self, key: &LeaseKey) -> bool {
        let mut seen = HashSet::new();
        let mut stack: Vec<&LeaseKey> = self.children.get(key).cloned().unwrap_or_default();
        while let Some(child) = stack.pop() {
            if !seen.insert(child) {
                continue;
            }
            if self.leases.contains_key(child) {
                return true;
            }
            stack.extend(self.children.get(child).into_iter().flatten());
        }
        false
    }

    /// True when `key` has children and each of them started (its lease was taken once, or
    /// was itself consumed and deleted).
    fn children_started(&self, key: &LeaseKey) -> bool {
        let Some(children) = self.children.get(key) else {
            return false;
        };
        children.iter().all(|child| match self.leases.get(child) {
            Some(lease) => lease.tenure > 0 || lease.is_finished(),
            None => self.consumed(child),
        })
    }

    /// True when `key` has no lease and is either not listed or in `skipped`.
    fn gone(&self, key: &LeaseKey, skipped: &HashSet<&LeaseKey>) -> bool {
        !self.leases.contains_key(key) && (!self.shards.contains_key(key) || skipped.contains(key))
    }

    /// The listed shards that closed before the fleet first read the source: closed, with no
    /// lease, no checkpoint remembered and no leased descendant, whose parents are all gone
    /// (no lease, and not listed or closed before the start themselves).
    fn closed_before_start(&self, known: &HashMap<LeaseKey, Known>) -> HashSet<&'a LeaseKey> {
        let mut order: Vec<&'a Shard> = self.shards.values().copied().collect();
        // Parents first, so a parent's verdict is known when its children are judged.
        order.sort_by_key(|shard| self.depth(&shard.key));
        let mut skipped = HashSet::new();
        for shard in order {
            if shard.closed
                && !self.leases.contains_key(&shard.key)
                && !known.contains_key(&shard.key)
                && !self.consumed(&shard.key)
                && shard.parents.iter().all(|p| self.gone(p, &skipped))
            {
                skipped.insert(&shard.key);
            }
        }
        skipped
    }

    /// The length of the longest chain of listed ancestors of `key`.
    fn depth(&self, key: &LeaseKey) -> usize {
        let mut depth = 0;
        let mut level: Vec<&LeaseKey> = vec![key];
        let mut seen = HashSet::from([key]);
        loop {
            let next: Vec<&LeaseKey> = level
                .iter()
                .filter_map(|k| self.shards.get(k))
                .flat_map(|s| s.parents.iter())
                .filter(|p| self.shards.contains_key(p) && seen.insert(*p))
                .collect();
            if next.is_empty() {
                return depth;
            }
            depth += 1;
            level = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{WorkerId, SHARD_END};

    fn key(s: &str) -> LeaseKey {
        LeaseKey::new(s).unwrap()
    }

    fn shard(s: &str, parents: &[&str]) -> Shard {
        Shard::new(key(s)).with_parents(parents.iter().map(|p| key(p)))
    }

    fn lease(s: &str, parents: &[&str]) -> Lease {
        NewLease::new(key(s))
            .with_parents(parents.iter().map(|p| key(p)).collect())
            .into_lease()
    }

    fn owned(mut lease: Lease, owner: &str) -> Lease {
        lease.owner = Some(WorkerId::new(owner).unwrap());
        lease.tenure += 1;
        lease.counter += 1;
        lease
    }

    fn finished(mut lease: Lease) -> Lease {
        lease.checkpoint = Some(SHARD_END.to_owned());
        lease
    }

    fn table<'a>(leases: &'a [Lease], alive: &'a HashSet<LeaseKey>) -> TableState<'a, Lease> {
        TableState {
            leases,
            owner_alive: alive,
            malformed: 0,
        }
    }

    fn created(plan: &DiscoveryPlan) -> Vec<Vec<&str>> {
        plan.creates
            .iter()
            .map(|wave| wave.iter().map(|l| l.key.as_str()).collect())
            .collect()
    }

    #[test]
    fn a_child_waits_for_an_unfinished_parent_and_not_for_a_finished_or_absent_one() {
        let parent = owned(lease("p", &[]), "a");
        let child = lease("c", &["p"]);
        let orphan = lease("o", &["gone"]);
        let leases = vec![parent.clone(), child.clone(), orphan];
        assert_eq!(
            statuses(&leases),
            [LeaseStatus::Ready, LeaseStatus::Blocked, LeaseStatus::Ready]
        );
        let leases = vec![finished(parent), child];
        assert_eq!(
            statuses(&leases),
            [LeaseStatus::Finished, LeaseStatus::Ready]
        );
        let mut retiring = owned(lease("r", &[]), "a");
        retiring.handoff_to = Some(WorkerId::retire_marker());
        assert_eq!(statuses(&[retiring]), [LeaseStatus::Retiring]);
    }

    #[test]
    fn new_shards_are_created_parents_first() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![
            shard("c2", &["b"]),
            shard("a", &[]),
            shard("b", &["a"]),
            shard("m", &["a", "x"]),
            shard("x", &[]),
        ];
        let plan = discovery.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(created(&plan), [vec!["a", "x"], vec!["b", "m"], vec!["c2"]]);
        assert_eq!(plan.creates[1][1].parents, [key("a"), key("x")]);
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn skipping_closed_ancestors_leases_only_what_is_open_at_the_first_start() {
        let mut discovery = Discovery::new(Duration::from_secs(60)).skipping_closed_ancestors(true);
        // Before the first start: p split into c1 and c2; c2 merged with q into m; r open.
        let shards = vec![
            shard("p", &[]).closed(),
            shard("q", &[]).closed(),
            shard("c1", &["p"]),
            shard("c2", &["p"]).closed(),
            shard("m", &["c2", "q"]),
            shard("r", &[]),
            shard("t", &["trimmed"]),
        ];
        let plan = discovery.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(created(&plan), [vec!["r", "t"], vec!["c1"], vec!["m"]]);
        assert!(
            plan.creates.iter().flatten().all(|l| l.parents.is_empty()),
            "{plan:?}"
        );
        // The next round: nothing more (the closed ones are consumed by their leased children).
        let leases: Vec<Lease> = plan
            .creates
            .iter()
            .flatten()
            .map(|l| l.clone().into_lease())
            .collect();
        let plan = discovery.plan(&shards, table(&leases, &HashSet::new()), Instant::now());
        assert!(plan.creates.is_empty(), "{plan:?}");
    }

    #[test]
    fn skipping_closed_ancestors_still_reads_a_leased_parent_first_after_a_reshard() {
        let mut discovery = Discovery::new(Duration::from_secs(60)).skipping_closed_ancestors(true);
        // p was open and leased when the fleet started; it split into c1 and c2 since.
        let shards = vec![
            shard("p", &[]).closed(),
            shard("c1", &["p"]),
            shard("c2", &["p"]),
        ];
        let leases = vec![owned(lease("p", &[]), "a")];
        let plan = discovery.plan(&shards, table(&leases, &HashSet::new()), Instant::now());
        assert_eq!(created(&plan), [vec!["c1", "c2"]]);
        assert!(
            plan.creates[0].iter().all(|l| l.parents == [key("p")]),
            "{plan:?}"
        );
        // Without the option a closed shard with no lease is created, its children after it.
        let mut all = Discovery::new(Duration::from_secs(60));
        let plan = all.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(created(&plan), [vec!["p"], vec!["c1", "c2"]]);
    }

    #[test]
    fn a_shard_with_a_leased_descendant_is_not_created_again() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        // p was split into c; c was split into g. Only g has a lease now.
        let shards = vec![shard("p", &[]), shard("c", &["p"]), shard("g", &["c"])];
        let leases = vec![owned(lease("g", &["c"]), "a")];
        let plan = discovery.plan(&shards, table(&leases, &HashSet::new()), Instant::now());
        assert!(plan.creates.is_empty(), "{plan:?}");
    }

    #[test]
    fn a_lease_deleted_by_hand_comes_back_from_its_last_checkpoint() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![shard("s", &[])];
        let mut seen = owned(lease("s", &[]), "a");
        seen.checkpoint = Some("42".into());
        discovery.observe(std::slice::from_ref(&seen), Instant::now());
        let plan = discovery.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(plan.creates[0][0].checkpoint.as_deref(), Some("42"));
        // Deleted on purpose: forgotten, so a shard that comes back starts afresh.
        discovery.forget(&key("s"));
        let plan = discovery.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(plan.creates[0][0].checkpoint, None);
    }

    #[test]
    fn a_finished_parent_is_deleted_once_every_child_started() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![shard("p", &[]), shard("c1", &["p"]), shard("c2", &["p"])];
        let parent = finished(lease("p", &[]));
        let started = owned(lease("c1", &["p"]), "a");
        let waiting = lease("c2", &["p"]);
        let none = HashSet::new();
        let leases = vec![parent.clone(), started.clone(), waiting];
        let plan = discovery.plan(&shards, table(&leases, &none), Instant::now());
        assert!(plan.actions.is_empty(), "c2 has not started: {plan:?}");

        let leases = vec![
            parent.clone(),
            started.clone(),
            owned(lease("c2", &["p"]), "b"),
        ];
        let plan = discovery.plan(&shards, table(&leases, &none), Instant::now());
        assert_eq!(
            plan.actions,
            [DiscoveryAction::Delete {
                lease: parent.clone(),
                reason: DeleteReason::ParentDone
            }]
        );

        // Still held by a live owner (its application has not finished): kept.
        let held = owned(parent, "a");
        let alive = HashSet::from([key("p")]);
        let leases = vec![held, started, owned(lease("c2", &["p"]), "b")];
        let plan = discovery.plan(&shards, table(&leases, &alive), Instant::now());
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn a_finished_shard_without_children_is_kept_until_it_leaves_the_source() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![shard("s", &[]).closed()];
        let leases = vec![finished(lease("s", &[]))];
        let plan = discovery.plan(&shards, table(&leases, &HashSet::new()), Instant::now());
        assert_eq!(plan, DiscoveryPlan::default());
    }

    #[test]
    fn a_vanished_shard_is_retired_after_the_grace_period() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let start = Instant::now();
        let held = owned(lease("held", &[]), "a");
        let free = lease("free", &[]);
        let mut moving = owned(lease("moving", &[]), "a");
        moving.handoff_to = Some(WorkerId::new("b").unwrap());
        let leases = vec![held.clone(), free.clone(), moving];
        let alive = HashSet::from([key("held"), key("moving")]);
        let plan = discovery.plan(&[], table(&leases, &alive), start);
        assert!(plan.actions.is_empty(), "within the grace period");
        let plan = discovery.plan(&[], table(&leases, &alive), start + Duration::from_secs(59));
        assert!(plan.actions.is_empty(), "within the grace period");
        let plan = discovery.plan(&[], table(&leases, &alive), start + Duration::from_secs(60));
        assert_eq!(
            plan.actions,
            [
                DiscoveryAction::Retire { lease: held },
                DiscoveryAction::Delete {
                    lease: free,
                    reason: DeleteReason::Vanished
                },
            ]
        );
    }

    #[test]
    fn one_missed_listing_never_retires_a_shard_however_old_its_mark() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let start = Instant::now();
        let held = owned(lease("s", &[]), "a");
        let leases = vec![held.clone()];
        let alive = HashSet::from([key("s")]);
        // Missed once, then (another worker discovering meanwhile) missed once again much
        // later: two listings, not a shard gone for the grace period.
        let plan = discovery.plan(&[], table(&leases, &alive), start);
        assert!(plan.actions.is_empty());
        let plan = discovery.plan(
            &[],
            table(&leases, &alive),
            start + Duration::from_secs(300),
        );
        assert!(plan.actions.is_empty(), "retired on a stale mark: {plan:?}");
        let plan = discovery.plan(
            &[],
            table(&leases, &alive),
            start + Duration::from_secs(310),
        );
        assert_eq!(plan.actions, [DiscoveryAction::Retire { lease: held }]);
    }

    #[test]
    fn a_discoverer_that_stepped_down_starts_its_grace_periods_afresh() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let leases = vec![owned(lease("s", &[]), "a")];
        let alive = HashSet::from([key("s")]);
        for s in [0, 10, 20] {
            let plan = discovery.plan(&[], table(&leases, &alive), at(s));
            assert!(plan.actions.is_empty());
        }
        assert_eq!(discovery.remembered().1, 1);
        discovery.step_down();
        assert_eq!(discovery.remembered().1, 0);
        // Elected again: the shard must be missed for a whole grace period from now on.
        for s in [100, 110, 120, 150] {
            let plan = discovery.plan(&[], table(&leases, &alive), at(s));
            assert!(plan.actions.is_empty(), "at {s} s: {plan:?}");
        }
        let plan = discovery.plan(&[], table(&leases, &alive), at(160));
        assert_eq!(plan.actions.len(), 1, "{plan:?}");
    }

    #[test]
    fn checkpoints_of_leases_gone_from_the_table_are_forgotten_after_the_grace_period() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut kept = owned(lease("kept", &[]), "a");
        kept.checkpoint = Some("7".into());
        let mut gone = owned(lease("gone", &[]), "a");
        gone.checkpoint = Some("9".into());
        discovery.observe(&[kept.clone(), gone], at(0));
        // Deleted: still remembered for a while, for whoever discovers next.
        discovery.observe(std::slice::from_ref(&kept), at(59));
        assert_eq!(discovery.known_checkpoint(&key("gone")), Some("9"));
        discovery.observe(std::slice::from_ref(&kept), at(60));
        assert_eq!(discovery.known_checkpoint(&key("gone")), None);
        assert_eq!(discovery.remembered(), (1, 0));
        // Thousands of short-lived leases later, only the table's own are remembered.
        for i in 0..1000 {
            let churn = owned(lease(&format!("churn-{i}"), &[]), "a");
            discovery.observe(&[kept.clone(), churn], at(100 + i));
        }
        assert!(
            discovery.remembered().0 <= 62,
            "{:?}",
            discovery.remembered()
        );
        // A listed shard keeps its checkpoint while its lease is out of the table.
        let shards = vec![shard("kept", &[])];
        let none = HashSet::new();
        let plan = discovery.plan(&shards, table(&[], &none), at(2000));
        assert_eq!(plan.creates[0][0].checkpoint.as_deref(), Some("7"));
        discovery.observe::<Lease>(&[], at(2030));
        let plan = discovery.plan(&shards, table(&[], &none), at(2030));
        assert_eq!(plan.creates[0][0].checkpoint.as_deref(), Some("7"));
    }

    /// Views read from a lagging replica (the rounds' scans are eventually consistent) may
    /// show an older checkpoint of the item, or the item as it was before it was deleted and
    /// created again: neither moves the remembered checkpoint back.
    #[test]
    fn a_stale_view_never_moves_a_remembered_checkpoint_back() {
        use crate::lease::CheckpointWrite;
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let at = Instant::now();
        let checkpointed = |nonce: u64, tenure: u64, seq: u64, value: &str| {
            let mut lease = owned(lease("s", &[]), "a");
            lease.nonce = nonce;
            lease.tenure = tenure;
            lease.checkpoint = Some(value.into());
            lease.checkpoint_write = Some(CheckpointWrite { tenure, seq });
            lease
        };
        discovery.observe(&[checkpointed(5, 1, 2, "20")], at);
        discovery.observe(&[checkpointed(5, 1, 1, "10")], at);
        assert_eq!(
            discovery.known_checkpoint(&key("s")),
            Some("20"),
            "an older write"
        );
        discovery.observe(&[checkpointed(5, 2, 1, "30")], at);
        discovery.observe(&[checkpointed(5, 1, 2, "20")], at);
        assert_eq!(
            discovery.known_checkpoint(&key("s")),
            Some("30"),
            "an older tenure"
        );
        // Deleted and created again (another nonce), then a stale view of the deleted item.
        let mut again = owned(lease("s", &[]), "a");
        again.nonce = 7;
        again.checkpoint = Some("30".into());
        discovery.observe(&[again], at);
        discovery.observe(&[checkpointed(5, 1, 2, "20")], at);
        assert_eq!(
            discovery.known_checkpoint(&key("s")),
            Some("30"),
            "a deleted item"
        );
        discovery.observe(&[checkpointed(7, 1, 1, "40")], at);
        assert_eq!(
            discovery.known_checkpoint(&key("s")),
            Some("40"),
            "the new item moves on"
        );
    }

    #[test]
    fn a_retiring_lease_whose_owner_died_is_deleted_even_if_listed_again() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let mut retiring = owned(lease("r", &[]), "a");
        retiring.handoff_to = Some(WorkerId::retire_marker());
        let leases = vec![retiring.clone()];
        let shards = vec![shard("r", &[])];
        let alive = HashSet::from([key("r")]);
        let plan = discovery.plan(&shards, table(&leases, &alive), Instant::now());
        assert!(plan.actions.is_empty(), "its owner is retiring it");
        let plan = discovery.plan(&shards, table(&leases, &HashSet::new()), Instant::now());
        assert_eq!(
            plan.actions,
            [DiscoveryAction::Delete {
                lease: retiring,
                reason: DeleteReason::Vanished
            }]
        );
    }

    #[test]
    fn a_shard_that_comes_back_within_the_grace_period_is_kept() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let start = Instant::now();
        let leases = vec![lease("s", &[])];
        let none = HashSet::new();
        let _ = discovery.plan(&[], table(&leases, &none), start);
        let _ = discovery.plan(
            &[shard("s", &[])],
            table(&leases, &none),
            start + Duration::from_secs(30),
        );
        let plan = discovery.plan(&[], table(&leases, &none), start + Duration::from_secs(61));
        assert!(
            plan.actions.is_empty(),
            "the grace period restarted: {plan:?}"
        );
    }

    #[test]
    fn related_shards_are_not_created_while_the_table_has_undecodable_items() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![shard("p", &[]), shard("c", &["p"]), shard("x", &[])];
        let none = HashSet::new();
        let state = TableState {
            leases: &[] as &[Lease],
            owner_alive: &none,
            malformed: 1,
        };
        let plan = discovery.plan(&shards, state, Instant::now());
        assert_eq!(created(&plan), [vec!["x"]]);
    }

    #[test]
    fn cycles_in_the_lineage_do_not_hang() {
        let mut discovery = Discovery::new(Duration::from_secs(60));
        let shards = vec![shard("a", &["b"]), shard("b", &["a"]), shard("s", &["s"])];
        let plan = discovery.plan(&shards, table(&[], &HashSet::new()), Instant::now());
        assert_eq!(plan.creates.iter().flatten().count(), 3);
    }
}
