//! The simulated network between each worker and the shared in-memory table: a latency drawn
//! per call, injected faults, retries as the DynamoDB backend makes them, and the accounting
//! (operations, capacity units, who owns what in the table and since when).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardlease::lease::{Lease, Member};
use shardlease::store::dynamodb::{lease_item_size, member_item_size};
use shardlease::store::layer::{Request, Response, StoreLayer};
use shardlease::store::memory::{InMemoryStore, ItemSizes};
use shardlease::store::{snapshot_by_pages, StoreResult};
use shardlease::store::{LeaseStore, Outcome, Page, PageToken, RetryPolicy, StoreError};
use shardlease::{LeaseKey, WorkerId};
use tokio::time::Instant;

use super::clock::SimClock;
use super::latency::{standard_normal, LatencyModel, Stalls};

/// A latency distribution: log-normal, given by its median and 99th percentile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub median: Duration,
    pub p99: Duration,
}

impl Latency {
    /// No latency at all.
    pub const ZERO: Latency = Latency {
        median: Duration::ZERO,
        p99: Duration::ZERO,
    };

    /// One request's latency, drawn from `rng` (capped at a minute).
    pub fn sample(&self, rng: &mut StdRng) -> Duration {
        if self.median.is_zero() {
            return Duration::ZERO;
        }
        // Box-Muller: a standard normal from two uniforms; z(0.99) = 2.326.
        let z = standard_normal(rng);
        let sigma = (self.p99.as_secs_f64() / self.median.as_secs_f64())
            .ln()
            .max(0.0)
            / 2.326;
        let seconds = self.median.as_secs_f64() * (sigma * z).exp();
        Duration::from_secs_f64(seconds.min(60.0))
    }
}

/// The latency of each kind of request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latencies {
    /// `GetItem`.
    pub read: Latency,
    /// Conditional writes.
    pub write: Latency,
    /// One `Scan` page (up to [`SCAN_PAGE_ITEMS`] items here).
    pub scan: Latency,
}

impl Latencies {
    /// The same distribution for every kind of request.
    pub fn all(latency: Latency) -> Self {
        Self {
            read: latency,
            write: latency,
            scan: latency,
        }
    }
}

/// Rates of injected faults, per request sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultRates {
    /// The request is refused for capacity (not applied), as `ProvisionedThroughputExceeded`.
    pub throttle: f64,
    /// The request fails before it is applied (a 500, a reset connection).
    pub transient: f64,
    /// A write is applied but its answer is lost.
    pub ambiguous: f64,
}

/// Counters of what the workers asked of the table, with DynamoDB capacity units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Requests that read: `GetItem` and `Scan` pages.
    pub reads: u64,
    /// Requests that write (conditional writes, failed conditions included).
    pub writes: u64,
    /// Read capacity units (strongly consistent: 1 per 4 KB, a scan page by its total size;
    /// eventually consistent: half that).
    pub rcu: f64,
    /// Write capacity units (1 per 1 KB of the item; a failed condition costs the same).
    pub wcu: u64,
    /// Requests answered with an injected throttle.
    pub throttled: u64,
    /// Requests that failed (injected transient errors and cut-offs) or whose answer was lost.
    pub failed: u64,
    /// Requests held by a stall of the heavy-tail latency model.
    pub stalled: u64,
}

impl Usage {
    pub fn minus(&self, earlier: &Usage) -> Usage {
        Usage {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            rcu: self.rcu - earlier.rcu,
            wcu: self.wcu - earlier.wcu,
            throttled: self.throttled - earlier.throttled,
            failed: self.failed - earlier.failed,
            stalled: self.stalled - earlier.stalled,
        }
    }
}

/// Who owns each lease in the table, and when it changed: kept from the answers of the
/// writes that change owners, so it is exactly the table's view.
#[derive(Debug, Default)]
pub struct Ownership {
    pub owner: HashMap<LeaseKey, (WorkerId, Instant)>,
    /// Orphans of a crash: when each was next taken.
    pub watch: HashMap<LeaseKey, Option<Instant>>,
}

/// Shared by every worker's connection.
#[derive(Debug)]
pub struct Net {
    pub table: InMemoryStore,
    pub latency: Latencies,
    pub faults: FaultRates,
    pub usage: Mutex<Usage>,
    pub ownership: Mutex<Ownership>,
    /// The fault campaign's faults, switched on by [`ChaosNet::set`] (off in scenarios).
    pub chaos: ChaosNet,
    /// How each request's latency is drawn.
    pub model: LatencyModel,
    /// When the network was made: the heavy tail's stalls are counted from it.
    epoch: Instant,
    seed: u64,
}

/// Items per scan page. DynamoDB ends a page at 1 MB of items read: about 5,000 lease items
/// of 170-200 bytes. (The in-memory store's default of 1,000 would make a scan of 100,000
/// leases 100 round trips, five times what the table takes, and keep a large fleet's scans
/// in flight, each holding its partial snapshot, five times as long.)
pub const SCAN_PAGE_ITEMS: usize = 5_000;

impl Net {
    /// A network with log-normal latency.
    pub fn new(seed: u64, latency: Latencies, faults: FaultRates) -> Arc<Self> {
        Self::with_model(seed, latency, LatencyModel::LogNormal, faults)
    }

    /// A network whose latency `model` draws from the body `latency`.
    pub fn with_model(
        seed: u64,
        latency: Latencies,
        model: LatencyModel,
        faults: FaultRates,
    ) -> Arc<Self> {
        Arc::new(Self {
            // The table keeps its items' DynamoDB sizes, measured when each is written: a
            // scan page and a listing of the members are billed from them, without measuring
            // every item again.
            table: InMemoryStore::new()
                .with_page_size(SCAN_PAGE_ITEMS)
                .with_item_sizes(ItemSizes {
                    lease: lease_item_size,
                    member: member_item_size,
                }),
            latency,
            faults,
            usage: Mutex::default(),
            ownership: Mutex::default(),
            chaos: ChaosNet::default(),
            model,
            epoch: Instant::now(),
            seed,
        })
    }

    pub fn usage(&self) -> Usage {
        *self.usage.lock().unwrap()
    }

    fn count(&self, change: impl FnOnce(&mut Usage)) {
        change(&mut self.usage.lock().unwrap());
    }
}

/// Switches on one worker's connection.
#[derive(Debug, Clone, Default)]
pub struct Link {
    cut_off: Arc<AtomicBool>,
    /// Answers are held until this moment.
    paused_until: Arc<Mutex<Option<Instant>>>,
    /// Scans started (one per taker round).
    pub scans: Arc<AtomicU64>,
    /// The campaign's per-process faults (freeze, kill, latency spike).
    chaos: LinkChaos,
}

impl Link {
    pub fn set_cut_off(&self, cut_off: bool) {
        self.cut_off.store(cut_off, Ordering::SeqCst);
    }

    /// Stalls the worker's traffic until `until` (a paused process): requests wait to be
    /// sent, answers in flight wait to be delivered.
    pub fn pause_until(&self, until: Instant) {
        *self.paused_until.lock().unwrap() = Some(until);
    }

    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }
}

