//! The conformance suite on the Redis store, against a real redis-server at
//! `SHARDLEASE_REDIS_URL` (default `redis://127.0.0.1:6379`; `scripts/test.sh` starts one and
//! sets it), each test on a key prefix of its own; then the cases only Redis has: a lost answer
//! recognised by its token, `NOSCRIPT` after `SCRIPT FLUSH`, malformed hashes skipped and
//! never written, paging with members, tables under different prefixes, failed connects; and
//! in `tests/redis_cases/`, number and text fields checked by the scripts exactly as by the
//! decoder, and a lost answer for every other conditional write.

mod conformance;
mod redis_cases;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shardlease::lease::{Incarnation, NewLease};
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::{Jitter, LeaseStore, Misconfiguration, Outcome, RetryPolicy, StoreError};
use shardlease::{LeaseKey, WorkerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn url() -> String {
    std::env::var("SHARDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A key prefix no other test (or earlier run) uses.
fn unique_prefix(test: &str) -> String {
    format!("test-{test}-{}", uuid::Uuid::new_v4().simple())
}

fn config(test: &str) -> RedisConfig {
    RedisConfig::new(url(), "leases").key_prefix(unique_prefix(test))
}

async fn connect(config: RedisConfig) -> RedisStore {
    let url = config.url.clone();
    RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("no redis-server at {url} (SHARDLEASE_REDIS_URL): {e}"))
}

/// A plain connection of the test's own, to look at and change what the store wrote.
async fn side() -> redis::aio::MultiplexedConnection {
    redis::Client::open(url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Redis as a conformance target.
struct Redis;

impl conformance::Target for Redis {
    type Store = RedisStore;

    async fn store(&self, test: &str) -> RedisStore {
        connect(config(test)).await
    }

    async fn paged_store(&self, test: &str, page: u32) -> RedisStore {
        connect(config(test).page_size(page)).await
    }
}

crate::conformance_suite!(Redis);

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

fn key(name: &str) -> LeaseKey {
    LeaseKey::new(name).unwrap()
}

fn worker(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

const PROCESS: Incarnation = Incarnation::new(7);

/// A TCP proxy in front of the server that can swallow the answer to the next script: the
/// script runs, its answer is dropped and the connection closed, as when a connection is
/// reset after the server ran the command.
struct Proxy {
    url: String,
    armed: Arc<AtomicBool>,
    swallowed: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start() -> Self {
        let info = redis::Client::open(url()).unwrap();
        let upstream = match info.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => panic!("the proxy needs a TCP server, not {other:?}"),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let armed = Arc::new(AtomicBool::new(false));
        let swallowed = Arc::new(AtomicUsize::new(0));
        let (armed2, swallowed2) = (armed.clone(), swallowed.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(pipe(client, server, armed2.clone(), swallowed2.clone()));
            }
        });
        Self {
            url,
            armed,
            swallowed,
        }
    }
}

/// Copies both ways; once a script passes while the proxy is armed, the next answer from the
/// server is dropped and both connections closed.
async fn pipe(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    swallowed: Arc<AtomicUsize>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let doomed = Arc::new(AtomicBool::new(false));
    let doomed2 = doomed.clone();
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let is_script = buf[..n]
                .windows(7)
                .any(|w| w.eq_ignore_ascii_case(b"EVALSHA"));
            if is_script && armed.swap(false, Ordering::SeqCst) {
                doomed2.store(true, Ordering::SeqCst);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if doomed.load(Ordering::SeqCst) {
            swallowed.fetch_add(1, Ordering::SeqCst);
            break;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    upstream.abort();
}

#[tokio::test]
async fn a_take_whose_answer_was_lost_is_recognised_by_its_token() {
    let proxy = Proxy::start().await;
    let store = connect(config("lost_take").url(&proxy.url)).await;
    let lease = store
        .create(NewLease::new(key("shard-1")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let me = worker("a");
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
    assert_eq!(
        proxy.swallowed.load(Ordering::SeqCst),
        1,
        "one answer was lost"
    );
    // The retry found the counter moved, but by our own write: Done, not a lost race.
    let Outcome::Done(taken) = taken else {
        panic!("the landed take must be recognised, got {taken:?}");
    };
    assert_eq!((taken.owner.as_ref(), taken.tenure), (Some(&me), 1));
    assert_eq!(taken.owner_incarnation, Some(PROCESS));

    // A write whose answer was lost and that somebody else's write then covers is a lost race:
    // the lease is no longer the caller's.
    let thief = worker("b");
    let direct = connect(config("unused").key_prefix(store_prefix(&store))).await;
    let racing = {
        let store2 = direct.clone();
        let (key, thief) = (taken.key.clone(), thief.clone());
        let counter = taken.counter + 1;
        async move {
            // Waits for the renewal below to land, then takes over on the direct connection.
            loop {
                let now = store2.get(&key, deadline()).await.unwrap().unwrap();
                if now.counter == counter {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            store2
                .take(&key, taken.nonce, &thief, PROCESS, counter, deadline())
                .await
                .unwrap()
        }
    };
    let slow_retries = RedisConfig::new(proxy.url.clone(), "leases")
        .key_prefix(store_prefix(&store))
        .retry(
            // The retry comes 150 to 300 ms after the lost answer: time for the thief.
            RetryPolicy::default()
                .base_delay(Duration::from_millis(300))
                .jitter(Jitter::Equal),
        );
    let slow = connect(slow_retries).await;
    proxy.armed.store(true, Ordering::SeqCst);
    let (released, stolen) = tokio::join!(
        slow.release(&taken.key, taken.nonce, &me, taken.tenure, deadline()),
        racing
    );
    assert!(stolen.is_done(), "{stolen:?}");
    match released.unwrap() {
        Outcome::LostRace { current: Some(now) } => assert_eq!(now.owner, Some(thief)),
        other => panic!("a covered write is a lost race, got {other:?}"),
    }
}

/// The key prefix of `store`'s table, read back from its index key.
fn store_prefix(store: &RedisStore) -> String {
    let index = store.index_key();
    index[..index.find(":{").unwrap()].to_owned()
}

#[tokio::test]
async fn scripts_flushed_from_the_server_are_loaded_again() {
    let store = connect(config("noscript")).await;
    let me = worker("a");
    let lease = store
        .create(NewLease::new(key("shard-1")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    let mut side = side().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut side)
        .await
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
        .unwrap();
    assert!(taken.is_done(), "{taken:?}");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut side)
        .await
        .unwrap();
    let renewed = store
        .renew(&lease.key, lease.nonce, &me, 1, None, deadline())
        .await
        .unwrap();
    assert_eq!(renewed.done().unwrap().counter, 2);
}

async fn hash(side: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(side)
        .await
        .unwrap();
    fields.sort();
    fields
}

/// A hash's fields and values, as the test writes them by hand.
type HashFields<'a> = &'a [(&'a str, &'a str)];

#[tokio::test]
async fn a_malformed_hash_is_skipped_in_listings_and_never_written() {
    let store = connect(config("malformed")).await;
    for name in ["shard-1", "shard-3"] {
        assert!(store
            .create(NewLease::new(key(name)), deadline())
            .await
            .unwrap()
            .is_done());
    }
    let mut side = side().await;
    // A lease whose counter is not a number, one whose owner is empty, and a membership
    // record whose heartbeat is negative: each in the index, as a script would have put it.
    let bad: [(&str, HashFields); 3] = [
        (
            "shard-2",
            &[
                ("leaseKey", "shard-2"),
                ("leaseCounter", "x"),
                ("leaseTenure", "0"),
            ],
        ),
        (
            "shard-4",
            &[
                ("leaseKey", "shard-4"),
                ("leaseCounter", "0"),
                ("leaseTenure", "0"),
                ("leaseOwner", ""),
            ],
        ),
        (
            "shardlease#member#w",
            &[
                ("leaseKey", "shardlease#member#w"),
                ("heartbeat", "-1"),
                ("workerIncarnation", "7"),
            ],
        ),
    ];
    for (name, fields) in &bad {
        let () = redis::cmd("HSET")
            .arg(store.item_key(name))
            .arg(*fields)
            .query_async(&mut side)
            .await
            .unwrap();
        let () = redis::cmd("ZADD")
            .arg(store.index_key())
            .arg(0)
            .arg(*name)
            .query_async(&mut side)
            .await
            .unwrap();
    }
    let before: Vec<_> = {
        let mut all = Vec::new();
        for (name, _) in &bad {
            all.push(hash(&mut side, &store.item_key(name)).await);
        }
        all
    };

    let snapshot = store.snapshot(deadline()).await.unwrap();
    let keys: Vec<_> = snapshot.leases.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["shard-1", "shard-3"]);
    assert!(snapshot.members.is_empty());
    assert_eq!(snapshot.malformed, 3);
    assert_eq!(store.malformed_items_seen(), 3);
    assert!(store.list_members(deadline()).await.unwrap().is_empty());

    let malformed_field = |result: Result<_, StoreError>| match result {
        Err(StoreError::Malformed { field, .. }) => field,
        other => panic!("expected a malformed-item error, got {other:?}"),
    };
    let me = worker("a");
    assert_eq!(
        malformed_field(store.get(&key("shard-2"), deadline()).await.map(|_| ())),
        "leaseCounter"
    );
    assert_eq!(
        malformed_field(
            store
                .take(&key("shard-2"), 0, &me, PROCESS, 0, deadline())
                .await
                .map(|_| ())
        ),
        "leaseCounter"
    );
    assert_eq!(
        malformed_field(
            store
                .take(&key("shard-4"), 0, &me, PROCESS, 0, deadline())
                .await
                .map(|_| ())
        ),
        "leaseOwner"
    );
    assert_eq!(
        malformed_field(
            store
                .give(&key("shard-4"), 0, &me, 0, deadline())
                .await
                .map(|_| ())
        ),
        "leaseOwner"
    );
    assert_eq!(
        malformed_field(
            store
                .delete(&key("shard-4"), 0, 0, 0, deadline())
                .await
                .map(|_| ())
        ),
        "leaseOwner"
    );
    let w = worker("w");
    assert_eq!(
        malformed_field(
            store
                .beat(&w, PROCESS, None, None, &[], deadline())
                .await
                .map(|_| ())
        ),
        "heartbeat"
    );
    assert_eq!(
        malformed_field(
            store
                .heartbeat(&w, PROCESS, None, None, deadline())
                .await
                .map(|_| ())
        ),
        "heartbeat"
    );
    assert_eq!(
        malformed_field(store.remove_member(&w, None, deadline()).await.map(|_| ())),
        "heartbeat"
    );
    assert_eq!(
        malformed_field(
            store
                .notify(&w, PROCESS, &["n".into()], deadline())
                .await
                .map(|_| ())
        ),
        "heartbeat"
    );

    for ((name, _), was) in bad.iter().zip(before) {
        assert_eq!(
            hash(&mut side, &store.item_key(name)).await,
            was,
            "{name} was written"
        );
    }
}

#[tokio::test]
async fn listings_page_through_leases_and_members_in_key_order() {
    let store = connect(config("paging").page_size(3)).await;
    for i in 0..10 {
        assert!(store
            .create(NewLease::new(key(&format!("shard-{i:02}"))), deadline())
            .await
            .unwrap()
            .is_done());
    }
    for w in ["w1", "w2", "w3", "w4"] {
        assert!(store
            .open_session(&worker(w), PROCESS, None, None, deadline())
            .await
            .unwrap()
            .is_done());
    }
    let (mut pages, mut leases, mut members) = (0, Vec::new(), Vec::new());
    let mut from = None;
    loop {
        let page = store.list_page(from, deadline()).await.unwrap();
        pages += 1;
        assert!(page.leases.len() + page.members.len() <= 3);
        leases.extend(page.leases.into_iter().map(|l| l.key.to_string()));
        members.extend(page.members.into_iter().map(|m| m.worker.to_string()));
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 5, "14 items in pages of 3");
    let expected: Vec<_> = (0..10).map(|i| format!("shard-{i:02}")).collect();
    assert_eq!(leases, expected, "every lease once, in key order");
    assert_eq!(members, ["w1", "w2", "w3", "w4"]);
    let listed: Vec<_> = store
        .list_members(deadline())
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.worker.to_string())
        .collect();
    assert_eq!(
        listed,
        ["w1", "w2", "w3", "w4"],
        "members alone, over two pages"
    );
}

#[tokio::test]
async fn tables_under_different_prefixes_do_not_see_each_other() {
    let first = connect(config("prefix-a")).await;
    let second = connect(config("prefix-b")).await;
    let lease = first
        .create(NewLease::new(key("shard-1")), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(second.get(&lease.key, deadline()).await.unwrap(), None);
    assert_eq!(
        second.snapshot(deadline()).await.unwrap(),
        Default::default()
    );
    let again = second
        .create(NewLease::new(key("shard-1")), deadline())
        .await
        .unwrap();
    assert!(
        again.is_done(),
        "the same key in another table is another lease"
    );
    assert!(first
        .take(
            &lease.key,
            lease.nonce,
            &worker("a"),
            PROCESS,
            0,
            deadline()
        )
        .await
        .unwrap()
        .is_done());
    assert_eq!(
        second
            .get(&lease.key, deadline())
            .await
            .unwrap()
            .unwrap()
            .owner,
        None
    );
}

#[tokio::test]
async fn a_connect_to_a_closed_port_or_with_wrong_credentials_fails_at_once_and_says_why() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let started = Instant::now();
    let err = RedisStore::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}"), "t"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "nothing listens at redis://127.0.0.1:{port} (connection refused): is the endpoint \
             right, is the service (or the emulator) running?"
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    let info = redis::Client::open(url()).unwrap();
    let redis::ConnectionAddr::Tcp(host, port) = info.get_connection_info().addr().clone() else {
        panic!("needs a TCP server");
    };
    let wrong = format!("redis://nosuchuser:wrong@{host}:{port}");
    let err = RedisStore::connect(RedisConfig::new(wrong, "t"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Misconfigured {
                problem: Misconfiguration::RedisAuth,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(!err.to_string().contains("wrong@"), "{err}");
}
