//! A worker whose requests all land late (a slow link: answered, but after its leases'
//! validity) gives its leases up visibly instead of keeping them alive in the table and
//! processed by nobody: it takes nothing while its round trips stay slow, publishes capacity 0
//! so its peers plan without it, and releases what it lost once its application let go; its
//! peers take over, and it gets its share back once the link is fast again (paused time,
//! in-memory store).

use crate::cases::base;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::store::memory::InMemoryStore;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// How much of `[from, to]` someone processed each of `keys`, over all of them (0 to 1).
fn processed_fraction(records: &[Record], keys: &[String], from: Instant, to: Instant) -> f64 {
    let mut covered = Duration::ZERO;
    for key in keys {
        // Processing intervals of this key, by worker.
        let mut open: BTreeMap<String, Instant> = BTreeMap::new();
        let mut intervals = Vec::new();
        for record in records {
            match record {
                Record::Started {
                    worker, key: k, at, ..
                } if k == key => {
                    open.insert(worker.clone(), *at);
                }
                Record::Stopped { worker, key: k, at } if k == key => {
                    if let Some(start) = open.remove(worker) {
                        intervals.push((start, *at));
                    }
                }
                _ => {}
            }
        }
        intervals.extend(open.into_values().map(|start| (start, to)));
        intervals.sort();
        let mut cursor = from;
        for (start, end) in intervals {
            let (start, end) = (start.max(cursor), end.min(to));
            if end > start {
                covered += end - start;
                cursor = end;
            }
        }
    }
    covered.as_secs_f64() / ((to - from).as_secs_f64() * keys.len() as f64)
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_requests_land_late_gives_its_leases_up_and_takes_them_back() {
    let config = base();
    let lease = config.lease_duration;
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), config.clone(), 9);
    for name in ["a", "b", "c"] {
        fleet
            .start(name, App::FinishAfter(Duration::from_millis(100)))
            .await;
    }
    fleet.until(secs(60), |f| f.balanced()).await;
    let slow: Vec<String> = fleet.held()["a"].iter().map(|k| k.to_string()).collect();
    assert_eq!(slow.len(), 3);

    // Every request of a lands 0.4 to 1.2 lease durations late (a new delay every half lease
    // duration, as scripts/chaos.py's slow schedule), for 6 lease durations.
    let faults = fleet.faults("a");
    let began = Instant::now();
    for tenths in [4, 12, 9, 6, 11, 5, 8, 12, 7, 10, 4, 9] {
        faults.set_late(lease * tenths / 10);
        fleet.idle(lease / 2).await;
    }
    let healed = Instant::now();
    faults.set_late(Duration::ZERO);

    let records = fleet.records();
    let fraction = processed_fraction(&records, &slow, began, healed);
    println!(
        "FIGURE slow worker: its leases processed {:.1} % of the slow spell",
        fraction * 100.0
    );
    // Its leases' validity there ends within a lease duration; then they are processed by its
    // peers: a's late renewals must not keep them alive for them.
    let taken_over = slow.iter().all(|key| {
        records.iter().any(|r| {
            matches!(r, Record::Started { worker, key: k, at, .. }
                if worker != "a" && k == key && *at >= began && *at <= began + lease * 3)
        })
    });
    assert!(
        taken_over,
        "a's leases not processed by its peers within 3 lease durations of the slowdown"
    );
    let retaken = records.iter().any(|r| {
        matches!(r, Record::Started { worker, at, .. } if worker == "a" && *at > began + lease && *at < healed)
    });
    assert!(!retaken, "a took leases while its requests landed late");
    assert!(
        fraction >= 0.6,
        "a's leases processed {:.1} % of the slow spell",
        fraction * 100.0
    );

    // Fast again: a gets its share back.
    fleet
        .until(lease * 3, |f| {
            f.balanced() && f.held().get("a").is_some_and(|h| h.len() == 3)
        })
        .await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}
