//! KCL 2.x's own lease coordination, modelled for the simulator's baseline (`Policy::Kcl`): not
//! the library's worker, but what KCL's `DynamoDBLeaseCoordinator` does, over the same
//! simulated table (every request billed and delayed like ours). The intervals below are
//! KCL's defaults, derived from its 10 s lease; [`Timing::of`] derives them from another
//! (`--kcl-lease-duration`).
//!
//! - **Renewer** (KCL's `DynamoDBLeaseRenewer`): at a fixed rate of a lease duration / 3 -
//!   epsilon (3.308 s; `REFERENCE.md` rounds it to 10/3 s), one conditional renewal per held
//!   lease, up to 20 at a time; a round waits for all of its renewals. A renewal refused (the
//!   lease was taken, or deleted) loses the lease; one that fails otherwise keeps it, until
//!   it has not been renewed for a lease duration of this worker's clock: then it is no
//!   longer held (self-fencing).
//! - **Taker** (`DynamoDBLeaseTaker`): with a fixed delay of 2 x (lease duration + epsilon)
//!   (20.05 s), from the worker's start, scans the whole table (eventually consistent, as
//!   KCL's `listLeases`) and judges expiry on its own clock: a lease whose counter has not
//!   changed for a lease duration since this observer first saw that value; a new unowned
//!   lease counts as never renewed. It takes expired and unowned leases, or steals one lease
//!   a round from the most-loaded worker: the decision is the library's `KclBalance`, one
//!   conditional take (on the scanned counter) per lease, one after the other.
//! - **Scheduler** (KCL's `Scheduler` loop, every second): starts the application of every
//!   lease held and not expired here, and stops the others. A stolen lease's old owner thus
//!   learns of the steal at its next renewal and stops its application at the next loop after
//!   that, while the thief started it at its own next loop: both process the lease meanwhile.
//!   The simulator's ledger counts those windows as KCL's duplicates.
//! - **Shard sync** (with a shard source only): every 60 s, the worker with the smallest id it
//!   saw owning a lease (or itself) creates the leases of new shards and deletes those of
//!   shards gone (KCL's leader runs `ShardSyncTask` and its lease clean-up).
//! - **Start**: as KCL's `leaseRenewer.initialize()`, a scan, and every lease owned by this
//!   worker's id renewed and held (a restarted worker gets back what is still its own).
//! - **Graceful shutdown**: KCL 2.x stops its taker, asks each application to checkpoint and
//!   shut down, then drops its leases from the renewer without writing (`dropLease`): the
//!   leases are **not released**, others take them once they expire (`REFERENCE.md`: with a
//!   10 s lease, a replacement took over 27-40 s later).
//!
//! Left out: KCL's "very old lease" rule (leases expired for 3 lease durations taken at once,
//! whatever the target), its re-read of leases to steal after a slow scan, and lease
//! counters on renewals (the store's renewal is conditioned on the tenure, which changes
//! exactly when a take would make KCL's counter condition fail).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardlease::balance::{BalancePolicy, FleetView, Holder, KclBalance, LeaseView, Move};
use shardlease::lease::Incarnation;
use shardlease::lease::{Lease, NewLease};
use shardlease::source::StaticShardSource;
use shardlease::store::{LeaseStore, Outcome, StoreResult};
use shardlease::{LeaseKey, WorkerId};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::Ledger;

/// KCL's `failoverTimeMillis` default: the lease duration.
pub const LEASE_DURATION: Duration = Duration::from_secs(10);
/// KCL's `epsilonMillis` default.
pub const EPSILON: Duration = Duration::from_millis(25);
/// The renewer's fixed rate at the default lease: `leaseDurationMillis / 3 - epsilonMillis`.
pub const RENEW_INTERVAL: Duration = Duration::from_millis(10_000 / 3 - 25);
/// The taker's fixed delay at the default lease: `(leaseDurationMillis + epsilonMillis) * 2`.
pub const TAKER_INTERVAL: Duration = Duration::from_millis((10_000 + 25) * 2);

