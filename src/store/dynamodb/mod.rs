//! The DynamoDB backend: the distributed store users scale on.
//!
//! Every write is one `PutItem`, `UpdateItem` or `DeleteItem` with a condition expression
//! (`src/store/dynamodb/schema.rs` lists them, and `docs/ARCHITECTURE.md` explains each); no
//! transactions. Conditional failures ask for the current item with
//! `ReturnValuesOnConditionCheckFailure = ALL_OLD` and fall back to a consistent `GetItem`
//! where the server does not return it (dynalite, for one).

mod classify;
mod connect_error;
pub mod kcl;
mod metrics;
mod schema;
mod table;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

pub use self::connect_error::ConnectError;
pub use self::schema::{lease_item_size, member_item_size};

use self::classify::classify;
use self::metrics::{Answer, Api, Request};
use self::schema::{Decoded, Item};
use super::{
    check_report, LeaseStore, Outcome, Page, PageToken, RetryPolicy, StoreError, StoreResult,
};
use crate::config::ConfigError;
use crate::lease::{Incarnation, Lease, LeaseKey, LoadReport, Member, NewLease, WorkerId};

/// How the lease table is billed when the store creates it. In a configuration file:
/// `"on_demand"` or `{ provisioned = { read = 5, write = 5 } }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Billing {
    /// On-demand (pay per request): no capacity planning, no throttling below the account
    /// limits. The default, as in KCL.
    OnDemand,
    /// Provisioned capacity units.
    Provisioned {
        /// Read capacity units.
        read: i64,
        /// Write capacity units.
        write: i64,
    },
}

/// Configuration of the DynamoDB store: [`DynamoConfig::new`] with the table's name, then a
/// setter per field to change.
///
/// With the `serde` feature it deserializes from a file or the environment: `table_name` is
/// required, every other field optional (`retry` as a table of [`RetryPolicy`]'s fields,
/// durations as humantime text such as `"2s"`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "file::DynamoConfigFile")
)]
#[non_exhaustive]
pub struct DynamoConfig {
    /// The lease table's name. Required.
    pub table_name: String,
    /// Create the table when it does not exist. Default: `true`.
    pub create_if_missing: bool,
    /// Billing of a table the store creates. Default: [`Billing::OnDemand`].
    pub billing: Billing,
    /// Tags of a table the store creates. Default: none.
    pub tags: Vec<(String, String)>,
    /// Deletion protection of a table the store creates. Default: `false`.
    pub deletion_protection: bool,
    /// How long [`DynamoStore::connect`] may take to find or create the table and see it
    /// ACTIVE, retries of throttled and transient failures included. Default: 60 s (a new
    /// on-demand table usually takes a few seconds).
    pub active_timeout: Duration,
    /// Retries of throttled and transient failures, and the timeout of each attempt, for
    /// every request (table setup included). Default: [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Items per listing page. Default: `None`, DynamoDB's own 1 MB pages.
    pub page_limit: Option<u32>,
}

