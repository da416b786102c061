//! The Redis backend: [`RedisStore`], on the `redis` crate's connection manager (tokio).
//!
//! Every conditional write is one Lua script (`src/store/redis/scripts.rs`), run atomically
//! by the server and sent with `EVALSHA` (on `NOSCRIPT`, after a restart or a `SCRIPT FLUSH`, the script is
//! loaded and sent again). A table lives under one hash tag, its items as hashes whose fields
//! mirror the DynamoDB attributes, listed through an index kept by the same scripts
//! ([`schema`]). The conditions, the `lastOp` token that recognises a write whose answer was
//! lost, the retries and the malformed-item rules are those of the DynamoDB store; the
//! durability they need from Redis is in `docs/ARCHITECTURE.md`, "Redis durability".

mod classify;
mod config;
mod connection;
pub mod schema;
mod scripts;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

pub use self::config::{RedisConfig, DEFAULT_KEY_PREFIX, DEFAULT_PAGE_SIZE};

use self::classify::{classify, is_auth};
use self::connection::Connection;
use self::schema::{Decoded, Item, Layout};
use self::scripts::Script;
use super::{
    check_report, LeaseStore, Misconfiguration, Outcome, Page, PageToken, StoreError, StoreResult,
};
use crate::lease::{Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, WorkerId};

/// The lease table in Redis. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: Arc<Connection>,
    config: Arc<RedisConfig>,
    layout: Arc<Layout>,
    malformed_seen: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Decodes a hash into a value and the token of its last write.
type Decoder<T> = fn(&Item) -> StoreResult<(T, Option<String>)>;

