//! What a run measured, as a side-by-side table or as JSON.

use std::fmt::Write;

use serde_json::{json, Value};

use super::net::Usage;
use super::{Duplicates, Settings};

/// A distribution of durations, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Dist {
    /// How many were measured; `missing` never happened within the run.
    pub n: usize,
    pub missing: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    pub fn of(values: &[Option<f64>]) -> Dist {
        let mut seen: Vec<f64> = values.iter().flatten().copied().collect();
        seen.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if seen.is_empty() {
                return f64::NAN;
            }
            let rank = ((q * seen.len() as f64).ceil() as usize).clamp(1, seen.len());
            seen[rank - 1]
        };
        Dist {
            n: seen.len(),
            missing: values.len() - seen.len(),
            min: at(0.0),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: at(1.0),
        }
    }

    fn cell(&self) -> String {
        if self.n == 0 {
            return "-".into();
        }
        let missing = if self.missing > 0 {
            format!(" ({} never)", self.missing)
        } else {
            String::new()
        };
        format!(
            "{:.1} / {:.1} / {:.1}{missing}",
            self.min, self.p50, self.max
        )
    }

    fn json(&self) -> Value {
        json!({
            "n": self.n,
            "missing": self.missing,
            "min": num(self.min),
            "p50": num(self.p50),
            "p90": num(self.p90),
            "p99": num(self.p99),
            "max": num(self.max),
        })
    }
}

/// Crash to orphans held again (a take in the table) and processed again (the new owner's
/// application started).
#[derive(Debug, Clone, PartialEq)]
pub struct Failover {
    pub held: Dist,
    pub processing: Dist,
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    pub label: String,
    /// Seconds from the step to balanced; `None`: not within the step limit.
    pub balanced: Option<f64>,
    /// Taker rounds (scans) of the busiest worker until then.
    pub rounds: u64,
    /// Leases that started being processed by a new holder.
    pub moves: u64,
    /// The fewest moves any assignment needed.
    pub minimum: u64,
    /// Lease-seconds without a processor until balanced (the sum over leases of the time
    /// nobody processed them).
    pub idle: f64,
    pub failover: Option<Failover>,
}

impl StepReport {
    pub fn skipped(label: String) -> Self {
        Self {
            label,
            balanced: Some(0.0),
            rounds: 0,
            moves: 0,
            minimum: 0,
            idle: 0.0,
            failover: None,
        }
    }
}

/// The rest after the last step.
#[derive(Debug, Clone, PartialEq)]
pub struct Rest {
    pub seconds: f64,
    pub moves: u64,
    pub usage: Usage,
    pub lease_hours: f64,
}

