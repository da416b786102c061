//! The Kinesis Client Library 2.x taker's policy, as a [`BalancePolicy`], for comparison
//! (the simulator runs it side by side with [`CountBalance`](super::CountBalance)).
//!
//! As described in `REFERENCE.md`: the workers are the owners of unexpired leases plus the
//! observer (idle workers are invisible); the target is ceil(leases / workers) (1 when there
//! are more workers than leases), capped by `max_leases_for_worker`; a worker under target
//! takes available leases (in an order of its own, standing in for KCL's shuffle), and only
//! when none is available steals from the single most-loaded worker, at most
//! `max_leases_to_steal_at_one_time` per round, one even when that worker is exactly at target
//! if the observer needs more than one. Run it with a 20 s taker interval and a 10 s lease to
//! reproduce KCL's defaults.
//!
//! Where KCL takes a lease from under its owner, the worker asks for it by handoff (see
//! [`Move::Take`]); a lease on its way counts as its receiver's, as KCL's take would have made
//! it, so each round steals the next lease rather than asking for the same one again.

use std::collections::BTreeMap;

use super::{stable_hash, BalancePolicy, FleetView, Holder, Move};
use crate::lease::{LeaseKey, WorkerId};

/// KCL 2.x's lease taker policy; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KclBalance {
    /// KCL's `maxLeasesToStealAtOneTime`. Default: 1.
    pub max_leases_to_steal_at_one_time: u32,
    /// KCL's `maxLeasesForWorker`. Default: unlimited.
    pub max_leases_for_worker: u32,
}

impl Default for KclBalance {
    fn default() -> Self {
        Self {
            max_leases_to_steal_at_one_time: 1,
            max_leases_for_worker: u32::MAX,
        }
    }
}

/// An order of keys of the observer's own (KCL shuffles at random; a hash of the observer and
/// the key keeps runs reproducible while different observers still pick differently).
fn order_for(me: &WorkerId, keys: &mut [&LeaseKey]) {
    keys.sort_by_cached_key(|k| {
        let mut bytes = me.as_str().as_bytes().to_vec();
        bytes.push(0);
        bytes.extend_from_slice(k.as_str().as_bytes());
        (stable_hash(&bytes), k.as_str().to_owned())
    });
}

