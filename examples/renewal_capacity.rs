//! How many leases one worker can keep alive: renewals per second through the DynamoDB
//! backend (or the Redis one, `--redis URL`), with the renewer's concurrency (64 in flight by
//! default), against a real table, an emulator or a redis-server.
//!
//! ```sh
//! cargo run --release --example renewal_capacity -- --endpoint http://127.0.0.1:4567 \
//!     --leases 2000 --seconds 20 --concurrency 64
//! cargo run --release --features redis --example renewal_capacity -- \
//!     --redis redis://127.0.0.1:6379 --leases 2000 --seconds 20
//! ```
//!
//! It creates a fresh table (on Redis: a key prefix of its own, deleted at the end), creates
//! and takes `--leases` leases as one worker, then renews them round-robin for `--seconds`, as
//! the renewer of the lease protocol does (the same store call, the same concurrency limit).
//! It prints renewals per second, the latency distribution, and the leases that rate keeps
//! alive at that protocol's default renew interval (lease duration / 3 = 3.33 s). Under
//! sessions (the default protocol) a worker beats one record, whatever it holds: this limit
//! is the lease protocol's.
//! Ctrl-C or SIGTERM ends the renewals early; the figures so far are printed.

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use common::Error;

use shardlease::lease::Incarnation;
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::store::{LeaseStore, Outcome};
use shardlease::{LeaseKey, NewLease, Protocol, WorkerConfig, WorkerId};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Renewals per second of one worker through the DynamoDB (or Redis) backend, and the leases that rate
/// keeps alive. Ctrl-C or SIGTERM ends the renewals early; the figures so far are printed.
#[derive(Parser)]
#[command(
    name = "renewal_capacity",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Args {
    /// The leases to create, take and renew
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = at_least_1)]
    leases: u64,
    /// How long to renew, in seconds
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_1)]
    seconds: u64,
    /// Renewals in flight at once (the renewer's default is 64)
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = at_least_1)]
    concurrency: u64,
    /// The DynamoDB endpoint [default: the AWS chain, or AWS_ENDPOINT_URL]
    #[arg(long, value_name = "URL", conflicts_with = "redis")]
    endpoint: Option<String>,
    /// Measure the Redis store on this server instead (needs the redis feature)
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

