//! The neighbour watch: each worker watches the sessions of the next two live workers in id
//! order (`Ring::watched`, set by each placement round), so that every session is watched by
//! the two workers before it and a dead one is noticed one lease duration after its last beat,
//! even when the worker before it died with it. (Watched by one worker only, a session whose
//! watcher crashed with it waited until that watcher was fenced and the next one named it,
//! then a lease from that first sight: one and a half to two leases;
//! `sessions_fail_over_within_a_lease_and_a_beat_when_neighbours_crash_together` in
//! `sim/tests/simulate.rs`.)
//!
//! Expiry is judged as everywhere else: the (incarnation, heartbeat) first seen at an instant
//! of this worker's clock, unchanged for a lease duration. Then the watcher **fences** the
//! session (`end_session` conditioned on that heartbeat): a beat sent before the end that lands
//! later would otherwise revive it while its leases are being taken. Once the fence landed the
//! session's leases may be started at once; a placement round gives them out. The farther
//! watcher leaves the warning and the fence to the nearer one while that one beats: it warns
//! only once the sessions between them look dead here too, and fences a quarter of a beat
//! interval after the nearer one would (a crash costs one fence, not two).
//!
//! The reads are eventually consistent (half the cost; a stale value only delays the
//! judgement, and the fence is conditioned on what was read) and timed to land just after the
//! watched session's beats, which come every `renew_interval` on its clock. A watch first reads
//! every eighth of an interval until two changes an interval apart show when they land (one
//! alone may be a beat brought early, which moves the later ones), then keeps a window (`lo`,
//! `hi`] in which the last new value landed and reads next in the middle of the next one,
//! halving it each beat, until it is narrower than a sixteenth of the interval; then it reads
//! once per beat at the end of the window. So the last value of a session that dies is first
//! seen within that sixteenth, for about one read per watched session per beat.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::fenced::Fences;
use super::metrics;
use super::parts::{Base, Ring, SessionVersion};
use crate::lease::{Incarnation, WorkerId};

/// What the watcher is handed: the base, the ring it shares with the taker, the fences, and
/// the taker's wake-up.
pub(crate) struct WatcherParts {
    pub base: Arc<Base>,
    pub ring: Arc<Ring>,
    pub fences: Arc<Fences>,
    pub rescan: Arc<Notify>,
}

/// What the watches of one watcher share: its parts, and the watched sessions that look dead
/// here (warned of or fenced, no beat seen since).
struct Watches {
    parts: WatcherParts,
    silent: Mutex<HashSet<WorkerId>>,
}

impl Watches {
    fn silent(&self) -> std::sync::MutexGuard<'_, HashSet<WorkerId>> {
        self.silent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the watch of `target` is the nearest live one: `target` is named first, or
    /// every session named before it looks dead here.
    fn nearest(&self, target: &WorkerId) -> bool {
        let named = self.parts.ring.watched.borrow();
        let silent = self.silent();
        named
            .iter()
            .take_while(|w| *w != target)
            .all(|w| silent.contains(w))
    }
}

pub(crate) async fn run(parts: WatcherParts, cancel: CancellationToken) {
    let watches = Arc::new(Watches {
        parts,
        silent: Mutex::new(HashSet::new()),
    });
    let mut named = watches.parts.ring.watched.subscribe();
    // The watch of each session named: running, or done with it (fenced or gone) until the
    // next placement round names it again.
    let mut running: HashMap<WorkerId, Option<AbortHandle>> = HashMap::new();
    let mut tasks: JoinSet<WorkerId> = JoinSet::new();
    loop {
        let targets = named.borrow_and_update().clone();
        running.retain(|worker, task| {
            let keep = targets.contains(worker) && task.is_some();
            if !keep {
                if let Some(task) = task {
                    task.abort();
                }
            }
            keep
        });
        watches.silent().retain(|w| targets.contains(w));
        for target in targets {
            if let std::collections::hash_map::Entry::Vacant(entry) = running.entry(target) {
                let target = entry.key().clone();
                let task = tasks.spawn(
                    watch(Arc::clone(&watches), target).instrument(tracing::Span::current()),
                );
                entry.insert(Some(task));
            }
        }
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                changed = named.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    let Ok((id, target)) = done else { continue };
                    // Fenced or gone: wait for the next placement round to name the sessions
                    // to watch, this one again or this worker's next one (a worker restarted
                    // and crashed again, and the round naming it again woke nothing; its
                    // leases waited for the slow scan: `sessions_watch_a_restarted_worker_again`
                    // in `sim/tests/simulate.rs`).
                    if let Some(task) = running.get_mut(&target) {
                        if task.as_ref().is_some_and(|t| t.id() == id) {
                            *task = None;
                            watches.parts.ring.watch_done.store(true, Ordering::SeqCst);
                        }
                    }
                }
            }
        }
    }
}

