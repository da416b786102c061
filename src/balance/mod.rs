//! Fleet balance as a pure decision over a snapshot: which leases should *this* worker take
//! or ask for. No I/O, no clock: the taker builds a [`FleetView`] and acts on the [`Move`]s.
//!
//! [`CountBalance`] is the default policy: every live worker ends with floor(L/W) or
//! ceil(L/W) leases (within its capacity), moves are the fewest that reach that, and every
//! observer of the same snapshot computes the same global assignment, so concurrent deciders
//! never ask one donor for more than its surplus. A load-aware policy can replace it through
//! the [`BalancePolicy`] trait.

mod kcl;
mod kcl3;
mod load;

use std::collections::HashMap;

pub use self::kcl::KclBalance;
pub use self::kcl3::Kcl3Balance;
pub use self::load::LoadBalance;
use crate::fasthash::FastMap;
use crate::lease::{LeaseKey, WorkerId};

/// Who has a lease, as the observer judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// Unowned, or its owner's lease expired: anyone may take it.
    Available,
    /// Held by a live worker.
    Held(WorkerId),
    /// Held by `from`, with a handoff to `to` pending.
    Moving {
        /// The current owner.
        from: WorkerId,
        /// The worker it is being handed to.
        to: WorkerId,
    },
}

/// One lease in a [`FleetView`].
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseView {
    /// The lease.
    pub key: LeaseKey,
    /// Who has it.
    pub holder: Holder,
    /// Its load figure, if reported.
    pub load: Option<f64>,
    /// Whether its holder has published that figure itself. A lease that just moved has only
    /// its previous holder's figure (or none) until its new holder has measured it for a
    /// while: a load policy plans with that figure but does not move the lease again before
    /// (its cool-down). True for a lease nobody holds.
    ///
    /// A held lease with no figure at all is not settled while its holder may still publish
    /// one: a load policy then moves no held lease for balance, since its targets would count
    /// a guess. Once the observer has waited two publish intervals for that figure (on its
    /// own clock), the lease is settled: its holder's application reports nothing for it,
    /// and the policy plans with a guess rather than wait for ever.
    pub settled: bool,
}

/// One live worker in a [`FleetView`].
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerView {
    /// The worker.
    pub id: WorkerId,
    /// The most leases it accepts.
    pub capacity: u32,
    /// How much load it takes relative to others (its published weight; 1 when it publishes
    /// none). A load policy gives it a share of the fleet's load in proportion.
    pub weight: f64,
    /// Whether it has published a load report yet (its weight): a load policy moves no held
    /// lease while a live worker has not, since its share is not known.
    pub reported: bool,
    /// Its utilisation figure (CPU share, or anything the application measures), if reported.
    pub load: Option<f64>,
}

/// What one worker sees of the fleet: every lease and every live worker (itself included).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetView {
    /// Every lease.
    pub leases: Vec<LeaseView>,
    /// Every live worker, idle ones included.
    pub workers: Vec<WorkerView>,
}

/// A step the observer should take.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Move {
    /// Take a lease: an available one, or (a steal, as KCL does) one a live worker holds. The
    /// worker carries a steal out as a handoff ([`Move::RequestHandoff`]): the owner's
    /// application finishes and checkpoints, then the owner hands the lease over. A lease on
    /// its way is [`Holder::Moving`] until then.
    Take(LeaseKey),
    /// Ask `from` to hand `key` over gracefully.
    RequestHandoff {
        /// The lease.
        key: LeaseKey,
        /// Its current owner.
        from: WorkerId,
    },
}

/// A balancing policy: a pure function from a view to the observer's moves.
pub trait BalancePolicy: Send + Sync + 'static {
    /// The moves `me` should make, given `view`.
    fn plan(&self, view: &FleetView, me: &WorkerId) -> Vec<Move>;

    /// As [`plan`](Self::plan), given the count [`Assignment`] of the same view, which the
    /// caller has computed already (a worker places others'
    /// leases by it). A policy that plans by that assignment takes its moves from it
    /// instead of computing it again; by default, `plan`.
    fn plan_with(&self, view: &FleetView, me: &WorkerId, assignment: &Assignment) -> Vec<Move> {
        let _ = assignment;
        self.plan(view, me)
    }

    /// The global assignment of `view`, the same for every observer of it:
    /// the taker places others' leases by it (gives them what nobody
    /// holds, asks handoffs on their behalf) and hands it to [`plan_with`](Self::plan_with).
    /// A worker is below its share while its `counts` entry is below its `targets` entry.
    /// By default, the count assignment ([`Assignment::compute`]).
    fn assign(&self, view: &FleetView) -> Assignment {
        Assignment::compute(view)
    }
}

