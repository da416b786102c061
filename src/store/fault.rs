//! A store wrapper that injects faults, for tests: a worker cut off from the table, requests
//! that are never answered (a half-open connection), a fixed latency per call, requests that
//! land late whether or not their caller still waits (a slow link), and a take whose answer
//! is lost after it landed. (The simulator in `examples/simulate` has a richer network model:
//! latency distributions, throttles, lost answers, pauses.)

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{LeaseStore, Outcome, Page, PageToken, StoreError, StoreResult};
use crate::lease::{Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, WorkerId};

/// Switches for a [`FaultyStore`]. Cheap to clone; clones share the switches.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    cut_off: Arc<AtomicBool>,
    latency_micros: Arc<AtomicU64>,
    latency_on: Arc<Mutex<HashMap<&'static str, Duration>>>,
    late_micros: Arc<AtomicU64>,
    calls: Arc<AtomicU64>,
    hang: Arc<Mutex<Hang>>,
    hung: Arc<AtomicU64>,
    lose_take_answer: Arc<AtomicBool>,
    lose_open_answer: Arc<AtomicBool>,
    lost_answers: Arc<AtomicU64>,
    /// Created just before the next `create` call is sent (see
    /// [`Faults::create_before_next_create`]).
    racing_create: Arc<Mutex<Option<NewLease>>>,
}

/// Which requests are never answered.
#[derive(Debug, Default)]
struct Hang {
    all: bool,
    operations: HashSet<&'static str>,
    items: HashSet<(&'static str, String)>,
}

impl Faults {
    /// Makes the next `create` call meet `lease` created just before it (as by a discoverer
    /// that re-created a lease a moment earlier): `lease` is created on the wrapped store,
    /// then the call is sent.
    pub fn create_before_next_create(&self, lease: NewLease) {
        *self.racing_create.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
    }

    /// Cuts the store off (every call fails as a connection error would) or reconnects it.
    pub fn set_cut_off(&self, cut_off: bool) {
        self.cut_off.store(cut_off, Ordering::SeqCst);
    }

    /// Adds `latency` before every call (on tokio time, so paused-time tests are exact).
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_micros.store(micros, Ordering::SeqCst);
    }

    /// Adds `latency` before every call of one operation (`"get_member"`, say), on top of
    /// [`set_latency`](Self::set_latency)'s; zero removes it. A read delayed so sees the table
    /// as it is when the delay ends, as a read answered by a retry does.
    pub fn set_latency_on(&self, operation: &'static str, latency: Duration) {
        let mut on = self.latency_on.lock().unwrap_or_else(|e| e.into_inner());
        if latency.is_zero() {
            on.remove(operation);
        } else {
            on.insert(operation, latency);
        }
    }

    /// Makes every request sent from now on reach the store `delay` late (zero: on time), as
    /// over a slow link: it is applied then even if its caller gave up on it in between (a
    /// request already sent is not called back), and answered at once when applied.
    pub fn set_late(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.late_micros.store(micros, Ordering::SeqCst);
    }

    /// Makes every request sent from now on go unanswered (as on a connection the server
    /// accepted and never answers), or stops doing so. A request sent while this is on never
    /// returns, even after it is turned off: only its caller can give up on it, by dropping
    /// it.
    pub fn set_hang(&self, hang: bool) {
        self.lock_hang().all = hang;
    }

    /// As [`set_hang`](Self::set_hang), for the requests of one operation only: `"heartbeat"`,
    /// `"renew"`, `"take"`, `"scan"` (listings), `"get"`, `"release"`, `"remove_member"`, ...
    pub fn set_hang_on(&self, operation: &'static str, hang: bool) {
        let mut state = self.lock_hang();
        if hang {
            state.operations.insert(operation);
        } else {
            state.operations.remove(operation);
        }
    }

    /// As [`set_hang_on`](Self::set_hang_on), for the requests of one operation on one item
    /// only: a lease's key, or a worker's id for its membership record.
    pub fn set_hang_on_key(&self, operation: &'static str, key: &str, hang: bool) {
        let mut state = self.lock_hang();
        let item = (operation, key.to_owned());
        if hang {
            state.items.insert(item);
        } else {
            state.items.remove(&item);
        }
    }

    /// Loses the answer of the next take that lands: the write is applied, and the caller gets
    /// an ambiguous transient error instead of the lease (as when a connection drops after
    /// DynamoDB applied the write and the caller's deadline ran out before a retry).
    pub fn lose_next_take_answer(&self) {
        self.lose_take_answer.store(true, Ordering::SeqCst);
    }

