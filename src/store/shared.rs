//! `Arc<S>` is a store too, so one table can be shared by many workers and wrappers.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{LeaseStore, Outcome, Page, PageToken, StoreResult};
use crate::lease::{
    Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, Snapshot, WorkerId,
};

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        (**self).create(lease, deadline).await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        (**self).get(key, deadline).await
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        (**self).list_page(from, deadline).await
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
        (**self)
            .renew(key, nonce, owner, tenure, load, deadline)
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
        (**self)
            .take(key, nonce, taker, incarnation, observed_counter, deadline)
            .await
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
        (**self)
            .request_handoff(key, nonce, owner, tenure, requester, deadline)
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
        (**self)
            .complete_handoff(key, nonce, owner, tenure, to, deadline)
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
        (**self).release(key, nonce, owner, tenure, deadline).await
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
        (**self)
            .checkpoint(key, nonce, owner, tenure, seq, checkpoint, deadline)
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
        (**self)
            .delete(key, nonce, observed_counter, observed_tenure, deadline)
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
        (**self)
            .heartbeat(worker, incarnation, report, capacity, deadline)
            .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        (**self)
            .remove_member(worker, observed_heartbeat, deadline)
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
        (**self)
            .give(key, nonce, to, observed_counter, deadline)
            .await
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        (**self).get_member(worker, consistent, deadline).await
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        (**self)
            .open_session(worker, incarnation, capacity, replacing, deadline)
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
        (**self)
            .beat(worker, incarnation, capacity, report, seen, deadline)
            .await
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        (**self)
            .end_session(worker, incarnation, observed_heartbeat, deadline)
            .await
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        (**self)
            .notify(worker, incarnation, notices, deadline)
            .await
    }

    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        (**self).list_page_eventually(from, deadline).await
    }

    async fn snapshot_eventually(&self, deadline: Instant) -> StoreResult<Snapshot> {
        (**self).snapshot_eventually(deadline).await
    }

    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Member>> {
        (**self).list_members(deadline).await
    }
}
