//! The fleet simulator (`src/sim/`) on small fleets: a seed replays a run exactly, the
//! reports add up, and the safety figure is zero with faults injected; the fault campaign
//! (200 seeded schedules, CI's run) breaks no invariant, and a schedule replays exactly.

use std::time::Duration;

use shardlease_sim::sim;
use sim::campaign::run::Knobs;
use sim::campaign::schedule::{parse_faults, schedule, schedule_seed};
use sim::campaign::{self, campaign, Options};
use sim::net::{FaultRates, Latencies, Latency};
use sim::report::Report;
use sim::scenario::scenario;
use sim::{simulate, Policy, Settings};

fn settings(name: &str, workers: usize, leases: usize, policy: Policy) -> Settings {
    Settings {
        scenario: scenario(name, workers, leases, 2, None).unwrap(),
        workers,
        leases,
        policy,
        seed: 7,
        latency: Latencies::all(Latency {
            median: Duration::from_millis(5),
            p99: Duration::from_millis(25),
        }),
        faults: FaultRates::default(),
        rest: Duration::from_secs(300),
        step_limit: Duration::from_secs(600),
        checkpoint_every: None,
        progress: None,
        start_gap: Duration::ZERO,
        load: Default::default(),
        load_trace: false,
        dump_start: None,
        lease_duration: None,
        kcl: Default::default(),
        latency_model: Default::default(),
        crash_within: None,
    }
}

fn without_wall_time(report: &Report) -> String {
    let json = report.json();
    let at = json.find("\"wall_s\"").expect("wall time in the report");
    json[..at].to_owned()
}

/// Ours and the KCL model alike (each KCL worker's choices come from the seeded network and
/// ordered maps only).
#[test]
fn a_seed_replays_a_run_with_faults_exactly() {
    for policy in [Policy::Ours, Policy::Kcl] {
        let mut run = settings("crash", 6, 120, policy);
        run.faults = FaultRates {
            throttle: 0.02,
            transient: 0.02,
            ambiguous: 0.02,
        };
        let first = simulate(run.clone());
        let second = simulate(run.clone());
        assert_eq!(without_wall_time(&first), without_wall_time(&second));
        assert!(first.rest.usage.throttled > 0 && first.rest.usage.failed > 0);
        run.seed = 8;
        let other = simulate(run);
        assert_ne!(
            (first.rest.usage.throttled, first.rest.usage.failed),
            (other.rest.usage.throttled, other.rest.usage.failed),
            "another seed draws other faults"
        );
    }
}

/// The KCL 2.x model at rest renews every lease once per renew interval (a third of a lease
/// duration, less 25 ms) and writes nothing else; a crash's orphans are processed again no
/// sooner than a lease duration after their last renewal (which came at most a renew interval
/// before the crash) and no later than two taker rounds after the crash (one to first see
/// their last counter, one to see it unchanged for a lease duration), a scheduler loop and a
/// few round trips.
#[test]
fn kcl_fails_over_within_two_taker_rounds_and_renews_every_lease_at_rest() {
    use sim::kcl::{DISPATCH_INTERVAL, LEASE_DURATION, RENEW_INTERVAL, TAKER_INTERVAL};
    let report = simulate(settings("crash", 6, 120, Policy::Kcl));
    let json = report.json();
    let failover = report.failover().expect("a crash step");
    assert_eq!(failover.processing.missing, 0, "{json}");
    assert_eq!(failover.processing.n, 40, "2 of 6 workers held 20 each");
    let earliest = (LEASE_DURATION - RENEW_INTERVAL).as_secs_f64();
    let latest = (TAKER_INTERVAL * 2 + DISPATCH_INTERVAL).as_secs_f64() + 1.0;
    assert!(failover.processing.min >= earliest, "{failover:?}");
    assert!(failover.processing.max <= latest, "{failover:?}");
    assert!(report.balanced().is_some(), "{json}");
    assert_eq!(report.rest.moves, 0, "{json}");
    let writes = report.rest.usage.writes as f64 / report.rest.lease_hours;
    let renewals = 3600.0 / RENEW_INTERVAL.as_secs_f64();
    assert!(
        (writes - renewals).abs() < renewals * 0.01,
        "{writes} writes per lease-hour, {renewals} renewals: {json}"
    );
}

/// A KCL steal: the thief starts the lease at its next scheduler loop, the old owner stops it
/// only once its next renewal is refused (within a renew interval) and its own scheduler loop
/// has run. The simulator measures those windows as KCL's duplicates, not as violations; our
/// policy, in the same join, has none.
#[test]
fn a_kcl_steal_leaves_both_workers_processing_the_lease_for_a_while() {
    use sim::kcl::{DISPATCH_INTERVAL, RENEW_INTERVAL, TAKER_INTERVAL};
    let kcl = simulate(settings("join", 4, 40, Policy::Kcl));
    let json = kcl.json();
    // 4 x 10, then 2 join: each joiner needs 6 or 7, and steals one per taker round.
    assert!(kcl.balanced().is_some(), "{json}");
    assert!(
        kcl.balanced().unwrap() >= (TAKER_INTERVAL * 5).as_secs_f64(),
        "{json}"
    );
    let duplicates = kcl.duplicates;
    assert!(duplicates.windows > 0, "{json}");
    assert!(duplicates.windows <= kcl.moves(), "{json}");
    assert!(duplicates.lease_seconds > 0.0, "{json}");
    let longest = (RENEW_INTERVAL + DISPATCH_INTERVAL).as_secs_f64() + 0.5;
    assert!(duplicates.longest <= longest, "{json}");
    assert_eq!(kcl.double_holding, 0, "KCL's duplicates are not violations");

    let ours = simulate(settings("join", 4, 40, Policy::Ours));
    assert_eq!(ours.duplicates.windows, 0, "{}", ours.json());
    assert_eq!(ours.double_holding, 0);
}

