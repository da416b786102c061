//! Shard discovery and the shard lifecycle on paused tokio time over the in-memory store, with
//! a source the test changes while the workers run. Every test also checks, at every lease
//! start and every 5 ms, that no two workers hold or process one lease at once.

use crate::cases::{base, figure};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::{App, Fleet, Processing, Record};
use shardlease::source::{Shard, ShardSource, SourceError, StaticShardSource};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::{LeaseStore, Outcome};
use shardlease::LeaseKey;
use tokio::time::Instant;

const QUICK: App = App::FinishAfter(Duration::from_millis(100));

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn key(s: &str) -> LeaseKey {
    LeaseKey::new(s).unwrap()
}

fn source(n: usize) -> StaticShardSource {
    StaticShardSource::from_keys((0..n).map(|i| key(&format!("s{i}"))))
}

/// `shards` shards on the named workers, started and balanced.
async fn running(shards: usize, workers: &[&str]) -> (StaticShardSource, Fleet) {
    let source = source(shards);
    let mut fleet = fleet(&source);
    for name in workers {
        fleet.start(name, QUICK).await;
    }
    fleet
        .until(secs(60), |f| {
            let counts = f.counts();
            counts.iter().sum::<usize>() == shards
                && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
        })
        .await;
    (source, fleet)
}

/// Checks the safety and error invariants, then shuts every worker down.
async fn finish(fleet: Fleet) {
    fleet.assert_safe();
    fleet.assert_no_errors();
    fleet.shutdown_all().await;
}

fn fleet(source: &StaticShardSource) -> Fleet {
    let mut fleet = Fleet::with_source(Arc::new(InMemoryStore::new()), base(), source.clone());
    fleet.processing = Processing {
        checkpoint_every: None,
        end_after: secs(2),
    };
    fleet
}

#[tokio::test(start_paused = true)]
async fn shards_added_while_running_join_the_balance() {
    let (source, fleet) = running(4, &["a", "b"]).await;

    for i in 4..8 {
        source.add(Shard::new(key(&format!("s{i}"))));
    }
    let took = fleet.until(secs(60), |f| f.counts() == [4, 4]).await;
    figure(
        "discovery: 4 shards added, until held and balanced 4+4",
        took,
    );
    let config = base();
    assert!(
        took <= config.discovery_interval.mul_f64(1.1) + config.effective_taker_interval(),
        "new shards balanced after {took:?}"
    );
    finish(fleet).await;
}

#[tokio::test(start_paused = true)]
async fn removed_shards_are_retired_without_errors() {
    let (source, fleet) = running(6, &["a", "b"]).await;

    source.remove(&key("s0"));
    source.remove(&key("s5"));
    let took = fleet
        .until(secs(300), |f| {
            let held = f.held_keys();
            held.len() == 4 && !held.contains("s0") && !held.contains("s5")
        })
        .await;
    figure(
        "discovery: 2 shards removed, until their leases retired",
        took,
    );
    let config = base();
    assert!(
        took >= config.retire_after,
        "retired within the grace period"
    );
    assert!(
        took <= config.retire_after
            + 2 * config.discovery_interval
            + config.effective_renew_interval()
            + secs(1),
        "retired after {took:?}"
    );
    for gone in ["s0", "s5"] {
        assert!(!fleet.lease_exists(gone).await, "{gone} still in the table");
        let retired = fleet.count(|r| matches!(r, Record::Retired { key, .. } if key == gone));
        assert_eq!(retired, 1, "{gone} retired once");
    }
    fleet.until(secs(60), |f| f.counts() == [2, 2]).await;
    fleet.idle(secs(120)).await;
    assert_eq!(
        fleet.counts().iter().sum::<usize>(),
        4,
        "the retired shards did not come back"
    );
    finish(fleet).await;
}