/// What kind of request a call is, for the fault draw and the accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    /// An eventually consistent `GetItem`: half the capacity units of a strongly consistent one.
    StaleRead,
    Scan,
    /// An eventually consistent scan page: half the capacity units.
    StaleScan,
    Write,
}

/// Read capacity units of a read of `size` bytes.
fn read_units(kind: Kind, size: usize) -> f64 {
    let units = size.div_ceil(4096).max(1) as f64;
    if matches!(kind, Kind::StaleRead | Kind::StaleScan) {
        units / 2.0
    } else {
        units
    }
}

/// One worker's connection to the table.
pub struct SimStore {
    net: Arc<Net>,
    link: Link,
    rng: Mutex<StdRng>,
    retry: RetryPolicy,
    /// The process this connection belongs to (the campaign's audit names writers by it).
    process: u64,
    /// The process's clock, when it is not tokio's: the deadlines it is given are on it.
    clock: Option<SimClock>,
    /// Its stalls, under the heavy-tail latency model.
    stalls: Option<Stalls>,
}

/// The stream of the stalls' draws, apart from the latency and fault draws.
const STALL_STREAM: u64 = 0x5354_414c_4c53_0001;

impl SimStore {
    /// One page of a scan, strongly consistent (`Kind::Scan`) or not (`Kind::StaleScan`: each
    /// partition of the page is served by a replica that lags by a time drawn for this read).
    async fn scan_page(
        &self,
        from: Option<PageToken>,
        kind: Kind,
        deadline: Instant,
    ) -> StoreResult<Page> {
        if from.is_none() {
            self.link.scans.fetch_add(1, Ordering::Relaxed);
        }
        let lags = if kind == Kind::StaleScan {
            match self.net.chaos.aimed(self.process, "scan", "") {
                Some(Aimed::Stale(lag)) => [self.count_stale(lag); PARTITIONS],
                _ => std::array::from_fn(|_| self.stale_lag()),
            }
        } else {
            [Duration::ZERO; PARTITIONS]
        };
        let net = Arc::clone(&self.net);
        self.send("scan", "", kind, deadline, move || {
            net.chaos.page_as_of(&net.table, from.clone(), lags)
        })
        .await
    }

    /// What a write needs to be applied, now or late.
    fn writer(&self) -> Writer {
        Writer {
            net: Arc::clone(&self.net),
            process: self.process,
        }
    }

    pub fn new(net: Arc<Net>, index: u64) -> (Self, Link) {
        let link = Link::default();
        let seed = net.seed ^ (index.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let stalls = match net.model {
            LatencyModel::HeavyTail(tail) => {
                Some(Stalls::new(tail, net.epoch, seed ^ STALL_STREAM))
            }
            LatencyModel::LogNormal => None,
        };
        (
            Self {
                net,
                link: link.clone(),
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                retry: RetryPolicy::default(),
                process: index,
                clock: None,
                stalls,
            },
            link,
        )
    }

    fn draw(&self) -> f64 {
        self.rng.lock().unwrap().gen()
    }

    fn latency(&self, kind: Kind) -> Duration {
        let latency = match kind {
            Kind::Read | Kind::StaleRead => self.net.latency.read,
            Kind::Scan | Kind::StaleScan => self.net.latency.scan,
            Kind::Write => self.net.latency.write,
        };
        self.net
            .model
            .sample(&latency, &mut self.rng.lock().unwrap())
    }

    /// Waits out a stall of this worker in progress (heavy-tail latency), counting the
    /// request it holds.
    async fn through_stall(&self) {
        let Some(until) = self.stalls.as_ref().and_then(|s| s.until(Instant::now())) else {
            return;
        };
        self.net.count(|u| u.stalled += 1);
        tokio::time::sleep_until(until).await;
    }

    /// Waits for an answer due at `at`, held while the worker is paused; `false` when the
    /// caller's deadline comes first.
    async fn answer_at(&self, at: Instant, deadline: Instant) -> bool {
        let held = *self.link.paused_until.lock().unwrap();
        let at = held.map_or(at, |until| at.max(until));
        if at > deadline {
            tokio::time::sleep_until(deadline).await;
            return false;
        }
        tokio::time::sleep_until(at).await;
        true
    }

    /// One call: retried on throttles and transient failures as the DynamoDB backend does,
    /// recognising its own earlier write after an ambiguous failure (as the backend does by
    /// its per-call token). `apply` runs the request on the table and returns the answer and
    /// the item's size for the capacity units.
    async fn send<T: Recognised + Clone + Send + 'static>(
        &self,
        operation: &'static str,
        key: &str,
        kind: Kind,
        deadline: Instant,
        apply: impl Fn() -> (T, usize) + Send + Sync + 'static,
    ) -> StoreResult<T> {
        // `RUST_LOG=sim_ops=trace`: every request, to see where the cost goes.
        tracing::trace!(target: "sim_ops", operation, ?kind, "request");
        if self.net.chaos.on() {
            return self.call_chaos(operation, key, kind, deadline, apply).await;
        }
        let landed: Mutex<Option<T>> = Mutex::new(None);
        self.retry
            .run(operation, key, deadline, |_| async {
                // A stalled worker sends nothing until it goes on.
                let stalled = *self.link.paused_until.lock().unwrap();
                if let Some(until) = stalled.filter(|u| *u > Instant::now()) {
                    tokio::time::sleep_until(until).await;
                }
                // Nor while its connection stalls (the heavy-tail latency model).
                self.through_stall().await;
                let sent = Instant::now();
                let latency = self.latency(kind);
                let half = latency / 2;
                let fail = |ambiguous: bool| StoreError::Transient {
                    operation,
                    key: key.to_owned(),
                    ambiguous,
                    source: "injected fault".into(),
                };
                if self.link.cut_off.load(Ordering::SeqCst) {
                    self.net.count(|u| u.failed += 1);
                    self.answer_at(sent + latency, deadline).await;
                    return Err(fail(false));
                }
                if self.draw() < self.net.faults.throttle {
                    self.net.count(|u| u.throttled += 1);
                    self.answer_at(sent + latency, deadline).await;
                    return Err(StoreError::Throttled {
                        operation,
                        key: key.to_owned(),
                        source: "injected throttle".into(),
                    });
                }
                if self.draw() < self.net.faults.transient {
                    self.net.count(|u| u.failed += 1);
                    self.answer_at(sent + latency, deadline).await;
                    return Err(fail(false));
                }
                let earlier = landed.lock().unwrap().clone();
                if let Some(earlier) = earlier {
                    // The retry of a write that landed: sent again (see `Recognised`).
                    tokio::time::sleep_until((sent + half).min(deadline)).await;
                    if Instant::now() >= deadline {
                        return Err(fail(true));
                    }
                    let (retry, _) = apply();
                    self.net.count(|u| u.writes += 1);
                    let answer = T::recognised(earlier, retry);
                    *landed.lock().unwrap() = Some(answer.clone());
                    if self.answer_at(sent + latency, deadline).await {
                        return Ok(answer);
                    }
                    return Err(fail(true));
                }
                tokio::time::sleep_until((sent + half).min(deadline)).await;
                if Instant::now() >= deadline {
                    self.net.count(|u| u.failed += 1);
                    return Err(fail(kind == Kind::Write));
                }
                let (answer, size) = apply();
                self.net.count(|u| match kind {
                    Kind::Read | Kind::StaleRead | Kind::Scan | Kind::StaleScan => {
                        u.reads += 1;
                        u.rcu += read_units(kind, size);
                    }
                    Kind::Write => {
                        u.writes += 1;
                        u.wcu += size.div_ceil(1024).max(1) as u64;
                    }
                });
                if kind == Kind::Write {
                    // Applied: a retry (after a lost answer, or after the attempt timed out
                    // while the answer was on its way) recognises it, as the backend does.
                    *landed.lock().unwrap() = Some(answer.clone());
                }
                let lost = kind == Kind::Write && self.draw() < self.net.faults.ambiguous;
                if lost {
                    self.net.count(|u| u.failed += 1);
                    self.answer_at(sent + latency, deadline).await;
                    return Err(fail(true));
                }
                if self.answer_at(sent + latency, deadline).await {
                    Ok(answer)
                } else {
                    self.net.count(|u| u.failed += 1);
                    Err(fail(kind == Kind::Write))
                }
            })
            .await
    }
}