#[test]
fn count_balance_with_uniform_loads_reports_a_load_imbalance_near_one() {
    // 8 workers, then 2 join: 10 workers over 1,000 leases at rest.
    let report = simulate(settings("join", 8, 1000, Policy::Ours));
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    let at_rest = json["load_imbalance"]["at_rest"].as_f64().expect("at_rest");
    let worst = json["load_imbalance"]["worst"].as_f64().expect("worst");
    // Counts within one of each other: at most 101 / 100.
    assert!((0.999..=1.2).contains(&at_rest), "{json}");
    assert!(at_rest <= worst && worst <= 1.2, "{json}");
    assert_eq!(json["moves_per_hour_at_rest"].as_f64(), Some(0.0), "{json}");
    assert!(json["overloaded_worker_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(json["load"], "uniform");
    assert!(
        json["hot_shard_isolated_s"].is_null(),
        "no lease turned hot"
    );
}

#[test]
fn count_balance_ignores_capacities_and_the_report_shows_it() {
    // 4 workers, then 2 join: 6 at rest.
    let mut run = settings("join", 4, 120, Policy::Ours);
    run.load.capacities = vec![1.0, 2.0, 4.0];
    let report = simulate(run);
    // 20 leases each on capacities 1, 2, 4, 1, 2, 4: the capacity-1 workers at 20 against a
    // mean of 120 / 14.
    let at_rest = report.load.at_rest.unwrap();
    assert!((at_rest - 14.0 / 6.0).abs() < 1e-9, "{}", report.json());
    // Their share with headroom is 120 / 14 × 1.25 = 10.7 < 20: both overloaded all rest.
    assert!(report.load.overloaded_worker_seconds >= 2.0 * 300.0);
}

#[test]
fn balance_by_load_settles_a_skewed_fleet_within_the_tolerance_and_then_moves_nothing() {
    let mut run = settings("skew", 6, 120, Policy::Load);
    run.load.model = "zipf:1".parse().unwrap();
    run.load.noise = 0.05;
    let load = simulate(run.clone());
    let count = simulate(Settings {
        policy: Policy::Ours,
        ..run
    });
    let json: serde_json::Value = serde_json::from_str(&load.json()).unwrap();
    let at_rest = json["load_imbalance"]["at_rest"].as_f64().expect("at_rest");
    // The policy sees noisy figures, and 20 leases per worker are coarse: within 15 % of the
    // mean here (20 workers x 1,000 leases: BENCHMARKS.md, "Balance by load").
    assert!(at_rest <= 1.15, "{json}");
    assert!(count.load.at_rest.unwrap() > 1.3, "{}", count.json());
    assert!(load.moves() > 0, "{json}");
    assert!(load.moves() >= load.minimum(), "{json}");
    assert_eq!(
        load.rest.moves, 0,
        "noise of 5 % moves nothing at rest: {json}"
    );
    assert_eq!(load.double_holding, 0);
}

/// From the table balanced by count under Zipf(1.0) loads, the fleet settles in few more moves
/// than the lower bound: it waits for every held lease's first figure before it moves any (a
/// plan on the first few figures moved leases the next ones moved again: 2.3-3.8x the bound),
/// a worker above its band sheds its heaviest leases, and a lease that fits a band is not
/// given a worker emptied for it.
#[test]
fn balance_by_load_settles_a_skewed_fleet_in_few_moves_more_than_the_bound() {
    let mut run = settings("skew", 20, 1000, Policy::Load);
    run.load.model = "zipf:1".parse().unwrap();
    let report = simulate(run);
    let json = report.json();
    assert!(report.minimum() > 0, "{json}");
    assert!(
        report.moves() as f64 <= 1.6 * report.minimum() as f64,
        "{json}"
    );
    assert!(report.load.at_rest.unwrap() <= 1.10, "{json}");
    assert_eq!(report.rest.moves, 0, "{json}");
    assert_eq!(report.double_holding, 0);
}

/// Five leases whose applications never report a figure hold the balance back for two publish
/// intervals, not for ever: then the fleet plans with a guess for them and settles.
#[test]
fn leases_never_measured_hold_balance_by_load_back_for_a_while_only() {
    let mut run = settings("skew", 20, 1000, Policy::Load);
    run.load.model = "zipf:1".parse().unwrap();
    run.load.unreported = 5;
    run.rest = Duration::from_secs(1800);
    let report = simulate(run);
    let json = report.json();
    // The step ends once nothing started for 30 s, before the wait is over: the fleet settles
    // during the rest.
    assert!(report.rest.moves > 0, "{json}");
    assert!(report.rest.moves <= 2 * report.minimum(), "{json}");
    assert!(report.load.at_rest.unwrap() <= 1.10, "{json}");
    assert_eq!(report.double_holding, 0);
}

#[test]
fn balance_by_load_gives_each_worker_load_in_proportion_to_its_capacity() {
    let mut run = settings("heterogeneous", 6, 120, Policy::Load);
    run.load.capacities = vec![1.0, 2.0, 4.0];
    let report = simulate(run);
    let at_rest = report.load.at_rest.unwrap();
    assert!(at_rest <= 1.10, "{}", report.json());
    assert!(report.moves() >= report.minimum() && report.minimum() > 0);
    assert_eq!(report.rest.moves, 0);
}

#[test]
fn a_lease_turning_hot_is_settled_around_and_the_fleet_rests_again() {
    let mut run = settings("hot-shard", 6, 120, Policy::Load);
    run.load.model = "hot:1".parse().unwrap();
    run.load.hot_after = Some(Duration::from_secs(100));
    run.rest = Duration::from_secs(400);
    let report = simulate(run);
    let settled = report.load.hot_shard_isolated.expect("settled");
    assert!(settled < 60.0, "{}", report.json());
    assert_eq!(report.double_holding, 0);
}

#[test]
fn balance_by_load_follows_a_diurnal_wave_where_count_balance_does_not() {
    let run = |policy| {
        let mut run = settings("drift", 6, 120, policy);
        run.load.model = "zipf:1".parse().unwrap();
        run.load.wave = Some(Duration::from_secs(300));
        run.rest = Duration::from_secs(600);
        simulate(run)
    };
    let (load, count) = (run(Policy::Load), run(Policy::Ours));
    let (ours, theirs) = (load.load.at_rest.unwrap(), count.load.at_rest.unwrap());
    assert!(ours < theirs, "load {ours}, count {theirs}");
    assert!(ours <= 1.25, "{}", load.json());
    assert_eq!(load.double_holding, 0);
}

#[test]
fn every_orphan_of_a_crash_is_taken_and_processed_again() {
    let mut run = settings("crash", 5, 100, Policy::Ours);
    run.faults.throttle = 0.05;
    let report = simulate(run);
    let failover = report.failover().expect("a crash step");
    assert_eq!(failover.held.missing + failover.processing.missing, 0);
    assert_eq!(failover.held.n, 40, "2 of 5 workers held 20 each");
    let lease = 10.0;
    assert!(failover.processing.min >= lease * 0.9, "{failover:?}");
    assert!(failover.processing.min >= failover.held.min);
    assert_eq!(report.double_holding, 0);
    assert!(report.balanced().is_some(), "{}", report.json());
}

/// `--lease-duration`: the beat follows the lease (45 %), so a 2 s lease fails over in about
/// 2 s and beats five times as often as the default 10 s.
#[test]
fn a_shorter_lease_fails_over_sooner_and_beats_in_proportion() {
    let lease = Duration::from_secs(2);
    let mut run = settings("crash", 6, 120, Policy::Ours);
    run.lease_duration = Some(lease);
    run.rest = Duration::from_secs(600);
    let report = simulate(run);
    assert_eq!(report.lease_duration, 2.0);
    let failover = report.failover().expect("a crash step");
    assert_eq!(failover.processing.missing, 0);
    // Crash to processing: a lease after the victim's last beat (at most a beat before the
    // crash), plus a scan and a give.
    let beat = lease.as_secs_f64() * 0.45;
    assert!(failover.processing.min >= 2.0 - beat, "{failover:?}");
    assert!(failover.processing.max <= 2.0 + 0.5, "{failover:?}");
    // At rest: one beat per worker per 0.9 s, four workers left.
    let beats = 4.0 * 600.0 / beat;
    let writes = report.rest.usage.writes as f64;
    assert!(
        writes > beats * 0.98 && writes < beats * 1.02,
        "{writes} writes, {beats} beats"
    );
    assert_eq!(report.double_holding, 0);
    assert_eq!(report.healthy_leases_lost, Some(0), "{}", report.json());
}

/// The heavy-tail model stalls each worker 3 s once an hour. A 1.5 s lease cannot ride that out:
/// a healthy worker's session lapses or is fenced and its leases are lost; the default 10 s
/// lease (a beat every 4.5 s, valid 9.5 s) loses none.
#[test]
fn a_stall_longer_than_the_lease_loses_healthy_leases_and_the_default_lease_rides_it_out() {
    let run = |lease: Option<Duration>| {
        let mut run = settings("rest", 4, 40, Policy::Ours);
        run.latency_model = sim::latency::LatencyModel::parse("heavy-tail").unwrap();
        run.lease_duration = lease;
        run.rest = Duration::from_secs(3600);
        simulate(run)
    };
    let short = run(Some(Duration::from_millis(1500)));
    assert!(short.rest.usage.stalled > 0, "{}", short.json());
    assert!(short.healthy_leases_lost.unwrap() > 0, "{}", short.json());
    assert_eq!(short.double_holding, 0);
    let default = run(None);
    assert!(default.rest.usage.stalled > 0, "{}", default.json());
    assert_eq!(default.healthy_leases_lost, Some(0), "{}", default.json());
}

/// A crash's victim is not a healthy worker; request faults hit every worker, so under them no
/// figure is given; KCL's steals lose leases of healthy workers (KCL tells their processors
/// the lease is lost).
#[test]
fn leases_lost_by_healthy_workers_leave_out_the_faulted_ones() {
    let crash = simulate(settings("crash", 6, 120, Policy::Ours));
    assert_eq!(crash.healthy_leases_lost, Some(0), "{}", crash.json());
    let mut throttled = settings("crash", 6, 120, Policy::Ours);
    throttled.faults.throttle = 0.01;
    assert_eq!(simulate(throttled).healthy_leases_lost, None);
    let kcl = simulate(settings("join", 4, 40, Policy::Kcl));
    assert!(kcl.healthy_leases_lost.unwrap() > 0, "{}", kcl.json());
    let json: serde_json::Value = serde_json::from_str(&kcl.json()).unwrap();
    assert_eq!(
        json["healthy_leases_lost"],
        kcl.healthy_leases_lost.unwrap()
    );
}

/// `--kcl-lease-duration`: the model's renewals follow its lease (lease / 3 - 25 ms).
#[test]
fn the_kcl_model_renews_at_a_third_of_its_own_lease() {
    let mut run = settings("rest", 3, 30, Policy::Kcl);
    run.kcl = sim::kcl::Timing::of(Duration::from_secs(5)).unwrap();
    run.rest = Duration::from_secs(600);
    let report = simulate(run);
    assert_eq!(report.lease_duration, 5.0);
    let renewals = 30.0 * 600.0 / 1.641;
    let writes = report.rest.usage.writes as f64;
    assert!(
        writes > renewals * 0.98 && writes < renewals * 1.02,
        "{writes} for {renewals}"
    );
}

#[test]
fn added_and_removed_shards_are_discovered_and_retired() {
    for policy in [Policy::Ours, Policy::Kcl] {
        let report = simulate(settings("shards", 3, 30, policy));
        assert_eq!(report.steps.len(), 2);
        for step in &report.steps {
            assert!(step.balanced.is_some(), "{}", report.json());
        }
        // 3 shards added must each be placed; removing 3 leaves the fleet within one.
        assert!(report.steps[0].moves >= 3);
        assert_eq!(report.double_holding, 0);
    }
}

/// Every fault kind of the campaign, 200 schedules (the CI share of the record run in
/// BENCHMARKS.md); the first one also rests a simulated day: no task or memory growth.
#[test]
fn two_hundred_fault_schedules_break_no_invariant() {
    let schedules = 200;
    let faults = parse_faults("default").unwrap();
    let options = Options {
        schedules,
        seed: 1,
        faults: faults.clone(),
        day_every: schedules,
        ..Options::default()
    };
    let mut lines = Vec::new();
    let summary = campaign(&options, &mut |line| lines.push(line.to_owned()));
    assert_eq!(summary.violations, 0, "{}", lines.join("\n"));
    let last = lines.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "campaign: {schedules} schedules, 0 violations; injected: "
        )),
        "{last}"
    );
    for fault in &faults {
        let injected = summary.injected.get(fault).copied().unwrap_or(0);
        assert!(
            injected > 0,
            "no {} injected: {}",
            fault.name(),
            lines.join("\n")
        );
    }
}

