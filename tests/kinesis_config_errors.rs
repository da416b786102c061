//! A consumer that cannot read its stream says so when it starts, in one line: a stream that
//! does not exist (named), a Kinesis client without a region or credentials, an endpoint
//! where nothing listens (named). Before, the consumer started and its discoverer retried
//! `ListShards` every few seconds, with nothing but a warning nobody saw.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
use shardlease::kinesis::{
    BatchOutcome, ConsumerError, KinesisConsumer, KinesisRecord, ProcessError, RecordCheckpointer,
    RecordProcessor, StreamError,
};
use shardlease::store::memory::InMemoryStore;
use shardlease::store::Misconfiguration;
use shardlease::{LeaseKey, WorkerId};

fn kinesalite() -> String {
    std::env::var("SHARDLEASE_KINESALITE_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4569".into())
}

/// A port on 127.0.0.1 where nothing listens: bound by the system, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

fn builder(endpoint: &str) -> aws_sdk_kinesis::config::Builder {
    aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
}

fn complete(endpoint: &str) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::from_conf(
        builder(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .build(),
    )
}

struct Ignore;

#[async_trait]
impl RecordProcessor for Ignore {
    async fn process_records(
        &mut self,
        _: &[KinesisRecord],
        _: &RecordCheckpointer,
    ) -> Result<BatchOutcome, ProcessError> {
        Ok(BatchOutcome::Continue)
    }
}

/// Starts a consumer of `stream`; it must fail within 10 s.
async fn start(client: aws_sdk_kinesis::Client, stream: &str) -> StreamError {
    let starting = KinesisConsumer::builder(
        client,
        stream,
        Arc::new(InMemoryStore::new()),
        WorkerId::new("config-errors").unwrap(),
    )
    .processor(|_: &LeaseKey| Ignore)
    .start();
    match tokio::time::timeout(Duration::from_secs(10), starting).await {
        Ok(Err(ConsumerError::Stream(err))) => err,
        Ok(Err(other)) => panic!("not a stream error: {other:?}"),
        Ok(Ok(consumer)) => {
            consumer.shutdown().await;
            panic!("the consumer started on a stream it cannot read")
        }
        Err(_) => panic!("start did not fail within 10 s"),
    }
}

/// One line that says `fix`, and no `Debug` dump of the SDK error.
fn assert_one_actionable_line(err: &StreamError, fix: &str) {
    let text = err.to_string();
    assert!(!text.contains('\n'), "more than one line: {text}");
    assert!(!text.contains('{'), "a Debug dump: {text}");
    assert!(text.contains(fix), "{text:?} does not say {fix:?}");
}

#[tokio::test]
async fn a_stream_that_does_not_exist_fails_the_start_naming_the_stream() {
    let stream = format!("no-such-stream-{}", std::process::id());
    let err = start(complete(&kinesalite()), &stream).await;
    assert!(
        matches!(&err, StreamError::NotFound { stream: s } if *s == stream),
        "{err:?}"
    );
    assert_one_actionable_line(&err, &format!("stream {stream:?} does not exist"));
}

#[tokio::test]
async fn a_kinesis_endpoint_where_nothing_listens_is_named() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let err = start(complete(&endpoint), "any").await;
    assert!(matches!(err, StreamError::Unreachable { .. }), "{err:?}");
    assert_one_actionable_line(
        &err,
        &format!("nothing listens at {endpoint} (connection refused)"),
    );
}

#[tokio::test]
async fn a_kinesis_client_without_a_region_is_told_to_set_one() {
    let client = aws_sdk_kinesis::Client::from_conf(
        builder(&kinesalite())
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .build(),
    );
    let err = start(client, "any").await;
    assert!(
        matches!(
            err,
            StreamError::Misconfigured {
                problem: Misconfiguration::NoRegion,
                ..
            }
        ),
        "{err:?}"
    );
    assert_one_actionable_line(&err, "no AWS region configured: set AWS_REGION");
}

#[tokio::test]
async fn a_kinesis_client_without_credentials_is_told_where_to_put_them() {
    let client = aws_sdk_kinesis::Client::from_conf(
        builder(&kinesalite())
            .region(Region::new("us-east-1"))
            .build(),
    );
    let err = start(client, "any").await;
    assert!(
        matches!(
            err,
            StreamError::Misconfigured {
                problem: Misconfiguration::NoCredentials,
                ..
            }
        ),
        "{err:?}"
    );
    assert_one_actionable_line(&err, "no AWS credentials found: set AWS_ACCESS_KEY_ID");
}

/// A builder prints what it was given, for a log line or a failed assertion.
#[test]
fn a_consumer_builder_prints_its_stream_and_worker() {
    let builder = KinesisConsumer::builder(
        complete("http://127.0.0.1:1"),
        "orders",
        Arc::new(InMemoryStore::new()),
        WorkerId::new("host-a").unwrap(),
    )
    .processor(|_: &LeaseKey| Ignore);
    let printed = format!("{builder:?}");
    assert!(
        printed.contains("orders") && printed.contains("host-a"),
        "{printed}"
    );
}