impl DynamoConfig {
    /// A configuration with every default and the given table name.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            create_if_missing: true,
            billing: Billing::OnDemand,
            tags: Vec::new(),
            deletion_protection: false,
            active_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            page_limit: None,
        }
    }

    /// Sets [`create_if_missing`](Self::create_if_missing).
    #[must_use]
    pub fn create_if_missing(mut self, value: bool) -> Self {
        self.create_if_missing = value;
        self
    }

    /// Sets [`billing`](Self::billing).
    #[must_use]
    pub fn billing(mut self, value: Billing) -> Self {
        self.billing = value;
        self
    }

    /// Sets [`tags`](Self::tags).
    #[must_use]
    pub fn tags(mut self, value: Vec<(String, String)>) -> Self {
        self.tags = value;
        self
    }

    /// Sets [`deletion_protection`](Self::deletion_protection).
    #[must_use]
    pub fn deletion_protection(mut self, value: bool) -> Self {
        self.deletion_protection = value;
        self
    }

    /// Sets [`active_timeout`](Self::active_timeout).
    #[must_use]
    pub fn active_timeout(mut self, value: Duration) -> Self {
        self.active_timeout = value;
        self
    }

    /// Sets [`retry`](Self::retry).
    #[must_use]
    pub fn retry(mut self, value: RetryPolicy) -> Self {
        self.retry = value;
        self
    }

    /// Sets [`page_limit`](Self::page_limit).
    #[must_use]
    pub fn page_limit(mut self, value: Option<u32>) -> Self {
        self.page_limit = value;
        self
    }

    fn validate(&self) -> StoreResult<()> {
        let name = &self.table_name;
        let valid_chars = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !(3..=255).contains(&name.len()) || !valid_chars {
            return Err(ConfigError::invalid(
                "table_name",
                format!(
                    "table name {name:?} must be 3 to 255 characters of a-z, A-Z, 0-9, '_', '-', '.'"
                ),
            )
            .into());
        }
        if let Billing::Provisioned { read, write } = self.billing {
            if read < 1 || write < 1 {
                return Err(ConfigError::invalid(
                    "billing",
                    format!("provisioned capacity must be at least 1 (read {read}, write {write})"),
                )
                .into());
            }
        }
        if self.page_limit == Some(0) {
            return Err(ConfigError::invalid("page_limit", "page_limit must be at least 1").into());
        }
        Ok(())
    }
}

/// The lease table in DynamoDB. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    config: Arc<DynamoConfig>,
    malformed_seen: Arc<AtomicU64>,
}

