//! DynamoDB emulator targets for the integration tests: clients, unique tables, an
//! interceptor that loses responses after the server applied the write, and KCL's lease tables.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};
use aws_sdk_dynamodb::Client;
use shardlease::store::dynamodb::{DynamoConfig, DynamoStore};

/// An emulator: its name and endpoint.
#[derive(Debug, Clone)]
pub struct Emulator {
    pub name: &'static str,
    pub endpoint: String,
}

impl Emulator {
    /// dynalite, at `SHARDLEASE_DYNALITE_ENDPOINT` or the port `scripts/emulators.sh` uses.
    pub fn dynalite() -> Self {
        Self {
            name: "dynalite",
            endpoint: std::env::var("SHARDLEASE_DYNALITE_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:4567".into()),
        }
    }

    /// moto server, at `SHARDLEASE_MOTO_ENDPOINT` or the port `scripts/emulators.sh` uses.
    pub fn moto() -> Self {
        Self {
            name: "moto",
            endpoint: std::env::var("SHARDLEASE_MOTO_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:4568".into()),
        }
    }

    fn config(&self) -> aws_sdk_dynamodb::config::Builder {
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
    }

    /// A plain client.
    pub fn client(&self) -> Client {
        Client::from_conf(self.config().build())
    }

    /// A client whose next `n` write responses (after [`LoseResponses::arm`]) are lost after
    /// the server applied the write.
    pub fn lossy_client(&self) -> (Client, LoseResponses) {
        let lose = LoseResponses::default();
        let client = Client::from_conf(self.config().interceptor(lose.clone()).build());
        (client, lose)
    }

    /// A store on a fresh table of its own.
    pub async fn store(&self, config: DynamoConfig) -> DynamoStore {
        self.store_with(self.client(), config).await
    }

    /// A store over `client` on the table of `config`.
    pub async fn store_with(&self, client: Client, config: DynamoConfig) -> DynamoStore {
        DynamoStore::connect(client, config)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot prepare a table on {} at {} ({e}); start the emulators with \
                 `scripts/emulators.sh start` or run `scripts/test.sh`",
                    self.name, self.endpoint
                )
            })
    }
}

/// A table name no other test uses.
pub fn unique_table(test: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{test}-{seq}-{}", &id[..8])
}

/// Loses the responses of the next armed number of write requests (PutItem, UpdateItem,
/// DeleteItem) after the server answered them: the write is applied, the caller sees a
/// response error, exactly as when a connection drops on the way back.
#[derive(Debug, Clone, Default)]
pub struct LoseResponses {
    armed: Arc<AtomicU32>,
    this_one: Arc<AtomicU32>,
    lost: Arc<AtomicU32>,
    after_loss: Arc<Mutex<Option<Hook>>>,
}

/// Runs between a lost response and the caller seeing the error.
#[derive(Clone)]
struct Hook(Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl LoseResponses {
    /// Runs `hook` after each lost response, before the caller sees the error (and so before
    /// the store retries): somebody else's write lands between a write and its retry. The
    /// hook blocks the request's thread; it must finish its work before returning (run async
    /// work on a runtime of its own, on a thread of its own).
    pub fn after_loss(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.after_loss.lock().unwrap() = Some(Hook(Arc::new(hook)));
    }

    /// Loses the next `n` write responses.
    pub fn arm(&self, n: u32) {
        self.armed.store(n, Ordering::SeqCst);
    }

    /// How many responses were lost so far.
    pub fn lost(&self) -> u32 {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Intercept for LoseResponses {
    fn name(&self) -> &'static str {
        "LoseResponses"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default();
        let is_write = ["PutItem", "UpdateItem", "DeleteItem"]
            .iter()
            .any(|op| target.ends_with(op));
        let take = is_write
            && self
                .armed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        self.this_one.store(u32::from(take), Ordering::SeqCst);
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.this_one.swap(0, Ordering::SeqCst) == 1 {
            self.lost.fetch_add(1, Ordering::SeqCst);
            let hook = self.after_loss.lock().unwrap().clone();
            if let Some(Hook(hook)) = hook {
                hook();
            }
            return Err("response lost on the way back (injected by the test)".into());
        }
        Ok(())
    }
}

/// Creates `name` as KCL does (hash key `leaseKey`, on demand) and fills it with `items`.
pub async fn kcl_table(
    client: &Client,
    name: &str,
    items: &[std::collections::HashMap<String, AttributeValue>],
) {
    client
        .create_table()
        .table_name(name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create the KCL table (are the emulators running? scripts/emulators.sh start)");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let described = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .unwrap();
        if described.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "{name} never became ACTIVE"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for item in items {
        client
            .put_item()
            .table_name(name)
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }
}
