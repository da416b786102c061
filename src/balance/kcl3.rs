//! The Kinesis Client Library 3.x assignment, as a [`BalancePolicy`] every worker runs on its
//! own view (no leader), for comparison with load-aware policies.
//!
//! # What KCL 3.x does
//!
//! Read in `awslabs/amazon-kinesis-client` at commit `024eb86e` (release 3.5.1), under
//! `amazon-kinesis-client/src/main/java/software/amazon/kinesis/`:
//! `coordinator/assignment/LeaseAssignmentManager.java` (the leader's loop and its in-memory
//! view), `coordinator/assignment/VarianceBasedLeaseAssignmentDecider.java` (the decisions),
//! `worker/metricstats/WorkerMetricStats.java` (headroom and extrapolation),
//! `leases/LeaseManagementConfig.java` (`WorkerUtilizationAwareAssignmentConfig`, the
//! defaults) and `worker/WorkerMetricsSelector.java` (the default operating range).
//!
//! One leader runs the assignment every `2 × failoverTimeMillis` (20 s). Each run:
//!
//! - **Inputs.** Every lease's throughput (a moving average its owner records); a lease with
//!   none is given the mean of the known ones (0 when none is known). Every worker's
//!   utilisation per metric (CPU by default, an exponential moving average of its reports)
//!   and the metric's operating range (the highest utilisation allowed, 100 by default). A
//!   worker that reports no metric is given one, "T" = 100 × its assigned throughput ÷ the
//!   target throughput (total lease throughput ÷ active workers), with range 100.
//! - **Fleet average.** Per metric, the plain mean over the active workers, computed once
//!   at the start of the run.
//! - **Receivers.** Workers whose assigned throughput is at most `maxThroughputPerHostKBps`
//!   and whose lease count is below `maxLeasesForWorker`, in a priority queue by headroom,
//!   (average − utilisation) ÷ utilisation (1 for a worker at 0), most headroom first. A
//!   receiver is taken off the queue, and put back after an assignment only if it still has
//!   room under both limits.
//! - **Unassigned and expired leases** (oldest counter first, unowned first) each go to the
//!   receiver at the head of the queue, with no other check.
//! - **Extrapolation.** Giving a worker a lease of throughput `t` raises its utilisation by
//!   `t × average ÷ target throughput` (by `average ÷ max(leases ÷ workers, 1)` when the
//!   target throughput is 0); the donor's utilisation is left as it was.
//! - **Variance balancing** (every `varianceBalancingFrequency` = 3rd run). With `upper`
//!   and `lower` the average ± `reBalanceThresholdPercentage` (10 %): nothing moves unless
//!   some worker is above `upper`, below `lower`, or above its operating range. Then the
//!   donors are the workers at or above `upper` or above their range, or, if none is, the
//!   single most utilised worker. A donor gives throughput `assigned × (u − average) ÷ u ×
//!   dampeningPercentage ÷ 100` (60 %); donors giving most go first.
//! - **Which leases.** The donor's leases in a random order (a shuffle); a lease is taken
//!   when what is left to take stays above 0 after it, skipped otherwise. If none is taken
//!   and `allowThroughputOvershoot` (true) is set, its lowest-throughput lease is taken. A
//!   donor with zero assigned throughput gives one lease.
//! - **Where they go.** Each taken lease goes to the head of the queue, unless the
//!   receiver's extrapolated utilisation would pass the average or its operating range: then
//!   that donor's remaining leases stay, and that receiver leaves the queue for the run.
//! - **Writes.** A held lease moves by graceful handoff (the old owner checkpoints first).
//!   While a handoff is pending the lease counts for its old owner (`Lease.actualOwner` is
//!   the `checkpointOwner`) and is not reassigned until the handoff times out.
//!
//! # Here, without a leader
//!
//! Every worker computes the same [`Assignment`] from the same view: workers in id order,
//! leases in key order, sums in that order, ties on headroom broken by less throughput per
//! weight and then by id, and KCL's shuffle replaced by the order of a stable hash of the key
//! (the same in every process). Deviations, each forced or chosen for that reason:
//!
//! - KCL's fallback to 0 for a lease of unknown throughput when none is known becomes 1, so
//!   that every lease still weighs something; negative or non-finite figures count as unknown.
//! - One utilisation figure per worker ([`WorkerView::load`]) instead of several metrics;
//!   a worker that publishes none is estimated from its held throughput ÷ its weight,
//!   scaled by the publishers' utilisation per unit of throughput per weight, or, when no
//!   worker publishes a usable figure, by KCL's "T" scale (100 = its weighted share).
//! - [`WorkerView::weight`] (no KCL counterpart) divides the extrapolated rise: a worker of
//!   weight 2 gets half the rise per lease, its target being twice the throughput.
//! - [`WorkerView::capacity`] replaces the fleet-wide `maxLeasesForWorker`.
//! - The policy has no memory, so it balances variance on every call, where KCL does so on
//!   every third run only (placing unassigned leases on every run).
//! - Available leases (unowned, expired, or held by a worker not in the view) are placed in
//!   stable-hash order: the view does not say how long each has been expired.
//! - A lease with a pending handoff ([`Holder::Moving`]) counts for its receiver, not for its
//!   old owner as in KCL, as everywhere in this crate ([`Assignment::counts`]): the receiver
//!   is not handed more while the lease is on its way. It is not moved again, nor is a lease
//!   moved twice in one run (KCL could reassign a lease it had just placed).
//! - Issue 15 speaks of throughput-sorted leases; the source shuffles them, and throughput
//!   decides only the overshoot's pick (the lightest). This follows the source.
//! - KCL's leader writes each new owner itself; here each receiver acts on its own entry
//!   ([`Move::Take`] for an available lease, [`Move::RequestHandoff`] for a held one), and
//!   observers whose views differ are reconciled by the store's conditional writes.