/// The intervals of the KCL model, which KCL derives from its lease duration
/// (`failoverTimeMillis`) and epsilon, in whole milliseconds as KCL computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a lease stays valid without a renewal (`failoverTimeMillis`).
    pub lease_duration: Duration,
    /// The renewer's fixed rate: `leaseDurationMillis / 3 - epsilonMillis`.
    pub renew_interval: Duration,
    /// The taker's fixed delay: `(leaseDurationMillis + epsilonMillis) * 2`.
    pub taker_interval: Duration,
}

impl Default for Timing {
    /// KCL's defaults: a 10 s lease, renewals every 3.308 s, a taker every 20.05 s.
    fn default() -> Self {
        Self {
            lease_duration: LEASE_DURATION,
            renew_interval: RENEW_INTERVAL,
            taker_interval: TAKER_INTERVAL,
        }
    }
}

impl Timing {
    /// The shortest lease the model takes: its renewals must come more than an epsilon
    /// apart.
    pub const SHORTEST: Duration = Duration::from_millis(100);

    /// The intervals KCL derives from a lease of `lease` (rounded to the millisecond, as
    /// KCL's configuration is); `Err` below [`Timing::SHORTEST`].
    pub fn of(lease: Duration) -> Result<Self, String> {
        if lease < Self::SHORTEST {
            return Err(format!(
                "the KCL model's lease duration {lease:?} is too short: at least 100 ms \
                 (its renewals run every lease / 3 - {EPSILON:?})"
            ));
        }
        let millis = lease.as_millis() as u64;
        let epsilon = EPSILON.as_millis() as u64;
        Ok(Self {
            lease_duration: Duration::from_millis(millis),
            renew_interval: Duration::from_millis(millis / 3 - epsilon),
            taker_interval: Duration::from_millis((millis + epsilon) * 2),
        })
    }
}
/// The scheduler loop (`shardConsumerDispatchPollIntervalMillis`).
pub const DISPATCH_INTERVAL: Duration = Duration::from_secs(1);
/// The periodic shard sync.
pub const SHARD_SYNC_INTERVAL: Duration = Duration::from_secs(60);
/// KCL's `maxLeaseRenewalThreads`.
pub const RENEWAL_THREADS: usize = 20;
/// How long a request may take before the worker gives up on it (an SDK call timeout).
pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// One KCL worker process: its background loops and its applications.
pub struct KclWorker {
    shared: Arc<Shared>,
    /// The taker and the shard sync (stopped first on a graceful shutdown), the scheduler,
    /// the renewer.
    taker: Vec<JoinHandle<()>>,
    dispatcher: JoinHandle<()>,
    renewer: JoinHandle<()>,
}

/// What the worker's loops share.
struct Shared {
    index: usize,
    id: WorkerId,
    incarnation: Incarnation,
    store: Arc<dyn LeaseStore>,
    ledger: Arc<Mutex<Ledger>>,
    checkpoint_every: Option<Duration>,
    timing: Timing,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// KCL's `ownedLeases`: what the renewer keeps alive.
    held: BTreeMap<LeaseKey, Held>,
    /// The applications the scheduler started, by lease.
    apps: BTreeMap<LeaseKey, App>,
    /// Owners of unexpired leases at the taker's last round (the shard sync's leader).
    owners: BTreeSet<WorkerId>,
    next_token: u64,
    /// The number of this process's last checkpoint write. KCL fences checkpoints on the
    /// counter and numbers none; the store's checkpoint takes a number, increasing within a
    /// tenure, which one counter per process gives.
    checkpoints: u64,
}

/// A lease the renewer keeps.
struct Held {
    /// The item (its nonce), which every write of ours names; KCL's own writes name none.
    nonce: u64,
    tenure: u64,
    /// When its counter last went up by this worker's hand (KCL's `lastCounterIncrementNanos`).
    renewed: Instant,
    /// Which acquisition this is (KCL's concurrency token): an answer for an earlier one is
    /// ignored.
    token: u64,
}

/// An application processing one lease.
struct App {
    token: u64,
    task: JoinHandle<()>,
    /// Asks it to checkpoint and finish (a graceful shutdown).
    stop: oneshot::Sender<()>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Forgets lease `key` if it is still acquisition `token`.
    fn lose(&self, key: &LeaseKey, token: u64) {
        let mut state = self.state();
        if state.held.get(key).is_some_and(|h| h.token == token) {
            state.held.remove(key);
        }
    }

