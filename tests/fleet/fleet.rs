//! A fleet of workers in one process for the worker tests: each with an application that
//! records when it processes which lease in a shared ledger, and a fault switch of its own.
//!
//! The ledger checks the safety invariant the moment a lease starts being processed: no other
//! worker may be processing it then. A sampler also checks every worker's `held_leases()`
//! every few milliseconds of (paused) time.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use shardlease::balance::KclBalance;
use shardlease::source::{Shard, ShardSource, SourceError, StaticShardSource};
use shardlease::store::fault::{Faults, FaultyStore};
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker, WorkerMonitor};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How a worker's application behaves when asked to stop.
#[derive(Debug, Clone, Copy)]
pub enum App {
    /// Checkpoints and finishes after this long.
    FinishAfter(Duration),
    /// Never finishes (a stuck processor): handoffs must be forced.
    NeverFinish,
    /// Finishes the leases whose key ends in an odd digit after `fast`, the others after
    /// `slow` (some partitions take longer to wind down than others).
    Uneven { fast: Duration, slow: Duration },
}

impl App {
    /// How long the application takes to finish `key` once asked to stop; `None`: never.
    fn finish_after(self, key: &str) -> Option<Duration> {
        match self {
            App::FinishAfter(delay) => Some(delay),
            App::NeverFinish => None,
            App::Uneven { fast, slow } => {
                let odd = key
                    .chars()
                    .last()
                    .and_then(|c| c.to_digit(10))
                    .is_some_and(|d| d % 2 == 1);
                Some(if odd { fast } else { slow })
            }
        }
    }
}

/// What happened, in order, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Started {
        worker: String,
        key: String,
        at: Instant,
        checkpoint: Option<String>,
    },
    Stopped {
        worker: String,
        key: String,
        at: Instant,
    },
    HandedOff {
        worker: String,
        key: String,
        to: String,
    },
    Released {
        worker: String,
        key: String,
    },
    Lost {
        worker: String,
        key: String,
    },
    /// The application is about to checkpoint the end of a closed shard.
    Ended {
        worker: String,
        key: String,
        at: Instant,
    },
    /// The end-of-shard checkpoint was refused (must not happen in these tests).
    EndFailed {
        worker: String,
        key: String,
    },
    Checkpointed {
        worker: String,
        key: String,
        value: String,
        at: Instant,
    },
    ShardEnded {
        worker: String,
        key: String,
    },
    Retired {
        worker: String,
        key: String,
    },
    /// The worker reported another live process with its worker id.
    DuplicateWorkerId {
        worker: String,
        at: Instant,
    },
}

#[derive(Default)]
pub struct Ledger {
    /// Who processes each lease now.
    processing: HashMap<String, String>,
    pub records: Vec<Record>,
    pub violations: Vec<String>,
}

impl Ledger {
    fn start(&mut self, worker: &str, key: &str, checkpoint: Option<String>) {
        if let Some(other) = self.processing.get(key) {
            self.violations.push(format!(
                "{key}: {worker} started while {other} was still processing it"
            ));
        }
        self.processing.insert(key.to_owned(), worker.to_owned());
        self.records.push(Record::Started {
            worker: worker.into(),
            key: key.into(),
            at: Instant::now(),
            checkpoint,
        });
    }

    fn stop(&mut self, worker: &str, key: &str) {
        if self.processing.get(key).map(String::as_str) == Some(worker) {
            self.processing.remove(key);
        }
        self.records.push(Record::Stopped {
            worker: worker.into(),
            key: key.into(),
            at: Instant::now(),
        });
    }

    /// A worker's process died: it processes nothing from now on.
    fn crash(&mut self, worker: &str) {
        let keys: Vec<String> = self
            .processing
            .iter()
            .filter(|(_, w)| w.as_str() == worker)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.stop(worker, &key);
        }
    }

    /// How many times a lease started being processed (moves, cold starts included).
    pub fn starts(&self) -> usize {
        self.records
            .iter()
            .filter(|r| matches!(r, Record::Started { .. }))
            .count()
    }
}

