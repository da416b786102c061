//! On the worker doing the fleet's chores: the leases that wait on a worker
//! (given and not taken, asked for and not handed over), and the notices that wake the worker
//! they wait on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{incarnations, patience, Holding, Taker};
use crate::balance::{FleetView, Holder, Move};
use crate::lease::{Incarnation, Lease, LeaseKey, Snapshot, WorkerId};
use crate::lifecycle::LeaseStatus;
use crate::worker::state::{member_notice, Receiver, EXPECT_NOTICE};

impl Taker {
    /// On the worker doing the fleet's chores: a lease whose holder changed
    /// since its last round (or that is gone) may have been edited or deleted by hand, and
    /// nothing else would tell the session that held it, which no longer renews anything.
    /// That session is told (a notice naming the lease): it reads the lease and drops it if it
    /// is no longer its own. Moves made by the protocol are told too, harmlessly.
    pub(super) async fn notice_changes(&mut self, snapshot: &Snapshot, now: Instant) {
        let holders: HashMap<LeaseKey, Holding> = snapshot
            .leases
            .iter()
            .filter_map(|l| match (&l.owner, l.owner_incarnation) {
                (Some(owner), Some(incarnation)) => Some((
                    l.key.clone(),
                    (owner.clone(), incarnation, l.tenure, l.handoff_to.clone()),
                )),
                _ => None,
            })
            .collect();
        let open: HashSet<(&WorkerId, Incarnation)> = snapshot
            .members
            .iter()
            .filter_map(|m| m.incarnation.map(|i| (&m.worker, i)))
            .collect();
        let mut told: BTreeMap<(WorkerId, Incarnation), Vec<String>> = BTreeMap::new();
        for (key, holding) in &self.holders {
            // Unchanged. (A handoff asked since is told to its holder too: the requester may
            // have died before it told the owner, and nothing else would.)
            if holders.get(key) == Some(holding) {
                continue;
            }
            let (owner, incarnation, _, _) = holding;
            if open.contains(&(owner, *incarnation)) {
                told.entry((owner.clone(), *incarnation))
                    .or_default()
                    .push(key.as_str().to_owned());
            }
        }
        self.holders = holders;
        // A lease given whose notice was lost (the give's answer was lost, or the notice
        // failed) waits for a receiver that does not know of it: nobody else would ever move
        // it. So does a lease asked for in a handoff whose owner was never told (the requester
        // was cut off, and lost track of its request when its own session ended) while this
        // worker already saw the request at its first round. After a lease duration the
        // worker it waits on is told again.
        let incarnations = incarnations(snapshot);
        let mut waiting = HashMap::new();
        for lease in &snapshot.leases {
            let Some(owner) = &lease.owner else {
                continue;
            };
            let (what, session) = match (lease.owner_incarnation, &lease.handoff_to) {
                (None, _) => (
                    (owner.clone(), None, lease.counter, None),
                    incarnations.get(owner).copied(),
                ),
                (Some(incarnation), Some(to)) => (
                    (
                        owner.clone(),
                        Some(incarnation),
                        lease.tenure,
                        Some(to.clone()),
                    ),
                    open.contains(&(owner, incarnation)).then_some(incarnation),
                ),
                (Some(_), None) => continue,
            };
            // A give first seen now happened since this worker last looked, and may be as old
            // as that look: its giver may have died before it told the receiver, and nothing
            // may have made this worker look for a while (seen in the campaign, seed
            // 2087271171323689699: a lease given by a process that died at once waited 26 s).
            // If it is fresh after all, the receiver is told twice, harmlessly.
            let first_seen = match (&what.3, self.last_look) {
                (None, Some(looked)) => looked,
                _ => now,
            };
            let since = match self.waiting.get(&lease.key) {
                Some((seen, since)) if *seen == what => *since,
                _ => first_seen,
            };
            let since = match session {
                Some(incarnation)
                    if now.saturating_duration_since(since)
                        >= patience(&self.shared.config, &what) =>
                {
                    match &what.3 {
                        None => {
                            tracing::info!(lease_key = %lease.key, to = %owner, "a lease given long ago is not taken yet: telling its receiver again")
                        }
                        Some(to) => {
                            tracing::info!(lease_key = %lease.key, owner = %owner, to = %to, "a handoff asked long ago is not done yet: telling the owner again")
                        }
                    }
                    told.entry((owner.clone(), incarnation))
                        .or_default()
                        .push(lease.key.as_str().to_owned());
                    now
                }
                _ => since,
            };
            waiting.insert(lease.key.clone(), (what, since));
        }
        self.waiting = waiting;
        self.last_look = Some(now);
        let deadline = now + self.shared.config.store_timeout;
        for ((worker, incarnation), mut keys) in told {
            keys.sort();
            tracing::info!(to = %worker, leases = keys.len(), "leases changed under their holder: telling it");
            self.shared
                .notify(&worker, incarnation, &keys, deadline)
                .await;
        }
    }

