//! The checkpoint write behind every grant's [`Checkpointer`](super::Checkpointer): fenced by
//! the grant's tenure and by this worker's local validity of the lease.

use std::sync::Arc;

use async_trait::async_trait;

use super::finish::spawn_finish;
use super::grant::{CheckpointError, Ledger};
use super::state::Shared;
use crate::lease::LeaseKey;
use crate::store::Outcome;

#[async_trait]
impl Ledger for Arc<Shared> {
    async fn store(&self, key: &LeaseKey, tenure: u64, value: &str) -> Result<(), CheckpointError> {
        let not_held = || CheckpointError::NotHeld {
            key: key.clone(),
            worker: self.id.clone(),
            tenure,
        };
        let Some((valid_until, ended)) = self.valid_until(key, tenure) else {
            return Err(not_held());
        };
        if ended {
            return Err(CheckpointError::ShardEnded { key: key.clone() });
        }
        let deadline = valid_until.min(self.now() + self.config.store_timeout);
        let outcome = self
            .store
            .checkpoint(key, &self.id, tenure, value, deadline)
            .await
            .map_err(|source| CheckpointError::Store {
                key: key.clone(),
                source,
            })?;
        match outcome {
            Outcome::Done(_) => {
                tracing::debug!(lease_key = %key, tenure, "checkpointed");
                Ok(())
            }
            Outcome::LostRace { .. } => {
                // The lease moved on under this grant (a take, a hand edit): it is lost here,
                // whatever else told this worker so far.
                self.lose(
                    key,
                    Some(tenure),
                    "a checkpoint found the lease no longer held in this tenure",
                );
                Err(not_held())
            }
        }
    }

    fn progress(&self, key: &LeaseKey, tenure: u64) {
        self.note_progress(key, tenure);
    }

    fn load(&self, key: &LeaseKey, tenure: u64, value: f64) {
        self.note_load(key, tenure, value);
    }

    fn shard_ended(&self, key: &LeaseKey, tenure: u64) {
        if let Some(finish) = self.mark_ended(key, tenure) {
            spawn_finish(self, key.clone(), finish);
        }
    }
}
