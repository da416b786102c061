//! A LogHub consumer process for the classic stateful case: the shards of a logstore spread
//! over the machines that run it, each shard's data gathered on one machine at a time, its
//! state kept in Redis, machines added and removed freely, and a hold after every move so
//! that the shard's state can be backed up before its new owner starts. The leases live in a
//! Redis lease table beside the state.
//!
//! ```sh
//! scripts/emulators.sh start    # the LogHub emulator on 4580, redis-server on 6390
//! export ALIBABA_CLOUD_ACCESS_KEY_ID=test ALIBABA_CLOUD_ACCESS_KEY_SECRET=test
//! cargo run --features loghub,redis --example loghub_consumer -- \
//!     --emulator http://127.0.0.1:4580 --project demo --logstore orders \
//!     --create-shards 4 --produce-per-sec 20 --redis redis://127.0.0.1:6390 --worker-id a
//! ```
//!
//! Against LogHub itself, give the region's endpoint instead of the emulator
//! (`--endpoint cn-hangzhou.log.aliyuncs.com`; `https://` is added when no scheme is given).
//! Credentials come from `ALIBABA_CLOUD_ACCESS_KEY_ID`, `ALIBABA_CLOUD_ACCESS_KEY_SECRET` and,
//! for STS, `ALIBABA_CLOUD_SECURITY_TOKEN`.
//!
//! What each shard's processor does: it counts the log groups and logs of its shard and keeps
//! the count, the last value seen and the cursor after them in a Redis hash
//! (`<table>:state:<shard>`), then checkpoints that cursor in the lease table. The state is
//! saved before the checkpoint, so after a crash between the two the next owner meets the
//! batch again and finds the state already past it (its cursor): it does not count it twice.
//! On a handoff (`stop_requested`) the state is saved and the shard checkpointed; its new
//! owner starts after `--hold-secs` (`WorkerConfig::quiet_period`), and loads the state from
//! Redis.
//!
//! Flags:
//!
//! - `--emulator URL` (the LogHub emulator, reached as the SDK's HTTP proxy: the SDK puts the
//!   project in the host name, which only resolves on LogHub itself) or `--endpoint HOST`.
//! - `--project`, `--logstore`; `--create-shards N` creates both if missing (N shards).
//! - `--redis URL`: the lease table's and the state's Redis. Default `redis://127.0.0.1:6390`.
//! - `--table NAME`: the lease table. Default `loghub-<project>-<logstore>`.
//! - `--worker-id ID`: default `<hostname>-<pid>`.
//! - `--lease-secs N` (default 10): the lease duration (failover time).
//! - `--hold-secs N` (default 5): the hold after every move before the new owner starts.
//! - `--consumer-group NAME`: mirror the checkpoints into this LogHub consumer group, for the
//!   console's lag view.
//! - `--produce-per-sec N`: also write N log groups a second (values `n` = 0, 1, 2, ...).
//!   With `--produce-only`, the process only writes (and logs `written` events).
//! - `--events-log PATH`: append one JSON line per event
//!   (`{"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}`): acquired, started (with its
//!   `parents`), processed (`values`, `next_cursor`), checkpointed (`cursor`), stop_requested
//!   (`reason`), stopped, ended, handed_off, released, lost, batch_failed, read_failed,
//!   written.
//!
//! Ctrl-C or SIGTERM leaves gracefully (every shard's state saved and checkpointed, leases
//! handed on); so does a drain (`shardlease --redis URL --table T drain ID`). The library's
//! log goes to stderr (`RUST_LOG`, default `info`); an error that stops the process (no
//! credentials, a project or logstore that does not exist, refused credentials, an
//! unreachable endpoint or Redis) is printed as one line.
//!
//! # What is tested, and what is not
//!
//! `scripts/loghub_e2e.py` runs three of these processes (and a producer) against the LogHub
//! emulator and redis-server: kill -9, a join, a SIGTERM, a split and a merge, audited from
//! the events logs (`scripts/test.sh` runs it). The emulator serves the calls as Alibaba
//! Cloud's API reference and the official SDK describe them; what only a real logstore shows
//! is untested here: its quotas and their error codes under load, its latencies, data expiring
//! by the logstore's retention (an expired cursor), and the console's view of the consumer
//! group.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aliyun_log_rust_sdk::{environment_credentials_provider, Client, Config, FromConfig};
use async_trait::async_trait;
use clap::builder::NonEmptyStringValueParser;
use clap::Parser;
use common::Error;
use redis::AsyncCommands;
use shardlease::loghub::{
    BatchFailure, BatchOutcome, ConsumerEvent, ConsumerGroup, CursorCheckpointer, Log, LogBatch,
    LogGroup, LogGroupProcessor, LogHubConfig, LogHubConsumer, ProcessError, ShardStart,
    StartPosition,
};
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::worker::{LeaseEvent, StopReason};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

