//! A table written by an earlier build. Builds before this one could run the lease protocol,
//! in which every worker renewed each lease it held and kept a membership record by
//! heartbeats; this build speaks sessions only. The two read each other's items wrongly: a
//! worker of the lease protocol takes a session's leases as expired (nobody renews them), and
//! a session takes a renewing worker's leases as orphans (nobody beats for them). So a
//! starting worker looks at the membership records (a session's record says so, see
//! [`Member::session`]) and refuses to start while live workers of the earlier build use the
//! table ([`WorkerError::EarlierBuild`](super::WorkerError::EarlierBuild)). Records left by
//! such workers that stopped (crashed, or stopped before an upgrade) are cleared once seen
//! unchanged for a lease duration, and the start goes on: their leases are judged as any
//! lease of a stopped worker is.
//!
//! The check runs twice: before the worker writes its own record (waiting out the records of
//! the earlier build), and after (so that a worker of each build starting at the same instant
//! cannot both miss each other: whichever writes its record second sees the first one's in
//! its second look; the earlier build makes the same check the other way round).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::lease::{Member, WorkerId};
use crate::store::{LeaseStore, Outcome, StoreError};

/// Why the check did not let the worker start.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// These workers of the earlier build are alive (their records moved).
    Live(Vec<WorkerId>),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Self {
        Refusal::Store(error)
    }
}

/// The membership records that are not sessions' (written by an earlier build's lease
/// protocol), from one consistent scan.
pub(crate) async fn others(
    store: &dyn LeaseStore,
    deadline: Instant,
) -> Result<Vec<Arc<Member>>, StoreError> {
    let members = store.list_members(deadline).await?;
    Ok(members
        .into_iter()
        .filter(|member| !member.session)
        .collect())
}

/// Before this worker writes its own record: waits a lease duration if the table holds
/// records of the earlier build, clears those that did not move, and refuses if any did.
/// `deadline` bounds the first scan; the rest (only when there are such records) gets
/// `store_timeout` per call after the wait.
pub(crate) async fn before_start(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    lease_duration: Duration,
    store_timeout: Duration,
    deadline: Instant,
) -> Result<(), Refusal> {
    let found = others(store, deadline).await?;
    if found.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = found.iter().map(|m| m.worker.as_str()).collect();
    tracing::warn!(
        workers = ?ids,
        "the table holds membership records of an earlier build's lease protocol: waiting a lease duration to see whether those workers are alive"
    );
    // First seen now (after the scan's answer): a record unchanged for a lease duration from
    // here was last written more than a lease duration ago.
    clock.sleep_until(clock.now() + lease_duration).await;
    let mut live = Vec::new();
    for seen in found {
        let deadline = clock.now() + store_timeout;
        let Some(now) = store.get_member(&seen.worker, true, deadline).await? else {
            continue;
        };
        let unchanged = now.heartbeat == seen.heartbeat
            && now.incarnation == seen.incarnation
            && now.session == seen.session;
        if !unchanged {
            live.push(seen.worker.clone());
            continue;
        }
        // Conditioned on the heartbeat seen: a record that moves meanwhile stays.
        match store
            .remove_member(&seen.worker, Some(seen.heartbeat), deadline)
            .await?
        {
            Outcome::Done(_) => {
                tracing::warn!(worker = %seen.worker, "cleared the membership record of a stopped worker of an earlier build");
            }
            Outcome::LostRace { current: None } => {}
            Outcome::LostRace { current: Some(_) } => live.push(seen.worker.clone()),
        }
    }
    if live.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Live(live))
    }
}

/// After this worker wrote its own record: refuses if a record of the earlier build is there
/// (a worker of it started meanwhile). The caller then removes its own record.
pub(crate) async fn after_start(store: &dyn LeaseStore, deadline: Instant) -> Result<(), Refusal> {
    let found = others(store, deadline).await?;
    if found.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Live(
            found.into_iter().map(|m| m.worker.clone()).collect(),
        ))
    }
}