use std::collections::HashMap;

use super::{stable_hash, usable, Assignment, BalancePolicy, FleetView, Holder, Move, WorkerView};
use crate::lease::{LeaseKey, WorkerId};

/// The KCL 3.x variance-based assignment, computed by every worker alike; see the module
/// documentation. Field names follow `WorkerUtilizationAwareAssignmentConfig`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kcl3Balance {
    /// `reBalanceThresholdPercentage`: how far, in percent of the fleet average, a worker's
    /// utilisation may be from it before anything moves. Default: 10.
    pub re_balance_threshold_percentage: u32,
    /// `dampeningPercentage`: the share, in percent, of a donor's excess that one run
    /// moves. Default: 60.
    pub dampening_percentage: u32,
    /// `allowThroughputOvershoot`: when no lease fits under a donor's amount to give, give its
    /// lowest-throughput lease. Default: true.
    pub allow_throughput_overshoot: bool,
    /// `maxThroughputPerHostKBps`: a worker whose held throughput is above this receives
    /// nothing. Default: unlimited.
    pub max_throughput_per_host: f64,
    /// The operating range's maximum utilisation: a worker above it is a donor, and no
    /// handoff may raise a receiver above it. Default: 100, KCL's default range.
    pub max_utilization: f64,
}

impl Default for Kcl3Balance {
    fn default() -> Self {
        Self {
            re_balance_threshold_percentage: 10,
            dampening_percentage: 60,
            allow_throughput_overshoot: true,
            max_throughput_per_host: f64::INFINITY,
            max_utilization: 100.0,
        }
    }
}

impl BalancePolicy for Kcl3Balance {
    fn plan(&self, view: &FleetView, me: &WorkerId) -> Vec<Move> {
        self.assign(view).moves.remove(me).unwrap_or_default()
    }

    fn plan_with(&self, _view: &FleetView, me: &WorkerId, assignment: &Assignment) -> Vec<Move> {
        assignment.moves.get(me).cloned().unwrap_or_default()
    }

    fn assign(&self, view: &FleetView) -> Assignment {
        let mut run = Run::new(self, view);
        run.assign_available();
        run.balance_variance();
        run.into_assignment()
    }
}

struct Worker<'a> {
    id: &'a WorkerId,
    capacity: u32,
    weight: f64,
    /// Utilisation, reported or estimated, raised as leases are given.
    util: f64,
    /// Held throughput.
    throughput: f64,
    /// Held leases.
    count: u32,
    /// In the receivers' queue.
    queued: bool,
}

struct Lease<'a> {
    key: &'a LeaseKey,
    throughput: f64,
    /// Index of the worker holding it now (after this run's moves).
    holder: Option<usize>,
    /// Not to be moved: a pending handoff, or already moved in this run.
    pinned: bool,
    /// The holder at the start of the run, when it moves.
    moved_from: Option<Option<usize>>,
}