#[test]
fn a_fault_schedule_replays_exactly() {
    let faults = parse_faults("all").unwrap();
    let seed = schedule_seed(3, 0);
    let run = || {
        let outcome = campaign::run::run(schedule(seed, &faults, 0.01, false), Knobs::default());
        let violations: Vec<String> = outcome
            .violations
            .iter()
            .map(|v| format!("{} {:.6} {}", v.invariant, v.at, v.detail))
            .collect();
        (violations, outcome.injected, outcome.simulated)
    };
    let first = run();
    assert_eq!(first, run());
    assert!(first.1.len() > 5, "a mix of faults: {:?}", first.1);
}

// The session protocol (the library's only one, `Policy::Ours`): the same
// scenarios, its costs at rest, and the fault schedules that found its bugs.

#[test]
fn sessions_fail_over_within_a_lease_and_a_beat_and_move_the_minimum() {
    // One worker crashes (as in the targets at 10 x 1,000).
    let mut crash = settings("crash", 6, 60, Policy::Ours);
    crash.scenario = scenario("crash", 6, 60, 1, None).unwrap();
    let report = simulate(crash);
    let failover = report.failover().expect("a crash step");
    assert_eq!(failover.processing.missing, 0, "{}", report.json());
    // Lease 10 s: the watcher fences a lease duration after the last beat it saw (read just
    // after each beat lands), the receivers were warned and start within a poll of the give.
    assert!(
        failover.processing.max < 13.0,
        "failover {:?}: {}",
        failover.processing,
        report.json()
    );
    assert_eq!(report.moves(), report.minimum(), "{}", report.json());
    assert_eq!(report.double_holding, 0);
    assert_eq!(report.rest.moves, 0);
}

