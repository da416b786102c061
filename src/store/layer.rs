//! A store call as data, for the stores that wrap another one.
//!
//! A wrapper of a store (one that bounds each call by its deadline, injects faults, simulates
//! a network, or adds metrics of its own) does the same thing around every call. Written as a
//! [`LeaseStore`] it would spell out every method again only to forward it; written as a
//! [`StoreLayer`] it implements one method, [`call`](StoreLayer::call), that sees each call as a
//! [`Request`] and forwards it with [`Request::send_to`], and is a [`LeaseStore`] by the blanket
//! implementation here. `Arc<S>` is one: one table can be shared by many workers and wrappers.
//!
//! ```
//! use async_trait::async_trait;
//! use shardlease::store::layer::{Request, Response, StoreLayer};
//! use shardlease::store::{LeaseStore, StoreResult};
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tokio::time::Instant;
//!
//! /// Counts the calls made to a store.
//! struct Counted<S> {
//!     inner: S,
//!     calls: AtomicU64,
//! }
//!
//! #[async_trait]
//! impl<S: LeaseStore> StoreLayer for Counted<S> {
//!     async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         request.send_to(&self.inner, deadline).await
//!     }
//! }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{LeaseStore, Outcome, Page, PageToken, StoreError, StoreResult};
use crate::lease::{
    Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, Snapshot, WorkerId,
};

/// One call of a [`LeaseStore`], with what it was given (but its deadline): the method of
/// the same name.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Request {
    Create {
        lease: NewLease,
    },
    Get {
        key: LeaseKey,
    },
    /// [`list_page`](LeaseStore::list_page), or with `eventually`
    /// [`list_page_eventually`](LeaseStore::list_page_eventually).
    ListPage {
        from: Option<PageToken>,
        eventually: bool,
    },
    Renew {
        key: LeaseKey,
        nonce: u64,
        owner: WorkerId,
        tenure: u64,
        load: Option<f64>,
    },
    Take {
        key: LeaseKey,
        nonce: u64,
        taker: WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
    },
    RequestHandoff {
        key: LeaseKey,
        nonce: u64,
        owner: WorkerId,
        tenure: u64,
        requester: WorkerId,
    },
    CompleteHandoff {
        key: LeaseKey,
        nonce: u64,
        owner: WorkerId,
        tenure: u64,
        to: WorkerId,
    },
    Release {
        key: LeaseKey,
        nonce: u64,
        owner: WorkerId,
        tenure: u64,
    },
    Checkpoint {
        key: LeaseKey,
        nonce: u64,
        owner: WorkerId,
        tenure: u64,
        seq: u64,
        checkpoint: String,
    },
    Delete {
        key: LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
    },
    Heartbeat {
        worker: WorkerId,
        incarnation: Incarnation,
        report: Option<LoadReport>,
        capacity: Option<u32>,
    },
    RemoveMember {
        worker: WorkerId,
        observed_heartbeat: Option<u64>,
    },
    Give {
        key: LeaseKey,
        nonce: u64,
        to: WorkerId,
        observed_counter: u64,
    },
    GetMember {
        worker: WorkerId,
        consistent: bool,
    },
    OpenSession {
        worker: WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<Member>,
    },
    Beat {
        worker: WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        report: Option<LoadReport>,
        seen: Vec<String>,
    },
    EndSession {
        worker: WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
    },
    Notify {
        worker: WorkerId,
        incarnation: Incarnation,
        notices: Vec<String>,
    },
    ListMembers,
    /// [`snapshot`](LeaseStore::snapshot), or with `eventually`
    /// [`snapshot_eventually`](LeaseStore::snapshot_eventually): the wrapped store's own
    /// listing, as one call.
    Snapshot {
        eventually: bool,
    },
}

/// The answer to a [`Request`], by the kind of value its method returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Response {
    /// A write to a lease.
    Lease(Outcome<Lease>),
    /// [`get`](LeaseStore::get).
    Found(Option<Lease>),
    /// A page of a listing.
    Page(Page),
    /// A write to a membership record.
    Member(Outcome<Member>),
    /// [`get_member`](LeaseStore::get_member).
    FoundMember(Option<Member>),
    /// [`list_members`](LeaseStore::list_members).
    Members(Vec<Arc<Member>>),
    /// A whole listing.
    Snapshot(Snapshot),
}

