//! KCL lease tables on dynalite: a table written in KCL's format (KCL 2.x/3.x attribute names,
//! as `DynamoDBLeaseSerializer` writes them) is refused at connect and named in the listing's
//! warning, and its checkpoints are imported into a table of ours: a dry run that writes
//! nothing, an apply that creates exactly the expected leases, a second apply that changes
//! nothing, and an existing lease that is never overwritten.

#[path = "common/dynamo.rs"]
mod dynamo;

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use shardlease::lease::{Incarnation, Lease, NewLease};
use shardlease::store::dynamodb::kcl::{self, Action, KclCheckpoint, Resume};
use shardlease::store::dynamodb::{ConnectError, DynamoConfig, DynamoStore};
use shardlease::store::LeaseStore;
use shardlease::{LeaseKey, WorkerId, SHARD_END};
use tokio::time::Instant;

type Item = HashMap<String, AttributeValue>;

/// Sequence numbers as Kinesis writes them.
const SEQ_0: &str = "49590338271490256608559692538361571095921575989136588898";
const SEQ_3: &str = "49590338271490256608559692540925702759324208523137515618";
const SEQ_5: &str = "49590338271490256608559692541000000000000000000000000005";
/// The checkpoints the import writes for them: the sequence number and KCL's sub-sequence
/// number (0: a record not aggregated, or an aggregate's first user record; 3: the fourth).
const CHECKPOINT_0: &str = "49590338271490256608559692538361571095921575989136588898:0";
const CHECKPOINT_3: &str = "49590338271490256608559692540925702759324208523137515618:0";
const CHECKPOINT_5: &str = "49590338271490256608559692541000000000000000000000000005:3";
const PENDING_5: &str = "49590338271490256608559692541000000000000000000000000099";

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn ss(values: &[&str]) -> AttributeValue {
    AttributeValue::Ss(values.iter().map(|v| (*v).to_owned()).collect())
}

fn key(k: &str) -> LeaseKey {
    LeaseKey::new(k).unwrap()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

/// A KCL lease as `DynamoDBLeaseSerializer::toDynamoRecord` writes it: key, counter,
/// owner switches, checkpoint and its sub-sequence number always; the rest when set.
fn kcl_lease(shard: &str, counter: u64, checkpoint: &str, sub: u64) -> Item {
    Item::from([
        ("leaseKey".to_owned(), s(shard)),
        ("leaseCounter".to_owned(), n(counter)),
        ("ownerSwitchesSinceCheckpoint".to_owned(), n(0)),
        ("checkpoint".to_owned(), s(checkpoint)),
        ("checkpointSubSequenceNumber".to_owned(), n(sub)),
    ])
}

fn with(mut item: Item, attributes: &[(&str, AttributeValue)]) -> Item {
    for (name, value) in attributes {
        item.insert((*name).to_owned(), value.clone());
    }
    item
}

/// The KCL table of these tests: a stream whose shard 2 split into 3 and 4, plus an
/// aggregated checkpoint, a malformed lease and a KCL 3.x worker-metrics item.
fn kcl_items() -> Vec<Item> {
    vec![
        with(
            kcl_lease("shardId-000000000000", 42, SEQ_0, 0),
            &[
                ("leaseOwner", s("kcl-worker-1")),
                ("startingHashKey", s("0")),
                (
                    "endingHashKey",
                    s("113427455640312821154458202477256070484"),
                ),
            ],
        ),
        kcl_lease("shardId-000000000001", 0, "TRIM_HORIZON", 0),
        with(
            kcl_lease("shardId-000000000002", 100, "SHARD_END", 0),
            &[
                ("leaseOwner", s("kcl-worker-2")),
                (
                    "childShardIds",
                    ss(&["shardId-000000000003", "shardId-000000000004"]),
                ),
            ],
        ),
        with(
            kcl_lease("shardId-000000000003", 17, SEQ_3, 0),
            &[
                ("leaseOwner", s("kcl-worker-1")),
                ("parentShardId", ss(&["shardId-000000000002"])),
                ("entityType", s("LEASE")),
                ("throughputKBps", AttributeValue::N("12.5".into())),
            ],
        ),
        with(
            kcl_lease("shardId-000000000004", 3, "TRIM_HORIZON", 0),
            &[("parentShardId", ss(&["shardId-000000000002"]))],
        ),
        with(
            kcl_lease("shardId-000000000005", 9, SEQ_5, 3),
            &[
                ("leaseOwner", s("kcl-worker-2")),
                ("pendingCheckpoint", s(PENDING_5)),
                ("pendingCheckpointSubSequenceNumber", n(0)),
            ],
        ),
        // Malformed: a counter that is not a number.
        with(
            kcl_lease("shardId-000000000006", 0, "LATEST", 0),
            &[("leaseCounter", s("many"))],
        ),
        // KCL 3.5 keeps its worker metrics in the lease table, keyed by worker id.
        Item::from([
            ("leaseKey".to_owned(), s("kcl-worker-1")),
            ("entityType".to_owned(), s("WORKER_METRIC_STATS")),
            ("lut".to_owned(), n(1_767_225_600)),
        ]),
    ]
}

/// Every item of a table, in key order.
async fn items_of(client: &Client, table: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut from = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(from)
            .send()
            .await
            .unwrap();
        items.extend(out.items.unwrap_or_default());
        from = out.last_evaluated_key;
        if from.is_none() {
            break;
        }
    }
    let key = |item: &Item| format!("{:?}", item.get("leaseKey"));
    items.sort_by_key(key);
    items
}

