//! The `shardlease` command line as a process on dynalite, next to workers running in this
//! test on the same table: every command end to end, and the IAM policy against the SDK
//! operations the source calls. The operator's commands (status, release, drain, checkpoint,
//! delete) run on a Redis table too (`--redis`, on the server at `SHARDLEASE_REDIS_URL`).

// The library's emulator helpers, shared with its own tests.
#[path = "../../tests/common/dynamo.rs"]
mod dynamo;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynamo::{unique_table, Emulator};
use serde_json::Value;
use shardlease::lease::{LeaseKey, WorkerId};
use shardlease::store::dynamodb::DynamoConfig;
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::LeaseStore;
use shardlease::worker::{LeaseEvent, Worker};
use shardlease::WorkerConfig;
use tokio::time::Instant;

/// A lease table of a test's own: on dynalite, or on the Redis server under a key prefix of
/// its own.
struct Table {
    name: String,
    redis_prefix: Option<String>,
}

impl Table {
    fn dynamo(test: &str) -> Self {
        Self {
            name: unique_table(test),
            redis_prefix: None,
        }
    }

    fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            redis_prefix: None,
        }
    }

    fn redis(test: &str) -> Self {
        Self {
            name: "leases".into(),
            redis_prefix: Some(format!("test-{test}-{}", uuid::Uuid::new_v4().simple())),
        }
    }

    /// The command line's options that name this table.
    fn args(&self) -> Vec<String> {
        let mut args = vec!["--table".to_owned(), self.name.clone()];
        match &self.redis_prefix {
            Some(prefix) => args.extend([
                "--redis".into(),
                redis_url(),
                "--key-prefix".into(),
                prefix.clone(),
            ]),
            None => args.extend(["--endpoint".into(), Emulator::dynalite().endpoint]),
        }
        args
    }
}

fn redis_url() -> String {
    std::env::var("SHARDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Runs `shardlease` with `args` against `table` (off the async runtime).
async fn cli(table: &Table, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardlease"));
    command
        .args(table.args())
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_PROFILE");
    tokio::task::spawn_blocking(move || command.output().expect("shardlease runs"))
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        stdout(output),
        stderr(output)
    );
    stdout(output)
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&ok(output)).expect("one JSON document")
}

async fn store(table: &Table) -> Arc<dyn LeaseStore> {
    match &table.redis_prefix {
        None => Arc::new(
            Emulator::dynalite()
                .store(DynamoConfig::new(&table.name))
                .await,
        ),
        Some(prefix) => {
            let config = RedisConfig::new(redis_url(), &table.name).key_prefix(prefix.as_str());
            Arc::new(
                RedisStore::connect(config)
                    .await
                    .expect("redis-server at SHARDLEASE_REDIS_URL"),
            )
        }
    }
}

/// What the applications of a test's workers did: (worker, key, "start" / "stop", checkpoint).
type Journal = Arc<Mutex<Vec<(String, String, &'static str, Option<String>)>>>;

/// A worker on `table` whose application records its starts and stops, and finishes 200 ms
/// after it is asked to stop.
async fn worker(table: &Table, id: &str, shards: usize, journal: &Journal) -> Worker {
    let keys = (0..shards)
        .map(|i| LeaseKey::new(format!("shard-{i}")).unwrap())
        .collect();
    let config = WorkerConfig::default().lease_duration(Duration::from_secs(6));
    let (worker, mut events) = Worker::builder(store(table).await, WorkerId::new(id).unwrap())
        .config(config)
        .shards(keys)
        .start()
        .await
        .expect("worker starts");
    let (journal, id) = (Arc::clone(journal), id.to_owned());
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(mut grant) = event {
                let key = grant.key().to_string();
                journal.lock().unwrap().push((
                    id.clone(),
                    key.clone(),
                    "start",
                    grant.initial_checkpoint().map(str::to_owned),
                ));
                let (journal, id) = (Arc::clone(&journal), id.clone());
                tokio::spawn(async move {
                    grant.stopped().await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    journal.lock().unwrap().push((id, key, "stop", None));
                    grant.finish();
                });
            }
        }
    });
    worker
}