impl RedisStore {
    /// Connects to the server of `config.url` and loads the scripts.
    ///
    /// Fails at once, in one line that says what to fix, when nothing listens there
    /// ([`StoreError::Unreachable`]), when the server refuses the credentials
    /// ([`StoreError::Misconfigured`] with [`Misconfiguration::RedisAuth`]) or when the
    /// configuration is invalid ([`StoreError::InvalidConfig`]). Connecting and each reply
    /// are bounded by the policy's [`attempt_timeout`](crate::store::RetryPolicy::attempt_timeout).
    pub async fn connect(config: RedisConfig) -> StoreResult<Self> {
        config.validate()?;
        let endpoint = config::redacted(&config.url);
        let client = client(&config)?;
        let timeout = config.retry.attempt_timeout;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connected = tokio::time::timeout(
            timeout * 2,
            ConnectionManager::new_with_config(client.clone(), manager.clone()),
        )
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {:?}", timeout * 2),
            )))
        });
        let connected = connected.map_err(|e| connect_error(e, &endpoint))?;
        let store = Self {
            connection: Arc::new(Connection::new(client, manager, connected)),
            layout: Arc::new(Layout::new(&config.key_prefix, &config.table)),
            config: Arc::new(config),
            malformed_seen: Arc::default(),
        };
        // PING first: a server that wants a password answers NOAUTH to the first command.
        let ping = tokio::time::timeout(timeout, store.query::<String>(&redis::cmd("PING")))
            .await
            .unwrap_or_else(|_| {
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to PING",
                )))
            });
        ping.map_err(|e| connect_error(e, &endpoint))?;
        for script in scripts::ALL {
            store
                .load(script)
                .await
                .map_err(|e| connect_error(e, &endpoint))?;
        }
        Ok(store)
    }

    /// The configuration the store was connected with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.config.table
    }

    /// The Redis key of the hash that holds item `key` (a lease key, or a membership
    /// record's `shardlease#member#<worker id>`), for an operator's own reads.
    pub fn item_key(&self, key: &str) -> String {
        self.layout.item(key)
    }

    /// The Redis key of the table's index: a sorted set of every item key.
    pub fn index_key(&self) -> &str {
        self.layout.index()
    }

    /// How many malformed hashes listings have skipped since the store was created.
    pub fn malformed_items_seen(&self) -> u64 {
        self.malformed_seen.load(Ordering::Relaxed)
    }

    /// How many times the store replaced its connection because a reply did not come in
    /// time (a half-open connection never answers again; see `src/store/redis/connection.rs`).
    pub fn connections_replaced(&self) -> u64 {
        self.connection.replacements()
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, RedisError> {
        self.connection
            .run(|mut connection| async move { cmd.query_async(&mut connection).await })
            .await
    }

    async fn load(&self, script: &Script) -> Result<(), RedisError> {
        let sha: String = self
            .query(redis::cmd("SCRIPT").arg("LOAD").arg(script.source()))
            .await?;
        debug_assert_eq!(sha, script.sha());
        Ok(())
    }

    /// Runs `script` on item `key` once: `EVALSHA`, and on `NOSCRIPT` a `SCRIPT LOAD` and
    /// `EVALSHA` again.
    async fn eval(
        &self,
        script: &Script,
        key: &str,
        args: &[String],
    ) -> Result<(i64, Vec<Vec<u8>>, String), RedisError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha())
            .arg(2)
            .arg(self.layout.item(key))
            .arg(self.layout.index())
            .arg(key)
            .arg(args);
        match self.query(&cmd).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(
                    script = script.name,
                    "script not loaded on the server; loading"
                );
                self.load(script).await?;
                self.query(&cmd).await
            }
            other => other,
        }
    }

    /// One conditional write by `script` on item `key`, retried within `deadline`. `args`
    /// follow the token and the time (see [`scripts`]).
    async fn write<T: Send>(
        &self,
        script: &'static Script,
        key: &str,
        args: Vec<String>,
        decode: Decoder<T>,
        deadline: Instant,
    ) -> StoreResult<Outcome<T>> {
        let token = uuid::Uuid::new_v4().to_string();
        let mut all = vec![token.clone(), now()];
        all.extend(args);
        self.config
            .retry
            .run(script.name, key, deadline, |_| async {
                let (status, flat, field) = self
                    .eval(script, key, &all)
                    .await
                    .map_err(|e| classify(script.name, key, e))?;
                answer(key, status, flat, &field, &token, decode)
            })
            .await
    }

    /// A write to the lease item `nonce` at `key`: the script's `ARGV[4]`, before `args`.
    async fn lease_write(
        &self,
        script: &'static Script,
        key: &LeaseKey,
        nonce: u64,
        args: Vec<String>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = std::iter::once(nonce.to_string()).chain(args).collect();
        self.write(script, key.as_str(), args, schema::decode_lease, deadline)
            .await
    }

    async fn member_write(
        &self,
        script: &'static Script,
        worker: &WorkerId,
        args: Vec<String>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let key = schema::member_key(worker);
        self.write(script, &key, args, schema::decode_member, deadline)
            .await
    }

    /// One item, read with `HGETALL`; `None` when absent.
    async fn read<T>(
        &self,
        op: &'static str,
        key: &str,
        decode: Decoder<T>,
        deadline: Instant,
    ) -> StoreResult<Option<T>> {
        let hash = self.layout.item(key);
        let flat = self
            .config
            .retry
            .run(op, key, deadline, |_| async {
                let value: Value = self
                    .query(redis::cmd("HGETALL").arg(&hash))
                    .await
                    .map_err(|e| classify(op, key, e))?;
                flatten(op, key, value)
            })
            .await?;
        if flat.is_empty() {
            return Ok(None);
        }
        decode(&schema::item_from_flat(flat)).map(|(value, _)| Some(value))
    }

    /// Up to `limit` item keys of the index after `from` (exclusive) and below `below`
    /// (exclusive; `None`: to the end), with their hashes, read in one round trip.
    async fn range(
        &self,
        op: &'static str,
        from: &str,
        below: Option<&str>,
        limit: usize,
        deadline: Instant,
    ) -> StoreResult<Vec<(String, Vec<Vec<u8>>)>> {
        let table = self.config.table.as_str();
        self.config
            .retry
            .run(op, table, deadline, |_| async move {
                let keys: Vec<Vec<u8>> = self
                    .query(
                        redis::cmd("ZRANGEBYLEX")
                            .arg(self.layout.index())
                            .arg(from)
                            .arg(below.map_or_else(|| "+".to_owned(), |b| format!("({b}")))
                            .arg("LIMIT")
                            .arg(0)
                            .arg(limit),
                    )
                    .await
                    .map_err(|e| classify(op, table, e))?;
                let keys: Vec<String> = keys
                    .into_iter()
                    .map(|k| String::from_utf8_lossy(&k).into_owned())
                    .collect();
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("HGETALL").arg(self.layout.item(key));
                }
                let hashes: Vec<Value> = if keys.is_empty() {
                    Vec::new()
                } else {
                    self.connection
                        .run(
                            |mut connection| async move { pipe.query_async(&mut connection).await },
                        )
                        .await
                        .map_err(|e| classify(op, table, e))?
                };
                keys.into_iter()
                    .zip(hashes)
                    .map(|(key, value)| Ok((key.clone(), flatten(op, &key, value)?)))
                    .collect()
            })
            .await
    }

    /// One listing page: up to `page_size` items after `from`.
    async fn page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        let size = self.config.page_size as usize;
        let start = from.map_or_else(|| "-".to_owned(), |token| format!("({}", token.0));
        let mut items = self
            .range("list_page", &start, None, size + 1, deadline)
            .await?;
        let mut page = Page::default();
        if items.len() > size {
            items.truncate(size);
            page.next = items.last().map(|(key, _)| PageToken(key.clone()));
        }
        for (key, flat) in items {
            match self.listed(&key, flat) {
                Listed::Item(item) => match *item {
                    Decoded::Lease(lease, _) => page.leases.push(Arc::new(lease)),
                    Decoded::Member(member, _) => page.members.push(Arc::new(member)),
                },
                Listed::Gone => {}
                Listed::Malformed => page.malformed += 1,
            }
        }
        Ok(page)
    }

    /// A listed hash, decoded; a malformed one is logged and counted.
    fn listed(&self, key: &str, flat: Vec<Vec<u8>>) -> Listed {
        if flat.is_empty() {
            // Deleted between the index read and the hash read (or by hand): not an item.
            return Listed::Gone;
        }
        let decoded = schema::decode(&schema::item_from_flat(flat)).and_then(|decoded| {
            let stored = match &decoded {
                Decoded::Lease(lease, _) => lease.key.to_string(),
                Decoded::Member(member, _) => schema::member_key(&member.worker),
            };
            if stored == key {
                Ok(decoded)
            } else {
                Err(StoreError::Malformed {
                    key: key.to_owned(),
                    field: schema::KEY,
                    reason: format!("is {stored:?}, not the key the hash is stored under"),
                })
            }
        });
        match decoded {
            Ok(decoded) => Listed::Item(Box::new(decoded)),
            Err(err) => {
                self.malformed_seen.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    table = %self.config.table,
                    error = %err,
                    "skipping a malformed item in the lease table"
                );
                Listed::Malformed
            }
        }
    }
}

