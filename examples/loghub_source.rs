//! A `ShardSource` for an Aliyun LogHub (Simple Log Service) logstore, over the official
//! `aliyun-log-rust-sdk` crate (feature `loghub`), and a worker whose leases follow the
//! logstore's shards: each lease reads its shard with `PullLogs` from its checkpoint (a
//! cursor), prints how many log groups it read, and checkpoints the next cursor.
//!
//! ```sh
//! export ALIBABA_CLOUD_ACCESS_KEY_ID=... ALIBABA_CLOUD_ACCESS_KEY_SECRET=...
//! cargo run --features loghub --example loghub_source -- \
//!     --endpoint cn-hangzhou.log.aliyuncs.com --project my-project --logstore my-logstore
//! ```
//!
//! The source lists the shards with `ListShards` (one call, no paging). A `readonly` shard is
//! closed: it was split or merged and gets no more data, so its lease reads it to the end and
//! checkpoints `SHARD_END`; then its children start. `ListShards` names no parents: they are
//! derived from the shards' hash-key ranges, by the rule (and with the limits) written in
//! `examples/common/loghub_ranges.rs`. A lease that reaches the end of its shard's data asks
//! whether the shard is `readonly` (from a listing at most 10 s old, taken before its last
//! read) and ends the shard only then, so no record written before the shard closed is
//! skipped.
//!
//! Flags: `--endpoint HOST` (the region's endpoint; `https://` is added when no scheme is
//! given, where the SDK would use plain HTTP), `--project`, `--logstore`, `--worker-id ID`
//! (default `<hostname>-<pid>`), `--lease-secs N` (default 10). The leases live in memory
//! (one process) unless `--table NAME` names a DynamoDB lease table (created if missing;
//! region and credentials from the standard AWS environment, `--dynamodb-endpoint URL` for an
//! emulator), or `--redis URL` puts the table on a Redis server (what LogHub fleets on
//! Alibaba Cloud usually have; the table's name is `--table`, by default
//! `loghub-<project>-<logstore>`); several processes can share either. Credentials come from
//! `ALIBABA_CLOUD_ACCESS_KEY_ID`, `ALIBABA_CLOUD_ACCESS_KEY_SECRET` and, for STS,
//! `ALIBABA_CLOUD_SECURITY_TOKEN` (the SDK's environment provider).
//!
//! Ctrl-C or SIGTERM leaves gracefully (every lease checkpoints and is released); so does a
//! drain (`shardlease [--redis URL] --table T drain ID`). The library's log goes to stderr
//! (`RUST_LOG`, default `info`); an error that stops the process (no credentials, a project
//! or logstore that does not exist, refused credentials, an unreachable endpoint) is printed
//! as one line.
//!
//! # What is tested, and what is not
//!
//! There is no LogHub emulator, so nothing here runs against LogHub in CI. Tested: the
//! derivation of `closed` and of parents from a listing (the unit tests of
//! `examples/common/loghub_ranges.rs`: split, split into three, merge, split-then-merge,
//! merge-then-split, nested splits, parents expired from the listing, same-second creation,
//! unreadable listings), run by `cargo test --all-features --example loghub_source`; and that
//! this example compiles against the SDK (`cargo build --all-features --examples` in CI). Not
//! tested: the calls to a real logstore (`ListShards`, `GetCursor`, `PullLogs`), the mapping
//! of LogHub's error codes, and whether LogHub behaves as the derivation assumes (see the
//! limits there).

mod common;
#[path = "common/loghub_ranges.rs"]
mod loghub_ranges;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use aliyun_log_rust_sdk::{environment_credentials_provider, Client, Config, FromConfig};
use async_trait::async_trait;
use clap::builder::NonEmptyStringValueParser;
use clap::Parser;
use common::Error;
use loghub_ranges::ListedShard;
use shardlease::source::{Shard, ShardSource, SourceError};
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::LeaseStore;
use shardlease::worker::{Checkpointer, LeaseEvent, LeaseGrant, StopReason, Worker};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::time::Instant;

/// A listing younger than this answers "is this shard readonly?" without a new call.
const STATUS_MAX_AGE: Duration = Duration::from_secs(10);
/// The wait before reading again a shard whose data was all read.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Log groups asked for in one `PullLogs`.
const PULL_COUNT: i32 = 100;

