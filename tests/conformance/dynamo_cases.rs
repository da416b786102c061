//! Cases that only a DynamoDB server can have: table management, malformed items written by
//! somebody else, 1 MB scan pages, responses lost on the wire, and requests a connection
//! accepts and never answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};
use shardlease::lease::Incarnation;
use shardlease::lease::NewLease;
use shardlease::store::dynamodb::{ConnectError, DynamoConfig};
use shardlease::store::{LeaseStore, Outcome, StoreError};
use shardlease::{LeaseKey, WorkerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
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
            a_take_whose_answer_was_lost_is_ours_though_a_handoff_was_requested_since,
            session_writes_whose_answer_was_lost_are_recognised_as_ours,
            an_unreachable_endpoint_is_a_retryable_error,
            a_request_nobody_answers_ends_at_its_deadline_as_ambiguous,
            the_read_after_a_failed_condition_cannot_hang,
            table_setup_against_a_server_that_never_answers_gives_up_in_time,
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
        ConnectError::SchemaMismatch { table: t, detail } => {
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
        matches!(&err, ConnectError::TableNotFound { table } if table == &config.table_name),
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
            matches!(err, ConnectError::Store(StoreError::InvalidConfig(_))),
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
        matches!(&err, StoreError::Malformed { field, .. } if *field == "leaseOwner"),
        "{err:?}"
    );
    let me = WorkerId::new("w").unwrap();
    for name in ["counter-as-string", "no-counter"] {
        let err = store
            .take(&key(name), 0, &me, PROCESS, 1, deadline())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Malformed { field, .. } if *field == "leaseCounter"),
            "{name}: {err:?}"
        );
        let err = store
            .delete(&key(name), 0, 1, 1, deadline())
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
        .take(
            &lease.key,
            lease.nonce,
            &me,
            PROCESS,
            lease.counter,
            deadline(),
        )
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
            .renew(&lease.key, lease.nonce, &me, taken.tenure, None, deadline())
            .await
            .unwrap();
        assert!(outcome.is_done(), "renewal {round}: {outcome:?}");
    }
    lose.arm(1);
    let outcome = store
        .release(&lease.key, lease.nonce, &me, taken.tenure, deadline())
        .await
        .unwrap();
    assert!(outcome.is_done(), "release: {outcome:?}");
    assert_eq!(lose.lost(), 6);
}

/// The session protocol's writes after a lost answer: `open_session` and `give` by their
/// token, `beat`, `notify` and `end_session` by being safe to send again.
pub async fn session_writes_whose_answer_was_lost_are_recognised_as_ours(
    emulator: &Emulator,
    test: &str,
) {
    let (client, lose) = emulator.lossy_client();
    let store = emulator
        .store_with(client, DynamoConfig::new(unique_table(test)))
        .await;
    let (me, you) = (WorkerId::new("me").unwrap(), WorkerId::new("you").unwrap());
    let mine = Incarnation::new(21);

    lose.arm(1);
    let opened = store
        .open_session(&me, mine, Some(2), None, deadline())
        .await
        .unwrap();
    assert_eq!(lose.lost(), 1);
    match &opened {
        Outcome::Done(member) => {
            assert_eq!((member.heartbeat, member.incarnation), (1, Some(mine)))
        }
        other => panic!("an open whose answer was lost must read as done: {other:?}"),
    }
    let notices = vec!["k".to_owned()];
    lose.arm(1);
    let noticed = store.notify(&me, mine, &notices, deadline()).await.unwrap();
    assert!(noticed.is_done(), "notify: {noticed:?}");
    lose.arm(1);
    let beaten = store
        .beat(&me, mine, Some(2), None, &[], deadline())
        .await
        .unwrap();
    match &beaten {
        Outcome::Done(member) => {
            assert!(member.notices.contains("k"), "{member:?}");
            assert!(member.heartbeat >= 2, "{member:?}");
        }
        other => panic!("a beat whose answer was lost must read as done: {other:?}"),
    }
    assert_eq!(lose.lost(), 3);

    let lease = match store
        .create(NewLease::new(key("g")), deadline())
        .await
        .unwrap()
    {
        Outcome::Done(lease) => lease,
        other => panic!("create: {other:?}"),
    };
    lose.arm(1);
    let given = store
        .give(&lease.key, lease.nonce, &you, lease.counter, deadline())
        .await
        .unwrap();
    assert_eq!(lose.lost(), 4);
    match given {
        Outcome::Done(given) => assert_eq!(
            (given.owner.as_ref(), given.owner_incarnation, given.tenure),
            (Some(&you), None, lease.tenure + 1)
        ),
        other => panic!("a give whose answer was lost must read as done: {other:?}"),
    }

    let now = store
        .get_member(&me, true, deadline())
        .await
        .unwrap()
        .unwrap();
    lose.arm(1);
    let ended = store
        .end_session(&me, mine, now.heartbeat, deadline())
        .await
        .unwrap();
    assert_eq!(lose.lost(), 5);
    // Gone either way: the retry finds no record.
    assert!(
        matches!(
            ended,
            Outcome::LostRace { current: None } | Outcome::Done(_)
        ),
        "{ended:?}"
    );
    assert_eq!(store.get_member(&me, true, deadline()).await.unwrap(), None);
}

