//! A policy that steals (KCL 2.x's, one lease per round from the most loaded worker) on
//! paused time over the in-memory store. A steal from a live owner is asked as a handoff
//! (`tests/steal_handoff.rs`); the take that follows the handoff may lose its answer, and no
//! two workers may process the lease meanwhile.

use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::balance::KclBalance;
use shardlease::store::memory::InMemoryStore;
use shardlease::WorkerConfig;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

/// The answer of the steal is lost (the take landed; the thief gets an ambiguous error). The
/// thief finds the lease its own at its next round: it must not start it before the owner it
/// took it from let go, though that owner's session keeps beating and nobody told it yet.
#[tokio::test(start_paused = true)]
async fn a_steal_whose_answer_was_lost_waits_for_the_owner_to_let_go() {
    let mut fleet = Fleet::new(Arc::new(InMemoryStore::new()), WorkerConfig::default(), 4);
    fleet.kcl = Some(KclBalance::default());
    fleet.start("a", QUICK).await;
    fleet
        .until(Duration::from_secs(30), |f| f.counts() == [4])
        .await;
    fleet.start("b", QUICK).await;
    // Before b's first round: its first steal lands unanswered.
    let faults = fleet.faults("b");
    faults.lose_next_take_answer();
    fleet
        .until(Duration::from_secs(300), |f| {
            let mut counts = f.counts();
            counts.sort();
            counts == [2, 2]
        })
        .await;
    assert_eq!(faults.lost_answers(), 1, "the steal's answer was lost");
    fleet.idle(Duration::from_secs(60)).await;
    fleet.assert_safe();
    let stolen = fleet.count(|r| matches!(r, Record::Started { worker, .. } if worker == "b"));
    assert!(stolen >= 2, "b took its share: {:#?}", fleet.records());
    fleet.shutdown_all().await;
}
