//! The fleet simulator: the real workers of the library (and, for the KCL 2.x baseline, a
//! model of KCL's own lease coordination: [`kcl`]), on paused tokio time, over one in-memory
//! table reached through a simulated network ([`net`]).
//!
//! A run starts the scenario's first workers, waits until they are balanced (unmeasured),
//! then applies each step and measures it until the fleet is balanced again, then rests
//! (nothing happens) and measures the cost and the moves of a fleet at rest.
//!
//! Everything runs on one thread; with the library's jitter seeded
//! ([`shardlease::clock::seed_thread`]), a seed replays a run exactly.

#![allow(dead_code)]

pub mod campaign;
pub mod clock;
pub mod kcl;
pub mod latency;
pub mod load;
pub mod net;
pub mod report;
pub mod scenario;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use shardlease::balance::Kcl3Balance;
use shardlease::lease::Incarnation;
use shardlease::lease::NewLease;
use shardlease::source::{Shard, StaticShardSource};
use shardlease::worker::{LeaseEvent, LeaseEvents, StopReason, Worker};
use shardlease::{Balance, LeaseKey, LeaseStore, WorkerConfig, WorkerId};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::latency::LatencyModel;
use self::load::{Held, Loads, Meter};
use self::net::{FaultRates, Latencies, Link, Net, SimStore};
use self::report::{Dist, Failover, Report, StepReport};
use self::scenario::{Scenario, Step};

/// The balancing policy the fleet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The library's defaults: the session protocol, `CountBalance`, graceful handoffs, a
    /// 10 s lease and a beat every 4.5 s (with [`Settings::lease_duration`], that lease and
    /// a beat at 45 % of it).
    Ours,
    /// KCL 2.x's own lease coordination ([`kcl`]), not the library's worker: every lease
    /// renewed every 3.308 s, a taker every 20.05 s that steals one lease a round
    /// (`KclBalance`), a 10 s lease (with [`Settings::kcl`], another lease and the intervals
    /// KCL derives from it); a steal lets both workers process the lease until the old
    /// owner's next renewal (its duplicates), and a shutdown releases nothing.
    Kcl,
    /// Ours with `Balance::Load`: the applications report each lease's load every
    /// [`REPORT_EVERY`], each worker publishes its capacity as its weight.
    Load,
    /// A KCL 3.x-style policy (`Kcl3Balance`) on our session protocol, fed the same figures
    /// as `Load`.
    Kcl3,
}

/// Under a load policy, a step is over once nothing started for this long.
pub const QUIET: Duration = Duration::from_secs(30);

/// The tolerance the load policies are measured against (`LoadBalance`'s default).
pub const LOAD_TOLERANCE: f64 = 0.10;

/// How often the simulated applications report a lease's load, under the load policies.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Ours => "shardlease",
            Policy::Kcl => "KCL 2.x",
            Policy::Load => "load balance",
            Policy::Kcl3 => "KCL 3.x-style",
        }
    }

    /// True for the policies fed load figures.
    pub fn by_load(self) -> bool {
        matches!(self, Policy::Load | Policy::Kcl3)
    }

    /// The library worker's configuration, with a lease of `lease` (`None`: the default,
    /// 10 s) and every interval the library derives from the lease following it (the renew
    /// interval, the taker interval, the drift allowance: `WorkerConfig::lease_duration`);
    /// `None` for the KCL model, which is not one.
    pub fn config(self, lease: Option<Duration>) -> Option<WorkerConfig> {
        let config = match self {
            Policy::Ours | Policy::Kcl3 => WorkerConfig::default(),
            Policy::Load => WorkerConfig::default().balance(Balance::Load),
            Policy::Kcl => return None,
        };
        Some(match lease {
            Some(lease) => config.lease_duration(lease),
            None => config,
        })
    }

    /// True for the policies that promise never to let two workers process one lease at the
    /// same instant: for them an overlap is a violation. KCL's steals make overlaps by design:
    /// they are its duplicates, measured, not violations.
    pub fn fenced(self) -> bool {
        self != Policy::Kcl
    }
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Settings {
    pub scenario: Scenario,
    pub workers: usize,
    pub leases: usize,
    pub policy: Policy,
    pub seed: u64,
    pub latency: Latencies,
    pub faults: FaultRates,
    /// How long the fleet rests after the last step (moves and cost at rest).
    pub rest: Duration,
    /// How long a step may take to balance before the run goes on without it.
    pub step_limit: Duration,
    /// The applications checkpoint every lease this often (`None`: only when they stop).
    pub checkpoint_every: Option<Duration>,
    /// Print the simulated and the wall time to stderr this often (simulated).
    pub progress: Option<Duration>,
    /// Between the starts of workers that join together (0: one right after the other).
    pub start_gap: Duration,
    /// The leases' loads and the workers' capacities.
    pub load: Loads,
    /// Sample every worker's load each second from the first step on (`--load-trace`).
    pub load_trace: bool,
    /// Write the start of a settle from the table balanced by count here (`--dump-start`).
    pub dump_start: Option<std::path::PathBuf>,
    /// The library's lease duration (`--lease-duration`; `None`: its default, 10 s), every
    /// interval it derives from the lease following. The KCL model does not read it.
    pub lease_duration: Option<Duration>,
    /// The KCL model's lease and the intervals KCL derives from it (`--kcl-lease-duration`).
    pub kcl: kcl::Timing,
    /// How store latency is drawn (`--latency-model`).
    pub latency_model: LatencyModel,
    /// A crash step comes at an instant drawn by the seed within this long after the step
    /// before it is over (`--crash-within`; `None`: at once).
    pub crash_within: Option<Duration>,
}

impl Settings {
    /// The library worker's configuration (see [`Policy::config`]); `None` for the KCL model.
    pub fn config(&self) -> Option<WorkerConfig> {
        self.policy.config(self.lease_duration)
    }

    /// How long a worker that hears nothing from the table goes on processing its leases.
    pub fn validity(&self) -> Duration {
        self.config()
            .map_or(self.kcl.lease_duration, |config| config.validity())
    }
}

