//! What an operator does to a running fleet: move a lease, drain a worker, write or reset a
//! checkpoint, delete a lease. The `shardlease` command line (the workspace package
//! `shardlease-cli`, in `cli/`) is built on it.
//!
//! Every change goes through the conditional writes the workers make, so that nothing is
//! processed twice:
//!
//! - **Moving a lease off its owner** asks for a handoff to [`OPERATOR`](crate::lease::OPERATOR), and tells the owner's
//!   session: the owner's application checkpoints and stops, the owner hands the lease over,
//!   and the operator then gives it back to the fleet: to the live worker holding the fewest
//!   leases, which is told at once (with no worker running, it is released). Until the owner
//!   has let go, the table names it.
//! - **Draining a worker** leaves a notice in its membership record that asks that process to
//!   leave the fleet gracefully, as its shutdown signal would: it stops taking leases, its
//!   applications finish and checkpoint, its leases go to the others, and its
//!   [`Worker::stopped`](crate::Worker::stopped) resolves.
//! - **A checkpoint is written** only while nobody processes the lease: the operator takes an
//!   unowned lease (conditioned on its counter), or first moves a held one off its owner as
//!   above (`force`), writes, and gives the lease back.
//!
//! - **A reset** (a checkpoint of `None`) deletes the lease and creates it again with no
//!   checkpoint. **A delete** removes the lease; while the source lists its shard, the
//!   discoverer creates it again from the last checkpoint a worker read (see
//!   [`Admin::delete`]).
//!
//! Each step is one conditional write; a step whose condition fails (somebody else moved the
//! lease meanwhile) ends with [`AdminError::Changed`] and nothing half-done that the fleet
//! would not recover from: a lease left owned by the operator (a tool killed between two
//! steps) is never renewed, so the workers take it once it expires, a lease duration later.

use std::time::Duration;

use tokio::time::Instant;

/// How many times a reset deletes a lease that a discoverer created again from an old
/// checkpoint meanwhile, before it gives up with [`AdminError::Recreated`].
const START_OVER_ATTEMPTS: usize = 3;

use crate::lease::{Incarnation, Lease, LeaseKey, Member, NewLease, WorkerId};
use crate::lifecycle::LeaseStatus;
use crate::notice::{drain_notice, with_nonce};
use crate::store::{LeaseStore, Outcome, StoreError};

/// Why an operator's request was refused or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No lease has this key.
    #[error("there is no lease {0} in the table")]
    NoSuchLease(LeaseKey),
    /// No membership record names this worker.
    #[error(
        "there is no worker {0} in the table (no membership record: it is not running, or left)"
    )]
    NoSuchWorker(WorkerId),
    /// The worker's record was written by a version before incarnations; it cannot be told.
    #[error(
        "worker {0}'s record has no incarnation (an older version of shardlease wrote it): \
         stop that process instead"
    )]
    OldWorker(WorkerId),
    /// The lease is held by a worker and `force` was not given.
    #[error(
        "lease {key} is held by worker {owner}: stop that worker first, or force it (the owner \
         is asked to hand the lease over gracefully first, so nothing is processed twice)"
    )]
    Held {
        /// The lease.
        key: LeaseKey,
        /// Its owner.
        owner: WorkerId,
    },
    /// The lease is not held by any worker, so there is nothing to move.
    #[error("lease {0} is not held by any worker: the fleet takes it at its next round")]
    NotHeld(LeaseKey),
    /// The lease changed between the read and the conditional write (somebody took, moved or
    /// deleted it meanwhile). Nothing was written; look again and retry.
    #[error("lease {0} changed while this request was in progress; nothing was written, look again and retry")]
    Changed(LeaseKey),
    /// Another process of the worker's id wrote its record meanwhile. Nothing was written;
    /// look again and retry.
    #[error("worker {0}'s record changed (another process of the id) while this request was in progress; nothing was written, look again and retry")]
    WorkerChanged(WorkerId),
    /// A reset deleted the lease, and a worker created it again from an older checkpoint (the
    /// last one a worker read; `None`: none) before it could be created without one; or the
    /// fleet took it meanwhile. Something was written: look at the lease and run the reset
    /// again.
    #[error("lease {key} was deleted, but the fleet created it again (checkpoint {checkpoint:?}) before the reset could create it without one; look at it and run the reset again")]
    Recreated {
        /// The lease.
        key: LeaseKey,
        /// The checkpoint it was created again with.
        checkpoint: Option<String>,
    },
    /// A checkpoint value the library reserves for itself.
    #[error("checkpoint {0:?} starts with the reserved prefix \"shardlease#\"")]
    ReservedCheckpoint(String),
    /// The wait ran out before the request was done.
    #[error("{what}: not done after {waited:?}")]
    TimedOut {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a lease the operator held went.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GivenBack {
    /// Given to this worker, which was told.
    To(WorkerId),
    /// Left unowned, no worker running: the first worker to start takes it.
    Unowned,
}

/// How far a drain is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainProgress {
    /// The drained process's record is still in the table.
    pub member_present: bool,
    /// The leases the table still names the worker as owner of.
    pub leases_held: Vec<LeaseKey>,
}