    /// When the session this worker watches looks dead (see the watcher),
    /// warns the workers its leases would go to if it were, so that they read their own
    /// records often until the leases come (see `EXPECT_NOTICE`).
    pub(super) async fn warn(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &HashMap<WorkerId, Option<u32>>,
        expiry: &[Instant],
        now: Instant,
    ) {
        let suspect = self
            .shared
            .suspect
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((victim, incarnation)) = suspect else {
            return;
        };
        if self.fenced().contains(&victim, incarnation) {
            return;
        }
        let of_victim = |lease: &Lease| {
            lease.owner.as_ref() == Some(&victim) && lease.owner_incarnation == Some(incarnation)
        };
        let keys: HashSet<&LeaseKey> = snapshot
            .leases
            .iter()
            .filter(|l| of_victim(l))
            .map(|l| &l.key)
            .collect();
        let if_dead: Vec<Instant> = snapshot
            .leases
            .iter()
            .zip(expiry)
            .map(|(l, at)| if of_victim(l) { now } else { *at })
            .collect();
        let mut survivors = live.clone();
        survivors.remove(&victim);
        let view = self.view(snapshot, statuses, &survivors, &if_dead, now);
        let assignment = self.policy.assign(&view);
        let incarnations = incarnations(snapshot);
        let deadline = now + self.shared.config.store_timeout;
        let mut receivers: Vec<&WorkerId> = assignment
            .moves
            .iter()
            .filter(|(_, moves)| {
                moves
                    .iter()
                    .any(|m| matches!(m, Move::Take(k) if keys.contains(k)))
            })
            .map(|(w, _)| w)
            .filter(|w| **w != self.shared.id)
            .collect();
        receivers.sort();
        tracing::info!(suspect = %victim, receivers = receivers.len(), "a watched session looks dead: warning where its leases would go");
        for worker in receivers {
            if let Some(incarnation) = incarnations.get(worker).copied() {
                let notice = [EXPECT_NOTICE.to_owned()];
                self.shared
                    .notify(worker, incarnation, &notice, deadline)
                    .await;
            }
        }
    }

    /// Names the session this worker watches (the next live id after its own,
    /// around), tells a new predecessor that this worker joined next to it, and keeps the
    /// receivers of released leases.
    pub(super) async fn ring(
        &mut self,
        snapshot: &Snapshot,
        live: &HashMap<WorkerId, Option<u32>>,
        view: &FleetView,
    ) {
        let me = &self.shared.id;
        let mut ids: Vec<&WorkerId> = live.keys().collect();
        ids.sort();
        let position = ids.iter().position(|w| *w == me).unwrap_or(0);
        let successor = (ids.len() > 1).then(|| ids[(position + 1) % ids.len()].clone());
        let predecessor =
            (ids.len() > 1).then(|| ids[(position + ids.len() - 1) % ids.len()].clone());
        let renamed = self.shared.watch_done.swap(false, Ordering::SeqCst);
        self.shared.successor.send_if_modified(|current| {
            if *current == successor {
                renamed
            } else {
                tracing::info!(successor = ?successor.as_ref().map(|w| w.as_str()), "watching the next session in id order");
                *current = successor.clone();
                true
            }
        });
        let incarnations = incarnations(snapshot);
        // Only with the session open and valid: an announcement made while it is closed reaches a
        // predecessor that finds no record of this worker, watches the next one instead, and
        // would never hear of this worker again (the session reopening starts a round).
        let open = self.shared.session_valid();
        if let Some(predecessor) = predecessor
            .filter(|p| self.announced_to.as_ref() != Some(p))
            .filter(|_| open)
        {
            if let Some(incarnation) = incarnations.get(&predecessor).copied() {
                let deadline = self.shared.now() + self.shared.config.store_timeout;
                let notice = [member_notice(me)];
                self.shared
                    .notify(&predecessor, incarnation, &notice, deadline)
                    .await;
                self.announced_to = Some(predecessor);
            }
        }
        // The smallest live id does the fleet's chores (the slow scan, discovery); with no
        // periodic rounds, a worker that became it must be told to look.
        let chores = live
            .iter()
            .filter(|(_, capacity)| **capacity != Some(0))
            .map(|(w, _)| w)
            .min()
            .cloned();
        // So must it when a session was fenced here (or replaced): its process may have died
        // between giving a lease and telling the receiver, and only the chores tell again.
        let fenced = self.fenced().added();
        let news = fenced > self.fenced_told;
        self.fenced_told = fenced;
        if chores != self.chores || news {
            if let Some(worker) = chores.as_ref().filter(|w| *w != me) {
                if let Some(incarnation) = incarnations.get(worker).copied() {
                    let deadline = self.shared.now() + self.shared.config.store_timeout;
                    let notice = [member_notice(me)];
                    self.shared
                        .notify(worker, incarnation, &notice, deadline)
                        .await;
                }
            }
            self.chores = chores;
        }
        let mut counts: HashMap<&WorkerId, u32> = HashMap::new();
        for lease in &view.leases {
            if let Holder::Held(w) | Holder::Moving { to: w, .. } = &lease.holder {
                *counts.entry(w).or_default() += 1;
            }
        }
        let receivers = live
            .iter()
            .filter(|(w, capacity)| *w != me && **capacity != Some(0))
            .filter_map(|(w, _)| {
                incarnations.get(w).map(|i| Receiver {
                    worker: w.clone(),
                    incarnation: *i,
                    held: counts.get(w).copied().unwrap_or(0),
                })
            })
            .collect();
        *self
            .shared
            .placement
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = receivers;
    }
}
