//! The control task: fences leases whose local validity ran out, reports waiting leases when
//! their time comes, and acts on the grants the application let go of.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::finish::spawn_finish;
use super::state::{Finish, Holder, Phase};
use super::stop::{Finished, StopReason};
use crate::lease::LeaseKey;

/// A lease taken here and reported later than the take was answered (after a quiet period,
/// or once the previous holder let go or its session is surely over) is reported only if a
/// strongly consistent read still shows it this session's, in the item and tenure taken:
/// nobody has to ask a worker before taking a lease it has not yet started, and while it
/// waited the lease may have moved on without a word to it (a steal whose answer was lost
/// tells nobody; the worker doing the chores may then give the thief's lease to a third
/// worker, an overlap: `a_lease_that_moved_on_while_its_report_waited_is_not_started` in
/// `sim/tests/campaign_holes.rs`). A failed read keeps
/// the lease waiting; the control loop reads again a beat later.
async fn confirm_and_report(shared: &Arc<Holder>, key: LeaseKey, nonce: u64, tenure: u64) {
    let deadline = shared.now() + shared.config.store_timeout;
    match shared.store.get(&key, deadline).await {
        Ok(Some(lease))
            if lease.nonce == nonce
                && lease.tenure == tenure
                && lease.is_owned_by_incarnation(&shared.id, shared.incarnation()) =>
        {
            shared.report(&key);
        }
        Ok(current) => {
            let why = match current {
                Some(lease) => format!(
                    "the lease moved on while it waited: now {:?}'s (tenure {})",
                    lease.owner.as_ref().map(|o| o.as_str()),
                    lease.tenure
                ),
                None => "the lease was deleted while it waited".to_owned(),
            };
            shared.lose(&key, Some(tenure), &why);
        }
        Err(err) => {
            tracing::debug!(lease_key = %key, error = %err, "could not read a lease about to be reported; it waits");
        }
    }
}

/// Fences leases whose validity ran out, reports waiting leases when their time comes, and
/// acts on grants the application finished.
pub(crate) async fn control(
    shared: Arc<Holder>,
    mut finished: mpsc::UnboundedReceiver<Finished>,
    cancel: CancellationToken,
) {
    loop {
        let now = shared.now();
        let mut expired = Vec::new();
        let mut due = Vec::new();
        let mut overdue = Vec::new();
        let mut next: Option<Instant> = None;
        for (key, held) in &shared.lock().held {
            if held.valid_until <= now {
                expired.push((key.clone(), held.tenure));
                continue;
            }
            let mut wake = held.valid_until;
            match held.phase {
                Phase::Waiting { report_at } if report_at <= now => {
                    due.push((key.clone(), held.nonce, held.tenure))
                }
                Phase::Waiting { report_at } => wake = wake.min(report_at),
                Phase::Stopping(StopReason::Retired { deadline }) if deadline <= now => {
                    overdue.push((key.clone(), held.nonce, held.tenure));
                }
                Phase::Stopping(StopReason::Retired { deadline }) => wake = wake.min(deadline),
                _ => {}
            }
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
        for (key, tenure) in expired {
            shared.expire(&key, tenure);
        }
        for (key, nonce, tenure) in due {
            // Pushed back while the read runs: this loop starts one read at a time per lease.
            shared.report_at(
                &key,
                nonce,
                tenure,
                now + shared.config.effective_renew_interval(),
            );
            let task_shared = Arc::clone(&shared);
            shared.jobs.spawn(
                async move { confirm_and_report(&task_shared, key, nonce, tenure).await }
                    .in_current_span(),
            );
        }
        for (key, nonce, tenure) in overdue {
            shared.lose(
                &key,
                Some(tenure),
                "the application did not finish a retired lease in time",
            );
            spawn_finish(&shared, key, Finish::Retire { nonce, tenure });
        }
        let sleep = async {
            match next {
                Some(at) => shared.clock.sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = shared.changed.notified() => {}
            _ = sleep => {}
            message = finished.recv() => {
                let Some((key, tenure, how)) = message else { return };
                if let Some(finish) = shared.finish(&key, tenure, how) {
                    spawn_finish(&shared, key, finish);
                }
            }
        }
    }
}
