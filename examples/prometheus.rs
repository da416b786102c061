//! One worker process on a DynamoDB lease table (or a local emulator) with its metrics and
//! health served over HTTP for Prometheus and for probes.
//!
//! ```sh
//! cargo run --example prometheus -- --endpoint http://127.0.0.1:4567 --shards 8 \
//!     --listen 127.0.0.1:9898
//! curl -s 127.0.0.1:9898/metrics    # Prometheus text: the worker's, the store's metrics
//! curl -si 127.0.0.1:9898/healthz   # 200 "ok", or 503 and why (liveness)
//! curl -si 127.0.0.1:9898/readyz    # 200 "ready", or 503 and why (readiness)
//! ```
//!
//! The recorder is `metrics-exporter-prometheus`'s, installed before anything records; its
//! handle renders the text, served by a small hyper server. `/healthz` answers
//! [`WorkerMonitor::healthy`] (200 while the worker starts too), `/readyz`
//! [`WorkerMonitor::ready`]; anything else is 404.
//!
//! The application "processes" each lease: it reports progress every second and checkpoints
//! every five, until told to stop; then it checkpoints and finishes. The worker's
//! `progress_window` (`--progress-window`, default 30 s) turns a lease whose application went
//! quiet into a failing `/healthz`; `--stall-after S` makes the application go quiet after S
//! seconds, to see it. Ctrl-C (SIGINT) or SIGTERM leaves gracefully (every lease checkpointed
//! and released) and the process exits 0. The library's log goes to stderr (`RUST_LOG`,
//! default `info`); an error that stops the process is printed as one line.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Parser;
use common::Error;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};
use shardlease::worker::{LeaseEvent, LeaseGrant, StopReason, Worker, WorkerMonitor};
use shardlease::{LeaseKey, WorkerConfig, WorkerId};
use tokio::net::TcpListener;

/// One lease worker with its metrics (`/metrics`) and health (`/healthz`, `/readyz`) served
/// over HTTP. Ctrl-C or SIGTERM leaves gracefully and exits 0.
#[derive(Parser)]
#[command(name = "prometheus", args_override_self = true)]
struct Args {
    /// The worker's id [default: $HOSTNAME-<pid>]
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// The lease table, created if missing
    #[arg(long, value_name = "NAME", default_value = "shardlease-demo")]
    table: String,
    /// The DynamoDB endpoint [default: the AWS chain, or AWS_ENDPOINT_URL]
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Create the leases shard-0000.. (N of them) if missing
    #[arg(long, value_name = "N", default_value_t = 4)]
    shards: usize,
    /// The lease duration in seconds, at least 0.1
    #[arg(long, value_name = "S", default_value = "10", value_parser = seconds(0.1))]
    lease_secs: f64,
    /// Where to serve /metrics, /healthz and /readyz (port 0: any free port; the address is
    /// printed as "listening on ADDR")
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9898")]
    listen: SocketAddr,
    /// A lease whose application reports no progress for this long fails /healthz (0: off)
    #[arg(long, value_name = "S", default_value = "30", value_parser = seconds(0.0))]
    progress_window: f64,
    /// The application stops reporting progress this many seconds after it got a lease (to
    /// see /healthz fail)
    #[arg(long, value_name = "S", value_parser = seconds(0.0))]
    stall_after: Option<f64>,
}

/// A number of seconds, at least `min`.
fn seconds(min: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |value| {
        value
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= min)
            .ok_or_else(|| format!("a number of seconds, at least {min}, expected"))
    }
}