fn at_least_1(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err("at least 1 expected".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("a whole number expected".into()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    common::init_tracing("warn");
    common::exit(run(args).await)
}

async fn run(args: Args) -> Result<(), Error> {
    let leases = args.leases as usize;
    let seconds = args.seconds;
    let concurrency = args.concurrency as usize;
    let endpoint = args.endpoint;

    let table = format!("shardlease-capacity-{}", std::process::id());
    let (store, cleanup) = match &args.redis {
        Some(url) => redis_store(url, &table).await?,
        None => {
            let aws = aws_config::load_from_env().await;
            let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
            if let Some(endpoint) = &endpoint {
                dynamo = dynamo.endpoint_url(endpoint);
            }
            let client = aws_sdk_dynamodb::Client::from_conf(dynamo.build());
            let store = DynamoStore::connect(client, DynamoConfig::new(&table)).await?;
            (Arc::new(store) as Arc<dyn LeaseStore>, None)
        }
    };
    let result = measure(store, &table, leases, seconds, concurrency).await;
    if let Some(cleanup) = cleanup {
        cleanup.await?;
    }
    result
}

/// What the Redis run leaves behind, deleted at the end: the keys under its prefix.
type Cleanup = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>>>>;

/// The store on Redis under a key prefix of its own, and the deletion of that prefix's keys.
#[cfg(feature = "redis")]
async fn redis_store(
    url: &str,
    table: &str,
) -> Result<(Arc<dyn LeaseStore>, Option<Cleanup>), Error> {
    use shardlease::store::redis::{RedisConfig, RedisStore};
    let store = RedisStore::connect(RedisConfig::new(url, table).key_prefix(table)).await?;
    let cleanup_store = store.clone();
    let cleanup: Cleanup = Box::pin(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        let snapshot = cleanup_store.snapshot(deadline).await?;
        for lease in snapshot.leases {
            // Nobody else writes under this prefix: a lost race cannot happen.
            let _deleted = cleanup_store
                .delete(&lease.key, lease.counter, lease.tenure, deadline)
                .await?;
        }
        Ok(())
    });
    Ok((Arc::new(store), Some(cleanup)))
}

#[cfg(not(feature = "redis"))]
async fn redis_store(
    _url: &str,
    _table: &str,
) -> Result<(Arc<dyn LeaseStore>, Option<Cleanup>), Error> {
    Err("--redis needs the redis feature: cargo run --features redis --example renewal_capacity -- ...".into())
}

/// Creates and takes `leases` leases, renews them round-robin for `seconds`, prints the figures.
async fn measure(
    store: Arc<dyn LeaseStore>,
    table: &str,
    leases: usize,
    seconds: u64,
    concurrency: usize,
) -> Result<(), Error> {
    let me = WorkerId::new("capacity")?;
    let process = Incarnation::random();

    // Create and take every lease, `concurrency` at a time.
    let limit = Arc::new(Semaphore::new(concurrency));
    let mut setup = JoinSet::new();
    for i in 0..leases {
        let (store, me, limit) = (Arc::clone(&store), me.clone(), Arc::clone(&limit));
        setup.spawn(async move {
            let _permit = limit.acquire_owned().await?;
            let key = LeaseKey::new(format!("shard-{i:06}"))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let created = store.create(NewLease::new(key.clone()), deadline).await?;
            let counter = match created {
                Outcome::Done(lease) => lease.counter,
                Outcome::LostRace { current } => current.map_or(0, |l| l.counter),
            };
            match store.take(&key, &me, process, counter, deadline).await? {
                Outcome::Done(lease) => Ok::<_, Error>((key, lease.tenure)),
                Outcome::LostRace { .. } => Err(format!("{key} was taken by another").into()),
            }
        });
    }
    let mut held = Vec::with_capacity(leases);
    let signal = common::shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            done = setup.join_next() => match done {
                Some(done) => held.push(done??),
                None => break,
            },
            signal = &mut signal => {
                eprintln!("{}: stopped while creating the leases of table {table}", signal?);
                return Ok(());
            }
        }
    }
    held.sort();
    eprintln!("table {table}: {leases} leases created and taken; renewing for {seconds} s");

    // Renew round-robin, `concurrency` in flight, as the renewer does.
    let mut end = Instant::now() + Duration::from_secs(seconds);
    let mut latencies = Vec::new();
    let mut failures = 0u64;
    let mut inflight = JoinSet::new();
    let start = Instant::now();
    let mut next = 0usize;
    loop {
        while inflight.len() < concurrency && Instant::now() < end {
            let (key, tenure) = held[next % held.len()].clone();
            next += 1;
            let (store, me) = (Arc::clone(&store), me.clone());
            inflight.spawn(async move {
                let sent = Instant::now();
                let deadline = sent + Duration::from_secs(5);
                let answer = store.renew(&key, &me, tenure, None, deadline).await;
                (matches!(answer, Ok(Outcome::Done(_))), sent.elapsed())
            });
        }
        let done = tokio::select! {
            done = inflight.join_next() => done,
            signal = &mut signal, if end > Instant::now() => {
                eprintln!("{}: renewals stop now", signal?);
                end = Instant::now();
                continue;
            }
        };
        match done {
            Some(Ok((true, latency))) => latencies.push(latency),
            Some(_) => failures += 1,
            None => break,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| {
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        latencies[rank - 1].as_secs_f64() * 1000.0
    };
    if latencies.is_empty() {
        return Err("no renewal succeeded".into());
    }
    let rate = latencies.len() as f64 / elapsed;
    let interval = WorkerConfig::default()
        .protocol(Protocol::Leases)
        .renew_interval
        .as_secs_f64();
    println!(
        "renewals: {} in {elapsed:.1} s = {rate:.0}/s ({failures} failed); latency p50 {:.1} ms, \
         p99 {:.1} ms, max {:.1} ms",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    println!(
        "FIGURE renewal capacity, one worker, {concurrency} in flight: {rate:.0} renewals/s = \
         {:.0} leases kept alive at the lease protocol's default {interval:.2} s renew interval",
        rate * interval
    );
    Ok(())
}