async fn leases_of(store: &DynamoStore) -> Vec<Lease> {
    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.malformed, 0);
    snapshot
        .leases
        .into_iter()
        .map(std::sync::Arc::unwrap_or_clone)
        .collect()
}

/// (key, checkpoint, parents) of the leases the KCL table must become, parents first.
fn expected() -> Vec<(&'static str, Option<&'static str>, Vec<&'static str>)> {
    vec![
        ("shardId-000000000000", Some(CHECKPOINT_0), vec![]),
        ("shardId-000000000001", None, vec![]),
        ("shardId-000000000002", Some(SHARD_END), vec![]),
        ("shardId-000000000005", Some(CHECKPOINT_5), vec![]),
        (
            "shardId-000000000003",
            Some(CHECKPOINT_3),
            vec!["shardId-000000000002"],
        ),
        ("shardId-000000000004", None, vec!["shardId-000000000002"]),
    ]
}

fn as_expected(leases: &[Lease]) -> Vec<(String, Option<String>, Vec<String>)> {
    leases
        .iter()
        .map(|l| {
            assert_eq!(
                (l.owner.as_ref(), l.counter, l.tenure),
                (None, 0, 0),
                "{l:?}"
            );
            (
                l.key.to_string(),
                l.checkpoint.clone(),
                l.parents.iter().map(ToString::to_string).collect(),
            )
        })
        .collect()
}

fn sorted(
    mut rows: Vec<(String, Option<String>, Vec<String>)>,
) -> Vec<(String, Option<String>, Vec<String>)> {
    rows.sort();
    rows
}

