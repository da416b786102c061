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
    // Shared with the listings that hold it: a write copies it only while one does.
    Lease(Arc<Lease>),
    Member(Arc<Member>),
}

/// How to measure the items a table holds, for one that keeps their total size (see
/// [`InMemoryStore::with_item_sizes`]): a simulator bills its reads by it.
#[derive(Debug, Clone, Copy)]
pub struct ItemSizes {
    /// The size of a lease's item.
    pub lease: fn(&Lease) -> usize,
    /// The size of a membership record's item.
    pub member: fn(&Member) -> usize,
}

impl ItemSizes {
    fn of(&self, item: &Item) -> usize {
        match item {
            Item::Lease(lease) => (self.lease)(lease),
            Item::Member(member) => (self.member)(member),
        }
    }
}

/// The items, each with its size when the table measures them (0 when it does not).
#[derive(Debug, Default)]
struct Table {
    items: BTreeMap<String, (Item, usize)>,
    sizes: Option<ItemSizes>,
    /// The items' total size: kept by every write, so that neither a listing nor the table's
    /// extent measures an item again.
    bytes: usize,
}

impl Table {
    fn size(&self, item: &Item) -> usize {
        self.sizes.map_or(0, |sizes| sizes.of(item))
    }

    fn get(&self, key: &str) -> Option<&Item> {
        self.items.get(key).map(|(item, _)| item)
    }

    fn insert(&mut self, key: String, item: Item) {
        let size = self.size(&item);
        self.bytes += size;
        if let Some((_, old)) = self.items.insert(key, (item, size)) {
            self.bytes -= old;
        }
    }

    fn remove(&mut self, key: &str) -> Option<Item> {
        let (item, size) = self.items.remove(key)?;
        self.bytes -= size;
        Some(item)
    }

    /// Applies `change` to the item at `key` (if any), measuring it again.
    fn change<R>(&mut self, key: &str, change: impl FnOnce(&mut Item) -> R) -> Option<R> {
        let sizes = self.sizes;
        let (item, size) = self.items.get_mut(key)?;
        let result = change(item);
        let new = sizes.map_or(0, |s| s.of(item));
        self.bytes = self.bytes - *size + new;
        *size = new;
        Some(result)
    }
}

