//! The LogHub consumer end to end, in real time, against the LogHub emulator
//! (`loghub-emulator/`) run in this process, with the official SDK as client: several
//! consumers in one process on an in-memory lease table. A ledger records every log group each
//! processor sees and flags two workers inside one shard's `process` at once.
//!
//! The SDK reaches the emulator as its HTTP proxy (it puts the project in the host name), so
//! this target has no libtest harness: `main` sets `http_proxy` before any thread exists, then
//! runs the cases one by one (the emulator's test runner, shared with its own tests).

#[path = "../loghub-emulator/tests/common/mod.rs"]
mod emulator;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use emulator::{group, Case, CaseFuture, Ctx};
use serde_json::json;
use shardlease::lease::Lease;
use shardlease::loghub::{
    BatchOutcome, ConsumerEvent, ConsumerGroup, CursorCheckpointer, FailureAction, LogBatch,
    LogGroupProcessor, LogHubConfig, LogHubConsumer, LogHubError, ProcessError, ShardStart,
};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::LeaseStore;
use shardlease::worker::StopReason;
use shardlease::{LeaseKey, WorkerConfig, WorkerId, SHARD_END};
use shardlease_loghub_emulator::Emulator;
use tokio::time::Instant;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        (
            "every_log_group_is_processed_in_order_and_a_crashed_workers_shards_resume_from_their_checkpoints",
            failover,
        ),
        (
            "a_joining_worker_gets_its_share_by_handoff_after_the_old_owner_checkpoints_and_the_quiet_period",
            handoff_and_hold,
        ),
        (
            "a_split_and_a_merge_are_followed_children_only_after_their_parents_ended",
            split_and_merge,
        ),
        (
            "quotas_and_server_errors_are_retried_and_nothing_is_lost",
            faults,
        ),
        (
            "a_poison_batch_is_delivered_again_then_skipped_with_its_checkpoint",
            poison,
        ),
        (
            "checkpoints_are_mirrored_into_the_consumer_group",
            mirror,
        ),
        (
            "an_expired_cursor_reads_on_from_the_shards_oldest_log_group",
            invalid_cursor,
        ),
        (
            "a_missing_project_or_logstore_fails_the_start_in_one_line",
            startup_errors,
        ),
    ];
    emulator::run(Emulator::new(), cases)
}

/// The test lease settings: failover within seconds, a discovery every 500 ms.
fn worker_config() -> WorkerConfig {
    WorkerConfig::default()
        .lease_duration(Duration::from_secs(2))
        .discovery_interval(Duration::from_millis(500))
}

fn config() -> LogHubConfig {
    LogHubConfig::default()
        .pull_count(5)
        .min_call_interval(Duration::from_millis(50))
        .idle_time_between_reads(Duration::from_millis(100))
        .max_backoff(Duration::from_secs(1))
        .retry_backoff(Duration::from_millis(100))
}

/// One log group as a worker processed it.
#[derive(Debug, Clone)]
struct Processed {
    worker: String,
    shard: String,
    value: u64,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Which worker is inside `process` of each shard right now.
    busy: HashMap<String, String>,
    processed: Vec<Processed>,
    starts: Vec<(String, ShardStart, Instant)>,
    stops: Vec<(String, String, Instant)>,
    ends: Vec<(String, Instant)>,
    violations: Vec<String>,
}

impl Ledger {
    /// The distinct values processed.
    fn distinct(&self) -> HashSet<u64> {
        self.processed.iter().map(|p| p.value).collect()
    }
}

/// Records what it processes; checkpoints after every batch. Fails every batch holding
/// `poison`.
struct Recorder {
    worker: String,
    shard: String,
    ledger: Arc<Mutex<Ledger>>,
    poison: Option<u64>,
}