/// What the watcher knows of the watched session's beats.
struct Beats {
    /// The value seen last, and when it was first seen.
    value: (Option<Incarnation>, u64),
    /// When the value was first seen: the upper end of the window of its landing.
    hi: Instant,
    /// A moment before its landing (the last read that still showed the value before).
    lo: Instant,
    /// The last read in this interval that showed no change yet.
    missed: Option<Instant>,
    /// The workers its leases would go to were warned.
    warned: bool,
    /// `lo` and `hi` bound a landing between two reads (one that missed it, one that showed
    /// it), or a whole number of intervals after such a landing.
    bounded: bool,
    /// In step with the regular beats: two landings bounded by reads an interval apart.
    synced: bool,
}

/// Watches `target` until its session is fenced here or its record is gone; returns it.
async fn watch(watches: Arc<Watches>, target: WorkerId) -> WorkerId {
    let parts = &watches.parts;
    let interval = parts.base.config.effective_renew_interval();
    let lease = parts.base.config.lease_duration;
    let mut beats: Option<Beats> = None;
    // A session a new process of the id replaced, and when it is over here (see `replaced`).
    let mut replaced_over: Option<(Incarnation, Instant)> = None;
    let mut next = parts.base.now();
    loop {
        let wake = replaced_over.map_or(next, |(_, over)| over.min(next));
        parts.base.clock.sleep_until(wake).await;
        if let Some((old, over)) = replaced_over {
            if parts.base.now() >= over {
                replaced_over = None;
                // The nearest watch only: the farther one leaves it to the nearer while that
                // one lives (and the rules of the taker's rounds apply).
                if watches.nearest(&target) {
                    end_replaced(parts, &target, old);
                }
                if wake < next {
                    continue;
                }
            }
        }
        let deadline = parts.base.now() + parts.base.config.store_timeout;
        let read = parts.base.store.get_member(&target, false, deadline).await;
        let now = parts.base.now();
        let member = match read {
            Ok(Some(member)) => member,
            Ok(None) => {
                // Left, or fenced by somebody else: a placement round looks at its leases
                // and names the next session to watch. The farther watch leaves the first
                // round to the nearer one, as it leaves it the fence: the nearer one's fence
                // removed the record, and its round is placing the leases right now. A round
                // here at once saw only some of those gives and planned by that: two workers
                // placing from two views moved leases between survivors for nothing
                // (`sessions_back_from_a_cut_off_ask_for_nothing_before_their_session_is_valid`
                // in `sim/tests/simulate.rs`: more moves than the minimum).
                tracing::info!(worker = %target, "the watched session's record is gone");
                if !watches.nearest(&target) {
                    let interval = parts.base.config.effective_renew_interval();
                    let until = parts.base.now() + interval / 4;
                    parts.base.clock.sleep_until(until).await;
                }
                parts.rescan.notify_one();
                return target;
            }
            Err(err) => {
                tracing::debug!(worker = %target, error = %err, "could not read the watched session");
                next = now + interval / 4;
                continue;
            }
        };
        let value = (member.incarnation, member.heartbeat);
        match &mut beats {
            Some(b) if b.value == value => {
                let nearest = watches.nearest(&target);
                // The farther watcher fences a little after the nearer one would.
                let due = b.hi
                    + lease
                    + if nearest {
                        Duration::ZERO
                    } else {
                        interval / 4
                    };
                if now >= due {
                    watches.silent().insert(target.clone());
                    let (incarnation, heartbeat) = value;
                    if fence(parts, &target, incarnation, heartbeat, deadline).await {
                        return target;
                    }
                    next = parts.base.now();
                    continue;
                }
                next = missed(&watches, &target, b, member.incarnation, now, nearest).min(due);
            }
            _ => {
                watches.silent().remove(&target);
                if let Some(b) = &beats {
                    if let Some(old) = replaced(b.value, value) {
                        if confirm_replaced(parts, &target, value, deadline).await {
                            replaced_over = Some((old, b.hi + lease));
                            if let Some(new) = member.incarnation {
                                parts.ring.appeared().insert(target.clone(), new);
                            }
                        }
                    }
                }
                let (b, at) = changed(parts, &target, beats.as_ref(), value, now);
                beats = Some(b);
                next = at;
            }
        }
    }
}