impl Request {
    /// The name of the call in errors and metrics: the method's, and `scan` for the listings.
    pub fn operation(&self) -> &'static str {
        match self {
            Request::Create { .. } => "create",
            Request::Get { .. } => "get",
            Request::ListPage { .. } | Request::ListMembers | Request::Snapshot { .. } => "scan",
            Request::Renew { .. } => "renew",
            Request::Take { .. } => "take",
            Request::RequestHandoff { .. } => "request_handoff",
            Request::CompleteHandoff { .. } => "complete_handoff",
            Request::Release { .. } => "release",
            Request::Checkpoint { .. } => "checkpoint",
            Request::Delete { .. } => "delete",
            Request::Heartbeat { .. } => "heartbeat",
            Request::RemoveMember { .. } => "remove_member",
            Request::Give { .. } => "give",
            Request::GetMember { .. } => "get_member",
            Request::OpenSession { .. } => "open_session",
            Request::Beat { .. } => "beat",
            Request::EndSession { .. } => "end_session",
            Request::Notify { .. } => "notify",
        }
    }

    /// The item the call names: a lease key, a worker id, or nothing for a listing.
    pub fn key(&self) -> &str {
        match self {
            Request::Create { lease } => lease.key.as_str(),
            Request::Get { key }
            | Request::Renew { key, .. }
            | Request::Take { key, .. }
            | Request::RequestHandoff { key, .. }
            | Request::CompleteHandoff { key, .. }
            | Request::Release { key, .. }
            | Request::Checkpoint { key, .. }
            | Request::Delete { key, .. }
            | Request::Give { key, .. } => key.as_str(),
            Request::Heartbeat { worker, .. }
            | Request::RemoveMember { worker, .. }
            | Request::GetMember { worker, .. }
            | Request::OpenSession { worker, .. }
            | Request::Beat { worker, .. }
            | Request::EndSession { worker, .. }
            | Request::Notify { worker, .. } => worker.as_str(),
            Request::ListPage { .. } | Request::ListMembers | Request::Snapshot { .. } => "",
        }
    }

    /// Makes the call on `store`, by `deadline` (the request is kept: a layer still has it to
    /// name in an error).
    pub async fn send_to<S: LeaseStore + ?Sized>(
        &self,
        store: &S,
        deadline: Instant,
    ) -> StoreResult<Response> {
        Ok(match self {
            Request::Create { lease } => {
                Response::Lease(store.create(lease.clone(), deadline).await?)
            }
            Request::Get { key } => Response::Found(store.get(key, deadline).await?),
            Request::ListPage { from, eventually } => Response::Page(if *eventually {
                store.list_page_eventually(from.clone(), deadline).await?
            } else {
                store.list_page(from.clone(), deadline).await?
            }),
            Request::Renew {
                key,
                nonce,
                owner,
                tenure,
                load,
            } => {
                let renewed = store.renew(key, *nonce, owner, *tenure, *load, deadline);
                Response::Lease(renewed.await?)
            }
            Request::Take {
                key,
                nonce,
                taker,
                incarnation,
                observed_counter,
            } => {
                let taken = store.take(
                    key,
                    *nonce,
                    taker,
                    *incarnation,
                    *observed_counter,
                    deadline,
                );
                Response::Lease(taken.await?)
            }
            Request::RequestHandoff {
                key,
                nonce,
                owner,
                tenure,
                requester,
            } => {
                let asked = store.request_handoff(key, *nonce, owner, *tenure, requester, deadline);
                Response::Lease(asked.await?)
            }
            Request::CompleteHandoff {
                key,
                nonce,
                owner,
                tenure,
                to,
            } => {
                let handed = store.complete_handoff(key, *nonce, owner, *tenure, to, deadline);
                Response::Lease(handed.await?)
            }
            Request::Release {
                key,
                nonce,
                owner,
                tenure,
            } => Response::Lease(store.release(key, *nonce, owner, *tenure, deadline).await?),
            Request::Checkpoint {
                key,
                nonce,
                owner,
                tenure,
                seq,
                checkpoint,
            } => {
                let written =
                    store.checkpoint(key, *nonce, owner, *tenure, *seq, checkpoint, deadline);
                Response::Lease(written.await?)
            }
            Request::Delete {
                key,
                nonce,
                observed_counter,
                observed_tenure,
            } => {
                let deleted =
                    store.delete(key, *nonce, *observed_counter, *observed_tenure, deadline);
                Response::Lease(deleted.await?)
            }
            Request::Heartbeat {
                worker,
                incarnation,
                report,
                capacity,
            } => {
                let beat =
                    store.heartbeat(worker, *incarnation, report.as_ref(), *capacity, deadline);
                Response::Member(beat.await?)
            }
            Request::RemoveMember {
                worker,
                observed_heartbeat,
            } => {
                let removed = store.remove_member(worker, *observed_heartbeat, deadline);
                Response::Member(removed.await?)
            }
            Request::Give {
                key,
                nonce,
                to,
                observed_counter,
            } => Response::Lease(
                store
                    .give(key, *nonce, to, *observed_counter, deadline)
                    .await?,
            ),
            Request::GetMember { worker, consistent } => {
                Response::FoundMember(store.get_member(worker, *consistent, deadline).await?)
            }
            Request::OpenSession {
                worker,
                incarnation,
                capacity,
                replacing,
            } => {
                let opened = store.open_session(
                    worker,
                    *incarnation,
                    *capacity,
                    replacing.as_ref(),
                    deadline,
                );
                Response::Member(opened.await?)
            }
            Request::Beat {
                worker,
                incarnation,
                capacity,
                report,
                seen,
            } => {
                let beat = store.beat(
                    worker,
                    *incarnation,
                    *capacity,
                    report.as_ref(),
                    seen,
                    deadline,
                );
                Response::Member(beat.await?)
            }
            Request::EndSession {
                worker,
                incarnation,
                observed_heartbeat,
            } => {
                let ended = store.end_session(worker, *incarnation, *observed_heartbeat, deadline);
                Response::Member(ended.await?)
            }
            Request::Notify {
                worker,
                incarnation,
                notices,
            } => Response::Member(
                store
                    .notify(worker, *incarnation, notices, deadline)
                    .await?,
            ),
            Request::ListMembers => Response::Members(store.list_members(deadline).await?),
            Request::Snapshot { eventually } => Response::Snapshot(if *eventually {
                store.snapshot_eventually(deadline).await?
            } else {
                store.snapshot(deadline).await?
            }),
        })
    }
}