fn numbers(batch: &LogBatch) -> Vec<u64> {
    emulator::values(&batch.log_groups)
        .iter()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[async_trait]
impl LogGroupProcessor for Recorder {
    async fn initialize(&mut self, start: &ShardStart) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger
            .starts
            .push((self.worker.clone(), start.clone(), Instant::now()));
    }

    async fn process(
        &mut self,
        batch: &LogBatch,
        checkpointer: &CursorCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        let values = numbers(batch);
        if self.poison.is_some_and(|p| values.contains(&p)) {
            return Err("poison".into());
        }
        {
            let mut ledger = self.ledger.lock().unwrap();
            if let Some(other) = ledger.busy.insert(self.shard.clone(), self.worker.clone()) {
                let message = format!(
                    "{}: {} processing while {other} was",
                    self.shard, self.worker
                );
                ledger.violations.push(message);
            }
            for value in values {
                ledger.processed.push(Processed {
                    worker: self.worker.clone(),
                    shard: self.shard.clone(),
                    value,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.ledger.lock().unwrap().busy.remove(&self.shard);
        checkpointer.checkpoint(batch).await?;
        Ok(BatchOutcome::Continue)
    }

    async fn shard_ended(&mut self, checkpointer: &CursorCheckpointer) {
        checkpointer.end_of_shard().await.unwrap();
        let mut ledger = self.ledger.lock().unwrap();
        ledger.ends.push((self.shard.clone(), Instant::now()));
    }

    async fn stop_requested(&mut self, reason: &StopReason, _: &CursorCheckpointer) {
        let mut ledger = self.ledger.lock().unwrap();
        let why = format!("{reason:?}");
        ledger.stops.push((
            self.worker.clone(),
            format!("{} {why}", self.shard),
            Instant::now(),
        ));
    }
}

/// Writes log groups `0, 1, 2, ...` (load-balanced over the readwrite shards).
struct Producer {
    ctx: Ctx,
    project: String,
    logstore: String,
    next: u64,
}

impl Producer {
    async fn put(&mut self, count: u64) {
        let client = self.ctx.client();
        for _ in 0..count {
            client
                .put_logs(&self.project, &self.logstore)
                .log_group(group(&self.next.to_string()))
                .send()
                .await
                .expect("PutLogs");
            self.next += 1;
        }
    }
}

/// Everything a case's consumers share.
struct Fleet {
    ctx: Ctx,
    project: String,
    logstore: String,
    store: Arc<dyn LeaseStore>,
    ledger: Arc<Mutex<Ledger>>,
    events: Arc<Mutex<Vec<(String, ConsumerEvent)>>>,
}

impl Fleet {
    async fn new(ctx: &Ctx, shards: i32) -> Self {
        let (project, logstore) = ctx.logstore(shards).await;
        Self {
            ctx: ctx.clone(),
            project,
            logstore,
            store: Arc::new(InMemoryStore::new()),
            ledger: Arc::default(),
            events: Arc::default(),
        }
    }

    fn producer(&self) -> Producer {
        Producer {
            ctx: self.ctx.clone(),
            project: self.project.clone(),
            logstore: self.logstore.clone(),
            next: 0,
        }
    }

    async fn start(
        &self,
        worker: &str,
        workers: WorkerConfig,
        config: LogHubConfig,
        poison: Option<u64>,
    ) -> LogHubConsumer {
        let (name, ledger, sink) = (
            worker.to_owned(),
            Arc::clone(&self.ledger),
            Arc::clone(&self.events),
        );
        let who = name.clone();
        LogHubConsumer::builder(
            self.ctx.client(),
            &self.project,
            &self.logstore,
            Arc::clone(&self.store),
            WorkerId::new(worker).unwrap(),
        )
        .worker_config(workers)
        .config(config)
        .on_event(move |event| sink.lock().unwrap().push((who.clone(), event)))
        .processor(move |shard: &LeaseKey| Recorder {
            worker: name.clone(),
            shard: shard.to_string(),
            ledger: Arc::clone(&ledger),
            poison,
        })
        .start()
        .await
        .expect("the consumer starts")
    }

    async fn until(&self, what: &str, done: impl Fn(&Ledger) -> bool) -> Duration {
        let started = Instant::now();
        loop {
            if done(&self.ledger.lock().unwrap()) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "not reached within 60 s: {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// No two workers inside one shard at once; each shard's first deliveries in write order.
    fn assert_safe_and_ordered(&self) {
        let ledger = self.ledger.lock().unwrap();
        assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
        let mut seen = HashSet::new();
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        for p in &ledger.processed {
            if !seen.insert(p.value) {
                continue;
            }
            if let Some(before) = last.insert(&p.shard, p.value) {
                assert!(
                    before < p.value,
                    "shard {}: {} after {before}",
                    p.shard,
                    p.value
                );
            }
        }
    }

    async fn checkpoint_of(&self, key: &str) -> Option<String> {
        self.lease(key).await.and_then(|l| l.checkpoint)
    }

    /// The lease named `key` as the table holds it now, `None` when there is none.
    async fn lease(&self, key: &str) -> Option<Lease> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let snapshot = self.store.snapshot(deadline).await.unwrap();
        snapshot
            .leases
            .into_iter()
            .find(|l| l.key.as_str() == key)
            .map(std::sync::Arc::unwrap_or_clone)
    }
}

fn failover(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 4).await;
        let mut producer = fleet.producer();
        producer.put(40).await;
        let a = fleet.start("a", worker_config(), config(), None).await;
        let b = fleet.start("b", worker_config(), config(), None).await;
        fleet
            .until("the first 40 processed", |l| l.distinct().len() == 40)
            .await;
        let crashed = a.worker().held_leases();
        assert!(!crashed.is_empty(), "a holds some shards");
        drop(a); // a crash: its leases expire
        let killed = Instant::now();
        producer.put(40).await;
        let resumed = fleet
            .until("every log group processed after the crash", |l| {
                l.distinct().len() == 80
            })
            .await;
        println!(
            "FIGURE loghub_failover the crashed worker's {} shards read again {:.1} s after the crash",
            crashed.len(),
            killed.elapsed().as_secs_f64()
        );
        assert!(resumed < Duration::from_secs(30));
        fleet.assert_safe_and_ordered();
        // Duplicates only after the crash: what followed its last checkpoints.
        {
            let ledger = fleet.ledger.lock().unwrap();
            let mut counts: HashMap<u64, u32> = HashMap::new();
            for p in &ledger.processed {
                *counts.entry(p.value).or_default() += 1;
            }
            assert!(
                ledger
                    .processed
                    .iter()
                    .all(|p| p.value < 40 || p.worker == "b"),
                "after the crash only b reads"
            );
            let twice: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
            assert!(
                twice.iter().all(|(v, _)| **v < 40),
                "repeats only of what the crashed worker read: {twice:?}"
            );
        }
        b.shutdown().await;
    })
}

fn handoff_and_hold(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 4).await;
        let mut producer = fleet.producer();
        producer.put(20).await;
        let hold = Duration::from_secs(1);
        let workers = worker_config().quiet_period(hold);
        let a = fleet.start("a", workers.clone(), config(), None).await;
        fleet
            .until("a holds and reads all four shards", |l| {
                l.distinct().len() == 20 && l.starts.len() == 4
            })
            .await;
        let b = fleet.start("b", workers, config(), None).await;
        fleet
            .until("b started two shards", |l| {
                l.starts.iter().filter(|(w, ..)| w == "b").count() == 2
            })
            .await;
        producer.put(20).await;
        fleet
            .until("every log group processed", |l| l.distinct().len() == 40)
            .await;
        fleet.assert_safe_and_ordered();
        {
            let ledger = fleet.ledger.lock().unwrap();
            for (_, start, started) in ledger.starts.iter().filter(|(w, ..)| w == "b") {
                let shard = start.shard.as_str();
                let (_, _, stopped) = ledger
                    .stops
                    .iter()
                    .find(|(w, what, _)| w == "a" && what.starts_with(&format!("{shard} Handoff")))
                    .expect("a was asked to hand the shard over");
                let held = started.duration_since(*stopped);
                println!("FIGURE loghub_hold shard {shard}: started {:.2} s after its old owner was asked to stop (quiet period {hold:?})", held.as_secs_f64());
                assert!(
                    held >= hold,
                    "shard {shard} started {held:?} after the handoff"
                );
                assert!(start.checkpoint.is_some(), "b starts from a's checkpoint");
            }
            let twice = ledger.processed.len() - ledger.distinct().len();
            assert_eq!(twice, 0, "a graceful handoff repeats nothing");
        }
        a.shutdown().await;
        b.shutdown().await;
    })
}