/// The histograms' buckets, in seconds.
const SECONDS_BUCKETS: [f64; 12] = [
    0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What the HTTP handlers read: the exporter's handle, and the worker once it started.
struct Served {
    metrics: PrometheusHandle,
    monitor: OnceLock<WorkerMonitor>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    common::init_tracing("info");
    common::exit(run(args).await)
}

async fn run(args: Args) -> Result<(), Error> {
    // Before anything records: the store describes its metrics when it connects. Histograms
    // with buckets (the exporter's default is a summary, which cannot be summed over a
    // fleet): every histogram of the crate is in seconds, from a fast DynamoDB round trip to
    // an attempt timeout.
    let metrics = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)?
        .install_recorder()
        .map_err(|err| format!("cannot install the Prometheus recorder: {err}"))?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|err| format!("cannot listen on {}: {err}", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    let served = Arc::new(Served {
        metrics,
        monitor: OnceLock::new(),
    });
    tokio::spawn(serve(listener, Arc::clone(&served)));
    tokio::spawn(upkeep(served.metrics.clone()));

    let id = args.id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    });
    let aws = aws_config::load_from_env().await;
    let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
    if let Some(endpoint) = &args.endpoint {
        dynamo = dynamo.endpoint_url(endpoint);
    }
    let client = aws_sdk_dynamodb::Client::from_conf(dynamo.build());
    let store = DynamoStore::connect(client, DynamoConfig::new(&args.table)).await?;
    let shards = (0..args.shards)
        .map(|i| LeaseKey::new(format!("shard-{i:04}")))
        .collect::<Result<Vec<_>, _>>()?;
    let window =
        (args.progress_window > 0.0).then(|| Duration::from_secs_f64(args.progress_window));
    let config = WorkerConfig::default()
        .lease_duration(Duration::from_secs_f64(args.lease_secs))
        .progress_window(window);
    let (worker, mut events) = Worker::builder(Arc::new(store), WorkerId::new(&id)?)
        .config(config)
        .shards(shards)
        .graceful_shutdown_on(async {
            match common::shutdown_signal().await {
                Ok(signal) => tracing::info!(signal, "leaving gracefully"),
                Err(err) => tracing::error!(error = %err, "cannot wait for a signal; leaving"),
            }
        })
        .start()
        .await?;
    let _ = served.monitor.set(worker.monitor());
    let stall_after = args.stall_after.map(Duration::from_secs_f64);
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(grant) = event {
                tokio::spawn(process(grant, stall_after));
            }
        }
    });
    worker.stopped().await;
    Ok(())
}

/// The application's part of a lease: progress every second, a checkpoint every five (the
/// number of seconds so far), until told to stop; then a last checkpoint unless it was lost.
async fn process(mut grant: LeaseGrant, stall_after: Option<Duration>) {
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut seconds = 0u64;
    let reason = loop {
        tokio::select! {
            reason = grant.stopped() => break reason,
            _ = tick.tick() => {}
        }
        if stall_after.is_some_and(|after| started.elapsed() >= after) {
            continue;
        }
        seconds += 1;
        grant.progress();
        if seconds.is_multiple_of(5) {
            if let Err(err) = grant.checkpoint(&seconds.to_string()).await {
                tracing::warn!(lease_key = %grant.key(), error = %common::chain(&err), "checkpoint failed");
            }
        }
    };
    if reason != StopReason::Lost {
        if let Err(err) = grant.checkpoint(&seconds.to_string()).await {
            tracing::warn!(lease_key = %grant.key(), error = %common::chain(&err), "last checkpoint failed");
        }
    }
    grant.finish();
}

/// Accepts connections and serves each on a task of its own, until the process exits.
async fn serve(listener: TcpListener, served: Arc<Served>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let served = Arc::clone(&served);
                async move { Ok::<_, Infallible>(respond(&served, &request)) }
            });
            if let Err(err) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %err, "HTTP connection ended with an error");
            }
        });
    }
}

fn respond(served: &Served, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    let monitor = served.monitor.get();
    match request.uri().path() {
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(served.metrics.render())));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        "/healthz" => match monitor {
            None => text(StatusCode::OK, "starting\n".into()),
            Some(monitor) if monitor.healthy() => text(StatusCode::OK, "ok\n".into()),
            Some(monitor) => text(StatusCode::SERVICE_UNAVAILABLE, common::unhealthy(monitor)),
        },
        "/readyz" => match monitor {
            Some(monitor) if monitor.ready() => text(StatusCode::OK, "ready\n".into()),
            Some(_) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: leaving, stopped, without a valid session, or the store is slow\n"
                    .into(),
            ),
            None => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n".into()),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Why `/healthz` fails, in one line.
fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// The exporter's housekeeping (draining histograms, idle series), which a recorder installed
/// without its own HTTP listener leaves to the caller.
async fn upkeep(metrics: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        metrics.run_upkeep();
    }
}