    /// As [`lose_next_take_answer`](Self::lose_next_take_answer), for the next
    /// `open_session` that lands: the session's record is written, and its process is not
    /// told.
    pub fn lose_next_open_answer(&self) {
        self.lose_open_answer.store(true, Ordering::SeqCst);
    }

    /// How many answers [`lose_next_take_answer`](Self::lose_next_take_answer) and
    /// [`lose_next_open_answer`](Self::lose_next_open_answer) lost.
    pub fn lost_answers(&self) -> u64 {
        self.lost_answers.load(Ordering::SeqCst)
    }

    /// How many calls went through this store.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many calls were left unanswered by [`set_hang`](Self::set_hang) or
    /// [`set_hang_on`](Self::set_hang_on).
    pub fn hung(&self) -> u64 {
        self.hung.load(Ordering::SeqCst)
    }

    /// The answer of a write that landed: `outcome`, or, when `lose` is armed (it is disarmed
    /// here), an ambiguous transient error as if the answer was lost.
    fn answer<T>(
        &self,
        outcome: Outcome<T>,
        lose: &AtomicBool,
        operation: &'static str,
        key: &str,
    ) -> StoreResult<Outcome<T>> {
        if outcome.is_done() && lose.swap(false, Ordering::SeqCst) {
            self.lost_answers.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Transient {
                operation,
                key: key.to_owned(),
                ambiguous: true,
                source: "the write landed and its answer was lost (injected fault)".into(),
            });
        }
        Ok(outcome)
    }

    fn lock_hang(&self) -> std::sync::MutexGuard<'_, Hang> {
        self.hang.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hangs(&self, operation: &'static str, key: &str) -> bool {
        let state = self.lock_hang();
        state.all
            || state.operations.contains(operation)
            || state.items.contains(&(operation, key.to_owned()))
    }
}

/// Wraps a store and applies [`Faults`] to every call.
#[derive(Debug, Clone)]
pub struct FaultyStore<S> {
    inner: Arc<S>,
    faults: Faults,
}

impl<S: LeaseStore> FaultyStore<S> {
    /// Wraps `inner`; the returned [`Faults`] controls it.
    pub fn new(inner: S) -> (Self, Faults) {
        let faults = Faults::default();
        (
            Self {
                inner: Arc::new(inner),
                faults: faults.clone(),
            },
            faults,
        )
    }

    async fn gate(&self, operation: &'static str, key: &str, deadline: Instant) -> StoreResult<()> {
        self.faults.calls.fetch_add(1, Ordering::Relaxed);
        if self.faults.hangs(operation, key) {
            self.faults.hung.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
        }
        let latency = Duration::from_micros(self.faults.latency_micros.load(Ordering::SeqCst))
            + (self.faults.latency_on.lock())
                .unwrap_or_else(|e| e.into_inner())
                .get(operation)
                .copied()
                .unwrap_or_default();
        if !latency.is_zero() {
            tokio::time::sleep_until((Instant::now() + latency).min(deadline)).await;
        }
        if self.faults.cut_off.load(Ordering::SeqCst) {
            return Err(StoreError::Transient {
                operation,
                key: key.to_owned(),
                ambiguous: false,
                source: "cut off from the store (injected fault)".into(),
            });
        }
        Ok(())
    }

    /// Runs `call` on the wrapped store now, or, when requests land late, in a task of its
    /// own after the delay: it lands even if the caller stops waiting.
    async fn land<T, F, Fut>(&self, call: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<S>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = StoreResult<T>> + Send + 'static,
    {
        let late = Duration::from_micros(self.faults.late_micros.load(Ordering::SeqCst));
        if late.is_zero() {
            return call(Arc::clone(&self.inner)).await;
        }
        let inner = Arc::clone(&self.inner);
        let landing = tokio::spawn(async move {
            tokio::time::sleep(late).await;
            call(inner).await
        });
        landing.await.expect("a late request does not panic")
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for FaultyStore<S> {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        self.gate("create", lease.key.as_str(), deadline).await?;
        let racing = (self.faults.racing_create.lock())
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(racing) = racing {
            let _ = self.inner.create(racing, deadline).await?;
        }
        self.land(move |inner| async move { inner.create(lease, deadline).await })
            .await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        self.gate("get", key.as_str(), deadline).await?;
        let key = key.clone();
        self.land(move |inner| async move { inner.get(&key, deadline).await })
            .await
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        self.gate("scan", "", deadline).await?;
        self.land(move |inner| async move { inner.list_page(from, deadline).await })
            .await
    }

    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        self.gate("scan", "", deadline).await?;
        self.land(move |inner| async move { inner.list_page_eventually(from, deadline).await })
            .await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        load: Option<f64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("renew", key.as_str(), deadline).await?;
        let (key, owner) = (key.clone(), owner.clone());
        self.land(move |inner| async move {
            inner
                .renew(&key, nonce, &owner, tenure, load, deadline)
                .await
        })
        .await
    }

    async fn take(
        &self,
        key: &LeaseKey,
        nonce: u64,
        taker: &WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("take", key.as_str(), deadline).await?;
        let (owned_key, taker) = (key.clone(), taker.clone());
        let outcome = self
            .land(move |inner| async move {
                inner
                    .take(
                        &owned_key,
                        nonce,
                        &taker,
                        incarnation,
                        observed_counter,
                        deadline,
                    )
                    .await
            })
            .await?;
        self.faults
            .answer(outcome, &self.faults.lose_take_answer, "take", key.as_str())
    }

    async fn request_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        requester: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("request_handoff", key.as_str(), deadline).await?;
        let (key, owner, requester) = (key.clone(), owner.clone(), requester.clone());
        self.land(move |inner| async move {
            inner
                .request_handoff(&key, nonce, &owner, tenure, &requester, deadline)
                .await
        })
        .await
    }