pub async fn an_ambiguous_error_is_recoverable_with_a_read(emulator: &Emulator, test: &str) {
    let (client, lose) = emulator.lossy_client();
    // One attempt and no retry: the caller gets the ambiguous error of the lost answer. (A
    // deadline of "now" would not do: the attempt would be abandoned before it was sent.)
    let mut config = DynamoConfig::new(unique_table(test));
    config.retry.max_attempts = 1;
    let store = emulator.store_with(client, config).await;
    let me = WorkerId::new("me").unwrap();
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    lose.arm(1);
    let err = store
        .take(
            &lease.key,
            lease.nonce,
            &me,
            PROCESS,
            lease.counter,
            deadline(),
        )
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

/// A take lands, its answer is lost, and before the store retries, a third worker asks for the
/// lease (`request_handoff` of the new owner's tenure). The retry's condition fails; the store
/// must still see that the take was its own.
pub async fn a_take_whose_answer_was_lost_is_ours_though_a_handoff_was_requested_since(
    emulator: &Emulator,
    test: &str,
) {
    let config = DynamoConfig::new(unique_table(test));
    let (client, lose) = emulator.lossy_client();
    let store = emulator.store_with(client, config.clone()).await;
    let me = WorkerId::new("me").unwrap();
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();

    let requested = Arc::new(Mutex::new(Vec::new()));
    let (third, answers) = (emulator.clone(), Arc::clone(&requested));
    let nonce = lease.nonce;
    lose.after_loss(move || {
        let (emulator, config) = (third.clone(), config.clone());
        let answer = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let other = emulator.store(config).await;
                let (me, third) = (
                    WorkerId::new("me").unwrap(),
                    WorkerId::new("third").unwrap(),
                );
                other
                    .request_handoff(&key("a"), nonce, &me, 1, &third, deadline())
                    .await
                    .map(|outcome| outcome.is_done())
            })
        })
        .join()
        .unwrap();
        answers
            .lock()
            .unwrap()
            .push(answer.map_err(|e| e.to_string()));
    });
    lose.arm(1);
    let taken = store
        .take(
            &lease.key,
            lease.nonce,
            &me,
            PROCESS,
            lease.counter,
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(lose.lost(), 1);
    assert_eq!(
        *requested.lock().unwrap(),
        [Ok(true)],
        "the third party's request landed between the take and its retry"
    );
    let taken = match taken {
        Outcome::Done(lease) => lease,
        other => panic!(
            "{}: a take that landed must read as done after a third party's request: {other:?}",
            emulator.name
        ),
    };
    assert_eq!((taken.owner.as_ref(), taken.tenure), (Some(&me), 1));
    assert_eq!(
        taken.handoff_to.as_ref().map(WorkerId::as_str),
        Some("third")
    );
    // The request itself stays recognisable: asked again, it is accepted as is.
    let third = WorkerId::new("third").unwrap();
    let again = store
        .request_handoff(&lease.key, lease.nonce, &me, 1, &third, deadline())
        .await
        .unwrap();
    assert!(again.is_done(), "{again:?}");
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

/// What a [`HoldingProxy`] does with the requests it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Passes everything on.
    Nothing,
    /// Swallows every request from now on: accepted, never answered (a half-open connection).
    Everything,
    /// Swallows the rest of a connection once a request for this operation (its
    /// `X-Amz-Target`, e.g. `GetItem`) goes through it.
    Operation(&'static str),
}

/// A TCP proxy in front of the emulator that can stop answering, the way a connection whose
/// far end went away (or a stalled load balancer) does: requests are accepted and never
/// answered, and nothing fails on its own.
struct HoldingProxy {
    addr: SocketAddr,
    hold: Arc<Mutex<Hold>>,
}

impl HoldingProxy {
    /// A proxy to `upstream` (`None`: nothing behind it, every request is held).
    async fn start(upstream: Option<SocketAddr>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let initial = if upstream.is_some() {
            Hold::Nothing
        } else {
            Hold::Everything
        };
        let hold = Arc::new(Mutex::new(initial));
        let shared = Arc::clone(&hold);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, Arc::clone(&shared)));
            }
        });
        Self { addr, hold }
    }

    /// For an emulator's endpoint (`http://127.0.0.1:port`).
    async fn before(emulator: &Emulator) -> Self {
        let authority = emulator
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/');
        Self::start(Some(authority.parse().expect("an http://ip:port endpoint"))).await
    }

    fn set(&self, hold: Hold) {
        *self.hold.lock().unwrap() = hold;
    }

    fn emulator(&self) -> Emulator {
        Emulator {
            name: "holding proxy",
            endpoint: format!("http://{}", self.addr),
        }
    }
}