/// The in-memory table answers without awaiting anything; poll its future once.
fn now_or_never<T>(future: impl std::future::Future<Output = T>) -> T {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("the in-memory table never waits"),
    }
}

/// The size of the item an answer carries (0 when there is none).
fn outcome_size<T>(outcome: &Outcome<T>, size: impl Fn(&T) -> usize) -> usize {
    match outcome {
        Outcome::Done(item) => size(item),
        Outcome::LostRace { current } => current.as_ref().map_or(0, size),
    }
}

/// Flattens the table's own result into the call's (the table never fails by itself).
fn flat<T>(result: StoreResult<T>) -> T {
    result.expect("the in-memory table does not fail")
}

/// What a write needs once the table applied it, owned so that a write that lands late (after
/// its caller gave up) can still be applied: the owner accounting, the audit and the replicas'
/// history. Cheap to clone.
#[derive(Clone)]
struct Writer {
    net: Arc<Net>,
    process: u64,
}

impl Writer {
    /// Runs a write on lease `key` (its future is ready at once), records owner changes and
    /// the item's new version, and returns the answer with the item's size.
    fn lease(
        &self,
        operation: &'static str,
        key: &LeaseKey,
        run: impl std::future::Future<Output = StoreResult<Outcome<Lease>>>,
    ) -> (Outcome<Lease>, usize) {
        self.net
            .chaos
            .replica_before(&self.net.table, Target::Lease(key));
        let answer = flat(now_or_never(run));
        let size = outcome_size(&answer, lease_item_size);
        if let Outcome::Done(lease) = &answer {
            self.own(lease);
        }
        self.net
            .chaos
            .replica_after(&self.net.table, Target::Lease(key));
        if let (Outcome::Done(lease), Some(audit)) = (&answer, self.net.chaos.audit()) {
            audit.written(self.process, operation, lease);
        }
        (answer, size)
    }

    /// Records who owns `lease` now, as the table does.
    fn own(&self, lease: &Lease) {
        let mut ownership = self.net.ownership.lock().unwrap();
        match &lease.owner {
            Some(owner) => {
                let changed = ownership
                    .owner
                    .get(&lease.key)
                    .is_none_or(|(o, _)| o != owner);
                if changed {
                    ownership
                        .owner
                        .insert(lease.key.clone(), (owner.clone(), Instant::now()));
                    if let Some(slot @ None) = ownership.watch.get_mut(&lease.key) {
                        *slot = Some(Instant::now());
                    }
                }
            }
            None => {
                ownership.owner.remove(&lease.key);
            }
        }
    }

    /// Deletes lease `key` if it is still the item `nonce` with the counter and tenure observed.
    fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        counter: u64,
        tenure: u64,
    ) -> (Outcome<Lease>, usize) {
        let table = &self.net.table;
        self.net.chaos.replica_before(table, Target::Lease(key));
        let deadline = far();
        let answer = flat(now_or_never(
            table.delete(key, nonce, counter, tenure, deadline),
        ));
        if answer.is_done() {
            self.net.ownership.lock().unwrap().owner.remove(key);
            if let Some(audit) = self.net.chaos.audit() {
                audit.deleted(key);
            }
        }
        self.net.chaos.replica_after(table, Target::Lease(key));
        let size = outcome_size(&answer, lease_item_size);
        (answer, size)
    }

    /// Runs a write on `worker`'s membership record and records its new version.
    fn member(
        &self,
        worker: &WorkerId,
        run: impl std::future::Future<Output = StoreResult<Outcome<Member>>>,
    ) -> (Outcome<Member>, usize) {
        self.net
            .chaos
            .replica_before(&self.net.table, Target::Member(worker));
        let answer = flat(now_or_never(run));
        self.net
            .chaos
            .replica_after(&self.net.table, Target::Member(worker));
        let size = outcome_size(&answer, member_item_size);
        (answer, size)
    }
}

/// A deadline the in-memory table never reaches (it ignores deadlines).
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// Every call is one [`Request`], made on the table behind the simulated network: its
/// operation and item name the faults aimed at it, its kind draws its latency.
#[async_trait]
impl StoreLayer for SimStore {
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        match request {
            Request::Get { key } => {
                let (net, owned) = (Arc::clone(&self.net), key.clone());
                let found = self.send("get", key.as_str(), Kind::Read, deadline, move || {
                    let lease = flat(now_or_never(net.table.get(&owned, far())));
                    let size = lease.as_ref().map_or(0, lease_item_size);
                    (lease, size)
                });
                found.await.map(Response::Found)
            }
            Request::GetMember { worker, consistent } => self
                .get_member(worker, *consistent, deadline)
                .await
                .map(Response::FoundMember),
            Request::ListPage { from, eventually } => {
                let kind = if *eventually {
                    Kind::StaleScan
                } else {
                    Kind::Scan
                };
                let page = self.scan_page(from.clone(), kind, deadline).await;
                page.map(Response::Page)
            }
            Request::ListMembers => self.list_members(deadline).await.map(Response::Members),
            Request::Snapshot { eventually } => {
                // Page by page through this layer, as every store lists.
                let snapshot = snapshot_by_pages(self, *eventually, deadline).await;
                snapshot.map(Response::Snapshot)
            }
            Request::Delete {
                key,
                nonce,
                observed_counter,
                observed_tenure,
            } => {
                let (w, k) = (self.writer(), key.clone());
                let (nonce, counter, tenure) = (*nonce, *observed_counter, *observed_tenure);
                let deleted = self.send("delete", key.as_str(), Kind::Write, deadline, move || {
                    w.delete(&k, nonce, counter, tenure)
                });
                deleted.await.map(Response::Lease)
            }
            Request::Create { lease } => self.lease_write(&lease.key, request, deadline).await,
            Request::Renew { key, .. }
            | Request::Take { key, .. }
            | Request::RequestHandoff { key, .. }
            | Request::CompleteHandoff { key, .. }
            | Request::Release { key, .. }
            | Request::Checkpoint { key, .. }
            | Request::Give { key, .. } => self.lease_write(key, request, deadline).await,
            Request::Heartbeat { worker, .. }
            | Request::RemoveMember { worker, .. }
            | Request::OpenSession { worker, .. }
            | Request::Beat { worker, .. }
            | Request::EndSession { worker, .. }
            | Request::Notify { worker, .. } => self.member_write(worker, request, deadline).await,
            other => Err(StoreError::Fatal {
                operation: other.operation(),
                key: other.key().to_owned(),
                source: "a call the simulated network does not know".into(),
            }),
        }
    }
}

