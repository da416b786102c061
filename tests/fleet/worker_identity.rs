//! A worker's identity on paused tokio time over the in-memory store: takes whose answer was
//! lost, two live processes with one worker id, and a restart with the same id after a crash.
//! Every test also checks, at every lease start and every 5 ms, that no two workers (processes)
//! hold or process one lease at once.

use crate::cases::base;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Record};
use shardlease::balance::KclBalance;
use shardlease::store::memory::InMemoryStore;
use shardlease::WorkerConfig;
use tokio::time::Instant;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn fleet_with(shards: usize, config: WorkerConfig) -> Fleet {
    Fleet::new(Arc::new(InMemoryStore::new()), config, shards)
}

/// When `worker` started processing `key` at or after `after`.
fn started_after(fleet: &Fleet, worker: &str, key: &str, after: Instant) -> Option<Instant> {
    fleet.records().into_iter().find_map(|r| match r {
        Record::Started {
            worker: w,
            key: k,
            at,
            ..
        } if w == worker && k == key && at >= after => Some(at),
        _ => None,
    })
}

fn duplicates_reported(fleet: &Fleet) -> usize {
    fleet.count(|r| matches!(r, Record::DuplicateWorkerId { .. }))
}

/// The lease `worker` asked for in a handoff, read from the table.
async fn requested_by(fleet: &Fleet, worker: &str) -> Option<String> {
    let deadline = Instant::now() + secs(5);
    let snapshot = fleet.store.snapshot(deadline).await.unwrap();
    snapshot
        .leases
        .into_iter()
        .find(|l| {
            l.handoff_to
                .as_ref()
                .is_some_and(|to| to.as_str() == worker)
        })
        .map(|l| l.key.to_string())
}

