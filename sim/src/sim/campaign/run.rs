//! One schedule: start the fleet and balance it, run the fault phase, heal, and check what
//! must hold afterwards; optionally rest a simulated day and check nothing grows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardlease::clock;
use shardlease::lease::LeaseKey;
use tokio::time::Instant;

use super::fleet::{Fleet, MAX_PROCESSES};
use super::ledger::{Ledger, Violation, TRACE};
use super::schedule::{Balancing, Event, Fault, Schedule, LEASE, SPIKE_MAX};
use crate::sim::net::{Chaos, FaultRates, Latencies, Latency, Net};

/// What one schedule found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub schedule: Schedule,
    pub violations: Vec<Violation>,
    /// Faults injected, by kind: events, requests for the rates, skewed processes.
    pub injected: BTreeMap<Fault, u64>,
    /// Of the stale reads, those that lagged by more than a lease duration.
    pub stale_long: u64,
    pub simulated: Duration,
}

/// Settings of the store model every schedule runs with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Knobs {
    /// The store's own per-attempt timeout (see `ChaosNet`); `None`: like today's DynamoDB
    /// backend, an unanswered attempt waits until its caller gives up.
    pub attempt_timeout: Option<Duration>,
    /// The workers' `renew_interval` (the session's beat), if not the default
    /// (`--renew-interval`).
    pub renew_interval: Option<Duration>,
}

/// The store's latency: log-normal, median 5 ms, p99 25 ms (as the scenarios' default).
const LATENCY: Latency = Latency {
    median: Duration::from_millis(5),
    p99: Duration::from_millis(25),
};
/// How often the checks look at the fleet.
const POLL: Duration = Duration::from_millis(100);
/// The fleet must be balanced within this long of the heal (and of its start).
const BALANCE_LIMIT: Duration = Duration::from_secs(60);
/// Then it must stay balanced this long.
const SETTLED_FOR: Duration = Duration::from_secs(60);
/// A take after the heal: a scan page, the take, each well under a second even at the
/// latency's tail (p99 25 ms; the log-normal is capped at 60 s, and no fault is injected).
const ROUND_TRIPS: Duration = Duration::from_secs(1);

