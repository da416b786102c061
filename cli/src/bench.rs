//! `bench`: what the library does on a DynamoDB endpoint the user names. A small fleet of real
//! workers runs in this process on a table of its own, made for the run and deleted after it:
//! it balances, rests while its requests are counted, loses one worker to a crash (its tasks
//! dropped without a write, as a killed process's), lets another leave gracefully, starts a
//! new one, and prints the failover, the handover, the join, the items processed twice and the
//! requests per lease-hour.
//!
//! Each lease's application processes numbered items, ten a second, and checkpoints the last
//! one every second and when it is asked to stop; a new holder resumes after the checkpoint.
//! While the requests at rest are counted the applications hold their periodic checkpoints, so
//! that the count is the library's own (its beats, its reads, its scans). An
//! item processed a second time is a duplicate (after a crash, those since the last
//! checkpoint); two workers processing one lease at the same instant is an overlap (never).
//! Requests are counted by the SDK client, every attempt (a retry is billed as a request).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::Client;
use serde_json::{json, Value};
use shardlease::lease::{LeaseKey, WorkerId};
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker};
use shardlease::WorkerConfig;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::connect::{table_exists, Target};
use crate::{text, Error};

/// How often an application processes an item.
const ITEM: Duration = Duration::from_millis(100);
/// An application checkpoints after this many items.
const CHECKPOINT_EVERY: u64 = 10;
/// How often the phases look at the ledger.
const LOOK: Duration = Duration::from_millis(50);
/// Longer than an application takes to checkpoint again ([`CHECKPOINT_EVERY`] items), or to
/// process again what came after its lease's last checkpoint.
const SETTLE: Duration = Duration::from_secs(2);

/// The run, from the command line (the endpoint and the table's name come from `Target`).
pub struct Bench {
    pub workers: usize,
    pub leases: usize,
    pub lease: Duration,
    pub rest: Duration,
    pub keep_table: bool,
}

/// Counts the requests the client sends, by operation.
#[derive(Debug, Clone, Default)]
struct Requests(Arc<Mutex<BTreeMap<String, u64>>>);

impl Requests {
    fn counts(&self) -> BTreeMap<String, u64> {
        lock(&self.0).clone()
    }
}

impl Intercept for Requests {
    fn name(&self) -> &'static str {
        "shardlease-bench-requests"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // `X-Amz-Target: DynamoDB_20120810.UpdateItem`
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|target| target.rsplit('.').next())
            .unwrap_or("other")
            .to_owned();
        *lock(&self.0).entry(operation).or_default() += 1;
        Ok(())
    }
}

/// What the applications did.
#[derive(Debug, Default)]
struct Ledger {
    /// The workers processing each lease now.
    processing: HashMap<LeaseKey, Vec<usize>>,
    /// Every start: the lease, the worker, when.
    starts: Vec<(LeaseKey, usize, Instant)>,
    /// Starts while another worker processed the lease.
    overlaps: u64,
    /// The highest item processed per lease: items come in order from the checkpoint, so one
    /// at or below it was processed before.
    highest: HashMap<LeaseKey, u64>,
    duplicates: u64,
    /// The applications hold their periodic checkpoints (while requests at rest are counted).
    quiet: bool,
}

impl Ledger {
    fn start(&mut self, key: &LeaseKey, worker: usize) {
        let holders = self.processing.entry(key.clone()).or_default();
        if !holders.is_empty() {
            self.overlaps += 1;
        }
        holders.push(worker);
        self.starts.push((key.clone(), worker, Instant::now()));
    }

    fn stop(&mut self, key: &LeaseKey, worker: usize) {
        if let Some(holders) = self.processing.get_mut(key) {
            holders.retain(|w| *w != worker);
            if holders.is_empty() {
                self.processing.remove(key);
            }
        }
    }

    fn item(&mut self, key: &LeaseKey, item: u64) {
        match self.highest.get_mut(key) {
            Some(highest) if item <= *highest => self.duplicates += 1,
            Some(highest) => *highest = item,
            None => {
                self.highest.insert(key.clone(), item);
            }
        }
    }