/// One computation over one view.
struct Run<'a> {
    policy: &'a Kcl3Balance,
    workers: Vec<Worker<'a>>,
    leases: Vec<Lease<'a>>,
    /// The fleet's mean utilisation at the start.
    average: f64,
    /// Total lease throughput ÷ total weight: the target throughput per unit of weight.
    per_weight: f64,
    /// KCL's `targetLeasePerWorker`, max(leases ÷ workers, 1).
    leases_per_worker: f64,
    counts: Vec<u32>,
}

impl<'a> Run<'a> {
    fn new(policy: &'a Kcl3Balance, view: &'a FleetView) -> Self {
        let mut ids: Vec<_> = view.workers.iter().collect();
        ids.sort_by(|a, b| a.id.cmp(&b.id));
        ids.dedup_by(|a, b| a.id == b.id);
        let index: HashMap<&WorkerId, usize> =
            ids.iter().enumerate().map(|(i, w)| (&w.id, i)).collect();
        let mut workers: Vec<Worker> = ids
            .iter()
            .map(|w| Worker {
                id: &w.id,
                capacity: w.capacity,
                weight: if w.weight.is_finite() && w.weight > 0.0 {
                    w.weight
                } else {
                    1.0
                },
                util: 0.0,
                throughput: 0.0,
                count: 0,
                queued: false,
            })
            .collect();

        let mut sorted: Vec<_> = view.leases.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let known: Vec<f64> = sorted.iter().filter_map(|l| usable(l.load)).collect();
        let mean = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let leases: Vec<Lease> = sorted
            .iter()
            .map(|l| {
                let (holder, pinned) = match &l.holder {
                    Holder::Held(w) => (index.get(w).copied(), false),
                    Holder::Moving { from, to } => {
                        let at = index.get(to).or_else(|| index.get(from)).copied();
                        (at, at.is_some())
                    }
                    Holder::Available => (None, false),
                };
                Lease {
                    key: &l.key,
                    throughput: usable(l.load).unwrap_or(mean),
                    holder,
                    pinned,
                    moved_from: None,
                }
            })
            .collect();
        for lease in &leases {
            if let Some(w) = lease.holder {
                workers[w].throughput += lease.throughput;
                workers[w].count += 1;
            }
        }

        let total: f64 = leases.iter().map(|l| l.throughput).sum();
        let weights: f64 = workers.iter().map(|w| w.weight).sum();
        let per_weight = if weights > 0.0 { total / weights } else { 0.0 };
        estimate_utilisation(&mut workers, &ids, per_weight);
        let average = if workers.is_empty() {
            0.0
        } else {
            workers.iter().map(|w| w.util).sum::<f64>() / workers.len() as f64
        };
        let leases_per_worker = (leases.len() / workers.len().max(1)).max(1) as f64;
        let counts = workers.iter().map(|w| w.count).collect();
        let mut run = Self {
            policy,
            workers,
            leases,
            average,
            per_weight,
            leases_per_worker,
            counts,
        };
        for w in 0..run.workers.len() {
            run.workers[w].queued = run.has_room(w);
        }
        run
    }

    fn has_room(&self, w: usize) -> bool {
        let worker = &self.workers[w];
        worker.throughput <= self.policy.max_throughput_per_host && worker.count < worker.capacity
    }

    /// KCL's extrapolated rise in a worker's utilisation for a lease of `throughput`.
    fn rise(&self, w: usize, throughput: f64) -> f64 {
        if self.per_weight > 0.0 {
            throughput * self.average / (self.per_weight * self.workers[w].weight)
        } else {
            self.average / self.leases_per_worker
        }
    }

    /// Takes the queued worker with the most headroom off the queue.
    fn poll(&mut self) -> Option<usize> {
        let headroom = |w: &Worker| {
            if w.util == 0.0 {
                1.0
            } else {
                (self.average - w.util) / w.util
            }
        };
        let best = (0..self.workers.len())
            .filter(|&w| self.workers[w].queued)
            .min_by(|&a, &b| {
                let (wa, wb) = (&self.workers[a], &self.workers[b]);
                headroom(wb)
                    .total_cmp(&headroom(wa))
                    .then((wa.throughput / wa.weight).total_cmp(&(wb.throughput / wb.weight)))
                    .then(a.cmp(&b))
            })?;
        self.workers[best].queued = false;
        Some(best)
    }