/// The endpoint name given to the SDK when it reaches the emulator as its proxy: any name
/// would do, none is resolved.
const EMULATOR_ENDPOINT: &str = "loghub.emulator";

/// A LogHub consumer process whose shards keep their state in Redis. Credentials from
/// ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (and
/// ALIBABA_CLOUD_SECURITY_TOKEN for STS). Ctrl-C or SIGTERM leaves gracefully.
#[derive(Parser)]
#[command(name = "loghub_consumer", args_override_self = true)]
struct Args {
    /// The LogHub emulator (http://127.0.0.1:4580), reached as the SDK's HTTP proxy
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "endpoint",
        required_unless_present = "endpoint"
    )]
    emulator: Option<String>,
    /// The LogHub endpoint of the project's region (cn-hangzhou.log.aliyuncs.com); https://
    /// is added when no scheme is given
    #[arg(long, value_name = "HOST", value_parser = NonEmptyStringValueParser::new())]
    endpoint: Option<String>,
    /// The project
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    project: String,
    /// The logstore
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    logstore: String,
    /// Create the project and the logstore (with N shards) if they do not exist
    #[arg(long, value_name = "N")]
    create_shards: Option<i32>,
    /// The Redis server of the lease table and of the shards' state
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6390")]
    redis: String,
    /// The lease table [default: loghub-<project>-<logstore>]
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The worker's id [default: $HOSTNAME-<pid>]
    #[arg(long, value_name = "ID")]
    worker_id: Option<String>,
    /// The lease duration (failover time), in seconds
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    lease_secs: u64,
    /// The hold after every move before the new owner starts, in seconds
    #[arg(long, value_name = "N", default_value_t = 5)]
    hold_secs: u64,
    /// Mirror the checkpoints into this LogHub consumer group (created if missing)
    #[arg(long, value_name = "NAME")]
    consumer_group: Option<String>,
    /// Also write N log groups a second
    #[arg(long, value_name = "N", default_value_t = 0)]
    produce_per_sec: u64,
    /// Only write (--produce-per-sec), consume nothing
    #[arg(long, requires = "produce_per_sec")]
    produce_only: bool,
    /// Append one JSON line per event
    #[arg(long, value_name = "PATH")]
    events_log: Option<String>,
}