    /// The leases `worker` processes now.
    fn held_by(&self, worker: usize) -> Vec<LeaseKey> {
        self.processing
            .iter()
            .filter(|(_, holders)| holders.contains(&worker))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Every lease processed by exactly one of `running`, their counts within one.
    fn balanced(&self, running: &[usize], leases: usize) -> bool {
        if self.processing.len() != leases {
            return false;
        }
        let mut counts: HashMap<usize, usize> = running.iter().map(|w| (*w, 0)).collect();
        for holders in self.processing.values() {
            match holders.as_slice() {
                [one] => match counts.get_mut(one) {
                    Some(count) => *count += 1,
                    None => return false,
                },
                _ => return false,
            }
        }
        let (min, max) = (counts.values().min(), counts.values().max());
        matches!((min, max), (Some(min), Some(max)) if max - min <= 1)
    }

    /// For each of `keys`, the time from `since` to its first start by another worker than
    /// `from`, if it came.
    fn moved_after(&self, keys: &[LeaseKey], from: usize, since: Instant) -> Vec<Option<Duration>> {
        keys.iter()
            .map(|key| {
                self.starts
                    .iter()
                    .find(|(k, w, at)| k == key && *w != from && *at >= since)
                    .map(|(_, _, at)| *at - since)
            })
            .collect()
    }
}

/// One worker of the fleet and its applications.
struct Member {
    worker: Option<Worker>,
    apps: Arc<Mutex<Vec<AbortHandle>>>,
    events: AbortHandle,
}

impl Member {
    /// The process dies: its applications stop where they are, the worker writes nothing.
    fn crash(mut self, index: usize, ledger: &Mutex<Ledger>) {
        self.events.abort();
        for app in lock(&self.apps).drain(..) {
            app.abort();
        }
        let mut ledger = lock(ledger);
        for key in ledger.held_by(index) {
            ledger.stop(&key, index);
        }
        drop(ledger);
        drop(self.worker.take());
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lease's application: items in order from the checkpoint, a checkpoint every
/// [`CHECKPOINT_EVERY`] and on a graceful stop.
async fn process(mut grant: LeaseGrant, worker: usize, ledger: Arc<Mutex<Ledger>>) {
    let key = grant.key().clone();
    let mut next = grant
        .initial_checkpoint()
        .and_then(|c| c.parse::<u64>().ok())
        .map_or(0, |c| c + 1);
    lock(&ledger).start(&key, worker);
    let mut tick = tokio::time::interval(ITEM);
    let mut unsaved = 0;
    let reason = loop {
        tokio::select! {
            reason = grant.stopped() => break reason,
            _ = tick.tick() => {
                lock(&ledger).item(&key, next);
                next += 1;
                unsaved += 1;
                let due = unsaved >= CHECKPOINT_EVERY && !lock(&ledger).quiet;
                if due && grant.checkpoint(&(next - 1).to_string()).await.is_ok() {
                    unsaved = 0;
                }
            }
        }
    };
    if reason != StopReason::Lost && next > 0 {
        if let Err(err) = grant.checkpoint(&(next - 1).to_string()).await {
            eprintln!("bench: the last checkpoint of {key} failed: {err}");
        }
    }
    lock(&ledger).stop(&key, worker);
    grant.finish();
}

async fn start_member(
    store: Arc<dyn LeaseStore>,
    id: WorkerId,
    index: usize,
    config: WorkerConfig,
    shards: Vec<LeaseKey>,
    ledger: Arc<Mutex<Ledger>>,
) -> Result<Member, Error> {
    let (worker, mut events) = Worker::builder(store, id)
        .config(config)
        .shards(shards)
        .start()
        .await?;
    let apps: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
    let spawned = Arc::clone(&apps);
    let events = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(grant) = event {
                let app = tokio::spawn(process(grant, index, Arc::clone(&ledger)));
                let mut apps = lock(&spawned);
                apps.retain(|a| !a.is_finished());
                apps.push(app.abort_handle());
            }
        }
    })
    .abort_handle();
    Ok(Member {
        worker: Some(worker),
        apps,
        events,
    })
}

/// Waits until `done` or `limit`; `Err` names `what` did not happen in time.
async fn until(
    what: &str,
    limit: Duration,
    ledger: &Mutex<Ledger>,
    mut done: impl FnMut(&Ledger) -> bool,
) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        if done(&lock(ledger)) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("{what} within {}", humantime::format_duration(limit)).into());
        }
        tokio::time::sleep(LOOK).await;
    }
}

/// p50 and max of `times`, with their count and the ones that never came.
fn summary(times: &[Option<Duration>]) -> Value {
    let mut came: Vec<f64> = times.iter().flatten().map(Duration::as_secs_f64).collect();
    came.sort_by(f64::total_cmp);
    let p50 = (!came.is_empty()).then(|| came[(came.len() - 1) / 2]);
    json!({
        "n": times.len(),
        "missing": times.len() - came.len(),
        "p50_s": p50.map(round),
        "max_s": came.last().copied().map(round),
    })
}

