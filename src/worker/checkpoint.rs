//! The checkpoint write behind every grant's [`Checkpointer`](super::Checkpointer): fenced by
//! the grant's tenure and by this worker's local validity of the lease.

use std::sync::Arc;

use async_trait::async_trait;

use super::finish::spawn_finish;
use super::grant::{CheckpointError, Ledger};
use super::state::{CheckpointSlot, Holder};
use crate::lease::LeaseKey;
use crate::store::Outcome;

#[async_trait]
impl Ledger for Arc<Holder> {
    async fn store(&self, key: &LeaseKey, tenure: u64, value: &str) -> Result<(), CheckpointError> {
        let not_held = || CheckpointError::NotHeld {
            key: key.clone(),
            worker: self.id.clone(),
            tenure,
        };
        let (nonce, valid_until, seq) = match self.checkpoint_slot(key, tenure) {
            CheckpointSlot::Open {
                nonce,
                valid_until,
                seq,
            } => (nonce, valid_until, seq),
            CheckpointSlot::Ended => return Err(CheckpointError::ShardEnded { key: key.clone() }),
            CheckpointSlot::NotHeld => return Err(not_held()),
        };
        let deadline = valid_until.min(self.now() + self.config.store_timeout);
        let outcome = self
            .store
            .checkpoint(key, nonce, &self.id, tenure, seq, value, deadline)
            .await
            .map_err(|source| CheckpointError::Store {
                key: key.clone(),
                source,
            })?;
        match outcome {
            Outcome::Done(_) => {
                tracing::debug!(lease_key = %key, tenure, seq, "checkpointed");
                Ok(())
            }
            // Still held in this tenure: a later checkpoint of this grant was stored first (the
            // application made two at once, or this one's first attempt was lost and retried).
            Outcome::LostRace {
                current: Some(current),
            } if current.nonce == nonce
                && current.is_owned_by(&self.id)
                && current.tenure == tenure
                && current
                    .checkpoint_write
                    .is_some_and(|w| !w.accepts(tenure, seq)) =>
            {
                tracing::debug!(lease_key = %key, tenure, seq, "checkpoint superseded by a later one");
                Err(CheckpointError::Superseded {
                    key: key.clone(),
                    value: value.to_owned(),
                })
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

    fn halt(&self, key: &LeaseKey, tenure: u64) {
        self.note_halted(key, tenure);
    }

    fn shard_ended(&self, key: &LeaseKey, tenure: u64) {
        if let Some(finish) = self.mark_ended(key, tenure) {
            spawn_finish(self, key.clone(), finish);
        }
    }
}