/// Waits until `done` holds (polling every 100 ms), at most `limit`.
async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// No lease started on one worker while another still processed it.
fn assert_one_at_a_time(journal: &Journal) {
    let mut processing = std::collections::HashMap::new();
    for (worker, key, what, _) in journal.lock().unwrap().iter() {
        if *what == "start" {
            if let Some(other) = processing.insert(key.clone(), worker.clone()) {
                panic!("{key} started on {worker} while {other} processed it");
            }
        } else if processing.get(key) == Some(worker) {
            processing.remove(key);
        }
    }
}

async fn held_by(table: &Table) -> Vec<(String, Option<String>)> {
    let snapshot = store(table)
        .await
        .snapshot(Instant::now() + Duration::from_secs(10))
        .await
        .unwrap();
    snapshot
        .leases
        .iter()
        .map(|l| (l.key.to_string(), l.owner.as_ref().map(|o| o.to_string())))
        .collect()
}

#[tokio::test]
async fn help_lists_every_command() {
    let output = tokio::task::spawn_blocking(|| {
        Command::new(env!("CARGO_BIN_EXE_shardlease"))
            .arg("--help")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let help = ok(&output);
    for command in [
        "status",
        "release",
        "drain",
        "checkpoint",
        "delete",
        "create-table",
        "describe-table",
        "iam-policy",
        "import-kcl",
        "bench",
    ] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
}

#[tokio::test]
async fn create_table_then_describe_it() {
    let table = Table::dynamo("cli-create");
    let created = json(&cli(&table, &["--json", "create-table"]).await);
    assert_eq!(created["created"], true);
    let again = ok(&cli(&table, &["create-table"]).await);
    assert!(again.contains("already exists"), "{again}");
    let described = json(&cli(&table, &["describe-table", "--json"]).await);
    assert_eq!(described["status"], "ACTIVE");
    assert_eq!(described["leases"], 0);
    assert_eq!(described["protocol"], "none running");

    // A table that does not exist is named, not created, by the other commands.
    let missing = cli(&Table::dynamo("cli-missing"), &["status"]).await;
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("cli-missing"),
        "{}",
        stderr(&missing)
    );
}

/// `bench` on dynalite: a fleet of three on a table of its own, a crash and a leave, the
/// figures it prints, and the table gone after it. Its times are not checked here (machines
/// here are shared): BENCHMARKS.md reports them.
#[tokio::test]
async fn bench_runs_a_fleet_on_a_table_of_its_own_and_deletes_it() {
    let table = Table::dynamo("cli-bench");
    let report = json(
        &cli(
            &table,
            &[
                "--json",
                "bench",
                "--workers",
                "3",
                "--leases",
                "6",
                "--lease",
                "2s",
                "--rest",
                "3s",
            ],
        )
        .await,
    );
    assert_eq!(report["command"], "bench");
    assert_eq!(report["table"], table.name.as_str());
    assert_eq!(report["table_deleted"], true);
    assert_eq!(report["overlaps"], 0, "{report}");
    assert_eq!(report["leave"]["duplicates"], 0, "{report}");
    // The crashed worker held two of six leases; each is processed again from its last
    // checkpoint, at most one checkpoint interval of ten items.
    let crash = &report["crash"];
    assert_eq!(crash["failover"]["n"], 2, "{report}");
    assert_eq!(crash["failover"]["missing"], 0, "{report}");
    assert!(crash["duplicates"].as_u64().unwrap() <= 2 * 10, "{report}");
    assert!(
        report["leave"]["handover"]["n"].as_u64().unwrap() >= 2,
        "{report}"
    );
    // One worker is left, holding all six; the new one takes its share, three, by graceful
    // handoffs.
    assert_eq!(report["join"]["minimum_moves"], 3, "{report}");
    assert_eq!(report["join"]["moves"], 3, "{report}");
    assert_eq!(report["join"]["duplicates"], 0, "{report}");
    let rest = &report["at_rest"];
    // Three workers beat: every beat is a write, and no checkpoint is counted at rest.
    assert!(
        rest["requests_per_minute"]["UpdateItem"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        rest["writes_per_lease_hour"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    // The table is gone.
    let gone = cli(&table, &["describe-table"]).await;
    assert!(!gone.status.success(), "{}", stdout(&gone));

    // A table that exists is never used, nor deleted.
    let existing = Table::dynamo("cli-bench-existing");
    ok(&cli(&existing, &["create-table"]).await);
    let refused = cli(&existing, &["bench"]).await;
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("exists"), "{}", stderr(&refused));
    ok(&cli(&existing, &["describe-table"]).await);
    // A fleet the run cannot measure is refused before anything is made.
    let small = cli(
        &Table::dynamo("cli-bench-small"),
        &["bench", "--workers", "2"],
    )
    .await;
    assert!(!small.status.success());
    assert!(stderr(&small).contains("at least 3"), "{}", stderr(&small));
}

#[tokio::test]
async fn status_shows_workers_and_leases() {
    status_shows_workers_and_leases_on(Table::dynamo("cli-status")).await;
}

#[tokio::test]
async fn status_shows_workers_and_leases_on_redis() {
    status_shows_workers_and_leases_on(Table::redis("cli-status")).await;
}

async fn status_shows_workers_and_leases_on(table: Table) {
    let journal = Journal::default();
    let a = worker(&table, "a", 4, &journal).await;
    let b = worker(&table, "b", 4, &journal).await;
    assert!(
        until(Duration::from_secs(30), || a.held_leases().len() == 2
            && b.held_leases().len() == 2)
        .await
    );
    let status = json(&cli(&table, &["status", "--json"]).await);
    let workers = status["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{status}");
    assert!(workers
        .iter()
        .all(|w| w["leases_held"] == 2 && w["protocol"] == "sessions"));
    let leases = status["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 4);
    assert!(leases
        .iter()
        .all(|l| l["status"] == "ready" && l["owner"].is_string()));
    assert!(leases[0]["written_age_s"].as_f64().unwrap() >= 0.0);

    let text = ok(&cli(&table, &["status"]).await);
    for header in [
        "WORKER",
        "HEARTBEAT",
        "LEASE",
        "OWNER",
        "CHECKPOINT",
        "shard-3",
    ] {
        assert!(text.contains(header), "{text}");
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn release_and_drain_move_leases_gracefully() {
    release_and_drain_move_leases_gracefully_on(Table::dynamo("cli-move")).await;
}

#[tokio::test]
async fn release_and_drain_move_leases_gracefully_on_redis() {
    release_and_drain_move_leases_gracefully_on(Table::redis("cli-move")).await;
}

async fn release_and_drain_move_leases_gracefully_on(table: Table) {
    let journal = Journal::default();
    let a = worker(&table, "a", 4, &journal).await;
    let b = worker(&table, "b", 4, &journal).await;
    assert!(
        until(Duration::from_secs(30), || a.held_leases().len() == 2
            && b.held_leases().len() == 2)
        .await
    );
    let key = a.held_leases()[0].to_string();
    let released = ok(&cli(&table, &["release", &key, "--timeout", "30s"]).await);
    assert!(released.contains(&key), "{released}");
    // It was stopped on a, then started again somewhere.
    assert!(
        until(Duration::from_secs(20), || {
            let journal = journal.lock().unwrap();
            let stop = journal
                .iter()
                .position(|(w, k, what, _)| w == "a" && *k == key && *what == "stop");
            stop.is_some_and(|stop| {
                journal[stop..]
                    .iter()
                    .any(|(_, k, what, _)| *k == key && *what == "start")
            })
        })
        .await,
        "{key} was not processed again after the release: {:?}",
        journal.lock().unwrap()
    );

    let drained = json(&cli(&table, &["--json", "drain", "b", "--timeout", "60s"]).await);
    assert_eq!(drained["done"], true);
    tokio::time::timeout(Duration::from_secs(10), b.stopped())
        .await
        .expect("the drained worker stopped");
    assert!(
        until(Duration::from_secs(30), || a.held_leases().len() == 4).await,
        "a holds {:?}",
        a.held_leases()
    );
    assert!(held_by(&table)
        .await
        .iter()
        .all(|(_, owner)| owner.as_deref() == Some("a")));
    let gone = cli(&table, &["drain", "b"]).await;
    assert!(!gone.status.success());
    assert!(
        stderr(&gone).contains("there is no worker b"),
        "{}",
        stderr(&gone)
    );
    assert_one_at_a_time(&journal);
    a.shutdown().await;
}

#[tokio::test]
async fn checkpoints_and_deletes_need_force_while_held() {
    checkpoints_and_deletes_need_force_while_held_on(Table::dynamo("cli-checkpoint")).await;
}

#[tokio::test]
async fn checkpoints_and_deletes_need_force_while_held_on_redis() {
    checkpoints_and_deletes_need_force_while_held_on(Table::redis("cli-checkpoint")).await;
}

async fn checkpoints_and_deletes_need_force_while_held_on(table: Table) {
    let journal = Journal::default();
    let a = worker(&table, "a", 2, &journal).await;
    assert!(until(Duration::from_secs(30), || a.held_leases().len() == 2).await);

    let refused = cli(&table, &["checkpoint", "set", "shard-0", "4711"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("held by worker a") && stderr(&refused).contains("force"),
        "{}",
        stderr(&refused)
    );
    ok(&cli(&table, &["checkpoint", "set", "shard-0", "4711", "--force"]).await);
    assert!(
        until(Duration::from_secs(20), || journal
            .lock()
            .unwrap()
            .iter()
            .any(|(_, k, what, checkpoint)| k == "shard-0"
                && *what == "start"
                && checkpoint.as_deref() == Some("4711")))
        .await,
        "shard-0 did not resume from 4711: {:?}",
        journal.lock().unwrap()
    );
    ok(&cli(&table, &["checkpoint", "reset", "shard-0", "--force"]).await);
    let lease = store(&table)
        .await
        .get(
            &LeaseKey::new("shard-0").unwrap(),
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.checkpoint, None);

    let refused = cli(&table, &["delete", "shard-1"]).await;
    assert_eq!(refused.status.code(), Some(1));
    a.shutdown().await;
    // Nobody holds it now: no force needed.
    let deleted = ok(&cli(&table, &["delete", "shard-1"]).await);
    assert!(deleted.contains("deleted"), "{deleted}");
    let missing = cli(&table, &["delete", "shard-1"]).await;
    assert!(
        stderr(&missing).contains("there is no lease shard-1"),
        "{}",
        stderr(&missing)
    );
    assert_one_at_a_time(&journal);
}

/// The SDK operations the source sends: every `client . op ()` call in the library's `src/`
/// and in this command line's own `cli/src/`, as IAM names them.
fn operations_in_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let cli = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&cli.join("../src"), &mut files);
    walk(&cli.join("src"), &mut files);
    let mut operations = BTreeSet::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        // Only the AWS SDK's clients (the Redis store has a client of its own).
        let service = if source.contains("aws_sdk_kinesis") {
            "kinesis"
        } else if source.contains("aws_sdk_dynamodb") {
            "dynamodb"
        } else {
            continue;
        };
        // `client` then whitespace (a line break too), `.`, a snake_case name, `()`.
        let mut rest = source.as_str();
        while let Some(at) = rest.find("client") {
            rest = &rest[at + "client".len()..];
            let after = rest.trim_start_matches("()").trim_start();
            let Some(call) = after.strip_prefix('.') else {
                continue;
            };
            let name: String = call
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if name.is_empty() || !call[name.len()..].starts_with("()") {
                continue;
            }
            // Accessors of the client itself, and of an optional one, not requests.
            if ["config", "clone", "cloned", "as_ref", "is_some"].contains(&name.as_str()) {
                continue;
            }
            let pascal: String = name
                .split('_')
                .map(|part| {
                    let mut chars = part.chars();
                    chars
                        .next()
                        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                        .unwrap_or_default()
                })
                .collect();
            operations.insert(format!("{service}:{pascal}"));
        }
    }
    operations
}

#[tokio::test]
async fn the_iam_policy_allows_exactly_the_operations_the_code_sends() {
    let policy = json(
        &cli(
            &Table::named("orders-leases"),
            &[
                "iam-policy",
                "--stream",
                "orders",
                "--fan-out",
                "--bench",
                "--region",
                "eu-west-1",
            ],
        )
        .await,
    );
    let mut actions = BTreeSet::new();
    let mut resources = Vec::new();
    for statement in policy["Statement"].as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow");
        resources.push(statement["Resource"].as_str().unwrap().to_owned());
        for action in statement["Action"].as_array().unwrap() {
            actions.insert(action.as_str().unwrap().to_owned());
        }
    }
    let sent = operations_in_source();
    assert!(
        sent.contains("dynamodb:UpdateItem") && sent.contains("kinesis:GetRecords"),
        "the source scan found too little: {sent:?}"
    );
    assert_eq!(
        actions, sent,
        "policy actions vs SDK operations in src/ and cli/src/"
    );
    assert_eq!(
        resources,
        [
            "arn:aws:dynamodb:eu-west-1:*:table/orders-leases",
            "arn:aws:kinesis:eu-west-1:*:stream/orders",
            "arn:aws:kinesis:eu-west-1:*:stream/orders/consumer/*",
            "arn:aws:dynamodb:eu-west-1:*:table/shardlease-bench-*"
        ]
    );
}

#[tokio::test]
async fn the_iam_policy_of_a_consumer_of_several_streams_covers_each_and_its_lookup() {
    let other = "arn:aws:kinesis:eu-west-1:222222222222:stream/payments";
    let policy = json(
        &cli(
            &Table::named("orders-leases"),
            &[
                "iam-policy",
                "--stream",
                "orders",
                "--stream",
                other,
                "--region",
                "eu-west-1",
                "--account",
                "111111111111",
            ],
        )
        .await,
    );
    let stream = &policy["Statement"][1];
    assert_eq!(
        stream["Resource"],
        serde_json::json!([
            "arn:aws:kinesis:eu-west-1:111111111111:stream/orders",
            other
        ])
    );
    let actions: Vec<&str> = stream["Action"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"kinesis:DescribeStreamSummary"),
        "{actions:?}"
    );
    assert!(
        !actions.contains(&"kinesis:RegisterStreamConsumer"),
        "{actions:?}"
    );
    assert_eq!(policy["Statement"].as_array().unwrap().len(), 2);
}

/// A lease table as KCL 2.x writes it: a finished parent and two children, one checkpointed
/// at a sequence number, one at TRIM_HORIZON.
async fn kcl_table(name: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: u64| AttributeValue::N(v.to_string());
    let items: Vec<_> = [
        ("shardId-000000000000", "SHARD_END", None),
        (
            "shardId-000000000001",
            "49590338271490256608559692538361571095921575989136588898",
            Some("shardId-000000000000"),
        ),
        (
            "shardId-000000000002",
            "TRIM_HORIZON",
            Some("shardId-000000000000"),
        ),
    ]
    .into_iter()
    .map(|(key, checkpoint, parent)| {
        let mut item = std::collections::HashMap::from([
            ("leaseKey".to_owned(), s(key)),
            ("leaseOwner".to_owned(), s("kcl-worker-1")),
            ("leaseCounter".to_owned(), n(41)),
            ("checkpoint".to_owned(), s(checkpoint)),
            ("checkpointSubSequenceNumber".to_owned(), n(0)),
            ("ownerSwitchesSinceCheckpoint".to_owned(), n(0)),
        ]);
        if let Some(parent) = parent {
            let parents = AttributeValue::Ss(vec![parent.to_owned()]);
            item.insert("parentShardId".to_owned(), parents);
        }
        item
    })
    .collect();
    dynamo::kcl_table(&Emulator::dynalite().client(), name, &items).await;
}

#[tokio::test]
async fn import_kcl_copies_checkpoints_and_a_kcl_table_is_named_as_such() {
    let from = Table::dynamo("cli-kcl-source");
    let to = Table::dynamo("cli-kcl-target");
    kcl_table(&from.name).await;

    // Pointed at KCL's table by mistake, the command line says what it is.
    let mistaken = cli(&from, &["status"]).await;
    assert_eq!(mistaken.status.code(), Some(1));
    assert!(
        stderr(&mistaken).contains("looks like a KCL lease table")
            && stderr(&mistaken).contains("import-kcl"),
        "{}",
        stderr(&mistaken)
    );

    let dry = ok(&cli(&to, &["import-kcl", "--from", &from.name, "--to", &to.name]).await);
    assert!(dry.contains("nothing was written"), "{dry}");
    assert!(held_by(&to).await.is_empty(), "a dry run wrote");

    let applied = json(
        &cli(
            &to,
            &[
                "--json",
                "import-kcl",
                "--from",
                &from.name,
                "--to",
                &to.name,
                "--apply",
            ],
        )
        .await,
    );
    assert_eq!(applied["leases"].as_array().unwrap().len(), 3, "{applied}");
    let status = json(&cli(&to, &["--json", "status"]).await);
    let leases = status["leases"].as_array().unwrap();
    let by_key = |key: &str| {
        leases
            .iter()
            .find(|l| l["key"] == key)
            .unwrap_or_else(|| panic!("{key} not imported: {status}"))
    };
    assert_eq!(by_key("shardId-000000000000")["status"], "finished");
    // The sequence number and KCL's sub-sequence number: where the consumer resumes.
    assert_eq!(
        by_key("shardId-000000000001")["checkpoint"],
        "49590338271490256608559692538361571095921575989136588898:0"
    );
    assert_eq!(by_key("shardId-000000000001")["status"], "ready");
    assert_eq!(by_key("shardId-000000000002")["checkpoint"], Value::Null);
    assert_eq!(
        by_key("shardId-000000000002")["parents"],
        serde_json::json!(["shardId-000000000000"])
    );
    // Again: nothing changes.
    let again = ok(&cli(
        &to,
        &[
            "import-kcl",
            "--from",
            &from.name,
            "--to",
            &to.name,
            "--apply",
        ],
    )
    .await);
    assert!(!again.contains("created"), "{again}");
}

#[tokio::test]
async fn dynamodb_commands_refuse_a_redis_table_and_say_why() {
    let table = Table::redis("cli-refuse");
    for (command, why) in [
        (vec!["create-table"], "needs no creation"),
        (vec!["describe-table"], "status"),
        (vec!["iam-policy"], "ACLs"),
        (
            vec!["import-kcl", "--from", "a", "--to", "b"],
            "DynamoDB table",
        ),
    ] {
        let refused = cli(&table, &command).await;
        assert_eq!(refused.status.code(), Some(1), "{command:?}");
        let text = stderr(&refused);
        assert!(
            text.contains("not --redis") && text.contains(why),
            "{command:?}: {text}"
        );
    }
    let both = cli(&table, &["--endpoint", "http://127.0.0.1:1", "status"]).await;
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
    let prefix_alone = cli(&Table::named("t"), &["--key-prefix", "p", "status"]).await;
    assert_eq!(prefix_alone.status.code(), Some(1));
    assert!(
        stderr(&prefix_alone).contains("--redis"),
        "{}",
        stderr(&prefix_alone)
    );
}

#[tokio::test]
async fn the_policy_in_the_operations_guide_is_the_one_the_command_prints() {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/OPERATIONS.md"),
    )
    .unwrap();
    let block = guide
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/OPERATIONS.md shows the policy in a json block");
    let documented: Value = serde_json::from_str(block).expect("the documented policy parses");
    let printed = json(
        &cli(
            &Table::named("orders-leases"),
            &[
                "iam-policy",
                "--stream",
                "orders",
                "--region",
                "eu-west-1",
                "--account",
                "123456789012",
            ],
        )
        .await,
    );
    assert_eq!(
        documented, printed,
        "docs/OPERATIONS.md's policy differs from `shardlease iam-policy`"
    );
    assert!(guide.contains(
        "shardlease --table orders-leases iam-policy --stream orders --region eu-west-1 --account 123456789012"
    ));
}

#[tokio::test]
async fn status_watch_refreshes_and_times_what_stands_still() {
    use std::io::{BufRead, BufReader};
    let table = Table::dynamo("cli-watch");
    let journal = Journal::default();
    let a = worker(&table, "a", 2, &journal).await;
    assert!(until(Duration::from_secs(30), || a.held_leases().len() == 2).await);
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardlease"))
        .args([
            "--endpoint",
            &Emulator::dynalite().endpoint,
            "--table",
            &table.name,
        ])
        .args(["--json", "status", "--watch", "--interval", "300ms"])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_ENDPOINT_URL")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let documents = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .take(4)
            .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(documents.len(), 4);
    // With sessions a lease's counter stands still while it is held: the watch times it.
    let first = documents[0]["leases"][0]["counter_still_s"]
        .as_f64()
        .unwrap();
    let last = documents[3]["leases"][0]["counter_still_s"]
        .as_f64()
        .unwrap();
    assert!(first < 0.1 && last >= 0.6, "{first} then {last}");
    a.shutdown().await;
}

#[tokio::test]
async fn status_marks_a_lease_its_application_halted() {
    status_marks_a_lease_its_application_halted_on(Table::dynamo("cli-halted")).await;
}

#[tokio::test]
async fn status_marks_a_lease_its_application_halted_on_redis() {
    status_marks_a_lease_its_application_halted_on(Table::redis("cli-halted")).await;
}

/// A worker whose application halts `shard-1` as soon as it gets it: its next beat names it,
/// and `status` marks it halted (and only it).
async fn status_marks_a_lease_its_application_halted_on(table: Table) {
    let keys = (0..2)
        .map(|i| LeaseKey::new(format!("shard-{i}")).unwrap())
        .collect();
    let config = WorkerConfig::default().lease_duration(Duration::from_secs(6));
    let (a, mut events) = Worker::builder(store(&table).await, WorkerId::new("a").unwrap())
        .config(config)
        .shards(keys)
        .start()
        .await
        .expect("worker starts");
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LeaseEvent::Acquired(mut grant) = event {
                if grant.key().as_str() == "shard-1" {
                    grant.halt("a poison record");
                }
                tokio::spawn(async move {
                    grant.stopped().await;
                    grant.finish();
                });
            }
        }
    });
    let mut status = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(30);
    while status["workers"][0]["halted"] != serde_json::json!(["shard-1"]) {
        assert!(Instant::now() < deadline, "never named halted: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        status = json(&cli(&table, &["status", "--json"]).await);
    }
    let leases = status["leases"].as_array().unwrap();
    let halted: Vec<bool> = leases.iter().map(|l| l["halted"] == true).collect();
    assert_eq!(halted, [false, true], "{status}");
    let text = ok(&cli(&table, &["status"]).await);
    assert!(text.contains("ready,halted"), "{text}");
    a.shutdown().await;
}
