//! The campaign's fleet: worker processes (a worker, its clock, its connection and its
//! application), started, frozen, cut off, killed, doubled and healed as the schedule says.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use shardlease::admin::Admin;
use shardlease::balance::{KclBalance, LoadBalance};
use shardlease::clock::Clock;
use shardlease::lease::NewLease;
use shardlease::source::{Shard, StaticShardSource};
use shardlease::worker::Worker;
use shardlease::{Balance, LeaseKey, LeaseStore, WorkerConfig, WorkerId};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::app::{self, AppControl};
use super::ledger::{checkpoint_text, Ledger, OPERATOR_PROCESS};
use super::schedule::{clock_rate, Balancing, Event, Schedule};
use crate::sim::clock::SimClock;
use crate::sim::net::{Chaos, Link, Net, SimStore};

/// How far past its documented bound a graceful shutdown may return: the worker's last wait
/// ends on the bound, on a timer that fires up to a millisecond after it (tokio rounds up),
/// and a poll may fall in between.
const TIMER_SLACK: Duration = Duration::from_millis(10);

/// One worker process.
pub struct Process {
    /// The worker id's number: processes of one host share it (restarts, twins).
    pub host: u64,
    pub worker: Worker,
    pub link: Link,
    pub clock: SimClock,
    pub app: JoinHandle<()>,
    pub control: AppControl,
    /// Started while another live process had its id.
    pub twin: bool,
}

/// A process shutting down gracefully.
pub struct Leaving {
    pub process: u64,
    pub host: u64,
    pub since: Instant,
    /// When `shutdown()` must have returned (shutdown timeout plus one store timeout, on the
    /// process's clock).
    pub limit: Instant,
    pub link: Link,
    pub clock: SimClock,
    pub control: AppControl,
    pub app: JoinHandle<()>,
    pub shutdown: JoinHandle<()>,
}

pub fn worker_id(host: u64) -> WorkerId {
    WorkerId::new(format!("w{host:05}")).expect("valid id")
}

fn shard_key(index: usize) -> LeaseKey {
    LeaseKey::new(format!("shard-{index:07}")).expect("valid key")
}

/// How many processes a fleet may grow to.
pub const MAX_PROCESSES: usize = 8;

pub struct Fleet {
    pub net: Arc<Net>,
    pub ledger: Arc<Mutex<Ledger>>,
    pub config: WorkerConfig,
    pub procs: BTreeMap<u64, Process>,
    pub leaving: Vec<Leaving>,
    pub source: StaticShardSource,
    /// The shards that exist now, and those removed from the source.
    pub shards: Vec<LeaseKey>,
    pub removed: Vec<LeaseKey>,
    next_shard: usize,
    next_process: u64,
    next_host: u64,
    seed: u64,
    max_skew: f64,
    checkpoint_every: Duration,
    /// Processes started with a skewed clock.
    pub skewed: u64,
    /// The workers' balance policy.
    pub balancing: Balancing,
    /// The operator's tool, with a connection of its own.
    operator: Admin<Arc<SimStore>>,
    /// The operator's moves in progress.
    tools: Vec<JoinHandle<()>>,
}

/// How long an operator's move waits for an owner's application (`--timeout` of the tool).
const OPERATOR_WAIT: Duration = Duration::from_secs(30);
/// How long a drained worker may take to notice the drain before it counts as hung: the
/// notice waits for its next beat, at most a renew interval (4.5 s) plus the drain's own
/// requests, each up to a store timeout under faults.
const DRAIN_NOTICED: Duration = Duration::from_secs(60);