/// The leases' loads against the workers' capacities (see [`super::load`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// The load model, as `--load` names it.
    pub model: String,
    /// The capacity weights cycled over the workers (empty: all 1).
    pub capacities: Vec<f64>,
    pub headroom: f64,
    /// The load imbalance averaged over the rest (each state weighted by how long it lasted).
    pub at_rest: Option<f64>,
    /// The highest load imbalance of a state during the rest (the fleet is balanced when it
    /// begins, so this is the worst instant after convergence).
    pub worst: Option<f64>,
    /// Summed over workers, the seconds each held more than its capacity in load units,
    /// from the first step to the end of the rest.
    pub overloaded_worker_seconds: f64,
    /// The same during the rest only (comparable between policies whose steps last
    /// differently).
    pub overloaded_worker_seconds_at_rest: f64,
    /// As `at_rest`, every worker counted (a worker alone with a lease heavier than its
    /// share too; see `load::imbalance`).
    pub raw_at_rest: Option<f64>,
    /// With `--hot-after`: seconds from the lease turning hot to the first moment no worker
    /// held more than its capacity (a worker alone with one lease aside) and, if the lease
    /// is heavier than a share, it was alone.
    pub hot_shard_isolated: Option<f64>,
    /// With `--hot-after`: seconds from the lease turning hot to the first membership record
    /// publishing a figure for it more than 10 % above its figure before.
    pub hot_shard_published: Option<f64>,
    /// With `--hot-after`: seconds from the lease turning hot to the first membership record
    /// publishing a figure for it within 10 % of its new load.
    pub hot_shard_fully_published: Option<f64>,
    /// With `--load-trace`: (seconds since the first step, worker, held load over its fair
    /// share), every second.
    pub trace: Vec<(f64, usize, f64)>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub policy: String,
    pub workers: usize,
    pub leases: usize,
    pub seed: u64,
    /// The policy's lease duration, in seconds.
    pub lease_duration: f64,
    /// The latency model's name (`lognormal`, `heavy-tail`).
    pub latency_model: &'static str,
    pub setup: Option<f64>,
    pub steps: Vec<StepReport>,
    pub rest: Rest,
    pub spread: usize,
    /// Overlaps under a policy that promises none: violations.
    pub double_holding: u64,
    /// Every overlap, violation or not (KCL's steals make them by design).
    pub duplicates: Duplicates,
    /// Leases lost (the application told `Lost`: taken, or the session fenced or expired)
    /// over the whole run by workers no fault was aimed at (not crashed, paused or cut off);
    /// `None` when request faults (`--throttle`, `--transient`, `--ambiguous`) hit every
    /// worker. Latency, of either model, is not a fault.
    pub healthy_leases_lost: Option<u64>,
    pub load: LoadReport,
    pub simulated: f64,
    pub wall: f64,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: &Settings,
        setup: Option<f64>,
        steps: Vec<StepReport>,
        rest: Rest,
        spread: usize,
        double_holding: u64,
        duplicates: Duplicates,
        healthy_leases_lost: Option<u64>,
        load: LoadReport,
        simulated: f64,
        wall: f64,
    ) -> Self {
        Self {
            scenario: settings.scenario.name.to_owned(),
            policy: settings.policy.name().to_owned(),
            workers: settings.workers,
            leases: settings.leases,
            seed: settings.seed,
            lease_duration: settings
                .config()
                .map_or(settings.kcl.lease_duration, |c| c.lease_duration)
                .as_secs_f64(),
            latency_model: settings.latency_model.name(),
            setup,
            steps,
            rest,
            spread,
            double_holding,
            duplicates,
            healthy_leases_lost,
            load,
            simulated,
            wall,
        }
    }

    /// Seconds until every step was balanced again (the sum over steps); `None` if one never was.
    pub fn balanced(&self) -> Option<f64> {
        self.steps.iter().map(|s| s.balanced).sum()
    }

    pub fn rounds(&self) -> u64 {
        self.steps.iter().map(|s| s.rounds).sum()
    }

    pub fn moves(&self) -> u64 {
        self.steps.iter().map(|s| s.moves).sum()
    }

    pub fn minimum(&self) -> u64 {
        self.steps.iter().map(|s| s.minimum).sum()
    }

    pub fn idle(&self) -> f64 {
        self.steps.iter().map(|s| s.idle).sum()
    }

    /// Moves over the minimum (1.00 is perfect; no move where none was needed is 1.00 too,
    /// and any move where none was needed is infinite).
    pub fn move_ratio(&self) -> f64 {
        match (self.moves(), self.minimum()) {
            (0, 0) => 1.0,
            (_, 0) => f64::INFINITY,
            (moves, minimum) => moves as f64 / minimum as f64,
        }
    }

    pub fn failover(&self) -> Option<&Failover> {
        self.steps.iter().find_map(|s| s.failover.as_ref())
    }

    /// Lease moves per hour of rest.
    pub fn moves_per_hour_at_rest(&self) -> f64 {
        if self.rest.seconds <= 0.0 {
            return f64::NAN;
        }
        self.rest.moves as f64 / (self.rest.seconds / 3600.0)
    }

    fn per_lease_hour(&self, count: impl Into<f64>) -> f64 {
        if self.rest.lease_hours <= 0.0 {
            return f64::NAN;
        }
        count.into() / self.rest.lease_hours
    }

    /// The rows of the table: a name and this run's value.
    fn rows(&self) -> Vec<(String, String)> {
        let secs = |v: Option<f64>| v.map_or("never".into(), |v| format!("{v:.2}"));
        let mut rows = vec![
            (
                "lease duration (s)".into(),
                format!("{}", self.lease_duration),
            ),
            ("time to balanced (s)".into(), secs(self.balanced())),
            ("taker rounds to balanced".into(), self.rounds().to_string()),
            ("lease moves".into(), self.moves().to_string()),
            ("minimum moves".into(), self.minimum().to_string()),
            (
                "moves / minimum".into(),
                format!("{:.2}", self.move_ratio()),
            ),
            (
                "lease-seconds without a processor".into(),
                format!("{:.0}", self.idle()),
            ),
        ];
        if self.steps.len() > 1 {
            for step in &self.steps {
                rows.push((
                    format!("  {}: balanced s / moves / min", step.label),
                    format!(
                        "{} / {} / {}",
                        secs(step.balanced),
                        step.moves,
                        step.minimum
                    ),
                ));
            }
        }
        if let Some(failover) = self.failover() {
            rows.push((
                "failover to held, min/p50/max (s)".into(),
                failover.held.cell(),
            ));
            rows.push((
                "failover to processing (s)".into(),
                failover.processing.cell(),
            ));
        }
        let usage = &self.rest.usage;
        rows.extend([
            (
                format!("moves at rest ({:.0} s)", self.rest.seconds),
                self.rest.moves.to_string(),
            ),
            (
                "moves per hour at rest".into(),
                format!("{:.1}", self.moves_per_hour_at_rest()),
            ),
            (
                "max - min leases per worker".into(),
                self.spread.to_string(),
            ),
            (
                "load imbalance at rest (mean)".into(),
                ratio(self.load.at_rest),
            ),
            (
                "load imbalance at rest (worst)".into(),
                ratio(self.load.worst),
            ),
            (
                "  every worker counted (mean)".into(),
                ratio(self.load.raw_at_rest),
            ),
            (
                "hot shard settled after (s)".into(),
                self.load
                    .hot_shard_isolated
                    .map_or("-".into(), |s| format!("{s:.1}")),
            ),
            (
                "  its figure published after (s)".into(),
                self.load
                    .hot_shard_published
                    .map_or("-".into(), |s| format!("{s:.1}")),
            ),
            (
                "  its whole figure published after (s)".into(),
                self.load
                    .hot_shard_fully_published
                    .map_or("-".into(), |s| format!("{s:.1}")),
            ),
            (
                format!(
                    "overloaded worker-s (>{:.0} % share)",
                    self.load.headroom * 100.0
                ),
                format!("{:.0}", self.load.overloaded_worker_seconds),
            ),
            (
                "  of which at rest".into(),
                format!("{:.0}", self.load.overloaded_worker_seconds_at_rest),
            ),
            (
                "instants two workers held one lease".into(),
                self.double_holding.to_string(),
            ),
            (
                "duplicates: windows / lease-s / longest s".into(),
                format!(
                    "{} / {:.1} / {:.2}",
                    self.duplicates.windows, self.duplicates.lease_seconds, self.duplicates.longest
                ),
            ),
            (
                "leases lost by healthy workers".into(),
                self.healthy_leases_lost
                    .map_or("-".into(), |n| n.to_string()),
            ),
            (
                "reads per lease-hour at rest".into(),
                format!("{:.1}", self.per_lease_hour(usage.reads as f64)),
            ),
            (
                "writes per lease-hour at rest".into(),
                format!("{:.1}", self.per_lease_hour(usage.writes as f64)),
            ),
            (
                "RCU per lease-hour at rest".into(),
                format!("{:.1}", self.per_lease_hour(usage.rcu)),
            ),
            (
                "WCU per lease-hour at rest".into(),
                format!("{:.1}", self.per_lease_hour(usage.wcu as f64)),
            ),
            ("simulated (s)".into(), format!("{:.0}", self.simulated)),
            ("wall time (s)".into(), format!("{:.1}", self.wall)),
        ]);
        rows
    }

    /// This run as one JSON object.
    pub fn json(&self) -> String {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                let failover = step.failover.as_ref().map(|f| {
                    json!({
                        "held": f.held.json(),
                        "processing": f.processing.json(),
                    })
                });
                json!({
                    "step": step.label,
                    "balanced_s": opt(step.balanced),
                    "rounds": step.rounds,
                    "moves": step.moves,
                    "minimum_moves": step.minimum,
                    "idle_lease_s": num(step.idle),
                    "failover": failover,
                })
            })
            .collect();
        let u = &self.rest.usage;
        json!({
            "scenario": self.scenario,
            "policy": self.policy,
            "workers": self.workers,
            "leases": self.leases,
            "seed": self.seed,
            "lease_duration_s": num(self.lease_duration),
            "latency_model": self.latency_model,
            "setup_s": opt(self.setup),
            "balanced_s": opt(self.balanced()),
            "rounds": self.rounds(),
            "moves": self.moves(),
            "minimum_moves": self.minimum(),
            "move_ratio": num(self.move_ratio()),
            "idle_lease_s": num(self.idle()),
            "steps": steps,
            "rest_s": num(self.rest.seconds),
            "moves_at_rest": self.rest.moves,
            "moves_per_hour_at_rest": num(self.moves_per_hour_at_rest()),
            "load": self.load.model,
            "capacities": self.load.capacities,
            "headroom": num(self.load.headroom),
            "load_imbalance": {
                "at_rest": opt(self.load.at_rest),
                "worst": opt(self.load.worst),
            },
            "load_imbalance_raw_at_rest": opt(self.load.raw_at_rest),
            "hot_shard_isolated_s": opt(self.load.hot_shard_isolated),
            "hot_shard_published_s": opt(self.load.hot_shard_published),
            "hot_shard_fully_published_s": opt(self.load.hot_shard_fully_published),
            "overloaded_worker_seconds": num(self.load.overloaded_worker_seconds),
            "overloaded_worker_seconds_at_rest": num(self.load.overloaded_worker_seconds_at_rest),
            "spread": self.spread,
            "double_holding": self.double_holding,
            "duplicates": {
                "windows": self.duplicates.windows,
                "lease_s": num(self.duplicates.lease_seconds),
                "longest_s": num(self.duplicates.longest),
            },
            "healthy_leases_lost": self.healthy_leases_lost,
            "per_lease_hour": {
                "reads": num(self.per_lease_hour(u.reads as f64)),
                "writes": num(self.per_lease_hour(u.writes as f64)),
                "rcu": num(self.per_lease_hour(u.rcu)),
                "wcu": num(self.per_lease_hour(u.wcu as f64)),
            },
            "throttled": u.throttled,
            "failed": u.failed,
            "stalled": u.stalled,
            "simulated_s": num(self.simulated),
            "wall_s": num(self.wall),
        })
        .to_string()
    }
}