impl DrainProgress {
    /// The process has left the fleet and holds no lease.
    pub fn done(&self) -> bool {
        !self.member_present && self.leases_held.is_empty()
    }
}

/// An operator's handle on one lease table.
#[derive(Debug, Clone)]
pub struct Admin<S> {
    store: S,
    request_timeout: Duration,
    poll_interval: Duration,
}

impl<S: LeaseStore> Admin<S> {
    /// An operator's handle on `store`: 10 s per request, looking again every 500 ms while it
    /// waits.
    pub fn new(store: S) -> Self {
        Self {
            store,
            request_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(500),
        }
    }

    /// How often a wait reads the table again.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.request_timeout
    }

    /// The whole table, strongly consistent.
    pub async fn snapshot(&self) -> Result<crate::lease::Snapshot, AdminError> {
        Ok(self.store.snapshot(self.deadline()).await?)
    }

    async fn lease(&self, key: &LeaseKey) -> Result<Lease, AdminError> {
        self.store
            .get(key, self.deadline())
            .await?
            .ok_or_else(|| AdminError::NoSuchLease(key.clone()))
    }

    /// Asks the owner of `key` to hand it over to the operator, and tells the owner's session.
    /// Returns the lease as it was asked (its owner and tenure).
    pub async fn ask_handoff(&self, key: &LeaseKey) -> Result<Lease, AdminError> {
        let lease = self.lease(key).await?;
        if lease.owner.as_ref().is_none_or(WorkerId::is_operator) {
            return Err(AdminError::NotHeld(key.clone()));
        }
        match self.ask(&lease).await? {
            Outcome::Done(asked) => Ok(asked),
            // Another handoff is pending: the owner finishes that one first.
            Outcome::LostRace { .. } => Err(AdminError::Changed(key.clone())),
        }
    }

    /// Asks `lease`'s owner, in the tenure read, for a handoff to the operator; tells its
    /// session when it has one.
    async fn ask(&self, lease: &Lease) -> Result<Outcome<Lease>, AdminError> {
        let Some(owner) = &lease.owner else {
            return Ok(Outcome::LostRace {
                current: Some(lease.clone()),
            });
        };
        let operator = WorkerId::operator();
        let outcome = self
            .store
            .request_handoff(
                &lease.key,
                lease.nonce,
                owner,
                lease.tenure,
                &operator,
                self.deadline(),
            )
            .await?;
        if !outcome.is_done() {
            return Ok(outcome);
        }
        // A session hears of it in its next beat (at once with the notice); the lease
        // protocol's owner sees the request at its next renewal.
        if let Some(member) = self.store.get_member(owner, true, self.deadline()).await? {
            if let (true, Some(incarnation)) = (member.session, member.incarnation) {
                let notice = with_nonce(lease.key.as_str());
                // Refused, the session is over: the fleet fences it and places the lease.
                let _ = self
                    .store
                    .notify(owner, incarnation, &[notice], self.deadline())
                    .await?;
            }
        }
        Ok(outcome)
    }

    /// Waits until the handoff asked by [`ask_handoff`](Self::ask_handoff) is done: the lease
    /// is the operator's, or nobody's (its owner released it, or left). Calling `progress` with
    /// the lease at every look that finds it still held. A lease that moved meanwhile (taken
    /// by the worker it had been given to, which clears requests, or moved for balance) is
    /// asked of its new holder.
    pub async fn wait_handed_over(
        &self,
        asked: &Lease,
        timeout: Duration,
        mut progress: impl FnMut(&Lease),
    ) -> Result<Lease, AdminError> {
        let start = Instant::now();
        let operator = WorkerId::operator();
        loop {
            let lease = self.lease(&asked.key).await?;
            match &lease.owner {
                None => return Ok(lease),
                Some(owner) if owner.is_operator() => return Ok(lease),
                Some(_) if lease.handoff_to.as_ref() != Some(&operator) => {
                    // Refused: it moved again between the read and the request; look again.
                    let _ = self.ask(&lease).await?;
                }
                Some(_) => {}
            }
            progress(&lease);
            if start.elapsed() >= timeout {
                return Err(AdminError::TimedOut {
                    what: format!(
                        "the handoff of lease {} (the owner's application has not finished; the \
                         request stays, and the owner hands the lease over once it does)",
                        asked.key
                    ),
                    waited: timeout,
                });
            }
            tokio::time::sleep(self.poll_interval).await;
        }
    }

    /// Makes `key` the operator's: takes it, conditioned on its counter, when nobody holds it;
    /// with `force`, first has its owner hand it over (waiting at most `timeout`); otherwise
    /// refuses a lease a worker holds.
    async fn hold(
        &self,
        key: &LeaseKey,
        force: bool,
        timeout: Duration,
        progress: impl FnMut(&Lease),
    ) -> Result<Lease, AdminError> {
        let mut lease = self.lease(key).await?;
        if let Some(owner) = lease.owner.clone().filter(|o| !o.is_operator()) {
            if !force {
                return Err(AdminError::Held {
                    key: key.clone(),
                    owner,
                });
            }
            let asked = self.ask_handoff(key).await?;
            lease = self.wait_handed_over(&asked, timeout, progress).await?;
        }
        // Unowned, handed over, or left by an operator's tool that stopped halfway: a take by
        // counter makes it this call's alone.
        let operator = WorkerId::operator();
        match self
            .store
            .take(
                key,
                lease.nonce,
                &operator,
                Incarnation::random(),
                lease.counter,
                self.deadline(),
            )
            .await?
        {
            Outcome::Done(taken) => Ok(taken),
            Outcome::LostRace { .. } => Err(AdminError::Changed(key.clone())),
        }
    }

    /// Gives a lease the operator holds (or an unowned one) back to the fleet: to the live
    /// worker holding the fewest leases, told at once; with no worker running, released (or
    /// left unowned) for the first one to start.
    pub async fn give_back(&self, lease: &Lease) -> Result<GivenBack, AdminError> {
        let snapshot = self.store.snapshot(self.deadline()).await?;
        let receiver = receiver(&snapshot);
        let operator = WorkerId::operator();
        if let Some(receiver) = receiver {
            match self
                .store
                .give(
                    &lease.key,
                    lease.nonce,
                    &receiver.worker,
                    lease.counter,
                    self.deadline(),
                )
                .await?
            {
                Outcome::Done(_) => {}
                Outcome::LostRace { .. } => return Err(AdminError::Changed(lease.key.clone())),
            }
            if let Some(incarnation) = receiver.incarnation {
                let notice = with_nonce(lease.key.as_str());
                // A receiver that did not hear is told again by the worker doing the chores.
                let _ = self
                    .store
                    .notify(&receiver.worker, incarnation, &[notice], self.deadline())
                    .await?;
            }
            return Ok(GivenBack::To(receiver.worker.clone()));
        }
        if lease.owner.as_ref() == Some(&operator) {
            match self
                .store
                .release(
                    &lease.key,
                    lease.nonce,
                    &operator,
                    lease.tenure,
                    self.deadline(),
                )
                .await?
            {
                Outcome::Done(_) => {}
                Outcome::LostRace { .. } => return Err(AdminError::Changed(lease.key.clone())),
            }
        }
        Ok(GivenBack::Unowned)
    }

    /// Moves `key` off its owner gracefully: the owner's application checkpoints and stops,
    /// then the lease goes back to the fleet (see the module docs). Waits at most `timeout`
    /// for the owner.
    pub async fn release(
        &self,
        key: &LeaseKey,
        timeout: Duration,
        progress: impl FnMut(&Lease),
    ) -> Result<GivenBack, AdminError> {
        let asked = self.ask_handoff(key).await?;
        let held = self.wait_handed_over(&asked, timeout, progress).await?;
        self.give_back(&held).await
    }

    /// Writes `checkpoint` (`None`: no checkpoint, so the application starts from its initial
    /// position) into `key`, then gives the lease back to the fleet. Refused while a worker
    /// holds the lease, unless `force`: then the owner hands it over first (waiting at most
    /// `timeout`).
    pub async fn set_checkpoint(
        &self,
        key: &LeaseKey,
        checkpoint: Option<&str>,
        force: bool,
        timeout: Duration,
        progress: impl FnMut(&Lease),
    ) -> Result<GivenBack, AdminError> {
        if let Some(value) = checkpoint {
            if value.starts_with(crate::lease::RESERVED_PREFIX) {
                return Err(AdminError::ReservedCheckpoint(value.to_owned()));
            }
        }
        let held = self.hold(key, force, timeout, progress).await?;
        let operator = WorkerId::operator();
        let written = match checkpoint {
            Some(value) => match self
                .store
                .checkpoint(
                    key,
                    held.nonce,
                    &operator,
                    held.tenure,
                    1,
                    value,
                    self.deadline(),
                )
                .await?
            {
                Outcome::Done(lease) => lease,
                Outcome::LostRace { .. } => return Err(AdminError::Changed(key.clone())),
            },
            // No write removes a checkpoint: the lease is created again without one.
            None => self.start_over(key, held).await?,
        };
        self.give_back(&written).await
    }

    /// Deletes `held` (a lease the operator holds) and creates it again, with its parents and
    /// no checkpoint: the lease starts over from its initial position.
    ///
    /// A discoverer that reads the table between the two writes creates the lease again
    /// first, from the last checkpoint it saw (see [`delete`](Self::delete)): that item is
    /// taken and deleted in turn, up to [`START_OVER_ATTEMPTS`] times. Once a delete has
    /// landed, a failure is [`AdminError::Recreated`], never [`AdminError::Changed`]:
    /// something was written.
    async fn start_over(&self, key: &LeaseKey, mut held: Lease) -> Result<Lease, AdminError> {
        let operator = WorkerId::operator();
        for attempt in 0..START_OVER_ATTEMPTS {
            match self
                .store
                .delete(key, held.nonce, held.counter, held.tenure, self.deadline())
                .await?
            {
                Outcome::Done(_) => {}
                Outcome::LostRace { .. } if attempt == 0 => {
                    return Err(AdminError::Changed(key.clone()))
                }
                Outcome::LostRace { current } => {
                    return Err(AdminError::Recreated {
                        key: key.clone(),
                        checkpoint: current.and_then(|l| l.checkpoint),
                    })
                }
            }
            let fresh = NewLease::new(key.clone()).with_parents(held.parents.clone());
            let current = match self.store.create(fresh, self.deadline()).await? {
                Outcome::Done(lease) => return Ok(lease),
                Outcome::LostRace { current: None } => continue,
                Outcome::LostRace {
                    current: Some(current),
                } => current,
            };
            if current.owner.is_some() {
                // Created again and already taken by a worker: it is the fleet's now.
                return Err(AdminError::Recreated {
                    key: key.clone(),
                    checkpoint: current.checkpoint,
                });
            }
            if current.checkpoint.is_none() {
                // Created again with no checkpoint either: what the reset was for.
                return Ok(current);
            }
            // Created again from the checkpoint a discoverer remembered: take it and start over.
            tracing::info!(lease_key = %key, checkpoint = ?current.checkpoint, "the lease was created again from an old checkpoint meanwhile; deleting it again");
            held = match self
                .store
                .take(
                    key,
                    current.nonce,
                    &operator,
                    Incarnation::random(),
                    current.counter,
                    self.deadline(),
                )
                .await?
            {
                Outcome::Done(taken) => taken,
                Outcome::LostRace { current } => {
                    return Err(AdminError::Recreated {
                        key: key.clone(),
                        checkpoint: current.and_then(|l| l.checkpoint),
                    })
                }
            };
        }
        let checkpoint = self.store.get(key, self.deadline()).await?;
        Err(AdminError::Recreated {
            key: key.clone(),
            checkpoint: checkpoint.and_then(|l| l.checkpoint),
        })
    }

    /// Deletes `key`. Refused while a worker holds the lease, unless `force`: then the owner
    /// hands it over first (waiting at most `timeout`).
    ///
    /// A delete forgets nothing the fleet remembers: while the source lists the lease's shard,
    /// the discoverer creates the lease again at its next listing, from the last checkpoint a
    /// worker read in the table (each worker remembers the checkpoints its rounds read, so
    /// that a lease deleted by hand comes back where it was). That checkpoint is as new as the
    /// last round that read the lease, up to a slow scan old, so records after it may be
    /// processed again. To start a lease over from its initial position, use
    /// [`set_checkpoint`](Self::set_checkpoint) with `None`; to move it, [`release`](Self::release).
    pub async fn delete(
        &self,
        key: &LeaseKey,
        force: bool,
        timeout: Duration,
        progress: impl FnMut(&Lease),
    ) -> Result<Lease, AdminError> {
        let lease = self.lease(key).await?;
        let lease = if lease.owner.is_some() {
            self.hold(key, force, timeout, progress).await?
        } else {
            lease
        };
        match self
            .store
            .delete(
                key,
                lease.nonce,
                lease.counter,
                lease.tenure,
                self.deadline(),
            )
            .await?
        {
            Outcome::Done(deleted) => Ok(deleted),
            Outcome::LostRace { .. } => Err(AdminError::Changed(key.clone())),
        }
    }

    /// Asks `worker`'s running process to leave the fleet gracefully. Returns its record as it
    /// was told.
    pub async fn ask_drain(&self, worker: &WorkerId) -> Result<Member, AdminError> {
        let member = self
            .store
            .get_member(worker, true, self.deadline())
            .await?
            .ok_or_else(|| AdminError::NoSuchWorker(worker.clone()))?;
        let Some(incarnation) = member.incarnation else {
            return Err(AdminError::OldWorker(worker.clone()));
        };
        let notice = with_nonce(&drain_notice(incarnation));
        match self
            .store
            .notify(worker, incarnation, &[notice], self.deadline())
            .await?
        {
            Outcome::Done(member) => Ok(member),
            Outcome::LostRace { current: None } => Err(AdminError::NoSuchWorker(worker.clone())),
            // Another process of the id wrote its record meanwhile.
            Outcome::LostRace { current: Some(_) } => {
                Err(AdminError::WorkerChanged(worker.clone()))
            }
        }
    }

    /// How far the drain of `told` (as [`ask_drain`](Self::ask_drain) returned it) is.
    pub async fn drain_progress(&self, told: &Member) -> Result<DrainProgress, AdminError> {
        let snapshot = self.store.snapshot(self.deadline()).await?;
        let member_present = snapshot
            .members
            .iter()
            .any(|m| m.worker == told.worker && m.incarnation == told.incarnation);
        let leases_held = snapshot
            .leases
            .iter()
            .filter(|l| l.owner.as_ref() == Some(&told.worker))
            .map(|l| l.key.clone())
            .collect();
        Ok(DrainProgress {
            member_present,
            leases_held,
        })
    }

    /// Drains `worker` (see [`ask_drain`](Self::ask_drain)) and waits at most `timeout` until
    /// its process has left and the table names it on no lease, calling `progress` at every
    /// look.
    pub async fn drain(
        &self,
        worker: &WorkerId,
        timeout: Duration,
        mut progress: impl FnMut(&DrainProgress),
    ) -> Result<DrainProgress, AdminError> {
        let told = self.ask_drain(worker).await?;
        let start = Instant::now();
        loop {
            let now = self.drain_progress(&told).await?;
            progress(&now);
            if now.done() {
                return Ok(now);
            }
            if start.elapsed() >= timeout {
                return Err(AdminError::TimedOut {
                    what: format!(
                        "the drain of worker {worker} ({} leases still held; the worker goes on \
                         leaving)",
                        now.leases_held.len()
                    ),
                    waited: timeout,
                });
            }
            tokio::time::sleep(self.poll_interval).await;
        }
    }
}