    /// Gives lease `l` to worker `w` and puts `w` back in the queue if it has room.
    fn give(&mut self, l: usize, w: usize) {
        let lease = &self.leases[l];
        if lease.holder != Some(w) {
            let (from, throughput) = (lease.holder, lease.throughput);
            self.workers[w].util += self.rise(w, throughput);
            self.workers[w].throughput += throughput;
            self.workers[w].count += 1;
            if let Some(from) = from {
                self.workers[from].throughput -= throughput;
                self.workers[from].count -= 1;
            }
            let lease = &mut self.leases[l];
            lease.moved_from = Some(lease.moved_from.unwrap_or(from));
            lease.holder = Some(w);
            lease.pinned = true;
        }
        self.workers[w].queued = self.has_room(w);
    }

    /// KCL's `assignExpiredOrUnassignedLeases`: each to the receiver with most headroom.
    fn assign_available(&mut self) {
        let mut available: Vec<usize> = (0..self.leases.len())
            .filter(|&l| self.leases[l].holder.is_none())
            .collect();
        available.sort_by_cached_key(|&l| stable_hash(self.leases[l].key.as_str().as_bytes()));
        for l in available {
            let Some(w) = self.poll() else { break };
            self.give(l, w);
        }
    }

    /// KCL's `balanceWorkerVariance`.
    fn balance_variance(&mut self) {
        let mut donors: Vec<(usize, f64)> = self
            .donors()
            .into_iter()
            .map(|w| (w, self.amount_to_give(w)))
            .collect();
        donors.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for (donor, amount) in donors {
            for l in self.leases_to_give(donor, amount) {
                let Some(w) = self.poll() else { continue };
                let after = self.workers[w].util + self.rise(w, self.leases[l].throughput);
                if after > self.average || after > self.policy.max_utilization {
                    break;
                }
                self.give(l, w);
            }
        }
    }

    /// The workers to take from, or none when every worker is within the threshold.
    fn donors(&self) -> Vec<usize> {
        let ratio = f64::from(self.policy.re_balance_threshold_percentage) / 100.0;
        let (upper, lower) = (self.average * (1.0 + ratio), self.average * (1.0 - ratio));
        let over_range = |w: &Worker| w.util > self.policy.max_utilization;
        let triggered = self
            .workers
            .iter()
            .any(|w| w.util > upper || w.util < lower || over_range(w));
        if !triggered {
            return Vec::new();
        }
        let donors: Vec<usize> = (0..self.workers.len())
            .filter(|&w| self.workers[w].util >= upper || over_range(&self.workers[w]))
            .collect();
        if !donors.is_empty() {
            return donors;
        }
        // The most utilised, the first in id order among equals.
        let most = (0..self.workers.len()).reduce(|best, w| {
            if self.workers[w].util > self.workers[best].util {
                w
            } else {
                best
            }
        });
        most.into_iter().collect()
    }

    /// The throughput a donor gives: its excess over the average, dampened.
    fn amount_to_give(&self, w: usize) -> f64 {
        let worker = &self.workers[w];
        if worker.util <= 0.0 {
            return 0.0;
        }
        let excess = (worker.util - self.average) / worker.util;
        worker.throughput * excess * f64::from(self.policy.dampening_percentage) / 100.0
    }

    /// KCL's `getLeasesToTake`: leases that fit under `amount`, in stable-hash order.
    fn leases_to_give(&self, donor: usize, amount: f64) -> Vec<usize> {
        let mut held: Vec<usize> = (0..self.leases.len())
            .filter(|&l| self.leases[l].holder == Some(donor) && !self.leases[l].pinned)
            .collect();
        held.sort_by_cached_key(|&l| stable_hash(self.leases[l].key.as_str().as_bytes()));
        if held.is_empty() || self.workers[donor].throughput == 0.0 {
            held.truncate(1);
            return held;
        }
        let mut left = amount;
        let mut taken = Vec::new();
        for &l in &held {
            let throughput = self.leases[l].throughput;
            if left - throughput > 0.0 {
                left -= throughput;
                taken.push(l);
            }
        }
        if taken.is_empty() && self.policy.allow_throughput_overshoot {
            // The first of the lightest, in the same order.
            let throughput = |l: &usize| self.leases[*l].throughput;
            taken.extend(
                held.iter()
                    .min_by(|a, b| throughput(a).total_cmp(&throughput(b))),
            );
        }
        taken
    }