/// What a listing found under one index entry.
enum Listed {
    Item(Box<Decoded>),
    Gone,
    Malformed,
}

/// The error of a failed connect, as one line that says what to fix.
/// The client of `config`: its URL, and for TLS the CA file if one is given.
fn client(config: &RedisConfig) -> StoreResult<redis::Client> {
    let invalid = |field, e: &dyn std::fmt::Display| {
        StoreError::from(crate::config::ConfigError::invalid(field, e.to_string()))
    };
    #[cfg(feature = "redis-tls")]
    if let Some(path) = &config.ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            invalid(
                "ca_file",
                &format!("cannot read the CA file {}: {e}", path.display()),
            )
        })?;
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        };
        return redis::Client::build_with_tls(config.url.as_str(), certificates)
            .map_err(|e| invalid("ca_file", &e));
    }
    redis::Client::open(config.url.as_str()).map_err(|e| invalid("url", &e))
}

fn connect_error(err: RedisError, endpoint: &str) -> StoreError {
    if is_auth(&err) {
        return StoreError::Misconfigured {
            operation: "connect",
            problem: Misconfiguration::RedisAuth,
            source: Some(Box::new(err)),
        };
    }
    match classify("connect", endpoint, err) {
        StoreError::Unreachable {
            operation,
            key,
            source,
            ..
        } => StoreError::Unreachable {
            operation,
            endpoint: key.clone(),
            key,
            source,
        },
        other => other,
    }
}