    /// Holds `lease`, just taken or renewed at start, from `at` on.
    fn hold(&self, lease: &Lease, at: Instant) {
        let mut state = self.state();
        state.next_token += 1;
        let token = state.next_token;
        let held = Held {
            nonce: lease.nonce,
            tenure: lease.tenure,
            renewed: at,
            token,
        };
        state.held.insert(lease.key.clone(), held);
    }
}

impl KclWorker {
    /// Starts worker `index` (its id and process) over `store`, on the intervals of
    /// `timing`: the renewer's initial scan and renewals, then the loops. With `source`, it
    /// also syncs shards.
    pub(super) async fn start(
        index: usize,
        (id, incarnation): (WorkerId, Incarnation),
        store: Arc<dyn LeaseStore>,
        ledger: Arc<Mutex<Ledger>>,
        checkpoint_every: Option<Duration>,
        timing: Timing,
        source: Option<StaticShardSource>,
    ) -> Self {
        let shared = Arc::new(Shared {
            index,
            id,
            incarnation,
            store,
            ledger,
            checkpoint_every,
            timing,
            state: Mutex::default(),
        });
        initialize(&shared).await;
        let mut taker = vec![tokio::spawn(take_loop(Arc::clone(&shared)))];
        if let Some(source) = source {
            taker.push(tokio::spawn(sync_loop(Arc::clone(&shared), source)));
        }
        Self {
            dispatcher: tokio::spawn(dispatch_loop(Arc::clone(&shared))),
            renewer: tokio::spawn(renew_loop(Arc::clone(&shared))),
            taker,
            shared,
        }
    }

    /// The process dies: every loop and application stops at once, nothing is written.
    pub fn kill(self) {
        for task in &self.taker {
            task.abort();
        }
        self.dispatcher.abort();
        self.renewer.abort();
        for (_, app) in std::mem::take(&mut self.shared.state().apps) {
            app.task.abort();
        }
    }

    /// KCL 2.x's graceful shutdown: the taker stops, each application checkpoints and
    /// finishes, and the leases are dropped from the renewer without a write: they are not
    /// released, and expire on the other workers' clocks.
    pub async fn shutdown(self) {
        for task in &self.taker {
            task.abort();
        }
        self.dispatcher.abort();
        // Every application is asked at once (KCL's scheduler asks each shard consumer), and
        // the renewer goes on until all have finished.
        let apps = std::mem::take(&mut self.shared.state().apps);
        let mut finishing = Vec::with_capacity(apps.len());
        for (_, app) in apps {
            let _ = app.stop.send(());
            finishing.push(app.task);
        }
        for task in finishing {
            let _ = task.await;
        }
        self.renewer.abort();
        self.shared.state().held.clear();
    }
}

/// Every page of the table, eventually consistent (KCL's `listLeases`).
async fn scan(store: &dyn LeaseStore) -> StoreResult<Vec<Lease>> {
    let deadline = Instant::now() + STORE_TIMEOUT;
    let mut leases = Vec::new();
    let mut from = None;
    loop {
        let page = store.list_page_eventually(from, deadline).await?;
        leases.extend(page.leases.into_iter().map(Arc::unwrap_or_clone));
        match page.next {
            Some(next) => from = Some(next),
            None => return Ok(leases),
        }
    }
}

/// KCL's `leaseRenewer.initialize()`: every lease owned by this worker's id is renewed, even
/// if expired, and held if the renewal lands.
async fn initialize(shared: &Shared) {
    let Ok(leases) = scan(&*shared.store).await else {
        return;
    };
    for lease in leases.iter().filter(|l| l.is_owned_by(&shared.id)) {
        let deadline = Instant::now() + STORE_TIMEOUT;
        let renewal = shared
            .store
            .renew(
                &lease.key,
                lease.nonce,
                &shared.id,
                lease.tenure,
                None,
                deadline,
            )
            .await;
        if let Ok(Outcome::Done(renewed)) = renewal {
            shared.hold(&renewed, Instant::now());
        }
    }
}

