//! Which table, through which client; the table commands.

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use serde_json::json;
use shardlease::lease::Snapshot;
use shardlease::store::dynamodb::{Billing, ConnectError, DynamoConfig, DynamoStore};
use shardlease::store::redis::{RedisConfig, RedisStore};
use shardlease::store::LeaseStore;

use crate::{text, Error};

/// The table, and where it lives, from the command line.
pub struct Target {
    pub table: Option<String>,
    pub endpoint: Option<String>,
    /// The table is on this Redis server (instead of DynamoDB).
    pub redis: Option<String>,
    /// The Redis key prefix (`--key-prefix`); `None`: the store's default.
    pub key_prefix: Option<String>,
}

/// The lease table's backend.
pub enum Backend {
    Dynamo(DynamoStore),
    Redis(RedisStore),
}

impl Backend {
    /// The store, for the operator's protocol and listings.
    pub fn lease_store(&self) -> Arc<dyn LeaseStore> {
        match self {
            Backend::Dynamo(store) => Arc::new(store.clone()),
            Backend::Redis(store) => Arc::new(store.clone()),
        }
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        match self {
            Backend::Dynamo(store) => store.table_name(),
            Backend::Redis(store) => store.table(),
        }
    }
}

impl Target {
    /// The table's name, or an error saying how to give it.
    pub fn table(&self) -> Result<&str, Error> {
        self.table
            .as_deref()
            .ok_or_else(|| "no lease table: pass --table NAME (or set SHARDLEASE_TABLE)".into())
    }

    /// The table on DynamoDB or, with `--redis`, on Redis; never created here.
    pub async fn backend(&self) -> Result<Backend, Error> {
        let Some(url) = &self.redis else {
            return Ok(Backend::Dynamo(self.store(false).await?));
        };
        let mut config = RedisConfig::new(url.as_str(), self.table()?);
        if let Some(prefix) = &self.key_prefix {
            config = config.key_prefix(prefix.as_str());
        }
        Ok(Backend::Redis(RedisStore::connect(config).await?))
    }

    /// Refuses `command` on a Redis table: it is about DynamoDB tables only.
    pub fn dynamodb_only(&self, command: &str, why: &str) -> Result<(), Error> {
        if self.redis.is_some() {
            return Err(
                format!("{command} is for DynamoDB lease tables, not --redis: {why}").into(),
            );
        }
        if self.key_prefix.is_some() {
            return Err("--key-prefix is for a Redis table (--redis URL)".into());
        }
        Ok(())
    }

    /// A DynamoDB client from the standard AWS environment, at `--endpoint` if given.
    pub async fn client(&self) -> Client {
        Client::from_conf(self.client_config().await.build())
    }

    /// The configuration `client` builds from (the AWS environment, `--endpoint`), for a
    /// command that adds to it (`bench` counts requests with an interceptor).
    pub async fn client_config(&self) -> aws_sdk_dynamodb::config::Builder {
        let aws = aws_config::load_from_env().await;
        let mut dynamo = aws_sdk_dynamodb::config::Builder::from(&aws);
        if let Some(endpoint) = &self.endpoint {
            dynamo = dynamo.endpoint_url(endpoint);
        }
        dynamo
    }

    /// The store over the table; created if missing only with `create`.
    pub async fn store(&self, create: bool) -> Result<DynamoStore, Error> {
        self.store_named(self.table()?, create, None).await
    }

    /// The store over `table`.
    pub async fn store_named(
        &self,
        table: &str,
        create: bool,
        billing: Option<Billing>,
    ) -> Result<DynamoStore, Error> {
        let mut config = DynamoConfig::new(table).create_if_missing(create);
        if let Some(billing) = billing {
            config = config.billing(billing);
        }
        match DynamoStore::connect(self.client().await, config).await {
            Ok(store) => Ok(store),
            Err(ConnectError::TableNotFound { table }) => Err(format!(
                "table {table:?} does not exist at this endpoint and region (check --table, \
                 --endpoint and AWS_REGION); `shardlease --table {table} create-table` creates it"
            )
            .into()),
            Err(err) => Err(err.into()),
        }
    }
}

