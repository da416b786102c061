//! The Redis store over TLS (`rediss://`, feature `redis-tls`) against the TLS-only
//! redis-server `scripts/emulators.sh` starts: `SHARDLEASE_REDIS_TLS_URL` (default
//! `rediss://127.0.0.1:6391`) with the certificate authority in `SHARDLEASE_REDIS_TLS_CA`
//! (default `.emulators/tls/ca.pem`, the self-signed certificate made there).

use std::path::PathBuf;
use std::time::Duration;

use shardlease::lease::{Incarnation, NewLease};
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::{LeaseStore, RetryPolicy, StoreError};
use shardlease::{LeaseKey, WorkerId};
use tokio::time::Instant;

fn tls_url() -> String {
    std::env::var("SHARDLEASE_REDIS_TLS_URL").unwrap_or_else(|_| "rediss://127.0.0.1:6391".into())
}

fn ca_file() -> PathBuf {
    std::env::var_os("SHARDLEASE_REDIS_TLS_CA").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".emulators/tls/ca.pem"),
        PathBuf::from,
    )
}

fn config(url: String) -> RedisConfig {
    let prefix = format!("test-tls-{}", uuid::Uuid::new_v4().simple());
    RedisConfig::new(url, "leases")
        .key_prefix(prefix)
        .retry(RetryPolicy::default().attempt_timeout(Duration::from_secs(2)))
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

#[tokio::test]
async fn a_store_over_tls_trusting_the_servers_ca_does_what_a_plain_one_does() {
    let store = RedisStore::connect(config(tls_url()).ca_file(ca_file()))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no TLS redis-server at {} with CA {} (SHARDLEASE_REDIS_TLS_URL, \
                 SHARDLEASE_REDIS_TLS_CA; scripts/emulators.sh start): {e}",
                tls_url(),
                ca_file().display()
            )
        });
    let key = LeaseKey::new("shard-1").unwrap();
    let lease = store
        .create(NewLease::new(key.clone()), deadline())
        .await
        .unwrap()
        .done()
        .unwrap();
    let me = WorkerId::new("a").unwrap();
    let taken = store
        .take(
            &key,
            lease.nonce,
            &me,
            Incarnation::new(1),
            lease.counter,
            deadline(),
        )
        .await
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(taken.owner, Some(me));
    let page = store.list_page(None, deadline()).await.unwrap();
    assert_eq!(page.leases.len(), 1);
}

#[tokio::test]
async fn a_server_certificate_nobody_trusts_is_refused_at_connect() {
    // The system's trust store does not know the self-signed test certificate.
    let started = Instant::now();
    let refused = RedisStore::connect(config(tls_url())).await;
    let err = refused.expect_err("a certificate no authority vouches for must be refused");
    let text = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(
        text.to_lowercase().contains("certificate"),
        "the error should say the certificate is the problem: {text}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    println!("refused: {err}");
}

#[tokio::test]
async fn plain_redis_to_the_tls_port_fails_at_once_and_a_missing_ca_file_is_named() {
    let plain = tls_url().replacen("rediss://", "redis://", 1);
    let started = Instant::now();
    let refused = RedisStore::connect(config(plain)).await;
    assert!(refused.is_err(), "plain text to a TLS port cannot work");
    assert!(started.elapsed() < Duration::from_secs(10));

    let missing = RedisStore::connect(config(tls_url()).ca_file("/nonexistent/ca.pem")).await;
    match missing {
        Err(StoreError::InvalidConfig(err)) => {
            let text = err.to_string();
            assert!(
                text.contains("CA file") && text.contains("/nonexistent/ca.pem"),
                "{text}"
            );
        }
        other => panic!("a missing CA file is a configuration error, got {other:?}"),
    }
}
