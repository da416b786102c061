//! A session opened again whose `open_session` landed and whose answer was lost: the process
//! finds its own session in its record at its next look. Its validity must not be counted
//! from that read: peers judge the session by the heartbeat the open wrote, first seen as
//! early as the open landed, and may fence it a lease duration after that, while a process
//! that counted from the later read would still hold its leases. So the process beats the
//! record first, and counts from that beat (paused time, in-memory store).

use std::sync::Arc;
use std::time::Duration;

use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::{LeaseKey, Worker, WorkerId};
use tokio::time::Instant;

fn far() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[tokio::test(start_paused = true)]
async fn a_session_found_in_its_record_after_a_lost_open_is_beaten_before_it_counts() {
    let inner = InMemoryStore::new();
    let (store, faults) = FaultyStore::new(inner.clone());
    let id = WorkerId::new("a").unwrap();
    let (worker, _events) = Worker::builder(Arc::new(store), id.clone())
        .shards(vec![LeaseKey::new("s").unwrap()])
        .start()
        .await
        .unwrap();
    let monitor = worker.monitor();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(monitor.ready());

    // A peer fences the session (as after seeing it expire): the next beat is refused, and
    // the process opens a new session, whose answer is lost.
    faults.lose_next_open_answer();
    let record = inner.get_member(&id, true, far()).await.unwrap().unwrap();
    let fenced = inner
        .end_session(&id, record.incarnation.unwrap(), record.heartbeat, far())
        .await
        .unwrap();
    assert!(fenced.is_done());
    let limit = Instant::now() + Duration::from_secs(30);
    // Until its next beat, refused, the process counts its session valid.
    while monitor.ready() {
        assert!(Instant::now() < limit, "the fence never noticed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut opened = None;
    while !monitor.ready() {
        assert!(Instant::now() < limit, "never ready again");
        if opened.is_none() && faults.lost_answers() == 1 {
            let record = inner.get_member(&id, true, far()).await.unwrap().unwrap();
            opened = Some((record.incarnation, record.heartbeat));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (incarnation, heartbeat) = opened.expect("the open landed and its answer was lost");
    let now = inner.get_member(&id, true, far()).await.unwrap().unwrap();
    assert_eq!(
        now.incarnation, incarnation,
        "the session the lost open made"
    );
    assert!(
        now.heartbeat > heartbeat,
        "counted valid on the heartbeat the lost open wrote ({heartbeat}), without a beat"
    );
    worker.shutdown().await;
}