/// The renewer: every renew interval (at a fixed rate), each held lease renewed.
async fn renew_loop(shared: Arc<Shared>) {
    let threads = Arc::new(Semaphore::new(RENEWAL_THREADS));
    let mut tick = Instant::now();
    loop {
        tokio::time::sleep_until(tick).await;
        tick += shared.timing.renew_interval;
        let now = Instant::now();
        let leases: Vec<(LeaseKey, u64, u64, u64)> = {
            let mut state = shared.state();
            // An expired lease is not renewed: KCL counts it lost.
            state
                .held
                .retain(|_, h| now.duration_since(h.renewed) <= shared.timing.lease_duration);
            state
                .held
                .iter()
                .map(|(k, h)| (k.clone(), h.nonce, h.tenure, h.token))
                .collect()
        };
        let mut round = JoinSet::new();
        for (key, nonce, tenure, token) in leases {
            let (shared, threads) = (Arc::clone(&shared), Arc::clone(&threads));
            round.spawn(async move {
                let Ok(_thread) = threads.acquire_owned().await else {
                    return;
                };
                renew(&shared, key, nonce, tenure, token).await;
            });
        }
        while round.join_next().await.is_some() {}
    }
}

async fn renew(shared: &Shared, key: LeaseKey, nonce: u64, tenure: u64, token: u64) {
    let deadline = Instant::now() + STORE_TIMEOUT;
    let renewal = shared
        .store
        .renew(&key, nonce, &shared.id, tenure, None, deadline)
        .await;
    match renewal {
        Ok(Outcome::Done(_)) => {
            let mut state = shared.state();
            if let Some(held) = state.held.get_mut(&key).filter(|h| h.token == token) {
                held.renewed = Instant::now();
            }
        }
        // Taken by another worker (a steal, or a take after expiry) or deleted: lost.
        Ok(Outcome::LostRace { .. }) => shared.lose(&key, token),
        // Throttled, failed or unanswered: kept, until it expires here.
        Err(_) => {}
    }
}

/// The scheduler loop: applications follow the leases held and not expired here.
async fn dispatch_loop(shared: Arc<Shared>) {
    loop {
        dispatch(&shared);
        tokio::time::sleep(DISPATCH_INTERVAL).await;
    }
}

fn dispatch(shared: &Arc<Shared>) {
    let now = Instant::now();
    let mut state = shared.state();
    // KCL's `getCurrentlyHeldLeases`: an expired lease is not reported.
    let current: BTreeMap<LeaseKey, ((u64, u64), u64)> = state
        .held
        .iter()
        .filter(|(_, h)| now.duration_since(h.renewed) <= shared.timing.lease_duration)
        .map(|(k, h)| (k.clone(), ((h.nonce, h.tenure), h.token)))
        .collect();
    let gone: Vec<LeaseKey> = state
        .apps
        .iter()
        .filter(|(k, app)| current.get(*k).is_none_or(|(_, token)| *token != app.token))
        .map(|(k, _)| k.clone())
        .collect();
    for key in gone {
        // The lease was lost: the application is told so, and cannot checkpoint.
        if let Some(app) = state.apps.remove(&key) {
            app.task.abort();
            let mut ledger = shared.ledger.lock().unwrap();
            ledger.stop(shared.index, &key);
            ledger.lost(shared.index);
        }
    }
    for (key, (tenure, token)) in current {
        if state.apps.contains_key(&key) {
            continue;
        }
        shared.ledger.lock().unwrap().start(shared.index, &key);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run_app(Arc::clone(shared), key.clone(), tenure, stopped));
        state.apps.insert(key, App { token, task, stop });
    }
}

/// One lease's application: checkpoints every `checkpoint_every` (a checkpoint renews the
/// lease too), and once more when asked to shut down.
async fn run_app(
    shared: Arc<Shared>,
    key: LeaseKey,
    tenure: (u64, u64),
    mut stopped: oneshot::Receiver<()>,
) {
    let mut next = shared.checkpoint_every.map(|every| Instant::now() + every);
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            _ = super::sleep_until(next) => {
                next = match checkpoint(&shared, &key, tenure, "progress").await {
                    // Lost: the scheduler stops this application at its next loop.
                    Some(false) => None,
                    _ => shared.checkpoint_every.map(|every| Instant::now() + every),
                };
            }
        }
    }
    let _ = checkpoint(&shared, &key, tenure, "done").await;
    shared.ledger.lock().unwrap().stop(shared.index, &key);
}

