//! The campaign's application: processes every lease it is granted, checkpoints increasing
//! numbers, records in the ledger when it starts and stops, and does what the schedule tells
//! it: panic while holding a grant, or finish handoffs late. A frozen process's application
//! does nothing until the freeze ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardlease::clock::Clock;
use shardlease::worker::{Checkpointer, LeaseEvent, LeaseEvents, LeaseGrant, StopReason};
use shardlease::LeaseKey;
use tokio::sync::Notify;

use super::ledger::{checkpoint_text, checkpoint_value, Ledger};
use crate::sim::clock::SimClock;

/// What makes a simulated application panic; the campaign's panic hook keeps it quiet.
pub const PANIC: &str = "simulated application panic";

/// The longest a late application takes to finish a handoff (past the 30 s handoff timeout).
const LATE_FINISH: Duration = Duration::from_secs(45);

/// How often an application balancing by load reports a lease's load.
const LOAD_EVERY: Duration = Duration::from_secs(5);

/// The schedule's hold on one process's application. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct AppControl {
    /// One grant's task panics (the next one to look, if none is waiting).
    pub panic: Arc<Notify>,
    /// Handoffs are finished late (up to `LATE_FINISH`); back to `false`, a late finish
    /// in progress ends at once (the faults healed).
    pub late: Arc<Flag>,
    /// Every lease reports a load of 1, every `LOAD_EVERY` (the fleet balances by load).
    pub report_load: bool,
}

/// A flag tasks wait on. Not a `watch` channel, whose receivers wake in an order drawn from
/// tokio's unseeded generator (a seed would not replay the run); `Notify` wakes them in the
/// order they came.
#[derive(Debug, Default)]
pub struct Flag {
    value: Mutex<bool>,
    changed: Notify,
}

impl Flag {
    pub fn set(&self, value: bool) {
        *self.value.lock().unwrap_or_else(|e| e.into_inner()) = value;
        self.changed.notify_waiters();
    }

    pub fn get(&self) -> bool {
        *self.value.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes once the flag is down.
    pub async fn lowered(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.get() {
                return;
            }
            changed.await;
        }
    }
}

/// Records the stop when processing ends, however it ends: finished, panicked or aborted.
struct Processing {
    ledger: Arc<Mutex<Ledger>>,
    process: u64,
    key: LeaseKey,
    /// The item (`leaseNonce`) the grant is of, named in every checkpoint written (0: unknown).
    item: u64,
    /// Report a load of 1 (the fleet balances by load).
    report_load: bool,
}

impl Processing {
    /// Writes checkpoint `value`; records it in the ledger once the store acknowledged it.
    async fn checkpoint(&self, checkpointer: &Checkpointer, value: u64) {
        let text = checkpoint_text(value, self.item);
        if checkpointer.checkpoint(&text).await.is_ok() {
            let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            ledger.acknowledged(self.process, &self.key, &text);
        }
    }
}

impl Drop for Processing {
    fn drop(&mut self) {
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        ledger.stop(self.process, &self.key);
    }
}

/// The application of process `process`, until its event stream ends (its tasks are then
/// aborted: the process is gone).
pub async fn run(
    process: u64,
    mut events: LeaseEvents,
    ledger: Arc<Mutex<Ledger>>,
    clock: SimClock,
    every: Duration,
    control: AppControl,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(event) = events.recv().await {
        clock.thawed().await;
        let LeaseEvent::Acquired(grant) = event else {
            continue;
        };
        let key = grant.key().clone();
        let item = ledger.lock().unwrap_or_else(|e| e.into_inner()).start(
            process,
            &key,
            grant.tenure(),
            grant.initial_checkpoint(),
        );
        let processing = Processing {
            ledger: Arc::clone(&ledger),
            process,
            key,
            item,
            report_load: control.report_load,
        };
        let late = LATE_FINISH.mul_f64(rng.gen_range(0.0..=1.0));
        tasks.spawn(process_lease(
            grant,
            processing,
            clock.clone(),
            every,
            control.clone(),
            late,
        ));
        while tasks.try_join_next().is_some() {}
    }
    tasks.abort_all();
}

async fn process_lease(
    mut grant: LeaseGrant,
    processing: Processing,
    clock: SimClock,
    every: Duration,
    control: AppControl,
    late: Duration,
) {
    let checkpointer = grant.checkpointer();
    let mut value = checkpoint_value(grant.initial_checkpoint()).unwrap_or(0);
    let mut next = clock.now() + every;
    // An application balancing by load measures what it processes as it goes: a figure every
    // few seconds, from its first batch on.
    let mut measure = clock.now();
    let reason = loop {
        let report = processing.report_load.then_some(measure);
        tokio::select! {
            biased;
            reason = grant.stopped() => break reason,
            _ = control.panic.notified() => panic!("{PANIC}"),
            _ = clock.sleep_until(report.unwrap_or(next)), if report.is_some_and(|at| at < next) => {
                let _ = grant.report_load(1.0);
                measure += LOAD_EVERY;
            }
            _ = clock.sleep_until(next) => {
                value += 1;
                processing.checkpoint(&checkpointer, value).await;
                next = clock.now() + every;
            }
        }
    };
    clock.thawed().await;
    let finish_late = matches!(reason, StopReason::Handoff { .. }) && control.late.get();
    if finish_late {
        let until = clock.now() + late;
        tokio::select! {
            biased;
            _ = grant.lost() => {}
            _ = control.late.lowered() => {}
            _ = clock.sleep_until(until) => {}
        }
    }
    if reason != StopReason::Lost && grant.stop_reason() != Some(StopReason::Lost) {
        value += 1;
        processing.checkpoint(&checkpointer, value).await;
    }
    drop(processing);
    grant.finish();
}