/// Two workers crash at once. A session was watched by one worker only, its predecessor in id
/// order: when that predecessor died with it, nobody watched it until the predecessor's own
/// watcher had fenced the predecessor and been told to watch the next one, which then waited a
/// lease from its first sight of it. Its leases failed over in one and a half leases (seeds 1,
/// 4 and 9 below: 16.1, 16.1 and 15.0 s). Each session is now watched by the two workers
/// before it.
#[test]
fn sessions_fail_over_within_a_lease_and_a_beat_when_neighbours_crash_together() {
    let slow = failovers_past(1..=12, 13.0, false, |seed| {
        let mut crash = settings("crash", 6, 60, Policy::Ours);
        crash.seed = seed;
        crash.crash_within = Some(Duration::from_secs(10));
        crash
    });
    assert!(
        slow.is_empty(),
        "failed over past a lease and a beat: {slow:?}"
    );
}

/// A beat brought early (a notice read between beats) moves the later ones with it: each comes
/// an interval after the one before. A watch still finding a session's beats took the first
/// landing it bounded between two reads for their step; a second early beat before its next
/// read (the notices of a fleet's start) put the beats earlier than the watch read, and as
/// every read then showed a change, it never saw that it was out of step: each beat was seen
/// up to a whole interval late, and a crash long after the start was noticed as much later.
/// Three crashes at 60 x 1,200 within 40 s of the start: seeds 4 and 14 failed over in 9.90
/// and 8.88 s, 8.61 and 7.49 s with the fix (on the build that found it, 20 x 400, seeds 2, 3,
/// 4 and 6: 13.1, 12.3, 12.7 and 11.5 s). A watch now counts itself in step only once two
/// landings it bounded came an interval apart.
#[test]
fn sessions_keep_their_beats_in_step_after_an_early_beat() {
    // Each seed's bound lies between its failover with the fix and without it.
    for (seed, bound) in [(4, 9.3), (14, 8.3)] {
        let slow = failovers_past(seed..=seed, bound, false, |seed| {
            let mut crash = settings("crash", 60, 1200, Policy::Ours);
            crash.scenario = scenario("crash", 60, 1200, 3, None).unwrap();
            crash.seed = seed;
            crash.rest = Duration::from_secs(10);
            crash.crash_within = Some(Duration::from_secs(40));
            crash
        });
        assert!(slow.is_empty(), "failed over late: {slow:?}");
    }
}

