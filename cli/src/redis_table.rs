//! What the tool reads from a Redis table besides the store's listing.

use std::collections::HashMap;

use shardlease::store::redis::RedisStore;

use crate::Error;

/// Each item's `updatedAt` (milliseconds since the Unix epoch, written for people only), by
/// key, as RFC 3339 text. Read on a connection of the tool's own (the store keeps its
/// connection to itself).
pub async fn last_writes(store: &RedisStore) -> Result<HashMap<String, String>, Error> {
    let url = &store.config().url;
    let failed = |err: redis::RedisError| format!("read updatedAt from Redis: {err}");
    let client = redis::Client::open(url.as_str()).map_err(failed)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(failed)?;
    let keys: Vec<String> = redis::cmd("ZRANGE")
        .arg(store.index_key())
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await
        .map_err(failed)?;
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("HGET").arg(store.item_key(key)).arg("updatedAt");
    }
    let at: Vec<Option<String>> = pipe.query_async(&mut connection).await.map_err(failed)?;
    Ok(keys
        .into_iter()
        .zip(at)
        .filter_map(|(key, at)| {
            let millis = at?.parse::<i64>().ok()?;
            let at = chrono::DateTime::from_timestamp_millis(millis)?;
            Some((key, at.to_rfc3339()))
        })
        .collect())
}
