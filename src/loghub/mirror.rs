//! Checkpoints mirrored into a LogHub consumer group, so that the SLS console's lag view and
//! its alarms follow the application: the group is created at start if missing ([`ensure`]),
//! and each record loop runs a [`Mirror`] that writes its lease's latest accepted checkpoint
//! with `UpdateCheckPoint` (`forceSuccess`: the group assigns shards to nobody here, and is
//! never heartbeaten) at most every interval, one write at a time so that an older cursor
//! never lands after a newer one, and the last one before a graceful stop.

use std::sync::Arc;
use std::time::Duration;

use aliyun_log_rust_sdk::{Client, Error as SdkError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::ConsumerGroup;
use super::describe;
use super::event::{ConsumerEvent, Observer};
use crate::lease::LeaseKey;

/// A consumer group's heartbeat timeout, as it is created here: LogHub's consumer library's
/// default. Nothing heartbeats it; the value only has to be valid.
const GROUP_TIMEOUT_SECS: i32 = 60;

/// Creates the group if it does not exist (`in order`: off, since the leases, not the group,
/// keep children after their parents). The error is one line.
pub(crate) async fn ensure(
    client: &Client,
    project: &str,
    logstore: &str,
    group: &ConsumerGroup,
    timeout: Duration,
) -> Result<(), String> {
    let request = client
        .create_consumer_group(project, logstore, &group.name)
        .timeout(GROUP_TIMEOUT_SECS)
        .order(false)
        .send();
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(_)) => {
            tracing::info!(group = %group.name, "consumer group created for the checkpoints' mirror");
            Ok(())
        }
        Ok(Err(SdkError::Server { error_code, .. }))
            if error_code == "ConsumerGroupAlreadyExist" =>
        {
            Ok(())
        }
        Ok(Err(err)) => Err(format!("CreateConsumerGroup: {}", describe(&err))),
        Err(_) => Err(format!("CreateConsumerGroup unanswered within {timeout:?}")),
    }
}

/// Where one lease's mirror sends its checkpoints.
pub(crate) struct Target {
    pub client: Arc<Client>,
    pub project: String,
    pub logstore: String,
    pub group: ConsumerGroup,
    pub shard_id: i32,
    pub key: LeaseKey,
    pub observer: Observer,
    pub call_timeout: Duration,
}

/// The latest accepted checkpoint of one lease, for its mirror task.
pub(crate) struct Mirror {
    latest: watch::Sender<Option<String>>,
    closing: watch::Sender<bool>,
}

impl Mirror {
    /// Starts the mirror of one lease.
    pub(crate) fn start(target: Target) -> (Arc<Self>, MirrorTask) {
        let (latest, cursors) = watch::channel(None);
        let (closing, closed) = watch::channel(false);
        let task = tokio::spawn(run(target, cursors, closed));
        (Arc::new(Self { latest, closing }), MirrorTask(task))
    }

    /// A checkpoint was accepted.
    pub(crate) fn checkpointed(&self, cursor: &str) {
        self.latest.send_replace(Some(cursor.to_owned()));
    }

    /// Asks the task to write the last checkpoint (if not written yet) and end.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }
}

/// The task of one lease's mirror.
pub(crate) struct MirrorTask(JoinHandle<()>);

impl MirrorTask {
    /// Waits for its last write (after [`Mirror::close`]).
    pub(crate) async fn finished(self) {
        let _ = self.0.await;
    }

    /// Ends it at once, whatever is unwritten (the lease was lost: its new owner mirrors).
    pub(crate) fn abort(self) {
        self.0.abort();
    }
}

async fn run(
    target: Target,
    mut cursors: watch::Receiver<Option<String>>,
    mut closed: watch::Receiver<bool>,
) {
    let mut written: Option<String> = None;
    loop {
        let closing = tokio::select! {
            changed = cursors.changed() => changed.is_err(),
            _ = closed.wait_for(|closing| *closing) => true,
        };
        let latest = cursors.borrow_and_update().clone();
        if let Some(cursor) = latest.filter(|c| written.as_ref() != Some(c)) {
            if write(&target, &cursor).await {
                written = Some(cursor);
            }
        }
        if closing || *closed.borrow() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(target.group.interval) => {}
            _ = closed.wait_for(|closing| *closing) => {}
        }
    }
}

/// One `UpdateCheckPoint`; false (reported) when it failed.
async fn write(target: &Target, cursor: &str) -> bool {
    let request = target
        .client
        .update_consumer_group_checkpoint(&target.project, &target.logstore, &target.group.name)
        .shard_id(target.shard_id)
        .consumer_id(&target.group.consumer)
        .checkpoint(cursor)
        .force_success(true)
        .send();
    let error = match tokio::time::timeout(target.call_timeout, request).await {
        Ok(Ok(_)) => return true,
        Ok(Err(err)) => describe(&err),
        Err(_) => format!("unanswered within {:?}", target.call_timeout),
    };
    tracing::warn!(group = %target.group.name, %error, "could not mirror the checkpoint into the consumer group");
    (target.observer)(ConsumerEvent::MirrorFailed {
        key: target.key.clone(),
        error,
    });
    false
}