fn round(secs: f64) -> f64 {
    (secs * 1000.0).round() / 1000.0
}

/// Refuses a fleet the run cannot measure, before anything is created.
fn check(bench: &Bench, config: &WorkerConfig) -> Result<(), Error> {
    if bench.workers < 3 {
        return Err(format!(
            "--workers {}: at least 3 (one crashes, one leaves, one stays)",
            bench.workers
        )
        .into());
    }
    if bench.leases < bench.workers {
        return Err(format!(
            "--leases {} is fewer than --workers {}: every worker must hold one",
            bench.leases, bench.workers
        )
        .into());
    }
    if bench.rest < Duration::from_secs(1) {
        return Err("--rest must be at least 1s".into());
    }
    config.validate().map_err(|e| format!("--lease: {e}"))?;
    Ok(())
}

/// Ctrl-C or SIGTERM: the run stops, and its table is deleted all the same.
async fn interrupted() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// `bench`.
pub async fn run(target: &Target, bench: Bench, json_out: bool) -> Result<(), Error> {
    let config = WorkerConfig::default().lease_duration(bench.lease);
    check(&bench, &config)?;
    let table = target.table.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("shardlease-bench-{secs}-{}", std::process::id())
    });
    let requests = Requests::default();
    let dynamo = target.client_config().await.interceptor(requests.clone());
    let client = Client::from_conf(dynamo.build());
    if table_exists(&client, &table).await {
        return Err(format!(
            "table {table:?} exists: bench makes a table of its own and deletes it after the \
             run; name a table that does not exist with --table, or leave --table out"
        )
        .into());
    }
    eprintln!("bench: creating table {table}");
    let store = DynamoStore::connect(
        client.clone(),
        DynamoConfig::new(&table).create_if_missing(true),
    )
    .await?;
    let outcome = tokio::select! {
        outcome = fleet(&bench, config, Arc::new(store), &requests) => outcome,
        signal = interrupted() => Err(format!("interrupted by {signal}").into()),
    };
    let deleted = if bench.keep_table {
        false
    } else {
        match client.delete_table().table_name(&table).send().await {
            Ok(_) => true,
            Err(err) => {
                eprintln!(
                    "bench: could not delete table {table}: {}; delete it yourself",
                    text::chain(&err)
                );
                false
            }
        }
    };
    let mut report = outcome?;
    report["table"] = json!(table);
    report["table_deleted"] = json!(deleted);
    if json_out {
        println!("{report}");
    } else {
        print_report(&report);
    }
    Ok(())
}

/// The fleet's run: start, rest, crash, leave, join; the report as JSON.
async fn fleet(
    bench: &Bench,
    config: WorkerConfig,
    store: Arc<dyn LeaseStore>,
    requests: &Requests,
) -> Result<Value, Error> {
    let mut fleet = Fleet::new(bench, config, store)?;
    let balanced_s = fleet.start().await?;
    let at_rest = fleet.rest(requests).await;
    let crash = fleet.crash().await?;
    let leave = fleet.leave().await?;
    let join = fleet.join().await?;
    fleet.stop().await;
    let sent: u64 = requests.counts().values().sum();
    Ok(json!({
        "command": "bench",
        "workers": bench.workers,
        "leases": bench.leases,
        "lease_s": bench.lease.as_secs_f64(),
        "balanced_s": round(balanced_s),
        "at_rest": at_rest,
        "crash": crash,
        "leave": leave,
        "join": join,
        "overlaps": lock(&fleet.ledger).overlaps,
        "requests_sent": sent,
    }))
}

/// The workers of the run, by index (`None`: crashed or gone), and their applications' ledger.
struct Fleet<'a> {
    bench: &'a Bench,
    config: WorkerConfig,
    store: Arc<dyn LeaseStore>,
    shards: Vec<LeaseKey>,
    ledger: Arc<Mutex<Ledger>>,
    members: Vec<Option<Member>>,
    /// How long a phase may take: six leases and a minute.
    limit: Duration,
}