async fn relay(client: TcpStream, upstream: Option<SocketAddr>, hold: Arc<Mutex<Hold>>) {
    let (mut from_client, mut to_client) = client.into_split();
    let server = match upstream {
        Some(addr) => TcpStream::connect(addr).await.ok(),
        None => None,
    };
    let Some(server) = server else {
        // Nothing behind: read and swallow until the client gives up.
        let mut buf = [0u8; 8192];
        while matches!(from_client.read(&mut buf).await, Ok(n) if n > 0) {}
        return;
    };
    let (mut from_server, mut to_server) = server.into_split();
    let up = async move {
        let mut buf = [0u8; 64 * 1024];
        let mut held = false;
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            held |= match *hold.lock().unwrap() {
                Hold::Nothing => false,
                Hold::Everything => true,
                Hold::Operation(op) => {
                    let target = format!("DynamoDB_20120810.{op}");
                    chunk
                        .windows(target.len())
                        .any(|w| w.eq_ignore_ascii_case(target.as_bytes()))
                }
            };
            if !held && to_server.write_all(chunk).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    };
    tokio::join!(up, down);
}

/// Fails the test instead of hanging it when a call does not return.
async fn must_return<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within 30 s: it hangs"))
}

fn is_unanswered(err: &StoreError, op: &str) -> bool {
    matches!(err, StoreError::Transient { operation, ambiguous: true, .. } if *operation == op)
}

/// Small attempt timeouts, so that the cases run in a second or two.
fn quick_config(test: &str) -> DynamoConfig {
    let mut config = DynamoConfig::new(unique_table(test));
    config.retry.attempt_timeout = Duration::from_millis(300);
    config
}

/// The margin past a deadline a call may take to return on a loaded test machine.
const LATE: Duration = Duration::from_millis(500);