/// The attributes of an expression: `(":name", value)` pairs.
type Values = Vec<(&'static str, AttributeValue)>;

/// Decodes an item into a value and the token of its last write.
type Decoder<T> = fn(&Item) -> StoreResult<(T, Option<String>)>;

impl DynamoStore {
    /// Connects with the standard AWS configuration chain (environment, profile, instance
    /// role; `AWS_ENDPOINT_URL` points it at a local emulator), then prepares the table.
    pub async fn from_env(config: DynamoConfig) -> Result<Self, ConnectError> {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::connect(Client::new(&sdk), config).await
    }

    /// Uses `client` (endpoint, region and credentials are the client's), then creates the
    /// table if allowed and missing, checks its key schema and waits until it is ACTIVE
    /// (each request retried by the [`RetryPolicy`], all within
    /// [`active_timeout`](DynamoConfig::active_timeout)).
    ///
    /// The SDK's own retries are turned off on a copy of the client: the store retries by its
    /// [`RetryPolicy`], within each call's deadline, and must see every lost response to
    /// recognise its own writes. The copy's attempt timeout is the policy's
    /// [`attempt_timeout`](RetryPolicy::attempt_timeout) (or the client's own, if shorter), so
    /// a timeout the SDK notices itself ends an attempt at the same moment and is classified
    /// the same way: transient and ambiguous. The store also bounds each attempt itself, the
    /// read that follows a failed condition included.
    pub async fn connect(client: Client, config: DynamoConfig) -> Result<Self, ConnectError> {
        config.validate()?;
        let attempt_timeout = client
            .config()
            .timeout_config()
            .and_then(|t| t.operation_attempt_timeout())
            .map_or(config.retry.attempt_timeout, |own| {
                own.min(config.retry.attempt_timeout)
            });
        let client = Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_config(RetryConfig::disabled())
                .timeout_config(
                    TimeoutConfig::builder()
                        .operation_attempt_timeout(attempt_timeout)
                        .build(),
                )
                .build(),
        );
        table::ensure_table(&client, &config).await?;
        crate::metrics::describe();
        Ok(Self {
            client,
            config: Arc::new(config),
            malformed_seen: Arc::default(),
        })
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.config.table_name
    }

    /// The client the store sends with (the SDK's own retries off; see
    /// [`connect`](Self::connect)), for reads of one's own, such as an operator's tool.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How many malformed items listings have skipped since the store was created.
    pub fn malformed_items_seen(&self) -> u64 {
        self.malformed_seen.load(Ordering::Relaxed)
    }

    async fn get_item(&self, op: &'static str, key: &str) -> StoreResult<Option<Item>> {
        self.read_item(op, key, true).await
    }

    async fn read_item(
        &self,
        op: &'static str,
        key: &str,
        consistent: bool,
    ) -> StoreResult<Option<Item>> {
        let request = Request::start(self.table_name(), op, Api::GetItem);
        let sent = self
            .client
            .get_item()
            .table_name(self.table_name())
            .key(schema::KEY, schema::s(key))
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match sent {
            Ok(out) => {
                request.consumed(out.consumed_capacity());
                request.finish(Answer::Done);
                Ok(out.item)
            }
            Err(err) => Err(request.failed(classify(op, key, err))),
        }
    }

    /// The current item after a failed condition: the one the server returned, or a
    /// consistent read where it returned none.
    async fn current(
        &self,
        op: &'static str,
        key: &str,
        returned: Option<Item>,
    ) -> StoreResult<Option<Item>> {
        match returned {
            Some(item) => Ok(Some(item)),
            None => self.get_item(op, key).await,
        }
    }

    /// One conditional `UpdateItem`, retried within `deadline`.
    #[allow(clippy::too_many_arguments)]
    async fn update<T: Send>(
        &self,
        op: &'static str,
        key: &str,
        condition: &str,
        update: &str,
        values: Values,
        decode: Decoder<T>,
        deadline: Instant,
    ) -> StoreResult<Outcome<T>> {
        let token = uuid::Uuid::new_v4().to_string();
        let mut values: HashMap<String, AttributeValue> = values
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        // DynamoDB refuses a value the expressions do not use: only writes that record their
        // token get one (see `schema::UPDATE_REQUEST_HANDOFF`).
        if update.contains(":op") {
            values.insert(":op".into(), schema::s(&token));
        }
        values.insert(":now".into(), schema::s(now()));
        self.config
            .retry
            .run(op, key, deadline, |_| async {
                let request = Request::start(self.table_name(), op, Api::UpdateItem);
                let sent = self
                    .client
                    .update_item()
                    .table_name(self.table_name())
                    .key(schema::KEY, schema::s(key))
                    .condition_expression(condition)
                    .update_expression(update)
                    .set_expression_attribute_values(Some(values.clone()))
                    .return_values(ReturnValue::AllNew)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                match sent {
                    Ok(out) => {
                        request.consumed(out.consumed_capacity());
                        request.finish(Answer::Done);
                        let item = out.attributes.unwrap_or_default();
                        Ok(Outcome::Done(decode(&item)?.0))
                    }
                    Err(err) => match err.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                            request.finish(Answer::LostRace);
                            let current = self.current(op, key, e.item().cloned()).await?;
                            self.lost_or_ours(current, &token, decode)
                        }
                        _ => Err(request.failed(classify(op, key, err))),
                    },
                }
            })
            .await
    }

    /// After a failed condition: our own write, if the item carries our token (an earlier
    /// attempt landed and its answer was lost); otherwise a lost race.
    fn lost_or_ours<T>(
        &self,
        current: Option<Item>,
        token: &str,
        decode: Decoder<T>,
    ) -> StoreResult<Outcome<T>> {
        let Some(item) = current else {
            return Ok(Outcome::LostRace { current: None });
        };
        let (value, last_op) = decode(&item)?;
        if last_op.as_deref() == Some(token) {
            tracing::debug!("a write whose answer was lost had landed; accepted");
            Ok(Outcome::Done(value))
        } else {
            Ok(Outcome::LostRace {
                current: Some(value),
            })
        }
    }

    /// A conditional `UpdateItem` of the lease item `nonce` at `key`: `condition` and the
    /// nonce (see [`schema::of_item`]).
    #[allow(clippy::too_many_arguments)]
    fn lease_update(
        &self,
        op: &'static str,
        key: &LeaseKey,
        nonce: u64,
        condition: &'static str,
        update: &'static str,
        mut values: Values,
        deadline: Instant,
    ) -> impl std::future::Future<Output = StoreResult<Outcome<Lease>>> + Send + '_ {
        let key = key.as_str().to_owned();
        let condition = schema::of_item(nonce, condition);
        values.extend(schema::nonce_value(nonce));
        async move {
            self.update(
                op,
                &key,
                &condition,
                update,
                values,
                schema::decode_lease,
                deadline,
            )
            .await
        }
    }
}