/// Appends JSON lines to the events log.
#[derive(Clone)]
struct EventLog {
    worker: String,
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl EventLog {
    fn write(&self, lease: &str, event: &str, extra: serde_json::Value) {
        let Some(file) = &self.file else { return };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut line = serde_json::json!({
            "ts_unix_nanos": u64::try_from(nanos).unwrap_or(u64::MAX),
            "worker": self.worker,
            "lease": lease,
            "event": event,
        });
        if let (Some(line), serde_json::Value::Object(extra)) = (line.as_object_mut(), extra) {
            line.extend(extra);
        }
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = writeln!(file, "{line}") {
            tracing::warn!(error = %err, "cannot write the events log");
        }
    }

    fn record(&self, event: ConsumerEvent) {
        let none = serde_json::Value::Null;
        match event {
            ConsumerEvent::Acquired { key, checkpoint } => {
                self.write(
                    key.as_str(),
                    "acquired",
                    serde_json::json!({ "checkpoint": checkpoint }),
                );
            }
            ConsumerEvent::StopRequested { key, reason } => {
                let why = reason_name(&reason);
                self.write(
                    key.as_str(),
                    "stop_requested",
                    serde_json::json!({ "reason": why }),
                );
            }
            ConsumerEvent::Stopped { key } => self.write(key.as_str(), "stopped", none),
            ConsumerEvent::Checkpointed { key, cursor } => {
                self.write(
                    key.as_str(),
                    "checkpointed",
                    serde_json::json!({ "cursor": cursor }),
                );
            }
            ConsumerEvent::BatchFailed {
                key,
                attempt,
                error,
                then,
            } => {
                let then = format!("{then:?}").to_lowercase();
                let extra = serde_json::json!({ "attempt": attempt, "error": error, "then": then });
                self.write(key.as_str(), "batch_failed", extra);
            }
            ConsumerEvent::ReadFailed { key, error } => {
                eprintln!("[{}] shard {key}: {error}", self.worker);
                self.write(
                    key.as_str(),
                    "read_failed",
                    serde_json::json!({ "error": error }),
                );
            }
            ConsumerEvent::Lease(LeaseEvent::HandedOff { key, to }) => {
                self.write(
                    key.as_str(),
                    "handed_off",
                    serde_json::json!({ "to": to.as_str() }),
                );
            }
            ConsumerEvent::Lease(LeaseEvent::Released { key }) => {
                self.write(key.as_str(), "released", none);
            }
            ConsumerEvent::Lease(LeaseEvent::Lost { key }) => {
                self.write(key.as_str(), "lost", none)
            }
            ConsumerEvent::Lease(LeaseEvent::ShardEnded { key }) => {
                self.write(key.as_str(), "ended", none);
            }
            other => tracing::debug!(?other, "event"),
        }
    }
}

fn reason_name(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::Lost => "lost",
        StopReason::Handoff { .. } => "handoff",
        StopReason::Shutdown { .. } => "shutdown",
        StopReason::Retired { .. } => "retired",
        _ => "other",
    }
}

/// A shard's state, as it is kept in Redis.
#[derive(Debug, Default, Clone, PartialEq)]
struct State {
    log_groups: u64,
    logs: u64,
    /// The last value `n` seen.
    last: Option<String>,
    /// The cursor after the last batch counted.
    cursor: Option<String>,
}

/// Counts its shard into its state in Redis, saved before each checkpoint.
struct Counter {
    worker: String,
    shard: LeaseKey,
    redis: redis::aio::ConnectionManager,
    /// `<table>:state:<shard>`.
    state_key: String,
    state: State,
    log: EventLog,
}

impl Counter {
    async fn load(&mut self) -> Result<(), redis::RedisError> {
        let fields: std::collections::HashMap<String, String> =
            self.redis.hgetall(&self.state_key).await?;
        let number = |name: &str| fields.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        self.state = State {
            log_groups: number("log_groups"),
            logs: number("logs"),
            last: fields.get("last").cloned(),
            cursor: fields.get("cursor").cloned(),
        };
        Ok(())
    }

    async fn save(&mut self) -> Result<(), redis::RedisError> {
        let mut fields = vec![
            ("log_groups", self.state.log_groups.to_string()),
            ("logs", self.state.logs.to_string()),
        ];
        if let Some(last) = &self.state.last {
            fields.push(("last", last.clone()));
        }
        if let Some(cursor) = &self.state.cursor {
            fields.push(("cursor", cursor.clone()));
        }
        self.redis
            .hset_multiple::<_, _, _, ()>(&self.state_key, &fields)
            .await
    }
}

fn values(groups: &[LogGroup]) -> Vec<String> {
    groups
        .iter()
        .flat_map(|g| g.logs())
        .flat_map(|l| l.contents())
        .filter(|c| c.key() == "n")
        .map(|c| c.value().clone())
        .collect()
}

#[async_trait]
impl LogGroupProcessor for Counter {
    async fn initialize(&mut self, start: &ShardStart) {
        if let Err(err) = self.load().await {
            // The first `process` fails on the same Redis and is delivered again.
            eprintln!(
                "[{}] shard {}: cannot load its state: {err}",
                self.worker, self.shard
            );
        }
        let from = match &start.position {
            StartPosition::Cursor(_) => "its checkpoint",
            StartPosition::Begin => "the beginning",
            StartPosition::End => "the end",
            _ => "a moment",
        };
        println!(
            "[{}] shard {}: starts at {from}, {} log groups counted so far",
            self.worker, self.shard, self.state.log_groups
        );
        let parents: Vec<&str> = start.parents.iter().map(LeaseKey::as_str).collect();
        self.log.write(
            self.shard.as_str(),
            "started",
            serde_json::json!({ "parents": parents }),
        );
    }