fn split_and_merge(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 2).await;
        let mut producer = fleet.producer();
        producer.put(10).await;
        let a = fleet.start("a", worker_config(), config(), None).await;
        fleet
            .until("the first 10 processed", |l| l.distinct().len() == 10)
            .await;
        let path = format!("/logstores/{}/shards/0", fleet.logstore);
        let split = ctx
            .call(
                "POST",
                Some(&fleet.project),
                &path,
                &[
                    ("action", "split"),
                    ("key", "40000000000000000000000000000000"),
                ],
                &[],
                b"",
            )
            .await;
        assert_eq!(
            split.status,
            200,
            "{}",
            String::from_utf8_lossy(&split.body)
        );
        producer.put(10).await;
        // Shards now: 0 (readonly), 1, 2 and 3 (children of 0). Merge 2 and 3 into 4.
        fleet
            .until("the children of 0 started", |l| {
                ["2", "3"]
                    .iter()
                    .all(|c| l.starts.iter().any(|(_, s, _)| s.shard.as_str() == *c))
            })
            .await;
        let path = format!("/logstores/{}/shards/2", fleet.logstore);
        let merge = ctx
            .call(
                "POST",
                Some(&fleet.project),
                &path,
                &[("action", "merge")],
                &[],
                b"",
            )
            .await;
        assert_eq!(
            merge.status,
            200,
            "{}",
            String::from_utf8_lossy(&merge.body)
        );
        producer.put(10).await;
        fleet
            .until("every log group processed, the merged child started", |l| {
                l.distinct().len() == 30 && l.starts.iter().any(|(_, s, _)| s.shard.as_str() == "4")
            })
            .await;
        fleet.assert_safe_and_ordered();
        {
            let ledger = fleet.ledger.lock().unwrap();
            let ended = |shard: &str| {
                ledger
                    .ends
                    .iter()
                    .find(|(s, _)| s == shard)
                    .map(|(_, at)| *at)
                    .unwrap_or_else(|| panic!("shard {shard} read to its end"))
            };
            for (child, parents) in [("2", vec!["0"]), ("3", vec!["0"]), ("4", vec!["2", "3"])] {
                let (_, start, started) = ledger
                    .starts
                    .iter()
                    .find(|(_, s, _)| s.shard.as_str() == child)
                    .unwrap();
                let named: Vec<&str> = start.parents.iter().map(LeaseKey::as_str).collect();
                assert_eq!(named, parents, "shard {child}'s parents");
                for parent in parents {
                    assert!(
                        ended(parent) <= *started,
                        "{child} started before {parent} ended"
                    );
                }
            }
        }
        // The parent's lease ends at SHARD_END; the discoverer deletes it once its children
        // have started, so by now it may be gone, never left at an earlier checkpoint.
        if let Some(parent) = fleet.lease("0").await {
            assert_eq!(parent.checkpoint.as_deref(), Some(SHARD_END));
        }
        a.shutdown().await;
    })
}