#[tokio::test(start_paused = true)]
async fn a_split_and_a_merge_keep_every_child_after_its_parents() {
    let (source, fleet) = running(3, &["a", "b", "c"]).await;
    fleet.idle(secs(5)).await;

    // s0 splits into s3 and s4; s1 and s2 merge into s5. The parents still hold data: their
    // applications take `end_after` (2 s) to reach the end once they see them closed.
    let resharded = Instant::now();
    source.split(&key("s0"), [key("s3"), key("s4")]);
    source.merge(&[key("s1"), key("s2")], key("s5"));

    let took = fleet
        .until(secs(120), |f| {
            f.held_keys() == ["s3", "s4", "s5"].map(String::from).into()
        })
        .await;
    figure("discovery: split + merge, until every child held", took);
    fleet.assert_parents_first("s3", &["s0"]);
    fleet.assert_parents_first("s4", &["s0"]);
    fleet.assert_parents_first("s5", &["s1", "s2"]);

    // The children existed in the table, blocked, while their parents were processed.
    let first_child_start = ["s3", "s4", "s5"]
        .iter()
        .filter_map(|c| {
            fleet.records().into_iter().find_map(|r| match r {
                Record::Started { key, at, .. } if key == *c => Some(at),
                _ => None,
            })
        })
        .min()
        .unwrap();
    assert!(first_child_start >= resharded + secs(2));

    // Finished parents are deleted once their children started, and not re-created.
    let deadline = Instant::now() + secs(60);
    for parent in ["s0", "s1", "s2"] {
        while fleet.lease_exists(parent).await {
            assert!(Instant::now() < deadline, "{parent} not deleted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ended = fleet.count(|r| matches!(r, Record::ShardEnded { key, .. } if key == parent));
        assert_eq!(ended, 1, "{parent} released once at its end");
    }
    fleet.idle(secs(120)).await;
    for parent in ["s0", "s1", "s2"] {
        assert!(!fleet.lease_exists(parent).await, "{parent} came back");
        let starts = fleet.count(|r| matches!(r, Record::Started { key, .. } if key == parent));
        assert_eq!(starts, 1, "{parent} processed once");
    }
    finish(fleet).await;
}

/// How many times each worker listed the source since `since`.
fn listings_since(fleet: &Fleet, since: Instant) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (worker, at) in fleet.source_calls.lock().unwrap().iter() {
        if *at >= since {
            *counts.entry(worker.clone()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(start_paused = true)]
async fn discovery_runs_on_one_worker_and_moves_when_it_crashes() {
    let (source, mut fleet) = running(3, &["a", "b", "c"]).await;
    fleet.idle(secs(60)).await;
    let settled = Instant::now() - secs(50);
    // a discovers; b, the standby, lists about once a minute; c never lists.
    let calls = listings_since(&fleet, settled);
    assert!(calls.get("a").copied().unwrap_or(0) >= 4, "{calls:?}");
    assert!(calls.get("b").copied().unwrap_or(0) <= 1, "{calls:?}");
    assert!(!calls.contains_key("c"), "{calls:?}");

    fleet.crash("a");
    let crashed = Instant::now();
    source.add(Shard::new(key("s3")));
    let took = fleet
        .until(secs(120), |f| f.held_keys().contains("s3"))
        .await;
    figure(
        "discovery: discoverer crashed + shard added, until held",
        took,
    );
    let config = base();
    assert!(
        took <= config.lease_duration
            + config.effective_taker_interval()
            + config.discovery_interval.mul_f64(1.1),
        "the new shard was held {took:?} after the discoverer crashed"
    );
    fleet.idle(secs(60)).await;
    let calls = listings_since(
        &fleet,
        crashed + config.lease_duration + config.effective_taker_interval(),
    );
    assert!(
        calls.get("b").copied().unwrap_or(0) >= 4,
        "b took over discovery: {calls:?}"
    );
    assert!(
        calls.get("c").copied().unwrap_or(0) <= 2,
        "c is only the standby: {calls:?}"
    );
    assert!(!calls.contains_key("a"), "{calls:?}");
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_deleted_by_hand_is_recreated_from_its_last_checkpoint() {
    let source = source(2);
    let mut fleet = fleet(&source);
    fleet.processing.checkpoint_every = Some(secs(1));
    fleet.start("a", QUICK).await;
    fleet.until(secs(60), |f| f.counts() == [2]).await;
    fleet.idle(secs(10)).await;

    // Delete s0 under its holder, as an operator might in the console.
    let s0 = key("s0");
    let deadline = Instant::now() + secs(5);
    loop {
        let lease = fleet.store.get(&s0, deadline).await.unwrap().unwrap();
        let deleted = fleet
            .store
            .delete(&s0, lease.nonce, lease.counter, lease.tenure, deadline)
            .await
            .unwrap();
        if let Outcome::Done(_) = deleted {
            break;
        }
    }
    let deleted_at = Instant::now();
    let written: Vec<(String, Instant)> = fleet
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Checkpointed { key, value, at, .. } if key == "s0" => Some((value, at)),
            _ => None,
        })
        .collect();
    assert!(written.len() >= 5, "{written:?}");

    fleet
        .until(secs(30), |f| {
            f.count(|r| matches!(r, Record::Lost { key, .. } if key == "s0")) == 1
        })
        .await;
    // Re-created at the discoverer's listing after the fleet's slow scan found it gone.
    let took = fleet
        .until(base().slow_scan_interval + secs(30), |f| {
            f.count(|r| matches!(r, Record::Started { key, .. } if key == "s0")) == 2
        })
        .await;
    figure(
        "discovery: lease deleted by hand, from Lost until processed again",
        took,
    );
    let resumed_from = fleet
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Started {
                key, checkpoint, ..
            } if key == "s0" => checkpoint,
            _ => None,
        })
        .next_back()
        .expect("restarted from a checkpoint");
    let (_, written_at) = written
        .iter()
        .find(|(value, _)| *value == resumed_from)
        .unwrap_or_else(|| panic!("{resumed_from} was never written: {written:?}"));
    // The checkpoint the last scan before the delete read: scans come every slow scan (or
    // when something changed).
    let scans = base().slow_scan_interval;
    assert!(
        deleted_at - *written_at <= scans + secs(1),
        "resumed from {resumed_from}, written {:?} before the delete",
        deleted_at - *written_at
    );
    fleet.assert_safe();
    fleet.shutdown_all().await;
}

/// A source that fails its first `failures` listings (half of them throttled).
struct FlakySource {
    inner: StaticShardSource,
    failures: std::sync::Mutex<u32>,
}

#[async_trait::async_trait]
impl ShardSource for FlakySource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        let left = {
            let mut failures = self.failures.lock().unwrap();
            let left = *failures;
            *failures = left.saturating_sub(1);
            left
        };
        if left == 0 {
            return self.inner.list_shards().await;
        }
        let err = "service unavailable".into();
        if left % 2 == 0 {
            Err(SourceError::Throttled(err))
        } else {
            Err(SourceError::Failed(err))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_source_is_backed_off_and_no_error_reaches_the_application() {
    let source = source(2);
    let flaky = Arc::new(FlakySource {
        inner: source.clone(),
        failures: std::sync::Mutex::new(4),
    });
    let mut fleet = fleet(&source);
    // The fleet's recording source wraps the flaky one, so every call is timed.
    fleet.source_override = Some(flaky);
    fleet.start("a", QUICK).await;
    let took = fleet.until(secs(600), |f| f.counts() == [2]).await;
    let calls: Vec<Instant> = fleet
        .source_calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, at)| *at)
        .collect();
    assert!(calls.len() >= 5, "{calls:?}");
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).take(4).collect();
    let interval = base().discovery_interval;
    // After n failures the wait is between half and all of interval x 2^(n-1).
    for (n, gap) in gaps.iter().enumerate() {
        let ceiling = interval * (1 << n);
        assert!(
            *gap >= ceiling / 2 && *gap <= ceiling,
            "wait after failure {}: {gap:?}",
            n + 1
        );
    }
    figure("discovery: 4 failed listings, until leases held", took);
    finish(fleet).await;
}