impl Fleet {
    /// A fleet over `schedule.leases` unowned leases (none of its workers started yet).
    pub async fn new(net: Arc<Net>, ledger: Arc<Mutex<Ledger>>, schedule: &Schedule) -> Self {
        let shards: Vec<LeaseKey> = (0..schedule.leases).map(shard_key).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        for key in &shards {
            let created = net.table.create(NewLease::new(key.clone()), deadline).await;
            assert!(created.expect("in memory").is_done());
        }
        let operator = Arc::new(SimStore::for_operator(Arc::clone(&net), OPERATOR_PROCESS));
        let config = match schedule.balancing {
            Balancing::Load => WorkerConfig::default().balance(Balance::Load),
            Balancing::Count | Balancing::Kcl => WorkerConfig::default(),
        };
        Self {
            source: StaticShardSource::from_keys(shards.clone()),
            next_shard: shards.len(),
            shards,
            removed: Vec::new(),
            net,
            ledger,
            config,
            procs: BTreeMap::new(),
            leaving: Vec::new(),
            next_process: 0,
            next_host: 0,
            seed: schedule.seed,
            max_skew: schedule.max_skew,
            checkpoint_every: schedule.checkpoint_every,
            skewed: 0,
            balancing: schedule.balancing,
            operator: Admin::new(operator),
            tools: Vec::new(),
        }
    }

    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a start may take: its store writes, each within one store timeout, and one
    /// more store timeout to spare (as for a shutdown).
    fn start_limit(&self) -> Duration {
        self.config.store_timeout * 2
    }

    /// Starts a worker of a new host.
    pub async fn join(&mut self) -> Result<(), String> {
        let host = self.next_host;
        self.next_host += 1;
        self.start(host, false).await
    }