/// Balance by lease count: floor or ceil of L/W per worker, sticky, minimal moves.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountBalance;

impl BalancePolicy for CountBalance {
    fn plan(&self, view: &FleetView, me: &WorkerId) -> Vec<Move> {
        Assignment::compute(view)
            .moves
            .remove(me)
            .unwrap_or_default()
    }

    fn plan_with(&self, _view: &FleetView, me: &WorkerId, assignment: &Assignment) -> Vec<Move> {
        assignment.moves.get(me).cloned().unwrap_or_default()
    }
}

/// The global assignment every observer of one view computes alike.
#[derive(Debug, Clone, Default)]
pub struct Assignment {
    /// Each live worker's target count.
    pub targets: HashMap<WorkerId, u32>,
    /// Each live worker's count now (pending handoffs counted for the receiver).
    pub counts: HashMap<WorkerId, u32>,
    /// The moves of each worker that has any.
    pub moves: HashMap<WorkerId, Vec<Move>>,
}

/// A figure usable as a load (or a utilisation): finite and not negative.
pub(crate) fn usable(figure: Option<f64>) -> Option<f64> {
    figure.filter(|x| x.is_finite() && *x >= 0.0)
}

/// FNV-1a: a hash that is the same in every process, so all observers order alike.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Assignment {
    /// Computes the assignment of `view`.
    pub fn compute(view: &FleetView) -> Self {
        let mut workers: Vec<&WorkerView> = view.workers.iter().collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        workers.dedup_by(|a, b| a.id == b.id);
        // Each live worker's place in `workers`: the loop over every lease counts by it.
        let index: FastMap<&WorkerId, usize> = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (&w.id, i))
            .collect();
        let mut counted_by = vec![0u32; workers.len()];
        let mut held_by: Vec<Vec<&LeaseKey>> = vec![Vec::new(); workers.len()];
        let mut available = Vec::new();
        for lease in &view.leases {
            let counted = match &lease.holder {
                Holder::Moving { from, to } => index.get(to).or_else(|| index.get(from)).copied(),
                Holder::Held(from) => {
                    let at = index.get(from).copied();
                    if let Some(at) = at {
                        held_by[at].push(&lease.key);
                    }
                    at
                }
                Holder::Available => None,
            };
            match counted {
                Some(at) => counted_by[at] += 1,
                None => available.push(&lease.key),
            }
        }
        let counts: HashMap<WorkerId, u32> = workers
            .iter()
            .zip(&counted_by)
            .map(|(w, count)| (w.id.clone(), *count))
            .collect();

        // Sticky order: workers that hold more keep the larger targets.
        let mut order: Vec<&WorkerView> = workers.clone();
        order.sort_by(|a, b| counts[&b.id].cmp(&counts[&a.id]).then(a.id.cmp(&b.id)));
        let total = u32::try_from(view.leases.len()).unwrap_or(u32::MAX);
        let targets = water_fill(&order, total);

        // Donated leases: each donor's surplus, chosen by a stable order of keys.
        let mut pool: Vec<(&LeaseKey, Option<&WorkerId>)> = Vec::new();
        available.sort_by_cached_key(|k| (stable_hash(k.as_str().as_bytes()), *k));
        pool.extend(available.into_iter().map(|k| (k, None)));
        for (worker, mut keys) in workers.iter().zip(held_by) {
            let surplus = counts[&worker.id].saturating_sub(targets[&worker.id]) as usize;
            if surplus == 0 {
                continue;
            }
            keys.sort_by_cached_key(|k| (stable_hash(k.as_str().as_bytes()), *k));
            pool.extend(
                keys.into_iter()
                    .take(surplus)
                    .map(|k| (k, Some(&worker.id))),
            );
        }

        // Recipients, in id order, take consecutive slices of the pool.
        let mut moves: HashMap<WorkerId, Vec<Move>> = HashMap::new();
        let mut next = pool.into_iter();
        for worker in &workers {
            let deficit = targets[&worker.id].saturating_sub(counts[&worker.id]) as usize;
            for (key, from) in next.by_ref().take(deficit) {
                let step = match from {
                    None => Move::Take(key.clone()),
                    Some(from) => Move::RequestHandoff {
                        key: key.clone(),
                        from: from.clone(),
                    },
                };
                moves.entry(worker.id.clone()).or_default().push(step);
            }
        }
        Self {
            targets,
            counts,
            moves,
        }
    }
}

