//! The control task: fences leases whose local validity ran out, reports waiting leases when
//! their time comes, and acts on the grants the application let go of.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::finish::spawn_finish;
use super::state::{Finish, Phase, Shared};
use super::stop::{Finished, StopReason};

/// Fences leases whose validity ran out, reports waiting leases when their time comes, and
/// acts on grants the application finished.
pub(crate) async fn control(
    shared: Arc<Shared>,
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
                Phase::Waiting { report_at } if report_at <= now => due.push(key.clone()),
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
        for key in due {
            shared.report(&key);
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