/// Runs `schedule` on a fresh single-threaded runtime on paused time, with the library's
/// jitter seeded: the same schedule gives the same outcome.
pub fn run(schedule: Schedule, knobs: Knobs) -> Outcome {
    clock::seed_thread(schedule.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(drive(schedule, knobs))
}

/// Something the driver does at a given moment.
enum Action {
    Event(Event),
    Thaw(u64),
    Uncut(u64),
    /// A restarted host starts again.
    Start(u64),
}

struct Driver {
    begin: Instant,
    fleet: Fleet,
    injected: BTreeMap<Fault, u64>,
    /// Hung requests already reported.
    reported: BTreeSet<u64>,
    /// When each process was last thawed.
    thawed: BTreeMap<u64, Instant>,
}

impl Driver {
    fn violate(&self, invariant: &'static str, detail: String) {
        self.fleet.ledger().violate(invariant, detail);
    }

    fn count(&mut self, fault: Fault) {
        *self.injected.entry(fault).or_default() += 1;
    }

    async fn join(&mut self) {
        if let Err(why) = self.fleet.join().await {
            self.violate("start-hang", why);
        }
    }

    async fn start(&mut self, host: u64) {
        let twin = self.fleet.procs.values().any(|p| p.host == host);
        if let Err(why) = self.fleet.start(host, twin).await {
            self.violate("start-hang", why);
        }
    }

    /// Applies one event of the schedule; returns what to do later.
    async fn apply(&mut self, event: Event) -> Option<(Duration, Action)> {
        let running = self.fleet.running();
        let awake = self.fleet.awake();
        let fault = event.fault();
        let later = match event {
            Event::Freeze { pick, span } => {
                let p = Fleet::choose(&awake, pick)?;
                self.fleet.freeze(p, Instant::now() + span);
                Some((span, Action::Thaw(p)))
            }
            Event::CutOff { pick, span } => {
                let p = Fleet::choose(&running, pick)?;
                self.fleet.procs[&p].link.set_cut_off(true);
                Some((span, Action::Uncut(p)))
            }
            Event::Spike { pick, span } => {
                let p = Fleet::choose(&running, pick)?;
                let link = &self.fleet.procs[&p].link;
                link.spike_until(Instant::now() + span, LEASE, SPIKE_MAX);
                None
            }
            Event::Crash { pick } => {
                if running.len() < 2 {
                    return None;
                }
                let p = Fleet::choose(&running, pick)?;
                self.fleet.crash(p);
                None
            }
            Event::Restart { pick, down } => {
                let p = Fleet::choose(&running, pick)?;
                let host = self.fleet.procs[&p].host;
                self.fleet.crash(p);
                Some((down, Action::Start(host)))
            }
            Event::Twin { pick } => {
                let hosts: Vec<u64> = running.iter().map(|p| self.fleet.procs[p].host).collect();
                let single: Vec<u64> = running
                    .iter()
                    .copied()
                    .filter(|p| {
                        let host = self.fleet.procs[p].host;
                        hosts.iter().filter(|h| **h == host).count() == 1
                    })
                    .collect();
                if running.len() >= MAX_PROCESSES {
                    return None;
                }
                let p = Fleet::choose(&single, pick)?;
                let host = self.fleet.procs[&p].host;
                self.count(fault);
                self.start(host).await;
                return None;
            }
            Event::Panic { pick } => {
                let p = Fleet::choose(&running, pick)?;
                self.fleet.procs[&p].control.panic.notify_one();
                None
            }
            Event::Handoff { pick } => {
                let p = Fleet::choose(&running, pick)?;
                let late = &self.fleet.procs[&p].control.late;
                late.set(true);
                None
            }
            Event::Join => {
                if running.len() + self.fleet.leaving.len() >= MAX_PROCESSES {
                    return None;
                }
                self.count(fault);
                self.join().await;
                return None;
            }
            Event::Leave { pick } => {
                if running.len() < 2 {
                    return None;
                }
                let p = Fleet::choose(&awake, pick)?;
                self.fleet.leave(p);
                None
            }
            Event::AddShards(n) => {
                self.fleet.add_shards(n);
                None
            }
            Event::RemoveShards { n, pick } => {
                if self.fleet.remove_shards(n, pick) == 0 {
                    return None;
                }
                None
            }
            Event::Drain { pick } => {
                // A worker whose id one process alone has, and never the last one.
                let single: Vec<u64> = running
                    .iter()
                    .copied()
                    .filter(|p| {
                        let host = self.fleet.procs[p].host;
                        running
                            .iter()
                            .filter(|q| self.fleet.procs[*q].host == host)
                            .count()
                            == 1
                    })
                    .collect();
                if running.len() < 2 {
                    return None;
                }
                let p = Fleet::choose(&single, pick)?;
                self.fleet.drain(p);
                None
            }
            Event::Aim(aim) => {
                // Counted by the network when it hits its request.
                self.fleet.net.chaos.aim(aim);
                return None;
            }
            Event::Release { .. }
            | Event::SetCheckpoint { .. }
            | Event::ResetCheckpoint { .. }
            | Event::Delete { .. } => {
                self.fleet.operate(&event);
                None
            }
        };
        self.count(fault);
        later
    }

    async fn act(&mut self, action: Action) -> Option<(Duration, Action)> {
        if TRACE.load(std::sync::atomic::Ordering::Relaxed) {
            let text = match &action {
                Action::Event(event) => {
                    format!("event {event:?}; fleet: {}", self.fleet.describe())
                }
                Action::Thaw(p) => format!("thaw p{p}"),
                Action::Uncut(p) => format!("reconnect p{p}"),
                Action::Start(host) => format!("restart w{host:05}"),
            };
            self.fleet.ledger().trace(|| text);
        }
        match action {
            Action::Event(event) => return self.apply(event).await,
            Action::Thaw(p) => {
                self.fleet.thaw(p);
                self.thawed.insert(p, Instant::now());
            }
            Action::Uncut(p) => {
                if let Some(proc) = self.fleet.procs.get(&p) {
                    proc.link.set_cut_off(false);
                }
            }
            Action::Start(host) => self.start(host).await,
        }
        None
    }

    /// The checks that run all along: shutdowns that do not return, thawed processes that
    /// go on processing what others took, requests whose callers never give up.
    fn poll(&mut self) {
        for late in self.fleet.poll_leaving() {
            self.violate("shutdown-hang", late);
        }
        self.fleet.ledger().poll();
        let now = Instant::now();
        let grace = self.fleet.config.store_timeout;
        for (id, hung) in self.fleet.net.chaos.hung() {
            if self.reported.contains(&id) {
                continue;
            }
            let process = hung.process;
            let alive = self.fleet.procs.contains_key(&process)
                || self.fleet.leaving.iter().any(|l| l.process == process);
            if !alive || self.fleet.ledger().is_frozen(process) {
                continue;
            }
            let since = self
                .thawed
                .get(&process)
                .map_or(hung.deadline, |t| hung.deadline.max(*t));
            if now <= since + grace {
                continue;
            }
            self.reported.insert(id);
            let begin = self.begin;
            self.violate(
                "hang",
                format!(
                    "{} {} of p{process} sent at {:.1} s was never answered; its caller still waits {:.1} s after the call's deadline",
                    hung.operation,
                    if hung.key.is_empty() { "(the table)" } else { &hung.key },
                    (hung.since - begin).as_secs_f64(),
                    (now - hung.deadline).as_secs_f64()
                ),
            );
        }
    }

    async fn sleep_polling(&mut self, until: Instant) {
        while Instant::now() < until {
            tokio::time::sleep_until(until.min(Instant::now() + POLL)).await;
            self.poll();
        }
    }
}

async fn drive(schedule: Schedule, knobs: Knobs) -> Outcome {
    let begin = Instant::now();
    let net = Net::new(
        schedule.seed,
        Latencies::all(LATENCY),
        FaultRates::default(),
    );
    net.chaos.set(Chaos::default());
    net.chaos.set_attempt_timeout(knobs.attempt_timeout);
    let ledger = Arc::new(Mutex::new(Ledger::new(begin)));
    net.chaos.set_audit(ledger.clone());
    let mut fleet = Fleet::new(Arc::clone(&net), Arc::clone(&ledger), &schedule).await;
    if let Some(interval) = knobs.renew_interval {
        fleet.config.renew_interval = Some(interval);
    }
    let mut driver = Driver {
        begin,
        fleet,
        injected: BTreeMap::new(),
        reported: BTreeSet::new(),
        thawed: BTreeMap::new(),
    };
    for _ in 0..schedule.workers {
        driver.join().await;
    }
    let setup_limit = Instant::now() + BALANCE_LIMIT;
    while driver.fleet.unbalanced().is_some() && Instant::now() < setup_limit {
        driver.sleep_polling(Instant::now() + POLL).await;
    }
    if let Some(why) = driver.fleet.unbalanced() {
        driver.violate("setup", format!("not balanced before the faults: {why}"));
    }

    // The fault phase.
    net.chaos.set(schedule.rates);
    let start = Instant::now();
    let heal_at = start + schedule.faults_for;
    let mut queue: BTreeMap<(Instant, u64), Action> = BTreeMap::new();
    let mut seq = 0u64;
    for (at, event) in &schedule.events {
        queue.insert((start + *at, seq), Action::Event(event.clone()));
        seq += 1;
    }
    loop {
        let now = Instant::now();
        while let Some(entry) = queue.first_entry() {
            if entry.key().0 > now || entry.key().0 >= heal_at {
                break;
            }
            let action = entry.remove();
            if let Some((after, next)) = driver.act(action).await {
                queue.insert((Instant::now() + after, seq), next);
                seq += 1;
            }
        }
        driver.poll();
        if Instant::now() >= heal_at {
            break;
        }
        let next = queue
            .keys()
            .next()
            .map_or(heal_at, |(at, _)| *at)
            .min(Instant::now() + POLL)
            .min(heal_at);
        tokio::time::sleep_until(next.max(Instant::now())).await;
    }

    // The heal: restarts due later start now, every other fault ends.
    for (_, action) in std::mem::take(&mut queue) {
        if let Action::Start(host) = action {
            driver.start(host).await;
        }
    }
    if let Err(why) = driver.fleet.heal().await {
        driver.violate("start-hang", why);
    }
    let healed = Instant::now();
    for p in driver.fleet.running() {
        driver.thawed.insert(p, healed);
    }
    driver.fleet.ledger().heal();
    after_heal(&mut driver, &schedule, healed).await;
    if schedule.day_rest {
        day_at_rest(&mut driver).await;
    }

    let mut injected = driver.injected.clone();
    if let Some(policy) = schedule.balancing.fault() {
        injected.insert(policy, 1);
    }

    let counted = net.chaos.injected();
    for (fault, n) in [
        (Fault::Throttle, counted.throttle),
        (Fault::Transient, counted.transient),
        (Fault::Lost, counted.lost),
        (Fault::Never, counted.never),
        (Fault::Skew, driver.fleet.skewed),
        (Fault::LateWrite, counted.late),
        (Fault::StaleRead, counted.stale),
    ] {
        if n > 0 {
            injected.insert(fault, n);
        }
    }
    driver.fleet.stop_all();
    let violations = std::mem::take(&mut driver.fleet.ledger().violations);
    Outcome {
        schedule,
        violations,
        injected,
        stale_long: counted.stale_long,
        simulated: begin.elapsed(),
    }
}

/// After the heal: every lease processed again within a lease duration and two taker
/// intervals (on the slowest clock), the fleet balanced within a minute (at some moment
/// after that failover time) and from then on staying so once every removed shard's lease
/// is retired, and retired they all are by the end.
///
/// A fleet balanced by a policy that steals (`KclBalance`) gets another lease duration and a
/// beat: a steal is started only once its owner gave the lease up or its session is surely
/// over, and an owner whose session dies, or is replaced, or cannot beat, around the steal
/// gives nothing up: the thief counts a lease duration from the read that showed it so.
async fn after_heal(driver: &mut Driver, schedule: &Schedule, healed: Instant) {
    let config = driver.fleet.config.clone();
    let mut failover = config.lease_duration + config.effective_taker_interval() * 2;
    if schedule.balancing == Balancing::Kcl {
        failover += config.lease_duration + config.effective_renew_interval();
    }
    let processed_by = healed + failover.div_f64(1.0 - schedule.max_skew) + ROUND_TRIPS;
    let balanced_by = healed + BALANCE_LIMIT;
    let end = healed + BALANCE_LIMIT + SETTLED_FOR;
    let mut processed_checked = false;
    let mut reported: BTreeSet<LeaseKey> = BTreeSet::new();
    // From the end of an operator's move: a fleet at rest sees a deleted lease missing at its
    // next slow scan, its discoverer creates it again at its next listing, then a lease
    // duration and two taker rounds as after the heal.
    let operated_bound = ((config.slow_scan_interval + config.discovery_interval).mul_f64(1.1)
        + failover)
        .div_f64(1.0 - schedule.max_skew)
        + ROUND_TRIPS;
    let mut balanced = false;
    let mut settled: Option<Instant> = None;
    let mut unsettled = false;
    loop {
        driver.poll();
        let now = Instant::now();
        if !processed_checked && now >= processed_by {
            // A lease an operator's tool moved is judged from the end of that move: a delete
            // (or a reset) ending after the heal leaves it to the discoverer's next listing,
            // then to a round. A move still in progress is judged once it ended.
            let (late, waiting): (Vec<&LeaseKey>, usize) = {
                let ledger = driver.fleet.ledger();
                let mut waiting = 0;
                let late = driver
                    .fleet
                    .shards
                    .iter()
                    .filter(|k| {
                        let by = match ledger.operated_at(k) {
                            None => processed_by,
                            Some(None) => {
                                waiting += 1;
                                return false;
                            }
                            Some(Some(ended)) => processed_by.max(ended + operated_bound),
                        };
                        now >= by && ledger.processed_since_heal(k).is_none_or(|at| at > by)
                    })
                    .filter(|k| !reported.contains(*k))
                    .collect();
                (late, waiting)
            };
            let all_judged = waiting == 0
                && driver.fleet.shards.iter().all(|k| {
                    let ledger = driver.fleet.ledger();
                    match ledger.operated_at(k) {
                        Some(Some(ended)) => now >= processed_by.max(ended + operated_bound),
                        Some(None) => false,
                        None => true,
                    }
                });
            if !late.is_empty() {
                let names: Vec<&str> = late.iter().map(|k| k.as_str()).collect();
                let detail = format!(
                    "{} of {} leases not processed within {:.1} s of the heal (of an operator's move on them): {}; fleet: {}",
                    late.len(),
                    driver.fleet.shards.len(),
                    (processed_by - healed).as_secs_f64(),
                    names.join(" "),
                    driver.fleet.describe()
                );
                reported.extend(late.into_iter().cloned());
                driver.violate("unprocessed", detail);
                if std::env::var_os("SIM_DEBUG").is_some() {
                    driver.fleet.dump_table().await;
                }
            }
            processed_checked = all_judged;
        }
        let retired = driver.fleet.not_retired().await.is_empty();
        // Until every lease could have failed over, a balance may be the stale one of a
        // process that has not yet noticed its leases are gone: it does not count.
        let judged = now >= processed_by;
        match driver.fleet.unbalanced() {
            None if !judged => {}
            None => {
                balanced = true;
                if retired && settled.is_none() && !driver.fleet.moving().await {
                    settled = Some(now);
                }
            }
            Some(why) => {
                if let Some(at) = settled.filter(|_| !unsettled) {
                    unsettled = true;
                    let detail = format!(
                        "balanced {:.1} s after the heal, then not at {:.1} s: {why}",
                        (at - healed).as_secs_f64(),
                        (now - healed).as_secs_f64()
                    );
                    driver.violate("unsettled", detail);
                }
                if !balanced && now >= balanced_by {
                    balanced = true;
                    let detail = format!(
                        "not balanced {:.0} s after the heal: {why}; fleet: {}",
                        BALANCE_LIMIT.as_secs_f64(),
                        driver.fleet.describe()
                    );
                    driver.violate("unbalanced", detail);
                    if std::env::var_os("SIM_DEBUG").is_some() {
                        driver.fleet.dump_table().await;
                    }
                }
            }
        }
        if now >= end {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    if settled.is_none() && driver.fleet.unbalanced().is_none() && driver.fleet.moving().await {
        driver.violate(
            "unsettled",
            format!(
                "balanced by count, but a lease still on its way between workers {:.0} s after the heal",
                (Instant::now() - healed).as_secs_f64()
            ),
        );
    }
    let left = driver.fleet.not_retired().await;
    if !left.is_empty() {
        let keys: Vec<&str> = left.iter().map(|k| k.as_str()).collect();
        let detail = format!(
            "leases of removed shards still in the table {:.0} s after the heal: {}",
            (Instant::now() - healed).as_secs_f64(),
            keys.join(" ")
        );
        driver.violate("not-retired", detail);
        if std::env::var_os("SIM_DEBUG").is_some() {
            driver.fleet.dump_table().await;
        }
    }
}

/// What might grow at rest: tasks, table items, the simulator's own maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footprint {
    tasks: usize,
    items: usize,
    maps: usize,
    starts: u64,
}

async fn footprint(driver: &Driver) -> Footprint {
    let fleet = &driver.fleet;
    let (maps, starts) = {
        let ledger = fleet.ledger();
        (ledger.sizes(), ledger.starts)
    };
    Footprint {
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        items: fleet.table_items().await,
        maps: maps + fleet.net.chaos.hung().len() + fleet.net.ownership.lock().unwrap().owner.len(),
        starts,
    }
}

/// A simulated day at rest: after the first hour nothing may grow, and nothing may move.
async fn day_at_rest(driver: &mut Driver) {
    let hour = Duration::from_secs(3600);
    driver.sleep_polling(Instant::now() + hour).await;
    let first = footprint(driver).await;
    tokio::time::sleep(hour * 23).await;
    driver.poll();
    let last = footprint(driver).await;
    if last.tasks > first.tasks || last.items > first.items || last.maps > first.maps {
        driver.violate(
            "growth",
            format!("over 23 simulated hours at rest: {first:?} became {last:?}"),
        );
    }
    if last.starts > first.starts {
        driver.violate(
            "unsettled",
            format!(
                "{} leases moved during a day at rest",
                last.starts - first.starts
            ),
        );
    }
}