/// The answer of a script: `Done`, our own earlier write (its token in `lastOp`), a lost
/// race, or a malformed item the script refused to write.
fn answer<T>(
    key: &str,
    status: i64,
    flat: Vec<Vec<u8>>,
    field: &str,
    token: &str,
    decode: Decoder<T>,
) -> StoreResult<Outcome<T>> {
    let item = schema::item_from_flat(flat);
    match status {
        1 => Ok(Outcome::Done(decode(&item)?.0)),
        0 if item.is_empty() => Ok(Outcome::LostRace { current: None }),
        0 => {
            let (value, last_op) = decode(&item)?;
            if last_op.as_deref() == Some(token) {
                tracing::debug!(key, "a write whose answer was lost had landed; accepted");
                Ok(Outcome::Done(value))
            } else {
                Ok(Outcome::LostRace {
                    current: Some(value),
                })
            }
        }
        _ => {
            // The Rust decoder names the field too. The scripts accept what it accepts
            // (tests/redis_cases/); should one ever refuse a hash it reads, the script's field
            // is reported.
            decode(&item)?;
            Err(StoreError::Malformed {
                key: key.to_owned(),
                field: schema::field_name(field),
                reason: "does not hold what the write's script accepts; nothing was written".into(),
            })
        }
    }
}

/// The flat field, value list of an `HGETALL` answer (an array in RESP2, a map in RESP3).
fn flatten(op: &'static str, key: &str, value: Value) -> StoreResult<Vec<Vec<u8>>> {
    let bytes = |value: Value| match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        other => Err(StoreError::Fatal {
            operation: op,
            key: key.to_owned(),
            source: format!("HGETALL answered a non-string: {other:?}").into(),
        }),
    };
    match value {
        Value::Array(values) => values.into_iter().map(bytes).collect(),
        Value::Map(pairs) => {
            let mut flat = Vec::with_capacity(pairs.len() * 2);
            for (field, value) in pairs {
                flat.push(bytes(field)?);
                flat.push(bytes(value)?);
            }
            Ok(flat)
        }
        Value::Nil => Ok(Vec::new()),
        other => Err(StoreError::Fatal {
            operation: op,
            key: key.to_owned(),
            source: format!("HGETALL answered {other:?}").into(),
        }),
    }
}

/// Milliseconds since the Unix epoch, for the informational `updatedAt`. Never read back.
fn now() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
        .to_string()
}