/// A lease table in memory. Cheap to clone; clones share the table.
#[derive(Debug, Clone)]
pub struct InMemoryStore {
    table: Arc<Mutex<Table>>,
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
            table: Arc::default(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Sets how many items a listing page holds (at least 1). Default: [`DEFAULT_PAGE_SIZE`].
    #[must_use]
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// Keeps the total size of the items as `sizes` measures them, from now on (the items
    /// already there are measured once): see [`extent`](Self::extent) and
    /// [`list_page_measured`](Self::list_page_measured). Shared by every clone.
    #[must_use]
    pub fn with_item_sizes(self, sizes: ItemSizes) -> Self {
        {
            let mut table = self.lock();
            table.sizes = Some(sizes);
            let mut bytes = 0;
            for (item, size) in table.items.values_mut() {
                *size = sizes.of(item);
                bytes += *size;
            }
            table.bytes = bytes;
        }
        self
    }

    /// How many items the table holds, and their total size by its
    /// [`ItemSizes`](Self::with_item_sizes) (0 without): a simulator bills a scan by it
    /// without copying or measuring the table.
    pub fn extent(&self) -> (usize, usize) {
        let table = self.lock();
        (table.items.len(), table.bytes)
    }

    /// A page as [`list_page`](LeaseStore::list_page) lists it, and the total size of its
    /// items by the table's [`ItemSizes`](Self::with_item_sizes) (0 without), from the sizes
    /// kept since each item was written.
    pub fn list_page_measured(&self, from: Option<&PageToken>) -> (Page, usize) {
        use std::ops::Bound::{Excluded, Unbounded};
        let table = self.lock();
        let start = match from {
            Some(token) => Excluded(token.0.as_str()),
            None => Unbounded,
        };
        let mut page = Page {
            leases: Vec::with_capacity(self.page_size.min(table.items.len())),
            ..Page::default()
        };
        let mut bytes = 0;
        let mut last: Option<&str> = None;
        for (key, (item, size)) in table.items.range::<str, _>((start, Unbounded)) {
            if last.is_some() && page.leases.len() + page.members.len() == self.page_size {
                page.next = last.map(|key| PageToken(key.to_owned()));
                break;
            }
            bytes += size;
            match item {
                Item::Lease(lease) => page.leases.push(lease.clone()),
                Item::Member(member) => page.members.push(member.clone()),
            }
            last = Some(key);
        }
        (page, bytes)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave an item half-written (every change is a
        // single assignment), so a poisoned lock is still consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
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
        let mut table = self.lock();
        let outcome = table.change(key.as_str(), |item| match item {
            Item::Lease(lease) if lease.nonce == nonce && condition(lease) => {
                // Copied first if a listing still holds the item as it was.
                change(Arc::make_mut(lease));
                Outcome::Done(Lease::clone(lease))
            }
            Item::Lease(lease) => Outcome::LostRace {
                current: Some(Lease::clone(lease)),
            },
            Item::Member(_) => Outcome::LostRace { current: None },
        });
        outcome.unwrap_or(Outcome::LostRace { current: None })
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
        let mut table = self.lock();
        let outcome = table.change(&member_key(worker), |item| match item {
            Item::Member(member) if member.incarnation == Some(incarnation) => {
                change(Arc::make_mut(member));
                Outcome::Done(Member::clone(member))
            }
            Item::Member(member) => Outcome::LostRace {
                current: Some(Member::clone(member)),
            },
            Item::Lease(_) => Outcome::LostRace { current: None },
        });
        outcome.unwrap_or(Outcome::LostRace { current: None })
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
        let mut table = self.lock();
        let key = lease.key.as_str().to_owned();
        Ok(match table.get(&key) {
            Some(Item::Lease(current)) => Outcome::LostRace {
                current: Some(Lease::clone(current)),
            },
            Some(Item::Member(_)) => Outcome::LostRace { current: None },
            None => {
                let mut lease = lease.into_lease();
                lease.nonce = super::new_nonce();
                table.insert(key, Item::Lease(Arc::new(lease.clone())));
                Outcome::Done(lease)
            }
        })
    }

    async fn get(&self, key: &LeaseKey, _deadline: Instant) -> StoreResult<Option<Lease>> {
        Ok(match self.lock().get(key.as_str()) {
            Some(Item::Lease(lease)) => Some(Lease::clone(lease)),
            _ => None,
        })
    }

    async fn list_members(&self, _deadline: Instant) -> StoreResult<Vec<Arc<Member>>> {
        use std::ops::Bound::{Included, Unbounded};
        let prefix = member_key_prefix();
        let table = self.lock();
        Ok(table
            .items
            .range::<str, _>((Included(prefix.as_str()), Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter_map(|(_, (item, _))| match item {
                Item::Member(member) => Some(member.clone()),
                Item::Lease(_) => None,
            })
            .collect())
    }

    async fn list_page(&self, from: Option<PageToken>, _deadline: Instant) -> StoreResult<Page> {
        Ok(self.list_page_measured(from.as_ref()).0)
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
        let mut table = self.lock();
        Ok(match table.get(key.as_str()) {
            Some(Item::Lease(l))
                if l.nonce == nonce
                    && l.counter == observed_counter
                    && l.tenure == observed_tenure =>
            {
                match table.remove(key.as_str()) {
                    Some(Item::Lease(lease)) => Outcome::Done(Arc::unwrap_or_clone(lease)),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Lease(l)) => Outcome::LostRace {
                current: Some(Lease::clone(l)),
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
        let mut table = self.lock();
        let key = member_key(worker);
        if table.get(&key).is_none() {
            table.insert(
                key.clone(),
                Item::Member(Arc::new(Member {
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
                })),
            );
        }
        let outcome = table.change(&key, |item| match item {
            Item::Member(member) => {
                let member = Arc::make_mut(member);
                member.heartbeat += 1;
                member.session = false;
                member.incarnation = Some(incarnation);
                set_report(member, report);
                member.capacity = capacity;
                Outcome::Done(member.clone())
            }
            Item::Lease(_) => Outcome::LostRace { current: None },
        });
        Ok(outcome.unwrap_or(Outcome::LostRace { current: None }))
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        _deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut table = self.lock();
        let key = member_key(worker);
        Ok(match table.get(&key) {
            Some(Item::Member(m)) if observed_heartbeat.is_none_or(|hb| hb == m.heartbeat) => {
                match table.remove(&key) {
                    Some(Item::Member(member)) => Outcome::Done(Arc::unwrap_or_clone(member)),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Member(m)) => Outcome::LostRace {
                current: Some(Member::clone(m)),
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
            Some(Item::Member(member)) => Some(Member::clone(member)),
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
        let mut table = self.lock();
        let key = member_key(worker);
        let heartbeat = match (table.get(&key), replacing) {
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
                    current: Some(Member::clone(current)),
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
        table.insert(key, Item::Member(Arc::new(member.clone())));
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
        let mut table = self.lock();
        let key = member_key(worker);
        Ok(match table.get(&key) {
            Some(Item::Member(m))
                if m.incarnation == Some(incarnation) && m.heartbeat == observed_heartbeat =>
            {
                match table.remove(&key) {
                    Some(Item::Member(member)) => Outcome::Done(Arc::unwrap_or_clone(member)),
                    _ => Outcome::LostRace { current: None },
                }
            }
            Some(Item::Member(m)) => Outcome::LostRace {
                current: Some(Member::clone(m)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_size(lease: &Lease) -> usize {
        lease.key.as_str().len()
            + lease.checkpoint.as_ref().map_or(0, String::len)
            + lease.owner.as_ref().map_or(0, |o| o.as_str().len())
            + lease.counter as usize
    }

    fn member_size(member: &Member) -> usize {
        member.worker.as_str().len() + member.heartbeat as usize + 10 * member.notices.len()
    }

    const SIZES: ItemSizes = ItemSizes {
        lease: lease_size,
        member: member_size,
    };

    /// The sizes of every item, measured from a listing.
    async fn measured(store: &InMemoryStore) -> usize {
        let snapshot = store.snapshot(far()).await.unwrap();
        snapshot.leases.iter().map(|l| lease_size(l)).sum::<usize>()
            + snapshot
                .members
                .iter()
                .map(|m| member_size(m))
                .sum::<usize>()
    }

    fn done<T>(outcome: Outcome<T>) -> T {
        match outcome {
            Outcome::Done(value) => value,
            Outcome::LostRace { .. } => panic!("the write was refused"),
        }
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    #[tokio::test]
    async fn the_total_size_follows_every_write() {
        let store = InMemoryStore::new().with_page_size(2);
        let key = |k: &str| LeaseKey::new(k).unwrap();
        let a = WorkerId::new("worker-a").unwrap();
        let b = WorkerId::new("worker-b").unwrap();
        // Items written before the table measures them are measured once.
        done(
            store
                .create(NewLease::new(key("s-1")), far())
                .await
                .unwrap(),
        );
        let store = store.with_item_sizes(SIZES);
        let check = |step: &'static str| {
            let store = store.clone();
            async move {
                let (items, bytes) = store.extent();
                assert_eq!(bytes, measured(&store).await, "after {step}");
                let snapshot = store.snapshot(far()).await.unwrap();
                assert_eq!(items, snapshot.leases.len() + snapshot.members.len());
            }
        };
        check("measuring").await;
        let second = store
            .create(NewLease::new(key("s-2")), far())
            .await
            .unwrap();
        let Outcome::Done(second) = second else {
            panic!("created")
        };
        check("a create").await;
        let incarnation = Incarnation::new(7);
        let taken = done(
            store
                .take(&key("s-2"), second.nonce, &a, incarnation, 0, far())
                .await
                .unwrap(),
        );
        check("a take").await;
        done(
            store
                .checkpoint(
                    &key("s-2"),
                    taken.nonce,
                    &a,
                    taken.tenure,
                    1,
                    "at-42",
                    far(),
                )
                .await
                .unwrap(),
        );
        check("a checkpoint").await;
        done(
            store
                .open_session(&b, incarnation, None, None, far())
                .await
                .unwrap(),
        );
        check("a session opened").await;
        done(
            store
                .notify(&b, incarnation, &["s-2".to_owned()], far())
                .await
                .unwrap(),
        );
        check("a notice").await;
        done(
            store
                .beat(&b, incarnation, None, None, &["s-2".to_owned()], far())
                .await
                .unwrap(),
        );
        check("a beat").await;
        done(
            store
                .heartbeat(&a, incarnation, None, None, far())
                .await
                .unwrap(),
        );
        done(
            store
                .heartbeat(&a, incarnation, None, None, far())
                .await
                .unwrap(),
        );
        check("two heartbeats").await;
        done(store.remove_member(&a, None, far()).await.unwrap());
        check("a record removed").await;
        let current = store.get(&key("s-2"), far()).await.unwrap().unwrap();
        done(
            store
                .delete(
                    &key("s-2"),
                    current.nonce,
                    current.counter,
                    current.tenure,
                    far(),
                )
                .await
                .unwrap(),
        );
        check("a delete").await;
        let member = store.get_member(&b, true, far()).await.unwrap().unwrap();
        done(
            store
                .end_session(&b, incarnation, member.heartbeat, far())
                .await
                .unwrap(),
        );
        check("a session ended").await;
    }

    #[tokio::test]
    async fn a_measured_page_is_the_size_of_its_items() {
        let store = InMemoryStore::new()
            .with_page_size(3)
            .with_item_sizes(SIZES);
        for i in 0..8 {
            let key = LeaseKey::new(format!("s-{i}")).unwrap();
            done(store.create(NewLease::new(key), far()).await.unwrap());
        }
        let worker = WorkerId::new("worker-a").unwrap();
        done(
            store
                .open_session(&worker, Incarnation::new(1), None, None, far())
                .await
                .unwrap(),
        );
        let (mut from, mut total, mut pages) = (None, 0, 0);
        loop {
            let (page, bytes) = store.list_page_measured(from.as_ref());
            let expected = page.leases.iter().map(|l| lease_size(l)).sum::<usize>()
                + page.members.iter().map(|m| member_size(m)).sum::<usize>();
            assert_eq!(bytes, expected);
            total += bytes;
            pages += 1;
            match page.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(total, store.extent().1);
        // Without item sizes, nothing is measured.
        let plain = InMemoryStore::new();
        done(
            plain
                .create(NewLease::new(LeaseKey::new("s-1").unwrap()), far())
                .await
                .unwrap(),
        );
        assert_eq!(plain.extent(), (1, 0));
        assert_eq!(plain.list_page_measured(None).1, 0);
    }
}
