//! Three workers share eight shards through the in-memory lease table, using the store's
//! conditional writes directly: they take leases, checkpoint, hand one over gracefully, and a
//! stale checkpoint from an earlier tenure is refused.
//!
//! Run: `cargo run --example quickstart`

use std::time::Duration;

use shardlease::store::memory::InMemoryStore;
use shardlease::store::{LeaseStore, Outcome};
use shardlease::{LeaseKey, NewLease, WorkerId};
use tokio::time::Instant;

type Error = Box<dyn std::error::Error>;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn print_table(store: &InMemoryStore, title: &str) -> Result<(), Error> {
    println!("\n{title}");
    for lease in store.snapshot(deadline()).await?.leases {
        println!(
            "  {:<10} owner={:<9} tenure={} counter={:<2} checkpoint={}",
            lease.key,
            lease.owner.as_ref().map_or("-", |o| o.as_str()),
            lease.tenure,
            lease.counter,
            lease.checkpoint.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let store = InMemoryStore::new();
    let workers: Vec<WorkerId> = ["alpha", "bravo", "charlie"]
        .into_iter()
        .map(WorkerId::new)
        .collect::<Result<_, _>>()?;
    for i in 0..8 {
        let _ = store
            .create(
                NewLease::new(LeaseKey::new(format!("shard-{i}"))?),
                deadline(),
            )
            .await?;
    }
    for worker in &workers {
        let _ = store.heartbeat(worker, None, None, deadline()).await?;
    }

    // Each worker in turn takes unowned leases up to its share; all race on the same counters,
    // so a lease taken by one is refused to the others.
    for round in 0..3 {
        for (i, worker) in workers.iter().enumerate() {
            let snapshot = store.snapshot(deadline()).await?;
            let share = (snapshot.leases.len() + workers.len() - 1 - i) / workers.len();
            let held = snapshot
                .leases
                .iter()
                .filter(|l| l.is_owned_by(worker))
                .count();
            if held >= share {
                continue;
            }
            if let Some(free) = snapshot.leases.iter().find(|l| l.owner.is_none()) {
                if let Outcome::Done(lease) = store
                    .take(&free.key, worker, free.counter, deadline())
                    .await?
                {
                    println!("round {round}: {worker} took {}", lease.key);
                }
            }
        }
    }
    print_table(&store, "after taking (3+3+2):").await?;

    // Every owner checkpoints; the fencing token is the tenure it took the lease in.
    for lease in store.snapshot(deadline()).await?.leases {
        let owner = lease.owner.clone().ok_or("every lease is owned by now")?;
        let _ = store
            .checkpoint(&lease.key, &owner, lease.tenure, "seq-100", deadline())
            .await?;
    }

    // charlie asks alpha for one lease; alpha checkpoints and hands it over.
    let (alpha, charlie) = (&workers[0], &workers[2]);
    let lease = store
        .snapshot(deadline())
        .await?
        .leases
        .into_iter()
        .find(|l| l.is_owned_by(alpha))
        .ok_or("alpha holds a lease")?;
    let _ = store
        .request_handoff(&lease.key, alpha, lease.tenure, charlie, deadline())
        .await?;
    println!("\n{charlie} asked {alpha} for {}", lease.key);
    let _ = store
        .checkpoint(&lease.key, alpha, lease.tenure, "seq-150", deadline())
        .await?;
    let moved = store
        .complete_handoff(&lease.key, alpha, lease.tenure, charlie, deadline())
        .await?
        .done()
        .ok_or("the handoff completes")?;
    println!(
        "{alpha} saved seq-150 and handed {} to {charlie}",
        moved.key
    );

    // alpha, late, tries to checkpoint in its old tenure: fenced.
    let late = store
        .checkpoint(&lease.key, alpha, lease.tenure, "seq-151", deadline())
        .await?;
    println!(
        "{alpha}'s late checkpoint of {}: {}",
        lease.key,
        if late.is_done() {
            "ACCEPTED (bug!)"
        } else {
            "refused (fenced)"
        }
    );
    print_table(&store, "after the handoff:").await?;
    Ok(())
}