    async fn process(
        &mut self,
        batch: &LogBatch,
        checkpointer: &CursorCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        let seen = values(&batch.log_groups);
        self.log.write(
            self.shard.as_str(),
            "processed",
            serde_json::json!({ "values": seen, "next_cursor": batch.next_cursor }),
        );
        // The state is past this batch when a crash came between saving it and checkpointing.
        if self.state.cursor.as_deref() != Some(batch.next_cursor.as_str()) {
            self.state.log_groups += batch.log_groups.len() as u64;
            self.state.logs += batch
                .log_groups
                .iter()
                .map(|g| g.logs().len() as u64)
                .sum::<u64>();
            self.state.last = seen.last().cloned().or(self.state.last.take());
            self.state.cursor = Some(batch.next_cursor.clone());
            self.save().await?;
        }
        checkpointer.checkpoint(batch).await?;
        Ok(BatchOutcome::Continue)
    }

    async fn dead_letter(
        &mut self,
        batch: &LogBatch,
        failure: &BatchFailure,
        checkpointer: &CursorCheckpointer,
    ) {
        eprintln!(
            "[{}] shard {}: batch at {} skipped {failure}",
            self.worker, self.shard, batch.cursor
        );
        if let Err(err) = checkpointer.checkpoint(batch).await {
            eprintln!(
                "[{}] shard {}: checkpoint refused: {err}",
                self.worker, self.shard
            );
        }
    }

    async fn lease_lost(&mut self) {
        println!("[{}] shard {} lost", self.worker, self.shard);
    }

    async fn stop_requested(&mut self, reason: &StopReason, _: &CursorCheckpointer) {
        // Every batch's state was saved and checkpointed as it was processed: the state in
        // Redis is the shard's, for its next owner to load after the hold.
        println!(
            "[{}] shard {} stops ({}): {} log groups, {} logs counted",
            self.worker,
            self.shard,
            reason_name(reason),
            self.state.log_groups,
            self.state.logs
        );
    }
}

fn endpoint_url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("https://{endpoint}")
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(emulator) = &args.emulator {
        // Before any thread or HTTP client exists: the SDK's client reads its proxy from the
        // environment when it is built, and the emulator is that proxy.
        std::env::set_var("http_proxy", emulator);
        std::env::set_var("no_proxy", "127.0.0.1,localhost");
    }
    common::init_tracing("info");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return common::exit(Err(err.into())),
    };
    common::exit(runtime.block_on(run(args)))
}

async fn create_if_missing(
    client: &Client,
    project: &str,
    logstore: &str,
    shards: i32,
) -> Result<(), Error> {
    use aliyun_log_rust_sdk::Error as E;
    match client
        .create_project(project)
        .description("created by loghub_consumer")
        .send()
        .await
    {
        Ok(_) => println!("created project {project}"),
        Err(E::Server { error_code, .. }) if error_code == "ProjectAlreadyExist" => {}
        Err(err) => return Err(format!("CreateProject {project}: {}", common::chain(&err)).into()),
    }
    match client
        .create_logstore(project, logstore)
        .shard_count(shards)
        .ttl(1)
        .send()
        .await
    {
        Ok(_) => println!("created logstore {logstore} with {shards} shards"),
        Err(E::Server { error_code, .. }) if error_code == "LogStoreAlreadyExist" => {}
        Err(err) => {
            return Err(format!("CreateLogStore {logstore}: {}", common::chain(&err)).into())
        }
    }
    Ok(())
}

