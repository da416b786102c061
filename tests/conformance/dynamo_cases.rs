//! Cases that only a DynamoDB server can have: table management, malformed items written by
//! somebody else, 1 MB scan pages, and responses lost on the wire.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};
use shardlease::lease::Incarnation;
use shardlease::store::dynamodb::{schema, DynamoConfig};
use shardlease::store::{LeaseStore, Outcome, StoreError};
use shardlease::{LeaseKey, NewLease, WorkerId};
use tokio::time::Instant;

use super::dynamo::{unique_table, Emulator};

/// The process every case's writes come from.
const PROCESS: Incarnation = Incarnation::new(1);

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

/// Expands to one test per case over an emulator.
#[macro_export]
macro_rules! dynamo_suite {
    ($emulator:expr) => {
        $crate::dynamo_suite!(@cases $emulator;
            a_fresh_server_gets_an_active_table,
            a_table_with_another_key_schema_is_refused,
            a_missing_table_is_reported_when_creation_is_off,
            bad_configuration_is_refused_before_any_request,
            malformed_items_are_counted_skipped_and_left_alone,
            listing_continues_past_one_megabyte_pages,
            a_write_whose_answer_was_lost_is_recognised_as_ours,
            an_ambiguous_error_is_recoverable_with_a_read,
            an_unreachable_endpoint_is_a_retryable_error,
        );
    };
    (@cases $emulator:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::conformance::dynamo_cases::$case(&$emulator, stringify!($case)).await;
            }
        )*
    };
}

pub async fn a_fresh_server_gets_an_active_table(emulator: &Emulator, test: &str) {
    let mut config = DynamoConfig::new(unique_table(test));
    config.tags = vec![("team".into(), "streams".into())];
    let store = emulator.store(config.clone()).await;
    let described = emulator
        .client()
        .describe_table()
        .table_name(&config.table_name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(described.table_status(), Some(&TableStatus::Active));
    // The store is usable at once, and a second connect validates instead of creating.
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap();
    assert!(lease.is_done());
    emulator.store(config).await;
}

pub async fn a_table_with_another_key_schema_is_refused(emulator: &Emulator, test: &str) {
    let table = unique_table(test);
    emulator
        .client()
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let err = shardlease::store::dynamodb::DynamoStore::connect(
        emulator.client(),
        DynamoConfig::new(&table),
    )
    .await
    .unwrap_err();
    match &err {
        StoreError::SchemaMismatch { table: t, detail } => {
            assert_eq!(t, &table);
            assert!(
                detail.contains("leaseKey (HASH)") && detail.contains("id (HASH)"),
                "{detail}"
            );
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
}

pub async fn a_missing_table_is_reported_when_creation_is_off(emulator: &Emulator, test: &str) {
    let mut config = DynamoConfig::new(unique_table(test));
    config.create_if_missing = false;
    let err = shardlease::store::dynamodb::DynamoStore::connect(emulator.client(), config.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::TableNotFound { table } if table == &config.table_name),
        "{err:?}"
    );
    assert!(err.to_string().contains("create_if_missing"));
}

pub async fn bad_configuration_is_refused_before_any_request(emulator: &Emulator, _test: &str) {
    for name in ["ab", "has space", "sl#ash"] {
        let err = shardlease::store::dynamodb::DynamoStore::connect(
            emulator.client(),
            DynamoConfig::new(name),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidConfig(_)),
            "{name}: {err:?}"
        );
    }
    let mut config = DynamoConfig::new("fine-name");
    config.page_limit = Some(0);
    let err = shardlease::store::dynamodb::DynamoStore::connect(emulator.client(), config)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("page_limit"), "{err}");
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.into())
}

pub async fn malformed_items_are_counted_skipped_and_left_alone(emulator: &Emulator, test: &str) {
    let config = DynamoConfig::new(unique_table(test));
    let store = emulator.store(config.clone()).await;
    assert!(store
        .create(NewLease::new(key("good")), deadline())
        .await
        .unwrap()
        .is_done());
    let base = |k: &str| {
        HashMap::from([
            ("leaseKey".to_owned(), s(k)),
            ("leaseCounter".to_owned(), n("1")),
            ("leaseTenure".to_owned(), n("1")),
        ])
    };
    let mut bad: Vec<(&str, HashMap<String, AttributeValue>)> = Vec::new();
    let mut counter_as_string = base("counter-as-string");
    counter_as_string.insert("leaseCounter".into(), s("seven"));
    bad.push(("leaseCounter", counter_as_string));
    let mut no_counter = base("no-counter");
    no_counter.remove("leaseCounter");
    bad.push(("leaseCounter", no_counter));
    let mut negative = base("negative-tenure");
    negative.insert("leaseTenure".into(), n("-3"));
    bad.push(("leaseTenure", negative));
    let mut owner_number = base("owner-number");
    owner_number.insert("leaseOwner".into(), n("5"));
    bad.push(("leaseOwner", owner_number));
    let mut parents = base("parents-numbers");
    parents.insert("parentLeaseKeys".into(), AttributeValue::L(vec![n("1")]));
    bad.push(("parentLeaseKeys", parents));
    let mut checkpoint = base("checkpoint-bool");
    checkpoint.insert("checkpoint".into(), AttributeValue::Bool(true));
    bad.push(("checkpoint", checkpoint));
    bad.push(("leaseKey", base("shardlease#unknown")));
    let client = emulator.client();
    for (_, item) in &bad {
        client
            .put_item()
            .table_name(&config.table_name)
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }

    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.malformed, bad.len());
    assert_eq!(snapshot.leases.len(), 1);
    assert_eq!(store.malformed_items_seen(), bad.len() as u64);

    // A direct read names the field. A write whose condition cannot hold on the item (its
    // counter is unreadable) reports the decoding error and changes nothing. (The library
    // never writes an item it has not decoded: listings skip them.)
    let err = store
        .get(&key("owner-number"), deadline())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Malformed { field, .. } if *field == schema::OWNER),
        "{err:?}"
    );
    let me = WorkerId::new("w").unwrap();
    for name in ["counter-as-string", "no-counter"] {
        let err = store
            .take(&key(name), &me, PROCESS, 1, deadline())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Malformed { field, .. } if *field == schema::COUNTER),
            "{name}: {err:?}"
        );
        let err = store
            .delete(&key(name), 1, 1, deadline())
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Malformed { .. }),
            "{name}: {err:?}"
        );
    }
    for (_, item) in &bad {
        let stored = client
            .get_item()
            .table_name(&config.table_name)
            .key("leaseKey", item["leaseKey"].clone())
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap_or_default();
        assert_eq!(
            &stored, item,
            "a malformed item must be left exactly as it was"
        );
    }
}