/// Writes a checkpoint (KCL counts it as a renewal) in the tenure `(nonce, tenure)`;
/// `Some(false)` when refused, which loses the lease; `None` when the write failed.
async fn checkpoint(
    shared: &Shared,
    key: &LeaseKey,
    (nonce, tenure): (u64, u64),
    value: &str,
) -> Option<bool> {
    let deadline = Instant::now() + STORE_TIMEOUT;
    let seq = {
        let mut state = shared.state();
        state.checkpoints += 1;
        state.checkpoints
    };
    let written = shared
        .store
        .checkpoint(key, nonce, &shared.id, tenure, seq, value, deadline)
        .await;
    let mut state = shared.state();
    let ours = state.held.get(key).is_some_and(|h| h.tenure == tenure);
    match written {
        Ok(Outcome::Done(_)) => {
            if let Some(held) = state.held.get_mut(key).filter(|_| ours) {
                held.renewed = Instant::now();
            }
            Some(true)
        }
        Ok(Outcome::LostRace { .. }) => {
            if ours {
                state.held.remove(key);
            }
            Some(false)
        }
        Err(_) => None,
    }
}

/// What the taker remembers of a lease from one round to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    counter: u64,
    /// When this observer first saw that counter; `None` for a lease first seen unowned
    /// (never renewed: expired at once).
    since: Option<Instant>,
}

/// KCL's `updateAllLeases`: what `scanned` (read just before `now`) tells of each lease,
/// given what the last rounds saw. Leases no longer in the table are forgotten.
pub fn observe(
    seen: &BTreeMap<LeaseKey, Seen>,
    scanned: &[Lease],
    now: Instant,
) -> BTreeMap<LeaseKey, Seen> {
    scanned
        .iter()
        .map(|lease| {
            let since = match seen.get(&lease.key) {
                Some(old) if old.counter == lease.counter => old.since,
                Some(_) => Some(now),
                None if lease.owner.is_none() => None,
                None => Some(now),
            };
            let seen = Seen {
                counter: lease.counter,
                since,
            };
            (lease.key.clone(), seen)
        })
        .collect()
}

/// Whether a lease seen so has expired at `now`: its counter unchanged for more than a lease
/// duration (`lease`) of this observer's clock.
pub fn expired(seen: &Seen, now: Instant, lease: Duration) -> bool {
    seen.since
        .is_none_or(|since| now.duration_since(since) > lease)
}

/// The taker's view for `KclBalance`: unowned and expired leases (a lease `duration`) are
/// available, the others held by their owner (only owners of unexpired leases count as
/// workers).
pub fn view(
    scanned: &[Lease],
    seen: &BTreeMap<LeaseKey, Seen>,
    now: Instant,
    duration: Duration,
) -> FleetView {
    let leases = scanned
        .iter()
        .map(|lease| {
            let gone = seen
                .get(&lease.key)
                .is_none_or(|s| expired(s, now, duration));
            let holder = match &lease.owner {
                Some(owner) if !gone => Holder::Held(owner.clone()),
                _ => Holder::Available,
            };
            LeaseView {
                key: lease.key.clone(),
                holder,
                load: None,
                settled: true,
            }
        })
        .collect();
    FleetView {
        leases,
        workers: Vec::new(),
    }
}

/// The taker: a round at start, then one taker interval after each round ends.
async fn take_loop(shared: Arc<Shared>) {
    let mut seen = BTreeMap::new();
    loop {
        if let Ok(mut leases) = scan(&*shared.store).await {
            let now = Instant::now();
            leases.sort_by(|a, b| a.key.cmp(&b.key));
            seen = observe(&seen, &leases, now);
            take_round(&shared, &leases, &seen, now).await;
        }
        tokio::time::sleep(shared.timing.taker_interval).await;
    }
}

async fn take_round(
    shared: &Shared,
    leases: &[Lease],
    seen: &BTreeMap<LeaseKey, Seen>,
    now: Instant,
) {
    let view = view(leases, seen, now, shared.timing.lease_duration);
    shared.state().owners = view
        .leases
        .iter()
        .filter_map(|l| match &l.holder {
            Holder::Held(owner) => Some(owner.clone()),
            _ => None,
        })
        .collect();
    let by_key: BTreeMap<&LeaseKey, &Lease> = leases.iter().map(|l| (&l.key, l)).collect();
    for step in KclBalance::default().plan(&view, &shared.id) {
        let Move::Take(key) = step else {
            continue;
        };
        let Some(lease) = by_key.get(&key) else {
            continue;
        };
        let deadline = Instant::now() + STORE_TIMEOUT;
        let taken = shared
            .store
            .take(
                &key,
                lease.nonce,
                &shared.id,
                shared.incarnation,
                lease.counter,
                deadline,
            )
            .await;
        if let Ok(Outcome::Done(taken)) = taken {
            shared.hold(&taken, Instant::now());
        }
    }
}

