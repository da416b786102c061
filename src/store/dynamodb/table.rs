//! Creating, validating and waiting for the lease table. Every request is retried on
//! throttling and transient failures, each attempt bounded, as the store's own requests are
//! (see [`RetryPolicy`](crate::store::RetryPolicy)), all within
//! [`active_timeout`](super::DynamoConfig::active_timeout).

use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
    ScalarAttributeType, TableDescription, TableStatus, Tag,
};
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use super::classify::classify;
use super::kcl::format as kcl;
use super::schema::KEY;
use super::{Billing, ConnectError, DynamoConfig};
use crate::config::ConfigError;
use crate::store::sdk::EndpointRecorder;
use crate::store::{Misconfiguration, StoreError, StoreResult};

/// How often the table status is polled while waiting for ACTIVE.
const POLL: Duration = Duration::from_millis(200);

/// Makes sure the lease table exists, has our key schema, is ACTIVE, and is not KCL's.
///
/// A client without a region, without credentials, or pointed at an endpoint where nothing
/// listens fails here at once with an error that says so ([`StoreError::Misconfigured`],
/// [`StoreError::Unreachable`] naming the endpoint, in [`ConnectError::Store`]): at startup these are configuration
/// errors, not a passing failure to wait out.
pub(super) async fn ensure_table(
    client: &Client,
    config: &DynamoConfig,
) -> Result<(), ConnectError> {
    let table = &config.table_name;
    if client.config().region().is_none() {
        return Err(StoreError::Misconfigured {
            operation: "describe_table",
            problem: Misconfiguration::NoRegion,
            source: None,
        }
        .into());
    }
    let start = Instant::now();
    let deadline = start + config.active_timeout;
    // The first request is not retried when nothing listens: at startup a refused connection
    // is a wrong endpoint or a service not running, and the error names the endpoint. Any
    // other retryable failure is retried under the policy.
    let first = tokio::time::timeout(config.retry.attempt_timeout, first_describe(client, table))
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::unanswered(
                "describe_table",
                table,
                config.retry.attempt_timeout,
            ))
        });
    let found = match first {
        Err(err) if err.is_retryable() && !matches!(err, StoreError::Unreachable { .. }) => {
            describe(client, config, deadline).await?
        }
        other => other?,
    };
    let description = match found {
        Some(description) => description,
        None if config.create_if_missing => create(client, config, deadline).await?,
        None => {
            return Err(ConnectError::TableNotFound {
                table: table.clone(),
            })
        }
    };
    check_key_schema(table, &description)?;
    wait_active(client, config, description, start).await?;
    refuse_kcl_table(client, config, deadline).await
}

/// Items read at connect to tell a KCL lease table: one small page.
const PROBE_ITEMS: i32 = 10;

/// Refuses a table whose first items are KCL's leases (or KCL 3.x's other items): KCL's table
/// has our key schema, and without this check every item would be skipped as malformed.
async fn refuse_kcl_table(
    client: &Client,
    config: &DynamoConfig,
    deadline: Instant,
) -> Result<(), ConnectError> {
    let table = config.table_name.as_str();
    let out = config
        .retry
        .run("scan", table, deadline, |_| {
            let request = client.scan().table_name(table).limit(PROBE_ITEMS);
            async move { request.send().await.map_err(|e| classify("scan", table, e)) }
        })
        .await?;
    for item in out.items() {
        if let Some(attribute) = kcl::kcl_attribute(item) {
            return Err(ConnectError::KclTable {
                table: table.to_owned(),
                key: kcl::key_of(item),
                attribute,
            });
        }
    }
    Ok(())
}

async fn describe(
    client: &Client,
    config: &DynamoConfig,
    deadline: Instant,
) -> StoreResult<Option<TableDescription>> {
    let table = config.table_name.as_str();
    config
        .retry
        .run("describe_table", table, deadline, |_| async {
            described(
                table,
                client.describe_table().table_name(table).send().await,
            )
        })
        .await
}

/// The first request of a store: a `DescribeTable` that names the endpoint if nothing listens
/// there.
async fn first_describe(client: &Client, table: &str) -> StoreResult<Option<TableDescription>> {
    let recorder = EndpointRecorder::default();
    let sent = client
        .describe_table()
        .table_name(table)
        .customize()
        .interceptor(recorder.clone())
        .send()
        .await;
    described(table, sent).map_err(|mut err| {
        if let StoreError::Unreachable { endpoint, .. } = &mut err {
            *endpoint = recorder.endpoint_or(endpoint);
        }
        err
    })
}

