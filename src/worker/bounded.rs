//! The worker's view of its store: every call ends by its deadline, whatever the store does.
//!
//! A [`LeaseStore`] promises to stop retrying at the deadline it is given, but a request that
//! nobody answers (a half-open connection, a store of the application's own that forgets a
//! timeout) may still never return. The worker does not depend on that promise: it abandons
//! every call at its deadline, on the worker's clock, and treats it as the store would treat
//! an unanswered request: transient and ambiguous (it may have been applied).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::clock::{timeout_at, Clock};
use crate::lease::{
    Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, Snapshot, WorkerId,
};
use crate::store::{LeaseStore, Outcome, Page, PageToken, StoreError, StoreResult};

/// Wraps a store so that no call outlives its deadline.
pub(crate) struct Bounded {
    inner: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
}

impl Bounded {
    pub fn new(inner: Arc<dyn LeaseStore>, clock: Arc<dyn Clock>) -> Self {
        Self { inner, clock }
    }

    async fn bound<T>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        call: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let start = self.clock.now();
        match timeout_at(&*self.clock, deadline, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::unanswered(
                operation,
                key,
                deadline.saturating_duration_since(start),
            )),
        }
    }
}

#[async_trait]
impl LeaseStore for Bounded {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        let key = lease.key.clone();
        let call = self.inner.create(lease, deadline);
        self.bound("create", key.as_str(), deadline, call).await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        let call = self.inner.get(key, deadline);
        self.bound("get", key.as_str(), deadline, call).await
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        let call = self.inner.list_page(from, deadline);
        self.bound("scan", "", deadline, call).await
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
        let call = self.inner.renew(key, nonce, owner, tenure, load, deadline);
        self.bound("renew", key.as_str(), deadline, call).await
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
        let call = self
            .inner
            .take(key, nonce, taker, incarnation, observed_counter, deadline);
        self.bound("take", key.as_str(), deadline, call).await
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
        let call = self
            .inner
            .request_handoff(key, nonce, owner, tenure, requester, deadline);
        self.bound("request_handoff", key.as_str(), deadline, call)
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
        let call = self
            .inner
            .complete_handoff(key, nonce, owner, tenure, to, deadline);
        self.bound("complete_handoff", key.as_str(), deadline, call)
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
        let call = self.inner.release(key, nonce, owner, tenure, deadline);
        self.bound("release", key.as_str(), deadline, call).await
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
        let call = self
            .inner
            .checkpoint(key, nonce, owner, tenure, seq, checkpoint, deadline);
        self.bound("checkpoint", key.as_str(), deadline, call).await
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let call = self
            .inner
            .delete(key, nonce, observed_counter, observed_tenure, deadline);
        self.bound("delete", key.as_str(), deadline, call).await
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let call = self
            .inner
            .heartbeat(worker, incarnation, report, capacity, deadline);
        self.bound("heartbeat", worker.as_str(), deadline, call)
            .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let call = self
            .inner
            .remove_member(worker, observed_heartbeat, deadline);
        self.bound("remove_member", worker.as_str(), deadline, call)
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
        let call = self.inner.give(key, nonce, to, observed_counter, deadline);
        self.bound("give", key.as_str(), deadline, call).await
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        let call = self.inner.get_member(worker, consistent, deadline);
        self.bound("get_member", worker.as_str(), deadline, call)
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
        let call = self
            .inner
            .open_session(worker, incarnation, capacity, replacing, deadline);
        self.bound("open_session", worker.as_str(), deadline, call)
            .await
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
        let call = self
            .inner
            .beat(worker, incarnation, capacity, report, seen, deadline);
        self.bound("beat", worker.as_str(), deadline, call).await
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let call = self
            .inner
            .end_session(worker, incarnation, observed_heartbeat, deadline);
        self.bound("end_session", worker.as_str(), deadline, call)
            .await
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let call = self.inner.notify(worker, incarnation, notices, deadline);
        self.bound("notify", worker.as_str(), deadline, call).await
    }

    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        let call = self.inner.list_page_eventually(from, deadline);
        self.bound("scan", "", deadline, call).await
    }

    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Member>> {
        let call = self.inner.list_members(deadline);
        self.bound("scan", "", deadline, call).await
    }

    async fn snapshot_eventually(&self, deadline: Instant) -> StoreResult<Snapshot> {
        let call = self.inner.snapshot_eventually(deadline);
        self.bound("scan", "", deadline, call).await
    }

    async fn snapshot(&self, deadline: Instant) -> StoreResult<Snapshot> {
        // The inner store's own listing (it may read the table its own way), as one bounded
        // call.
        let call = self.inner.snapshot(deadline);
        self.bound("scan", "", deadline, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::store::fault::FaultyStore;
    use crate::store::memory::InMemoryStore;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_call_the_store_never_answers_ends_at_its_deadline_as_ambiguous() {
        let (store, faults) = FaultyStore::new(InMemoryStore::new());
        let bounded = Bounded::new(Arc::new(store), Arc::new(TokioClock));
        faults.set_hang(true);
        let start = Instant::now();
        let deadline = start + Duration::from_secs(5);
        let key = LeaseKey::new("shard-1").unwrap();
        let me = WorkerId::new("me").unwrap();
        let err = bounded
            .renew(&key, 1, &me, 1, None, deadline)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Transient { operation: "renew", key, ambiguous: true, .. } if key == "shard-1"),
            "{err:?}"
        );
        assert_eq!(Instant::now(), deadline);
        let err = bounded
            .snapshot(Instant::now() + Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(err.is_ambiguous(), "{err:?}");
        assert_eq!(faults.hung(), 2);
        // Answered calls pass through untouched.
        faults.set_hang(false);
        let created = bounded
            .create(NewLease::new(key), Instant::now() + Duration::from_secs(1))
            .await
            .unwrap();
        assert!(created.is_done());
    }
}
