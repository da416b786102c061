//! The in-memory store: the embedded default for demos, tests and the simulator.
//!
//! It applies exactly the conditions of the DynamoDB backend (the conformance suite runs the
//! same tests on both), atomically per item under one lock that is never held across an
//! `.await`. Clone it to share one table between many workers in a process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::time::Instant;

use super::{check_report, LeaseStore, Outcome, Page, PageToken, StoreResult};
use crate::lease::{
    CheckpointWrite, Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, WorkerId,
    RESERVED_PREFIX,
};

/// Default number of items per [`list_page`](LeaseStore::list_page) page.
pub const DEFAULT_PAGE_SIZE: usize = 1000;

#[derive(Debug, Clone)]
enum Item {
    Lease(Lease),
    Member(Member),
}

/// A lease table in memory. Cheap to clone; clones share the table.
#[derive(Debug, Clone)]
pub struct InMemoryStore {
    items: Arc<Mutex<BTreeMap<String, Item>>>,
    page_size: usize,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn member_key(worker: &WorkerId) -> String {
    let mut key = member_key_prefix();
    key.push_str(worker.as_str());
    key
}

/// Writes `report` into `member` (a heartbeat's or a beat's); `None` leaves it as it is.
fn set_report(member: &mut Member, report: Option<&LoadReport>) {
    if let Some(report) = report {
        member.weight = Some(report.weight);
        member.load = report.utilisation;
        member.lease_loads = report.leases.clone();
        member.halted = report.halted.clone();
    }
}

/// Every membership record's key starts with this (and no lease key can: see
/// [`RESERVED_PREFIX`]).
fn member_key_prefix() -> String {
    format!("{RESERVED_PREFIX}member#")
}

impl InMemoryStore {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            items: Arc::default(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Sets how many items a listing page holds (at least 1). Default: [`DEFAULT_PAGE_SIZE`].
    #[must_use]
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// How many items the table holds, and their total size as measured by `lease_size` and
    /// `member_size` (a simulator bills a scan by it without copying the table).
    pub fn extent(
        &self,
        lease_size: impl Fn(&Lease) -> usize,
        member_size: impl Fn(&Member) -> usize,
    ) -> (usize, usize) {
        let items = self.lock();
        let bytes = items
            .values()
            .map(|item| match item {
                Item::Lease(lease) => lease_size(lease),
                Item::Member(member) => member_size(member),
            })
            .sum();
        (items.len(), bytes)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Item>> {
        // A panic while holding the lock cannot leave an item half-written (every change is a
        // single assignment), so a poisoned lock is still consistent.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` to the lease at `key` if it is the item `nonce` and `condition` holds
    /// for it.
    fn update_lease(
        &self,
        key: &LeaseKey,
        nonce: u64,
        condition: impl FnOnce(&Lease) -> bool,
        change: impl FnOnce(&mut Lease),
    ) -> Outcome<Lease> {
        let mut items = self.lock();
        match items.get_mut(key.as_str()) {
            Some(Item::Lease(lease)) if lease.nonce == nonce && condition(lease) => {
                change(lease);
                Outcome::Done(lease.clone())
            }
            Some(Item::Lease(lease)) => Outcome::LostRace {
                current: Some(lease.clone()),
            },
            _ => Outcome::LostRace { current: None },
        }
    }
}

impl InMemoryStore {
    /// Applies `change` to `worker`'s membership record if it is `incarnation`'s session.
    fn update_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        change: impl FnOnce(&mut Member),
    ) -> Outcome<Member> {
        let mut items = self.lock();
        match items.get_mut(&member_key(worker)) {
            Some(Item::Member(member)) if member.incarnation == Some(incarnation) => {
                change(member);
                Outcome::Done(member.clone())
            }
            Some(Item::Member(member)) => Outcome::LostRace {
                current: Some(member.clone()),
            },
            _ => Outcome::LostRace { current: None },
        }
    }
}

fn held(lease: &Lease, owner: &WorkerId, tenure: u64) -> bool {
    lease.is_owned_by(owner) && lease.tenure == tenure
}

/// A new owner (`to`, taken by its process `incarnation` or handed over without one), or none.
fn change_owner(lease: &mut Lease, to: Option<WorkerId>, incarnation: Option<Incarnation>) {
    let new_tenure = to.is_some();
    lease.owner = to;
    lease.owner_incarnation = incarnation;
    lease.counter += 1;
    lease.handoff_to = None;
    if new_tenure {
        lease.tenure += 1;
        lease.owner_switches_since_checkpoint += 1;
    }
}

#[async_trait]
impl LeaseStore for InMemoryStore {
    async fn create(&self, lease: NewLease, _deadline: Instant) -> StoreResult<Outcome<Lease>> {
        let mut items = self.lock();
        let key = lease.key.as_str().to_owned();
        Ok(match items.get(&key) {
            Some(Item::Lease(current)) => Outcome::LostRace {
                current: Some(current.clone()),
            },
            Some(Item::Member(_)) => Outcome::LostRace { current: None },
            None => {
                let mut lease = lease.into_lease();
                lease.nonce = super::new_nonce();
                items.insert(key, Item::Lease(lease.clone()));
                Outcome::Done(lease)
            }
        })
    }

    async fn get(&self, key: &LeaseKey, _deadline: Instant) -> StoreResult<Option<Lease>> {
        Ok(match self.lock().get(key.as_str()) {
            Some(Item::Lease(lease)) => Some(lease.clone()),
            _ => None,
        })
    }

    async fn list_members(&self, _deadline: Instant) -> StoreResult<Vec<Member>> {
        use std::ops::Bound::{Included, Unbounded};
        let prefix = member_key_prefix();
        let items = self.lock();
        Ok(items
            .range::<str, _>((Included(prefix.as_str()), Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter_map(|(_, item)| match item {
                Item::Member(member) => Some(member.clone()),
                Item::Lease(_) => None,
            })
            .collect())
    }

    async fn list_page(&self, from: Option<PageToken>, _deadline: Instant) -> StoreResult<Page> {
        use std::ops::Bound::{Excluded, Unbounded};
        let items = self.lock();
        let start = match &from {
            Some(token) => Excluded(token.0.as_str()),
            None => Unbounded,
        };
        let mut page = Page {
            leases: Vec::with_capacity(self.page_size.min(items.len())),
            ..Page::default()
        };
        let mut last: Option<&str> = None;
        for (key, item) in items.range::<str, _>((start, Unbounded)) {
            if last.is_some() && page.leases.len() + page.members.len() == self.page_size {
                page.next = last.map(|key| PageToken(key.to_owned()));
                break;
            }
            match item {
                Item::Lease(lease) => page.leases.push(lease.clone()),
                Item::Member(member) => page.members.push(member.clone()),
            }
            last = Some(key);
        }
        Ok(page)
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        load: Option<f64>,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| held(l, owner, tenure),
            |l| {
                l.counter += 1;
                if load.is_some() {
                    l.load = load;
                }
            },
        ))
    }

    async fn take(
        &self,
        key: &LeaseKey,
        nonce: u64,
        taker: &WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| l.counter == observed_counter,
            |l| change_owner(l, Some(taker.clone()), Some(incarnation)),
        ))
    }

