//! The worker's view of its store: every call ends by its deadline, whatever the store does.
//!
//! A [`LeaseStore`] promises to stop retrying at the deadline it is given, but a request that
//! nobody answers (a half-open connection, a store of the application's own that forgets a
//! timeout) may still never return. The worker does not depend on that promise: it abandons
//! every call at its deadline, on the worker's clock, and treats it as the store would treat
//! an unanswered request: transient and ambiguous (it may have been applied).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::clock::{timeout_at, Clock};
use crate::store::layer::{Request, Response, StoreLayer};
use crate::store::{LeaseStore, StoreError, StoreResult};

/// Wraps a store so that no call outlives its deadline.
pub(crate) struct Bounded {
    inner: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
}

impl Bounded {
    pub fn new(inner: Arc<dyn LeaseStore>, clock: Arc<dyn Clock>) -> Self {
        Self { inner, clock }
    }
}

#[async_trait]
impl StoreLayer for Bounded {
    /// The inner store's call (its own listing, for a snapshot: it may read the table its own
    /// way), abandoned at `deadline` as unanswered.
    async fn call(&self, request: &Request, deadline: Instant) -> StoreResult<Response> {
        let start = self.clock.now();
        let call = request.send_to(&*self.inner, deadline);
        match timeout_at(&*self.clock, deadline, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::unanswered(
                request.operation(),
                request.key(),
                deadline.saturating_duration_since(start),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::lease::{LeaseKey, NewLease, WorkerId};
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
