//! A store wrapper that injects faults, for tests: a worker cut off from the table, requests
//! that are never answered (a half-open connection), a fixed latency per call, requests that
//! land late whether or not their caller still waits (a slow link), and a take whose answer
//! is lost after it landed. (The simulator in `sim/` has a richer network model:
//! latency distributions, throttles, lost answers, pauses.)

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::layer::{Request, Response, StoreLayer};
use super::{LeaseStore, Outcome, StoreError, StoreResult};
use crate::lease::NewLease;

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

    /// Sends `request` to the wrapped store now, or, when requests land late, in a task of its
    /// own after the delay (with a copy of the request): it lands even if the caller stops
    /// waiting.
    async fn land(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        let late = Duration::from_micros(self.faults.late_micros.load(Ordering::SeqCst));
        if late.is_zero() {
            return request.send_to(&*self.inner, deadline).await;
        }
        let (inner, request) = (Arc::clone(&self.inner), request.clone());
        let landing = tokio::spawn(async move {
            tokio::time::sleep(late).await;
            request.send_to(&*inner, deadline).await
        });
        landing.await.expect("a late request does not panic")
    }
}

#[async_trait]
impl<S: LeaseStore> StoreLayer for FaultyStore<S> {
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        // A listing of the whole table goes page by page, each page a call of its own.
        match request {
            Request::Snapshot { eventually } => {
                let snapshot = super::snapshot_by_pages(self, *eventually, deadline).await?;
                return Ok(Response::Snapshot(snapshot));
            }
            Request::ListMembers => {
                let snapshot = super::snapshot_by_pages(self, false, deadline).await?;
                return Ok(Response::Members(snapshot.members));
            }
            _ => {}
        }
        let (operation, key) = (request.operation(), request.key());
        self.gate(operation, key, deadline).await?;
        if let Request::Create { .. } = request {
            let racing = (self.faults.racing_create.lock())
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(racing) = racing {
                let _ = self.inner.create(racing, deadline).await?;
            }
        }
        let response = self.land(request, deadline).await?;
        let lose = match operation {
            "take" => &self.faults.lose_take_answer,
            "open_session" => &self.faults.lose_open_answer,
            _ => return Ok(response),
        };
        match response {
            Response::Lease(outcome) => self
                .faults
                .answer(outcome, lose, operation, key)
                .map(Response::Lease),
            Response::Member(outcome) => self
                .faults
                .answer(outcome, lose, operation, key)
                .map(Response::Member),
            other => Ok(other),
        }
    }
}
