//! Schedules of the fault campaign (`src/sim/campaign/`) that broke an invariant before the
//! library was fixed for them: a seeded schedule the campaign found, or a scripted one where
//! random schedules rarely meet the fault. Each test asserts that its schedule breaks no
//! invariant; each doc says what the schedule showed before the fix.

use shardlease_sim::sim;
use sim::campaign::run::{run, Knobs};
use sim::campaign::schedule::{parse_faults, schedule, script, Schedule};

/// The invariants `schedule` breaks, one line each.
fn violations(schedule: Schedule) -> Vec<String> {
    sim::campaign::quiet_simulated_panics();
    let outcome = run(schedule, Knobs::default());
    outcome
        .violations
        .iter()
        .map(|v| format!("{} at {:.3} s: {}", v.invariant, v.at, v.detail))
        .collect()
}

/// The campaign's schedule `seed` with the fault kinds `faults` (as `--schedule SEED --faults
/// LIST` replays it).
fn seeded(seed: u64, faults: &str) -> Schedule {
    let faults = parse_faults(faults).expect("fault kinds");
    schedule(seed, &faults, 0.01, false)
}

/// The campaign's schedule `seed` with the fault kinds `faults` breaks no invariant.
fn assert_replays_clean(seed: u64, faults: &str) {
    let replay = format!("--schedule {seed} --faults {faults}");
    assert_none(&replay, &violations(seeded(seed, faults)));
}

/// The scripted schedule `name` breaks no invariant.
fn assert_script_clean(name: &str) {
    let scripted = script(name).expect("a scripted schedule");
    assert_none(&format!("--script {name}"), &violations(scripted));
}

