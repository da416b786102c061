//! The cases only the Redis store has, beyond those in `tests/conformance_redis.rs`, one file
//! per behaviour. They use the helpers of that file (its crate root), and these.

mod lost_answers;
mod numbers;
mod texts;

use shardlease::store::redis::RedisStore;
use shardlease::store::StoreResult;
use shardlease::StoreError;

/// The test's own connection, to write hashes as no script would.
type Side = redis::aio::MultiplexedConnection;

/// A hash as read back: field and raw value, in field order.
type Hash = Vec<(String, Vec<u8>)>;

async fn raw_hash(side: &mut Side, item: &str) -> Hash {
    let mut fields: Hash = redis::cmd("HGETALL")
        .arg(item)
        .query_async(side)
        .await
        .unwrap();
    fields.sort();
    fields
}

/// Writes `fields` as the whole hash of item `name`, and the key into the index, as a script
/// would; returns the hash as read back.
async fn put_raw<V: redis::ToRedisArgs>(
    side: &mut Side,
    store: &RedisStore,
    name: &str,
    fields: &[(&str, V)],
) -> Hash {
    let item = store.item_key(name);
    let () = redis::pipe()
        .cmd("DEL")
        .arg(&item)
        .ignore()
        .cmd("HSET")
        .arg(&item)
        .arg(fields)
        .ignore()
        .cmd("ZADD")
        .arg(store.index_key())
        .arg(0)
        .arg(name)
        .ignore()
        .query_async(side)
        .await
        .unwrap();
    raw_hash(side, &item).await
}

/// Asserts that a write whose condition held changed the hash if and only if the Rust decoder
/// read it (`decoded`), and that one it did not read was refused as malformed.
async fn assert_written_iff_decoded(
    side: &mut Side,
    item: &str,
    before: Hash,
    (field, text): (&str, &[u8]),
    decoded: StoreResult<()>,
    written: StoreResult<()>,
) {
    let after = raw_hash(side, item).await;
    let text = text.escape_ascii();
    match decoded {
        Ok(()) => assert_ne!(after, before, "{field} = b\"{text}\" decodes: {written:?}"),
        Err(StoreError::Malformed { field: named, .. }) if named == field => {
            assert_eq!(
                after, before,
                "{field} = b\"{text}\" is malformed, yet written"
            );
            assert!(
                matches!(written, Err(StoreError::Malformed { .. })),
                "{field} = b\"{text}\": {written:?}"
            );
        }
        Err(other) => panic!("{field} = b\"{text}\": the decoder answered {other:?}"),
    }
}
