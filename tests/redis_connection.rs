//! The Redis store's connection on a real network: a half-open connection (accepted, then
//! never answered again, never closed) must not hang the store for good. A proxy in front of
//! the redis-server at `SHARDLEASE_REDIS_URL` plays it: while it holds, every connection that
//! carries a byte goes dead for good (its bytes swallowed both ways, its socket left open),
//! as when the server's host vanished or a NAT forgot the flow; after the hold, new
//! connections pass.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shardlease::lease::NewLease;
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::{LeaseStore, RetryPolicy};
use shardlease::LeaseKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn url() -> String {
    std::env::var("SHARDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The proxy; `holding` turns the hold on and off.
struct HoldingProxy {
    url: String,
    holding: Arc<AtomicBool>,
}

impl HoldingProxy {
    async fn start() -> Self {
        let info = redis::Client::open(url()).unwrap();
        let upstream = match info.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => panic!("the proxy needs a TCP server, not {other:?}"),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let holding = Arc::new(AtomicBool::new(false));
        let holding2 = holding.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let dead = Arc::new(AtomicBool::new(holding2.load(Ordering::SeqCst)));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let (h, d) = (holding2.clone(), dead.clone());
                tokio::spawn(copy(client_read, server_write, h, d));
                tokio::spawn(copy(server_read, client_write, holding2.clone(), dead));
            }
        });
        Self { url, holding }
    }
}

/// Copies one way until the connection goes dead; then reads and drops everything, keeping
/// the socket open.
async fn copy(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    holding: Arc<AtomicBool>,
    dead: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    // `to` stays open while the connection is dead: nothing is closed, nothing answered.
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if holding.load(Ordering::SeqCst) {
            dead.store(true, Ordering::SeqCst);
        }
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config(test: &str, proxy: &HoldingProxy, attempt_timeout: Duration) -> RedisConfig {
    let prefix = format!("test-{test}-{}", uuid::Uuid::new_v4().simple());
    RedisConfig::new(proxy.url.clone(), "leases")
        .key_prefix(prefix)
        .retry(RetryPolicy::default().attempt_timeout(attempt_timeout))
}

async fn connect(config: RedisConfig) -> RedisStore {
    RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("no redis-server at {} (SHARDLEASE_REDIS_URL): {e}", url()))
}

fn within(d: Duration) -> Instant {
    Instant::now() + d
}

/// Reads and lists through the store; panics with `what` if either fails.
async fn reads_and_lists(store: &RedisStore, key: &LeaseKey, deadline: Instant, what: &str) {
    let lease = store.get(key, deadline).await;
    assert!(
        matches!(&lease, Ok(Some(l)) if &l.key == key),
        "{what}: get: {lease:?}"
    );
    let page = store.list_page(None, deadline).await;
    assert!(
        matches!(&page, Ok(p) if p.leases.len() == 1),
        "{what}: list: {page:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_times_out_moves_the_store_to_a_new_connection() {
    let proxy = HoldingProxy::start().await;
    // The crate's response timeout (the attempt timeout) is what fails the requests here.
    let store = connect(config("timeout", &proxy, Duration::from_millis(300))).await;
    let key = LeaseKey::new("shard-1").unwrap();
    let created = store
        .create(NewLease::new(key.clone()), within(Duration::from_secs(10)))
        .await;
    assert!(created.unwrap().is_done());

    proxy.holding.store(true, Ordering::SeqCst);
    let held = store.get(&key, within(Duration::from_secs(2))).await;
    assert!(
        held.is_err(),
        "nothing can answer through the hold: {held:?}"
    );

    proxy.holding.store(false, Ordering::SeqCst);
    // The connection the hold killed never answers again: only a new one can.
    reads_and_lists(
        &store,
        &key,
        within(Duration::from_secs(10)),
        "after the hold",
    )
    .await;
    assert!(store.connections_replaced() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_caller_gave_up_on_moves_the_store_to_a_new_connection() {
    let proxy = HoldingProxy::start().await;
    // The crate's response timeout is far away: here the caller's deadline ends the wait, and
    // the request is dropped before any reply or timeout of the crate's.
    let store = connect(config("dropped", &proxy, Duration::from_secs(30))).await;
    let key = LeaseKey::new("shard-1").unwrap();
    let created = store
        .create(NewLease::new(key.clone()), within(Duration::from_secs(10)))
        .await;
    assert!(created.unwrap().is_done());

    proxy.holding.store(true, Ordering::SeqCst);
    let held = store.get(&key, within(Duration::from_millis(300))).await;
    assert!(
        held.is_err(),
        "nothing can answer through the hold: {held:?}"
    );

    proxy.holding.store(false, Ordering::SeqCst);
    reads_and_lists(
        &store,
        &key,
        within(Duration::from_secs(5)),
        "after the hold",
    )
    .await;
    assert_eq!(store.connections_replaced(), 1);
}