/// A worker whose leases follow the shards of an Aliyun LogHub logstore. Credentials from
/// ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (and
/// ALIBABA_CLOUD_SECURITY_TOKEN for STS). Ctrl-C or SIGTERM leaves gracefully.
#[derive(Parser)]
#[command(name = "loghub_source", args_override_self = true)]
struct Args {
    /// The LogHub endpoint of the project's region (cn-hangzhou.log.aliyuncs.com); https://
    /// is added when no scheme is given
    #[arg(long, value_name = "HOST", value_parser = NonEmptyStringValueParser::new())]
    endpoint: String,
    /// The project
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    project: String,
    /// The logstore
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    logstore: String,
    /// The worker's id [default: $HOSTNAME-<pid>]
    #[arg(long, value_name = "ID")]
    worker_id: Option<String>,
    /// A DynamoDB lease table, created if missing [default: leases in memory, one process]
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The DynamoDB endpoint (an emulator), with --table
    #[arg(long, value_name = "URL", requires = "table")]
    dynamodb_endpoint: Option<String>,
    /// Keep the lease table on this Redis server instead (redis://[USER:PASSWORD@]HOST[:PORT]);
    /// the table's name is --table, default "loghub-<project>-<logstore>"
    #[arg(long, value_name = "URL", conflicts_with = "dynamodb_endpoint")]
    redis: Option<String>,
    /// The lease duration (failover time), in seconds
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    lease_secs: u64,
}