impl SimStore {
    /// A write to lease `key`, made on the table as `request` says.
    async fn lease_write(
        &self,
        key: &LeaseKey,
        request: &Request,
        deadline: Instant,
    ) -> StoreResult<Response> {
        let (w, k, made) = (self.writer(), key.clone(), request.clone());
        let operation = request.operation();
        let written = self.send(operation, key.as_str(), Kind::Write, deadline, move || {
            let run = async {
                match made.send_to(&w.net.table, far()).await? {
                    Response::Lease(outcome) => Ok(outcome),
                    other => unreachable!("a lease write answered {other:?}"),
                }
            };
            w.lease(operation, &k, run)
        });
        written.await.map(Response::Lease)
    }

    /// A write to `worker`'s membership record, made on the table as `request` says.
    async fn member_write(
        &self,
        worker: &WorkerId,
        request: &Request,
        deadline: Instant,
    ) -> StoreResult<Response> {
        let (w, id, made) = (self.writer(), worker.clone(), request.clone());
        let operation = request.operation();
        let written = self.send(
            operation,
            worker.as_str(),
            Kind::Write,
            deadline,
            move || {
                let run = async {
                    match made.send_to(&w.net.table, far()).await? {
                        Response::Member(outcome) => Ok(outcome),
                        other => unreachable!("a membership write answered {other:?}"),
                    }
                };
                w.member(&id, run)
            },
        );
        written.await.map(Response::Member)
    }

    /// An eventually consistent read (`consistent` false) is served by a replica that lags by
    /// a drawn time.
    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        let kind = if consistent {
            Kind::Read
        } else {
            Kind::StaleRead
        };
        let lag = if consistent {
            Duration::ZERO
        } else {
            self.stale_lag()
        };
        let (net, id) = (Arc::clone(&self.net), worker.clone());
        self.send("get_member", worker.as_str(), kind, deadline, move || {
            let member = net.chaos.member_as_of(&net.table, &id, lag);
            let size = member.as_ref().map_or(0, member_item_size);
            (member, size)
        })
        .await
    }

    /// DynamoDB lists one kind of item only by a scan with a filter, which reads (and bills)
    /// every page of the table: so does this, page by page, with the members taken from the
    /// table at the last page.
    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Arc<Member>>> {
        self.link.scans.fetch_add(1, Ordering::Relaxed);
        let (items, bytes) = self.net.table.extent();
        let pages = items.div_ceil(SCAN_PAGE_ITEMS).max(1);
        let per_page = bytes / pages;
        for _ in 1..pages {
            self.send("scan", "", Kind::Scan, deadline, move || ((), per_page))
                .await?;
        }
        let net = Arc::clone(&self.net);
        self.send("scan", "", Kind::Scan, deadline, move || {
            let members = flat(now_or_never(net.table.list_members(far())));
            (members, bytes - per_page * (pages - 1))
        })
        .await
    }
}

// The fault campaign's network (`sim/campaign`): fault rates that heal, per-process freezes,
// kills and latency spikes, requests that never answer, writes that land after their caller
// gave up, eventually consistent reads served by lagging replicas, and an audit of every
// applied write. Scenarios never switch it on, so their runs draw the same numbers as before.

/// Rates of the campaign's faults, per request sent. All zero once the faults heal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Chaos {
    /// The request is refused for capacity (not applied).
    pub throttle: f64,
    /// The request fails before it is applied.
    pub transient: f64,
    /// A write is applied and its answer lost (a retry recognises it, as the DynamoDB
    /// backend does by its per-call token).
    pub lost: f64,
    /// The request is applied or not (at random) and its answer never comes: the caller must
    /// give up by itself.
    pub never: f64,
    /// A write attempt is lost to its caller (half of them: the connection resets after the
    /// request left; the others: no answer, until the caller's deadline or the store's attempt
    /// timeout) and lands anyway, up to [`LATE_WITHIN`] after it was sent: after the caller's
    /// later writes, its own retries included, evaluated against the table as it is then.
    /// With this fault on, a request whose caller gave up before it arrived (its deadline),
    /// and half of the unanswered requests of `never` that were not applied, land late too.
    pub late: f64,
    /// An eventually consistent read (a scan page of `list_page_eventually`, a `get_member`
    /// not consistent) is served by a lagging replica: each item as it was a drawn lag ago
    /// (see `SimStore::stale_lag`). Strongly consistent reads see the live table.
    pub stale: f64,
}

/// How many faults the network injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Injected {
    pub throttle: u64,
    pub transient: u64,
    pub lost: u64,
    pub never: u64,
    /// Requests sent during a latency spike.
    pub spiked: u64,
    /// Writes applied after their caller gave up on them.
    pub late: u64,
    /// Eventually consistent reads served by a lagging replica.
    pub stale: u64,
    /// Of those, reads that lagged by more than a lease duration (10 s).
    pub stale_long: u64,
}

/// A write lost to its caller lands at most this long after it was sent (a lease duration).
pub const LATE_WITHIN: Duration = Duration::from_secs(10);
/// The most a replica lags behind the table (past a lease duration).
pub const MAX_LAG: Duration = Duration::from_secs(15);
/// A lease duration, to count the reads that lagged by more.
const LEASE_DURATION: Duration = Duration::from_secs(10);
/// The partitions of the table: an eventually consistent scan reads each from a replica of its
/// own (a small on-demand DynamoDB table starts with a few), so one page can show a lease as
/// it is now and its owner's record as it was seconds ago.
pub const PARTITIONS: usize = 4;

