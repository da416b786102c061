//! Configuration errors say what they are. A client without a region, without credentials, or
//! pointed at a port where nothing listens makes `DynamoStore::connect` fail at once, with an
//! error whose message is one line naming the problem and its fix, not a retryable
//! "transient, ambiguous" failure with a dump of the SDK's structs. A table that does not
//! exist (with `create_if_missing` off) is named.

#[path = "common/dynamo.rs"]
mod dynamo;

use std::time::Duration;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::Client;
use shardlease::store::dynamodb::{ConnectError, DynamoConfig, DynamoStore};
use shardlease::store::Misconfiguration;
use shardlease::StoreError;

/// A port on 127.0.0.1 where nothing listens: bound by the system, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

fn builder(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
}

fn credentials() -> Credentials {
    Credentials::new("test", "test", None, None, "tests")
}

/// Connects, bounded well below any retry budget: a configuration error must come at once.
async fn connect(client: Client) -> StoreError {
    let table = dynamo::unique_table("config-errors");
    let connecting = DynamoStore::connect(client, DynamoConfig::new(table));
    match tokio::time::timeout(Duration::from_secs(5), connecting).await {
        Ok(Ok(_)) => panic!("connect succeeded on a misconfigured client"),
        Ok(Err(ConnectError::Store(err))) => err,
        Ok(Err(other)) => panic!("expected a failed request, got {other:?}"),
        Err(_) => panic!("connect did not fail within 5 s"),
    }
}

/// One line that says how to fix it, and no `Debug` dump of the SDK error in it.
fn assert_one_actionable_line(err: &dyn std::fmt::Display, fix: &str) {
    let text = err.to_string();
    assert!(!text.contains('\n'), "more than one line: {text}");
    assert!(!text.contains('{'), "a Debug dump: {text}");
    assert!(text.contains(fix), "{text:?} does not say {fix:?}");
}

#[tokio::test]
async fn a_client_without_a_region_is_told_to_set_one() {
    let client = Client::from_conf(
        builder(&dynamo::Emulator::dynalite().endpoint)
            .credentials_provider(credentials())
            .build(),
    );
    let err = connect(client).await;
    assert!(
        matches!(
            err,
            StoreError::Misconfigured {
                problem: Misconfiguration::NoRegion,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable() && !err.is_ambiguous());
    assert_one_actionable_line(&err, "no AWS region configured: set AWS_REGION");
}

#[tokio::test]
async fn a_client_without_credentials_is_told_where_to_put_them() {
    let client = Client::from_conf(
        builder(&dynamo::Emulator::dynalite().endpoint)
            .region(Region::new("us-east-1"))
            .build(),
    );
    let err = connect(client).await;
    assert!(
        matches!(
            err,
            StoreError::Misconfigured {
                problem: Misconfiguration::NoCredentials,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable() && !err.is_ambiguous());
    assert_one_actionable_line(&err, "no AWS credentials found: set AWS_ACCESS_KEY_ID");
}

/// A client whose credentials come from a profile chain over this credentials file.
// The replacements of these aliases live in `aws-runtime`, which is not a dependency of ours.
#[allow(deprecated)]
fn profile_client(credentials_file: &std::path::Path) -> Client {
    use aws_config::profile::profile_file::{ProfileFileKind, ProfileFiles};
    let files = ProfileFiles::builder()
        .with_file(ProfileFileKind::Credentials, credentials_file)
        .build();
    let profile = aws_config::profile::ProfileFileCredentialsProvider::builder()
        .profile_files(files)
        .profile_name("shardlease-test")
        .build();
    let chain =
        aws_config::meta::credentials::CredentialsProviderChain::first_try("Profile", profile);
    Client::from_conf(
        builder(&dynamo::Emulator::dynalite().endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(chain)
            .build(),
    )
}

#[tokio::test]
async fn a_credentials_chain_that_finds_nothing_is_told_where_to_put_them() {
    // An empty credentials file: what the default chain reports when the environment, the
    // profile files and the roles all come up empty.
    let file = std::env::temp_dir().join(format!("{}.credentials", dynamo::unique_table("empty")));
    std::fs::write(&file, "").unwrap();
    let err = connect(profile_client(&file)).await;
    let _ = std::fs::remove_file(&file);
    assert!(
        matches!(
            err,
            StoreError::Misconfigured {
                problem: Misconfiguration::NoCredentials,
                ..
            }
        ),
        "{err:?}"
    );
    assert_one_actionable_line(&err, "no AWS credentials found");
}

#[tokio::test]
async fn an_unreadable_credentials_file_is_a_configuration_error() {
    let err = connect(profile_client(std::path::Path::new(
        "/nonexistent/shardlease/credentials",
    )))
    .await;
    assert!(
        matches!(
            err,
            StoreError::Misconfigured {
                problem: Misconfiguration::NoCredentials,
                ..
            }
        ),
        "{err:?}"
    );
    // The cause is in the chain, for whoever prints it.
    let cause = std::error::Error::source(&err).map(|s| format!("{s:?}"));
    assert!(cause.unwrap_or_default().contains("could not read file"));
}

#[tokio::test]
async fn an_endpoint_where_nothing_listens_is_named() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let client = Client::from_conf(
        builder(&endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(credentials())
            .build(),
    );
    let err = connect(client).await;
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    // A refused connection never carried the request: retryable later, never ambiguous.
    assert!(err.is_retryable() && !err.is_ambiguous());
    assert_one_actionable_line(
        &err,
        &format!("nothing listens at {endpoint} (connection refused): is the endpoint right"),
    );
}

#[tokio::test]
async fn a_missing_table_is_named_when_the_store_may_not_create_it() {
    let table = dynamo::unique_table("config-errors-missing");
    let config = DynamoConfig::new(&table).create_if_missing(false);
    let err = DynamoStore::connect(dynamo::Emulator::dynalite().client(), config)
        .await
        .expect_err("the table does not exist");
    assert!(
        matches!(&err, ConnectError::TableNotFound { table: t } if *t == table),
        "{err:?}"
    );
    assert_one_actionable_line(&err, &format!("table {table:?} does not exist"));
}