fn faults(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 1).await;
        let mut producer = fleet.producer();
        producer.put(10).await;
        for (status, code, times) in [(403, "ReadQuotaExceed", 3), (500, "InternalServerError", 2)]
        {
            ctx.fault(json!({
                "api": "PullLogs", "project": fleet.project, "status": status,
                "errorCode": code, "errorMessage": "injected", "times": times,
            }))
            .await;
        }
        let a = fleet.start("a", worker_config(), config(), None).await;
        fleet
            .until("every log group processed through the faults", |l| {
                l.distinct().len() == 10
            })
            .await;
        let counts = ctx.counts().await;
        assert!(
            counts["apis"]["PullLogs"].as_u64().unwrap() >= 6,
            "{counts}"
        );
        {
            let events = fleet.events.lock().unwrap();
            assert!(
                !events
                    .iter()
                    .any(|(_, e)| matches!(e, ConsumerEvent::ReadFailed { .. })),
                "retried, not refused"
            );
        }
        fleet.assert_safe_and_ordered();
        // A shard LogHub refuses for good (here: every PullLogs answered ShardNotExist) ends
        // the loop, reported, and the lease is released after max_backoff.
        ctx.fault(json!({
            "api": "PullLogs", "project": fleet.project, "status": 404,
            "errorCode": "ShardNotExist", "errorMessage": "injected", "times": 1,
        }))
        .await;
        producer.put(1).await;
        let started = Instant::now();
        loop {
            let refused = fleet.events.lock().unwrap().iter().any(|(_, e)| {
                matches!(e, ConsumerEvent::ReadFailed { error, .. } if error.contains("ShardNotExist"))
            });
            if refused {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the refusal is reported"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        fleet
            .until("read again after the release", |l| l.distinct().len() == 11)
            .await;
        a.shutdown().await;
    })
}

fn poison(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 1).await;
        let mut producer = fleet.producer();
        producer.put(3).await;
        let policy = config()
            .pull_count(1)
            .batch_attempts(3)
            .on_failure(FailureAction::Skip);
        let a = fleet.start("a", worker_config(), policy, Some(1)).await;
        producer.put(2).await;
        fleet
            .until("everything but the poison processed", |l| {
                l.distinct() == HashSet::from([0, 2, 3, 4])
            })
            .await;
        {
            let events = fleet.events.lock().unwrap();
            let failed: Vec<BatchOutcome> = events
                .iter()
                .filter_map(|(_, e)| match e {
                    ConsumerEvent::BatchFailed { then, .. } => Some(*then),
                    _ => None,
                })
                .collect();
            assert_eq!(
                failed,
                [BatchOutcome::Retry, BatchOutcome::Retry, BatchOutcome::Skip],
                "3 deliveries, then skipped"
            );
        }
        a.shutdown().await;
    })
}