impl<'a> Fleet<'a> {
    fn new(
        bench: &'a Bench,
        config: WorkerConfig,
        store: Arc<dyn LeaseStore>,
    ) -> Result<Self, Error> {
        let shards = (0..bench.leases)
            .map(|i| LeaseKey::new(format!("bench-shard-{i:04}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            bench,
            config,
            store,
            shards,
            ledger: Arc::default(),
            members: Vec::new(),
            limit: bench.lease * 6 + Duration::from_secs(60),
        })
    }

    /// Starts one more worker.
    async fn add(&mut self) -> Result<(), Error> {
        let index = self.members.len();
        let id = WorkerId::new(format!("bench-{}-{index}", std::process::id()))?;
        let member = start_member(
            Arc::clone(&self.store),
            id,
            index,
            self.config.clone(),
            self.shards.clone(),
            Arc::clone(&self.ledger),
        )
        .await?;
        self.members.push(Some(member));
        Ok(())
    }

    fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].is_some())
            .collect()
    }

    fn duplicates(&self) -> u64 {
        lock(&self.ledger).duplicates
    }

    /// Waits until the running workers are balanced; `Err` says after what they were not.
    async fn balanced(&self, after: &str) -> Result<(), Error> {
        let running = self.running();
        let leases = self.bench.leases;
        until(
            &format!("the fleet did not balance {after}"),
            self.limit,
            &self.ledger,
            |l| l.balanced(&running, leases),
        )
        .await
    }

    /// Waits until each of `keys` was started by another worker than `from` since `since`;
    /// returns how long each took.
    async fn moved(
        &self,
        what: &str,
        keys: &[LeaseKey],
        from: usize,
        since: Instant,
    ) -> Result<Vec<Option<Duration>>, Error> {
        until(what, self.limit, &self.ledger, |l| {
            l.moved_after(keys, from, since).iter().all(Option::is_some)
        })
        .await?;
        Ok(lock(&self.ledger).moved_after(keys, from, since))
    }

    /// Every worker starts; the seconds until the fleet is balanced.
    async fn start(&mut self) -> Result<f64, Error> {
        let started = Instant::now();
        for _ in 0..self.bench.workers {
            self.add().await?;
        }
        self.balanced("after the start").await?;
        let balanced_s = started.elapsed().as_secs_f64();
        eprintln!(
            "bench: balanced {balanced_s:.1} s after the start; resting {}",
            humantime::format_duration(self.bench.rest)
        );
        Ok(balanced_s)
    }

    /// A beat interval to let the last moves settle, then the requests of `--rest` counted,
    /// the applications' checkpoints held meanwhile (one in flight lands within a second).
    async fn rest(&self, requests: &Requests) -> Value {
        lock(&self.ledger).quiet = true;
        tokio::time::sleep(self.config.effective_renew_interval().max(SETTLE)).await;
        let before = requests.counts();
        tokio::time::sleep(self.bench.rest).await;
        let after = requests.counts();
        lock(&self.ledger).quiet = false;
        tokio::time::sleep(SETTLE).await;
        let secs = self.bench.rest.as_secs_f64();
        let (minutes, lease_hours) = (secs / 60.0, self.bench.leases as f64 * secs / 3600.0);
        let mut per_minute = serde_json::Map::new();
        let (mut total, mut writes) = (0u64, 0u64);
        for (operation, n) in &after {
            let n = n - before.get(operation).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            total += n;
            if matches!(operation.as_str(), "UpdateItem" | "PutItem" | "DeleteItem") {
                writes += n;
            }
            per_minute.insert(operation.clone(), json!(round(n as f64 / minutes)));
        }
        json!({
            "seconds": secs,
            "requests_per_minute": per_minute,
            "total_per_minute": round(total as f64 / minutes),
            "requests_per_lease_hour": round(total as f64 / lease_hours),
            "writes_per_lease_hour": round(writes as f64 / lease_hours),
        })
    }

    /// The first worker crashes at an instant within a beat drawn from the clock (the workers
    /// started together and beat in step: a crash a fixed time after the rest would always
    /// meet their beats at the same phase).
    async fn crash(&mut self) -> Result<Value, Error> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let phase = f64::from(nanos) / 1e9;
        tokio::time::sleep(self.config.effective_renew_interval().mul_f64(phase)).await;
        let victim = 0;
        let crashed = lock(&self.ledger).held_by(victim);
        let duplicates = self.duplicates();
        let at = Instant::now();
        eprintln!("bench: crashing worker {victim} ({} leases)", crashed.len());
        let member = self.members[victim].take().expect("the first worker runs");
        member.crash(victim, &self.ledger);
        let failover = self
            .moved(
                "the crashed worker's leases were not re-held",
                &crashed,
                victim,
                at,
            )
            .await?;
        self.balanced("after the crash").await?;
        // The new holders process again what came after the last checkpoints: a second's worth.
        tokio::time::sleep(SETTLE).await;
        Ok(json!({
            "failover": summary(&failover),
            "duplicates": self.duplicates() - duplicates,
        }))
    }

    /// The second worker leaves gracefully.
    async fn leave(&mut self) -> Result<Value, Error> {
        let leaver = 1;
        let leaving = lock(&self.ledger).held_by(leaver);
        let duplicates = self.duplicates();
        let at = Instant::now();
        eprintln!("bench: worker {leaver} leaves ({} leases)", leaving.len());
        let mut member = self.members[leaver].take().expect("the second worker runs");
        let worker = member
            .worker
            .take()
            .expect("a running member has its worker");
        let shutdown = tokio::spawn(worker.shutdown());
        let handover = self
            .moved(
                "the leaving worker's leases were not handed over",
                &leaving,
                leaver,
                at,
            )
            .await?;
        self.balanced("after the leave").await?;
        shutdown.await?;
        member.events.abort();
        Ok(json!({
            "handover": summary(&handover),
            "duplicates": self.duplicates() - duplicates,
        }))
    }

    /// A new worker joins a fleet that rested a lease duration (so that no round of the
    /// leave is still due): the time from its start until it holds its share, and the leases
    /// that moved meanwhile (the fewest that balance: its share).
    async fn join(&mut self) -> Result<Value, Error> {
        tokio::time::sleep(self.config.lease_duration).await;
        let duplicates = self.duplicates();
        let starts = lock(&self.ledger).starts.len();
        let at = Instant::now();
        eprintln!("bench: worker {} joins", self.members.len());
        self.add().await?;
        self.balanced("after the join").await?;
        let join_s = at.elapsed();
        tokio::time::sleep(SETTLE).await;
        Ok(json!({
            "balanced_s": round(join_s.as_secs_f64()),
            "moves": lock(&self.ledger).starts.len() - starts,
            "minimum_moves": self.bench.leases / self.running().len(),
            "duplicates": self.duplicates() - duplicates,
        }))
    }

    /// The workers left leave gracefully.
    async fn stop(&mut self) {
        for mut member in self.members.iter_mut().filter_map(Option::take) {
            if let Some(worker) = member.worker.take() {
                worker.shutdown().await;
            }
            member.events.abort();
        }
    }
}