/// Who processes what: the applications' view, where "two at once" is checked.
#[derive(Debug, Default)]
struct Ledger {
    holder: HashMap<LeaseKey, usize>,
    counts: BTreeMap<usize, usize>,
    starts: u64,
    /// Overlaps under a policy that promises none (see [`Policy::fenced`]).
    violations: u64,
    /// Whether an overlap is a violation; else it is only measured, as a duplicate.
    fenced: bool,
    /// Every overlap: a lease started by a worker while another still processed it.
    duplicates: Duplicates,
    /// The overlaps still open: since when the earlier worker (second) has shared the lease.
    overlapping: BTreeMap<(LeaseKey, usize), Instant>,
    /// Orphans of a crash: when each started being processed again.
    watch: HashMap<LeaseKey, Option<Instant>>,
    /// How many shards exist, and the integral over time of those nobody processes.
    shards: usize,
    idle_lease_seconds: f64,
    idle_since: Option<Instant>,
    /// Each lease's load (1 for a lease not listed: a shard added during the run).
    loads: HashMap<LeaseKey, f64>,
    /// The load of the shards that exist.
    total_load: f64,
    /// The load each worker processes.
    held_load: BTreeMap<usize, f64>,
    /// The running workers (a leaving one is not, though it may still process leases).
    members: BTreeSet<usize>,
    capacities: Vec<f64>,
    headroom: f64,
    /// The noise on reported load figures (see [`Loads::noise`]).
    noise: f64,
    /// Leases whose applications report no figure (see [`Loads::unreported`]).
    unreported: HashSet<LeaseKey>,
    /// From the first step to the end of the rest: overloaded workers.
    measuring: bool,
    measured: Meter,
    /// During the rest: load imbalance.
    resting: bool,
    at_rest: Meter,
    /// Leases each worker lost: its application was told `Lost` (under the KCL model, the
    /// scheduler stopped it because the lease was taken or expired here).
    lost: BTreeMap<usize, u64>,
    /// The workers a fault was aimed at (crashed, paused, cut off): not healthy.
    faulted: BTreeSet<usize>,
}

impl Ledger {
    /// Adds the lease-seconds without a processor since the last change. (Shards removed but
    /// still processed until they are retired count as processed ones.)
    fn tick(&mut self) {
        let now = Instant::now();
        if let Some(since) = self.idle_since {
            let seconds = (now - since).as_secs_f64();
            let idle = self.shards.saturating_sub(self.holder.len());
            self.idle_lease_seconds += idle as f64 * seconds;
            if seconds > 0.0 && (self.measuring || self.resting) {
                let workers = self.workers();
                let (total, headroom) = (self.total_load, self.headroom);
                if self.measuring {
                    self.measured.add(&workers, total, headroom, seconds);
                }
                if self.resting {
                    self.at_rest.add(&workers, total, headroom, seconds);
                }
            }
        }
        self.idle_since = Some(now);
    }

    fn load(&self, key: &LeaseKey) -> f64 {
        self.loads.get(key).copied().unwrap_or(1.0)
    }

    /// The shards that exist now.
    fn set_shards(&mut self, shards: &[LeaseKey]) {
        self.tick();
        self.shards = shards.len();
        self.total_load = shards.iter().map(|k| self.load(k)).sum();
    }

    /// What each worker holds against its capacity: the running workers, and any other that
    /// still processes a lease (one leaving).
    fn workers(&self) -> Vec<Held> {
        let holding = self
            .counts
            .iter()
            .filter(|(w, c)| **c > 0 && !self.members.contains(w))
            .map(|(w, _)| *w);
        self.members
            .iter()
            .copied()
            .chain(holding)
            .map(|w| Held {
                load: self.held_load.get(&w).copied().unwrap_or(0.0).max(0.0),
                capacity: load::capacity(&self.capacities, w),
                leases: self.counts.get(&w).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Worker `index` runs from now on.
    fn join(&mut self, index: usize) {
        self.tick();
        self.members.insert(index);
    }

    /// Worker `index` no longer runs (it may still finish what it processes).
    fn part(&mut self, index: usize) {
        self.tick();
        self.members.remove(&index);
    }

    /// Lease `key` weighs `factor` times what it did, from now on.
    fn heavier(&mut self, key: &LeaseKey, factor: f64) {
        let after = self.load(key) * factor;
        self.set_load(key, after);
    }

    /// Lease `key` weighs `after` from now on.
    fn set_load(&mut self, key: &LeaseKey, after: f64) {
        self.tick();
        let before = self.load(key);
        self.loads.insert(key.clone(), after);
        self.total_load += after - before;
        if let Some(worker) = self.holder.get(key) {
            *self.held_load.entry(*worker).or_default() += after - before;
        }
    }

    /// True when no worker holds more than its capacity in load units (a worker alone with
    /// one lease aside: a lease is not split) and, if lease `key` is heavier than a fair
    /// share, its holder holds it alone.
    fn settled_around(&self, key: &LeaseKey) -> bool {
        let workers: Vec<Held> = self
            .workers()
            .into_iter()
            .filter(|w| w.leases != 1)
            .collect();
        if load::overloaded(&workers, self.total_load, self.headroom) > 0 {
            return false;
        }
        let Some(holder) = self.holder.get(key) else {
            return false;
        };
        let capacity: f64 = workers.iter().map(|w| w.capacity).sum();
        let share = self.total_load / capacity * load::capacity(&self.capacities, *holder);
        self.load(key) <= share || self.counts.get(holder) == Some(&1)
    }

    /// Each worker's held load over its fair share (capacity x total load / total capacity
    /// of the running workers): 1 is its share exactly.
    fn shares(&self) -> Vec<(usize, f64)> {
        let workers: Vec<usize> = self.members.iter().copied().collect();
        let capacity: f64 = workers
            .iter()
            .map(|w| load::capacity(&self.capacities, *w))
            .sum();
        let per_weight = self.total_load / capacity.max(f64::MIN_POSITIVE);
        workers
            .iter()
            .map(|w| {
                let held = self.held_load.get(w).copied().unwrap_or(0.0).max(0.0);
                let share = per_weight * load::capacity(&self.capacities, *w);
                (*w, held / share.max(f64::MIN_POSITIVE))
            })
            .collect()
    }

    /// The load imbalance now (see [`load::imbalance`]).
    fn imbalance(&self) -> Option<f64> {
        load::imbalance(&self.workers())
    }

    fn set_measuring(&mut self, on: bool) {
        self.tick();
        self.measuring = on;
    }

    fn set_resting(&mut self, on: bool) {
        self.tick();
        self.resting = on;
    }

    fn idle(&mut self) -> f64 {
        self.tick();
        self.idle_lease_seconds
    }

    fn start(&mut self, worker: usize, key: &LeaseKey) {
        self.tick();
        self.starts += 1;
        let load = self.load(key);
        if let Some(other) = self.holder.insert(key.clone(), worker) {
            if other != worker {
                self.duplicates.windows += 1;
                self.overlapping
                    .insert((key.clone(), other), Instant::now());
                if self.fenced {
                    self.violations += 1;
                    eprintln!("VIOLATION: {key} started by w{worker} while w{other} processes it");
                }
            }
            *self.counts.entry(other).or_default() -= 1;
            *self.held_load.entry(other).or_default() -= load;
        }
        *self.counts.entry(worker).or_default() += 1;
        *self.held_load.entry(worker).or_default() += load;
        if let Some(slot @ None) = self.watch.get_mut(key) {
            *slot = Some(Instant::now());
        }
    }

    fn stop(&mut self, worker: usize, key: &LeaseKey) {
        self.tick();
        self.end_overlap(key, worker);
        if self.holder.get(key) == Some(&worker) {
            self.holder.remove(key);
            *self.counts.entry(worker).or_default() -= 1;
            *self.held_load.entry(worker).or_default() -= self.load(key);
        }
    }

    /// Worker `worker` lost a lease (its application was told so).
    fn lost(&mut self, worker: usize) {
        *self.lost.entry(worker).or_default() += 1;
    }

    /// A fault is aimed at worker `worker`: what it loses from now on is not counted as a
    /// healthy worker's loss.
    fn fault(&mut self, worker: usize) {
        self.faulted.insert(worker);
    }

    /// The leases lost by workers no fault was aimed at.
    fn healthy_lost(&self) -> u64 {
        self.lost
            .iter()
            .filter(|(w, _)| !self.faulted.contains(w))
            .map(|(_, n)| n)
            .sum()
    }

    /// A process died: it processes nothing from now on.
    fn crash(&mut self, worker: usize) {
        self.tick();
        let ended: Vec<LeaseKey> = self
            .overlapping
            .keys()
            .filter(|(_, w)| *w == worker)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            self.end_overlap(&key, worker);
        }
        self.holder.retain(|_, w| *w != worker);
        self.counts.remove(&worker);
        self.held_load.remove(&worker);
        self.members.remove(&worker);
    }

    /// Worker `worker` no longer processes `key`: an overlap it was part of as the earlier
    /// processor ends.
    fn end_overlap(&mut self, key: &LeaseKey, worker: usize) {
        if let Some(since) = self.overlapping.remove(&(key.clone(), worker)) {
            let window = since.elapsed().as_secs_f64();
            self.duplicates.lease_seconds += window;
            self.duplicates.longest = self.duplicates.longest.max(window);
        }
    }
}

/// Leases processed by two workers at once (KCL's steals), as the applications saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Duplicates {
    /// How many times a worker started a lease another one still processed.
    pub windows: u64,
    /// The seconds those overlaps lasted, summed (one still open at the end is not counted).
    pub lease_seconds: f64,
    /// The longest of them.
    pub longest: f64,
}

struct Running {
    process: Process,
    link: Link,
}

/// A worker process: the library's worker and its application, or the KCL model.
enum Process {
    Library { worker: Worker, app: JoinHandle<()> },
    Kcl(kcl::KclWorker),
}

impl Process {
    /// The process dies (its applications with it).
    fn kill(self) {
        match self {
            Process::Library { worker, app } => {
                app.abort();
                drop(worker);
            }
            Process::Kcl(worker) => worker.kill(),
        }
    }

