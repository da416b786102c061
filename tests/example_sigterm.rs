//! The `lease_worker` example as an operator runs it: a real process on dynalite. SIGTERM (what
//! `docker stop`, Kubernetes and systemd send) makes it leave gracefully: every lease is
//! checkpointed (and the result logged) and released, and the process exits 0. A wrong
//! endpoint makes it exit at once with one line that names the endpoint.

#[path = "common/dynamo.rs"]
mod dynamo;

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use shardlease::store::dynamodb::DynamoConfig;
use shardlease::store::LeaseStore;

const SHARDS: usize = 4;

/// The example's executable, built by `cargo build --all-features --examples` (the test
/// command, `scripts/test.sh`, does that first: `cargo test` builds examples only as test
/// harnesses, and a build from inside a test would wait on the build lock of the test run).
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

fn lease_worker(binary: &PathBuf, endpoint: &str, table: &str, log: &PathBuf) -> Child {
    Command::new(binary)
        .args([
            "--id",
            "sigterm-test",
            "--table",
            table,
            "--endpoint",
            endpoint,
        ])
        .args(["--shards", &SHARDS.to_string(), "--lease-secs", "2"])
        .arg("--events-log")
        .arg(log)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lease_worker")
}

fn events(log: &PathBuf, event: &str) -> usize {
    let needle = format!(r#""event":"{event}""#);
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(&needle))
        .count()
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let mut status = None;
    wait_for(limit, || {
        status = child.try_wait().expect("poll the child");
        status.is_some()
    });
    match status {
        Some(status) => status,
        None => {
            let _ = child.kill();
            panic!("lease_worker did not exit within {limit:?}");
        }
    }
}

#[test]
fn lease_worker_checkpoints_releases_and_exits_0_on_sigterm() {
    let binary = example_binary("lease_worker");
    let emulator = dynamo::Emulator::dynalite();
    let table = dynamo::unique_table("sigterm");
    let log = std::env::temp_dir().join(format!("{table}.jsonl"));
    let mut child = lease_worker(&binary, &emulator.endpoint, &table, &log);
    let acquired = wait_for(Duration::from_secs(15), || {
        events(&log, "acquired") == SHARDS
    });
    if !acquired {
        let _ = child.kill();
        panic!("lease_worker did not acquire its {SHARDS} leases");
    }

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert_eq!(
        events(&log, "checkpointed"),
        SHARDS,
        "checkpoint results logged"
    );
    assert_eq!(events(&log, "released"), SHARDS);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let leases = runtime.block_on(async {
        let store = emulator.store(DynamoConfig::new(&table)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        store.snapshot(deadline).await.unwrap().leases
    });
    assert_eq!(leases.len(), SHARDS);
    for lease in leases {
        assert_eq!(lease.owner, None, "{} is still held", lease.key);
        assert_eq!(lease.checkpoint.as_deref(), Some("done"), "{}", lease.key);
    }
    let _ = std::fs::remove_file(&log);
}

#[test]
fn lease_worker_names_an_endpoint_where_nothing_listens_and_exits_1() {
    let binary = example_binary("lease_worker");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let log = std::env::temp_dir().join(format!("{}.jsonl", dynamo::unique_table("refused")));
    let mut child = lease_worker(&binary, &endpoint, "refused", &log);
    let status = wait_exit(&mut child, Duration::from_secs(10));
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = stderr.lines().last().unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "error: nothing listens at {endpoint} (connection refused)"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("DispatchFailure"),
        "a Debug dump: {stderr}"
    );
}