    /// Starts a process of `host`; `twin`: while another live process has its id. A start
    /// refused by the store (its retries ran out) is no violation: the process just exits.
    pub async fn start(&mut self, host: u64, twin: bool) -> Result<(), String> {
        let process = self.next_process;
        self.next_process += 1;
        // A twin runs on another machine: a clock of its own.
        let machine = if twin { host + 1_000_000 } else { host };
        let rate = clock_rate(self.seed, machine, self.max_skew);
        if rate != 1.0 {
            self.skewed += 1;
        }
        let clock = SimClock::new(rate);
        let (store, link) = SimStore::for_process(Arc::clone(&self.net), process, clock.clone());
        let mut builder = Worker::builder(Arc::new(store), worker_id(host))
            .config(self.config.clone())
            .clock(clock.clone())
            .source(self.source.clone());
        if self.balancing == Balancing::Kcl {
            builder = builder.policy(KclBalance::default());
        }
        let started = tokio::time::timeout(self.start_limit(), builder.start()).await;
        let (worker, events) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(_)) => {
                link.kill();
                return Ok(());
            }
            Err(_) => {
                link.kill();
                return Err(format!(
                    "p{process} ({}) did not start within {:?}",
                    worker_id(host),
                    self.start_limit()
                ));
            }
        };
        let control = AppControl {
            report_load: self.balancing == Balancing::Load,
            ..AppControl::default()
        };
        let app = tokio::spawn(app::run(
            process,
            events,
            Arc::clone(&self.ledger),
            clock.clone(),
            self.checkpoint_every,
            control.clone(),
            self.seed ^ process.wrapping_mul(0x2545_F491_4F6C_DD1D),
        ));
        self.procs.insert(
            process,
            Process {
                host,
                worker,
                link,
                clock,
                app,
                control,
                twin,
            },
        );
        Ok(())
    }

    /// Processes that are running (not leaving), in order.
    pub fn running(&self) -> Vec<u64> {
        self.procs.keys().copied().collect()
    }

    /// Running processes that are not frozen.
    pub fn awake(&self) -> Vec<u64> {
        let ledger = self.ledger();
        self.procs
            .keys()
            .copied()
            .filter(|p| !ledger.is_frozen(*p))
            .collect()
    }

    /// One of `among`, chosen by `pick`.
    pub fn choose(among: &[u64], pick: u64) -> Option<u64> {
        (!among.is_empty()).then(|| among[(pick % among.len() as u64) as usize])
    }

    /// Kills a process (SIGKILL): nothing of it runs or reaches the table any more.
    pub fn crash(&mut self, process: u64) {
        let Some(p) = self.procs.remove(&process) else {
            return;
        };
        p.link.kill();
        p.app.abort();
        self.ledger().gone(process);
        drop(p.worker);
    }

    /// Starts a graceful shutdown; [`poll_leaving`](Self::poll_leaving) follows it.
    pub fn leave(&mut self, process: u64) {
        let Some(p) = self.procs.remove(&process) else {
            return;
        };
        let since = Instant::now();
        let local = p.clock.now() + self.config.shutdown_timeout + self.config.store_timeout;
        self.leaving.push(Leaving {
            process,
            host: p.host,
            since,
            limit: p.clock.real(local) + TIMER_SLACK,
            link: p.link,
            clock: p.clock.clone(),
            control: p.control.clone(),
            app: p.app,
            shutdown: tokio::spawn(p.worker.shutdown()),
        });
    }

    /// Ends the shutdowns that returned (the process exits); returns those that did not
    /// return in time, killed.
    pub fn poll_leaving(&mut self) -> Vec<String> {
        let now = Instant::now();
        let mut late = Vec::new();
        let mut still = Vec::new();
        for leaving in std::mem::take(&mut self.leaving) {
            let done = leaving.shutdown.is_finished();
            if !done && now <= leaving.limit {
                still.push(leaving);
                continue;
            }
            if !done {
                late.push(format!(
                    "shutdown() of p{} ({}) had not returned {:.1} s after it began",
                    leaving.process,
                    worker_id(leaving.host),
                    (now - leaving.since).as_secs_f64()
                ));
                leaving.shutdown.abort();
            }
            leaving.link.kill();
            leaving.app.abort();
            self.ledger().gone(leaving.process);
        }
        self.leaving = still;
        late
    }

    /// An operator drains `process`: the tool tells its session, and the process leaves by
    /// itself once it hears (followed as a graceful leave; one that never hears is shut down
    /// after `DRAIN_NOTICED`).
    pub fn drain(&mut self, process: u64) {
        let Some(p) = self.procs.remove(&process) else {
            return;
        };
        let admin = self.operator.clone();
        let worker = worker_id(p.host);
        self.tools.push(tokio::spawn(async move {
            let _ = admin.drain(&worker, OPERATOR_WAIT, |_| {}).await;
        }));
        let since = Instant::now();
        let local = p.clock.now()
            + DRAIN_NOTICED
            + self.config.shutdown_timeout
            + self.config.store_timeout;
        let (worker, clock) = (p.worker, p.clock.clone());
        let shutdown = tokio::spawn(async move {
            {
                let noticed = clock.sleep_until(clock.now() + DRAIN_NOTICED);
                tokio::select! {
                    biased;
                    _ = worker.stopped() => {}
                    _ = noticed => {}
                }
            }
            worker.shutdown().await;
        });
        self.leaving.push(Leaving {
            process,
            host: p.host,
            since,
            limit: p.clock.real(local) + TIMER_SLACK,
            link: p.link,
            clock: p.clock.clone(),
            control: p.control.clone(),
            app: p.app,
            shutdown,
        });
    }

    /// Starts an operator's move on the lease `pick` chooses (among the current shards), as
    /// the `shardlease` tool makes it: it runs beside the fleet until it is done or fails.
    pub fn operate(&mut self, event: &Event) {
        let pick = match event {
            Event::Release { pick }
            | Event::SetCheckpoint { pick, .. }
            | Event::ResetCheckpoint { pick }
            | Event::Delete { pick } => *pick,
            _ => return,
        };
        let Some(key) = (!self.shards.is_empty())
            .then(|| self.shards[(pick % self.shards.len() as u64) as usize].clone())
        else {
            return;
        };
        let admin = self.operator.clone();
        let event = event.clone();
        let ledger = Arc::clone(&self.ledger);
        self.ledger().operated(&key, false);
        self.tools.push(tokio::spawn(async move {
            let outcome = match event {
                Event::Release { .. } => {
                    admin.release(&key, OPERATOR_WAIT, |_| {}).await.map(|_| ())
                }
                Event::SetCheckpoint { value, .. } => admin
                    .set_checkpoint(
                        &key,
                        Some(&checkpoint_text(value, 0)),
                        true,
                        OPERATOR_WAIT,
                        |_| {},
                    )
                    .await
                    .map(|_| ()),
                Event::ResetCheckpoint { .. } => admin
                    .set_checkpoint(&key, None, true, OPERATOR_WAIT, |_| {})
                    .await
                    .map(|_| ()),
                _ => admin
                    .delete(&key, true, OPERATOR_WAIT, |_| {})
                    .await
                    .map(|_| ()),
            };
            let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            ledger.operated(&key, true);
            ledger.trace(|| format!("operator {event:?} on {key}: {outcome:?}"));
        }));
    }

    /// Freezes a process (SIGSTOP) until `until`: its clock, its connection, its application.
    pub fn freeze(&mut self, process: u64, until: Instant) {
        let Some(p) = self.procs.get(&process) else {
            return;
        };
        p.clock.freeze_until(until);
        p.link.freeze_until(until);
        self.ledger().freeze(process);
    }

    /// The process goes on (SIGCONT).
    pub fn thaw(&mut self, process: u64) {
        if let Some(p) = self.procs.get(&process) {
            p.clock.thaw();
            p.link.thaw();
        }
        self.ledger().thaw(process);
    }

    pub fn add_shards(&mut self, n: usize) {
        for _ in 0..n {
            let key = shard_key(self.next_shard);
            self.next_shard += 1;
            self.source.add(Shard::new(key.clone()));
            self.shards.push(key);
        }
    }

    /// Removes `n` shards chosen by `pick`, keeping at least four.
    pub fn remove_shards(&mut self, n: usize, pick: u64) -> usize {
        let n = n.min(self.shards.len().saturating_sub(4));
        let mut gone = self.shards.clone();
        gone.shuffle(&mut StdRng::seed_from_u64(pick));
        gone.truncate(n);
        for key in &gone {
            self.source.remove(key);
        }
        self.shards.retain(|k| !gone.contains(k));
        self.removed.extend(gone);
        n
    }

    /// Everything heals: rates to zero, no freeze, cut-off, spike or late application, and
    /// one live process per id (the older twin is killed). At least one worker runs.
    pub async fn heal(&mut self) -> Result<(), String> {
        self.net.chaos.set(Chaos::default());
        for process in self.running() {
            self.thaw(process);
            let p = &self.procs[&process];
            p.link.set_cut_off(false);
            p.link.end_spike();
            p.control.late.set(false);
        }
        // A process leaving (shutting down, or drained and not yet noticed) heals too: its
        // application finishes a handoff at once from now on, as every other one does.
        for leaving in &self.leaving {
            leaving.clock.thaw();
            leaving.link.thaw();
            leaving.link.set_cut_off(false);
            leaving.link.end_spike();
            leaving.control.late.set(false);
        }
        let thawed: Vec<u64> = self.leaving.iter().map(|l| l.process).collect();
        for process in thawed {
            self.ledger().thaw(process);
        }
        let mut seen = BTreeSet::new();
        for process in self.running().into_iter().rev() {
            if !seen.insert(self.procs[&process].host) {
                self.crash(process);
            }
        }
        if self.procs.is_empty() {
            return self.join().await;
        }
        Ok(())
    }

    /// Why the fleet is not balanced: every current shard processed by exactly one running
    /// process, and the leases each processes within one of each other (counting the leases
    /// of removed shards not yet retired, as the balance does: they are leases until then).
    /// Balance by load (every lease a load of 1) aims at a band, not at one count: a process
    /// is balanced inside the policy's tolerance of the mean, or within one lease of every
    /// other process (where the leases are too few for any count to fall inside the band).
    pub fn unbalanced(&self) -> Option<String> {
        let ledger = self.ledger();
        let mut counts: BTreeMap<u64, usize> = self.procs.keys().map(|p| (*p, 0)).collect();
        let mut unprocessed = Vec::new();
        for key in &self.shards {
            match ledger.holder(key) {
                Some(p) if counts.contains_key(&p) => {}
                Some(p) => return Some(format!("{key} processed by p{p}, which is not running")),
                None => unprocessed.push(key.as_str()),
            }
        }
        if !unprocessed.is_empty() {
            return Some(format!("unprocessed: {}", unprocessed.join(" ")));
        }
        for (p, n) in ledger.counts() {
            if let Some(count) = counts.get_mut(&p) {
                *count = n;
            }
        }
        let (min, max) = counts
            .values()
            .fold((usize::MAX, 0), |(lo, hi), c| (lo.min(*c), hi.max(*c)));
        let even = |c: usize| c + 1 >= max && c <= min + 1;
        let balanced = if self.balancing == Balancing::Load {
            let mean = counts.values().sum::<usize>() as f64 / counts.len().max(1) as f64;
            let band = mean * LoadBalance::default().tolerance + 1e-9;
            counts
                .values()
                .all(|c| (*c as f64 - mean).abs() <= band || even(*c))
        } else {
            max <= min + 1
        };
        (!balanced).then(|| format!("leases per process {counts:?}"))
    }

    /// Whether a lease is on its way between workers: a current shard whose item in the table
    /// names another worker than the process that processes it, or a handoff. A fleet counted
    /// balanced in such a moment (a steal waiting for its owner's acknowledgement, whose owner
    /// has not yet stopped) is not settled yet: the move's last step, the lease processed by
    /// nobody until the new owner starts it, is still to come.
    pub async fn moving(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        let Ok(snapshot) = self.net.table.snapshot(deadline).await else {
            return true;
        };
        let ledger = self.ledger();
        let current: BTreeSet<&LeaseKey> = self.shards.iter().collect();
        snapshot
            .leases
            .iter()
            .filter(|lease| current.contains(&lease.key))
            .any(|lease| {
                let processor = ledger
                    .holder(&lease.key)
                    .and_then(|p| self.procs.get(&p))
                    .map(|proc| worker_id(proc.host));
                lease.handoff_to.is_some() || processor.as_ref() != lease.owner.as_ref()
            })
    }

    /// The fleet as text, for a failing schedule's report.
    pub fn describe(&self) -> String {
        let counts = self.ledger().counts();
        let procs: Vec<String> = self
            .procs
            .iter()
            .map(|(p, proc)| {
                format!(
                    "p{p}={}{} rate {:.4} processes {}",
                    worker_id(proc.host),
                    if proc.twin { " (twin)" } else { "" },
                    proc.clock.rate(),
                    counts.get(p).copied().unwrap_or(0)
                )
            })
            .collect();
        procs.join(", ")
    }

    /// Prints the table's leases and members to stderr (`SIM_DEBUG`, for a replay).
    pub async fn dump_table(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        match self.net.table.snapshot(deadline).await {
            Ok(snapshot) => {
                for member in &snapshot.members {
                    eprintln!("MEMBER {member:?}");
                }
                for lease in &snapshot.leases {
                    eprintln!("LEASE {lease:?}");
                }
            }
            Err(error) => eprintln!("no snapshot: {error}"),
        }
        let ledger = self.ledger();
        for key in &self.shards {
            eprintln!("PROCESSED {key} by {:?}", ledger.holder(key));
        }
    }

    /// Leases of removed shards still in the table.
    pub async fn not_retired(&self) -> Vec<LeaseKey> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = Vec::new();
        for key in &self.removed {
            if let Ok(Some(_)) = self.net.table.get(key, deadline).await {
                left.push(key.clone());
            }
        }
        left
    }

    /// Items in the table (for the growth check).
    pub async fn table_items(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        let snapshot = self.net.table.snapshot(deadline).await.expect("in memory");
        snapshot.leases.len() + snapshot.members.len()
    }

    /// Kills every process and the operator's tool (the end of a schedule).
    pub fn stop_all(&mut self) {
        for tool in self.tools.drain(..) {
            tool.abort();
        }
        for process in self.running() {
            self.crash(process);
        }
        for leaving in self.leaving.drain(..) {
            leaving.shutdown.abort();
            leaving.link.kill();
            leaving.app.abort();
        }
    }
}