/// Wall-clock time for the informational `updatedAt` attribute. Never read back.
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn held(owner: &WorkerId, tenure: u64) -> Values {
    vec![
        (":owner", schema::s(owner.as_str())),
        (":tenure", schema::n(tenure)),
    ]
}

fn one() -> (&'static str, AttributeValue) {
    (":one", schema::n(1))
}

#[async_trait]
impl LeaseStore for DynamoStore {
    async fn create(&self, lease: NewLease, deadline: Instant) -> StoreResult<Outcome<Lease>> {
        let mut lease = lease.into_lease();
        lease.nonce = super::new_nonce();
        let key = lease.key.as_str();
        let token = uuid::Uuid::new_v4().to_string();
        let item = schema::encode_lease(&lease, &token, &now());
        self.config
            .retry
            .run("create", key, deadline, |_| async {
                let request = Request::start(self.table_name(), "create", Api::PutItem);
                let sent = self
                    .client
                    .put_item()
                    .table_name(self.table_name())
                    .set_item(Some(item.clone()))
                    .condition_expression(schema::COND_CREATE)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                match sent {
                    Ok(out) => {
                        request.consumed(out.consumed_capacity());
                        request.finish(Answer::Done);
                        Ok(Outcome::Done(lease.clone()))
                    }
                    Err(err) => match err.as_service_error() {
                        Some(PutItemError::ConditionalCheckFailedException(e)) => {
                            request.finish(Answer::LostRace);
                            let current = self.current("create", key, e.item().cloned()).await?;
                            self.lost_or_ours(current, &token, schema::decode_lease)
                        }
                        _ => Err(request.failed(classify("create", key, err))),
                    },
                }
            })
            .await
    }

    async fn get(&self, key: &LeaseKey, deadline: Instant) -> StoreResult<Option<Lease>> {
        let item = self
            .config
            .retry
            .run("get", key.as_str(), deadline, |_| {
                self.get_item("get", key.as_str())
            })
            .await?;
        item.map(|item| schema::decode_lease(&item).map(|(lease, _)| lease))
            .transpose()
    }

    async fn list_page(&self, from: Option<PageToken>, deadline: Instant) -> StoreResult<Page> {
        self.scan_page(from, true, deadline).await
    }

