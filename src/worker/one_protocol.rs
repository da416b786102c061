//! One table, one protocol. The two protocols read each other's items wrongly: a worker of
//! the lease protocol takes a session's leases as expired (nobody renews them), and a session
//! takes a renewing worker's leases as orphans (nobody beats for them). So a starting worker
//! looks at the membership records (each says which protocol wrote it, see
//! [`Member::session`]) and refuses to start while live workers of the other protocol use the
//! table. Records left by workers of the other protocol that stopped (crashed, or from before
//! an upgrade) are cleared once seen unchanged for a lease duration, and the start goes on:
//! their leases are judged as any lease of a stopped worker is.
//!
//! The check runs twice: before the worker writes its own record (waiting out the records of
//! the other protocol), and after (so that two workers of different protocols starting at the
//! same instant cannot both miss each other: whichever writes its record second sees the
//! first one's in its second look).

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::lease::{Member, WorkerId};
use crate::store::{LeaseStore, Outcome, StoreError};

/// Why the check did not let the worker start.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// These workers of the other protocol are alive (their records moved).
    Live(Vec<WorkerId>),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Self {
        Refusal::Store(error)
    }
}

/// The membership records of the other protocol than `sessions`, from one consistent scan.
pub(crate) async fn others(
    store: &dyn LeaseStore,
    sessions: bool,
    deadline: Instant,
) -> Result<Vec<Member>, StoreError> {
    let members = store.list_members(deadline).await?;
    Ok(members
        .into_iter()
        .filter(|member| member.session != sessions)
        .collect())
}

/// Before this worker writes its own record: waits a lease duration if the table holds
/// records of the other protocol, clears those that did not move, and refuses if any did.
/// `deadline` bounds the first scan; the rest (only when there are such records) gets
/// `store_timeout` per call after the wait.
pub(crate) async fn before_start(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    sessions: bool,
    lease_duration: Duration,
    store_timeout: Duration,
    deadline: Instant,
) -> Result<(), Refusal> {
    let found = others(store, sessions, deadline).await?;
    if found.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = found.iter().map(|m| m.worker.as_str()).collect();
    tracing::warn!(
        workers = ?ids,
        protocol = other_name(sessions),
        "the table holds membership records of the other protocol: waiting a lease duration to see whether those workers are alive"
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
            live.push(seen.worker);
            continue;
        }
        // Conditioned on the heartbeat seen: a record that moves meanwhile stays.
        match store
            .remove_member(&seen.worker, Some(seen.heartbeat), deadline)
            .await?
        {
            Outcome::Done(_) => {
                tracing::warn!(worker = %seen.worker, protocol = other_name(sessions), "cleared the membership record of a stopped worker of the other protocol");
            }
            Outcome::LostRace { current: None } => {}
            Outcome::LostRace { current: Some(_) } => live.push(seen.worker),
        }
    }
    if live.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Live(live))
    }
}

/// After this worker wrote its own record: refuses if a record of the other protocol is there
/// (a worker of it started meanwhile). The caller then removes its own record.
pub(crate) async fn after_start(
    store: &dyn LeaseStore,
    sessions: bool,
    deadline: Instant,
) -> Result<(), Refusal> {
    let found = others(store, sessions, deadline).await?;
    if found.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Live(found.into_iter().map(|m| m.worker).collect()))
    }
}

/// The name of the protocol other than `sessions`, as `WorkerConfig::protocol` spells it.
pub(crate) fn other_name(sessions: bool) -> &'static str {
    name(!sessions)
}

/// The name of a protocol, as `WorkerConfig::protocol` spells it.
pub(crate) fn name(sessions: bool) -> &'static str {
    if sessions {
        "Protocol::Sessions"
    } else {
        "Protocol::Leases"
    }
}