fn mirror(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 2).await;
        let mut producer = fleet.producer();
        producer.put(20).await;
        let interval = Duration::from_millis(200);
        let group = ConsumerGroup::new("console-view").interval(interval);
        let a = fleet
            .start("a", worker_config(), config().consumer_group(group), None)
            .await;
        fleet
            .until("every log group processed", |l| l.distinct().len() == 20)
            .await;
        let client = ctx.client();
        let started = Instant::now();
        loop {
            let answer = client
                .get_consumer_group_checkpoint(&fleet.project, &fleet.logstore, "console-view")
                .send()
                .await
                .expect("GetCheckPoint");
            let mut equal = 0;
            for checkpoint in answer.get_body().checkpoints() {
                let key = checkpoint.shard_id().to_string();
                if fleet.checkpoint_of(&key).await.as_deref()
                    == Some(checkpoint.checkpoint().as_str())
                {
                    equal += 1;
                }
            }
            if equal == 2 {
                println!(
                    "FIGURE loghub_mirror the consumer group's checkpoints equal the table's {:.2} s after the last batch (interval {interval:?})",
                    started.elapsed().as_secs_f64()
                );
                break;
            }
            assert!(
                started.elapsed() < interval * 10,
                "the group's checkpoints follow the table's within an interval or two"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        a.shutdown().await;
    })
}

fn invalid_cursor(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let fleet = Fleet::new(&ctx, 1).await;
        let mut producer = fleet.producer();
        producer.put(5).await;
        // A lease whose checkpoint no longer points into the shard.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut lease = shardlease::lease::NewLease::new(LeaseKey::new("0").unwrap());
        lease.checkpoint = Some("bm90LWEtY3Vyc29y".into());
        let created = fleet.store.create(lease, deadline).await.unwrap();
        assert!(matches!(created, shardlease::store::Outcome::Done(_)));
        let a = fleet.start("a", worker_config(), config(), None).await;
        fleet
            .until("read from the oldest log group", |l| {
                l.distinct().len() == 5
            })
            .await;
        {
            let events = fleet.events.lock().unwrap();
            assert!(events
                .iter()
                .any(|(_, e)| matches!(e, ConsumerEvent::CursorInvalid { cursor, .. } if cursor == "bm90LWEtY3Vyc29y")));
        }
        a.shutdown().await;
    })
}

fn startup_errors(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let start = |project: String, logstore: String| {
            let client = ctx.client();
            async move {
                LogHubConsumer::builder(
                    client,
                    project,
                    logstore,
                    Arc::new(InMemoryStore::new()),
                    WorkerId::new("a").unwrap(),
                )
                .processor(|shard: &LeaseKey| Recorder {
                    worker: "a".into(),
                    shard: shard.to_string(),
                    ledger: Arc::default(),
                    poison: None,
                })
                .start()
                .await
            }
        };
        let missing_project = start("no-such-project".into(), logstore.clone()).await;
        let err = missing_project.expect_err("refused");
        assert!(
            matches!(
                err,
                shardlease::loghub::ConsumerError::LogHub(LogHubError::ProjectNotFound { .. })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("no-such-project"), "{err}");
        let missing_store = start(project.clone(), "no-such-store".into()).await;
        let err = missing_store.expect_err("refused");
        assert!(
            matches!(
                err,
                shardlease::loghub::ConsumerError::LogHub(LogHubError::LogstoreNotFound { .. })
            ),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'), "one line: {err}");
        let bad = LogHubConfig::default().pull_count(0);
        let client = ctx.client();
        let refused = LogHubConsumer::builder(
            client,
            project,
            logstore,
            Arc::new(InMemoryStore::new()),
            WorkerId::new("a").unwrap(),
        )
        .config(bad)
        .processor(|_: &LeaseKey| Recorder {
            worker: "a".into(),
            shard: String::new(),
            ledger: Arc::default(),
            poison: None,
        })
        .start()
        .await;
        assert!(refused
            .err()
            .is_some_and(|e| e.to_string().contains("pull_count")));
    })
}