    fn into_assignment(self) -> Assignment {
        let mut moves: HashMap<WorkerId, Vec<Move>> = HashMap::new();
        let mut targets = self.counts.clone();
        for lease in &self.leases {
            let (Some(from), Some(to)) = (lease.moved_from, lease.holder) else {
                continue;
            };
            let step = match from {
                None => Move::Take(lease.key.clone()),
                Some(from) => Move::RequestHandoff {
                    key: lease.key.clone(),
                    from: self.workers[from].id.clone(),
                },
            };
            moves
                .entry(self.workers[to].id.clone())
                .or_default()
                .push(step);
            targets[to] += 1;
        }
        let ids = || self.workers.iter().map(|w| w.id.clone());
        Assignment {
            targets: ids().zip(targets).collect(),
            counts: ids().zip(self.counts.iter().copied()).collect(),
            moves,
        }
    }
}

/// Fills in each worker's utilisation: its reported figure, or an estimate from its held
/// throughput per weight, scaled as the reporters' figures are (KCL's "T" scale if none is).
fn estimate_utilisation(workers: &mut [Worker], views: &[&WorkerView], per_weight: f64) {
    let (mut reported, mut reporters_load) = (0.0, 0.0);
    for (worker, view) in workers.iter().zip(views) {
        if let Some(util) = usable(view.load) {
            reported += util;
            reporters_load += worker.throughput / worker.weight;
        }
    }
    let scale = if reporters_load > 0.0 {
        reported / reporters_load
    } else if per_weight > 0.0 {
        100.0 / per_weight
    } else {
        0.0
    };
    for (worker, view) in workers.iter_mut().zip(views) {
        worker.util = usable(view.load).unwrap_or(scale * worker.throughput / worker.weight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::LeaseView;

    fn w(id: &str) -> WorkerId {
        WorkerId::new(id).unwrap()
    }

    fn key(k: &str) -> LeaseKey {
        LeaseKey::new(k).unwrap()
    }

    fn worker(id: &str, load: Option<f64>) -> WorkerView {
        WorkerView {
            id: w(id),
            capacity: u32::MAX,
            weight: 1.0,
            reported: true,
            load,
        }
    }

    /// A fleet: each worker with its utilisation and how many leases of `throughput` it
    /// holds (keys `<worker>-<i>`), plus `available` unowned leases of unknown throughput.
    fn fleet(
        workers: &[(&str, Option<f64>, usize)],
        throughput: f64,
        available: usize,
    ) -> FleetView {
        let mut leases = Vec::new();
        for (id, _, held) in workers {
            leases.extend((0..*held).map(|i| LeaseView {
                key: key(&format!("{id}-{i:02}")),
                holder: Holder::Held(w(id)),
                load: Some(throughput),
                settled: true,
            }));
        }
        leases.extend((0..available).map(|i| LeaseView {
            key: key(&format!("new-{i:02}")),
            holder: Holder::Available,
            load: None,
            settled: true,
        }));
        FleetView {
            leases,
            workers: workers
                .iter()
                .map(|(id, load, _)| worker(id, *load))
                .collect(),
        }
    }

    fn load_of(view: &FleetView, k: &LeaseKey) -> f64 {
        view.leases
            .iter()
            .find(|l| l.key == *k)
            .unwrap()
            .load
            .unwrap()
    }

    /// Every move's lease, with the worker that makes it.
    fn moved(assignment: &Assignment) -> Vec<(WorkerId, Move)> {
        let mut all: Vec<_> = assignment
            .moves
            .iter()
            .flat_map(|(w, moves)| moves.iter().map(|m| (w.clone(), m.clone())))
            .collect();
        all.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        all
    }

    fn lease_of(step: &Move) -> &LeaseKey {
        match step {
            Move::Take(key) | Move::RequestHandoff { key, .. } => key,
        }
    }

    #[test]
    fn an_over_utilised_worker_hands_dampened_load_to_the_least_utilised() {
        // Mean 50, upper limit 55: a (90) gives 100 × (90 − 50) ÷ 90 × 60 % = 26.7 of its
        // throughput, so two leases of 10; c (headroom 4) takes both, b (0) none.
        let view = fleet(
            &[
                ("a", Some(90.0), 10),
                ("b", Some(50.0), 5),
                ("c", Some(10.0), 1),
            ],
            10.0,
            0,
        );
        let assignment = Kcl3Balance::default().assign(&view);
        let moves = moved(&assignment);
        assert_eq!(moves.len(), 2, "{moves:?}");
        for (to, step) in &moves {
            assert_eq!(*to, w("c"));
            assert!(matches!(step, Move::RequestHandoff { from, .. } if *from == w("a")));
        }
        let given: f64 = moves.iter().map(|(_, m)| load_of(&view, lease_of(m))).sum();
        assert!(given <= 100.0 * 40.0 / 90.0 * 0.6, "dampened: {given}");

        // Undampened, a gives 44.4: four leases, all of which c can absorb under the mean.
        let undamped = Kcl3Balance {
            dampening_percentage: 100,
            ..Kcl3Balance::default()
        };
        assert_eq!(moved(&undamped.assign(&view)).len(), 4);
    }

    #[test]
    fn a_fleet_within_the_threshold_moves_nothing() {
        // Mean 50: every figure within ±10 %, whatever the lease counts.
        let view = fleet(
            &[
                ("a", Some(54.0), 90),
                ("b", Some(46.0), 10),
                ("c", Some(50.0), 40),
            ],
            10.0,
            0,
        );
        assert!(Kcl3Balance::default().assign(&view).moves.is_empty());
        // A tighter threshold puts a (and b) outside it: a gives 900 × 4/54 × 60 % = 40,
        // three leases (a fourth would leave nothing), each raising b by 1.07, to 49.2.
        let tight = Kcl3Balance {
            re_balance_threshold_percentage: 5,
            ..Kcl3Balance::default()
        };
        let moves = moved(&tight.assign(&view));
        assert_eq!(moves.len(), 3, "{moves:?}");
        assert!(moves.iter().all(|(to, m)| *to == w("b")
            && matches!(m, Move::RequestHandoff { from, .. } if *from == w("a"))));
    }

    #[test]
    fn available_leases_go_to_the_least_utilised_workers() {
        // Mean 50, 9 leases of 10 (the new ones count as the mean, 10), target 30 each: a
        // lease raises a worker by 10 × 50 ÷ 30 = 16.7. b (20) takes the first and, at 36.7,
        // still has the most headroom for the second.
        let view = fleet(
            &[
                ("a", Some(80.0), 4),
                ("b", Some(20.0), 1),
                ("c", Some(50.0), 2),
            ],
            10.0,
            2,
        );
        let moves = moved(&Kcl3Balance::default().assign(&view));
        let takes: Vec<_> = moves
            .iter()
            .filter(|(_, m)| matches!(m, Move::Take(_)))
            .collect();
        assert_eq!(takes.len(), 2);
        assert!(takes.iter().all(|(to, _)| *to == w("b")), "{moves:?}");

        // Two idle workers that publish nothing share the new leases, one each.
        let view = fleet(&[("a", None, 0), ("b", None, 0)], 10.0, 2);
        let assignment = Kcl3Balance::default().assign(&view);
        assert_eq!(assignment.moves[&w("a")].len(), 1);
        assert_eq!(assignment.moves[&w("b")].len(), 1);
    }

    #[test]
    fn workers_that_publish_nothing_are_judged_by_their_throughput_per_weight() {
        // All six leases on a: a is at 300 % of its share. It gives 6 × 2/3 × 60 % = 2.4:
        // two leases, one to each idle worker (equal headroom, less throughput first).
        let view = fleet(&[("a", None, 6), ("b", None, 0), ("c", None, 0)], 1.0, 0);
        let assignment = Kcl3Balance::default().assign(&view);
        assert_eq!(assignment.moves[&w("b")].len(), 1);
        assert_eq!(assignment.moves[&w("c")].len(), 1);
        assert!(!assignment.moves.contains_key(&w("a")));

        // At their weighted shares (a weight 2 holding 4, b weight 1 holding 2), nothing moves.
        let mut weighted = fleet(&[("a", None, 4), ("b", None, 2)], 1.0, 0);
        weighted.workers[0].weight = 2.0;
        assert!(Kcl3Balance::default().assign(&weighted).moves.is_empty());
        // Weights swapped: a is at 200, b at 50 (mean 125); b takes a lease.
        weighted.workers[0].weight = 1.0;
        weighted.workers[1].weight = 2.0;
        let assignment = Kcl3Balance::default().assign(&weighted);
        assert_eq!(assignment.moves[&w("b")].len(), 1);
        assert_eq!(assignment.moves.len(), 1);
    }

    #[test]
    fn every_observer_computes_the_same_assignment_whatever_the_order_of_the_view() {
        let view = fleet(
            &[
                ("a", Some(95.0), 12),
                ("b", Some(60.0), 6),
                ("c", Some(20.0), 2),
                ("d", Some(5.0), 0),
                // Tied with d on every figure: only the id orders them.
                ("e", Some(5.0), 0),
            ],
            7.0,
            5,
        );
        let policy = Kcl3Balance::default();
        let assignment = policy.assign(&view);
        assert!(!assignment.moves.is_empty());
        let mut shuffled = view.clone();
        shuffled.leases.reverse();
        shuffled.leases.rotate_left(7);
        shuffled.workers.reverse();
        shuffled.workers.rotate_left(2);
        let again = policy.assign(&shuffled);
        assert_eq!(again.moves, assignment.moves);
        assert_eq!(again.targets, assignment.targets);
        assert_eq!(again.counts, assignment.counts);
        for me in ["a", "b", "c", "d", "e"] {
            let planned = policy.plan(&shuffled, &w(me));
            assert_eq!(planned, policy.plan_with(&view, &w(me), &assignment));
        }
    }

    #[test]
    fn a_pending_handoff_counts_for_the_receiver_and_is_not_moved_again() {
        let mut view = fleet(&[("a", Some(90.0), 6), ("b", Some(10.0), 0)], 10.0, 0);
        view.leases[0].holder = Holder::Moving {
            from: w("a"),
            to: w("b"),
        };
        let assignment = Kcl3Balance::default().assign(&view);
        assert_eq!(assignment.counts[&w("b")], 1);
        assert_eq!(assignment.counts[&w("a")], 5);
        let moves = moved(&assignment);
        assert!(!moves.is_empty(), "a is still over-utilised");
        assert!(moves
            .iter()
            .all(|(_, m)| *lease_of(m) != view.leases[0].key));

        // The hot worker's only lease is on its way to it: it is not handed on (back to b).
        let mut view = fleet(&[("a", Some(90.0), 0), ("b", Some(10.0), 20)], 10.0, 0);
        view.leases[0].holder = Holder::Moving {
            from: w("b"),
            to: w("a"),
        };
        let assignment = Kcl3Balance::default().assign(&view);
        assert_eq!(assignment.counts[&w("a")], 1);
        assert!(assignment.moves.is_empty(), "{:?}", assignment.moves);
    }

    #[test]
    fn no_lease_moves_twice_and_targets_exceed_counts_exactly_for_receivers() {
        let view = fleet(
            &[
                ("a", Some(99.0), 20),
                ("b", Some(70.0), 8),
                ("c", Some(30.0), 3),
                ("d", None, 1),
                ("e", Some(0.0), 0),
            ],
            3.0,
            9,
        );
        let assignment = Kcl3Balance::default().assign(&view);
        let moves = moved(&assignment);
        let mut keys: Vec<_> = moves.iter().map(|(_, m)| lease_of(m).clone()).collect();
        keys.sort();
        let before = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), before, "a lease moved twice: {moves:?}");
        assert!(moves
            .iter()
            .any(|(_, m)| matches!(m, Move::RequestHandoff { .. })));
        for (id, count) in &assignment.counts {
            let incoming = assignment.moves.get(id).map_or(0, Vec::len) as u32;
            assert_eq!(assignment.targets[id], count + incoming);
        }
    }

    #[test]
    fn no_worker_is_given_leases_beyond_its_capacity() {
        // b and c have the most headroom but room for one lease each; a holds the rest.
        let mut view = fleet(
            &[
                ("a", Some(90.0), 8),
                ("b", Some(0.0), 0),
                ("c", Some(10.0), 1),
            ],
            10.0,
            4,
        );
        view.workers[1].capacity = 1;
        view.workers[2].capacity = 2;
        let assignment = Kcl3Balance::default().assign(&view);
        assert_eq!(assignment.targets[&w("b")], 1);
        assert_eq!(assignment.targets[&w("c")], 2);
        // Nowhere else to go: the rest of the new leases land on a, hot as it is.
        assert_eq!(assignment.moves[&w("a")].len(), 2);
    }
}