/// Targets: the highest common level every worker can reach within its capacity, then one
/// more for as many workers (in sticky order) as there are leases left.
fn water_fill(order: &[&WorkerView], total: u32) -> HashMap<WorkerId, u32> {
    let sum = |level: u32| -> u64 { order.iter().map(|w| u64::from(w.capacity.min(level))).sum() };
    let (mut low, mut high) = (0u32, total);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if sum(mid) <= u64::from(total) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let mut left = u64::from(total) - sum(low);
    order
        .iter()
        .map(|w| {
            let mut target = w.capacity.min(low);
            if left > 0 && w.capacity > low {
                target += 1;
                left -= 1;
            }
            (w.id.clone(), target)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: &str) -> WorkerId {
        WorkerId::new(id).unwrap()
    }

    fn worker(id: &str) -> WorkerView {
        WorkerView {
            id: w(id),
            capacity: u32::MAX,
            weight: 1.0,
            reported: true,
            load: None,
        }
    }

    fn view(leases: &[(&str, Option<&str>)], workers: &[&str]) -> FleetView {
        FleetView {
            leases: leases
                .iter()
                .map(|(key, owner)| LeaseView {
                    key: LeaseKey::new(*key).unwrap(),
                    holder: owner.map_or(Holder::Available, |o| Holder::Held(w(o))),
                    load: None,
                    settled: true,
                })
                .collect(),
            workers: workers.iter().map(|id| worker(id)).collect(),
        }
    }

    /// Applies every worker's plan at once, as if all acted on the same snapshot; handoffs
    /// complete. Returns the number of moves.
    fn settle(view: &mut FleetView) -> usize {
        let assignment = Assignment::compute(view);
        let mut taken: HashMap<LeaseKey, WorkerId> = HashMap::new();
        for (worker, moves) in &assignment.moves {
            for step in moves {
                let key = match step {
                    Move::Take(key) | Move::RequestHandoff { key, .. } => key.clone(),
                };
                assert!(
                    taken.insert(key.clone(), worker.clone()).is_none(),
                    "{key} assigned twice"
                );
            }
        }
        for lease in &mut view.leases {
            if let Some(to) = taken.get(&lease.key) {
                lease.holder = Holder::Held(to.clone());
            }
        }
        taken.len()
    }

    fn counts(view: &FleetView) -> Vec<usize> {
        let mut ids: Vec<_> = view.workers.iter().map(|w| w.id.clone()).collect();
        ids.sort();
        ids.iter()
            .map(|id| {
                view.leases
                    .iter()
                    .filter(|l| l.holder == Holder::Held(id.clone()))
                    .count()
            })
            .collect()
    }

    const FOUR: [(&str, Option<&str>); 4] =
        [("s0", None), ("s1", None), ("s2", None), ("s3", None)];

    #[test]
    fn four_shards_spread_over_one_two_and_three_workers() {
        let mut one = view(&FOUR, &["a"]);
        assert_eq!(settle(&mut one), 4);
        assert_eq!(counts(&one), [4]);

        one.workers.push(worker("b"));
        assert_eq!(settle(&mut one), 2, "a join moves only what balance needs");
        assert_eq!(counts(&one), [2, 2]);

        one.workers.push(worker("c"));
        assert_eq!(settle(&mut one), 1);
        let mut sorted = counts(&one);
        sorted.sort();
        assert_eq!(sorted, [1, 1, 2]);
        assert_eq!(settle(&mut one), 0, "at rest nothing moves");
    }

    #[test]
    fn a_crashed_workers_leases_are_shared_out_without_moving_others() {
        let mut fleet = view(
            &[
                ("s0", Some("a")),
                ("s1", Some("a")),
                ("s2", Some("b")),
                ("s3", Some("b")),
                ("s4", None),
                ("s5", None),
            ],
            &["a", "b", "c"],
        );
        // c crashed earlier: its two leases are available. a and b already have their share.
        assert_eq!(settle(&mut fleet), 2);
        assert_eq!(counts(&fleet), [2, 2, 2]);
    }

    #[test]
    fn planning_with_the_assignment_at_hand_plans_the_same() {
        let fleet = view(
            &[
                ("s0", Some("a")),
                ("s1", Some("a")),
                ("s2", Some("a")),
                ("s3", None),
                ("s4", Some("b")),
            ],
            &["a", "b", "c"],
        );
        let assignment = Assignment::compute(&fleet);
        for me in ["a", "b", "c"] {
            let planned = CountBalance.plan(&fleet, &w(me));
            assert_eq!(CountBalance.plan_with(&fleet, &w(me), &assignment), planned);
        }
        assert!(
            !CountBalance.plan(&fleet, &w("c")).is_empty(),
            "c has moves to make"
        );
    }

    #[test]
    fn capacity_caps_a_worker_and_the_rest_absorb_the_remainder() {
        let mut fleet = view(&[("s0", None); 0], &["a", "b"]);
        fleet.leases = (0..10)
            .map(|i| LeaseView {
                key: LeaseKey::new(format!("s{i}")).unwrap(),
                holder: Holder::Available,
                load: None,
                settled: true,
            })
            .collect();
        fleet.workers[0].capacity = 3;
        settle(&mut fleet);
        assert_eq!(counts(&fleet), [3, 7]);

        for lease in &mut fleet.leases {
            lease.holder = Holder::Available;
        }
        fleet.workers[1].capacity = 4;
        assert_eq!(settle(&mut fleet), 7);
        assert_eq!(
            counts(&fleet),
            [3, 4],
            "beyond every capacity, leases stay unowned"
        );
    }

    #[test]
    fn pending_handoffs_count_for_the_receiver_and_are_not_asked_again() {
        let mut fleet = view(
            &[
                ("s0", Some("a")),
                ("s1", Some("a")),
                ("s2", Some("a")),
                ("s3", None),
            ],
            &["a", "b"],
        );
        fleet.leases[3].holder = Holder::Moving {
            from: w("a"),
            to: w("b"),
        };
        let assignment = Assignment::compute(&fleet);
        assert_eq!(assignment.counts[&w("b")], 1);
        let moves = &assignment.moves[&w("b")];
        assert_eq!(moves.len(), 1);
        assert!(
            matches!(&moves[0], Move::RequestHandoff { from, key } if *from == w("a") && key.as_str() != "s3")
        );
    }

    #[test]
    fn fifty_workers_over_a_thousand_leases_settle_in_one_step_and_stay() {
        let workers: Vec<String> = (0..50).map(|i| format!("w{i:02}")).collect();
        let ids: Vec<&str> = workers.iter().map(String::as_str).collect();
        let keys: Vec<String> = (0..1000).map(|i| format!("shard-{i:04}")).collect();
        let leases: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (k.as_str(), None)).collect();
        let mut fleet = view(&leases, &ids[..1]);
        assert_eq!(settle(&mut fleet), 1000);
        fleet.workers = ids.iter().map(|id| worker(id)).collect();
        assert_eq!(
            settle(&mut fleet),
            980,
            "49 joiners take exactly their 20 each"
        );
        assert!(counts(&fleet).iter().all(|c| *c == 20));
        assert_eq!(settle(&mut fleet), 0);
        // 7 leave: their 140 leases become available; 43 workers hold 1000.
        fleet.workers.truncate(43);
        for lease in &mut fleet.leases {
            if let Holder::Held(owner) = &lease.holder {
                if owner.as_str() >= "w43" {
                    lease.holder = Holder::Available;
                }
            }
        }
        assert_eq!(settle(&mut fleet), 140);
        let c = counts(&fleet);
        assert_eq!(c.iter().max().unwrap() - c.iter().min().unwrap(), 1);
        assert_eq!(settle(&mut fleet), 0);
    }

    #[test]
    fn every_observer_computes_the_same_assignment() {
        let fleet = view(
            &[
                ("s0", Some("a")),
                ("s1", Some("a")),
                ("s2", Some("a")),
                ("s3", Some("a")),
            ],
            &["c", "a", "b"],
        );
        let mut shuffled = fleet.clone();
        shuffled.leases.reverse();
        shuffled.workers.reverse();
        for me in ["a", "b", "c"] {
            assert_eq!(
                CountBalance.plan(&fleet, &w(me)),
                CountBalance.plan(&shuffled, &w(me))
            );
        }
    }
}
