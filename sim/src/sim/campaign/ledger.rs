//! The campaign's ledger: who processes what (the applications' view, with frozen processes
//! not processing), the checkpoints the table accepted, and every invariant broken.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use shardlease::lease::Lease;
use shardlease::LeaseKey;
use tokio::time::Instant;

use crate::sim::net::Audit;

/// One invariant broken.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// A short name: `overlap`, `checkpoint-ended-tenure`, `checkpoint-backwards`,
    /// `checkpoint-lost`, `checkpoint-regressed`, `checkpoint-later-item`, `hang`, `shutdown-hang`, `start-hang`, `unprocessed`,
    /// `unbalanced`, `unsettled`, `not-retired`, `growth`, `setup`.
    pub invariant: &'static str,
    /// Simulated seconds since the schedule began.
    pub at: f64,
    pub detail: String,
}

/// The applications' view of the fleet, and the checkpoint audit.
#[derive(Debug)]
pub struct Ledger {
    begin: Instant,
    /// The process processing each lease, and with how many grants (the same process may
    /// be given a lease again before its previous grant's task has noticed the stop).
    holder: BTreeMap<LeaseKey, (u64, u32)>,
    /// Frozen processes process nothing.
    frozen: BTreeSet<u64>,
    /// Leases a frozen process held when another process started them, and when the frozen
    /// one was thawed: it must stop them at that very instant, before doing anything.
    overtaken: BTreeMap<(u64, LeaseKey), Option<Instant>>,
    /// The last checkpoint the table holds for each lease, with the item's `leaseNonce`
    /// (deleted leases included: none may come back with less, unless the item is another).
    checkpoints: BTreeMap<LeaseKey, (u64, u64)>,
    /// The newest checkpoint acknowledged for each lease (to an application, or the operator's
    /// written), with the item's `leaseNonce`: no later write or read of that item may show
    /// an older one.
    acked: BTreeMap<LeaseKey, (u64, u64)>,
    /// Each process's latest take of each lease: the tenure and the item's nonce (a grant of
    /// that tenure is of that item).
    taken: BTreeMap<(u64, LeaseKey), (u64, u64)>,
    /// Processing starts.
    pub starts: u64,
    /// From the heal on: when each lease was first processed.
    healed: Option<Instant>,
    processed: BTreeMap<LeaseKey, Instant>,
    /// The operator's moves of each lease: `None` while one is in progress, else when the
    /// last one ended.
    operated: BTreeMap<LeaseKey, Option<Instant>>,
    pub violations: Vec<Violation>,
}

/// The process id the operator's tool writes as (no worker process has it).
pub const OPERATOR_PROCESS: u64 = 999_999;

/// A checkpoint written by the campaign's applications: a number, then `.` and the nonce of
/// the item it is meant for (the operator writes the number alone).
pub fn checkpoint_value(checkpoint: Option<&str>) -> Option<u64> {
    checkpoint.and_then(|c| c.split('.').next()?.parse().ok())
}

/// The item (`leaseNonce`) a checkpoint was meant for, if it names one.
pub fn checkpoint_item(checkpoint: Option<&str>) -> Option<u64> {
    checkpoint.and_then(|c| c.split_once('.')?.1.parse().ok())
}

/// The checkpoint the applications write for `value` into item `item` (0: unknown).
pub fn checkpoint_text(value: u64, item: u64) -> String {
    if item == 0 {
        format!("{value:012}")
    } else {
        format!("{value:012}.{item}")
    }
}

/// Print every start, stop, freeze and thaw to stderr (`--trace`, for a replay).
pub static TRACE: AtomicBool = AtomicBool::new(false);

impl Ledger {
    /// Prints `what` with the simulated time, when tracing.
    pub fn trace(&self, what: impl FnOnce() -> String) {
        if TRACE.load(Ordering::Relaxed) {
            let at = (Instant::now() - self.begin).as_secs_f64();
            eprintln!("{at:10.3} {}", what());
        }
    }