/// A crashed process comes back under its id 5 s later (a supervisor restarting it) and opens
/// its session in place of the record the crash left. The old session's leases waited a lease
/// duration from that replacement, on the new process (its opening) and on every other worker
/// (their first read showing it replaced): 15.0-15.1 s after the crash on every seed below
/// (now under 12 s; 9.6 s at 10 x 1,000 in `--scenario crash-restart`). The watchers saw the
/// old session's last beat, and a replacement writes the replaced heartbeat plus one, so they
/// know it was the last: the old session is over a lease after they first saw it, and the new
/// one, seen to open, is given its leases back at once.
#[test]
fn sessions_fail_over_a_crash_on_time_when_the_process_comes_back() {
    // A lease after the last beat seen, and the restarted process's first beat.
    let slow = failovers_past(1..=6, 12.0, true, |seed| {
        let mut run = settings("crash", 6, 60, Policy::Ours);
        run.scenario = scenario("crash-restart", 6, 60, 1, Some(Duration::from_secs(5))).unwrap();
        run.seed = seed;
        run.crash_within = Some(Duration::from_secs(10));
        run
    });
    assert!(
        slow.is_empty(),
        "failed over late after a restart: {slow:?}"
    );
}

/// Runs `run(seed)` for each seed, a crash scenario on sessions: every orphan is processed
/// again, no lease held twice (and with `fewest_moves`, no more moves than the minimum);
/// returns the seeds whose failover to processing took `bound` seconds or more, with it.
fn failovers_past(
    seeds: std::ops::RangeInclusive<u64>,
    bound: f64,
    fewest_moves: bool,
    run: impl Fn(u64) -> Settings,
) -> Vec<(u64, f64)> {
    let mut slow = Vec::new();
    for seed in seeds {
        let report = simulate(run(seed));
        let failover = report.failover().expect("a crash step");
        assert_eq!(failover.processing.missing, 0, "{}", report.json());
        assert_eq!(report.double_holding, 0);
        if fewest_moves {
            assert_eq!(report.moves(), report.minimum(), "{}", report.json());
        }
        if failover.processing.max >= bound {
            slow.push((seed, failover.processing.max));
        }
    }
    slow
}

/// A worker cut off for three lease durations comes back: its session was fenced, but its
/// beats went unanswered, not refused, so it still thought it open. Its taker ran a round as
/// the cut ended, before its next beat learned of the fence, and asked for its share; the
/// owners handed the leases over, found no session to give them to and placed them elsewhere,
/// and the worker asked again once its new session opened: 300 moves for 200 (seed 3 of the
/// 10 x 1,000 cut-off in BENCHMARKS.md). A session whose validity ran out here takes and asks
/// for nothing until a beat lands.
#[test]
fn sessions_back_from_a_cut_off_ask_for_nothing_before_their_session_is_valid() {
    let mut cut = settings("cut-off", 10, 1000, Policy::Ours);
    cut.scenario = scenario("cut-off", 10, 1000, 1, None).unwrap();
    cut.seed = 3;
    cut.rest = Duration::from_secs(60);
    let report = simulate(cut);
    assert!(report.balanced().is_some(), "{}", report.json());
    assert_eq!(report.moves(), report.minimum(), "{}", report.json());
    assert_eq!(report.double_holding, 0);
}

#[test]
fn sessions_join_and_leave_move_the_minimum() {
    for name in ["join", "leave", "cold-start"] {
        // One worker joins or leaves (as in the targets at 10 x 1,000).
        let mut one = settings(name, 6, 60, Policy::Ours);
        one.scenario = scenario(name, 6, 60, 1, None).unwrap();
        balanced_with_the_fewest_moves(name, &simulate(one));
    }
}

/// Every lease processed by one worker, counts within one, each lease moved once at most as
/// the minimum needs, no two workers on one lease, and nothing moving at rest.
fn balanced_with_the_fewest_moves(name: &str, report: &Report) {
    assert!(report.balanced().is_some(), "{name}: {}", report.json());
    assert_eq!(
        report.moves(),
        report.minimum(),
        "{name}: {}",
        report.json()
    );
    assert_eq!(report.double_holding, 0, "{name}");
    assert_eq!(report.rest.moves, 0, "{name}");
}

/// Workers that start together, at once or a tenth of a second apart, gather before they take
/// or ask for anything: nobody takes more than its share only to hand it on. (Without the
/// gathering this cold start moved 484 leases for 200.)
#[test]
fn workers_starting_together_move_each_lease_once() {
    let mut cold = settings("cold-start", 10, 200, Policy::Ours);
    cold.rest = Duration::from_secs(60);
    let mut staggered = settings("join", 20, 200, Policy::Ours);
    staggered.scenario = scenario("join", 20, 200, 20, None).unwrap();
    staggered.start_gap = Duration::from_millis(100);
    staggered.rest = Duration::from_secs(60);
    for (name, run) in [("cold start", cold), ("staggered join", staggered)] {
        balanced_with_the_fewest_moves(name, &simulate(run));
    }
}

/// At rest a worker writes one beat per renew interval (4.5 s) and reads the records of the
/// two workers after it once per beat each; one worker scans the table every 50 s. Nothing
/// grows with the leases.
#[test]
fn sessions_at_rest_cost_one_beat_and_four_reads_per_worker() {
    let mut at_rest = settings("join", 6, 600, Policy::Ours);
    at_rest.rest = Duration::from_secs(3600);
    let report = simulate(at_rest);
    let usage = report.rest.usage;
    let workers = 8.0; // 6 and the two that joined
    let interval = shardlease::WorkerConfig::default().effective_renew_interval();
    let beats = workers * 3600.0 / interval.as_secs_f64();
    assert!(
        (usage.writes as f64) < beats * 1.02 && (usage.writes as f64) > beats * 0.98,
        "writes {} for {beats} beats",
        usage.writes
    );
    // Four reads per beat (the two sessions it watches, its own record twice between beats),
    // and 72 scans of two pages at most; and, as the rest begins, the watches of the two that
    // joined and of those before them finding the beats (every eighth of an interval until two
    // landings an interval apart show: about 140 reads) and the holders' reads of the leases
    // the chores tell them of after the join (about 30).
    assert!(
        (usage.reads as f64) < beats * 4.05 + 350.0,
        "reads {} for {beats} beats",
        usage.reads
    );
}