pub async fn a_request_nobody_answers_ends_at_its_deadline_as_ambiguous(
    emulator: &Emulator,
    test: &str,
) {
    let proxy = HoldingProxy::before(emulator).await;
    let store = proxy.emulator().store(quick_config(test)).await;
    let me = WorkerId::new("me").unwrap();
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    let taken = store
        .take(
            &lease.key,
            lease.nonce,
            &me,
            PROCESS,
            lease.counter,
            deadline(),
        )
        .await
        .unwrap()
        .done()
        .unwrap();
    proxy.set(Hold::Everything);
    let k = &lease.key;
    let t = taken.tenure;
    let budget = Duration::from_secs(1);
    macro_rules! unanswered {
        ($op:literal, $deadline:ident => $call:expr) => {{
            let $deadline = Instant::now() + budget;
            let result = must_return($op, $call).await;
            let late = Instant::now().saturating_duration_since($deadline);
            match result {
                Err(err) => assert!(is_unanswered(&err, $op), "{}: {err:?}", $op),
                Ok(answer) => panic!("{}: answered through a held connection: {answer:?}", $op),
            }
            assert!(late < LATE, "{} returned {late:?} after its deadline", $op);
        }};
    }
    unanswered!("get", d => store.get(k, d));
    unanswered!("scan", d => store.list_page(None, d));
    let n = taken.nonce;
    unanswered!("renew", d => store.renew(k, n, &me, t, None, d));
    unanswered!("checkpoint", d => store.checkpoint(k, n, &me, t, 1, "7", d));
    unanswered!("take", d => store.take(k, n, &me, PROCESS, taken.counter, d));
    unanswered!("request_handoff", d => store.request_handoff(k, n, &me, t, &me, d));
    unanswered!("complete_handoff", d => store.complete_handoff(k, n, &me, t, &me, d));
    unanswered!("release", d => store.release(k, n, &me, t, d));
    unanswered!("delete", d => store.delete(k, n, taken.counter, t, d));
    unanswered!("create", d => store.create(NewLease::new(key("b")), d));
    unanswered!("heartbeat", d => store.heartbeat(&me, PROCESS, None, None, d));
    unanswered!("remove_member", d => store.remove_member(&me, None, d));

    // Once the network answers again, so does the store.
    proxy.set(Hold::Nothing);
    let renewed = store.renew(k, n, &me, t, None, deadline()).await.unwrap();
    assert!(renewed.is_done(), "{renewed:?}");
}

pub async fn the_read_after_a_failed_condition_cannot_hang(emulator: &Emulator, test: &str) {
    let proxy = HoldingProxy::before(emulator).await;
    let store = proxy.emulator().store(quick_config(test)).await;
    let (me, other) = (
        WorkerId::new("me").unwrap(),
        WorkerId::new("other").unwrap(),
    );
    let lease = store
        .create(NewLease::new(key("a")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    let taken = store
        .take(
            &lease.key,
            lease.nonce,
            &other,
            PROCESS,
            lease.counter,
            deadline(),
        )
        .await
        .unwrap()
        .done()
        .unwrap();
    // A renewal by the wrong owner fails its condition; where the server does not return the
    // item (dynalite), the store reads it, and that read is never answered.
    proxy.set(Hold::Operation("GetItem"));
    let deadline = Instant::now() + Duration::from_secs(1);
    let result = must_return(
        "renew",
        store.renew(&lease.key, lease.nonce, &me, taken.tenure, None, deadline),
    )
    .await;
    let late = Instant::now().saturating_duration_since(deadline);
    match result {
        // The server returned the current item with the refusal: no read was needed.
        Ok(Outcome::LostRace { current }) => {
            assert_eq!(current.and_then(|l| l.owner), Some(other));
        }
        Err(err) => assert!(is_unanswered(&err, "renew"), "{err:?}"),
        Ok(done) => panic!("a renewal by the wrong owner landed: {done:?}"),
    }
    assert!(late < LATE, "renew returned {late:?} after its deadline");
}

pub async fn table_setup_against_a_server_that_never_answers_gives_up_in_time(
    _emulator: &Emulator,
    test: &str,
) {
    let proxy = HoldingProxy::start(None).await;
    let mut config = quick_config(test);
    config.active_timeout = Duration::from_secs(2);
    let started = Instant::now();
    let err = must_return(
        "connect",
        shardlease::store::dynamodb::DynamoStore::connect(proxy.emulator().client(), config),
    )
    .await
    .unwrap_err();
    let ConnectError::Store(err) = err else {
        panic!("expected an unanswered request, got {err:?}");
    };
    assert!(is_unanswered(&err, "describe_table"), "{err:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2) + LATE, "setup took {took:?}");
}