/// A store that wraps another and does the same around every call: it sees each call as a
/// [`Request`] and answers with the [`Response`] of the store it wraps (forwarded with
/// [`Request::send_to`]), or an error of its own. Every `StoreLayer` is a [`LeaseStore`].
#[async_trait]
pub trait StoreLayer: Send + Sync + 'static {
    /// Makes `request` by `deadline`. The response must be the kind its method returns (the
    /// one [`Request::send_to`] gives): another kind is answered to the caller as a
    /// [`StoreError::Fatal`].
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response>;
}

#[async_trait]
impl<S: LeaseStore + ?Sized> StoreLayer for Arc<S> {
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        request.send_to(&**self, deadline).await
    }
}

/// The error for a layer that answered `request` with the wrong kind of response.
fn mismatched(request: &Request, response: &Response) -> StoreError {
    StoreError::Fatal {
        operation: request.operation(),
        key: request.key().to_owned(),
        source: format!("a store layer answered with another kind of response: {response:?}")
            .into(),
    }
}

/// Calls `$layer` with `$request` and unwraps the `$kind` response.
macro_rules! answer {
    ($layer:expr, $request:expr, $deadline:expr, $kind:ident) => {{
        let request = $request;
        match $layer.call(&request, $deadline).await? {
            Response::$kind(value) => Ok(value),
            other => Err(mismatched(&request, &other)),
        }
    }};
}