    /// A graceful shutdown, until the applications finished.
    async fn shutdown(self) {
        match self {
            Process::Library { worker, app } => {
                worker.shutdown().await;
                let _ = app.await;
            }
            Process::Kcl(worker) => worker.shutdown().await,
        }
    }
}

/// The fleet under simulation.
struct Fleet {
    settings: Settings,
    net: Arc<Net>,
    ledger: Arc<Mutex<Ledger>>,
    running: BTreeMap<usize, Running>,
    leaving: Vec<JoinHandle<()>>,
    next_index: usize,
    /// The shards that exist now.
    shards: Vec<LeaseKey>,
    source: Option<StaticShardSource>,
    next_shard: usize,
    rng: StdRng,
    /// How many times each index's process crashed and started again (`Step::CrashRestart`):
    /// each run is a new process, with an incarnation of its own.
    restarts: HashMap<usize, u64>,
}

/// Between the starts of the scenario's first workers: 1,000 start within 10 s (a rolling
/// deployment), and few of them scan the table at one time.
pub const INITIAL_GAP: Duration = Duration::from_millis(10);

/// How long a restarted worker's process is down (stop, deploy, start).
pub const RESTART_DOWNTIME: Duration = Duration::from_secs(10);

fn worker_id(index: usize) -> WorkerId {
    WorkerId::new(format!("w{index:05}")).expect("valid id")
}

/// The process of worker `index`. The simulator runs at most one process per index at a
/// time: a gracefully restarted one finds its previous run's leases released and runs under
/// the same incarnation; one that crashed and started again is a new process (see
/// [`Fleet::incarnation_of`]).
fn incarnation(index: usize) -> Incarnation {
    Incarnation::new(index as u64)
}

fn shard_key(index: usize) -> LeaseKey {
    LeaseKey::new(format!("shard-{index:07}")).expect("valid key")
}

impl Fleet {
    async fn new(settings: Settings) -> Self {
        let net = Net::with_model(
            settings.seed,
            settings.latency,
            settings.latency_model,
            settings.faults,
        );
        let shards: Vec<LeaseKey> = (0..settings.leases).map(shard_key).collect();
        let source = settings
            .scenario
            .discovery
            .then(|| StaticShardSource::from_keys(shards.clone()));
        // The leases exist before the fleet starts (created once, directly in the table),
        // each owned by one of the scenario's first workers in turn, as a fleet that has run
        // for a while leaves them: both policies start the scenario balanced.
        let deadline = Instant::now() + Duration::from_secs(5);
        let first = settings.scenario.initial;
        for (i, key) in shards.iter().enumerate() {
            let lease = net.table.create(NewLease::new(key.clone()), deadline).await;
            if first == 0 {
                continue;
            }
            let owner = worker_id(i % first);
            let lease = lease.expect("in memory").done().expect("new");
            let process = incarnation(i % first);
            let taken = net
                .table
                .take(key, lease.nonce, &owner, process, lease.counter, deadline)
                .await;
            assert!(taken.expect("in memory").is_done());
            let mut table = net.ownership.lock().unwrap();
            table.owner.insert(key.clone(), (owner, Instant::now()));
        }
        if settings.policy != Policy::Kcl {
            // The library's policies run the session protocol: the leases' holders also have
            // their sessions open, as a fleet that has run for a while leaves them: each first
            // worker adopts its session when it starts (its process opened it, as after an
            // answer lost), instead of finding leases named by sessions without a record,
            // which others would place after a lease duration while the fleet is still
            // starting. (The KCL model keeps no sessions.)
            for index in 0..first {
                let opened = net
                    .table
                    .open_session(&worker_id(index), incarnation(index), None, None, deadline)
                    .await;
                assert!(opened.expect("in memory").is_done());
            }
        }
        let loads = settings
            .load
            .model
            .loads(shards.len(), settings.seed)
            .expect("load model checked against the leases");
        let ledger = Ledger {
            loads: shards.iter().cloned().zip(loads).collect(),
            capacities: settings.load.capacities.clone(),
            headroom: settings.load.headroom,
            noise: settings.load.noise,
            fenced: settings.policy.fenced(),
            unreported: shards
                .iter()
                .take(settings.load.unreported)
                .cloned()
                .collect(),
            ..Ledger::default()
        };
        let ledger = Arc::new(Mutex::new(ledger));
        ledger.lock().unwrap().set_shards(&shards);
        Self {
            rng: StdRng::seed_from_u64(settings.seed),
            restarts: HashMap::new(),
            next_shard: settings.leases,
            settings,
            net,
            ledger,
            running: BTreeMap::new(),
            leaving: Vec::new(),
            next_index: 0,
            shards,
            source,
        }
    }

