//! On the worker doing the fleet's chores: the leases that wait on a worker
//! (given and not taken, asked for and not handed over), and the notices that wake the worker
//! they wait on.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::decide::{self, Live, Looked, Told};
use super::{incarnations, Taker};
use crate::balance::{FleetView, Move};
use crate::lease::{Incarnation, Lease, LeaseKey, Snapshot, WorkerId};
use crate::lifecycle::LeaseStatus;
use crate::worker::state::{joined_notice, member_notice, EXPECT_NOTICE};

impl Taker {
    /// On the worker doing the fleet's chores: a lease whose holder changed
    /// since its last round (or that is gone) may have been edited or deleted by hand, and
    /// nothing else would tell the session that held it, which no longer renews anything.
    /// That session is told (a notice naming the lease): it reads the lease and drops it if it
    /// is no longer its own. Moves made by the protocol are told too, harmlessly.
    pub(super) async fn notice_changes(&mut self, snapshot: &Snapshot, now: Instant) {
        let holders = decide::holdings(snapshot);
        let open = decide::open_sessions(snapshot);
        let mut told = Told::new();
        decide::tell_changed(&self.holders, &holders, &open, &mut told);
        self.holders = holders;
        // A lease given whose notice was lost (the give's answer was lost, or the notice
        // failed) waits for a receiver that does not know of it: nobody else would ever move
        // it. So does a lease asked for in a handoff whose owner was never told (the requester
        // was cut off, and lost track of its request when its own session ended) while this
        // worker already saw the request at its first round. After its patience the worker it
        // waits on is told again.
        let last = Looked {
            waiting: &self.waiting,
            at: self.last_look,
        };
        let config = &self.shared.config;
        self.waiting = decide::look_for_waiting(snapshot, &open, &last, config, now, &mut told);
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

    /// When sessions this worker watches look dead (see the watcher),
    /// warns the workers their leases would go to if they were, so that they read their own
    /// records often until the leases come (see `EXPECT_NOTICE`).
    pub(super) async fn warn(
        &self,
        snapshot: &Snapshot,
        statuses: &[LeaseStatus],
        live: &Live,
        expiry: &[Instant],
        now: Instant,
    ) {
        let mut victims = self.parts.ring.take_suspects();
        {
            let fenced = self.fenced();
            victims.retain(|(victim, incarnation)| !fenced.contains(victim, *incarnation));
        }
        if victims.is_empty() {
            return;
        }
        let of_victim = |lease: &Lease| {
            victims.iter().any(|(victim, incarnation)| {
                lease.owner.as_ref() == Some(victim)
                    && lease.owner_incarnation == Some(*incarnation)
            })
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
        for (victim, _) in &victims {
            survivors.remove(victim);
        }
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
        let suspects: Vec<&str> = victims.iter().map(|(w, _)| w.as_str()).collect();
        tracing::info!(
            ?suspects,
            receivers = receivers.len(),
            "watched sessions look dead: warning where their leases would go"
        );
        for worker in receivers {
            if let Some(incarnation) = incarnations.get(worker).copied() {
                let notice = [EXPECT_NOTICE.to_owned()];
                self.shared
                    .notify(worker, incarnation, &notice, deadline)
                    .await;
            }
        }
    }

    /// Names the sessions this worker watches (the next live ids after its own,
    /// around), tells the new ones of the workers that watch it that this worker joined next
    /// to them, and keeps the receivers of released leases.
    pub(super) async fn ring(&mut self, snapshot: &Snapshot, live: &Live, view: &FleetView) {
        let (watched, watchers) = decide::neighbours(live, &self.shared.id);
        let renamed = self.parts.ring.watch_done.swap(false, Ordering::SeqCst);
        self.parts.ring.watched.send_if_modified(|current| {
            if *current == watched {
                renamed
            } else {
                let names: Vec<&str> = watched.iter().map(|w| w.as_str()).collect();
                tracing::info!(watched = ?names, "watching the next sessions in id order");
                *current = watched.clone();
                true
            }
        });
        let incarnations = incarnations(snapshot);
        self.announce(watchers, &incarnations).await;
        self.tell_chores(live, &incarnations).await;
        let receivers = decide::receivers(live, view, &incarnations, &self.shared.id);
        self.shared.receivers.set(receivers);
    }

    /// Tells each new one of its `watchers` (the workers before it in id order, which watch
    /// it) that this worker joined next to it: both, or the farther one would watch the
    /// worker after this one until a round of its own came, which at rest never does (seen
    /// at 8 workers: one session watched once for the whole hour). Only with the session
    /// open and valid: an announcement made while it is closed reaches a watcher that finds
    /// no record of this worker, watches the next one instead, and would never hear of this
    /// worker again (the session reopening starts a round).
    async fn announce(
        &mut self,
        watchers: Vec<WorkerId>,
        incarnations: &HashMap<&WorkerId, Incarnation>,
    ) {
        if !self.parts.own.valid() {
            return;
        }
        let deadline = self.shared.now() + self.shared.config.store_timeout;
        let notice = [joined_notice(&self.shared.id)];
        let mut told = Vec::with_capacity(watchers.len());
        for watcher in watchers {
            if !self.announced_to.contains(&watcher) {
                let Some(incarnation) = incarnations.get(&watcher).copied() else {
                    continue;
                };
                self.shared
                    .notify(&watcher, incarnation, &notice, deadline)
                    .await;
            }
            told.push(watcher);
        }
        self.announced_to = told;
    }

    /// The smallest live id does the fleet's chores (the slow scan, discovery); with no
    /// periodic rounds, a worker that became it must be told to look. So must it when a
    /// session was fenced here (or replaced): its process may have died between giving a
    /// lease and telling the receiver, and only the chores tell again.
    async fn tell_chores(&mut self, live: &Live, incarnations: &HashMap<&WorkerId, Incarnation>) {
        let me = &self.shared.id;
        let chores = decide::chores_worker(live);
        let fenced = self.fenced().added();
        let news = fenced > self.fenced_told;
        self.fenced_told = fenced;
        if chores == self.chores && !news {
            return;
        }
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
}
