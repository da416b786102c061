//! A checkpoint that lands late never replaces a later one (paused time, in-memory store
//! behind a fault switch that delivers requests late, whether or not their caller still
//! waits). The application gives up on a checkpoint whose request is stuck on a slow link,
//! checkpoints again, and the stuck request lands afterwards: the table must keep the later
//! value, so that the next owner resumes from it and never from the older one.

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::{CheckpointError, LeaseEvent, LeaseEvents, LeaseGrant};
use shardlease::{LeaseKey, Worker, WorkerConfig, WorkerId, SHARD_END};
use tokio::time::Instant;

fn far() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn first_grant(events: &mut LeaseEvents) -> LeaseGrant {
    loop {
        match events.recv().await {
            Some(LeaseEvent::Acquired(grant)) => return grant,
            Some(_) => {}
            None => panic!("the worker stopped before it was given the lease"),
        }
    }
}

/// Checkpoints `late` over a link that delivers it `delay` late (after the worker's store
/// timeout: the call gives up first), then `later` on time (`None`: the end of the shard),
/// then waits until the stuck request has landed. Returns what the table holds then.
async fn late_then_later(late: &str, later: Option<&str>) -> Option<String> {
    let inner = InMemoryStore::new();
    let (store, faults) = FaultyStore::new(inner.clone());
    let key = LeaseKey::new("s").unwrap();
    let config = WorkerConfig::default();
    let (worker, mut events) = Worker::builder(Arc::new(store), WorkerId::new("w").unwrap())
        .config(config.clone())
        .shards(vec![key.clone()])
        .start()
        .await
        .unwrap();
    let grant = first_grant(&mut events).await;

    let delay = config.store_timeout + Duration::from_secs(1);
    faults.set_late(delay);
    let stuck = {
        let checkpointer = grant.checkpointer();
        let late = late.to_owned();
        tokio::spawn(async move { checkpointer.checkpoint(&late).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    faults.set_late(Duration::ZERO);
    let given_up = stuck.await.unwrap();
    assert!(
        matches!(given_up, Err(CheckpointError::Store { .. })),
        "the stuck checkpoint was given up on: {given_up:?}"
    );
    match later {
        Some(later) => grant.checkpoint(later).await,
        None => grant.end_of_shard().await,
    }
    .expect("the later checkpoint");
    // The stuck request lands now.
    tokio::time::sleep(delay).await;
    let stored = inner.get(&key, far()).await.unwrap().unwrap().checkpoint;
    drop(grant);
    worker.shutdown().await;
    stored
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_that_lands_late_does_not_replace_a_later_one() {
    assert_eq!(
        late_then_later("seq-10", Some("seq-20")).await.as_deref(),
        Some("seq-20")
    );
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_that_lands_late_does_not_undo_the_end_of_the_shard() {
    assert_eq!(
        late_then_later("seq-10", None).await.as_deref(),
        Some(SHARD_END)
    );
}