/// A number rounded to 3 decimals (as the report always printed them), or `null` if it is
/// not finite.
fn num(value: f64) -> Value {
    if !value.is_finite() {
        return Value::Null;
    }
    let rounded: f64 = format!("{value:.3}").parse().unwrap_or(value);
    json!(rounded)
}

/// A ratio with 3 decimals, or `-` when there is none.
fn ratio(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.3}"))
}

fn opt(value: Option<f64>) -> Value {
    value.map_or(Value::Null, num)
}

/// Runs side by side, one column each, with the ratio of the second to the first where both
/// are numbers.
pub fn table(reports: &[Report]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let columns: Vec<Vec<(String, String)>> = reports.iter().map(Report::rows).collect();
    let mut out = format!(
        "scenario {} | {} workers | {} leases | seed {} | latency {}\n",
        first.scenario, first.workers, first.leases, first.seed, first.latency_model
    );
    let width = columns[0].iter().map(|(n, _)| n.len()).max().unwrap_or(10);
    let _ = write!(out, "{:width$}", "");
    for report in reports {
        let _ = write!(out, " | {:>22}", report.policy);
    }
    if reports.len() == 2 {
        let _ = write!(out, " | {:>7}", "ratio");
    }
    out.push('\n');
    for (row, (name, value)) in columns[0].iter().enumerate() {
        let _ = write!(out, "{name:width$} | {value:>22}");
        for column in &columns[1..] {
            let other = column.get(row).map_or("", |(_, v)| v.as_str());
            let _ = write!(out, " | {other:>22}");
        }
        if let [_, second] = &columns[..] {
            let ratio = match (
                value.parse::<f64>(),
                second.get(row).map(|(_, v)| v.parse::<f64>()),
            ) {
                (Ok(a), Some(Ok(b))) if a > 0.0 => format!("{:.2}x", b / a),
                _ => String::new(),
            };
            let _ = write!(out, " | {ratio:>7}");
        }
        out.push('\n');
    }
    out
}