/// `create-table`.
pub async fn create_table(
    target: &Target,
    provisioned: Option<&str>,
    json: bool,
) -> Result<(), Error> {
    let table = target.table()?;
    let billing = match provisioned {
        None => Billing::OnDemand,
        Some(units) => parse_provisioned(units)?,
    };
    let client = target.client().await;
    let existed = table_exists(&client, table).await;
    target.store_named(table, true, Some(billing)).await?;
    if json {
        println!(
            "{}",
            json!({"command": "create-table", "table": table, "created": !existed})
        );
    } else if existed {
        println!("table {table} already exists with the lease table's key schema; it is ACTIVE");
    } else {
        println!("table {table} created; it is ACTIVE");
    }
    Ok(())
}

/// Whether `table` can be described at the client's endpoint and region.
pub async fn table_exists(client: &Client, table: &str) -> bool {
    client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .is_ok()
}

fn parse_provisioned(units: &str) -> Result<Billing, Error> {
    let bad = || format!("--provisioned {units:?}: expected READ,WRITE capacity units, as 5,5");
    let (read, write) = units.split_once(',').ok_or_else(bad)?;
    let read: i64 = read.trim().parse().map_err(|_| bad())?;
    let write: i64 = write.trim().parse().map_err(|_| bad())?;
    if read < 1 || write < 1 {
        return Err(bad().into());
    }
    Ok(Billing::Provisioned { read, write })
}

/// `describe-table`.
pub async fn describe_table(target: &Target, json: bool) -> Result<(), Error> {
    let table = target.table()?;
    let store = target.store(false).await?;
    let client = target.client().await;
    let described = client.describe_table().table_name(table).send().await;
    let described = described.map_err(|err| {
        format!(
            "describe table {table}: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(err)
        )
    })?;
    let description = described.table().ok_or("DynamoDB described no table")?;
    let snapshot: Snapshot = store
        .snapshot(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await?;
    let billing = description
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .map_or("PROVISIONED".to_owned(), |m| m.as_str().to_owned());
    let status = description
        .table_status()
        .map_or("unknown".to_owned(), |s| s.as_str().to_owned());
    let keys: Vec<String> = description
        .key_schema()
        .iter()
        .map(|k| format!("{} ({})", k.attribute_name(), k.key_type().as_str()))
        .collect();
    let sessions = snapshot.members.iter().filter(|m| m.session).count();
    let protocol = match (sessions, snapshot.members.len()) {
        (_, 0) => "none running",
        (0, _) => "leases",
        (s, n) if s == n => "sessions",
        _ => "mixed",
    };
    if json {
        println!(
            "{}",
            json!({
                "table": table,
                "arn": description.table_arn(),
                "status": status,
                "billing": billing,
                "key_schema": keys,
                "item_count_approx": description.item_count(),
                "size_bytes_approx": description.table_size_bytes(),
                "deletion_protection": description.deletion_protection_enabled(),
                "leases": snapshot.leases.len(),
                "workers": snapshot.members.len(),
                "protocol": protocol,
                "malformed_items": snapshot.malformed,
            })
        );
    } else {
        let rows = vec![
            vec!["table".into(), table.to_owned()],
            vec![
                "arn".into(),
                description.table_arn().unwrap_or("-").to_owned(),
            ],
            vec!["status".into(), status],
            vec!["billing".into(), billing],
            vec!["key schema".into(), keys.join(", ")],
            vec![
                "items (approx., DynamoDB updates it every ~6 h)".into(),
                description.item_count().unwrap_or(0).to_string(),
            ],
            vec![
                "deletion protection".into(),
                description
                    .deletion_protection_enabled()
                    .unwrap_or(false)
                    .to_string(),
            ],
            vec!["leases".into(), snapshot.leases.len().to_string()],
            vec!["workers".into(), snapshot.members.len().to_string()],
            vec!["protocol".into(), protocol.to_owned()],
            vec!["malformed items".into(), snapshot.malformed.to_string()],
        ];
        print!("{}", text::table(&["", ""], &rows));
    }
    Ok(())
}