struct Member {
    worker: Worker,
    app: JoinHandle<()>,
    faults: Faults,
}

/// Workers sharing one store.
pub struct Fleet {
    pub store: Arc<dyn LeaseStore>,
    pub config: WorkerConfig,
    pub shards: Vec<LeaseKey>,
    pub ledger: Arc<Mutex<Ledger>>,
    members: BTreeMap<String, Member>,
    monitors: Arc<Mutex<BTreeMap<String, WorkerMonitor>>>,
    sampler: Option<JoinHandle<()>>,
    sample_every: Duration,
    /// With a source, workers discover shards instead of creating `shards` at start.
    pub source: Option<StaticShardSource>,
    /// Which worker listed the source, and when.
    pub source_calls: Arc<Mutex<Vec<(String, Instant)>>>,
    /// Listed by the workers instead of `source` (which the applications still read).
    pub source_override: Option<Arc<dyn ShardSource>>,
    /// How the applications behave while processing.
    pub processing: Processing,
    /// The KCL 2.x baseline policy instead of the default one.
    pub kcl: Option<KclBalance>,
}

/// What the applications do while processing a lease (besides waiting for a stop).
#[derive(Debug, Clone, Default)]
pub struct Processing {
    /// Checkpoint `"{worker}-{n}"` this often.
    pub checkpoint_every: Option<Duration>,
    /// Once the source says a shard is closed, process this long more, then checkpoint the
    /// end of the shard.
    pub end_after: Duration,
}

/// Records which worker lists the shared source, and when.
struct RecordingSource {
    inner: Arc<dyn ShardSource>,
    worker: String,
    calls: Arc<Mutex<Vec<(String, Instant)>>>,
}

#[async_trait]
impl ShardSource for RecordingSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.calls
            .lock()
            .unwrap()
            .push((self.worker.clone(), Instant::now()));
        self.inner.list_shards().await
    }
}

pub fn keys(n: usize) -> Vec<LeaseKey> {
    (0..n)
        .map(|i| LeaseKey::new(format!("shard-{i:04}")).unwrap())
        .collect()
}