    async fn list_page_eventually(
        &self,
        from: Option<PageToken>,
        deadline: Instant,
    ) -> StoreResult<Page> {
        self.scan_page(from, false, deadline).await
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
        let mut values = held(owner, tenure);
        values.push(one());
        let update = match load {
            Some(load) => {
                values.push((":load", schema::n(load)));
                schema::UPDATE_RENEW_LOAD
            }
            None => schema::UPDATE_RENEW,
        };
        self.lease_update(
            "renew",
            key,
            nonce,
            schema::COND_HELD,
            update,
            values,
            deadline,
        )
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
        let values = vec![
            (":counter", schema::n(observed_counter)),
            (":to", schema::s(taker.as_str())),
            (":incarnation", schema::n(incarnation.get())),
            one(),
        ];
        self.lease_update(
            "take",
            key,
            nonce,
            schema::COND_TAKE,
            schema::UPDATE_TAKE,
            values,
            deadline,
        )
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
        let mut values = held(owner, tenure);
        values.push((":to", schema::s(requester.as_str())));
        self.lease_update(
            "request_handoff",
            key,
            nonce,
            schema::COND_REQUEST_HANDOFF,
            schema::UPDATE_REQUEST_HANDOFF,
            values,
            deadline,
        )
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
        let mut values = held(owner, tenure);
        values.extend([(":to", schema::s(to.as_str())), one()]);
        self.lease_update(
            "complete_handoff",
            key,
            nonce,
            schema::COND_COMPLETE_HANDOFF,
            schema::UPDATE_HAND_OVER,
            values,
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
        let mut values = held(owner, tenure);
        values.push(one());
        self.lease_update(
            "release",
            key,
            nonce,
            schema::COND_HELD,
            schema::UPDATE_RELEASE,
            values,
            deadline,
        )
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
        let mut values = held(owner, tenure);
        values.extend([
            (":checkpoint", schema::s(checkpoint)),
            (":seq", schema::n(seq)),
            (":zero", schema::n(0)),
            one(),
        ]);
        self.lease_update(
            "checkpoint",
            key,
            nonce,
            schema::COND_CHECKPOINT,
            schema::UPDATE_CHECKPOINT,
            values,
            deadline,
        )
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
        let mut values = HashMap::from([
            (":counter".to_owned(), schema::n(observed_counter)),
            (":tenure".to_owned(), schema::n(observed_tenure)),
        ]);
        values.extend(
            schema::nonce_value(nonce)
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value)),
        );
        self.delete_item(
            "delete",
            key.as_str(),
            &schema::of_item(nonce, schema::COND_DELETE),
            values,
            schema::decode_lease,
            deadline,
        )
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
        let mut values = vec![
            (":worker", schema::s(worker.as_str())),
            (":incarnation", schema::n(incarnation.get())),
            (":zero", schema::n(0)),
            one(),
        ];
        values.extend(schema::report_values(report));
        if let Some(capacity) = capacity {
            values.push((":capacity", schema::n(capacity)));
        }
        let update = schema::heartbeat_update(capacity.is_some(), report);
        self.update(
            "heartbeat",
            &schema::member_key(worker),
            schema::COND_HEARTBEAT,
            &update,
            values,
            schema::decode_member,
            deadline,
        )
        .await
    }

    async fn remove_member(
        &self,
        worker: &WorkerId,
        observed_heartbeat: Option<u64>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut values = HashMap::new();
        let condition = match observed_heartbeat {
            Some(heartbeat) => {
                values.insert(":heartbeat".to_owned(), schema::n(heartbeat));
                schema::COND_MEMBER_AT
            }
            None => schema::COND_MEMBER,
        };
        self.delete_item(
            "remove_member",
            &schema::member_key(worker),
            condition,
            values,
            schema::decode_member,
            deadline,
        )
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
        let values = vec![
            (":counter", schema::n(observed_counter)),
            (":to", schema::s(to.as_str())),
            one(),
        ];
        self.lease_update(
            "give",
            key,
            nonce,
            schema::COND_GIVE,
            schema::UPDATE_HAND_OVER,
            values,
            deadline,
        )
        .await
    }

    async fn get_member(
        &self,
        worker: &WorkerId,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Option<Member>> {
        let key = schema::member_key(worker);
        let item = self
            .config
            .retry
            .run("get_member", &key, deadline, |_| {
                self.read_item("get_member", &key, consistent)
            })
            .await?;
        item.map(|item| schema::decode_member(&item).map(|(member, _)| member))
            .transpose()
    }

    async fn open_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        capacity: Option<u32>,
        replacing: Option<&Member>,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let mut values = vec![
            (":worker", schema::s(worker.as_str())),
            (":incarnation", schema::n(incarnation.get())),
            (":protocol", schema::s(schema::SESSIONS)),
        ];
        if let Some(capacity) = capacity {
            values.push((":capacity", schema::n(capacity)));
        }
        let condition = match replacing {
            None => {
                values.push((":next", schema::n(1)));
                schema::COND_OPEN_SESSION
            }
            Some(seen) => {
                values.push((":heartbeat", schema::n(seen.heartbeat)));
                values.push((":next", schema::n(seen.heartbeat + 1)));
                match seen.incarnation {
                    Some(old) => {
                        values.push((":old", schema::n(old.get())));
                        schema::COND_REPLACE_SESSION
                    }
                    None => schema::COND_REPLACE_OLD_RECORD,
                }
            }
        };
        self.update(
            "open_session",
            &schema::member_key(worker),
            condition,
            &schema::open_session_update(capacity.is_some()),
            values,
            schema::decode_member,
            deadline,
        )
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
        let mut values = vec![(":incarnation", schema::n(incarnation.get())), one()];
        values.extend(schema::report_values(report));
        if let Some(capacity) = capacity {
            values.push((":capacity", schema::n(capacity)));
        }
        if !seen.is_empty() {
            values.push((":seen", AttributeValue::Ss(seen.to_vec())));
        }
        self.update(
            "beat",
            &schema::member_key(worker),
            schema::COND_SESSION,
            &schema::beat_update(capacity.is_some(), report, !seen.is_empty()),
            values,
            schema::decode_member,
            deadline,
        )
        .await
    }

    async fn end_session(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        observed_heartbeat: u64,
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        let values = HashMap::from([
            (":incarnation".to_owned(), schema::n(incarnation.get())),
            (":heartbeat".to_owned(), schema::n(observed_heartbeat)),
        ]);
        self.delete_item(
            "end_session",
            &schema::member_key(worker),
            schema::COND_SESSION_AT,
            values,
            schema::decode_member,
            deadline,
        )
        .await
    }

    async fn notify(
        &self,
        worker: &WorkerId,
        incarnation: Incarnation,
        notices: &[String],
        deadline: Instant,
    ) -> StoreResult<Outcome<Member>> {
        if notices.is_empty() {
            // DynamoDB refuses an empty set: nothing to add, so say whether the session is open.
            return Ok(match self.get_member(worker, true, deadline).await? {
                Some(member) if member.incarnation == Some(incarnation) => Outcome::Done(member),
                current => Outcome::LostRace { current },
            });
        }
        let values = vec![
            (":incarnation", schema::n(incarnation.get())),
            (":notices", AttributeValue::Ss(notices.to_vec())),
        ];
        self.update(
            "notify",
            &schema::member_key(worker),
            schema::COND_SESSION,
            schema::UPDATE_NOTIFY,
            values,
            schema::decode_member,
            deadline,
        )
        .await
    }
}