/// Cut-offs found these on the session protocol: a process whose session was fenced opened
/// the next one with the same incarnation, and the fencer's record of that fence then covered
/// the new session's leases (seed 10905525725756348110); and a new session's heartbeat climbed
/// back to the value the old one had when a peer last looked, so the peer fenced a live
/// session (seed 4617448268296080639). Both overlapped before their fixes.
#[test]
fn sessions_survive_the_cut_off_schedules_that_broke_them() {
    let faults = parse_faults("cutoff").unwrap();
    let knobs = Knobs::default();
    for seed in [10905525725756348110, 4617448268296080639] {
        let outcome = campaign::run::run(schedule(seed, &faults, 0.01, false), knobs);
        let overlaps: Vec<String> = outcome
            .violations
            .iter()
            .filter(|v| v.invariant == "overlap")
            .map(|v| format!("{:.3} {}", v.at, v.detail))
            .collect();
        assert!(overlaps.is_empty(), "seed {seed}: {overlaps:?}");
    }
}

/// A beat woken early (an expectation notice, a shutdown) pushed the next scheduled beat a
/// whole interval further each time; while notices kept coming, the scheduled beat drifted
/// away, the sessions expired and were fenced, and the fleet churned: 3,176 moves in 300 s at
/// rest after a crash of 2 of 20 workers before the fix, 2 after it.
#[test]
fn sessions_keep_beating_while_notices_wake_them_early() {
    let mut crash = settings("crash", 20, 400, Policy::Ours);
    crash.rest = Duration::from_secs(300);
    let report = simulate(crash);
    assert!(report.rest.moves < 20, "{}", report.json());
    assert_eq!(report.double_holding, 0);
}

/// Liveness schedules of the session protocol: a worker that reopened its session after a
/// fence did not tell its predecessor again, so nobody watched it and its leases stayed
/// unprocessed after it died (seed 3264522013856772444); and when the worker doing the fleet's
/// chores crashed, the next smallest id was never told, so no slow scan ran and removed shards
/// were never retired (seed 9147370558249537485). Both broke an invariant before their fixes.
#[test]
fn sessions_keep_the_ring_and_the_chores_after_faults() {
    sessions_pass_every_invariant(&[3264522013856772444, 9147370558249537485]);
}

/// More liveness schedules of the session protocol: a released lease's give landed but its
/// answer was lost, so its receiver was never told and the lease, given to a live session,
/// never expired (seed 16490264502457544819); and a lease forced from a session that then
/// crashed waited for an acknowledgement until a lease duration after the record was gone,
/// although the taker had itself fenced that session (seed 16152250852098033746).
#[test]
fn sessions_start_leases_given_unanswered_and_forced_from_a_fenced_session() {
    sessions_pass_every_invariant(&[16490264502457544819, 16152250852098033746]);
}

/// Runs each schedule (every fault kind) on the session protocol; no invariant may break.
fn sessions_pass_every_invariant(seeds: &[u64]) {
    sessions_pass_every_invariant_beating(seeds, None);
}

/// The same, with the workers' `renew_interval` set (`None`: the protocol's default).
fn sessions_pass_every_invariant_beating(seeds: &[u64], renew_interval: Option<Duration>) {
    sessions_pass_every_invariant_with(seeds, renew_interval, "all");
}

/// The same, with only the fault kinds `faults` (as `--faults` takes them).
fn sessions_pass_every_invariant_with(
    seeds: &[u64],
    renew_interval: Option<Duration>,
    faults: &str,
) {
    let faults = parse_faults(faults).unwrap();
    let knobs = Knobs {
        renew_interval,
        ..Knobs::default()
    };
    for &seed in seeds {
        let outcome = campaign::run::run(schedule(seed, &faults, 0.01, false), knobs);
        let violations: Vec<String> = outcome
            .violations
            .iter()
            .map(|v| format!("{} {:.3} {}", v.invariant, v.at, v.detail))
            .collect();
        assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    }
}

/// Schedules of a 10,000-schedule campaign on the session protocol: a process of a
/// duplicated id took a lease from its twin's session believing that session replaced, and
/// reported it at once, while the twin (which had in fact replaced it) went on processing
/// (seed 3491683136580316429, an overlap); a lease of a session whose validity had run out
/// here was asked for in a handoff that nobody completed, since nothing held it, until the
/// requester's timeout (seeds 17601542186732402320, 6821519428327954001,
/// 9816851038956725057); a process that opened its session again after its twin died waited a
/// second lease duration before starting the twin's leases (seed 4829631270644416179); and a
/// lease forced from a live session, lost here before that session acknowledged, was resumed
/// here as if it had been reported while the other still processed it (seed
/// 3203355087582755157, an overlap); and a requester that took a lease from a live owner
/// after its handoff timeout had its own session fenced before the owner acknowledged, so a
/// third worker started the lease while the owner still finished it (seed 1618653102842651118,
/// an overlap; the requester now revokes instead). Each broke an invariant before its fix.
#[test]
fn sessions_survive_twins_and_lapsed_sessions() {
    sessions_pass_every_invariant(&[
        3491683136580316429,
        3203355087582755157,
        1618653102842651118,
        17601542186732402320,
        6821519428327954001,
        9816851038956725057,
        4829631270644416179,
    ]);
}