#[async_trait]
impl<L: StoreLayer> LeaseStore for L {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        answer!(self, Request::Create { lease }, deadline, Lease)
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        answer!(self, Request::Get { key: key.clone() }, deadline, Found)
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        let eventually = false;
        answer!(self, Request::ListPage { from, eventually }, deadline, Page)
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
        let (key, owner) = (key.clone(), owner.clone());
        let request = Request::Renew {
            key,
            nonce,
            owner,
            tenure,
            load,
        };
        answer!(self, request, deadline, Lease)
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
        let (key, taker) = (key.clone(), taker.clone());
        let request = Request::Take {
            key,
            nonce,
            taker,
            incarnation,
            observed_counter,
        };
        answer!(self, request, deadline, Lease)
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
        let (key, owner, requester) = (key.clone(), owner.clone(), requester.clone());
        let request = Request::RequestHandoff {
            key,
            nonce,
            owner,
            tenure,
            requester,
        };
        answer!(self, request, deadline, Lease)
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
        let (key, owner, to) = (key.clone(), owner.clone(), to.clone());
        let request = Request::CompleteHandoff {
            key,
            nonce,
            owner,
            tenure,
            to,
        };
        answer!(self, request, deadline, Lease)
    }

    async fn release(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let (key, owner) = (key.clone(), owner.clone());
        let request = Request::Release {
            key,
            nonce,
            owner,
            tenure,
        };
        answer!(self, request, deadline, Lease)
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
        let (key, owner, checkpoint) = (key.clone(), owner.clone(), checkpoint.to_owned());
        let request = Request::Checkpoint {
            key,
            nonce,
            owner,
            tenure,
            seq,
            checkpoint,
        };
        answer!(self, request, deadline, Lease)
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let request = Request::Delete {
            key: key.clone(),
            nonce,
            observed_counter,
            observed_tenure,
        };
        answer!(self, request, deadline, Lease)
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let request = Request::Heartbeat {
            worker: worker.clone(),
            incarnation,
            report: report.cloned(),
            capacity,
        };
        answer!(self, request, deadline, Member)
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let request = Request::RemoveMember {
            worker: worker.clone(),
            observed_heartbeat,
        };
        answer!(self, request, deadline, Member)
    }

    async fn give(
        &self,
        key: &LeaseKey,
        nonce: u64,
        to: &WorkerId,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let request = Request::Give {
            key: key.clone(),
            nonce,
            to: to.clone(),
            observed_counter,
        };
        answer!(self, request, deadline, Lease)
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        let worker = worker.clone();
        answer!(
            self,
            Request::GetMember { worker, consistent },
            deadline,
            FoundMember
        )
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let request = Request::OpenSession {
            worker: worker.clone(),
            incarnation,
            capacity,
            replacing: replacing.cloned(),
        };
        answer!(self, request, deadline, Member)
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
        let request = Request::Beat {
            worker: worker.clone(),
            incarnation,
            capacity,
            report: report.cloned(),
            seen: seen.to_vec(),
        };
        answer!(self, request, deadline, Member)
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let request = Request::EndSession {
            worker: worker.clone(),
            incarnation,
            observed_heartbeat,
        };
        answer!(self, request, deadline, Member)
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let request = Request::Notify {
            worker: worker.clone(),
            incarnation,
            notices: notices.to_vec(),
        };
        answer!(self, request, deadline, Member)
    }

    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        let eventually = true;
        answer!(self, Request::ListPage { from, eventually }, deadline, Page)
    }

    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Arc<Member>>> {
        answer!(self, Request::ListMembers, deadline, Members)
    }

    async fn snapshot_eventually(&self, deadline: Instant) -> StoreResult<Snapshot> {
        let eventually = true;
        answer!(self, Request::Snapshot { eventually }, deadline, Snapshot)
    }

    async fn snapshot(&self, deadline: Instant) -> StoreResult<Snapshot> {
        let eventually = false;
        answer!(self, Request::Snapshot { eventually }, deadline, Snapshot)
    }
}