/// Sees every write the table applied (with the process that sent it and its operation) and
/// every delete.
pub trait Audit: Send + Sync + std::fmt::Debug {
    fn written(&self, process: u64, operation: &'static str, lease: &Lease);
    fn deleted(&self, key: &LeaseKey);
    /// A write of `process` landed `late` after it was sent, its caller having given up.
    fn landed_late(&self, _process: u64, _operation: &'static str, _key: &str, _late: Duration) {}
}

/// A request whose answer never comes, while its caller still waits for it.
#[derive(Debug, Clone)]
pub struct Hung {
    pub process: u64,
    pub operation: &'static str,
    pub key: String,
    pub since: Instant,
    /// The caller's deadline (tokio time).
    pub deadline: Instant,
}

/// A fault a scripted schedule aims at one request: the first attempt of `operation` (on
/// `key`, if given) by `process` (any, if `None`) sent after it is armed.
#[derive(Debug, Clone, PartialEq)]
pub struct Aim {
    pub process: Option<u64>,
    pub operation: &'static str,
    pub key: Option<String>,
    pub fault: Aimed,
}

/// What an aimed fault does to its request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aimed {
    /// A write is applied when it arrives and no answer comes, to it or to the call's
    /// retries: the caller gives up at its deadline, not knowing it landed.
    Unanswered,
    /// An eventually consistent scan (every page of it) is served by a replica that lags by
    /// this much (the operation `scan`, no key).
    Stale(Duration),
}

/// One item of the table, as a replica holds it.
#[derive(Debug, Clone, PartialEq)]
enum Version {
    Lease(Arc<Lease>),
    Member(Arc<Member>),
}

/// The item a write changes.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Lease(&'a LeaseKey),
    Member(&'a WorkerId),
}

/// The key of `worker`'s membership record in the table (as the in-memory store keys it).
fn member_key(worker: &WorkerId) -> String {
    format!("{}member#{worker}", shardlease::lease::RESERVED_PREFIX)
}

impl Target<'_> {
    fn key(&self) -> String {
        match self {
            Target::Lease(key) => key.to_string(),
            Target::Member(worker) => member_key(worker),
        }
    }

    fn read(&self, table: &InMemoryStore) -> Option<Version> {
        match self {
            Target::Lease(key) => {
                flat(now_or_never(table.get(key, far()))).map(|l| Version::Lease(Arc::new(l)))
            }
            Target::Member(worker) => flat(now_or_never(table.get_member(worker, true, far())))
                .map(|m| Version::Member(Arc::new(m))),
        }
    }
}

/// The partition of an item (FNV-1a of its key): a stable choice, whatever the run.
fn partition(key: &str) -> usize {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % PARTITIONS as u64) as usize
}

/// What the lagging replicas need: every item's versions of the last [`MAX_LAG`], oldest
/// first, each with the instant it was written (`None`: the item did not exist). An item
/// with no versions here has not changed for [`MAX_LAG`]: every replica holds it as the table
/// does. Kept only while stale reads are injected, and pruned as it goes: one version per item
/// written in the last [`MAX_LAG`], plus one before.
#[derive(Debug, Default)]
struct Replica {
    on: bool,
    versions: BTreeMap<String, VecDeque<(Instant, Option<Version>)>>,
    writes: u64,
}

/// Drops the versions no read can reach: all but the newest one older than `horizon`.
fn prune(versions: &mut VecDeque<(Instant, Option<Version>)>, horizon: Option<Instant>) {
    let Some(horizon) = horizon else { return };
    while versions.len() >= 2 && versions[1].0 <= horizon {
        versions.pop_front();
    }
}

/// The version an item had at `at` (before its first recorded change: that one's previous).
fn version_at(
    versions: &VecDeque<(Instant, Option<Version>)>,
    at: Option<Instant>,
) -> Option<Version> {
    let found = at.and_then(|at| versions.iter().rev().find(|(since, _)| *since <= at));
    found.or(versions.front()).and_then(|(_, v)| v.clone())
}

impl Replica {
    /// Before a write: the item's present version, if nothing of it is kept yet.
    fn before(&mut self, key: String, now: Instant, present: Option<Version>) {
        self.versions
            .entry(key)
            .or_insert_with(|| VecDeque::from([(now, present)]));
    }

    /// After a write: the item's new version, if it changed.
    fn after(&mut self, key: &str, now: Instant, present: Option<Version>) {
        let horizon = now.checked_sub(MAX_LAG);
        if let Some(versions) = self.versions.get_mut(key) {
            if versions.back().map(|(_, v)| v) != Some(&present) {
                versions.push_back((now, present));
            }
            prune(versions, horizon);
        }
        self.writes += 1;
        if self.writes.is_multiple_of(256) {
            // Items not written for MAX_LAG: every replica has them as the table does.
            self.versions.retain(|_, versions| {
                prune(versions, horizon);
                versions.len() > 1 || horizon.is_none_or(|h| versions[0].0 > h)
            });
        }
    }
}

/// The campaign's side of the network, shared by every connection.
#[derive(Debug, Default)]
pub struct ChaosNet {
    rates: Mutex<Option<Chaos>>,
    injected: Mutex<Injected>,
    audit: Mutex<Option<Arc<dyn Audit>>>,
    hung: Mutex<BTreeMap<u64, Hung>>,
    next_hung: AtomicU64,
    /// The store's own per-attempt timeout, if it has one (an SDK attempt timeout). `None`:
    /// an unanswered attempt waits until its caller gives up.
    attempt_timeout: Mutex<Option<Duration>>,
    replica: Mutex<Replica>,
    /// Told when the faults heal: the writes still on their way land at once.
    healed: tokio::sync::Notify,
    /// Faults aimed at one request each, in the order they were armed.
    aims: Mutex<Vec<Aim>>,
}

impl ChaosNet {
    /// Whether the campaign's network model is on.
    pub fn on(&self) -> bool {
        self.rates.lock().unwrap().is_some()
    }

    /// Switches the campaign's model on with these rates (all zero: on, and healthy; the
    /// writes still on their way land at once). Stale reads keep the replicas' history from
    /// then on.
    pub fn set(&self, rates: Chaos) {
        *self.rates.lock().unwrap() = Some(rates);
        if rates.stale > 0.0 {
            self.replica.lock().unwrap().on = true;
        }
        if rates.late == 0.0 {
            self.healed.notify_waiters();
        }
    }

    pub fn rates(&self) -> Chaos {
        self.rates.lock().unwrap().unwrap_or_default()
    }

    pub fn injected(&self) -> Injected {
        *self.injected.lock().unwrap()
    }

    fn count(&self, change: impl FnOnce(&mut Injected)) {
        change(&mut self.injected.lock().unwrap());
    }

    pub fn set_audit(&self, audit: Arc<dyn Audit>) {
        *self.audit.lock().unwrap() = Some(audit);
    }

    fn audit(&self) -> Option<Arc<dyn Audit>> {
        self.audit.lock().unwrap().clone()
    }

    pub fn set_attempt_timeout(&self, timeout: Option<Duration>) {
        *self.attempt_timeout.lock().unwrap() = timeout;
    }

    /// The requests whose answer never came and whose callers still wait, oldest first.
    pub fn hung(&self) -> Vec<(u64, Hung)> {
        let hung = self.hung.lock().unwrap();
        hung.iter().map(|(id, h)| (*id, h.clone())).collect()
    }

    /// Arms a fault aimed at one request (a scripted schedule's).
    pub fn aim(&self, aim: Aim) {
        self.aims.lock().unwrap().push(aim);
    }

    /// The fault aimed at this request, if any (disarmed).
    fn aimed(&self, process: u64, operation: &str, key: &str) -> Option<Aimed> {
        let mut aims = self.aims.lock().unwrap();
        let at = aims.iter().position(|aim| {
            aim.process.is_none_or(|p| p == process)
                && aim.operation == operation
                && aim.key.as_deref().is_none_or(|k| k == key)
        })?;
        Some(aims.remove(at).fault)
    }