fn described(
    table: &str,
    sent: Result<DescribeTableOutput, SdkError<DescribeTableError, HttpResponse>>,
) -> StoreResult<Option<TableDescription>> {
    match sent {
        Ok(out) => Ok(out.table),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(err) => Err(classify("describe_table", table, err)),
    }
}

async fn create(
    client: &Client,
    config: &DynamoConfig,
    deadline: Instant,
) -> Result<TableDescription, ConnectError> {
    let table = &config.table_name;
    // The builders fail only on a required value left out: the key schema's are constants, a
    // tag's come from the configuration.
    let build = |field: &'static str| {
        move |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::InvalidConfig(ConfigError::invalid(field, e.to_string()))
        }
    };
    let mut request = client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(KEY)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build("table_name"))?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(KEY)
                .key_type(KeyType::Hash)
                .build()
                .map_err(build("table_name"))?,
        )
        .deletion_protection_enabled(config.deletion_protection);
    request = match config.billing {
        Billing::OnDemand => request.billing_mode(BillingMode::PayPerRequest),
        Billing::Provisioned { read, write } => request
            .billing_mode(BillingMode::Provisioned)
            .provisioned_throughput(
                ProvisionedThroughput::builder()
                    .read_capacity_units(read)
                    .write_capacity_units(write)
                    .build()
                    .map_err(build("table_name"))?,
            ),
    };
    for (key, value) in &config.tags {
        request = request.tags(
            Tag::builder()
                .key(key)
                .value(value)
                .build()
                .map_err(build("tags"))?,
        );
    }
    tracing::info!(table = %table, "creating lease table");
    let created = config
        .retry
        .run("create_table", table, deadline, |_| {
            let request = request.clone();
            async move {
                match request.send().await {
                    Ok(out) => Ok(out.table_description),
                    // Another worker created it first, or an earlier attempt whose answer was
                    // lost did: use the table as it is.
                    Err(err)
                        if err
                            .as_service_error()
                            .is_some_and(|e| e.is_resource_in_use_exception()) =>
                    {
                        Ok(None)
                    }
                    Err(err) => Err(classify("create_table", table, err)),
                }
            }
        })
        .await?;
    match created {
        Some(description) => Ok(description),
        None => {
            describe(client, config, deadline)
                .await?
                .ok_or_else(|| ConnectError::TableNotFound {
                    table: table.clone(),
                })
        }
    }
}

fn check_key_schema(table: &str, description: &TableDescription) -> Result<(), ConnectError> {
    let mismatch = |detail: String| ConnectError::SchemaMismatch {
        table: table.to_owned(),
        detail,
    };
    let keys: Vec<_> = description
        .key_schema()
        .iter()
        .map(|k| format!("{} ({})", k.attribute_name(), k.key_type().as_str()))
        .collect();
    let expected = format!("{KEY} ({})", KeyType::Hash.as_str());
    if keys != [expected.clone()] {
        return Err(mismatch(format!(
            "expected the single key {expected}, found [{}]",
            keys.join(", ")
        )));
    }
    let key_type = description
        .attribute_definitions()
        .iter()
        .find(|d| d.attribute_name() == KEY)
        .map(|d| d.attribute_type().clone());
    if key_type != Some(ScalarAttributeType::S) {
        return Err(mismatch(format!(
            "expected {KEY} to be a string (S), found {key_type:?}"
        )));
    }
    Ok(())
}

async fn wait_active(
    client: &Client,
    config: &DynamoConfig,
    mut description: TableDescription,
    start: Instant,
) -> Result<(), ConnectError> {
    let table = config.table_name.as_str();
    let deadline = start + config.active_timeout;
    loop {
        let status = description.table_status().cloned();
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        if Instant::now() + POLL >= deadline {
            return Err(ConnectError::TableNotActive {
                table: table.to_owned(),
                status: status.map_or("UNKNOWN".into(), |s| s.as_str().to_owned()),
                waited: start.elapsed(),
            });
        }
        tracing::debug!(
            table,
            ?status,
            "waiting for the lease table to become ACTIVE"
        );
        tokio::time::sleep(POLL).await;
        description = describe(client, config, deadline).await?.ok_or_else(|| {
            ConnectError::TableNotFound {
                table: table.to_owned(),
            }
        })?;
    }
}