/// A failed listing: the call, or a listing the parent rule cannot read.
#[derive(Debug, thiserror::Error)]
enum ListFailure {
    #[error(transparent)]
    Call(#[from] aliyun_log_rust_sdk::Error),
    #[error("unreadable ListShards answer")]
    Listing(#[from] loghub_ranges::RangeError),
}

/// The shards of one logstore, from `ListShards`; the last listing is kept for
/// [`is_readonly`](Self::is_readonly).
struct LogHubShardSource {
    client: Client,
    project: String,
    logstore: String,
    last: tokio::sync::Mutex<Option<(Instant, Vec<Shard>)>>,
}

impl LogHubShardSource {
    fn new(client: Client, project: String, logstore: String) -> Self {
        Self {
            client,
            project,
            logstore,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// One `ListShards`, as the library's shards. The SDK already retried network errors and
    /// 500 to 503 answers.
    async fn list(&self) -> Result<Vec<Shard>, ListFailure> {
        let started = Instant::now();
        let response = self
            .client
            .list_shards(&self.project, &self.logstore)
            .send()
            .await?;
        let listed: Vec<ListedShard> = response
            .get_body()
            .shards()
            .iter()
            .map(|s| ListedShard {
                id: *s.shard_id(),
                status: s.status().clone(),
                begin: s.inclusive_begin_key().clone(),
                end: s.exclusive_end_key().clone(),
                created: *s.create_time(),
            })
            .collect();
        let shards = loghub_ranges::to_shards(&listed)?;
        *self.last.lock().await = Some((started, shards.clone()));
        Ok(shards)
    }

    /// Whether the shard was `readonly` in a listing taken at most [`STATUS_MAX_AGE`] ago
    /// (listing again if needed). Readonly is for good: a listing that says so stays right.
    async fn is_readonly(&self, key: &LeaseKey) -> Result<bool, ListFailure> {
        {
            let last = self.last.lock().await;
            if let Some((at, shards)) = &*last {
                if at.elapsed() < STATUS_MAX_AGE {
                    return Ok(shards.iter().any(|s| s.key == *key && s.closed));
                }
            }
        }
        let shards = self.list().await?;
        Ok(shards.iter().any(|s| s.key == *key && s.closed))
    }

    /// One listing at startup: an error here stops the process with a line that says what to
    /// fix, where the discoverer would only log it and try again.
    async fn check(&self, endpoint: &str) -> Result<usize, Error> {
        match self.list().await {
            Ok(shards) => Ok(shards.len()),
            Err(err) => Err(startup_error(&err, &self.project, &self.logstore, endpoint).into()),
        }
    }
}

/// A failed listing at startup as one actionable line.
fn startup_error(err: &ListFailure, project: &str, logstore: &str, endpoint: &str) -> String {
    use aliyun_log_rust_sdk::Error as E;
    let err = match err {
        ListFailure::Call(err) => err,
        ListFailure::Listing(_) => return common::chain(err),
    };
    match err {
        E::Server { error_code, .. } if error_code == "ProjectNotExist" => format!(
            "project {project:?} does not exist at {endpoint}: check --project and --endpoint \
             (the project's region)"
        ),
        E::Server { error_code, .. } if error_code == "LogStoreNotExist" => {
            format!("project {project:?} has no logstore {logstore:?}: check --logstore")
        }
        E::Server {
            http_status: 401 | 403,
            error_message,
            ..
        } => format!(
            "LogHub refused the credentials or the call ({error_message}): check \
             ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET, and that they may \
             call log:ListShards on {project}/{logstore}"
        ),
        E::Network(cause) => format!(
            "cannot reach LogHub at {endpoint} for project {project:?}: {}",
            common::chain(cause)
        ),
        other => format!(
            "ListShards on {project}/{logstore} failed: {}",
            common::chain(other)
        ),
    }
}

/// A failed listing for the discoverer: throttled when LogHub says so.
fn source_error(err: ListFailure, project: &str, logstore: &str) -> SourceError {
    // LogHub's quota codes (`ReadQuotaExceed`, `ExceedQPSLimit`, ...) and HTTP 429. Not seen
    // against the real service here: the names come from its documentation.
    let throttled = matches!(&err, ListFailure::Call(aliyun_log_rust_sdk::Error::Server { error_code, http_status, .. })
        if *http_status == 429 || error_code.contains("Quota") || error_code.contains("QPS"));
    let text = format!("ListShards {project}/{logstore}: {}", common::chain(&err));
    if throttled {
        SourceError::Throttled(text.into())
    } else {
        SourceError::Failed(text.into())
    }
}

#[async_trait]
impl ShardSource for LogHubShardSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.list()
            .await
            .map_err(|err| source_error(err, &self.project, &self.logstore))
    }
}

/// Reads one shard from the grant's checkpoint (or the shard's beginning) until told to stop,
/// or to its end once it is readonly.
async fn read_shard(mut grant: LeaseGrant, source: Arc<LogHubShardSource>, worker: String) {
    let key = grant.key().clone();
    let from = grant.initial_checkpoint().map(str::to_owned);
    let checkpointer = grant.checkpointer();
    let reading = tokio::select! {
        reason = grant.stopped() => Err(reason),
        read = read_to_end(&checkpointer, from, &source, &worker) => Ok(read),
    };
    match reading {
        Ok(Ok(())) => println!("[{worker}] shard {key}: read to its end"),
        Ok(Err(err)) => {
            // The grant is dropped: the lease is released and read again, here or elsewhere.
            eprintln!("[{worker}] shard {key}: {}", common::chain(&*err));
        }
        Err(reason) => {
            // Every cursor read was checkpointed already: nothing left to save.
            let why = match reason {
                StopReason::Lost => "lost",
                StopReason::Handoff { .. } => "handed off",
                StopReason::Shutdown { .. } => "shutdown",
                StopReason::Retired { .. } => "retired",
                _ => "stopped",
            };
            println!("[{worker}] shard {key}: stops ({why})");
        }
    }
    grant.finish();
}

/// `PullLogs` after `PullLogs`, checkpointing each next cursor; ends the shard when a read
/// finds no data and the shard was readonly before that read began.
async fn read_to_end(
    checkpointer: &Checkpointer,
    from: Option<String>,
    source: &LogHubShardSource,
    worker: &str,
) -> Result<(), Error> {
    let key = checkpointer.key();
    let shard: i32 = key.as_str().parse()?;
    let client = &source.client;
    let (project, logstore) = (&source.project, &source.logstore);
    let mut cursor = match from {
        Some(cursor) => cursor,
        None => {
            let begin = client
                .get_cursor(project, logstore, shard)
                .cursor_pos(CursorPos::Begin)
                .send()
                .await?;
            begin.get_body().cursor().to_owned()
        }
    };
    let mut readonly = false;
    loop {
        let was_readonly = readonly;
        let pulled = client
            .pull_logs(project, logstore, shard)
            .cursor(&cursor)
            .count(PULL_COUNT)
            .send()
            .await?;
        let body = pulled.get_body();
        let next = body.next_cursor();
        if *next == cursor {
            if was_readonly {
                checkpointer.end_of_shard().await?;
                return Ok(());
            }
            readonly = source.is_readonly(key).await?;
            if !readonly {
                tokio::time::sleep(IDLE_WAIT).await;
            }
            continue;
        }
        println!(
            "[{worker}] shard {key}: {} log groups",
            body.log_group_count()
        );
        checkpointer.checkpoint(next).await?;
        cursor = next.clone();
    }
}

fn endpoint_url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("https://{endpoint}")
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    common::init_tracing("info");
    common::exit(run(args).await)
}

async fn run(args: Args) -> Result<(), Error> {
    let worker = args.worker_id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    });
    let credentials = environment_credentials_provider().map_err(|err| {
        format!(
            "no LogHub credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and \
             ALIBABA_CLOUD_ACCESS_KEY_SECRET ({err})"
        )
    })?;
    let endpoint = endpoint_url(&args.endpoint);
    let config = Config::builder()
        .endpoint(&endpoint)
        .credentials_provider(credentials)
        .build()
        .map_err(|err| format!("--endpoint {endpoint:?}: {}", common::chain(&err)))?;
    let client = Client::from_config(config)?;
    let source = Arc::new(LogHubShardSource::new(
        client,
        args.project.clone(),
        args.logstore.clone(),
    ));
    let count = source.check(&endpoint).await?;
    println!(
        "[{worker}] {}/{}: {count} shards listed",
        args.project, args.logstore
    );

    let store: Arc<dyn LeaseStore> = match (&args.redis, &args.table) {
        (Some(url), table) => {
            let table = table
                .clone()
                .unwrap_or_else(|| format!("loghub-{}-{}", args.project, args.logstore));
            Arc::new(RedisStore::connect(RedisConfig::new(url.as_str(), table)).await?)
        }
        (None, Some(table)) => {
            let aws = aws_config::load_from_env().await;
            let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
            if let Some(endpoint) = &args.dynamodb_endpoint {
                dynamo = dynamo.endpoint_url(endpoint);
            }
            let client = aws_sdk_dynamodb::Client::from_conf(dynamo.build());
            Arc::new(DynamoStore::connect(client, DynamoConfig::new(table)).await?)
        }
        (None, None) => Arc::new(InMemoryStore::new()),
    };
    let config = WorkerConfig::default().lease_duration(Duration::from_secs(args.lease_secs));
    let (leases, mut events) = Worker::builder(store, WorkerId::new(&worker)?)
        .config(config)
        .source(source.clone())
        .start()
        .await?;
    let name = worker.clone();
    let app = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                LeaseEvent::Acquired(grant) => {
                    let from = grant.initial_checkpoint().unwrap_or("the beginning");
                    let parents = grant.parents().len();
                    println!(
                        "[{name}] shard {}: acquired, from {from} ({parents} parents)",
                        grant.key()
                    );
                    tokio::spawn(read_shard(grant, source.clone(), name.clone()));
                }
                LeaseEvent::ShardEnded { key } => println!("[{name}] shard {key}: ended"),
                LeaseEvent::Retired { key } => {
                    println!("[{name}] shard {key}: retired (gone from the logstore)");
                }
                LeaseEvent::HandedOff { key, to } => {
                    println!("[{name}] shard {key}: handed off to {to}");
                }
                LeaseEvent::Released { key } => println!("[{name}] shard {key}: released"),
                LeaseEvent::Lost { key } => println!("[{name}] shard {key}: lost"),
                _ => {}
            }
        }
    });
    println!("[{worker}] Ctrl-C or SIGTERM to leave gracefully");
    // Ctrl-C or SIGTERM, or an operator's `shardlease drain`, after which the worker has
    // left by itself.
    let signal = tokio::select! {
        signal = common::shutdown_signal() => Some(signal?),
        _ = leases.stopped() => None,
    };
    match signal {
        Some(signal) => {
            println!("[{worker}] {signal}: leaving");
            leases.shutdown().await;
        }
        None => println!("[{worker}] drained: the worker left the fleet"),
    }
    let _ = app.await;
    Ok(())
}