impl BalancePolicy for KclBalance {
    fn plan(&self, view: &FleetView, me: &WorkerId) -> Vec<Move> {
        let total = view.leases.len() as u64;
        if total == 0 {
            return Vec::new();
        }
        let mut counts: BTreeMap<&WorkerId, u64> = BTreeMap::new();
        let mut by_owner: BTreeMap<&WorkerId, Vec<&LeaseKey>> = BTreeMap::new();
        let mut available: Vec<&LeaseKey> = Vec::new();
        for lease in &view.leases {
            match &lease.holder {
                // On its way to `to` by a handoff (how a steal from a live owner is carried
                // out): KCL's take would have made it `to`'s already, and it is nobody's to
                // steal again.
                Holder::Moving { to, .. } => *counts.entry(to).or_default() += 1,
                Holder::Held(owner) => {
                    *counts.entry(owner).or_default() += 1;
                    by_owner.entry(owner).or_default().push(&lease.key);
                }
                Holder::Available => available.push(&lease.key),
            }
        }
        counts.entry(me).or_default();
        let workers = counts.len() as u64;
        let target = if workers >= total {
            1
        } else {
            total.div_ceil(workers)
        }
        .min(u64::from(self.max_leases_for_worker));
        let needed = target.saturating_sub(counts[me]);
        if needed == 0 {
            return Vec::new();
        }
        if !available.is_empty() {
            order_for(me, &mut available);
            return available
                .into_iter()
                .take(needed as usize)
                .map(|k| Move::Take(k.clone()))
                .collect();
        }
        // The most loaded worker; ties go to the first in id order, as a map walk in KCL.
        let Some((donor, load)) = counts.iter().fold(
            None,
            |best: Option<(&&WorkerId, &u64)>, (w, c)| match best {
                Some((_, bc)) if bc >= c => best,
                _ => Some((w, c)),
            },
        ) else {
            return Vec::new();
        };
        if *donor == me || *load < target {
            return Vec::new();
        }
        let mut steal = needed.min(load - target);
        if needed > 1 && steal == 0 {
            steal = 1;
        }
        steal = steal.min(u64::from(self.max_leases_to_steal_at_one_time));
        let mut keys = by_owner.get(*donor).cloned().unwrap_or_default();
        order_for(me, &mut keys);
        keys.into_iter()
            .take(steal as usize)
            .map(|k| Move::Take(k.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::{LeaseView, WorkerView};

    fn w(id: &str) -> WorkerId {
        WorkerId::new(id).unwrap()
    }

    fn fleet(leases: usize, workers: &[&str]) -> FleetView {
        FleetView {
            leases: (0..leases)
                .map(|i| LeaseView {
                    key: LeaseKey::new(format!("s{i:03}")).unwrap(),
                    holder: Holder::Available,
                    load: None,
                    settled: true,
                })
                .collect(),
            workers: workers
                .iter()
                .map(|id| WorkerView {
                    id: w(id),
                    capacity: u32::MAX,
                    weight: 1.0,
                    reported: true,
                    load: None,
                })
                .collect(),
        }
    }

    /// One taker round of each worker in turn, each seeing the others' moves (as KCL's
    /// takers, which run at different moments). Returns the moves made.
    fn round(view: &mut FleetView, workers: &[&str]) -> usize {
        let mut moved = 0;
        for id in workers {
            let me = w(id);
            for step in KclBalance::default().plan(view, &me) {
                let Move::Take(key) = step else {
                    panic!("KCL only takes")
                };
                let lease = view.leases.iter_mut().find(|l| l.key == key).unwrap();
                lease.holder = Holder::Held(me.clone());
                moved += 1;
            }
        }
        moved
    }

    fn counts(view: &FleetView, workers: &[&str]) -> Vec<usize> {
        workers
            .iter()
            .map(|id| {
                view.leases
                    .iter()
                    .filter(|l| l.holder == Holder::Held(w(id)))
                    .count()
            })
            .collect()
    }

    /// A steal from a live owner is carried out as a handoff: while it is on its way, the
    /// lease counts as the thief's (as KCL's take would have made it) and is not stolen
    /// again; the next round steals the next one, not the same one.
    #[test]
    fn a_lease_on_its_way_counts_as_its_receivers_and_is_not_stolen_again() {
        let mut view = fleet(8, &["a", "b"]);
        for lease in &mut view.leases {
            lease.holder = Holder::Held(w("a"));
        }
        view.leases[0].holder = Holder::Moving {
            from: w("a"),
            to: w("b"),
        };
        let steps = KclBalance::default().plan(&view, &w("b"));
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert!(
            !steps.contains(&Move::Take(view.leases[0].key.clone())),
            "the lease on its way is stolen again: {steps:?}"
        );
        // With three on their way and a at five, b (target 4) steals one more.
        for lease in &mut view.leases[1..3] {
            lease.holder = Holder::Moving {
                from: w("a"),
                to: w("b"),
            };
        }
        assert_eq!(KclBalance::default().plan(&view, &w("b")).len(), 1);
        view.leases[3].holder = Holder::Moving {
            from: w("a"),
            to: w("b"),
        };
        assert!(KclBalance::default().plan(&view, &w("b")).is_empty());
    }

    #[test]
    fn ten_leases_on_three_workers_settle_at_four_three_three() {
        let workers = ["a", "b", "c"];
        let mut view = fleet(10, &workers);
        // a alone first: it sees only itself and takes everything.
        assert_eq!(round(&mut view, &["a"]), 10);
        // b and c join: each steals one lease per round from the most loaded worker.
        let (mut rounds, mut steals) = (0, 0);
        loop {
            let moved = round(&mut view, &workers);
            if moved == 0 {
                break;
            }
            steals += moved;
            rounds += 1;
            assert!(
                rounds < 20,
                "does not settle: {:?}",
                counts(&view, &workers)
            );
        }
        let mut settled = counts(&view, &workers);
        settled.sort();
        assert_eq!(settled, [3, 3, 4]);
        // b and c need 3 each, one steal per round: 3 rounds (60 s at KCL's 20 s interval).
        assert_eq!((rounds, steals), (3, 6));
    }

    #[test]
    fn steals_only_when_nothing_is_available_and_only_one_per_round() {
        let mut view = fleet(6, &["a", "b"]);
        for lease in &mut view.leases[..5] {
            lease.holder = Holder::Held(w("a"));
        }
        // One lease is available: b takes it and steals nothing although it needs three.
        let plan = KclBalance::default().plan(&view, &w("b"));
        assert_eq!(plan, [Move::Take(LeaseKey::new("s005").unwrap())]);
        view.leases[5].holder = Holder::Held(w("a"));
        let plan = KclBalance::default().plan(&view, &w("b"));
        assert_eq!(plan.len(), 1, "one steal per round: {plan:?}");
    }

    #[test]
    fn idle_workers_are_invisible_to_each_other() {
        // Two idle workers and one holding all 4: each idle one counts 2 workers (itself
        // and the owner), aims at 2, and steals one per round.
        let mut view = fleet(4, &["a", "b", "c"]);
        for lease in &mut view.leases {
            lease.holder = Holder::Held(w("a"));
        }
        assert_eq!(KclBalance::default().plan(&view, &w("b")).len(), 1);
        assert_eq!(KclBalance::default().plan(&view, &w("c")).len(), 1);
        assert!(KclBalance::default().plan(&view, &w("a")).is_empty());
    }
}
