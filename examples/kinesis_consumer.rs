//! A Kinesis consumer process: prints every record it processes, checkpoints after every
//! batch, and (with `--events-log PATH`) appends one JSON line per lease event.
//!
//! ```sh
//! docker compose up -d          # kinesalite on 4569, dynalite on 4567
//! export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
//! cargo run --features kinesis --example kinesis_consumer -- \
//!     --worker-id a --stream demo --create-shards 4 --produce-per-sec 20 \
//!     --kinesis-endpoint http://127.0.0.1:4569 --dynamodb-endpoint http://127.0.0.1:4567 \
//!     --events-log events-a.jsonl
//! ```
//!
//! Several streams in one lease table, the set re-read from a file at every discovery round
//! (add a line to start reading a stream, remove it to retire its leases):
//!
//! ```sh
//! printf 'orders\npayments\n' > streams.txt
//! cargo run --features kinesis --example kinesis_consumer -- \
//!     --worker-id a --streams-file streams.txt --table shop-leases --create-shards 2 \
//!     --kinesis-endpoint http://127.0.0.1:4569 --dynamodb-endpoint http://127.0.0.1:4567
//! ```
//!
//! Flags (all but the streams optional; region and credentials come from the standard AWS
//! environment, endpoints also from `AWS_ENDPOINT_URL`):
//!
//! - `--worker-id ID`: default `<hostname>-<pid>`.
//! - `--stream NAME`: the stream, by name or ARN. Given more than once (or with
//!   `--multi-stream`), the process is a consumer of several streams: leases keyed
//!   `<account>:<stream>:<creation epoch>:<shard id>`, as KCL's multi-stream applications
//!   key them.
//! - `--streams-file PATH`: the streams (a name or an ARN a line; blank lines and `#`
//!   comments ignored), read again at every discovery round; a consumer of several streams.
//! - `--multi-stream`: a consumer of several streams even with one `--stream`.
//! - `--removed-stream-wait-secs N`: how long a stream that left the file is read on before
//!   its leases retire. Default 0.
//! - `--table NAME`: the lease table, created if missing. Default `<stream>-leases` for one
//!   stream; required with several.
//! - `--kinesis-endpoint URL`, `--dynamodb-endpoint URL`: emulators or VPC endpoints.
//! - `--initial-position trim-horizon|latest`: where new shards start. Default `trim-horizon`.
//! - `--lease-secs N`: the lease duration (failover time). Default 10.
//! - `--events-log PATH`: append `{"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}`
//!   lines: acquired, stop_requested, stopped, handed_off, released, lost, shard_ended,
//!   retired, checkpointed, batch_failed (with `attempt`, `then`: retry, skip or stop, and
//!   `error`); and, with several streams, `{"ts_unix_nanos":..,"worker":..,"stream":..,
//!   "event":..}` lines: stream_added, stream_removed, stream_failed (with `error`).
//! - `--create-shards N`: create each `--stream` with N shards if it does not exist.
//! - `--produce-per-sec N`: also write N records a second to each `--stream` (keys
//!   `key-0`..`key-15`), to have something to watch.
//! - `--fail-on TEXT`: a batch holding a record whose data contains TEXT fails (a poison
//!   record). It is delivered again up to `--batch-attempts N` times (default 10), waiting
//!   `--retry-backoff-ms MS` (default 1000, doubling), then `--on-failure skip|stop` (default
//!   stop): skip prints it as a dead letter and checkpoints past it; stop keeps the lease,
//!   unprocessed, and fails `/healthz`.
//! - `--fan-out NAME`: read with enhanced fan-out (`SubscribeToShard`) through the stream
//!   consumer NAME, registered if missing (kinesis-mock serves it; kinesalite does not).
//! - `--prefetch-records N`: read ahead of the processor while at most N records wait
//!   (default 30000; 0: no reading ahead).
//! - `--health ADDR`: serve `GET /healthz` (200 `ok`, or 503 naming the stalled leases).
//!
//! Ctrl-C or SIGTERM leaves gracefully (every processor is asked to checkpoint, leases are
//! released). The library's log goes to stderr (`RUST_LOG`, default `info`); an error that
//! stops the process (a stream that does not exist, no region or credentials, nothing
//! listening at an endpoint) is printed as one line.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use clap::builder::NonEmptyStringValueParser;
use clap::{Parser, ValueEnum};
use shardlease::kinesis::{
    BatchFailure, BatchOutcome, ConsumerConfig, ConsumerEvent, FailureAction, InitialPosition,
    KinesisConsumer, KinesisRecord, ProcessError, RecordCheckpointer, RecordProcessor, Retrieval,
    ShardStart, StreamConfig, StreamSet, StreamTracker,
};
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::worker::{LeaseEvent, StopReason};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};