    /// How many item versions the replicas' history holds (for the growth check).
    pub fn versions(&self) -> usize {
        let replica = self.replica.lock().unwrap();
        replica.versions.values().map(VecDeque::len).sum()
    }

    fn hang(&self, hung: Hung) -> HungGuard<'_> {
        let id = self.next_hung.fetch_add(1, Ordering::Relaxed);
        self.hung.lock().unwrap().insert(id, hung);
        HungGuard { chaos: self, id }
    }

    fn replica_before(&self, table: &InMemoryStore, target: Target<'_>) {
        let mut replica = self.replica.lock().unwrap();
        if replica.on {
            replica.before(target.key(), Instant::now(), target.read(table));
        }
    }

    fn replica_after(&self, table: &InMemoryStore, target: Target<'_>) {
        let mut replica = self.replica.lock().unwrap();
        if replica.on {
            replica.after(&target.key(), Instant::now(), target.read(table));
        }
    }

    /// `worker`'s record as a replica `lag` behind the table holds it.
    fn member_as_of(
        &self,
        table: &InMemoryStore,
        worker: &WorkerId,
        lag: Duration,
    ) -> Option<Member> {
        if !lag.is_zero() {
            let replica = self.replica.lock().unwrap();
            if let Some(versions) = replica.versions.get(&member_key(worker)) {
                return match version_at(versions, Instant::now().checked_sub(lag)) {
                    Some(Version::Member(member)) => Some(Arc::unwrap_or_clone(member)),
                    _ => None,
                };
            }
        }
        flat(now_or_never(table.get_member(worker, true, far())))
    }

    /// One page of a scan from `from`, each partition `p` read from a replica `lags[p]`
    /// behind the table: the same keys' range as the live page, each item as it was then
    /// (absent if it did not exist then, present if it existed then and is gone now); and
    /// the page's size.
    fn page_as_of(
        &self,
        table: &InMemoryStore,
        from: Option<PageToken>,
        lags: [Duration; PARTITIONS],
    ) -> (Page, usize) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let (live, bytes) = table.list_page_measured(from.as_ref());
        if lags.iter().all(Duration::is_zero) {
            return (live, bytes);
        }
        let replica = self.replica.lock().unwrap();
        if replica.versions.is_empty() {
            return (live, bytes);
        }
        let mut items: BTreeMap<String, Version> = BTreeMap::new();
        for lease in live.leases {
            items.insert(lease.key.to_string(), Version::Lease(lease));
        }
        for member in live.members {
            items.insert(member_key(&member.worker), Version::Member(member));
        }
        let lower = from.map_or(Unbounded, |t| Excluded(t.as_str().to_owned()));
        let upper = live
            .next
            .as_ref()
            .map_or(Unbounded, |t| Included(t.as_str().to_owned()));
        let now = Instant::now();
        for (key, versions) in replica.versions.range::<String, _>((lower, upper)) {
            let lag = lags[partition(key)];
            if lag.is_zero() {
                continue;
            }
            match version_at(versions, now.checked_sub(lag)) {
                Some(version) => items.insert(key.clone(), version),
                None => items.remove(key),
            };
        }
        let mut page = Page {
            malformed: live.malformed,
            next: live.next,
            ..Page::default()
        };
        for version in items.into_values() {
            match version {
                Version::Lease(lease) => page.leases.push(lease),
                Version::Member(member) => page.members.push(member),
            }
        }
        let size = page
            .leases
            .iter()
            .map(|l| lease_item_size(l))
            .sum::<usize>()
            + page
                .members
                .iter()
                .map(|m| member_item_size(m))
                .sum::<usize>();
        (page, size)
    }
}

/// Removes a hung request from the list when its caller gives up (drops the call).
struct HungGuard<'a> {
    chaos: &'a ChaosNet,
    id: u64,
}

impl Drop for HungGuard<'_> {
    fn drop(&mut self) {
        self.chaos.hung.lock().unwrap().remove(&self.id);
    }
}

/// One process's faults: frozen (SIGSTOP), killed (SIGKILL), or in a latency spike.
#[derive(Debug, Clone, Default)]
struct LinkChaos {
    frozen_until: Arc<Mutex<Option<Instant>>>,
    killed: Arc<AtomicBool>,
    spike: Arc<Mutex<Option<Spike>>>,
}

#[derive(Debug, Clone, Copy)]
struct Spike {
    until: Instant,
    min: Duration,
    max: Duration,
}

impl Link {
    /// The process is frozen until `until`: it sends nothing, and answers reach it only then.
    pub fn freeze_until(&self, until: Instant) {
        *self.chaos.frozen_until.lock().unwrap() = Some(until);
    }

    pub fn thaw(&self) {
        *self.chaos.frozen_until.lock().unwrap() = None;
    }

    /// The process is dead: it sends nothing more and no answer reaches it.
    pub fn kill(&self) {
        self.chaos.killed.store(true, Ordering::SeqCst);
    }

    /// Every request sent before `until` takes between `min` and `max` more.
    pub fn spike_until(&self, until: Instant, min: Duration, max: Duration) {
        *self.chaos.spike.lock().unwrap() = Some(Spike { until, min, max });
    }

    pub fn end_spike(&self) {
        *self.chaos.spike.lock().unwrap() = None;
    }
}

fn injected_fault(operation: &'static str, key: &str, ambiguous: bool) -> StoreError {
    StoreError::Transient {
        operation,
        key: key.to_owned(),
        ambiguous,
        source: "injected fault".into(),
    }
}

/// Bills one request.
fn bill(net: &Net, kind: Kind, size: usize) {
    net.count(|u| match kind {
        Kind::Read | Kind::StaleRead | Kind::Scan | Kind::StaleScan => {
            u.reads += 1;
            u.rcu += read_units(kind, size);
        }
        Kind::Write => {
            u.writes += 1;
            u.wcu += size.div_ceil(1024).max(1) as u64;
        }
    });
}

/// A request as the campaign's network runs it: what it does to the table, and what a retry
/// that finds it landed answers.
struct Sent<T, F> {
    apply: Arc<F>,
    landed: Arc<Mutex<Option<T>>>,
    /// An aimed `Unanswered` hit it: no attempt of this call is answered.
    doomed: AtomicBool,
}

/// The answer to the retry of a write whose earlier attempt landed, as the backends give it.
/// The retry is sent again and judged by its condition against the table as it is; refused,
/// the backend recognises its own write by the token it stored in the item (`lastOp`), but
/// only while no other write that stores one changed the item since: for a lease, a write
/// that moved its counter (or another item of the key); for a membership record, one that moved
/// its heartbeat or its incarnation. Past that, the truth is a lost race with the item as it is
/// now. (Answering the earlier attempt's item whatever happened since told a worker that a
/// take was its own after a steal had taken the lease from it.)
pub trait Recognised: Sized {
    /// `earlier`: what the attempt that landed answered; `retry`: the retry's own answer.
    fn recognised(earlier: Self, retry: Self) -> Self {
        let _ = earlier;
        retry
    }
}