fn print_report(report: &Value) {
    let secs = |v: &Value| {
        v.as_f64()
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.2} s"))
    };
    println!(
        "bench on table {}: {} workers, {} leases, lease {} s",
        report["table"].as_str().unwrap_or("?"),
        report["workers"],
        report["leases"],
        report["lease_s"]
    );
    println!(
        "  balanced   {} after the start",
        secs(&report["balanced_s"])
    );
    let rest = &report["at_rest"];
    let ops: Vec<String> = rest["requests_per_minute"]
        .as_object()
        .map(|m| m.iter().map(|(op, n)| format!("{op} {n}")).collect())
        .unwrap_or_default();
    println!(
        "  at rest    {} requests a minute ({}) over {} s: {} per lease-hour, {} of them writes",
        rest["total_per_minute"],
        ops.join(", "),
        rest["seconds"],
        rest["requests_per_lease_hour"],
        rest["writes_per_lease_hour"]
    );
    let crash = &report["crash"];
    println!(
        "  crash      {} leases re-held: p50 {}, max {}; {} items processed again (since their last checkpoints)",
        crash["failover"]["n"],
        secs(&crash["failover"]["p50_s"]),
        secs(&crash["failover"]["max_s"]),
        crash["duplicates"]
    );
    let leave = &report["leave"];
    println!(
        "  leave      {} leases handed over: p50 {}, max {}; {} items processed again",
        leave["handover"]["n"],
        secs(&leave["handover"]["p50_s"]),
        secs(&leave["handover"]["max_s"]),
        leave["duplicates"]
    );
    let join = &report["join"];
    println!(
        "  join       its share held {} after the new worker started: {} leases moved (fewest: {}); {} items processed again",
        secs(&join["balanced_s"]),
        join["moves"],
        join["minimum_moves"],
        join["duplicates"]
    );
    println!(
        "  overlaps   {} (two workers processing one lease at once)",
        report["overlaps"]
    );
    println!(
        "  requests   {} sent in all (the table's deletion not counted)",
        report["requests_sent"]
    );
    println!(
        "  table      {}",
        if report["table_deleted"] == json!(true) {
            "deleted"
        } else {
            "kept"
        }
    );
}