    /// The incarnation of worker `index`'s current process: [`incarnation`], and after each
    /// crash and restart another.
    fn incarnation_of(&self, index: usize) -> Incarnation {
        let restarts = self.restarts.get(&index).copied().unwrap_or(0);
        Incarnation::new(index as u64 + (restarts << 32))
    }

    async fn start(&mut self, index: usize) {
        let running = self.launch(index).await;
        self.ledger.lock().unwrap().join(index);
        self.running.insert(index, running);
    }

    /// Starts the process of worker `index` and its application.
    fn launch(
        &self,
        index: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Running> + Send + 'static>> {
        let (store, link) = SimStore::new(Arc::clone(&self.net), index as u64);
        let policy = self.settings.policy;
        let ledger = Arc::clone(&self.ledger);
        let checkpoint_every = self.settings.checkpoint_every;
        let kcl = self.settings.kcl;
        let incarnation = self.incarnation_of(index);
        let Some(mut config) = self.settings.config() else {
            let source = self.source.clone();
            return Box::pin(async move {
                let worker = kcl::KclWorker::start(
                    index,
                    (worker_id(index), incarnation),
                    Arc::new(store),
                    ledger,
                    checkpoint_every,
                    kcl,
                    source,
                )
                .await;
                let process = Process::Kcl(worker);
                Running { process, link }
            });
        };
        if policy.by_load() {
            config = config.weight(load::capacity(&self.settings.load.capacities, index));
        }
        let mut builder = Worker::builder(Arc::new(store), worker_id(index))
            .incarnation(incarnation)
            .config(config);
        if policy == Policy::Kcl3 {
            builder = builder.policy(Kcl3Balance::default());
        }
        if let Some(source) = &self.source {
            builder = builder.source(source.clone());
        }
        Box::pin(async move {
            let (worker, events) = builder.start().await.expect("worker starts");
            let reports = policy.by_load().then_some(REPORT_EVERY);
            let app = tokio::spawn(run_app(index, events, ledger, checkpoint_every, reports));
            let process = Process::Library { worker, app };
            Running { process, link }
        })
    }

    /// Starts the scenario's first `n` workers, `gap` apart, each start running while the
    /// next begins (a fleet deployed at once), unlike [`start_new`](Self::start_new), which
    /// waits for each start before the next.
    async fn start_initial(&mut self, n: usize, gap: Duration) {
        let mut starts = tokio::task::JoinSet::new();
        for i in 0..n {
            let index = self.next_index;
            self.next_index += 1;
            let launch = self.launch(index);
            let at = Instant::now() + gap * i as u32;
            starts.spawn(async move {
                tokio::time::sleep_until(at).await;
                (index, launch.await)
            });
        }
        while let Some(started) = starts.join_next().await {
            let (index, running) = started.expect("a start does not panic");
            self.ledger.lock().unwrap().join(index);
            self.running.insert(index, running);
        }
    }

    async fn start_new(&mut self, n: usize, gap: Duration) {
        for i in 0..n {
            if i > 0 && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            let index = self.next_index;
            self.next_index += 1;
            self.start(index).await;
        }
    }

    /// `n` running workers, chosen by the seeded generator.
    fn pick(&mut self, n: usize) -> Vec<usize> {
        let mut all: Vec<usize> = self.running.keys().copied().collect();
        all.shuffle(&mut self.rng);
        all.truncate(n);
        all.sort_unstable();
        all
    }

    fn crash(&mut self, index: usize) {
        let running = self.running.remove(&index).expect("running");
        running.process.kill();
        self.ledger.lock().unwrap().crash(index);
    }

    /// Starts a graceful shutdown; it completes in the background.
    fn leave(&mut self, index: usize) {
        let running = self.running.remove(&index).expect("running");
        self.ledger.lock().unwrap().part(index);
        self.leaving.push(tokio::spawn(running.process.shutdown()));
    }

    /// Every shard processed by exactly one running worker, counts within one of each other.
    fn balanced(&self) -> bool {
        let ledger = self.ledger.lock().unwrap();
        if ledger.holder.len() != self.shards.len() {
            return false;
        }
        let held_by_running = ledger.holder.values().all(|w| self.running.contains_key(w));
        held_by_running && self.spread_in(&ledger) <= 1 && self.all_current(&ledger)
    }

    fn all_current(&self, ledger: &Ledger) -> bool {
        if self.source.is_none() {
            return true;
        }
        let current: HashSet<&LeaseKey> = self.shards.iter().collect();
        ledger.holder.keys().all(|k| current.contains(k))
    }

    /// Max - min leases processed per running worker.
    fn spread(&self) -> usize {
        self.spread_in(&self.ledger.lock().unwrap())
    }

    fn spread_in(&self, ledger: &Ledger) -> usize {
        let counts = self
            .running
            .keys()
            .map(|i| ledger.counts.get(i).copied().unwrap_or(0));
        let (min, max) = counts.fold((usize::MAX, 0), |(lo, hi), c| (lo.min(c), hi.max(c)));
        max.saturating_sub(min.min(max))
    }

    /// A running worker's fair share of the shards (rounded down).
    fn share(&self) -> u64 {
        (self.shards.len() / self.running.len().max(1)) as u64
    }

    /// The fewest lease moves any assignment needs to balance the fleet again, given who
    /// processes what now: every lease of a worker that goes away (or restarts), every new
    /// lease, and each remaining worker's surplus over its best target.
    fn minimum_moves(&self, going: &[usize], joining: usize) -> u64 {
        let ledger = self.ledger.lock().unwrap();
        let mut counts: BTreeMap<usize, u64> = self
            .running
            .keys()
            .filter(|i| !going.contains(i))
            .map(|i| (*i, 0))
            .collect();
        let mut orphans = 0u64;
        for key in &self.shards {
            match ledger.holder.get(key) {
                Some(w) if counts.contains_key(w) => *counts.get_mut(w).expect("present") += 1,
                _ => orphans += 1,
            }
        }
        let mut held: Vec<u64> = counts.into_values().collect();
        held.extend(std::iter::repeat_n(0, joining));
        held.sort_unstable_by(|a, b| b.cmp(a));
        let workers = held.len().max(1) as u64;
        let total = self.shards.len() as u64;
        let (base, extra) = (total / workers, total % workers);
        let surplus: u64 = held
            .iter()
            .enumerate()
            .map(|(i, c)| c.saturating_sub(base + u64::from((i as u64) < extra)))
            .sum();
        orphans + surplus
    }