impl Recognised for Outcome<Lease> {
    fn recognised(earlier: Self, retry: Self) -> Self {
        match (earlier, retry) {
            (Outcome::Done(mine), Outcome::LostRace { current: Some(now) })
                if now.nonce == mine.nonce && now.counter == mine.counter =>
            {
                Outcome::Done(now)
            }
            (_, retry) => retry,
        }
    }
}

impl Recognised for Outcome<Member> {
    fn recognised(earlier: Self, retry: Self) -> Self {
        match (earlier, retry) {
            (Outcome::Done(mine), Outcome::LostRace { current: Some(now) })
                if now.incarnation == mine.incarnation && now.heartbeat == mine.heartbeat =>
            {
                Outcome::Done(now)
            }
            (_, retry) => retry,
        }
    }
}

impl Recognised for Option<Lease> {}
impl Recognised for Option<Member> {}
impl Recognised for Vec<Arc<Member>> {}
impl Recognised for Page {}
impl Recognised for () {}

impl SimStore {
    /// The connection of campaign process `process`, whose worker reads `clock`.
    pub fn for_process(net: Arc<Net>, process: u64, clock: SimClock) -> (Self, Link) {
        let (mut store, link) = Self::new(net, process);
        store.clock = Some(clock);
        (store, link)
    }

    /// The connection of an operator's tool (process `process`), on tokio's clock.
    pub fn for_operator(net: Arc<Net>, process: u64) -> Self {
        Self::new(net, process).0
    }

    /// How far behind the table the replica serving an eventually consistent read is: with
    /// the `stale` rate's probability a lagging one, whose lag is under a second for 80 % of
    /// reads, 1-10 s for 15 %, and 10-15 s (beyond a lease duration) for 5 %; otherwise 0.
    /// Draws nothing while no stale reads are injected.
    fn stale_lag(&self) -> Duration {
        let rate = self.net.chaos.rates().stale;
        if rate <= 0.0 || self.draw() >= rate {
            return Duration::ZERO;
        }
        let (kind, within) = (self.draw(), self.draw());
        let (low, high) = if kind < 0.8 {
            (0.0, 1.0)
        } else if kind < 0.95 {
            (1.0, 10.0)
        } else {
            (10.0, MAX_LAG.as_secs_f64())
        };
        self.count_stale(Duration::from_secs_f64(low + (high - low) * within))
    }

    /// Counts a read served `lag` behind the table; returns `lag`.
    fn count_stale(&self, lag: Duration) -> Duration {
        self.net.chaos.count(|i| {
            i.stale += 1;
            if lag > LEASE_DURATION {
                i.stale_long += 1;
            }
        });
        lag
    }