impl DynamoStore {
    /// One page of a scan from `from`, strongly consistent or not.
    async fn scan_page(
        &self,
        from: Option<PageToken>,
        consistent: bool,
        deadline: Instant,
    ) -> StoreResult<Page> {
        let table = self.table_name();
        let out = self
            .config
            .retry
            .run("scan", table, deadline, |_| {
                let scan = self
                    .client
                    .scan()
                    .table_name(table)
                    .consistent_read(consistent)
                    .set_limit(
                        self.config
                            .page_limit
                            .map(|l| l.min(i32::MAX as u32) as i32),
                    )
                    .set_exclusive_start_key(from.as_ref().map(|token| {
                        HashMap::from([(schema::KEY.to_owned(), schema::s(token.0.as_str()))])
                    }))
                    .return_consumed_capacity(ReturnConsumedCapacity::Total);
                async move {
                    let request = Request::start(table, "scan", Api::Scan);
                    match scan.send().await {
                        Ok(out) => {
                            request.consumed(out.consumed_capacity());
                            request.finish(Answer::Done);
                            Ok(out)
                        }
                        Err(err) => Err(request.failed(classify("scan", table, err))),
                    }
                }
            })
            .await?;
        let mut page = Page::default();
        for item in out.items() {
            match schema::decode(item) {
                Ok(Decoded::Lease(lease, _)) => page.leases.push(Arc::new(lease)),
                Ok(Decoded::Member(member, _)) => page.members.push(Arc::new(member)),
                Err(err) => {
                    page.malformed += 1;
                    self.malformed_seen.fetch_add(1, Ordering::Relaxed);
                    match kcl::format::kcl_attribute(item) {
                        Some(attribute) => tracing::warn!(
                            table,
                            error = %err,
                            kcl_attribute = attribute,
                            "skipping a malformed item in the lease table: it looks like a KCL \
                             lease; shardlease cannot share a table with KCL: copy its \
                             checkpoints into a new table with `shardlease import-kcl --from \
                             {table} --to NEW`"
                        ),
                        None => {
                            tracing::warn!(table, error = %err, "skipping a malformed item in the lease table")
                        }
                    }
                }
            }
        }
        page.next = match out.last_evaluated_key() {
            Some(last) => match last.get(schema::KEY) {
                Some(AttributeValue::S(key)) => Some(PageToken(key.clone())),
                _ => {
                    return Err(StoreError::Malformed {
                        key: format!("{last:?}"),
                        field: schema::KEY,
                        reason: "LastEvaluatedKey has no string key".into(),
                    })
                }
            },
            None => None,
        };
        Ok(page)
    }