/// Lists of every start of `key`: the checkpoint each started from.
fn starts_of(fleet: &Fleet, key: &str) -> Vec<Option<String>> {
    fleet
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Started {
                key: k, checkpoint, ..
            } if k == key => Some(checkpoint),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_re_elected_discoverer_keeps_a_shard_that_one_listing_missed_and_its_checkpoint() {
    let source = source(4);
    let mut fleet = fleet(&source);
    fleet.processing.checkpoint_every = Some(secs(1));
    for name in ["b", "c"] {
        fleet.start(name, QUICK).await;
    }
    fleet.until(secs(60), |f| f.counts() == [2, 2]).await;
    let listings = |f: &Fleet, by: &str| {
        f.source_calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(w, _)| w == by)
            .count()
    };
    let s0 = source.get(&key("s0")).unwrap();

    // b, the discoverer, misses s0 in one listing (a hiccup of the source)...
    let before = listings(&fleet, "b");
    source.remove(&key("s0"));
    fleet.until(secs(30), |f| listings(f, "b") > before).await;
    source.add(s0.clone());
    // ...then a smaller id joins and discovers for a while, longer than the grace period.
    fleet.start("a", QUICK).await;
    fleet.idle(base().retire_after + secs(30)).await;

    // a leaves; b is elected again, and its first listing misses s0 once more.
    let tenure = |lease: Option<shardlease::lease::Lease>| lease.expect("s0 exists").tenure;
    let before_tenure = tenure(
        fleet
            .store
            .get(&key("s0"), Instant::now() + secs(5))
            .await
            .unwrap(),
    );
    source.remove(&key("s0"));
    let before = listings(&fleet, "b");
    fleet.leave("a").await;
    fleet.until(secs(60), |f| listings(f, "b") > before).await;
    source.add(s0);
    fleet.idle(secs(120)).await;

    let retired = fleet.count(|r| matches!(r, Record::Retired { key, .. } if key == "s0"));
    assert_eq!(retired, 0, "a live shard was retired on one missed listing");
    // Never deleted (and re-created at tenure 0) in between.
    let now_tenure = tenure(
        fleet
            .store
            .get(&key("s0"), Instant::now() + secs(5))
            .await
            .unwrap(),
    );
    assert!(
        now_tenure >= before_tenure,
        "s0 was deleted and re-created: tenure {before_tenure} then {now_tenure}"
    );
    let starts = starts_of(&fleet, "s0");
    assert_eq!(starts[0], None, "{starts:?}");
    assert!(
        starts[1..].iter().all(Option::is_some),
        "s0 started again from scratch: its checkpoint was forgotten: {starts:?}"
    );
    finish(fleet).await;
}