    fn scans(&self) -> BTreeMap<usize, u64> {
        self.running
            .iter()
            .map(|(i, r)| (*i, r.link.scans()))
            .collect()
    }

    fn starts(&self) -> u64 {
        self.ledger.lock().unwrap().starts
    }

    /// Waits until balanced; returns how long it took, or `None` past the step limit.
    /// Waits until a step is over: balanced by count, or under a load policy settled.
    async fn until_balanced(&self, since: Instant) -> Option<Duration> {
        if self.settings.policy.by_load() {
            self.until_settled(since).await
        } else {
            self.until_count_balanced(since).await
        }
    }

    async fn until_count_balanced(&self, since: Instant) -> Option<Duration> {
        let limit = since + self.settings.step_limit;
        loop {
            if self.balanced() {
                return Some(since.elapsed());
            }
            if Instant::now() >= limit {
                if std::env::var_os("SIM_DEBUG").is_some() {
                    let l = self.ledger.lock().unwrap();
                    eprintln!(
                        "NOT BALANCED: counts {:?} held {} of {}",
                        l.counts,
                        l.holder.len(),
                        self.shards.len()
                    );
                }
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Under a load policy, a step is over when every lease is processed by a running worker
    /// and nothing started for [`QUIET`]: the time it took is until the last start (the
    /// policy decides what balanced means; the report measures the imbalance it leaves).
    async fn until_settled(&self, since: Instant) -> Option<Duration> {
        let limit = since + self.settings.step_limit;
        let mut last = (self.ledger.lock().unwrap().starts, Instant::now());
        loop {
            let (starts, held) = {
                let ledger = self.ledger.lock().unwrap();
                let held = ledger.holder.len() == self.shards.len()
                    && ledger.holder.values().all(|w| self.running.contains_key(w))
                    && self.all_current(&ledger);
                (ledger.starts, held)
            };
            let now = Instant::now();
            if starts != last.0 {
                last = (starts, now);
            }
            if held && now - last.1 >= QUIET {
                return Some(last.1.max(since) - since);
            }
            if now >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A lower bound of the moves any assignment needs to bring the load imbalance
    /// (`load::imbalance`) to at most 1 + [`LOAD_TOLERANCE`], from `holder` over `workers`,
    /// counting each move at the worker it leaves.
    ///
    /// The mean utilisation of the workers counted is at most that of the whole fleet
    /// (leaving out a worker alone with a lease heavier than its share lowers it), so a lease
    /// heavier than (1 + tolerance) x the largest share of the whole fleet cannot be on a
    /// worker counted: it ends alone on a worker of its own, left out of the mean. The mean
    /// is then at most the load left over the capacity left (those workers taken as the
    /// largest), and a worker counted holds at most (1 + tolerance) x its share of that: its
    /// limit. So every worker ends in one of two roles:
    /// - counted: it gives at least its heaviest leases until it is under its limit (the
    ///   fewest leases that can get it there), and at most all but one;
    /// - alone with a heavy lease: it gives everything but that lease (all, if it holds none).
    ///
    /// At least one worker per heavy lease takes the second role, which costs each worker at
    /// least as much as the first: the bound is every worker's first-role cost, plus the
    /// smallest extra costs of the second role, one worker per heavy lease.
    fn minimum_moves_by_load(&self, holder: &HashMap<LeaseKey, usize>, workers: &[usize]) -> u64 {
        let ledger = self.ledger.lock().unwrap();
        let mut held: BTreeMap<usize, Vec<f64>> =
            workers.iter().map(|i| (*i, Vec::new())).collect();
        for (key, worker) in holder {
            if let Some(loads) = held.get_mut(worker) {
                loads.push(ledger.load(key));
            }
        }
        let capacity_of = |w: usize| load::capacity(&ledger.capacities, w);
        let capacity: f64 = held.keys().map(|w| capacity_of(*w)).sum();
        let per_weight = ledger.total_load / capacity.max(f64::MIN_POSITIVE);
        let widest = held
            .keys()
            .map(|w| (1.0 + LOAD_TOLERANCE) * per_weight * capacity_of(*w))
            .fold(0.0, f64::max);
        let heavy: Vec<f64> = holder
            .keys()
            .map(|key| ledger.load(key))
            .filter(|load| *load > widest)
            .collect();
        // Their workers are left out of the mean: what is left over what can carry it, at most
        // (the heavy leases' workers taken as the largest, which leaves the most per weight).
        let mut capacities: Vec<f64> = held.keys().map(|w| capacity_of(*w)).collect();
        capacities.sort_by(|a, b| b.total_cmp(a));
        let left_capacity = capacity - capacities.iter().take(heavy.len()).sum::<f64>();
        let per_weight = if left_capacity > 0.0 {
            (ledger.total_load - heavy.iter().sum::<f64>()) / left_capacity
        } else {
            per_weight
        };
        let limit = |w: usize| (1.0 + LOAD_TOLERANCE) * per_weight * capacity_of(w);
        let heavy = heavy.len();
        let mut counted = 0u64;
        let mut extra: Vec<u64> = Vec::new();
        for (w, loads) in &mut held {
            loads.sort_by(|a, b| b.total_cmp(a));
            let mut excess = loads.iter().sum::<f64>() - limit(*w);
            let mut k = 0u64;
            while excess > 0.0 && (k as usize) < loads.len() {
                excess -= loads[k as usize];
                k += 1;
            }
            let n = loads.len() as u64;
            let first = k.min(n.saturating_sub(1));
            let holds_heavy = loads.first().is_some_and(|l| *l > widest);
            let second = if holds_heavy { n - 1 } else { n };
            counted += first;
            extra.push(second.saturating_sub(first));
        }
        extra.sort_unstable();
        counted + extra.iter().take(heavy).sum::<u64>()
    }

    async fn apply(&mut self, step: &Step) -> StepReport {
        if let (Step::Crash(_) | Step::CrashRestart(..), Some(within)) =
            (step, self.settings.crash_within)
        {
            // A crash at a moment drawn within `within`: at once, it comes at whatever phase
            // of the victims' beats the fleet's balancing left (measured from the crash).
            let wait = within.mul_f64(self.rng.gen::<f64>());
            tokio::time::sleep(wait).await;
        }
        let started = Instant::now();
        let idle = self.ledger.lock().unwrap().idle();
        let starts = self.starts();
        let scans = self.scans();
        let mut orphans: Vec<LeaseKey> = Vec::new();
        let minimum = match step {
            Step::Start(n) => {
                let min = self.minimum_moves(&[], *n);
                self.start_new(*n, self.settings.start_gap).await;
                min
            }
            Step::Crash(n) | Step::CrashRestart(n, _) => {
                let victims = self.pick(*n);
                let min = self.minimum_moves(&victims, 0);
                orphans = self
                    .net
                    .ownership
                    .lock()
                    .unwrap()
                    .owner
                    .iter()
                    .filter(|(_, (w, _))| victims.iter().any(|v| worker_id(*v) == *w))
                    .map(|(k, _)| k.clone())
                    .collect();
                orphans.sort();
                self.watch(&orphans);
                for v in &victims {
                    self.ledger.lock().unwrap().fault(*v);
                    self.crash(*v);
                }
                if let Step::CrashRestart(_, down) = step {
                    tokio::time::sleep(*down).await;
                    for v in victims {
                        *self.restarts.entry(v).or_default() += 1;
                        self.start(v).await;
                    }
                }
                min
            }
            Step::Leave(n) => {
                let leavers = self.pick(*n);
                let min = self.minimum_moves(&leavers, 0);
                for l in leavers {
                    self.leave(l);
                }
                min
            }
            Step::Restart(i) => {
                let Some(index) = self.running.keys().nth(*i).copied() else {
                    return StepReport::skipped(step.label());
                };
                // Its leases must be processed by others while it is down, and it gets its
                // share back when it is up again.
                let min = self.minimum_moves(&[index], 0) + self.share();
                let running = self.running.remove(&index).expect("running");
                self.ledger.lock().unwrap().part(index);
                running.process.shutdown().await;
                tokio::time::sleep(RESTART_DOWNTIME).await;
                self.start(index).await;
                min
            }
            Step::AddShards(n) => {
                let source = self.source.clone().expect("a shards scenario");
                for _ in 0..*n {
                    let key = shard_key(self.next_shard);
                    self.next_shard += 1;
                    source.add(Shard::new(key.clone()));
                    self.shards.push(key);
                }
                self.ledger.lock().unwrap().set_shards(&self.shards);
                self.minimum_moves(&[], 0)
            }
            Step::RemoveShards(n) => {
                let source = self.source.clone().expect("a shards scenario");
                let mut gone: Vec<LeaseKey> = self.shards.clone();
                gone.shuffle(&mut self.rng);
                gone.truncate(*n);
                for key in &gone {
                    source.remove(key);
                }
                self.shards.retain(|k| !gone.contains(k));
                self.ledger.lock().unwrap().set_shards(&self.shards);
                self.minimum_moves(&[], 0)
            }
            Step::Pause(n, span) | Step::CutOff(n, span) => {
                let victims = self.pick(*n);
                // Outlasting the leases' validity, the victims lose them: the others must take
                // them, and give each victim its share back when it returns.
                let min = if *span >= self.settings.validity() {
                    self.minimum_moves(&victims, 0) + self.share() * victims.len() as u64
                } else {
                    0
                };
                for v in &victims {
                    self.ledger.lock().unwrap().fault(*v);
                    let link = &self.running[v].link;
                    match step {
                        Step::Pause(..) => link.pause_until(Instant::now() + *span),
                        _ => link.set_cut_off(true),
                    }
                }
                if matches!(step, Step::CutOff(..)) {
                    let links: Vec<Link> = victims
                        .iter()
                        .map(|v| self.running[v].link.clone())
                        .collect();
                    let span = *span;
                    tokio::spawn(async move {
                        tokio::time::sleep(span).await;
                        for link in links {
                            link.set_cut_off(false);
                        }
                    });
                }
                min
            }
            Step::Settle => {
                let holder = self.ledger.lock().unwrap().holder.clone();
                let running: Vec<usize> = self.running.keys().copied().collect();
                self.minimum_moves_by_load(&holder, &running)
            }
        };
        // A stalled or cut-off worker comes back during the step: wait for that too.
        if let Step::Pause(_, span) | Step::CutOff(_, span) = step {
            tokio::time::sleep(*span).await;
        }
        let balanced = self.until_balanced(started).await;
        let rounds = self
            .scans()
            .iter()
            // A restarted worker's count starts again from zero.
            .map(|(i, now)| match scans.get(i) {
                Some(before) if before <= now => now - before,
                _ => *now,
            })
            .max()
            .unwrap_or(0);
        let failover = (!orphans.is_empty()).then(|| self.failover(&orphans, started));
        StepReport {
            label: step.label(),
            balanced: balanced.map(|d| d.as_secs_f64()),
            rounds,
            moves: self.starts() - starts,
            minimum,
            idle: self.ledger.lock().unwrap().idle() - idle,
            failover,
        }
    }

    /// A fleet that starts on a table balanced by count and settles by its policy, measured
    /// from the start: the first `n` workers own the leases in turn (see [`Fleet::new`]), and
    /// every lease started again after its first start is a move.
    async fn settle_from_start(&mut self, n: usize) -> StepReport {
        let holder: HashMap<LeaseKey, usize> = self
            .shards
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i % n.max(1)))
            .collect();
        let workers: Vec<usize> = (0..n).collect();
        let minimum = self.minimum_moves_by_load(&holder, &workers);
        if let Some(path) = &self.settings.dump_start {
            let ledger = self.ledger.lock().unwrap();
            let start = serde_json::json!({
                "loads": self.shards.iter().map(|k| ledger.load(k)).collect::<Vec<_>>(),
                "holder": self.shards.iter().map(|k| holder[k]).collect::<Vec<_>>(),
                "capacities": workers
                    .iter()
                    .map(|w| load::capacity(&ledger.capacities, *w))
                    .collect::<Vec<_>>(),
                "tolerance": LOAD_TOLERANCE,
            });
            if let Err(err) = std::fs::write(path, start.to_string()) {
                eprintln!("simulate: --dump-start {}: {err}", path.display());
            }
        }
        if std::env::var_os("SIM_DEBUG").is_some() {
            eprintln!(
                "one assignment of LoadBalance on the exact figures moves {}",
                self.exact_assignment_moves(&holder, &workers)
            );
        }
        let started = Instant::now();
        let idle = self.ledger.lock().unwrap().idle();
        self.start_initial(n, INITIAL_GAP).await;
        let balanced = self.until_balanced(started).await;
        let rounds = self.scans().values().copied().max().unwrap_or(0);
        StepReport {
            label: Step::Settle.label(),
            balanced: balanced.map(|d| d.as_secs_f64()),
            rounds,
            moves: self.starts().saturating_sub(self.shards.len() as u64),
            minimum,
            idle: self.ledger.lock().unwrap().idle() - idle,
            failover: None,
        }
    }

    /// The moves of `LoadBalance`'s assignment of the exact loads and capacities, computed
    /// once (what the fleet would move if every figure were known from the start).
    fn exact_assignment_moves(
        &self,
        holder: &HashMap<LeaseKey, usize>,
        workers: &[usize],
    ) -> usize {
        use shardlease::balance::{
            BalancePolicy, FleetView, Holder, LeaseView, LoadBalance, WorkerView,
        };
        let ledger = self.ledger.lock().unwrap();
        let view = FleetView {
            leases: self
                .shards
                .iter()
                .map(|k| LeaseView {
                    key: k.clone(),
                    holder: holder
                        .get(k)
                        .map_or(Holder::Available, |w| Holder::Held(worker_id(*w))),
                    load: Some(ledger.load(k)),
                    settled: true,
                })
                .collect(),
            workers: workers
                .iter()
                .map(|w| WorkerView {
                    id: worker_id(*w),
                    capacity: u32::MAX,
                    weight: load::capacity(&ledger.capacities, *w),
                    reported: true,
                    load: None,
                })
                .collect(),
        };
        LoadBalance::default()
            .assign(&view)
            .moves
            .values()
            .map(Vec::len)
            .sum()
    }

    fn watch(&self, orphans: &[LeaseKey]) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger.watch = orphans.iter().map(|k| (k.clone(), None)).collect();
        let mut table = self.net.ownership.lock().unwrap();
        table.watch = orphans.iter().map(|k| (k.clone(), None)).collect();
    }

    /// Crash to each orphan taken in the table, and to each orphan processed again.
    fn failover(&self, orphans: &[LeaseKey], crashed: Instant) -> Failover {
        let since = |at: Option<Instant>| at.map(|at| (at - crashed).as_secs_f64());
        let table = self.net.ownership.lock().unwrap();
        let ledger = self.ledger.lock().unwrap();
        let held: Vec<Option<f64>> = orphans
            .iter()
            .map(|k| since(table.watch.get(k).copied().flatten()))
            .collect();
        let processing: Vec<Option<f64>> = orphans
            .iter()
            .map(|k| since(ledger.watch.get(k).copied().flatten()))
            .collect();
        Failover {
            held: Dist::of(&held),
            processing: Dist::of(&processing),
        }
    }
}

/// The application: processes whatever it is granted until told to stop; on a handoff,
/// retirement or shutdown it checkpoints once and finishes.
async fn run_app(
    index: usize,
    mut events: LeaseEvents,
    ledger: Arc<Mutex<Ledger>>,
    checkpoint_every: Option<Duration>,
    reports: Option<Duration>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(event) = events.recv().await {
        let LeaseEvent::Acquired(mut grant) = event else {
            continue;
        };
        let key = grant.key().clone();
        ledger.lock().unwrap().start(index, &key);
        let ledger = Arc::clone(&ledger);
        tasks.spawn(async move {
            let (noise, silent) = {
                let ledger = ledger.lock().unwrap();
                (ledger.noise, ledger.unreported.contains(&key))
            };
            let mut draws = StdRng::seed_from_u64(load::noise_seed(&key, index));
            let mut next_checkpoint = checkpoint_every.map(|every| Instant::now() + every);
            let mut next_report = reports.filter(|_| !silent).map(|_| Instant::now());
            let reason = loop {
                let wake = match (next_checkpoint, next_report) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                tokio::select! {
                    biased;
                    reason = grant.stopped() => break reason,
                    _ = sleep_until(wake) => {
                        let now = Instant::now();
                        if next_report.is_some_and(|at| at <= now) {
                            let load = ledger.lock().unwrap().load(&key);
                            let figure = load * load::noisy(&mut draws, noise);
                            grant.report_load(figure).expect("a finite figure");
                            next_report = reports.map(|every| now + every);
                        }
                        if next_checkpoint.is_some_and(|at| at <= now) {
                            let _ = grant.checkpoint("progress").await;
                            next_checkpoint = checkpoint_every.map(|every| now + every);
                        }
                    }
                }
            };
            if reason == StopReason::Lost {
                ledger.lock().unwrap().lost(index);
            } else {
                let _ = grant.checkpoint("done").await;
            }
            ledger.lock().unwrap().stop(index, &key);
            grant.finish();
        });
        while tasks.try_join_next().is_some() {}
    }
    // The worker stopped (or crashed): its applications stop with it.
    tasks.abort_all();
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs one simulation on the current (paused, single-threaded) runtime.
pub async fn run(settings: Settings) -> Report {
    let wall = std::time::Instant::now();
    let begin = Instant::now();
    let progress = settings.progress.map(|every| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                eprintln!(
                    "simulate: {:.0} s simulated in {:.1} s",
                    begin.elapsed().as_secs_f64(),
                    wall.elapsed().as_secs_f64()
                );
            }
        })
    });
    let scenario = settings.scenario.clone();
    let mut fleet = Fleet::new(settings.clone()).await;
    // A fleet that only settles is measured from its start (the table is balanced by count).
    let settle = scenario.steps == [Step::Settle];
    if settle {
        fleet.ledger.lock().unwrap().set_measuring(true);
    } else {
        fleet.start_initial(scenario.initial, INITIAL_GAP).await;
    }
    let setup = if settle {
        Some(Duration::ZERO)
    } else if scenario.initial > 0 {
        fleet.until_count_balanced(Instant::now()).await
    } else {
        Some(Duration::ZERO)
    };
    if std::env::var_os("SIM_DEBUG").is_some() {
        let scans: u64 = fleet.scans().values().sum();
        eprintln!("setup: {scans} taker rounds' scans by the running workers");
    }
    let mut steps = Vec::new();
    fleet.ledger.lock().unwrap().set_measuring(true);
    let wave = settings.load.wave.map(|period| {
        let ledger = Arc::clone(&fleet.ledger);
        let (shards, seed) = (fleet.shards.clone(), settings.seed);
        let drawn: Vec<f64> = {
            let ledger = ledger.lock().unwrap();
            shards.iter().map(|k| ledger.load(k)).collect()
        };
        let first = Instant::now();
        tokio::spawn(async move {
            loop {
                let t = (Instant::now() - first).as_secs_f64();
                {
                    let mut ledger = ledger.lock().unwrap();
                    for (key, base) in shards.iter().zip(&drawn) {
                        ledger.set_load(key, base * load::wave_factor(key, seed, period, t));
                    }
                }
                tokio::time::sleep(load::WAVE_STEP).await;
            }
        })
    });
    let trace = Arc::new(Mutex::new(Vec::new()));
    let sampler = settings.load_trace.then(|| {
        let (ledger, trace) = (Arc::clone(&fleet.ledger), Arc::clone(&trace));
        let first = Instant::now();
        tokio::spawn(async move {
            loop {
                let at = (Instant::now() - first).as_secs_f64();
                let shares = ledger.lock().unwrap().shares();
                trace
                    .lock()
                    .unwrap()
                    .extend(shares.into_iter().map(|(w, share)| (at, w, share)));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    });
    if settle {
        steps.push(fleet.settle_from_start(scenario.initial).await);
    } else {
        for step in &scenario.steps {
            steps.push(fleet.apply(step).await);
        }
    }
    // At rest: nothing happens; moves should be 0, and the cost is the steady state.
    let usage = fleet.net.usage();
    let starts = fleet.starts();
    let rest_start = Instant::now();
    fleet.ledger.lock().unwrap().set_resting(true);
    let hot_shard = rest(&fleet, &settings).await;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    if let Some(wave) = wave {
        wave.abort();
    }
    let load = {
        let mut ledger = fleet.ledger.lock().unwrap();
        ledger.set_resting(false);
        ledger.set_measuring(false);
        report::LoadReport {
            model: settings.load.model.to_string(),
            capacities: settings.load.capacities.clone(),
            headroom: settings.load.headroom,
            at_rest: ledger.at_rest.average(),
            worst: ledger.at_rest.worst(),
            raw_at_rest: ledger.at_rest.raw_average(),
            hot_shard_isolated: hot_shard.and_then(|h| h.settled),
            hot_shard_published: hot_shard.and_then(|h| h.published),
            hot_shard_fully_published: hot_shard.and_then(|h| h.fully_published),
            trace: std::mem::take(&mut *trace.lock().unwrap()),
            overloaded_worker_seconds: ledger.measured.overloaded_worker_seconds,
            overloaded_worker_seconds_at_rest: ledger.at_rest.overloaded_worker_seconds,
        }
    };
    let rest_usage = fleet.net.usage().minus(&usage);
    let moves_at_rest = fleet.starts() - starts;
    let rest_hours = rest_start.elapsed().as_secs_f64() / 3600.0;
    let spread = fleet.spread();
    if std::env::var_os("SIM_DEBUG").is_some() {
        let l = fleet.ledger.lock().unwrap();
        for k in &fleet.shards {
            if !l.holder.contains_key(k) {
                eprintln!("UNHELD {k}");
            }
        }
        eprintln!("counts {:?}", l.counts);
    }
    let (violations, duplicates, healthy_lost) = {
        let ledger = fleet.ledger.lock().unwrap();
        // Request faults (throttles, transient failures, lost answers) hit every worker: then
        // none is healthy, and the figure is not given.
        let rates = settings.faults;
        let every_worker_faulted =
            rates.throttle > 0.0 || rates.transient > 0.0 || rates.ambiguous > 0.0;
        let healthy_lost = (!every_worker_faulted).then(|| ledger.healthy_lost());
        (ledger.violations, ledger.duplicates, healthy_lost)
    };
    let leases = fleet.shards.len();
    let simulated = begin.elapsed();
    for index in fleet.running.keys().copied().collect::<Vec<_>>() {
        fleet.crash(index);
    }
    for leaving in fleet.leaving.drain(..) {
        leaving.abort();
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    Report::new(
        &settings,
        setup.map(|d| d.as_secs_f64()),
        steps,
        report::Rest {
            seconds: settings.rest.as_secs_f64(),
            moves: moves_at_rest,
            usage: rest_usage,
            lease_hours: rest_hours * leases as f64,
        },
        spread,
        violations,
        duplicates,
        healthy_lost,
        load,
        simulated.as_secs_f64(),
        wall.elapsed().as_secs_f64(),
    )
}

/// What the rest saw of a lease turning hot (all in seconds after it turned).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HotShard {
    /// When the fleet was first settled around it (`Ledger::settled_around`).
    pub settled: Option<f64>,
    /// When a membership record first published a figure for it more than 10 % above the
    /// one published before it turned.
    pub published: Option<f64>,
    /// When a membership record first published a figure within 10 % of its new load.
    pub fully_published: Option<f64>,
}

/// The rest after the last step: nothing happens, except that one lease turns hot if
/// `--hot-after` says so. Returns what was seen of that lease, if one turned.
async fn rest(fleet: &Fleet, settings: &Settings) -> Option<HotShard> {
    let Some(after) = settings.load.hot_after.filter(|a| *a < settings.rest) else {
        tokio::time::sleep(settings.rest).await;
        return None;
    };
    tokio::time::sleep(after).await;
    let key = shard_key(load::turning_hot(settings.leases, settings.seed));
    // The highest figure any membership record publishes for the lease (read from the table
    // directly, at no simulated cost).
    let published = || async {
        let deadline = Instant::now() + Duration::from_secs(1);
        let members = fleet
            .net
            .table
            .list_members(deadline)
            .await
            .unwrap_or_default();
        members
            .iter()
            .filter_map(|m| m.lease_loads.get(&key).copied())
            .fold(None, |max: Option<f64>, f| {
                Some(max.map_or(f, |m| m.max(f)))
            })
    };
    let before = published().await;
    let load = {
        let mut ledger = fleet.ledger.lock().unwrap();
        ledger.heavier(&key, load::TURN_HOT_FACTOR);
        ledger.load(&key)
    };
    let turned = Instant::now();
    let end = turned + (settings.rest - after);
    let mut seen = HotShard::default();
    while Instant::now() < end {
        let at = (Instant::now() - turned).as_secs_f64();
        if seen.settled.is_none() && fleet.ledger.lock().unwrap().settled_around(&key) {
            seen.settled = Some(at);
        }
        if seen.fully_published.is_none() {
            if let Some(figure) = published().await {
                if seen.published.is_none() && before.is_none_or(|b| figure > b * 1.1) {
                    seen.published = Some(at);
                }
                if figure >= load * 0.9 {
                    seen.fully_published = Some(at);
                }
            }
        }
        let next = Instant::now() + Duration::from_millis(100);
        tokio::time::sleep_until(next.min(end)).await;
    }
    Some(seen)
}

/// Runs one simulation on a fresh single-threaded runtime on paused time, with the library's
/// jitter seeded, so that the same settings give the same report (wall time aside).
pub fn simulate(settings: Settings) -> Report {
    shardlease::clock::seed_thread(settings.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(run(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_turning_hot_weighs_on_its_holder_and_on_the_total() {
        let keys: Vec<LeaseKey> = (0..4).map(shard_key).collect();
        let mut ledger = Ledger {
            loads: keys.iter().cloned().zip([1.0; 4]).collect(),
            headroom: 1.25,
            ..Ledger::default()
        };
        ledger.set_shards(&keys);
        ledger.join(0);
        ledger.join(1);
        for (i, key) in keys.iter().enumerate() {
            ledger.start(i % 2, key);
        }
        ledger.set_resting(true);
        tokio::time::sleep(Duration::from_secs(10)).await;
        ledger.heavier(&keys[0], 20.0);
        tokio::time::sleep(Duration::from_secs(10)).await;
        ledger.set_resting(false);
        // 2 and 2 for 10 s (imbalance 1), then 21 and 2 against a mean of 11.5 for 10 s.
        assert_eq!(ledger.total_load, 23.0);
        assert_eq!(ledger.at_rest.worst(), Some(21.0 / 11.5));
        let average = (1.0 + 21.0 / 11.5) / 2.0;
        assert!((ledger.at_rest.average().unwrap() - average).abs() < 1e-12);
        // Worker 0 holds 21 against its share with headroom, 11.5 x 1.25: overloaded 10 s.
        assert_eq!(ledger.at_rest.overloaded_worker_seconds, 10.0);
    }
}