async fn produce(
    client: Arc<Client>,
    project: String,
    logstore: String,
    per_sec: u64,
    log: EventLog,
) {
    let gap = Duration::from_secs(1) / u32::try_from(per_sec.max(1)).unwrap_or(u32::MAX);
    let mut next = tokio::time::Instant::now();
    let prefix = std::process::id();
    for n in 0_u64.. {
        let value = format!("{prefix}-{n}");
        let mut entry = Log::from_unixtime(
            u32::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs(),
            )
            .unwrap_or(0),
        );
        entry.add_content_kv("n", &value);
        let mut group = LogGroup::new();
        group.set_topic("loghub_consumer").add_log(entry);
        loop {
            match client
                .put_logs(&project, &logstore)
                .log_group(group.clone())
                .send()
                .await
            {
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(error = %common::chain(&err), "PutLogs failed; trying again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        log.write("", "written", serde_json::json!({ "value": value }));
        next += gap;
        tokio::time::sleep_until(next).await;
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let worker = args.worker_id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    });
    let endpoint = match (&args.emulator, &args.endpoint) {
        (Some(_), _) => format!("http://{EMULATOR_ENDPOINT}"),
        (None, Some(endpoint)) => endpoint_url(endpoint),
        (None, None) => return Err("give --endpoint (LogHub) or --emulator (the emulator)".into()),
    };
    // A client per use (creating, writing, consuming), each with the credentials of the
    // environment.
    let config = || -> Result<Config, Error> {
        let credentials = environment_credentials_provider().map_err(|err| {
            format!(
                "no LogHub credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and \
                 ALIBABA_CLOUD_ACCESS_KEY_SECRET ({err})"
            )
        })?;
        Config::builder()
            .endpoint(&endpoint)
            .credentials_provider(credentials)
            .build()
            .map_err(|err| format!("--endpoint {endpoint:?}: {}", common::chain(&err)).into())
    };
    let file = match &args.events_log {
        Some(path) => Some(Arc::new(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))),
        None => None,
    };
    let log = EventLog {
        worker: worker.clone(),
        file,
    };
    if let Some(shards) = args.create_shards {
        create_if_missing(
            &Client::from_config(config()?)?,
            &args.project,
            &args.logstore,
            shards,
        )
        .await?;
    }
    if args.produce_per_sec > 0 {
        let client = Arc::new(Client::from_config(config()?)?);
        let producing = produce(
            client,
            args.project.clone(),
            args.logstore.clone(),
            args.produce_per_sec,
            log.clone(),
        );
        if args.produce_only {
            println!(
                "[{worker}] writing {} log groups a second to {}/{}; Ctrl-C or SIGTERM to stop",
                args.produce_per_sec, args.project, args.logstore
            );
            tokio::select! {
                () = producing => {}
                signal = common::shutdown_signal() => println!("[{worker}] {}: stopping", signal?),
            }
            return Ok(());
        }
        tokio::spawn(producing);
    }
    let table = args
        .table
        .clone()
        .unwrap_or_else(|| format!("loghub-{}-{}", args.project, args.logstore));
    let store = RedisStore::connect(RedisConfig::new(args.redis.as_str(), table.clone())).await?;
    let redis = redis::Client::open(args.redis.as_str())
        .map_err(|err| format!("--redis {}: {err}", args.redis))?
        .get_connection_manager()
        .await
        .map_err(|err| format!("cannot reach Redis at {}: {err}", args.redis))?;
    let mut loghub = LogHubConfig::default();
    if let Some(group) = &args.consumer_group {
        loghub = loghub.consumer_group(ConsumerGroup::new(group.as_str()));
    }
    let workers = WorkerConfig::default()
        .lease_duration(Duration::from_secs(args.lease_secs))
        .quiet_period(Duration::from_secs(args.hold_secs));
    let (name, events) = (worker.clone(), log.clone());
    let consumer = LogHubConsumer::builder(
        Client::from_config(config()?)?,
        args.project.clone(),
        args.logstore.clone(),
        Arc::new(store),
        WorkerId::new(worker.clone())?,
    )
    .worker_config(workers)
    .config(loghub)
    .on_event(move |event| events.record(event))
    .processor(move |shard: &LeaseKey| Counter {
        worker: name.clone(),
        shard: shard.clone(),
        redis: redis.clone(),
        state_key: format!("{table}:state:{shard}"),
        state: State::default(),
        log: log.clone(),
    })
    .start()
    .await?;
    println!(
        "[{worker}] consuming {}/{} (hold after a move: {} s); Ctrl-C or SIGTERM to leave gracefully",
        args.project, args.logstore, args.hold_secs
    );
    // Ctrl-C or SIGTERM, or an operator's `shardlease drain`, after which the consumer has
    // left by itself.
    let signal = tokio::select! {
        signal = common::shutdown_signal() => Some(signal?),
        _ = consumer.stopped() => None,
    };
    match signal {
        Some(signal) => {
            println!("[{worker}] {signal}: leaving");
            consumer.shutdown().await;
        }
        None => println!("[{worker}] drained: the consumer left the fleet"),
    }
    Ok(())
}
