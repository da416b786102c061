//! The simulated network between each worker and the shared in-memory table: a latency drawn
//! per call, injected faults, retries as the DynamoDB backend makes them, and the accounting
//! (operations, capacity units, who owns what in the table and since when).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardlease::lease::Incarnation;
use shardlease::store::dynamodb::schema::{lease_item_size, member_item_size};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::StoreResult;
use shardlease::store::{LeaseStore, Outcome, Page, PageToken, RetryPolicy, StoreError};
use shardlease::{Lease, LeaseKey, Member, NewLease, WorkerId};
use tokio::time::Instant;

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

    fn sample(&self, rng: &mut StdRng) -> Duration {
        if self.median.is_zero() {
            return Duration::ZERO;
        }
        // Box-Muller: a standard normal from two uniforms; z(0.99) = 2.326.
        let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
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
    /// One `Scan` page (up to 1,000 items here).
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
    /// Read capacity units (strongly consistent: 1 per 4 KB, a scan page by its total size).
    pub rcu: u64,
    /// Write capacity units (1 per 1 KB of the item; a failed condition costs the same).
    pub wcu: u64,
    /// Requests answered with an injected throttle.
    pub throttled: u64,
    /// Requests that failed (injected transient errors and cut-offs) or whose answer was lost.
    pub failed: u64,
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
    seed: u64,
}