impl Fleet {
    pub fn new(store: Arc<dyn LeaseStore>, config: WorkerConfig, shards: usize) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        Self {
            store,
            config,
            shards: keys(shards),
            ledger: Arc::default(),
            members: BTreeMap::new(),
            monitors: Arc::default(),
            sampler: None,
            sample_every: Duration::from_millis(5),
            source: None,
            source_calls: Arc::default(),
            source_override: None,
            processing: Processing::default(),
            kcl: None,
        }
    }

    /// A fleet whose workers follow `source` (no leases are created at start).
    pub fn with_source(
        store: Arc<dyn LeaseStore>,
        config: WorkerConfig,
        source: StaticShardSource,
    ) -> Self {
        let mut fleet = Self::new(store, config, 0);
        fleet.source = Some(source);
        fleet
    }

    pub async fn start(&mut self, name: &str, app: App) {
        self.start_with(name, app, self.config.clone()).await;
    }

    pub async fn start_with(&mut self, name: &str, app: App, config: WorkerConfig) {
        self.start_as(name, name, app, config).await;
    }

    /// Starts a process called `name` (in the ledger and in `held`) with the worker id `id`:
    /// two processes may share one id.
    pub async fn start_as(&mut self, name: &str, id: &str, app: App, config: WorkerConfig) {
        let (store, faults) = FaultyStore::new(Arc::clone(&self.store));
        let mut builder = Worker::builder(Arc::new(store), WorkerId::new(id).unwrap())
            .config(config)
            .shards(self.shards.clone());
        if let Some(kcl) = self.kcl {
            builder = builder.policy(kcl);
        }
        if let Some(source) = &self.source {
            let inner = match &self.source_override {
                Some(inner) => Arc::clone(inner),
                None => Arc::new(source.clone()),
            };
            builder = builder.source(RecordingSource {
                inner,
                worker: name.to_owned(),
                calls: Arc::clone(&self.source_calls),
            });
        }
        let (worker, events) = builder.start().await.expect("worker starts");
        self.monitors
            .lock()
            .unwrap()
            .insert(name.to_owned(), worker.monitor());
        let behaviour = Behaviour {
            app,
            processing: self.processing.clone(),
            source: self.source.clone(),
        };
        let app = tokio::spawn(run_app(
            name.to_owned(),
            events,
            behaviour,
            Arc::clone(&self.ledger),
        ));
        self.members.insert(
            name.to_owned(),
            Member {
                worker,
                app,
                faults,
            },
        );
        self.ensure_sampler();
    }

    /// Samples the workers' held leases every `every` (default 5 ms) instead.
    pub fn sample_every(&mut self, every: Duration) {
        self.sample_every = every;
    }

    /// Checks every few milliseconds that no two workers hold one lease.
    fn ensure_sampler(&mut self) {
        if self.sampler.is_some() {
            return;
        }
        let (ledger, monitors) = (Arc::clone(&self.ledger), Arc::clone(&self.monitors));
        let every = self.sample_every;
        self.sampler = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let monitors = monitors.lock().unwrap();
                let mut seen: HashMap<LeaseKey, &str> = HashMap::new();
                for (name, monitor) in monitors.iter() {
                    for key in monitor.held_leases() {
                        if let Some(other) = seen.insert(key.clone(), name) {
                            ledger
                                .lock()
                                .unwrap()
                                .violations
                                .push(format!("{key} held by {name} and {other} at once"));
                        }
                    }
                }
            }
        }));
    }

    pub fn faults(&self, name: &str) -> Faults {
        self.members[name].faults.clone()
    }

    pub fn worker(&self, name: &str) -> &Worker {
        &self.members[name].worker
    }

    pub fn names(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// Drops a worker and its application without any goodbye.
    pub fn crash(&mut self, name: &str) {
        let member = self.members.remove(name).expect("running");
        self.monitors.lock().unwrap().remove(name);
        member.app.abort();
        drop(member.worker);
        self.ledger.lock().unwrap().crash(name);
    }

    /// Graceful shutdown of one worker.
    pub async fn leave(&mut self, name: &str) {
        let member = self.members.remove(name).expect("running");
        let monitor = member.worker.monitor();
        member.worker.shutdown().await;
        assert!(
            monitor.held_leases().is_empty(),
            "{name} still holds leases after shutdown"
        );
        self.monitors.lock().unwrap().remove(name);
        let _ = member.app.await;
    }

    /// Begins the graceful shutdown of one worker in the background; the safety sampler
    /// watches it until the shutdown has returned.
    pub fn begin_leave(&mut self, name: &str) -> JoinHandle<()> {
        let member = self.members.remove(name).expect("running");
        let monitors = Arc::clone(&self.monitors);
        let name = name.to_owned();
        tokio::spawn(async move {
            member.worker.shutdown().await;
            monitors.lock().unwrap().remove(&name);
            let _ = member.app.await;
        })
    }

    pub fn held(&self) -> BTreeMap<String, Vec<LeaseKey>> {
        self.members
            .iter()
            .map(|(n, m)| (n.clone(), m.worker.held_leases()))
            .collect()
    }

    /// Every lease some worker holds now.
    pub fn held_keys(&self) -> std::collections::BTreeSet<String> {
        self.held()
            .into_values()
            .flatten()
            .map(|k| k.to_string())
            .collect()
    }

    /// Whether the table has a lease `key`.
    pub async fn lease_exists(&self, key: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        self.store
            .get(&LeaseKey::new(key).unwrap(), deadline)
            .await
            .unwrap()
            .is_some()
    }

    /// Every time `child` started, each of `parents` had been processed to its end before.
    pub fn assert_parents_first(&self, child: &str, parents: &[&str]) {
        let records = self.records();
        let starts: Vec<Instant> = records
            .iter()
            .filter_map(|r| match r {
                Record::Started { key, at, .. } if key == child => Some(*at),
                _ => None,
            })
            .collect();
        assert!(!starts.is_empty(), "{child} never started");
        for parent in parents {
            let ended = records
                .iter()
                .find_map(|r| match r {
                    Record::Ended { key, at, .. } if key == parent => Some(*at),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{parent} never ended"));
            for start in &starts {
                assert!(
                    *start >= ended,
                    "{child} started {:?} before its parent {parent} ended",
                    ended - *start
                );
            }
        }
    }

    /// No lease was lost and every end-of-shard checkpoint was accepted.
    pub fn assert_no_errors(&self) {
        let bad: Vec<Record> = self
            .records()
            .into_iter()
            .filter(|r| matches!(r, Record::Lost { .. } | Record::EndFailed { .. }))
            .collect();
        assert!(bad.is_empty(), "{bad:#?}");
    }

    pub fn counts(&self) -> Vec<usize> {
        self.held().values().map(Vec::len).collect()
    }

    /// Every lease held by exactly one worker and the counts within one of each other.
    pub fn balanced(&self) -> bool {
        let held = self.held();
        let total: usize = held.values().map(Vec::len).sum();
        let max = held.values().map(Vec::len).max().unwrap_or(0);
        let min = held.values().map(Vec::len).min().unwrap_or(0);
        total == self.shards.len() && max - min <= 1
    }

    /// Waits (in steps of 10 ms) until `done` holds; returns how long it took.
    pub async fn until(&self, limit: Duration, done: impl Fn(&Self) -> bool) -> Duration {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < limit,
                "not reached within {limit:?}; held: {:?}",
                self.held()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        start.elapsed()
    }

    /// Waits `span` while the sampler keeps checking.
    pub async fn idle(&self, span: Duration) {
        tokio::time::sleep(span).await;
    }

    pub fn assert_safe(&self) {
        let ledger = self.ledger.lock().unwrap();
        assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
    }

    /// Prints a measured figure (virtual time on paused tests) for BENCHMARKS.md.
    pub fn figure(name: &str, value: Duration) {
        println!("FIGURE {name}: {:.2} s", value.as_secs_f64());
    }

    pub fn records(&self) -> Vec<Record> {
        self.ledger.lock().unwrap().records.clone()
    }

    /// How many records match.
    pub fn count(&self, matches: impl Fn(&Record) -> bool) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .records
            .iter()
            .filter(|r| matches(r))
            .count()
    }

    /// When `worker` first stopped processing (`key`, if given).
    pub fn first_stop(&self, worker: &str, key: Option<&str>) -> Option<Instant> {
        self.records().into_iter().find_map(|r| match r {
            Record::Stopped {
                worker: w,
                key: k,
                at,
            } if w == worker && key.is_none_or(|key| key == k) => Some(at),
            _ => None,
        })
    }

    /// When `worker` first started processing (`key`, if given), and from which checkpoint.
    pub fn first_start(
        &self,
        worker: &str,
        key: Option<&str>,
    ) -> Option<(Instant, Option<String>)> {
        self.records().into_iter().find_map(|r| match r {
            Record::Started {
                worker: w,
                key: k,
                at,
                checkpoint,
            } if w == worker && key.is_none_or(|key| key == k) => Some((at, checkpoint)),
            _ => None,
        })
    }

    pub async fn shutdown_all(mut self) {
        let names = self.names();
        for name in names {
            self.leave(&name).await;
        }
        if let Some(sampler) = self.sampler.take() {
            sampler.abort();
        }
    }
}

/// Everything an application needs to know about how to behave.
#[derive(Clone)]
struct Behaviour {
    app: App,
    processing: Processing,
    source: Option<StaticShardSource>,
}

impl Behaviour {
    /// Whether processing needs the application to wake up on its own.
    fn active(&self) -> bool {
        self.source.is_some() || self.processing.checkpoint_every.is_some()
    }
}

/// How often an active application looks at the source and its checkpoint clock.
const APP_POLL: Duration = Duration::from_millis(100);

/// Processes `grant` until it is asked to stop (the reason is returned) or, for a closed
/// shard, until its end was checkpointed (`None`).
async fn process(
    name: &str,
    grant: &mut LeaseGrant,
    behaviour: &Behaviour,
    ledger: &Mutex<Ledger>,
) -> Option<StopReason> {
    if !behaviour.active() {
        return Some(grant.stopped().await);
    }
    let key = grant.key().clone();
    let mut progress = 0u64;
    let mut last_checkpoint = Instant::now();
    let mut closed_at: Option<Instant> = None;
    loop {
        tokio::select! {
            reason = grant.stopped() => return Some(reason),
            _ = tokio::time::sleep(APP_POLL) => {}
        }
        let now = Instant::now();
        let source = behaviour.source.as_ref();
        if closed_at.is_none() && source.and_then(|s| s.get(&key)).is_some_and(|s| s.closed) {
            closed_at = Some(now);
        }
        if closed_at.is_some_and(|at| now >= at + behaviour.processing.end_after) {
            let record = |worker: &str| Record::Ended {
                worker: worker.into(),
                key: key.to_string(),
                at: now,
            };
            ledger.lock().unwrap().records.push(record(name));
            if grant.end_of_shard().await.is_err() {
                ledger.lock().unwrap().records.push(Record::EndFailed {
                    worker: name.into(),
                    key: key.to_string(),
                });
            }
            return None;
        }
        if let Some(every) = behaviour.processing.checkpoint_every {
            if now >= last_checkpoint + every {
                progress += 1;
                last_checkpoint = now;
                let value = format!("{name}-{progress}");
                if grant.checkpoint(&value).await.is_ok() {
                    ledger.lock().unwrap().records.push(Record::Checkpointed {
                        worker: name.into(),
                        key: key.to_string(),
                        value,
                        at: now,
                    });
                }
            }
        }
    }
}

async fn run_app(
    name: String,
    mut events: shardlease::worker::LeaseEvents,
    behaviour: Behaviour,
    ledger: Arc<Mutex<Ledger>>,
) {
    while let Some(event) = events.recv().await {
        match event {
            LeaseEvent::Acquired(mut grant) => {
                let key = grant.key().to_string();
                let checkpoint = grant.initial_checkpoint().map(str::to_owned);
                ledger.lock().unwrap().start(&name, &key, checkpoint);
                let (name, ledger) = (name.clone(), Arc::clone(&ledger));
                let behaviour = behaviour.clone();
                tokio::spawn(async move {
                    let Some(reason) = process(&name, &mut grant, &behaviour, &ledger).await else {
                        ledger.lock().unwrap().stop(&name, &key);
                        grant.finish();
                        return;
                    };
                    if reason != StopReason::Lost {
                        if let Some(delay) = behaviour.app.finish_after(&key) {
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {
                                    let _ = grant.checkpoint(&format!("{name}-done")).await;
                                    ledger.lock().unwrap().stop(&name, &key);
                                    grant.finish();
                                    return;
                                }
                                _ = grant.lost() => {}
                            }
                        } else {
                            grant.lost().await;
                        }
                    }
                    ledger.lock().unwrap().stop(&name, &key);
                });
            }
            LeaseEvent::HandedOff { key, to } => {
                ledger.lock().unwrap().records.push(Record::HandedOff {
                    worker: name.clone(),
                    key: key.to_string(),
                    to: to.to_string(),
                })
            }
            LeaseEvent::Released { key } => ledger.lock().unwrap().records.push(Record::Released {
                worker: name.clone(),
                key: key.to_string(),
            }),
            LeaseEvent::Lost { key } => ledger.lock().unwrap().records.push(Record::Lost {
                worker: name.clone(),
                key: key.to_string(),
            }),
            LeaseEvent::ShardEnded { key } => {
                ledger.lock().unwrap().records.push(Record::ShardEnded {
                    worker: name.clone(),
                    key: key.to_string(),
                })
            }
            LeaseEvent::Retired { key } => ledger.lock().unwrap().records.push(Record::Retired {
                worker: name.clone(),
                key: key.to_string(),
            }),
            LeaseEvent::DuplicateWorkerId { .. } => {
                ledger
                    .lock()
                    .unwrap()
                    .records
                    .push(Record::DuplicateWorkerId {
                        worker: name.clone(),
                        at: Instant::now(),
                    })
            }
            _ => {}
        }
    }
}