/// Whether the watched record, last seen at `last`, now at `now`, was replaced by a new process
/// of the id (a restart) that read it exactly as `last`: opening in place of a record writes
/// its heartbeat plus one, and only if the record is still as the opener read it (incarnation
/// and heartbeat). Then `last` was the old session's last beat (a beat of it is conditioned on
/// its incarnation, so none lands after), and the old session is over a lease duration after
/// this worker first saw `last`, as if it had been fenced then. Without this its leases waited
/// a lease duration from the replacement, however long after the crash the process came back:
/// `sessions_fail_over_a_crash_on_time_when_the_process_comes_back` in `sim/tests/simulate.rs`.
/// Returns the replaced incarnation. A fresh record (no record replaced) starts at heartbeat
/// 1, and no session's record is at 0.
fn replaced(last: SessionVersion, now: SessionVersion) -> Option<Incarnation> {
    match (last, now) {
        ((Some(old), heartbeat), (Some(new), next))
            if old != new && heartbeat >= 1 && next == heartbeat + 1 =>
        {
            Some(old)
        }
        _ => None,
    }
}

/// Whether a consistent read shows `target`'s record still of the session of `now` (see
/// [`replaced`]). The watcher's reads are eventually consistent, and one may go back in time:
/// a session's record fenced at heartbeat 3 and a new process's fresh record beaten to 2, read
/// in the wrong order, look like the new session replaced by the old one at 3, and the live
/// session was taken for over (seen in the fault campaign: schedule 6176811619522188020, an
/// overlap). The record of the new session read consistently, after the old value was read,
/// puts the two in order: a record never goes back to an earlier session, so the old value
/// came first, and the new session's value one heartbeat on came either from an opening that
/// replaced exactly that value (the old session's last) or after the old record was removed
/// (its session ended by a fence or by leaving).
async fn confirm_replaced(
    parts: &WatcherParts,
    target: &WorkerId,
    now: SessionVersion,
    deadline: Instant,
) -> bool {
    match parts.base.store.get_member(target, true, deadline).await {
        Ok(Some(record)) => record.incarnation == now.0,
        Ok(None) => false,
        Err(err) => {
            tracing::debug!(worker = %target, error = %err, "could not confirm that a restart replaced the watched session");
            false
        }
    }
}

/// `target`'s session `old`, replaced by a restart (see [`replaced`]), is over here: its
/// leases may be started at once, and a placement round gives them out.
fn end_replaced(parts: &WatcherParts, target: &WorkerId, old: Incarnation) {
    if parts.fences.lock().contains(target, old) {
        return;
    }
    tracing::warn!(worker = %target, incarnation = %old, "a restart replaced the watched session, which is over now: its leases are placed again");
    parts.fences.note(target, old);
    parts.rescan.notify_one();
}

/// The watched record showed no new beat at `now` (its expiry here still ahead): warns those
/// its leases would go to when it is close (the nearest watch only), and returns when to read
/// it next.
fn missed(
    watches: &Watches,
    target: &WorkerId,
    b: &mut Beats,
    incarnation: Option<Incarnation>,
    now: Instant,
    nearest: bool,
) -> Instant {
    let parts = &watches.parts;
    let (interval, lease) = (
        parts.base.config.effective_renew_interval(),
        parts.base.config.lease_duration,
    );
    b.missed = Some(now);
    // Beats missed: warn those its leases would go to, so that they are ready to start them
    // the moment they are given.
    let lead = warn_lead(interval, lease);
    let warn_at = (b.hi + lease).checked_sub(lead).unwrap_or(now);
    if !b.warned && now >= warn_at {
        watches.silent().insert(target.clone());
        if nearest {
            b.warned = true;
            if let Some(incarnation) = incarnation {
                parts.ring.suspect((target.clone(), incarnation));
                parts.rescan.notify_one();
            }
        }
    }
    // Not yet in step with its beats: every eighth of an interval until a change shows when
    // they land. Late: at the end of the window, then every eighth of an interval, and at the
    // moment of expiry.
    let end = b.hi + interval;
    let retry = if b.synced && now < end {
        end
    } else {
        now + interval / 8
    };
    let mut next = retry.min(b.hi + lease);
    if !b.warned && warn_at > now {
        next = next.min(warn_at);
    }
    next
}