/// The live session (capacity not 0) holding the fewest leases, ties to the smallest id;
/// `None` when no worker runs sessions.
fn receiver(snapshot: &crate::lease::Snapshot) -> Option<&Member> {
    snapshot
        .members
        .iter()
        .map(|m| &**m)
        .filter(|m| m.session && m.capacity != Some(0))
        .min_by_key(|m| {
            let held = snapshot
                .leases
                .iter()
                .filter(|l| l.owner.as_ref() == Some(&m.worker))
                .count();
            (held, m.worker.clone())
        })
}

/// Where a lease stands in the shard lifecycle, judged from the table alone as every worker
/// judges it (see "Lease states" in `docs/ARCHITECTURE.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// May be taken and worked on.
    Ready,
    /// Waits for a parent lease to finish.
    Blocked,
    /// Processed to the end of its shard.
    Finished,
    /// Being retired: its shard left the source.
    Retiring,
}

impl LeaseState {
    /// The state as `shardlease status` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Blocked => "blocked",
            Self::Finished => "finished",
            Self::Retiring => "retiring",
        }
    }
}

impl std::fmt::Display for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of each of `leases` (a whole table's, for the parents to be found), in order.
pub fn lease_states<L: std::borrow::Borrow<Lease>>(leases: &[L]) -> Vec<LeaseState> {
    crate::lifecycle::statuses(leases)
        .into_iter()
        .map(|status| match status {
            LeaseStatus::Ready => LeaseState::Ready,
            LeaseStatus::Blocked => LeaseState::Blocked,
            LeaseStatus::Finished => LeaseState::Finished,
            LeaseStatus::Retiring => LeaseState::Retiring,
        })
        .collect()
}