#[tokio::test(start_paused = true)]
async fn a_forced_take_whose_answer_was_lost_is_reported_a_lease_duration_after_it_started() {
    let config = base().handoff_timeout(secs(10)).taker_interval(secs(1));
    let lease_duration = config.lease_duration;
    let mut fleet = fleet_with(2, config);
    fleet.start("a", App::NeverFinish).await;
    fleet.until(secs(30), |f| f.counts() == [2]).await;
    // b asks for one of a's leases at once; a's application never finishes it, so b takes it
    // by force after the handoff timeout, and the answer of that take is lost.
    fleet.start("b", QUICK).await;
    fleet.faults("b").lose_next_take_answer();
    tokio::time::sleep(secs(1)).await;
    let asked = requested_by(&fleet, "b")
        .await
        .expect("b asked for a lease");
    // A blip cuts a off just before: it goes on processing until its validity ends.
    tokio::time::sleep(secs(8)).await;
    let cut = Instant::now();
    fleet.faults("a").set_cut_off(true);
    fleet
        .until(secs(60), |f| {
            f.held()["b"].iter().any(|k| k.as_str() == asked)
        })
        .await;
    let started = started_after(&fleet, "b", &asked, cut).expect("b started it");
    assert!(
        started >= cut + lease_duration,
        "reported {:?} after a was cut off, before a's validity had surely ended",
        started - cut
    );
    assert_eq!(
        fleet.faults("b").lost_answers(),
        1,
        "the forced take's answer was lost"
    );
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn a_steal_whose_answer_was_lost_is_reported_a_lease_duration_after_it_started() {
    let config = base().taker_interval(secs(1));
    let lease_duration = config.lease_duration;
    let mut fleet = fleet_with(2, config);
    fleet.kcl = Some(KclBalance::default());
    fleet.start("a", QUICK).await;
    fleet.until(secs(30), |f| f.counts() == [2]).await;
    // a is cut off (it processes until its validity ends) and b, joining, steals one of its
    // leases at its first round (the KCL policy steals from the most loaded worker); the
    // answer of that steal is lost.
    fleet.faults("a").set_cut_off(true);
    let cut = Instant::now();
    fleet.start("b", QUICK).await;
    fleet.faults("b").lose_next_take_answer();
    fleet.until(secs(60), |f| !f.held()["b"].is_empty()).await;
    let (started, _) = fleet.first_start("b", None).expect("b started a lease");
    assert!(
        started >= cut + lease_duration,
        "reported {:?} after the steal, before a's validity had surely ended",
        started - cut
    );
    assert_eq!(
        fleet.faults("b").lost_answers(),
        1,
        "the steal's answer was lost"
    );
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn a_second_live_process_with_a_workers_id_is_reported_and_the_fleet_settles() {
    let mut fleet = fleet_with(8, base());
    fleet
        .start_as("a#1", "a", QUICK, fleet.config.clone())
        .await;
    fleet.start("b", QUICK).await;
    fleet.until(secs(60), |f| f.counts() == [4, 4]).await;
    // A stable pod name: a second process starts with a's id while the first still runs.
    fleet
        .start_as("a#2", "a", QUICK, fleet.config.clone())
        .await;
    fleet.idle(secs(60)).await;
    let settled = fleet.ledger.lock().unwrap().starts();
    assert!(
        settled <= 8 + 4,
        "{settled} starts: a's leases moved more than once"
    );
    fleet.idle(secs(540)).await;
    assert_eq!(
        fleet.ledger.lock().unwrap().starts(),
        settled,
        "leases still move between the two processes after a minute"
    );
    fleet.assert_safe();
    assert!(
        duplicates_reported(&fleet) >= 1,
        "nobody reported the duplicate id"
    );
    let held: BTreeSet<String> = fleet.held_keys();
    assert_eq!(held.len(), 8, "every lease processed: {:?}", fleet.held());
    assert_eq!(
        fleet.counts().iter().sum::<usize>(),
        8,
        "and by one process each"
    );
    assert_eq!(fleet.held()["b"].len(), 4, "b kept its share");
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn two_processes_starting_with_one_worker_id_share_its_leases_without_moves() {
    let mut fleet = fleet_with(8, base());
    fleet
        .start_as("a#1", "a", QUICK, fleet.config.clone())
        .await;
    fleet
        .start_as("a#2", "a", QUICK, fleet.config.clone())
        .await;
    fleet.idle(secs(60)).await;
    let settled = fleet.ledger.lock().unwrap().starts();
    fleet.idle(secs(540)).await;
    assert_eq!(
        fleet.ledger.lock().unwrap().starts(),
        settled,
        "leases still move between the two processes after a minute"
    );
    fleet.assert_safe();
    assert!(
        duplicates_reported(&fleet) >= 1,
        "nobody reported the duplicate id"
    );
    assert_eq!(fleet.held_keys().len(), 8, "{:?}", fleet.held());
    assert_eq!(fleet.counts().iter().sum::<usize>(), 8);
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_with_the_same_id_after_a_crash_gets_its_leases_back_a_lease_after_its_last_beat()
{
    let mut fleet = fleet_with(4, base());
    let lease_duration = fleet.config.lease_duration;
    let beat = fleet.config.effective_renew_interval();
    fleet.start("a", QUICK).await;
    fleet.start("b", QUICK).await;
    fleet.until(secs(60), |f| f.counts() == [2, 2]).await;
    let before = fleet.held()["a"].clone();
    fleet.crash("a");
    let crashed = Instant::now();
    tokio::time::sleep(secs(1)).await;
    // The new process cannot know that the old one is dead, and would take the leases back a
    // lease duration after its opening. b, which watches a, saw the old session's last beat and
    // the opening that replaced it one heartbeat on: the old session is over a lease after b
    // first saw that beat, and b gives its leases to the new session (no rebalance).
    fleet.start("a", QUICK).await;
    fleet
        .until(secs(30), |f| f.held().get("a") == Some(&before))
        .await;
    let since_crash = Instant::now() - crashed;
    assert!(
        since_crash >= lease_duration - beat && since_crash < lease_duration + secs(1),
        "got its leases back {since_crash:?} after the crash"
    );
    for key in &before {
        assert_eq!(
            started_after(&fleet, "b", key.as_str(), crashed),
            None,
            "b took {key}: a rebalance"
        );
    }
    assert_eq!(
        duplicates_reported(&fleet),
        0,
        "a dead process is no duplicate"
    );
    fleet.idle(secs(30)).await;
    assert_eq!(fleet.held()["a"], before, "and keeps them");
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

/// Found by the fault campaign (schedule 15783217669541765203): a second process with a's id
/// takes a's live leases as forced takes (to be reported a lease duration later) and leaves at
/// once. Its shutdown must not release them: a#1 may still be processing them until its next
/// renewal fails, and a released lease is taken and started at once by anybody.
#[tokio::test(start_paused = true)]
async fn a_twin_that_leaves_before_its_forced_takes_are_reported_does_not_release_them() {
    let mut fleet = fleet_with(8, base());
    fleet
        .start_as("a#1", "a", QUICK, fleet.config.clone())
        .await;
    fleet.until(secs(30), |f| f.counts() == [8]).await;
    fleet
        .start_as("a#2", "a", QUICK, fleet.config.clone())
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    fleet.leave("a#2").await;
    fleet.start("b", QUICK).await;
    fleet.idle(secs(40)).await;
    fleet.assert_safe();
    fleet.until(secs(60), |f| f.counts() == [4, 4]).await;
    fleet.assert_safe();
    fleet.shutdown_all().await;
}