    async fn request_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        requester: &WorkerId,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| held(l, owner, tenure) && l.handoff_to.as_ref().is_none_or(|to| to == requester),
            |l| l.handoff_to = Some(requester.clone()),
        ))
    }

    async fn complete_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        to: &WorkerId,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| held(l, owner, tenure) && l.handoff_to.as_ref() == Some(to),
            |l| change_owner(l, Some(to.clone()), None),
        ))
    }

    async fn release(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| held(l, owner, tenure),
            |l| change_owner(l, None, None),
        ))
    }

    async fn checkpoint(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        seq: u64,
        checkpoint: &str,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |l| held(l, owner, tenure) && l.checkpoint_write.is_none_or(|w| w.accepts(tenure, seq)),
            |l| {
                l.checkpoint = Some(checkpoint.to_owned());
                l.checkpoint_write = Some(CheckpointWrite { tenure, seq });
                l.owner_switches_since_checkpoint = 0;
                l.counter += 1;
            },
        ))
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let mut items = self.lock();
        Ok(match items.get(key.as_str()) {
            Some(Item::Lease(l))
                if l.nonce == nonce
                    && l.counter == observed_counter
                    && l.tenure == observed_tenure =>
            {
                match items.remove(key.as_str()) {
                    Some(Item::Lease(lease)) => Outcome::Done(lease),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Lease(l)) => Outcome::LostRace {
                current: Some(l.clone()),
            },
            _ => Outcome::LostRace { current: None },
        })
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        check_report("heartbeat", worker, report)?;
        let mut items = self.lock();
        let item = items.entry(member_key(worker)).or_insert_with(|| {
            Item::Member(Member {
                worker: worker.clone(),
                heartbeat: 0,
                incarnation: None,
                load: None,
                weight: None,
                lease_loads: Default::default(),
                halted: Default::default(),
                capacity: None,
                notices: Default::default(),
                session: false,
            })
        });
        Ok(match item {
            Item::Member(member) => {
                member.heartbeat += 1;
                member.session = false;
                member.incarnation = Some(incarnation);
                set_report(member, report);
                member.capacity = capacity;
                Outcome::Done(member.clone())
            }
            Item::Lease(_) => Outcome::LostRace { current: None },
        })
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut items = self.lock();
        let key = member_key(worker);
        Ok(match items.get(&key) {
            Some(Item::Member(m)) if observed_heartbeat.is_none_or(|hb| hb == m.heartbeat) => {
                match items.remove(&key) {
                    Some(Item::Member(member)) => Outcome::Done(member),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Member(m)) => Outcome::LostRace {
                current: Some(m.clone()),
            },
            _ => Outcome::LostRace { current: None },
        })
    }

    async fn give(
        &self,
        key: &LeaseKey,
        nonce: u64,
        to: &WorkerId,
        observed_counter: u64,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        Ok(self.update_lease(
            key,
            nonce,
            |lease| lease.counter == observed_counter,
            |lease| change_owner(lease, Some(to.clone()), None),
        ))
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        _consistent: bool,
        _deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        Ok(match self.lock().get(&member_key(worker)) {
            Some(Item::Member(member)) => Some(member.clone()),
            _ => None,
        })
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut items = self.lock();
        let key = member_key(worker);
        let heartbeat = match (items.get(&key), replacing) {
            (None, None) => 1,
            // The record it names is gone: nothing to replace (as DynamoDB's condition fails).
            (None, Some(_)) => return Ok(Outcome::LostRace { current: None }),
            (Some(Item::Member(current)), Some(seen))
                if current.incarnation == seen.incarnation
                    && current.heartbeat == seen.heartbeat =>
            {
                current.heartbeat + 1
            }
            (Some(Item::Member(current)), _) => {
                return Ok(Outcome::LostRace {
                    current: Some(current.clone()),
                })
            }
            (Some(Item::Lease(_)), _) => return Ok(Outcome::LostRace { current: None }),
        };
        let member = Member {
            worker: worker.clone(),
            heartbeat,
            incarnation: Some(incarnation),
            load: None,
            weight: None,
            lease_loads: Default::default(),
            halted: Default::default(),
            capacity,
            notices: Default::default(),
            session: true,
        };
        items.insert(key, Item::Member(member.clone()));
        Ok(Outcome::Done(member))
    }

    async fn beat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        report: Option<&LoadReport>,
        seen: &[String],
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        check_report("beat", worker, report)?;
        Ok(self.update_session(worker, incarnation, |member| {
            member.heartbeat += 1;
            member.capacity = capacity;
            set_report(member, report);
            for notice in seen {
                member.notices.remove(notice);
            }
        }))
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut items = self.lock();
        let key = member_key(worker);
        Ok(match items.get(&key) {
            Some(Item::Member(m))
                if m.incarnation == Some(incarnation) && m.heartbeat == observed_heartbeat =>
            {
                match items.remove(&key) {
                    Some(Item::Member(member)) => Outcome::Done(member),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Member(m)) => Outcome::LostRace {
                current: Some(m.clone()),
            },
            _ => Outcome::LostRace { current: None },
        })
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        Ok(self.update_session(worker, incarnation, |member| {
            member.notices.extend(notices.iter().cloned());
        }))
    }
}