/// Seen with beats every 5 s (a lease duration / 2): a worker whose session was fenced told
/// its predecessor of itself while its session was still closed; the predecessor found no
/// record of it and watched the next worker, and nobody watched it once it was open again,
/// so when it was cut off and left, nobody fenced it for 25 s (seed 3264522013856772444).
#[test]
fn sessions_announce_a_reopened_session_to_its_predecessor() {
    sessions_pass_every_invariant_beating(&[3264522013856772444], Some(Duration::from_secs(5)));
}

/// A handoff's requester died while the owner's application finished late; the owner then
/// handed the lease to the dead id, told nobody (no session to tell), and the lease waited for
/// the slow scan, 37 s (seed 6667422157301139985). The owner now gives such a lease on.
#[test]
fn sessions_give_on_a_lease_handed_to_a_requester_that_died() {
    sessions_pass_every_invariant(&[6667422157301139985]);
}

/// A handoff asked by a worker that died before it told the owner was never done: the table
/// counted the lease as on its way, and nothing told the owner (seed 3539552146431826193, and
/// ten more schedules of a campaign). The worker doing the chores now tells a lease's holder
/// when a handoff was asked of it since its last round. The extra notices then showed two takes
/// of one lease in a row here, a round's and a notice's, from one observation: the second read
/// the first's tenure as its own lost answer and started the lease again after the first had
/// let it go (seed 3957772692637626321, an overlap).
#[test]
fn sessions_tell_owners_of_handoffs_asked_and_take_once() {
    sessions_pass_every_invariant(&[3539552146431826193, 3957772692637626321]);
}

/// A revoked owner handed the lease over the moment it told its application the lease was
/// lost, while the application was still inside a checkpoint slowed by a latency spike: the
/// requester started the lease 1.5-1.8 s before the application let go (seeds
/// 13187655938407092127 and 8955725508044853058, overlaps). The owner now hands a revoked lease
/// over once the application has let go of it (or a handoff timeout later).
#[test]
fn sessions_hand_a_revoked_lease_over_once_the_application_let_go() {
    sessions_pass_every_invariant(&[13187655938407092127, 8955725508044853058]);
}

/// A handoff asked of a lease whose take here was still out (its answer late) was dropped by
/// the owner, which did not hold the lease yet; once the take landed, nothing asked again and
/// the table counted the lease as on its way for good (seed 15835665596219762336). A handoff
/// asked by a worker cut off before it told the owner, whose session then ended (so it forgot
/// its request), was seen by the worker doing the chores in its first round only, so never
/// told either (seed 9620133799559348378, and five more of a 10,000-schedule campaign). That
/// worker now tells the owner of a handoff still undone after a lease duration, as it tells
/// the receiver of a lease given and not taken. Both left the fleet unbalanced before the fix.
#[test]
fn sessions_finish_handoffs_asked_while_taking_or_by_a_forgetful_requester() {
    sessions_pass_every_invariant(&[15835665596219762336, 9620133799559348378]);
}

/// A process of a duplicated id, just thawed, took six leases from the session that had
/// replaced its own (its twin's), to be reported once that session acknowledged; then learnt
/// its own session was replaced. Its leases were given back to the id, while the twin still
/// worked on them in their earlier tenure, unaware, its checkpoints refused (seed
/// 7401803114033253414). A process now never takes from a live session of its own id, only
/// once that session is surely over (two more schedules fail without that alone: seeds
/// 1586783487738461474, 1657910160407653224); a refused checkpoint loses the lease; and a
/// lease given to this id while held here in an earlier tenure is dropped and taken anew
/// (tests/worker_sessions.rs has one test each for those two).
#[test]
fn sessions_never_take_from_a_live_session_of_the_same_id() {
    sessions_pass_every_invariant(&[
        7401803114033253414,
        1586783487738461474,
        1657910160407653224,
    ]);
}

/// A worker that opened its session, asked for its share and died before it announced itself
/// to its predecessor in id order was watched by nobody: the leases handed over to it waited,
/// given to a session nobody fenced, until the slow scan (seeds 1451380546759948304,
/// 7150231871795205450, 4120141641637541076, 4753090079943795961, 7286141608198690627 of a
/// 10,000-schedule campaign). The worker that hands a lease over now looks after it until its
/// receiver takes it, and fences a receiver whose record did not move for a lease duration.
#[test]
fn sessions_fence_the_silent_receiver_of_a_lease_handed_over() {
    sessions_pass_every_invariant(&[
        1451380546759948304,
        7150231871795205450,
        4120141641637541076,
        4753090079943795961,
        7286141608198690627,
    ]);
}

/// A lease whose application panicked was released, and the release failed: the lease was
/// "left to expire", but a lease of a live session never expires, so nobody processed it again
/// (seeds 8753718156896777423, 8429259437332199621). A placement round now takes it up again.
#[test]
fn sessions_take_up_a_lease_whose_release_failed() {
    sessions_pass_every_invariant(&[8753718156896777423, 8429259437332199621]);
}

/// A look at a lease whose read was sent before this worker's own take was applied saw the
/// lease at an older tenure: given to this worker, or someone else's. The worker dropped the
/// lease it had just taken, moving it twice in the join at 6 x 60 (seed 7, above) and leaving
/// leases unprocessed in seed 17265793311119012734. A read of an older tenure now tells nothing.
#[test]
fn sessions_ignore_a_read_older_than_their_own_take() {
    sessions_pass_every_invariant(&[17265793311119012734]);
}

/// A worker gave a lease a crashed owner released to a receiver whose process had restarted:
/// the notice to the session it knew was refused, and it gave the lease on down its list, the
/// last receiver told nothing; the lease waited for the chores (54 s; seed
/// 7211952114399090375). A notice refused because the id has a later session now goes to that
/// session.
#[test]
fn sessions_tell_the_current_session_of_a_restarted_receiver() {
    sessions_pass_every_invariant(&[7211952114399090375]);
}