    /// One conditional `DeleteItem`, retried within `deadline`. After a lost answer, an item
    /// already gone reads as `LostRace { current: None }`: gone either way.
    async fn delete_item<T: Send>(
        &self,
        op: &'static str,
        key: &str,
        condition: &str,
        values: HashMap<String, AttributeValue>,
        decode: Decoder<T>,
        deadline: Instant,
    ) -> StoreResult<Outcome<T>> {
        let values = (!values.is_empty()).then_some(values);
        self.config
            .retry
            .run(op, key, deadline, |_| async {
                let request = Request::start(self.table_name(), op, Api::DeleteItem);
                let sent = self
                    .client
                    .delete_item()
                    .table_name(self.table_name())
                    .key(schema::KEY, schema::s(key))
                    .condition_expression(condition)
                    .set_expression_attribute_values(values.clone())
                    .return_values(ReturnValue::AllOld)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                match sent {
                    Ok(out) => {
                        request.consumed(out.consumed_capacity());
                        request.finish(Answer::Done);
                        match out.attributes {
                            Some(item) => Ok(Outcome::Done(decode(&item)?.0)),
                            None => Ok(Outcome::LostRace { current: None }),
                        }
                    }
                    Err(err) => match err.as_service_error() {
                        Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                            request.finish(Answer::LostRace);
                            let current = self.current(op, key, e.item().cloned()).await?;
                            current
                                .map(|item| decode(&item).map(|(value, _)| value))
                                .transpose()
                                .map(|current| Outcome::LostRace { current })
                        }
                        _ => Err(request.failed(classify(op, key, err))),
                    },
                }
            })
            .await
    }
}
/// The configuration as a file or the environment gives it.
#[cfg(feature = "serde")]
mod file {
    use std::time::Duration;

    use super::{Billing, DynamoConfig};
    use crate::config::ConfigError;
    use crate::store::{RetryPolicy, StoreError};

    #[derive(serde::Deserialize)]
    #[serde(
        deny_unknown_fields,
        rename = "DynamoConfig",
        expecting = "a table of DynamoConfig fields (the DynamoDB store configuration)"
    )]
    pub(super) struct DynamoConfigFile {
        table_name: String,
        create_if_missing: Option<bool>,
        billing: Option<Billing>,
        tags: Option<Vec<(String, String)>>,
        deletion_protection: Option<bool>,
        #[serde(default, with = "humantime_serde")]
        active_timeout: Option<Duration>,
        retry: Option<RetryPolicy>,
        page_limit: Option<u32>,
    }

    impl TryFrom<DynamoConfigFile> for DynamoConfig {
        type Error = ConfigError;

        fn try_from(file: DynamoConfigFile) -> Result<Self, ConfigError> {
            let mut config = DynamoConfig::new(file.table_name);
            crate::config::set_given!(
                config, file:
                create_if_missing,
                billing,
                tags,
                deletion_protection,
                active_timeout,
                retry
            );
            config.page_limit = file.page_limit;
            match config.validate() {
                Ok(()) => Ok(config),
                Err(StoreError::InvalidConfig(err)) => Err(err),
                Err(other) => Err(ConfigError::invalid("table_name", other.to_string())),
            }
        }
    }
}