fn expected_rows() -> Vec<(String, Option<String>, Vec<String>)> {
    expected()
        .into_iter()
        .map(|(k, c, p)| {
            (
                k.to_owned(),
                c.map(str::to_owned),
                p.into_iter().map(str::to_owned).collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn connecting_to_a_kcl_table_fails_with_the_kcl_error_and_our_tables_do_not() {
    let emulator = dynamo::Emulator::dynalite();
    let client = emulator.client();
    let table = dynamo::unique_table("kcl-connect");
    dynamo::kcl_table(&client, &table, &kcl_items()).await;
    let err = DynamoStore::connect(client.clone(), DynamoConfig::new(&table))
        .await
        .expect_err("a KCL table must be refused");
    assert!(
        matches!(&err, ConnectError::KclTable { table: t, .. } if *t == table),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let message = err.to_string();
    assert!(
        message.contains("looks like a KCL lease table"),
        "{message}"
    );
    assert!(
        message.contains(&format!("shardlease import-kcl --from {table} --to NEW")),
        "{message}"
    );

    // A KCL 3.x table whose first items are worker metrics gives itself away too.
    let metrics_only = dynamo::unique_table("kcl-connect-metrics");
    dynamo::kcl_table(&client, &metrics_only, &kcl_items()[7..]).await;
    let err = DynamoStore::connect(client.clone(), DynamoConfig::new(&metrics_only))
        .await
        .expect_err("a KCL 3.x table must be refused");
    assert!(
        matches!(
            err,
            ConnectError::KclTable {
                attribute: "entityType",
                ..
            }
        ),
        "{err:?}"
    );

    // An empty table (created by connect) and a table of ours, leases and members, connect.
    let ours = dynamo::unique_table("kcl-connect-ours");
    let store = emulator.store(DynamoConfig::new(&ours)).await;
    let created = store
        .create(
            NewLease::new(key("shardId-000000000000"))
                .with_parents(vec![key("shardId-000000000009")])
                .with_checkpoint(SEQ_0),
            deadline(),
        )
        .await
        .unwrap();
    assert!(created.is_done());
    let beat = store
        .heartbeat(
            &WorkerId::new("w1").unwrap(),
            Incarnation::new(1),
            None,
            None,
            deadline(),
        )
        .await
        .unwrap();
    assert!(beat.is_done());
    DynamoStore::connect(client.clone(), DynamoConfig::new(&ours))
        .await
        .expect("a table of ours is not taken for KCL's");
}

#[tokio::test]
async fn an_import_plans_without_writing_then_creates_the_kcl_checkpoints_exactly_once() {
    let emulator = dynamo::Emulator::dynalite();
    let client = emulator.client();
    let from = dynamo::unique_table("kcl-source");
    dynamo::kcl_table(&client, &from, &kcl_items()).await;
    let source_before = items_of(&client, &from).await;
    let to = emulator
        .store(DynamoConfig::new(dynamo::unique_table("kcl-dest")))
        .await;

    let plan = kcl::plan(&client, &from, &to).await.unwrap();
    assert!(leases_of(&to).await.is_empty(), "the dry run wrote nothing");
    let keys: Vec<&str> = plan.leases.iter().map(|l| l.key().as_str()).collect();
    let expected_keys: Vec<&str> = expected().iter().map(|e| e.0).collect();
    assert_eq!(keys, expected_keys, "parents before children, then by key");
    assert!(plan.leases.iter().all(|l| l.action == Action::WouldCreate));
    let planned: Vec<_> = plan
        .leases
        .iter()
        .map(|l| {
            (
                l.key().to_string(),
                l.checkpoint.clone(),
                l.parents
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(planned, expected_rows());

    let by_key = |k: &str| plan.leases.iter().find(|l| l.key().as_str() == k).unwrap();
    let zero = by_key("shardId-000000000000");
    assert_eq!(zero.kcl.owner.as_deref(), Some("kcl-worker-1"));
    assert_eq!(zero.kcl.counter, 42);
    assert_eq!(
        (zero.resume, zero.finished),
        (Resume::AfterCheckpoint, false)
    );
    assert!(zero.warnings.is_empty());
    let one = by_key("shardId-000000000001");
    assert_eq!(one.kcl.checkpoint, KclCheckpoint::TrimHorizon);
    assert_eq!(one.resume, Resume::InitialPosition);
    let two = by_key("shardId-000000000002");
    assert_eq!((two.resume, two.finished), (Resume::Finished, true));
    assert_eq!(
        two.kcl.children,
        ["shardId-000000000003", "shardId-000000000004"]
    );
    let five = by_key("shardId-000000000005");
    assert_eq!(five.kcl.sub_sequence_number, 3);
    assert_eq!(five.kcl.pending_checkpoint.as_deref(), Some(PENDING_5));
    // Inside an aggregate: copied as it is, no warning (the consumer de-aggregates).
    assert_eq!(five.checkpoint.as_deref(), Some(CHECKPOINT_5));
    assert_eq!(five.warnings.len(), 1, "{:?}", five.warnings);
    assert!(five.warnings[0].contains(&format!("pending checkpoint {PENDING_5}")));

    let skipped: Vec<(&str, &str)> = plan
        .skipped
        .iter()
        .map(|s| (s.key.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0].0, "kcl-worker-1");
    assert!(
        skipped[0].1.contains("a KCL WORKER_METRIC_STATS item"),
        "{skipped:?}"
    );
    assert_eq!(skipped[1].0, "shardId-000000000006");
    assert!(
        skipped[1].1.contains("leaseCounter is not a number"),
        "{skipped:?}"
    );
    let summary = plan.summary();
    assert_eq!(
        (summary.would_create, summary.skipped, summary.held_by_kcl),
        (6, 2, 4)
    );
    let printed = plan.to_string();
    println!("{printed}");
    assert!(printed.contains("dry run"), "{printed}");
    assert!(printed.contains("shardId-000000000005  49590338271490256608559692541000000000000000000000000005 (sub 3)"), "{printed}");
    assert!(
        printed.contains("skipped shardId-000000000006"),
        "{printed}"
    );
    assert!(
        printed.contains("\n6 to create, 2 items skipped\n"),
        "{printed}"
    );

    let report = plan.apply(&to).await.unwrap();
    println!("{report}");
    assert!(report.leases.iter().all(|l| l.action == Action::Created));
    assert!(
        report
            .to_string()
            .contains("\n6 created, 2 items skipped\n"),
        "{report}"
    );
    assert_eq!(report.summary().created, 6);
    let imported = leases_of(&to).await;
    assert_eq!(sorted(as_expected(&imported)), sorted(expected_rows()));
    assert!(imported
        .iter()
        .find(|l| l.key.as_str() == "shardId-000000000002")
        .unwrap()
        .is_finished());

    // Again, from the same plan and from a new one: nothing changes.
    let again = plan.apply(&to).await.unwrap();
    assert!(
        again.leases.iter().all(|l| l.action == Action::Exists),
        "{again}"
    );
    assert!(
        again
            .to_string()
            .contains("\n6 exist with the same values, 2 items skipped\n"),
        "{again}"
    );
    let replanned = kcl::plan(&client, &from, &to).await.unwrap();
    assert!(replanned.leases.iter().all(|l| l.action == Action::Exists));
    assert_eq!(leases_of(&to).await, imported, "counters, nonces and all");

    assert_eq!(
        items_of(&client, &from).await,
        source_before,
        "the source is only read"
    );

    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["leases"][2]["kcl"]["key"], "shardId-000000000002");
        assert_eq!(json["leases"][2]["checkpoint"], SHARD_END);
        assert_eq!(json["leases"][4]["parents"][0], "shardId-000000000002");
        assert_eq!(json["leases"][4]["action"]["action"], "created");
    }
}

#[tokio::test]
async fn an_existing_lease_that_differs_is_reported_and_never_overwritten() {
    let emulator = dynamo::Emulator::dynalite();
    let client = emulator.client();
    let from = dynamo::unique_table("kcl-source");
    dynamo::kcl_table(&client, &from, &kcl_items()).await;
    let to = emulator
        .store(DynamoConfig::new(dynamo::unique_table("kcl-dest")))
        .await;
    let existing = to
        .create(
            NewLease::new(key("shardId-000000000000")).with_checkpoint("1"),
            deadline(),
        )
        .await
        .unwrap()
        .done()
        .unwrap();
    let differs = Action::Differs {
        checkpoint: Some("1".into()),
        parents: vec![],
    };

    let plan = kcl::plan(&client, &from, &to).await.unwrap();
    let zero = &plan.leases[0];
    assert_eq!(zero.key().as_str(), "shardId-000000000000");
    assert_eq!(zero.action, differs);
    assert_eq!(plan.summary().would_create, 5);
    assert!(plan
        .to_string()
        .contains("exists and differs (checkpoint 1, parents -): not overwritten"));

    let report = plan.apply(&to).await.unwrap();
    assert_eq!(report.leases[0].action, differs);
    let summary = report.summary();
    assert_eq!((summary.created, summary.differs), (5, 1));
    let after = to
        .get(&key("shardId-000000000000"), deadline())
        .await
        .unwrap();
    assert_eq!(after.as_ref(), Some(&existing), "left exactly as it was");
}

/// Log lines written by the store, kept for the test to read.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[tokio::test]
async fn listing_names_kcl_and_the_import_in_the_warning_for_kcl_items_only() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let emulator = dynamo::Emulator::dynalite();
    let client = emulator.client();
    let table = dynamo::unique_table("kcl-listing");
    let store = emulator.store(DynamoConfig::new(&table)).await;
    // KCL writes into our table after we connected; and an item of ours lost its counter.
    for item in [
        kcl_items().remove(0),
        Item::from([
            ("leaseKey".to_owned(), s("ours-broken")),
            ("leaseTenure".to_owned(), n(1)),
            ("lastOp".to_owned(), s("op")),
        ]),
    ] {
        client
            .put_item()
            .table_name(&table)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }

    let page = store.list_page(None, deadline()).await.unwrap();
    assert_eq!((page.leases.len(), page.malformed), (0, 2));
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{logs}");
    let kcl: Vec<&&str> = warnings.iter().filter(|l| l.contains("KCL")).collect();
    assert_eq!(kcl.len(), 1, "{logs}");
    assert!(kcl[0].contains("shardId-000000000000"), "{logs}");
    assert!(
        kcl[0].contains(&format!("shardlease import-kcl --from {table} --to NEW")),
        "{logs}"
    );
}