fn assert_none(replay: &str, violations: &[String]) {
    assert!(
        violations.is_empty(),
        "{replay} shows {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// A worker joining a fleet balanced by `KclBalance` steals from p1; the steal lands, no
/// answer comes to it or its retries, and the next round resumed it as a forced take,
/// reported a lease duration later, until a take recorded the acknowledgement it needs before
/// it was sent. Nobody tells p1 (the worker doing the chores is frozen; p1 checkpoints once a
/// minute), which goes on processing: `overlap at 31.911 s: shard-0000001 started by p3 while
/// p1 processes it`.
#[test]
fn a_steal_whose_answer_is_lost_is_not_processed_twice() {
    assert_script_clean("lost-steal");
}

/// Checkpoints whose callers gave up land late, after newer acknowledged ones, and replaced
/// them until checkpoints were numbered (`checkpoint-regressed at 7.928 s: shard-0000015 (item
/// 1977331614400998): a checkpoint of p4 left checkpoint 1; 2 had been acknowledged`, and
/// `checkpoint-backwards` with it).
#[test]
fn a_late_checkpoint_never_replaces_a_newer_acknowledged_one() {
    let (seed, faults) = (10451216379200822465, "late-write");
    assert_replays_clean(seed, faults);
}

/// An operator resets or deletes a lease; the item is created again and walks through the same
/// owner and tenure, and a checkpoint meant for the old item landed in the new one, until every
/// lease write named the item it is meant for (`leaseNonce`):
/// `checkpoint-later-item at 45.995 s: shard-0000000: checkpoint 1 of p0, meant for
/// item 1555325008952136, accepted into item 4947063501185682 (tenure 2)`).
#[test]
fn a_write_meant_for_a_deleted_item_never_lands_in_its_successor() {
    let (seed, faults) = (
        10862503357064539219,
        "late-write,op-checkpoint,op-reset,op-delete",
    );
    assert_replays_clean(seed, faults);
}

/// A worker restarted under its id (p7) takes its lease back; a round of its own reads the
/// page of its record from a replica that has not seen the restart, finds no record of the
/// session named on the lease, and a lease duration later placed the lease with another
/// worker while p7 processed it, until a session without a record in a scan was read again,
/// consistently, before its leases were placed: `overlap at 56.343 s: shard-0000002 started
/// by p0 while p7 processes it` (the same schedule without stale reads showed none).
#[test]
fn a_stale_scan_never_decides_that_a_live_session_has_ended() {
    let (seed, faults) = (
        129612745565084084,
        "freeze,cutoff,crash,restart,join,leave,stale-read",
    );
    assert_replays_clean(seed, faults);
}

/// A worker balanced by `KclBalance` steals a lease; its owner, told by a notice, drops it and
/// names the notice seen, and the thief starts the lease: the owner's application, still inside
/// a checkpoint call, let go of its grant 1.2 s later, until the owner named the notice seen
/// only once its application had let go: `overlap at 89.126 s: shard-0000018 started by p1
/// while p4 processes it`.
#[test]
fn a_stolen_lease_is_acknowledged_once_the_application_let_go() {
    let (seed, faults) = (16723804641238226573, "all");
    assert_replays_clean(seed, faults);
}

/// Found by the 10,000-schedule run with every kind (`--campaign 10000 --seed 40 --faults
/// all`, schedule 9340): p0's take of a lease given to it landed, its answer was lost, and
/// `KclBalance` on p4 stole the lease from p0's session; p0's retry then answered the item as
/// its first attempt had written it, so p0 started a lease p4 had taken (`overlap at 75.701
/// s: shard-0000030 started by p4 while p0 processes it`). The simulated network answered a
/// retry that way whatever had happened since; the backends do not: refused, a retry is
/// recognised as the caller's only while the item still carries its token (nobody moved the
/// counter since), and otherwise answers the lost race. The simulator now sends the retry
/// again and answers as they do (`sim::net::Recognised`).
#[test]
fn a_take_retried_after_a_steal_is_a_lost_race() {
    let (seed, faults) = (6530259159967943896, "all");
    assert_replays_clean(seed, faults);
}

/// A fleet balancing by load; a worker's session ends and it opens another, whose record holds
/// no load report. The worker held nothing, so its report never changed and was never sent
/// again; balance by load moves nothing to a worker without a report, and it stayed empty:
/// `unbalanced at 136.037 s: not balanced 60 s after the heal: leases per process {0: 9, 1: 9,
/// 2: 0, 3: 9}`, until a session opened again publishes its whole report at its next beat.
#[test]
fn a_session_opened_again_publishes_its_load_report() {
    // Every kind but stale reads and `KclBalance` (the campaign's default when it was found).
    let (seed, faults) = (
        17037633797596031665,
        "throttle,transient,lost,never,spike,freeze,cutoff,crash,restart,twin,panic,handoff,\
         join,leave,shards,skew,late-write,policy-load,op-release,op-drain,op-checkpoint,\
         op-reset,op-delete",
    );
    assert_replays_clean(seed, faults);
}

/// The only worker restarts under its id; its new session replaces the old one's record, and
/// its first rounds read the table from a replica that still shows that record, so the old
/// session's leases looked held by a live session and the worker waited for the slow scan (50
/// s) to look again: `unprocessed at 152.575 s: 27 of 28 leases not processed within 21.2 s
/// of the heal`, until a session knew that the sessions its opening replaced are over a lease
/// duration after it, whatever a scan shows. (Fixes made since change this schedule's course,
/// and with `Shared::predecessors` disabled it no longer fails; nor does the scripted
/// `restart-stale` below, in which a replica showing the old record never beating again gets
/// the old session fenced a lease duration after the opening.)
#[test]
fn a_restarted_worker_does_not_wait_on_its_replaced_session_shown_by_a_stale_scan() {
    let (seed, faults) = (13525740364444873981, "all");
    assert_replays_clean(seed, faults);
}

/// The other side of the test above: what a session may count as over. A twin (a second
/// process under a live worker's id) opens its session in place of the first's at once, while
/// the first is still valid until its last beat's validity runs out. A rule tried and dropped,
/// "while this session is valid no other session of its id is", let the twin take the first
/// process's leases at once: `overlap at 19.543 s: shard-0000010 started by p3 while p1
/// processes it`. Only the sessions an opening read in the record, and only a lease duration
/// after that read, count as over.
#[test]
fn a_session_counts_as_over_only_the_sessions_its_opening_replaced() {
    let (seed, faults) = (3935774486848180498, "all");
    assert_replays_clean(seed, faults);
}

/// A lease released and given to w00002; w00002's take's first attempt goes unanswered and
/// lands, its retries are refused, and the call failed with the last attempt's error, not
/// ambiguous, so nobody recorded that the take might have landed. The lease then stood owned
/// by w00002's session, which did not hold it, until the slow scan: `unprocessed at 112.653 s:
/// 1 of 23 leases not processed within 21.2 s of the heal`, until a call with an ambiguous
/// attempt failed as ambiguous (`store::retry`).
#[test]
fn a_take_whose_first_attempt_was_unanswered_is_known_as_maybe_landed() {
    let (seed, faults) = (4680181100204245590, "all");
    assert_replays_clean(seed, faults);
}

/// Handoffs asked by a worker that then died: their owner, finding the receiver gone, gave the
/// leases on to the other worker, and was left below its share with no round due (nobody
/// scans at rest but the worker doing the chores, which was above its share and asks for
/// nothing): `unbalanced at 159.334 s: not balanced 60 s after the heal: leases per process
/// {3: 13, 5: 15}`, until a worker that gives a released lease on looks again.
#[test]
fn a_worker_that_gives_a_lease_on_looks_again_for_its_share() {
    let (seed, faults) = (15764409654805191771, "all");
    assert_replays_clean(seed, faults);
}

/// Two steals of one lease cross: p4 (w00002) takes it from p1 and waits for p1's
/// acknowledgement; p1's take back lands unanswered, so nobody tells p4; p1's session ends, and
/// the worker doing the chores gives p1's lease to w00003, which starts it. p4's wait ended and
/// it started the lease it had stopped holding 16 s before: `overlap at 78.202 s:
/// shard-0000009 started by p4 while p3 processes it`, until a lease reported later than its
/// take was answered is reported only if a consistent read still shows it the taker's.
#[test]
fn a_lease_that_moved_on_while_its_report_waited_is_not_started() {
    let (seed, faults) = (4250408026086586460, "all");
    assert_replays_clean(seed, faults);
}

/// A worker joins and tells its predecessor in id order, whose round, brought by that notice,
/// scans a replica that does not show the newcomer yet: the predecessor went on watching the
/// session after it, nothing brought another round, and the newcomer's crash went unseen until
/// the slow scan (`unprocessed at 189.603 s: 3 of 14 leases not processed within 21.2 s of the
/// heal`), until a round reads the workers that announced themselves when its scan misses them.
#[test]
fn a_worker_that_announced_itself_is_watched_though_a_stale_scan_misses_it() {
    let (seed, faults) = (10935244231577836296, "all");
    assert_replays_clean(seed, faults);
}

/// An operator resets a lease (delete, create again) while a worker waits for a steal of the
/// old item to be acknowledged; the new item walks through the same tenures, the worker
/// steals it in tenure 3 again, and the old wait, ending, reported the new take at once
/// without the new owner's acknowledgement: `overlap at 64.983 s: shard-0000002 started by p3
/// while p1 processes it`, until a wait reports only the take of its own item.
#[test]
fn a_wait_for_an_acknowledgement_reports_only_the_take_of_its_own_item() {
    let (seed, faults) = (4801501541009325548, "all");
    assert_replays_clean(seed, faults);
}

/// A fleet balancing by load: beats of w00003 whose answers were lost land up to 12 s late,
/// after its later beats, and put back a report naming none of the leases it holds now. The
/// worker believed its newer report was in its record and, its figures unchanged, never sent
/// it again; the fleet saw its four leases as unmeasured and moved none of them: `unbalanced
/// at 162.013 s: not balanced 60 s after the heal: leases per process {1: 3, 3: 4, 5: 3, 7:
/// 3, 8: 2}`, until an unchanged report is sent again every few publish intervals. (Later fixes
/// change this schedule's course; `an_unchanged_report_is_sent_again_after_the_refresh` in
/// `src/worker/load.rs` fails without the refresh.)
#[test]
fn a_load_report_undone_by_a_late_beat_is_sent_again() {
    let (seed, faults) = (14993813934867632828, "all");
    assert_replays_clean(seed, faults);
}

/// The worker that does the chores (w00000) leaves; the others see it go, and w00003 tells
/// w00002 it does them now. A round of w00002 then scans a replica that still shows w00000
/// with its capacity, so w00002 stood by as the standby discoverer, with no round due: leases
/// of removed shards were never retired (`not-retired at 252.281 s: leases of removed shards
/// still in the table 120 s after the heal: shard-0000004 shard-0000006 shard-0000013`),
/// until a round reads the smaller workers its scan shows consistently. (Leases are now
/// placed only with workers seen to beat, which changes this schedule's course: it passes
/// without that read too.)
#[test]
fn a_worker_that_left_shown_by_a_stale_scan_does_not_keep_the_chores() {
    let (seed, faults) = (9229047805681788593, "all");
    assert_replays_clean(seed, faults);
}

/// A fleet balanced by `KclBalance`: w00000 steals shard-0000021 from w00002, whose
/// application is slow to let go; the steal lands unanswered and w00000 freezes before it
/// told w00002, so the wait for w00002's acknowledgement lived only in a frozen process. Its
/// session ended, w00002 gave the lease (which it still processed) on to the id w00000, and
/// w00000's twin started it: `overlap at 38.115 s: shard-0000021 started by p4 while p2
/// processes it`, until a steal from a live session is asked as a handoff, which its owner
/// completes only once its application let go. (Leases are now placed only with workers seen
/// to beat, which changes this schedule's course; `tests/steal_handoff.rs` fails without the
/// change.)
#[test]
fn a_steal_is_asked_as_a_handoff() {
    let (seed, faults) = (14039232530547505955, "all");
    assert_replays_clean(seed, faults);
}

/// A twin of w00000 opens its session in place of p0's; its read of the record is throttled
/// and answered 2 s after it began, after a beat of p0 that began in between. The twin
/// counted p0's session over a lease duration after its read began, and took p0's leases
/// while p0 still held them: `overlap at 155.885 s: shard-0000007 started by p4 while p0
/// processes it`, until the sessions an opening replaced are counted over a lease duration
/// after the opening was answered. (Since leases are placed only with workers seen to beat,
/// this schedule runs another course and passes without that fix too: `tests/twin_opening.rs`
/// scripts the race and fails without it.)
#[test]
fn a_replaced_session_is_over_a_lease_duration_after_the_opening_was_answered() {
    let (seed, faults) = (162851439912782902, "all");
    assert_replays_clean(seed, faults);
}

/// The scripted restart of hole 6 (see `--script restart-stale`): the only worker restarts,
/// and its first rounds scan replicas that still show the session its opening replaced,
/// beating.
#[test]
fn a_restarted_worker_does_not_wait_on_its_replaced_session_shown_by_a_stale_scan_scripted() {
    assert_script_clean("restart-stale");
}

/// w00004's process reopens its session and crashes a second later, before any round of its
/// own; the only other worker, w00003, had no round due until its slow scan 40 s later, which
/// showed w00004's record for the first time. Taken for a live worker, w00004 was given half
/// the leases by handoff, and they waited unprocessed until its session was fenced a lease
/// duration later: `unsettled at 187.051 s: balanced 35.9 s after the heal, then not at 40.7
/// s: unprocessed: ...`, until leases are placed only with workers seen to beat.
#[test]
fn leases_are_not_placed_with_a_worker_never_seen_to_beat() {
    let (seed, faults) = (12021474995628492425, "all");
    assert_replays_clean(seed, faults);
}

/// A fleet balanced by `KclBalance` after a crash: one worker holds 27 of 34 leases. Its
/// steals are handoffs now, and each round asked for the lease already on its way again, so
/// one lease moved per beat of its owner: `unbalanced at 165.361 s: not balanced 60 s after
/// the heal: leases per process {0: 14, 2: 20}`, until a lease on its way counts as its
/// receiver's (as KCL's take would have made it) and the next round steals the next one.
#[test]
fn kcl_steals_by_handoff_move_one_lease_per_round() {
    let (seed, faults) = (1140771531329881988, "all");
    assert_replays_clean(seed, faults);
}

/// p4 (w00004) holds shard-0000008, cut off from the store; its twin p5 opens its session in
/// place of p4's record. p1 had seen p4's session without a record in stale scans for a lease
/// duration already; its consistent read now showed the twin's record, which it took as proof
/// that p4's session was over, and it started the lease while p4, whose last beat was seconds
/// old, still processed it: `overlap at 72.354 s: shard-0000008 started by p1 while p4
/// processes it`, until a session replaced by another process of its id counts as over only
/// a lease duration after the read that showed it replaced.
#[test]
fn a_session_replaced_by_a_twin_is_over_a_lease_duration_after_the_read_that_showed_it() {
    let (seed, faults) = (12123154400683567586, "all");
    assert_replays_clean(seed, faults);
}

/// A process being drained, not yet aware of it, finishes handoffs late (a fault of the
/// schedule); the heal lowered that for running processes only, so after the heal it still
/// held a lease asked of it for 30 s, then left it to expire (`unbalanced at 135.701 s: ...
/// unprocessed: shard-0000024`), until the heal ends every fault of leaving processes too.
#[test]
fn the_heal_ends_the_faults_of_leaving_processes_too() {
    let (seed, faults) = (18104464296992915974, "all");
    assert_replays_clean(seed, faults);
}

/// Processes of w00006 fight over its record; the heal kills the older twin, and the lease
/// it held waited 22.6 s for a new owner where the campaign's bound is 21.2 s: peers waited a
/// lease duration after the consistent read that showed the record replaced (see the twin
/// overlap above), and the peer that fenced the old session assigned the lease to the new
/// twin, which placement skipped until it was seen to beat. It passes since each session is
/// watched by two workers (and still with the watchers ending a session replaced by an
/// opening one heartbeat on); the extra reads also change the schedule's requests, so which
/// of the two made the difference is not established.
#[test]
fn a_lease_of_a_twin_killed_at_the_heal_is_taken_within_the_bound() {
    let (seed, faults) = (14977622348881825600, "all");
    assert_replays_clean(seed, faults);
}

/// A session fenced at heartbeat 3 and its process's successor opening a fresh record (1, then
/// 2): the watcher read the new record at 2, then a stale read showed the old one at 3, which
/// looked like the new session replaced by an opening one heartbeat on, and the watcher took
/// the live session for over (`overlap at 29.200 s: shard-0000004 started by p0 while p5
/// processes it`, 36 overlaps). A replacement is now believed only once a consistent read
/// shows the record still of the session that replaced.
#[test]
fn a_stale_read_of_an_older_record_is_not_taken_for_a_restart() {
    let (seed, faults) = (6176811619522188020, "all");
    assert_replays_clean(seed, faults);
}

/// Two processes of w00000 and of w00003 (twins), balance by load: the twins' beats overwrote
/// each other's load reports, so a lease of w00000 had no figure in its record, held leases
/// did not move for balance until one came, and the surviving process's report, unchanged to
/// it, brought no round: the placements kept 10, 5, 10 and 5 leases, outside the campaign's
/// band around the mean of 7.5, until the slow scan 53 s later (`not balanced 60 s after the
/// heal`), until the worker doing the chores looks again when the wait for a figure ends.
/// Found by `--campaign 10000 --seed 40` once each session had two watchers. (Later changes
/// move this schedule's course; `a_lease_whose_figure_was_overwritten_holds_the_balance_back_only_until_the_wait_ends`
/// in `tests/worker_sessions.rs` fails without the look.)
#[test]
fn a_fleet_with_twins_balanced_by_load_settles_within_the_band() {
    let (seed, faults) = (662122359471125749, "all");
    assert_replays_clean(seed, faults);
}

/// A twin of w00003 replaces the record of the session that had just taken a lease; the
/// twin's scans came from lagging replicas (one still showed the lease given to the id, the
/// next an older owner), nothing in them brought another round, and the lease waited for a
/// peer's round: started 21.3 s after the heal, over the campaign's bound of 21.2 s (`1 of 8
/// leases not processed within 21.2 s of the heal`), until a process whose opening replaced a
/// session looks again when that session is over. Found by `--campaign 10000 --seed 41` once
/// each session had two watchers; the build before these fixes (b35bac6) passes it with that look alone.
/// (`a_twin_whose_scans_lag_takes_the_replaced_sessions_leases_a_lease_after_its_opening` in
/// `tests/twin_opening.rs` fails without it.)
#[test]
fn a_lease_of_a_session_replaced_by_a_twin_is_started_within_the_bound() {
    let (seed, faults) = (213588933958268644, "all");
    assert_replays_clean(seed, faults);
}

/// A fleet left with one worker, w00001: a twin of it opened in place of its record and was
/// killed two seconds later. w00001 lost every lease when its next beat was refused, opened a
/// session again once the dead twin's record had stood unchanged for a lease duration, and
/// then waited another lease duration before taking the leases of its own ended session, as
/// any observer of that session would: `unprocessed at 85.364 s: 23 of 25 leases not
/// processed within 21.2 s of the heal`, until a process takes its own ended session's leases
/// back as soon as that session's validity ran out here. Found by `--campaign 10000 --seed
/// 41` at c18ce8c (`a_process_whose_session_a_dead_twin_replaced_takes_its_own_leases_back_when_it_opens_again`
/// in `tests/twin_opening.rs` fails without the fix).
#[test]
fn a_process_takes_its_own_ended_sessions_leases_back_when_it_opens_again() {
    let (seed, faults) = (14896694939824624162, "all");
    assert_replays_clean(seed, faults);
}