    pub fn new(begin: Instant) -> Self {
        Self {
            begin,
            holder: BTreeMap::new(),
            frozen: BTreeSet::new(),
            overtaken: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            acked: BTreeMap::new(),
            taken: BTreeMap::new(),
            starts: 0,
            healed: None,
            processed: BTreeMap::new(),
            operated: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    pub fn violate(&mut self, invariant: &'static str, detail: String) {
        let at = (Instant::now() - self.begin).as_secs_f64();
        self.violations.push(Violation {
            invariant,
            at,
            detail,
        });
    }

    /// Process `process`'s application starts on `key`, granted in `tenure` at `checkpoint`.
    /// Returns the item's nonce (0 if no take of that tenure by this process was seen).
    pub fn start(
        &mut self,
        process: u64,
        key: &LeaseKey,
        tenure: u64,
        checkpoint: Option<&str>,
    ) -> u64 {
        self.trace(|| format!("p{process} starts {key} (tenure {tenure}) at {checkpoint:?}"));
        self.starts += 1;
        let item = match self.taken.get(&(process, key.clone())) {
            Some((taken, nonce)) if *taken == tenure => *nonce,
            _ => 0,
        };
        let granted = checkpoint_value(checkpoint).unwrap_or(0);
        if let Some((nonce, last)) = self.checkpoints.get(key).copied() {
            if granted < last && (item == 0 || item == nonce) {
                self.violate(
                    "checkpoint-lost",
                    format!("p{process} was granted {key} at checkpoint {granted}; the table had accepted {last}"),
                );
            }
        }
        if let Some((nonce, acked)) = self.acked.get(key).copied() {
            if granted < acked && item == nonce {
                self.violate(
                    "checkpoint-regressed",
                    format!("p{process} was granted {key} (item {nonce}) at checkpoint {granted}; {acked} had been acknowledged"),
                );
            }
        }
        match self.holder.get_mut(key) {
            Some((other, grants)) if *other == process => *grants += 1,
            Some((other, _)) => {
                let other = *other;
                if self.frozen.contains(&other) {
                    self.overtaken.insert((other, key.clone()), None);
                } else {
                    self.violate(
                        "overlap",
                        format!("{key} started by p{process} while p{other} processes it"),
                    );
                }
                self.holder.insert(key.clone(), (process, 1));
            }
            None => {
                self.holder.insert(key.clone(), (process, 1));
            }
        }
        if self.healed.is_some() {
            self.processed
                .entry(key.clone())
                .or_insert_with(Instant::now);
        }
        item
    }

    /// The store acknowledged `checkpoint` to process `process`'s application (or to the
    /// operator): from now on no write or read of that item may show an older one.
    pub fn acknowledged(&mut self, process: u64, key: &LeaseKey, checkpoint: &str) {
        let (Some(value), Some(item)) = (
            checkpoint_value(Some(checkpoint)),
            checkpoint_item(Some(checkpoint)),
        ) else {
            return;
        };
        self.trace(|| format!("p{process} acknowledged {key} at {checkpoint}"));
        let current = self.checkpoints.get(key).map(|(nonce, _)| *nonce);
        match self.acked.get_mut(key) {
            Some((nonce, acked)) if *nonce == item => *acked = (*acked).max(value),
            // An acknowledgement for an item since replaced binds nothing.
            _ if current.is_some_and(|c| c != item) => {}
            _ => {
                self.acked.insert(key.clone(), (item, value));
            }
        }
    }

    /// Process `process`'s application stopped processing `key`.
    pub fn stop(&mut self, process: u64, key: &LeaseKey) {
        self.trace(|| format!("p{process} stops {key}"));
        match self.holder.get_mut(key) {
            Some((holder, grants)) if *holder == process => {
                *grants -= 1;
                if *grants == 0 {
                    self.holder.remove(key);
                }
            }
            _ => {
                let overtaken = self.overtaken.remove(&(process, key.clone()));
                if let Some(Some(thawed)) = overtaken {
                    if Instant::now() > thawed {
                        self.violate(
                            "overlap",
                            format!(
                                "p{process} went on processing {key} {:.3} s after its freeze ended, while another process processes it",
                                (Instant::now() - thawed).as_secs_f64()
                            ),
                        );
                    }
                }
            }
        }
    }

    pub fn freeze(&mut self, process: u64) {
        self.trace(|| format!("p{process} frozen"));
        self.frozen.insert(process);
    }

    pub fn thaw(&mut self, process: u64) {
        if !self.frozen.remove(&process) {
            return;
        }
        self.trace(|| format!("p{process} thawed"));
        let now = Instant::now();
        for ((p, _), thawed) in self.overtaken.iter_mut() {
            if *p == process {
                *thawed = Some(now);
            }
        }
    }

    pub fn is_frozen(&self, process: u64) -> bool {
        self.frozen.contains(&process)
    }

    /// The process is gone (killed, or exited after its shutdown): it processes nothing.
    pub fn gone(&mut self, process: u64) {
        self.trace(|| format!("p{process} gone"));
        self.taken.retain(|(p, _), _| *p != process);
        self.holder.retain(|_, (p, _)| *p != process);
        self.overtaken.retain(|(p, _), _| *p != process);
        self.frozen.remove(&process);
    }

    /// Checks what can only be seen as time passes: a thawed process that has not stopped a
    /// lease another process started while it was frozen.
    pub fn poll(&mut self) {
        let now = Instant::now();
        let late: Vec<(u64, LeaseKey)> = self
            .overtaken
            .iter()
            .filter(|(_, thawed)| thawed.is_some_and(|t| now > t))
            .map(|(k, _)| k.clone())
            .collect();
        for (process, key) in late {
            self.overtaken.remove(&(process, key.clone()));
            self.violate(
                "overlap",
                format!("p{process} did not stop {key} when its freeze ended, while another process processes it"),
            );
        }
    }

    /// The faults healed now: from here on, record when each lease is first processed.
    pub fn heal(&mut self) {
        let now = Instant::now();
        self.healed = Some(now);
        self.processed = self.holder.keys().map(|k| (k.clone(), now)).collect();
    }

    /// An operator's tool starts moving `key` (`done` false) or has finished (`done` true).
    pub fn operated(&mut self, key: &LeaseKey, done: bool) {
        self.operated.insert(key.clone(), done.then(Instant::now));
    }

    /// The operator's moves of `key`: `None` if there were none, `Some(None)` while one is in
    /// progress, `Some(Some(at))` when the last one ended at `at`.
    pub fn operated_at(&self, key: &LeaseKey) -> Option<Option<Instant>> {
        self.operated.get(key).copied()
    }

    /// When `key` was first processed since the heal.
    pub fn processed_since_heal(&self, key: &LeaseKey) -> Option<Instant> {
        self.processed.get(key).copied()
    }

    /// The process processing `key`, if any.
    pub fn holder(&self, key: &LeaseKey) -> Option<u64> {
        self.holder.get(key).map(|(p, _)| *p)
    }

    /// How many leases each process processes.
    pub fn counts(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for (p, _) in self.holder.values() {
            *counts.entry(*p).or_default() += 1;
        }
        counts
    }

    /// The sizes of every map the ledger keeps (for the growth check).
    pub fn sizes(&self) -> usize {
        self.holder.len()
            + self.frozen.len()
            + self.overtaken.len()
            + self.checkpoints.len()
            + self.acked.len()
            + self.taken.len()
            + self.processed.len()
    }

    fn written(&mut self, process: u64, operation: &'static str, lease: &Lease) {
        let key = &lease.key;
        self.trace(|| {
            format!(
                "{operation} {key} by p{process} applied: owner {:?} ({:?}) tenure {} counter {} handoff {:?}",
                lease.owner.as_ref().map(|o| o.as_str()),
                lease.owner_incarnation,
                lease.tenure,
                lease.counter,
                lease.handoff_to.as_ref().map(|o| o.as_str())
            )
        });
        if operation == "take" && process != OPERATOR_PROCESS {
            self.taken
                .insert((process, key.clone()), (lease.tenure, lease.nonce));
        }
        let text = lease.checkpoint.as_deref();
        let value = checkpoint_value(text);
        if operation == "checkpoint" && process != OPERATOR_PROCESS {
            if let Some(item) = checkpoint_item(text).filter(|i| *i != lease.nonce) {
                self.violate(
                    "checkpoint-later-item",
                    format!("{key}: checkpoint {} of p{process}, meant for item {item}, accepted into item {} (tenure {})", value.unwrap_or(0), lease.nonce, lease.tenure),
                );
            }
        }
        if operation == "checkpoint" && process == OPERATOR_PROCESS {
            // The operator's checkpoint replaces whatever was there, older or not.
            if let Some(value) = value {
                self.checkpoints.insert(key.clone(), (lease.nonce, value));
                self.acked.insert(key.clone(), (lease.nonce, value));
            }
            return;
        }
        if let Some((nonce, acked)) = self.acked.get(key).copied() {
            if nonce == lease.nonce && value.is_none_or(|v| v < acked) {
                self.violate(
                    "checkpoint-regressed",
                    format!(
                        "{key} (item {nonce}): a {operation} of p{process} left checkpoint {}; {acked} had been acknowledged",
                        value.map_or("none".to_owned(), |v| v.to_string())
                    ),
                );
                // Reported once: the item now holds the older one.
                self.acked.remove(key);
            }
        }
        let last = match self.checkpoints.get(key).copied() {
            // Another item (deleted and created again): its checkpoints start afresh.
            Some((nonce, _)) if nonce != lease.nonce => {
                self.checkpoints.remove(key);
                if self.acked.get(key).is_some_and(|(n, _)| *n != lease.nonce) {
                    self.acked.remove(key);
                }
                None
            }
            last => last.map(|(_, value)| value),
        };
        let Some(value) = value else {
            if let Some(last) = last {
                self.violate(
                    "checkpoint-lost",
                    format!("{key} was written by p{process} with no checkpoint; the table had accepted {last}"),
                );
                self.checkpoints.remove(key);
            }
            return;
        };
        match last {
            Some(last) if value < last => self.violate(
                "checkpoint-backwards",
                format!("{key}: checkpoint {value} accepted from p{process} after {last}"),
            ),
            Some(last) if value == last => return,
            _ => {}
        }
        // A new checkpoint: its writer must be the application that processes the lease.
        if let Some(other) = self.holder(key).filter(|p| *p != process) {
            self.violate(
                "checkpoint-ended-tenure",
                format!("{key}: checkpoint {value} of p{process} (tenure {}) accepted while p{other} processes it", lease.tenure),
            );
        }
        self.checkpoints.insert(key.clone(), (lease.nonce, value));
    }
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    // A simulated application panic never happens under this lock; stay usable regardless.
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}

impl Audit for Mutex<Ledger> {
    fn written(&self, process: u64, operation: &'static str, lease: &Lease) {
        lock(self).written(process, operation, lease);
    }

    fn landed_late(&self, process: u64, operation: &'static str, key: &str, late: Duration) {
        lock(self).trace(|| {
            format!(
                "late {operation} {key} of p{process} landed {:.3} s after it was sent",
                late.as_secs_f64()
            )
        });
    }

    fn deleted(&self, _key: &LeaseKey) {
        // Its last checkpoint is kept: a lease re-created with less has lost it.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(name: &str) -> LeaseKey {
        LeaseKey::new(name).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_holder_is_overtaken_but_must_stop_at_its_thaw() {
        let mut ledger = Ledger::new(Instant::now());
        ledger.start(1, &key("a"), 1, None);
        ledger.freeze(1);
        ledger.start(2, &key("a"), 1, None);
        assert!(
            ledger.violations.is_empty(),
            "a frozen process processes nothing"
        );
        ledger.thaw(1);
        ledger.stop(1, &key("a"));
        assert!(ledger.violations.is_empty(), "stopped at the thaw instant");

        ledger.start(3, &key("b"), 1, None);
        ledger.freeze(3);
        ledger.start(2, &key("b"), 1, None);
        ledger.thaw(3);
        tokio::time::sleep(Duration::from_millis(100)).await;
        ledger.poll();
        assert_eq!(ledger.violations.len(), 1);
        assert_eq!(ledger.violations[0].invariant, "overlap");
        assert_eq!(ledger.holder(&key("b")), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn two_live_processors_and_checkpoints_going_back_are_violations() {
        let mut ledger = Ledger::new(Instant::now());
        ledger.start(1, &key("a"), 1, None);
        ledger.start(2, &key("a"), 1, None);
        let mut lease = Lease {
            checkpoint: Some(checkpoint_text(5, 0)),
            ..shardlease::lease::NewLease::new(key("a")).into_lease()
        };
        ledger.written(2, "checkpoint", &lease);
        lease.checkpoint = Some(checkpoint_text(4, 0));
        ledger.written(2, "checkpoint", &lease);
        ledger.start(3, &key("a"), 1, Some(&checkpoint_text(3, 0)));
        let names: Vec<&str> = ledger.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(
            names,
            [
                "overlap",
                "checkpoint-backwards",
                "checkpoint-lost",
                "overlap"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_acknowledged_checkpoint_replaced_or_one_landing_in_another_item_is_a_violation() {
        let mut ledger = Ledger::new(Instant::now());
        let mut lease = Lease {
            nonce: 7,
            checkpoint: Some(checkpoint_text(5, 7)),
            ..shardlease::lease::NewLease::new(key("a")).into_lease()
        };
        ledger.written(1, "checkpoint", &lease);
        ledger.acknowledged(1, &key("a"), &checkpoint_text(5, 7));
        lease.checkpoint = Some(checkpoint_text(4, 7));
        ledger.written(1, "checkpoint", &lease);
        // Deleted and created again: its checkpoints start afresh, but none meant for the old
        // item may land in it.
        let mut again = Lease {
            nonce: 8,
            ..shardlease::lease::NewLease::new(key("a")).into_lease()
        };
        ledger.written(OPERATOR_PROCESS, "create", &again);
        again.checkpoint = Some(checkpoint_text(6, 7));
        ledger.written(1, "checkpoint", &again);
        let names: Vec<&str> = ledger.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(
            names,
            [
                "checkpoint-regressed",
                "checkpoint-backwards",
                "checkpoint-later-item"
            ]
        );
    }
}