pub async fn listing_continues_past_one_megabyte_pages(emulator: &Emulator, test: &str) {
    let store = emulator.store(DynamoConfig::new(unique_table(test))).await;
    let checkpoint = "x".repeat(8 * 1024);
    let count = 200; // 200 x 8 KiB = 1.6 MiB
    for i in 0..count {
        let new = NewLease::new(key(&format!("big-{i:03}"))).with_checkpoint(checkpoint.clone());
        assert!(store.create(new, deadline()).await.unwrap().is_done());
    }
    let first = store.list_page(None, deadline()).await.unwrap();
    let snapshot = store.snapshot(deadline()).await.unwrap();
    assert_eq!(snapshot.leases.len(), count);
    assert!(snapshot
        .leases
        .iter()
        .all(|l| l.checkpoint.as_deref() == Some(&checkpoint)));
    assert!(
        first.next.is_some() && first.leases.len() < count,
        "{} answered 1.6 MiB in one page of {} items",
        emulator.name,
        first.leases.len()
    );
}

pub async fn a_write_whose_answer_was_lost_is_recognised_as_ours(emulator: &Emulator, test: &str) {
    let (client, lose) = emulator.lossy_client();
    let store = emulator
        .store_with(client, DynamoConfig::new(unique_table(test)))
        .await;
    let me = WorkerId::new("me").unwrap();

    lose.arm(1);
    let created = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap();
    assert_eq!(lose.lost(), 1);
    let lease = match created {
        Outcome::Done(lease) => lease,
        other => panic!("a create whose answer was lost must read as done: {other:?}"),
    };

    lose.arm(1);
    let taken = store
        .take(&lease.key, &me, PROCESS, lease.counter, deadline())
        .await
        .unwrap();
    assert_eq!(lose.lost(), 2);
    let taken = match taken {
        Outcome::Done(lease) => lease,
        other => panic!("a take whose answer was lost must read as done: {other:?}"),
    };
    assert_eq!((taken.owner.as_ref(), taken.tenure), (Some(&me), 1));
    assert!(taken.is_owned_by_incarnation(&me, PROCESS));

    for round in 0..3 {
        lose.arm(1);
        let outcome = store
            .renew(&lease.key, &me, taken.tenure, None, deadline())
            .await
            .unwrap();
        assert!(outcome.is_done(), "renewal {round}: {outcome:?}");
    }
    lose.arm(1);
    let outcome = store
        .release(&lease.key, &me, taken.tenure, deadline())
        .await
        .unwrap();
    assert!(outcome.is_done(), "release: {outcome:?}");
    assert_eq!(lose.lost(), 6);
}

pub async fn an_ambiguous_error_is_recoverable_with_a_read(emulator: &Emulator, test: &str) {
    let (client, lose) = emulator.lossy_client();
    let store = emulator
        .store_with(client, DynamoConfig::new(unique_table(test)))
        .await;
    let me = WorkerId::new("me").unwrap();
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    // No time left for a retry: the caller gets the ambiguous error...
    lose.arm(1);
    let err = store
        .take(&lease.key, &me, PROCESS, lease.counter, Instant::now())
        .await
        .unwrap_err();
    assert!(err.is_ambiguous() && err.is_retryable(), "{err:?}");
    // ...and recovers as documented: the take landed if the lease is our process's one
    // tenure on.
    let now = store.get(&lease.key, deadline()).await.unwrap().unwrap();
    assert_eq!(
        (now.owner.as_ref(), now.tenure),
        (Some(&me), lease.tenure + 1)
    );
    assert!(now.is_owned_by_incarnation(&me, PROCESS));
}

pub async fn an_unreachable_endpoint_is_a_retryable_error(_emulator: &Emulator, test: &str) {
    let nowhere = Emulator {
        name: "nowhere",
        endpoint: "http://127.0.0.1:9".into(),
    };
    let started = Instant::now();
    let err = shardlease::store::dynamodb::DynamoStore::connect(
        nowhere.client(),
        DynamoConfig::new(unique_table(test)),
    )
    .await
    .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