use common::Error;

/// A Kinesis consumer process: prints every record it processes, checkpoints after every
/// batch. Region and credentials come from the standard AWS environment, endpoints also from
/// AWS_ENDPOINT_URL. Ctrl-C or SIGTERM leaves gracefully.
#[derive(Parser)]
#[command(
    name = "kinesis_consumer",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Args {
    /// A stream, by name or ARN (several: a consumer of several streams)
    #[arg(
        long,
        value_name = "NAME",
        value_parser = NonEmptyStringValueParser::new(),
        required_unless_present = "streams_file"
    )]
    stream: Vec<String>,
    /// The streams, a name or an ARN a line, read again at every discovery round (a consumer
    /// of several streams)
    #[arg(long, value_name = "PATH")]
    streams_file: Option<std::path::PathBuf>,
    /// A consumer of several streams even with one --stream (leases keyed
    /// <account>:<stream>:<creation epoch>:<shard id>)
    #[arg(long)]
    multi_stream: bool,
    /// How long a stream that left --streams-file is read on before its leases retire, in
    /// seconds
    #[arg(long, value_name = "N", default_value_t = 0)]
    removed_stream_wait_secs: u64,
    /// The worker's id [default: $HOSTNAME-<pid>]
    #[arg(long, value_name = "ID")]
    worker_id: Option<String>,
    /// The lease table, created if missing [default: <stream>-leases; required with several
    /// streams]
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The Kinesis endpoint (an emulator or a VPC endpoint)
    #[arg(long, value_name = "URL")]
    kinesis_endpoint: Option<String>,
    /// The DynamoDB endpoint (an emulator or a VPC endpoint)
    #[arg(long, value_name = "URL")]
    dynamodb_endpoint: Option<String>,
    /// Where new shards start
    #[arg(
        long,
        value_name = "POSITION",
        value_enum,
        default_value = "trim-horizon"
    )]
    initial_position: Position,
    /// The lease duration (failover time), in seconds
    #[arg(long, value_name = "N", default_value_t = 10)]
    lease_secs: u64,
    /// Append one JSON line per event: {"ts_unix_nanos":..,"worker":..,"lease":..,"event":..}
    /// (acquired, stop_requested, stopped, handed_off, released, lost, shard_ended, retired,
    /// checkpointed, batch_failed)
    #[arg(long, value_name = "PATH")]
    events_log: Option<String>,
    /// Create each --stream with N shards if it does not exist
    #[arg(long, value_name = "N")]
    create_shards: Option<u64>,
    /// Also write N records a second to each --stream (keys key-0..key-15), to have something
    /// to watch
    #[arg(long, value_name = "N", default_value_t = 0)]
    produce_per_sec: u64,
    /// Most Kinesis records per GetRecords call (1 to 10,000)
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_records: u32,
    /// Work this long on each batch (or each --checkpoint-every records) before checkpointing
    /// its last record: a slow processor
    #[arg(long, value_name = "MS", default_value_t = 0)]
    process_ms: u64,
    /// Checkpoint after every N records of a batch, not only after its last
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<usize>,
    /// Fail every batch holding a record whose data contains TEXT (a poison record)
    #[arg(long, value_name = "TEXT")]
    fail_on: Option<String>,
    /// Deliveries of a failing batch before --on-failure applies (at least 1)
    #[arg(long, value_name = "N", default_value_t = 10)]
    batch_attempts: u32,
    /// The first wait before a failed batch is delivered again, doubling per attempt
    #[arg(long, value_name = "MS", default_value_t = 1_000)]
    retry_backoff_ms: u64,
    /// What happens to a batch that failed every attempt: skip it (to the dead-letter hook,
    /// which prints it) or stop the shard here
    #[arg(long, value_name = "ACTION", value_enum, default_value = "stop")]
    on_failure: OnFailure,
    /// Read with enhanced fan-out through the stream consumer NAME (registered if missing)
    /// instead of polling
    #[arg(long, value_name = "NAME")]
    fan_out: Option<String>,
    /// Read ahead of the processor while at most N records wait (0: read only once the
    /// processor is done with the last batch)
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    prefetch_records: u32,
    /// Serve GET /healthz here: 200 "ok", or 503 naming the stalled (or halted) leases
    #[arg(long, value_name = "ADDR")]
    health: Option<std::net::SocketAddr>,
}

