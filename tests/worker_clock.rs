//! The worker reads its time from the clock it is given, not from tokio's directly: a worker
//! whose clock runs twice as fast lives its lease durations in half the time.

use std::sync::Arc;
use std::time::Duration;

use shardlease::clock::{Clock, Sleep};
use shardlease::store::fault::FaultyStore;
use shardlease::store::memory::InMemoryStore;
use shardlease::{LeaseEvent, LeaseKey, Worker, WorkerId};
use tokio::time::Instant;

/// A clock that runs `rate` times as fast as tokio's.
#[derive(Debug)]
struct RateClock {
    origin: Instant,
    rate: f64,
}

impl Clock for RateClock {
    fn now(&self) -> Instant {
        self.origin
            + Instant::now()
                .duration_since(self.origin)
                .mul_f64(self.rate)
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let real = self.origin
            + deadline
                .saturating_duration_since(self.origin)
                .div_f64(self.rate);
        Box::pin(tokio::time::sleep_until(real))
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_worker_stops_by_its_own_clock() {
    let (store, faults) = FaultyStore::new(InMemoryStore::new());
    let clock = RateClock {
        origin: Instant::now(),
        rate: 2.0,
    };
    let (worker, mut events) = Worker::builder(Arc::new(store), WorkerId::new("fast").unwrap())
        .shards(vec![LeaseKey::new("shard-0").unwrap()])
        .clock(clock)
        .start()
        .await
        .unwrap();
    // The application keeps every grant (a dropped grant would abandon its lease).
    tokio::spawn(async move {
        let mut grants = Vec::new();
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(grant) = event {
                grants.push(grant);
            }
        }
    });
    let held = async {
        while worker.held_leases().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the lease is taken");

    // Held for a while, then cut off: the validity (10 s - 0.5 s of its clock after the last
    // renewal started) ends within 4.75 s of tokio time, where a worker on tokio's clock would
    // hold on for up to 9.5 s.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(worker.held_leases().len(), 1, "renewed while connected");
    faults.set_cut_off(true);
    let cut = Instant::now();
    while !worker.held_leases().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held_for = cut.elapsed();
    assert!(
        held_for <= Duration::from_millis(4_760),
        "still held {held_for:?} after the cut-off: the worker did not use its clock"
    );
    faults.set_cut_off(false);
    worker.shutdown().await;
}