/// A worker whose session had lapsed sent a take under its old incarnation; the answer came
/// back two seconds later, after a peer had fenced that session, taken the lease as its orphan
/// and started it, and after this worker had opened its next session, under which it then held
/// the lease too (seed 9914874745643150272, an overlap, with `--faults
/// transient,lost,never,cutoff,crash`). A take answered for an incarnation that is no longer
/// this process's session is not held.
#[test]
fn sessions_do_not_hold_a_lease_taken_for_an_ended_session() {
    sessions_pass_every_invariant_with(
        &[9914874745643150272],
        None,
        "transient,lost,never,cutoff,crash",
    );
}

/// A process whose open of its next session was answered by nothing (it had landed) could not
/// read its record until a peer fenced that session; it then opened again under the same
/// incarnation, at the same heartbeat, and the peer took the leases of the new session for
/// orphans of the fenced one (seed 2207009584190925347, an overlap). It now opens under a new
/// incarnation after an open that may have landed unseen. (Since the protocol check at start
/// changed the timing, this seed no longer reaches that state without the fix: it stays as a
/// regression schedule.)
#[test]
fn sessions_open_anew_after_an_open_that_may_have_landed() {
    sessions_pass_every_invariant(&[2207009584190925347, 14468043995339809134]);
}

/// A handoff not done in time was revoked: the owner told its application the lease was lost,
/// to hand it over once the application let go. A notice of the same handoff, told again by
/// the chores, was read right after; the lease was no longer held here, so it was handed over
/// at once, while the application still worked on it (seeds 5531981480057750266 and
/// 6009980809032531050, overlaps).
/// A revoked lease is now handed over only by the revocation.
#[test]
fn sessions_hand_a_revoked_lease_over_only_once_let_go() {
    sessions_pass_every_invariant(&[5531981480057750266, 6009980809032531050]);
}

/// A worker asked for handoffs and began to leave before it had told their owners (its taker
/// stopped between the request and the notice). Only the chores told one owner, 36 s later,
/// long after the fleet had settled: the lease moved then (seed 10985549997839306136,
/// "unsettled"). A worker leaving now tells the owners of the handoffs it asked and had not
/// told yet, so they are done, and given on, at once.
#[test]
fn sessions_a_leaving_worker_tells_the_owners_it_asked() {
    sessions_pass_every_invariant(&[10985549997839306136]);
}

/// A process (a twin, killed at the heal) gave a lease and died before it told the receiver;
/// only the chores' slow scan found the lease waiting, 60 s later (seed 2087271171323689699,
/// a lease unprocessed). The worker that fences (or replaces) a session now makes the worker
/// doing the chores look, and a lease given and not taken within two beats is told to its
/// receiver again. (The fix of the seed above changed this schedule's timing: it no longer
/// reaches that state without this one, and stays as a regression schedule.)
#[test]
fn sessions_tell_again_a_lease_given_by_a_process_that_died() {
    sessions_pass_every_invariant(&[2087271171323689699]);
}

/// A worker fenced the session it watched, whose worker restarted under a new session and
/// crashed again. The placement round named the same worker to watch: nothing changed in the
/// watcher's eyes, so it never watched the new session, and that session's leases waited for
/// the slow scan (seed 8919629482098015279, four leases unprocessed). A watcher done with a
/// session is now woken by the next round even when it names the same worker.
#[test]
fn sessions_watch_a_restarted_worker_again() {
    sessions_pass_every_invariant(&[8919629482098015279]);
}

/// A worker handed two leases over to a worker that crashed before it took them; its
/// follow-up fenced the silent receiver's session and gave those two on, but the session's
/// other leases (taken a moment before the crash) waited for the slow scan: a fence made
/// outside a placement round started none (seed 15923767766670048821, two leases
/// unprocessed). Every fence now starts a round.
#[test]
fn sessions_place_the_leases_of_a_session_fenced_by_a_follow_up() {
    sessions_pass_every_invariant(&[15923767766670048821]);
}

/// An owner asked for a handoff on a worker's behalf judged the requester gone from its last
/// taker round, long past (the requester was between two sessions then), released the lease
/// instead, and the requester waited for the slow scan (seed 12613134651826497585,
/// unbalanced). With sessions the handoff now goes on, and the receiver's record is read after
/// it: one without a session gets the lease given on.
#[test]
fn sessions_judge_a_requester_by_its_record_not_an_old_round() {
    sessions_pass_every_invariant(&[12613134651826497585]);
}

/// A worker took a lease given to it, from a notice, and the take went unanswered (it had
/// landed): the lease was this session's in the table and held nowhere, and only the take
/// tasks of placement rounds remember such takes; nothing looked at it until the slow scan
/// (seed 8279275819625688726, a lease unprocessed). A take from a notice left unanswered now
/// starts a round a beat later.
#[test]
fn sessions_look_again_after_an_unanswered_take_from_a_notice() {
    sessions_pass_every_invariant(&[8279275819625688726]);
}

/// A failing schedule's replay command must run what failed: every setting that differs from
/// the defaults (it never carried `--renew-interval` once).
#[test]
fn a_replay_command_names_every_setting_that_differs_from_the_defaults() {
    let plain = Options::default().replay(7, false);
    assert_eq!(
        plain,
        "cargo run --release -p shardlease-sim -- --schedule 7"
    );
    let options = Options {
        knobs: Knobs {
            renew_interval: Some(Duration::from_millis(2500)),
            ..Knobs::default()
        },
        ..Options::default()
    };
    let command = options.replay(7, false);
    assert!(command.contains(" --renew-interval 2.5"), "{command}");
}