/// `--on-failure`.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum OnFailure {
    Skip,
    Stop,
}

/// `--initial-position`.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Position {
    TrimHorizon,
    Latest,
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

/// Appends JSON lines to the events log.
#[derive(Clone)]
struct EventLog {
    worker: String,
    file: Option<Arc<Mutex<std::fs::File>>>,
}

impl EventLog {
    fn write(&self, lease: &LeaseKey, event: &str, extra: &[(&str, String)]) {
        let Some(file) = &self.file else { return };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut line = serde_json::json!({
            "ts_unix_nanos": u64::try_from(nanos).unwrap_or(u64::MAX),
            "worker": self.worker,
            "lease": lease.as_str(),
            "event": event,
        });
        for (name, value) in extra {
            line[*name] = value.as_str().into();
        }
        let line = format!("{line}\n");
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %err, "cannot write the events log");
        }
    }

    /// A line about a stream of a consumer of several streams.
    fn write_stream(&self, stream: &str, event: &str, extra: &[(&str, String)]) {
        let Some(file) = &self.file else { return };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut line = serde_json::json!({
            "ts_unix_nanos": u64::try_from(nanos).unwrap_or(u64::MAX),
            "worker": self.worker,
            "stream": stream,
            "event": event,
        });
        for (name, value) in extra {
            line[*name] = value.as_str().into();
        }
        let line = format!("{line}\n");
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %err, "cannot write the events log");
        }
    }

    fn record(&self, event: ConsumerEvent) {
        let reason = |r: &StopReason| reason_name(r).to_owned();
        match &event {
            ConsumerEvent::StreamAdded { stream } => {
                self.write_stream(&stream.to_string(), "stream_added", &[]);
            }
            ConsumerEvent::StreamRemoved { stream } => {
                self.write_stream(&stream.to_string(), "stream_removed", &[]);
            }
            ConsumerEvent::StreamFailed { stream, error } => {
                eprintln!("stream {stream}: {error}");
                self.write_stream(stream, "stream_failed", &[("error", error.clone())]);
            }
            ConsumerEvent::Acquired { key, checkpoint } => {
                let from = checkpoint.clone().unwrap_or_default();
                self.write(key, "acquired", &[("checkpoint", from)]);
            }
            ConsumerEvent::StopRequested { key, reason: why } => {
                self.write(key, "stop_requested", &[("reason", reason(why))]);
            }
            ConsumerEvent::Stopped { key } => self.write(key, "stopped", &[]),
            ConsumerEvent::Lease(LeaseEvent::HandedOff { key, to }) => {
                self.write(key, "handed_off", &[("to", to.to_string())]);
            }
            ConsumerEvent::Lease(LeaseEvent::Released { key }) => {
                self.write(key, "released", &[]);
            }
            ConsumerEvent::Lease(LeaseEvent::Lost { key }) => self.write(key, "lost", &[]),
            ConsumerEvent::Lease(LeaseEvent::ShardEnded { key }) => {
                self.write(key, "shard_ended", &[]);
            }
            ConsumerEvent::Lease(LeaseEvent::Retired { key }) => self.write(key, "retired", &[]),
            ConsumerEvent::Checkpointed {
                key,
                sequence_number,
                sub_sequence_number,
            } => {
                let mut fields = vec![("sequence_number", sequence_number.clone())];
                if let Some(sub) = sub_sequence_number {
                    fields.push(("sub_sequence_number", sub.to_string()));
                }
                self.write(key, "checkpointed", &fields)
            }
            ConsumerEvent::BatchFailed {
                key,
                attempt,
                error,
                then,
            } => {
                let mut fields = vec![
                    ("attempt", attempt.to_string()),
                    ("then", format!("{then:?}").to_lowercase()),
                ];
                if let Some(error) = error {
                    fields.push(("error", error.clone()));
                }
                self.write(key, "batch_failed", &fields)
            }
            other => eprintln!("event: {other:?}"),
        }
    }
}