    /// Waits while the process is frozen; forever once it is killed.
    async fn until_running(&self) {
        loop {
            if self.link.chaos.killed.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let frozen = *self.link.chaos.frozen_until.lock().unwrap();
            match frozen {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Waits for an answer due at `at`: held while the process is frozen, never delivered to
    /// a killed one; `false` when the caller's deadline came first.
    async fn deliver(&self, at: Instant, deadline: Instant) -> bool {
        tokio::time::sleep_until(at.min(deadline)).await;
        self.until_running().await;
        at <= deadline
    }

    fn spike_latency(&self, sent: Instant) -> Duration {
        let spike = *self.link.chaos.spike.lock().unwrap();
        match spike {
            Some(spike) if sent < spike.until => {
                self.net.chaos.count(|i| i.spiked += 1);
                let extra = self.rng.lock().unwrap().gen_range(0.0..=1.0);
                spike.min + (spike.max - spike.min).mul_f64(extra)
            }
            _ => Duration::ZERO,
        }
    }

    fn bill(&self, kind: Kind, size: usize) {
        bill(&self.net, kind, size);
    }

    /// One call under the campaign's faults; retried as [`call`](Self::call) is.
    async fn call_chaos<T: Recognised + Clone + Send + 'static>(
        &self,
        operation: &'static str,
        key: &str,
        kind: Kind,
        deadline: Instant,
        apply: impl Fn() -> (T, usize) + Send + Sync + 'static,
    ) -> StoreResult<T> {
        // The worker computes its deadlines on its own clock; the network runs on tokio's.
        let deadline = self.clock.as_ref().map_or(deadline, |c| c.real(deadline));
        let request = Sent {
            apply: Arc::new(apply),
            landed: Arc::default(),
            doomed: AtomicBool::new(false),
        };
        let apply = &request.apply;
        let landed = &request.landed;
        self.retry
            .run(operation, key, deadline, |_| async {
                self.until_running().await;
                let sent = Instant::now();
                let latency = self.latency(kind) + self.spike_latency(sent);
                let rates = self.net.chaos.rates();
                if self.link.cut_off.load(Ordering::SeqCst) {
                    self.net.count(|u| u.failed += 1);
                    self.deliver(sent + latency, deadline).await;
                    return Err(injected_fault(operation, key, false));
                }
                if rates.throttle > 0.0 && self.draw() < rates.throttle {
                    self.net.count(|u| u.throttled += 1);
                    self.net.chaos.count(|i| i.throttle += 1);
                    self.deliver(sent + latency, deadline).await;
                    return Err(StoreError::Throttled {
                        operation,
                        key: key.to_owned(),
                        source: "injected throttle".into(),
                    });
                }
                if rates.transient > 0.0 && self.draw() < rates.transient {
                    self.net.count(|u| u.failed += 1);
                    self.net.chaos.count(|i| i.transient += 1);
                    self.deliver(sent + latency, deadline).await;
                    return Err(injected_fault(operation, key, false));
                }
                if request.doomed.load(Ordering::SeqCst) {
                    return self
                        .unanswered(operation, key, sent, deadline, async {})
                        .await;
                }
                let earlier = landed.lock().unwrap().clone();
                if let Some(earlier) = earlier {
                    // The retry of a write that landed: sent again (see `Recognised`).
                    tokio::time::sleep_until((sent + latency / 2).min(deadline)).await;
                    if Instant::now() >= deadline {
                        return Err(injected_fault(operation, key, true));
                    }
                    let (retry, size) = apply();
                    self.bill(kind, size);
                    let answer = T::recognised(earlier, retry);
                    *landed.lock().unwrap() = Some(answer.clone());
                    if self.deliver(sent + latency, deadline).await {
                        return Ok(answer);
                    }
                    return Err(injected_fault(operation, key, true));
                }
                let aimed = match kind {
                    Kind::Write => self.net.chaos.aimed(self.process, operation, key),
                    _ => None,
                };
                if aimed == Some(Aimed::Unanswered) {
                    self.net.chaos.count(|i| i.never += 1);
                    request.doomed.store(true, Ordering::SeqCst);
                    let arrives = async {
                        tokio::time::sleep_until(sent + latency / 2).await;
                        let (answer, size) = apply();
                        self.bill(kind, size);
                        *landed.lock().unwrap() = Some(answer);
                    };
                    return self
                        .unanswered(operation, key, sent, deadline, arrives)
                        .await;
                }
                if kind == Kind::Write && rates.late > 0.0 && self.draw() < rates.late {
                    self.net.count(|u| u.failed += 1);
                    let at = sent + LATE_WITHIN.mul_f64(self.draw()).max(latency / 2);
                    self.land_late(operation, key, kind, sent, at, &request);
                    if self.draw() < 0.5 {
                        // The connection reset after the request left.
                        self.deliver(sent + latency, deadline).await;
                        return Err(injected_fault(operation, key, true));
                    }
                    let now = Instant::now();
                    return self
                        .unanswered(operation, key, now, deadline, async {})
                        .await;
                }
                if rates.never > 0.0 && self.draw() < rates.never {
                    return self
                        .never_answer(operation, key, kind, sent, latency, deadline, &request)
                        .await;
                }
                tokio::time::sleep_until((sent + latency / 2).min(deadline)).await;
                if Instant::now() >= deadline {
                    self.net.count(|u| u.failed += 1);
                    // The caller gave up before the request arrived: it may arrive all the same.
                    if kind == Kind::Write && rates.late > 0.0 && self.draw() < 0.5 {
                        let at = sent + LATE_WITHIN.mul_f64(self.draw()).max(latency / 2);
                        self.land_late(operation, key, kind, sent, at, &request);
                    }
                    return Err(injected_fault(operation, key, kind == Kind::Write));
                }
                let (answer, size) = apply();
                self.bill(kind, size);
                if kind == Kind::Write && rates.lost > 0.0 && self.draw() < rates.lost {
                    self.net.count(|u| u.failed += 1);
                    self.net.chaos.count(|i| i.lost += 1);
                    *landed.lock().unwrap() = Some(answer);
                    self.deliver(sent + latency, deadline).await;
                    return Err(injected_fault(operation, key, true));
                }
                if self.deliver(sent + latency, deadline).await {
                    Ok(answer)
                } else {
                    self.net.count(|u| u.failed += 1);
                    Err(injected_fault(operation, key, kind == Kind::Write))
                }
            })
            .await
    }

    /// Lands an attempt `sent` then, which its caller lost, at `at` (drawn up to
    /// [`LATE_WITHIN`] after it was sent, never before it could arrive), or at the heal if that
    /// comes first; once. A retry still running after it landed recognises it, as the backend
    /// does by its token.
    fn land_late<T, F>(
        &self,
        operation: &'static str,
        key: &str,
        kind: Kind,
        sent: Instant,
        at: Instant,
        request: &Sent<T, F>,
    ) where
        T: Clone + Send + 'static,
        F: Fn() -> (T, usize) + Send + Sync + 'static,
    {
        let (apply, landed) = (Arc::clone(&request.apply), Arc::clone(&request.landed));
        let (net, process, key) = (Arc::clone(&self.net), self.process, key.to_owned());
        tokio::spawn(async move {
            let healed = net.chaos.healed.notified();
            tokio::pin!(healed);
            healed.as_mut().enable();
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(at) => {}
                _ = healed => {}
            }
            let (answer, size) = apply();
            bill(&net, kind, size);
            net.chaos.count(|i| i.late += 1);
            landed.lock().unwrap().get_or_insert(answer);
            if let Some(audit) = net.chaos.audit() {
                audit.landed_late(process, operation, &key, Instant::now() - sent);
            }
        });
    }

    /// No answer comes to the attempt `sent` then: the caller waits until it gives up (or
    /// the store's own attempt timeout, if it has one, fails the attempt as ambiguous).
    /// `meanwhile` runs first (the request arriving, or not).
    async fn unanswered<T>(
        &self,
        operation: &'static str,
        key: &str,
        sent: Instant,
        deadline: Instant,
        meanwhile: impl std::future::Future<Output = ()>,
    ) -> StoreResult<T> {
        let _waiting = self.net.chaos.hang(Hung {
            process: self.process,
            operation,
            key: key.to_owned(),
            since: sent,
            deadline,
        });
        meanwhile.await;
        let timeout = *self.net.chaos.attempt_timeout.lock().unwrap();
        match timeout {
            Some(timeout) => {
                tokio::time::sleep_until(sent + timeout).await;
                self.net.count(|u| u.failed += 1);
                Err(injected_fault(operation, key, true))
            }
            None => std::future::pending().await,
        }
    }

    /// A request whose answer never comes: applied when it arrives or not at all (at random;
    /// with late writes on, half of those not applied land late), then nothing, until the
    /// caller drops the call (or the store's own attempt timeout, if it has one, fails it as
    /// ambiguous).
    #[allow(clippy::too_many_arguments)]
    async fn never_answer<T, F>(
        &self,
        operation: &'static str,
        key: &str,
        kind: Kind,
        sent: Instant,
        latency: Duration,
        deadline: Instant,
        request: &Sent<T, F>,
    ) -> StoreResult<T>
    where
        T: Clone + Send + 'static,
        F: Fn() -> (T, usize) + Send + Sync + 'static,
    {
        self.net.chaos.count(|i| i.never += 1);
        let applied = self.draw() < 0.5;
        if !applied && kind == Kind::Write && self.net.chaos.rates().late > 0.0 && self.draw() < 0.5
        {
            let at = sent + LATE_WITHIN.mul_f64(self.draw()).max(latency / 2);
            self.land_late(operation, key, kind, sent, at, request);
        }
        let arrives = async {
            if applied {
                tokio::time::sleep_until(sent + latency / 2).await;
                let (answer, size) = (request.apply)();
                self.bill(kind, size);
                if kind == Kind::Write {
                    *request.landed.lock().unwrap() = Some(answer);
                }
            }
        };
        self.unanswered(operation, key, Instant::now(), deadline, arrives)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardlease::lease::NewLease;

    fn version(counter: u64) -> Option<Version> {
        let key = LeaseKey::new("a").unwrap();
        let lease = Lease {
            counter,
            ..NewLease::new(key).into_lease()
        };
        Some(Version::Lease(Arc::new(lease)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagging_replica_shows_items_as_they_were_and_forgets_what_no_read_reaches() {
        let mut replica = Replica::default();
        let created = Instant::now();
        replica.before("a".into(), created, None);
        replica.after("a", created, version(1));
        tokio::time::advance(Duration::from_secs(5)).await;
        replica.after("a", Instant::now(), version(2));
        let at =
            |replica: &Replica, instant: Instant| version_at(&replica.versions["a"], Some(instant));
        assert_eq!(at(&replica, created - Duration::from_millis(1)), None);
        assert_eq!(at(&replica, created + Duration::from_secs(1)), version(1));
        assert_eq!(at(&replica, Instant::now()), version(2));
        tokio::time::advance(Duration::from_secs(20)).await;
        replica.after("a", Instant::now(), version(3));
        // Kept: the newest version older than the longest lag, and the ones since.
        assert_eq!(replica.versions["a"].len(), 2);
        assert_eq!(at(&replica, Instant::now() - MAX_LAG), version(2));
    }
}