/// A source every listing of which fails, as on a host denied the listing call.
struct DeniedSource;

#[async_trait::async_trait]
impl ShardSource for DeniedSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        Err(SourceError::Failed("access denied".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_discoverer_that_cannot_list_is_relieved_by_the_standby_within_a_standby_period() {
    let source = source(2);
    let mut fleet = fleet(&source);
    // a, the smallest id, is denied every listing; b lists the real source.
    fleet.source_override = Some(Arc::new(DeniedSource));
    fleet.start("a", QUICK).await;
    fleet.source_override = None;
    fleet.start("b", QUICK).await;
    let config = base();
    // One standby period, give or take its jitter, plus a taker round and the quiet period.
    let bound = config.discovery_interval * 6 * 11 / 10
        + config.effective_taker_interval()
        + config.quiet_period;
    let took = fleet
        .until(secs(600), |f| f.counts().iter().sum::<usize>() == 2)
        .await;
    assert!(took <= bound, "first leases created after {took:?}");

    // Later changes are discovered too, while a keeps failing.
    fleet.idle(secs(120)).await;
    source.add(Shard::new(key("s2")));
    let took = fleet
        .until(secs(600), |f| f.held_keys().contains("s2"))
        .await;
    figure(
        "discovery: the discoverer cannot list + shard added, until held",
        took,
    );
    assert!(took <= bound, "s2 held after {took:?}");
    let calls = listings_since(&fleet, Instant::now() - secs(200));
    assert!(
        calls.get("a").copied().unwrap_or(0) >= 2,
        "a is still elected: {calls:?}"
    );
    assert!(calls.get("b").copied().unwrap_or(0) >= 2, "{calls:?}");
    finish(fleet).await;
}