/// Prints what it processes and checkpoints after every batch.
struct Printer {
    worker: String,
    shard: LeaseKey,
    /// `--fail-on`.
    fail_on: Option<Arc<str>>,
    /// `--process-ms`: the work on each batch (or chunk) before its checkpoint.
    process_time: Duration,
    /// `--checkpoint-every`.
    checkpoint_every: Option<usize>,
}

#[async_trait]
impl RecordProcessor for Printer {
    async fn initialize(&mut self, start: &ShardStart) {
        println!(
            "[{}] {} starts at {:?}",
            self.worker, self.shard, start.position
        );
    }

    async fn process_records(
        &mut self,
        records: &[KinesisRecord],
        checkpointer: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        // A record holding `--fail-on`'s text fails its batch: delivered again, then skipped
        // or the shard stopped, as `--on-failure` says.
        if let Some(poison) = &self.fail_on {
            if let Some(bad) = records
                .iter()
                .find(|r| contains(&r.data, poison.as_bytes()))
            {
                return Err(
                    format!("poison record {} (holds {poison:?})", bad.sequence_number).into(),
                );
            }
        }
        // A checkpoint after every `checkpoint_every` records (after the whole batch by
        // default), each chunk worked on for `process_time` first.
        let chunk = self.checkpoint_every.unwrap_or(records.len()).max(1);
        for records in records.chunks(chunk) {
            for record in records {
                println!(
                    "[{}] {} {} {}",
                    self.worker,
                    self.shard,
                    record.partition_key,
                    String::from_utf8_lossy(&record.data)
                );
            }
            tokio::time::sleep(self.process_time).await;
            let last = records.last().expect("a chunk is never empty");
            if let Err(err) = checkpointer.checkpoint(last).await {
                // The lease was lost: the next owner goes on from the last checkpoint.
                eprintln!(
                    "[{}] {}: checkpoint refused: {err}",
                    self.worker, self.shard
                );
                break;
            }
        }
        Ok(BatchOutcome::Continue)
    }

    async fn dead_letter(
        &mut self,
        records: &[KinesisRecord],
        failure: &BatchFailure,
        checkpointer: &RecordCheckpointer,
    ) {
        // A real application sends the batch to a queue or a bucket to look at later.
        for record in records {
            println!(
                "[{}] {} dead letter {} {}",
                self.worker,
                self.shard,
                record.sequence_number,
                String::from_utf8_lossy(&record.data)
            );
        }
        eprintln!("[{}] {}: batch skipped {failure}", self.worker, self.shard);
        if let Some(last) = records.last() {
            if let Err(err) = checkpointer.checkpoint(last).await {
                eprintln!(
                    "[{}] {}: checkpoint refused: {err}",
                    self.worker, self.shard
                );
            }
        }
    }