    async fn complete_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        to: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("complete_handoff", key.as_str(), deadline)
            .await?;
        let (key, owner, to) = (key.clone(), owner.clone(), to.clone());
        self.land(move |inner| async move {
            inner
                .complete_handoff(&key, nonce, &owner, tenure, &to, deadline)
                .await
        })
        .await
    }

    async fn release(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("release", key.as_str(), deadline).await?;
        let (key, owner) = (key.clone(), owner.clone());
        self.land(
            move |inner| async move { inner.release(&key, nonce, &owner, tenure, deadline).await },
        )
        .await
    }

    async fn checkpoint(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        seq: u64,
        checkpoint: &str,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("checkpoint", key.as_str(), deadline).await?;
        let (key, owner, checkpoint) = (key.clone(), owner.clone(), checkpoint.to_owned());
        self.land(move |inner| async move {
            inner
                .checkpoint(&key, nonce, &owner, tenure, seq, &checkpoint, deadline)
                .await
        })
        .await
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("delete", key.as_str(), deadline).await?;
        let key = key.clone();
        self.land(move |inner| async move {
            inner
                .delete(&key, nonce, observed_counter, observed_tenure, deadline)
                .await
        })
        .await
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("heartbeat", worker.as_str(), deadline).await?;
        let worker = worker.clone();
        let report = report.cloned();
        self.land(move |inner| async move {
            inner
                .heartbeat(&worker, incarnation, report.as_ref(), capacity, deadline)
                .await
        })
        .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("remove_member", worker.as_str(), deadline)
            .await?;
        let worker = worker.clone();
        self.land(move |inner| async move {
            inner
                .remove_member(&worker, observed_heartbeat, deadline)
                .await
        })
        .await
    }

    async fn give(
        &self,
        key: &LeaseKey,
        nonce: u64,
        to: &WorkerId,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        self.gate("give", key.as_str(), deadline).await?;
        let key = key.clone();
        let to = to.clone();
        self.land(move |inner| async move {
            inner
                .give(&key, nonce, &to, observed_counter, deadline)
                .await
        })
        .await
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        self.gate("get_member", worker.as_str(), deadline).await?;
        let worker = worker.clone();
        self.land(move |inner| async move { inner.get_member(&worker, consistent, deadline).await })
            .await
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("open_session", worker.as_str(), deadline).await?;
        let (id, replacing) = (worker.clone(), replacing.cloned());
        let outcome = self
            .land(move |inner| async move {
                inner
                    .open_session(&id, incarnation, capacity, replacing.as_ref(), deadline)
                    .await
            })
            .await?;
        self.faults.answer(
            outcome,
            &self.faults.lose_open_answer,
            "open_session",
            worker.as_str(),
        )
    }

    async fn beat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        report: Option<&LoadReport>,
        seen: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("beat", worker.as_str(), deadline).await?;
        let worker = worker.clone();
        let seen = seen.to_vec();
        let report = report.cloned();
        self.land(move |inner| async move {
            inner
                .beat(
                    &worker,
                    incarnation,
                    capacity,
                    report.as_ref(),
                    &seen,
                    deadline,
                )
                .await
        })
        .await
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("end_session", worker.as_str(), deadline).await?;
        let worker = worker.clone();
        self.land(move |inner| async move {
            inner
                .end_session(&worker, incarnation, observed_heartbeat, deadline)
                .await
        })
        .await
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        self.gate("notify", worker.as_str(), deadline).await?;
        let worker = worker.clone();
        let notices = notices.to_vec();
        self.land(move |inner| async move {
            inner.notify(&worker, incarnation, &notices, deadline).await
        })
        .await
    }
}