fn or_empty<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(String::new, |v| v.to_string())
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        let mut lease = lease.into_lease();
        lease.nonce = super::new_nonce();
        // The create script's arguments are the whole hash, token and time included, so its
        // own `lastOp`/`updatedAt` (the first two arguments) are written over by the same values.
        let token = uuid::Uuid::new_v4().to_string();
        let time = now();
        let mut all = vec![token.clone(), time.clone()];
        for (field, value) in schema::encode_lease(&lease, &token, &time) {
            all.push(field.to_owned());
            all.push(value);
        }
        let key = lease.key.as_str();
        let script = &scripts::SCRIPT_CREATE;
        self.config
            .retry
            .run(script.name, key, deadline, |_| async {
                let (status, flat, field) = self
                    .eval(script, key, &all)
                    .await
                    .map_err(|e| classify(script.name, key, e))?;
                answer(key, status, flat, &field, &token, schema::decode_lease)
            })
            .await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        self.read("get", key.as_str(), schema::decode_lease, deadline)
            .await
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        self.page(from, deadline).await
    }

    async fn list_members(&self, deadline: Instant) -> StoreResult<Vec<Arc<Member>>> {
        let prefix = schema::member_key_prefix();
        // Every member key starts with the prefix: they sort between it and the prefix with
        // its last byte ('#') raised by one ('$').
        let below = format!("{}$", &prefix[..prefix.len() - 1]);
        let size = self.config.page_size as usize;
        let mut from = format!("[{prefix}");
        let mut members = Vec::new();
        loop {
            let items = self
                .range("list_members", &from, Some(&below), size, deadline)
                .await?;
            let full = items.len() == size;
            if let Some((last, _)) = items.last() {
                from = format!("({last}");
            }
            for (key, flat) in items {
                if let Listed::Item(item) = self.listed(&key, flat) {
                    if let Decoded::Member(member, _) = *item {
                        members.push(Arc::new(member));
                    }
                }
            }
            if !full {
                return Ok(members);
            }
        }
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        load: Option<f64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![owner.to_string(), tenure.to_string(), or_empty(load)];
        self.lease_write(&scripts::SCRIPT_RENEW, key, nonce, args, deadline)
            .await
    }

    async fn take(
        &self,
        key: &LeaseKey,
        nonce: u64,
        taker: &WorkerId,
        incarnation: Incarnation,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![
            observed_counter.to_string(),
            taker.to_string(),
            incarnation.get().to_string(),
        ];
        self.lease_write(&scripts::SCRIPT_TAKE, key, nonce, args, deadline)
            .await
    }

    async fn request_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        requester: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![owner.to_string(), tenure.to_string(), requester.to_string()];
        self.lease_write(&scripts::SCRIPT_REQUEST_HANDOFF, key, nonce, args, deadline)
            .await
    }

    async fn complete_handoff(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        to: &WorkerId,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![owner.to_string(), tenure.to_string(), to.to_string()];
        self.lease_write(
            &scripts::SCRIPT_COMPLETE_HANDOFF,
            key,
            nonce,
            args,
            deadline,
        )
        .await
    }

    async fn release(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![owner.to_string(), tenure.to_string()];
        self.lease_write(&scripts::SCRIPT_RELEASE, key, nonce, args, deadline)
            .await
    }

    async fn checkpoint(
        &self,
        key: &LeaseKey,
        nonce: u64,
        owner: &WorkerId,
        tenure: u64,
        seq: u64,
        checkpoint: &str,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![
            owner.to_string(),
            tenure.to_string(),
            seq.to_string(),
            checkpoint.to_owned(),
        ];
        self.lease_write(&scripts::SCRIPT_CHECKPOINT, key, nonce, args, deadline)
            .await
    }

    async fn delete(
        &self,
        key: &LeaseKey,
        nonce: u64,
        observed_counter: u64,
        observed_tenure: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![observed_counter.to_string(), observed_tenure.to_string()];
        self.lease_write(&scripts::SCRIPT_DELETE, key, nonce, args, deadline)
            .await
    }

    async fn heartbeat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        report: Option<&LoadReport>,
        capacity: Option<u32>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        check_report("heartbeat", worker, report)?;
        let mut args = vec![
            worker.to_string(),
            incarnation.get().to_string(),
            or_empty(capacity),
        ];
        args.extend(schema::report_args(report));
        self.member_write(&scripts::SCRIPT_HEARTBEAT, worker, args, deadline)
            .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let args = vec![or_empty(observed_heartbeat)];
        self.member_write(&scripts::SCRIPT_REMOVE_MEMBER, worker, args, deadline)
            .await
    }

    async fn give(
        &self,
        key: &LeaseKey,
        nonce: u64,
        to: &WorkerId,
        observed_counter: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Lease>> {
        let args = vec![observed_counter.to_string(), to.to_string()];
        self.lease_write(&scripts::SCRIPT_GIVE, key, nonce, args, deadline)
            .await
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        _consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        // Always read from the primary: there is no cheaper read to offer.
        let key = schema::member_key(worker);
        self.read("get_member", &key, schema::decode_member, deadline)
            .await
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let (mode, old, heartbeat, next) = match replacing {
            None => ("new", String::new(), String::new(), 1),
            Some(seen) => (
                "replace",
                or_empty(seen.incarnation.map(Incarnation::get)),
                seen.heartbeat.to_string(),
                seen.heartbeat + 1,
            ),
        };
        let args = vec![
            worker.to_string(),
            incarnation.get().to_string(),
            or_empty(capacity),
            mode.to_owned(),
            old,
            heartbeat,
            next.to_string(),
        ];
        self.member_write(&scripts::SCRIPT_OPEN_SESSION, worker, args, deadline)
            .await
    }

    async fn beat(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        report: Option<&LoadReport>,
        seen: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        check_report("beat", worker, report)?;
        let mut args = vec![incarnation.get().to_string(), or_empty(capacity)];
        args.extend(schema::report_args(report));
        args.extend(seen.iter().cloned());
        self.member_write(&scripts::SCRIPT_BEAT, worker, args, deadline)
            .await
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let args = vec![
            incarnation.get().to_string(),
            observed_heartbeat.to_string(),
        ];
        self.member_write(&scripts::SCRIPT_END_SESSION, worker, args, deadline)
            .await
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut args = vec![incarnation.get().to_string()];
        args.extend(notices.iter().cloned());
        self.member_write(&scripts::SCRIPT_NOTIFY, worker, args, deadline)
            .await
    }
}