    async fn lease_lost(&mut self) {
        println!("[{}] {} lost", self.worker, self.shard);
    }

    async fn stop_requested(&mut self, reason: &StopReason, _: &RecordCheckpointer) {
        // Every batch is checkpointed as soon as it is processed: nothing left to save.
        println!(
            "[{}] {} stops: {}",
            self.worker,
            self.shard,
            reason_name(reason)
        );
    }
}

/// Answers `GET /healthz` on `listener` for as long as it runs: 200 `ok` while the worker is
/// healthy ([`WorkerMonitor::healthy`](shardlease::worker::WorkerMonitor::healthy)),
/// otherwise 503 and why (`common::unhealthy`); 404 for any other path. One request per connection,
/// enough for a probe or `curl`.
async fn serve_health(
    listener: tokio::net::TcpListener,
    monitor: shardlease::worker::WorkerMonitor,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let monitor = monitor.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let read = stream.read(&mut request).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..read]);
            let path = head.split_whitespace().nth(1).unwrap_or_default();
            let (status, body) = match path {
                "/healthz" if monitor.healthy() => ("200 OK", "ok\n".to_owned()),
                "/healthz" => ("503 Service Unavailable", common::unhealthy(&monitor)),
                _ => ("404 Not Found", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// The streams of `--streams-file`: read again at every discovery round, so a line added
/// starts a stream and a line removed retires its leases.
struct StreamsFile(std::path::PathBuf);

#[async_trait]
impl StreamTracker for StreamsFile {
    async fn streams(&self) -> Result<Vec<StreamConfig>, shardlease::store::BoxError> {
        let text = tokio::fs::read_to_string(&self.0)
            .await
            .map_err(|err| format!("cannot read {}: {err}", self.0.display()))?;
        let mut streams = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let stream = StreamConfig::new(line)
                .map_err(|err| format!("{}:{}: {err}", self.0.display(), n + 1))?;
            streams.push(stream);
        }
        Ok(streams)
    }
}

/// True when `needle` occurs in `data`.
fn contains(data: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && data.windows(needle.len()).any(|w| w == needle)
}

async fn ensure_stream(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    shards: i32,
) -> Result<(), Error> {
    let exists = client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .is_ok();
    if !exists {
        client
            .create_stream()
            .stream_name(stream)
            .shard_count(shards)
            .send()
            .await?;
        println!("created stream {stream} with {shards} shards");
    }
    for _ in 0..100 {
        let summary = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await?;
        let active = summary
            .stream_description_summary()
            .is_some_and(|s| s.stream_status().as_str() == "ACTIVE");
        if active {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("stream {stream} did not become ACTIVE").into())
}

async fn produce(client: aws_sdk_kinesis::Client, stream: String, per_sec: u32) {
    let gap = Duration::from_secs(1) / per_sec.max(1);
    let mut n: u64 = 0;
    loop {
        let key = format!("key-{}", n % 16);
        let put = client
            .put_record()
            .stream_name(&stream)
            .partition_key(&key)
            .data(Blob::new(format!("{key}:{n}")))
            .send()
            .await;
        if let Err(err) = put {
            tracing::warn!(error = %common::chain(&err), "produce failed");
        }
        n += 1;
        tokio::time::sleep(gap).await;
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
    let aws = aws_config::load_from_env().await;
    let mut kinesis_config = aws_sdk_kinesis::config::Builder::from(&aws);
    if let Some(endpoint) = &args.kinesis_endpoint {
        kinesis_config = kinesis_config.endpoint_url(endpoint);
    }
    let kinesis = aws_sdk_kinesis::Client::from_conf(kinesis_config.build());
    let mut dynamo_config = aws_sdk_dynamodb::config::Builder::from(&aws);
    if let Some(endpoint) = &args.dynamodb_endpoint {
        dynamo_config = dynamo_config.endpoint_url(endpoint);
    }
    let dynamo = aws_sdk_dynamodb::Client::from_conf(dynamo_config.build());

    // The streams' names (an ARN names its stream too), for creating and writing.
    let names = args
        .stream
        .iter()
        .map(|s| Ok(StreamConfig::new(s)?.name().to_owned()))
        .collect::<Result<Vec<String>, Error>>()?;
    if let Some(shards) = args.create_shards {
        for stream in &names {
            // Any whole number is accepted and cast, as the hand-written parser did.
            ensure_stream(&kinesis, stream, shards as i32).await?;
        }
    }
    let several = args.multi_stream || args.streams_file.is_some() || args.stream.len() > 1;
    let table = match (&args.table, several) {
        (Some(table), _) => table.clone(),
        (None, false) => format!("{}-leases", args.stream[0]),
        (None, true) => return Err("give the lease table of several streams with --table".into()),
    };
    let store = DynamoStore::connect(dynamo, DynamoConfig::new(table)).await?;
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
    let config = ConsumerConfig::default()
        .initial_position(if args.initial_position == Position::Latest {
            InitialPosition::Latest
        } else {
            InitialPosition::TrimHorizon
        })
        .max_records(args.max_records)
        .prefetch_records(args.prefetch_records)
        .retrieval(match args.fan_out.clone() {
            Some(name) => Retrieval::FanOut(name),
            None => Retrieval::Polling,
        })
        .batch_attempts(args.batch_attempts)
        .retry_backoff(Duration::from_millis(args.retry_backoff_ms))
        .on_failure(match args.on_failure {
            OnFailure::Skip => FailureAction::Skip,
            OnFailure::Stop => FailureAction::Stop,
        })
        .removed_stream_wait(Duration::from_secs(args.removed_stream_wait_secs));
    let health = match args.health {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|err| format!("cannot serve /healthz at {addr}: {err}"))?,
        ),
        None => None,
    };
    let fail_on: Option<Arc<str>> = args.fail_on.as_deref().map(Arc::from);
    let (process_time, checkpoint_every) = (
        Duration::from_millis(args.process_ms),
        args.checkpoint_every,
    );
    let name = worker.clone();
    let id = WorkerId::new(worker.clone())?;
    let builder = match (&args.streams_file, several) {
        (Some(path), _) => KinesisConsumer::multi_stream(
            kinesis.clone(),
            StreamsFile(path.clone()),
            Arc::new(store),
            id,
        ),
        (None, true) => {
            let streams = args
                .stream
                .iter()
                .map(StreamConfig::new)
                .collect::<Result<Vec<_>, _>>()?;
            KinesisConsumer::multi_stream(
                kinesis.clone(),
                StreamSet::new(streams),
                Arc::new(store),
                id,
            )
        }
        (None, false) => {
            KinesisConsumer::builder(kinesis.clone(), args.stream[0].clone(), Arc::new(store), id)
        }
    };
    let consumer = builder
        .worker_config(WorkerConfig::default().lease_duration(Duration::from_secs(args.lease_secs)))
        .config(config)
        .on_event(move |event| log.record(event))
        .processor(move |shard: &LeaseKey| Printer {
            worker: name.clone(),
            shard: shard.clone(),
            fail_on: fail_on.clone(),
            process_time,
            checkpoint_every,
        })
        .start()
        .await?;
    if let Some(listener) = health {
        println!("[{worker}] /healthz at http://{}", listener.local_addr()?);
        tokio::spawn(serve_health(listener, consumer.worker().monitor()));
    }
    let reading = match &args.streams_file {
        Some(path) => format!("the streams of {}", path.display()),
        None => args.stream.join(", "),
    };
    println!("[{worker}] consuming {reading}; Ctrl-C or SIGTERM to leave gracefully");
    if args.produce_per_sec > 0 {
        let per_sec = args.produce_per_sec as u32;
        for stream in &names {
            tokio::spawn(produce(kinesis.clone(), stream.clone(), per_sec));
        }
    }
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