/// The shard sync: every [`SHARD_SYNC_INTERVAL`], on the leader only.
async fn sync_loop(shared: Arc<Shared>, source: StaticShardSource) {
    loop {
        tokio::time::sleep(SHARD_SYNC_INTERVAL).await;
        let leader = {
            let state = shared.state();
            state.owners.iter().chain([&shared.id]).min() == Some(&shared.id)
        };
        if leader {
            let _ = sync_shards(&shared, &source).await;
        }
    }
}

/// Creates the leases of new shards and deletes those of shards gone (their holders learn at
/// their next renewal).
async fn sync_shards(shared: &Shared, source: &StaticShardSource) -> StoreResult<()> {
    let leases = scan(&*shared.store).await?;
    let shards: BTreeSet<LeaseKey> = source.shards().into_iter().map(|s| s.key).collect();
    let listed: BTreeSet<&LeaseKey> = leases.iter().map(|l| &l.key).collect();
    let deadline = Instant::now() + STORE_TIMEOUT;
    for key in shards.iter().filter(|k| !listed.contains(k)) {
        let _created = shared
            .store
            .create(NewLease::new(key.clone()), deadline)
            .await?;
    }
    for lease in leases.iter().filter(|l| !shards.contains(&l.key)) {
        let mut observed = (lease.counter, lease.tenure);
        // KCL deletes unconditionally; here a renewal between the scan and the delete makes
        // it try again with what the refusal showed.
        for _ in 0..3 {
            let deleted = shared
                .store
                .delete(&lease.key, lease.nonce, observed.0, observed.1, deadline)
                .await?;
            match deleted {
                Outcome::LostRace {
                    current: Some(current),
                } => observed = (current.counter, current.tenure),
                _ => break,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        Lease {
            key: LeaseKey::new(key).unwrap(),
            owner: owner.map(|o| WorkerId::new(o).unwrap()),
            owner_incarnation: None,
            counter,
            tenure: 1,
            checkpoint: None,
            checkpoint_write: None,
            owner_switches_since_checkpoint: 0,
            parents: Vec::new(),
            handoff_to: None,
            load: None,
            nonce: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_a_lease_duration_after_its_counter_was_first_seen_unchanged() {
        let start = Instant::now();
        let first = [lease("a", Some("w1"), 5), lease("b", None, 1)];
        let seen = observe(&BTreeMap::new(), &first, start);
        // Owned and first seen: renewed as of this scan. Unowned and new: never renewed.
        let d = LEASE_DURATION;
        assert!(!expired(&seen[&first[0].key], start, d));
        assert!(expired(&seen[&first[1].key], start, d));
        // Seen unchanged 10.05 s later: expired; changed: renewed as of that scan.
        let later = start + TAKER_INTERVAL / 2;
        let same = observe(&seen, &first, later);
        assert!(expired(&same[&first[0].key], later, d));
        let renewed = [lease("a", Some("w1"), 6)];
        let moved = observe(&seen, &renewed, later);
        assert!(!expired(&moved[&renewed[0].key], later, d));
        assert!(!moved.contains_key(&first[1].key), "gone from the table");
        // Exactly a lease duration is not yet expired (KCL: more than the duration).
        assert!(!expired(&seen[&first[0].key], start + d, d));
    }

    #[test]
    fn the_intervals_follow_the_lease_duration_as_kcl_derives_them() {
        assert_eq!(Timing::of(LEASE_DURATION), Ok(Timing::default()));
        let short = Timing::of(Duration::from_millis(1500)).unwrap();
        assert_eq!(short.renew_interval, Duration::from_millis(475));
        assert_eq!(short.taker_interval, Duration::from_millis(3050));
        assert!(Timing::of(Duration::from_millis(99))
            .unwrap_err()
            .contains("at least 100 ms"));
    }
}