impl Net {
    pub fn new(seed: u64, latency: Latencies, faults: FaultRates) -> Arc<Self> {
        Arc::new(Self {
            table: InMemoryStore::new(),
            latency,
            faults,
            usage: Mutex::default(),
            ownership: Mutex::default(),
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
    Scan,
    Write,
}

/// One worker's connection to the table.
pub struct SimStore {
    net: Arc<Net>,
    link: Link,
    rng: Mutex<StdRng>,
    retry: RetryPolicy,
}

impl SimStore {
    pub fn new(net: Arc<Net>, index: u64) -> (Self, Link) {
        let link = Link::default();
        let seed = net.seed ^ (index.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (
            Self {
                net,
                link: link.clone(),
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                retry: RetryPolicy::default(),
            },
            link,
        )
    }

    fn draw(&self) -> f64 {
        self.rng.lock().unwrap().gen()
    }

    fn latency(&self, kind: Kind) -> Duration {
        let latency = match kind {
            Kind::Read => self.net.latency.read,
            Kind::Scan => self.net.latency.scan,
            Kind::Write => self.net.latency.write,
        };
        latency.sample(&mut self.rng.lock().unwrap())
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
    async fn call<T: Clone + Send>(
        &self,
        operation: &'static str,
        key: &str,
        kind: Kind,
        deadline: Instant,
        apply: impl Fn() -> (T, usize) + Send + Sync,
    ) -> StoreResult<T> {
        let landed: Mutex<Option<T>> = Mutex::new(None);
        self.retry
            .run(deadline, |_| async {
                // A stalled worker sends nothing until it goes on.
                let stalled = *self.link.paused_until.lock().unwrap();
                if let Some(until) = stalled.filter(|u| *u > Instant::now()) {
                    tokio::time::sleep_until(until).await;
                }
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
                    // The retry of a write that landed: the backend sees its own token.
                    if self.answer_at(sent + latency, deadline).await {
                        return Ok(earlier);
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
                    Kind::Read | Kind::Scan => {
                        u.reads += 1;
                        u.rcu += size.div_ceil(4096).max(1) as u64;
                    }
                    Kind::Write => {
                        u.writes += 1;
                        u.wcu += size.div_ceil(1024).max(1) as u64;
                    }
                });
                let lost = kind == Kind::Write && self.draw() < self.net.faults.ambiguous;
                if lost {
                    *landed.lock().unwrap() = Some(answer);
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

    /// Runs a write on the table (its future is ready at once), records owner changes, and
    /// returns the answer with the item's size.
    fn write(
        &self,
        run: impl std::future::Future<Output = StoreResult<Outcome<Lease>>>,
    ) -> (Outcome<Lease>, usize) {
        let answer = flat(now_or_never(run));
        let size = outcome_size(&answer, lease_item_size);
        if let Outcome::Done(lease) = &answer {
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
        (answer, size)
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

#[async_trait]
impl LeaseStore for SimStore {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        let key = lease.key.to_string();
        self.call("create", &key, Kind::Write, deadline, || {
            self.write(self.net.table.create(lease.clone(), deadline))
        })
        .await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        self.call("get", key.as_str(), Kind::Read, deadline, || {
            let lease = flat(now_or_never(self.net.table.get(key, deadline)));
            let size = lease.as_ref().map_or(0, lease_item_size);
            (lease, size)
        })
        .await
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        if from.is_none() {
            self.link.scans.fetch_add(1, Ordering::Relaxed);
        }
        self.call("scan", "", Kind::Scan, deadline, || {
            let page = flat(now_or_never(
                self.net.table.list_page(from.clone(), deadline),
            ));
            let size = page.leases.iter().map(lease_item_size).sum::<usize>()
                + page.members.iter().map(member_item_size).sum::<usize>();
            (page, size)
        })
        .await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &WorkerId,
        tenure: u64,
        load: Option<f64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call("renew", key.as_str(), Kind::Write, deadline, || {
            self.write(self.net.table.renew(key, owner, tenure, load, deadline))
        })
        .await
    }

    async fn take(
        &self,
        key: &LeaseKey,
        taker: &WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call("take", key.as_str(), Kind::Write, deadline, || {
            let take = self
                .net
                .table
                .take(key, taker, incarnation, observed_counter, deadline);
            self.write(take)
        })
        .await
    }

    async fn request_handoff(
        &self,
        key: &LeaseKey,
        owner: &WorkerId,
        tenure: u64,
        requester: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call(
            "request_handoff",
            key.as_str(),
            Kind::Write,
            deadline,
            || {
                let request = self
                    .net
                    .table
                    .request_handoff(key, owner, tenure, requester, deadline);
                self.write(request)
            },
        )
        .await
    }

    async fn complete_handoff(
        &self,
        key: &LeaseKey,
        owner: &WorkerId,
        tenure: u64,
        to: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call(
            "complete_handoff",
            key.as_str(),
            Kind::Write,
            deadline,
            || {
                let complete = self
                    .net
                    .table
                    .complete_handoff(key, owner, tenure, to, deadline);
                self.write(complete)
            },
        )
        .await
    }

    async fn release(
        &self,
        key: &LeaseKey,
        owner: &WorkerId,
        tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call("release", key.as_str(), Kind::Write, deadline, || {
            self.write(self.net.table.release(key, owner, tenure, deadline))
        })
        .await
    }

    async fn checkpoint(
        &self,
        key: &LeaseKey,
        owner: &WorkerId,
        tenure: u64,
        checkpoint: &str,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call("checkpoint", key.as_str(), Kind::Write, deadline, || {
            let write = self
                .net
                .table
                .checkpoint(key, owner, tenure, checkpoint, deadline);
            self.write(write)
        })
        .await
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.call("delete", key.as_str(), Kind::Write, deadline, || {
            let delete = self
                .net
                .table
                .delete(key, observed_counter, observed_tenure, deadline);
            let answer = flat(now_or_never(delete));
            if answer.is_done() {
                self.net.ownership.lock().unwrap().owner.remove(key);
            }
            let size = outcome_size(&answer, lease_item_size);
            (answer, size)
        })
        .await
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        load: Option<f64>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.call("heartbeat", worker.as_str(), Kind::Write, deadline, || {
            let beat = self
                .net
                .table
                .heartbeat(worker, incarnation, load, capacity, deadline);
            let answer = flat(now_or_never(beat));
            let size = outcome_size(&answer, member_item_size);
            (answer, size)
        })
        .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.call(
            "remove_member",
            worker.as_str(),
            Kind::Write,
            deadline,
            || {
                let remove = self
                    .net
                    .table
                    .remove_member(worker, observed_heartbeat, deadline);
                let answer = flat(now_or_never(remove));
                let size = outcome_size(&answer, member_item_size);
                (answer, size)
            },
        )
        .await
    }
}