/// The watched record showed a new `value` at `now`: where its beats land, as bounded by the
/// reads so far (`last`), and when to read it next.
fn changed(
    parts: &WatcherParts,
    target: &WorkerId,
    last: Option<&Beats>,
    value: SessionVersion,
    now: Instant,
) -> (Beats, Instant) {
    let interval = parts.base.config.effective_renew_interval();
    let floor = interval / 16;
    // The new value landed after the last read that did not show it. A landing bounded so is
    // in step with the beats only if it came an interval after the last one bounded so: a
    // beat brought early (a notice read between beats, new load figures, the departure)
    // moves the later ones with it, and one more before the next read puts them earlier than
    // the watch reads. Trusted after one landing, the watch never missed a change again to
    // see it: each beat was seen up to a whole interval late, as was a crash
    // (`sessions_keep_their_beats_in_step_after_an_early_beat` in `sim/tests/simulate.rs`).
    let (lo, bounded, synced) = match last {
        Some(b) => match b.missed {
            Some(missed) => {
                let lo = missed.min(now);
                let slack = interval / 8;
                let in_step =
                    b.bounded && lo < b.hi + interval + slack && now + slack > b.lo + interval;
                (lo, true, in_step)
            }
            None => ((b.lo + interval).min(now), b.bounded, b.synced),
        },
        None => (now, false, false),
    };
    // First seen by this worker maybe earlier, by a placement round's scan.
    let hi = match last {
        None => parts
            .ring
            .members_seen()
            .get(target)
            .filter(|(seen, _)| *seen == value)
            .map_or(now, |(_, at)| (*at).min(now)),
        Some(_) => now,
    };
    let b = Beats {
        value,
        hi,
        lo,
        missed: None,
        warned: false,
        bounded,
        synced,
    };
    let width = b.hi.saturating_duration_since(b.lo);
    let next = if !synced {
        now + interval / 8
    } else if width > floor {
        b.lo + width / 2 + interval
    } else {
        b.hi + interval
    };
    (b, next)
}

/// How long before a silent session's expiry the watcher warns: two beats before it, but
/// never before one and a half beats are missed (a beat a little late is no warning).
fn warn_lead(interval: Duration, lease: Duration) -> Duration {
    (interval * 2).min(lease.saturating_sub(interval * 3 / 2))
}

/// Ends `target`'s session as seen (its heartbeat unchanged for a lease duration here).
/// `true` when it is over (fenced here, or gone); `false` when it beat in between.
async fn fence(
    parts: &WatcherParts,
    target: &WorkerId,
    incarnation: Option<Incarnation>,
    heartbeat: u64,
    deadline: Instant,
) -> bool {
    let Some(incarnation) = incarnation else {
        // A record of an older version: nothing of ours can be fenced by it.
        return false;
    };
    match parts
        .fences
        .fence(target, incarnation, heartbeat, deadline)
        .await
    {
        Ok(true) => true,
        Ok(false) => false,
        Err(err) => {
            metrics::store_error(&parts.base.id, "end_session");
            tracing::warn!(worker = %target, error = %err, "could not fence an expired session");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_is_a_new_incarnation_one_heartbeat_on() {
        let (old, new) = (Some(Incarnation::new(1)), Some(Incarnation::new(2)));
        assert_eq!(replaced((old, 7), (new, 8)), old);
        // A beat of the same session, or a record that moved on past the opening.
        assert_eq!(replaced((old, 7), (old, 8)), None);
        assert_eq!(replaced((old, 7), (new, 9)), None);
        // A fresh record starts at 1: no session's record is at 0.
        assert_eq!(replaced((old, 0), (new, 1)), None);
        // Records of an earlier build carry no incarnation.
        assert_eq!(replaced((None, 7), (new, 8)), None);
        assert_eq!(replaced((old, 7), (None, 8)), None);
    }
}
