//! The `prometheus` example as an operator runs it: a real process on dynalite, scraped over
//! HTTP. `/metrics` has the worker's lease metrics and the DynamoDB store's request and
//! capacity metrics with values, `/healthz` and `/readyz` answer 200, and SIGTERM makes it
//! leave and exit 0. An application that stops reporting progress fails `/healthz` (503).
//!
//! Like `example_sigterm.rs`, it runs the binary `cargo build --all-features --examples`
//! built (scripts/test.sh does that first).

#[path = "common/dynamo.rs"]
mod dynamo;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SHARDS: usize = 3;
const ID: &str = "prometheus-test";

fn example_binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let binary = target.join("debug").join("examples").join(name);
    assert!(
        binary.is_file(),
        "{} is missing: build it first with `cargo build --all-features --examples` \
         (scripts/test.sh does)",
        binary.display()
    );
    binary
}

/// The example's process, killed if the test fails before it exits.
struct Example {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the example on a free port with `extra` arguments; returns once it printed the
/// address it serves on.
fn start(endpoint: &str, table: &str, extra: &[&str]) -> Example {
    let mut child = Command::new(example_binary("prometheus"))
        .args(["--id", ID, "--table", table, "--endpoint", endpoint])
        .args(["--shards", &SHARDS.to_string(), "--lease-secs", "2"])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the prometheus example");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send(addr.parse::<SocketAddr>().expect("an address"));
            }
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(addr) => addr,
        Err(_) => {
            let _ = child.kill();
            panic!("the example did not print the address it listens on");
        }
    };
    Example { child, addr }
}

/// `GET path`: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a header");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, body.to_owned())
}

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(series, _)| {
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            series_name == name && labels.iter().all(|l| series_labels.contains(l))
        })
        .and_then(|(_, value)| value.parse().ok())
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn sigterm_and_wait(example: &mut Example, limit: Duration) -> ExitStatus {
    let term = Command::new("kill")
        .args(["-TERM", &example.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    let mut status = None;
    wait_for(limit, || {
        status = example.child.try_wait().expect("poll the child");
        status.is_some()
    });
    status.unwrap_or_else(|| panic!("the example did not exit within {limit:?} of SIGTERM"))
}

#[test]
fn the_example_serves_lease_and_store_metrics_and_health_then_leaves_on_sigterm() {
    let emulator = dynamo::Emulator::dynalite();
    let table = dynamo::unique_table("prometheus");
    let mut example = start(&emulator.endpoint, &table, &[]);
    let worker = format!("worker=\"{ID}\"");
    let mut metrics = String::new();
    let held = wait_for(Duration::from_secs(20), || {
        metrics = get(example.addr, "/metrics").1;
        sample(&metrics, "shardlease_leases_held", &[&worker]) == Some(SHARDS as f64)
    });
    assert!(held, "never held {SHARDS} leases:\n{metrics}");

    let taken = sample(&metrics, "shardlease_leases_taken_total", &[&worker]);
    assert!(taken >= Some(SHARDS as f64), "{taken:?}\n{metrics}");
    let table_label = format!("table=\"{table}\"");
    let created = sample(
        &metrics,
        "shardlease_store_requests_total",
        &[
            &table_label,
            "operation=\"create\"",
            "request=\"PutItem\"",
            "outcome=\"done\"",
        ],
    );
    assert_eq!(created, Some(SHARDS as f64), "{metrics}");
    let takes = sample(
        &metrics,
        "shardlease_store_requests_total",
        &[&table_label, "operation=\"take\"", "outcome=\"done\""],
    );
    assert!(takes >= Some(SHARDS as f64), "{takes:?}\n{metrics}");
    let timed = sample(
        &metrics,
        "shardlease_store_request_seconds_count",
        &[&table_label, "operation=\"take\""],
    );
    assert!(timed >= takes, "{timed:?}\n{metrics}");
    for capacity in [
        "shardlease_store_read_capacity_units",
        "shardlease_store_write_capacity_units",
    ] {
        let units = sample(&metrics, capacity, &[&table_label]);
        assert!(units > Some(0.0), "{capacity}: {units:?}\n{metrics}");
    }
    assert!(
        metrics.contains("# TYPE shardlease_store_requests_total counter"),
        "{metrics}"
    );

    assert_eq!(get(example.addr, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(get(example.addr, "/readyz"), (200, "ready\n".to_owned()));
    assert_eq!(get(example.addr, "/elsewhere").0, 404);

    let status = sigterm_and_wait(&mut example, Duration::from_secs(15));
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[test]
fn an_application_that_stops_reporting_progress_fails_healthz() {
    let emulator = dynamo::Emulator::dynalite();
    let table = dynamo::unique_table("prometheus-stall");
    let mut example = start(
        &emulator.endpoint,
        &table,
        &["--progress-window", "2", "--stall-after", "1"],
    );
    let mut health = (0, String::new());
    let stalled = wait_for(Duration::from_secs(30), || {
        health = get(example.addr, "/healthz");
        health.0 == 503
    });
    assert!(stalled, "/healthz never failed: {health:?}");
    assert!(
        health.1.starts_with("unhealthy: stalled leases: shard-")
            && health.1.contains("NoProgress"),
        "{health:?}"
    );
    // Not a readiness matter: the worker itself is fine.
    assert_eq!(get(example.addr, "/readyz").0, 200);
    let status = sigterm_and_wait(&mut example, Duration::from_secs(15));
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
