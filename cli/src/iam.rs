//! `iam-policy`: the least-privilege policy for workers (and the Kinesis consumer).
//!
//! The actions are exactly the SDK operations the library calls (`cli/tests/cli.rs` checks
//! them against the source), on the table and the stream only.

use serde_json::{json, Value};

/// Every DynamoDB operation the library sends, as IAM names it.
pub const DYNAMODB_ACTIONS: &[&str] = &[
    // Creates the table when it is missing (`DynamoConfig::create_if_missing`, on by
    // default), checks its key schema and waits for it to be ACTIVE.
    "dynamodb:CreateTable",
    "dynamodb:DescribeTable",
    // Leases and membership records.
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Scan",
];

/// Every Kinesis operation the consumer sends, as IAM names it.
pub const KINESIS_ACTIONS: &[&str] = &[
    "kinesis:ListShards",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
];

/// What a consumer of several streams (`KinesisConsumer::multi_stream`) and a consumer with
/// enhanced fan-out also send on each stream: its ARN and creation time looked up.
pub const STREAM_LOOKUP_ACTIONS: &[&str] = &["kinesis:DescribeStreamSummary"];

/// What a consumer with enhanced fan-out also sends on the stream: its stream consumer
/// registered (`Retrieval::FanOut`).
pub const FAN_OUT_STREAM_ACTIONS: &[&str] = &["kinesis:RegisterStreamConsumer"];

/// What a consumer with enhanced fan-out sends on its stream consumer: waited for until
/// active, and subscribed to.
pub const FAN_OUT_CONSUMER_ACTIONS: &[&str] =
    &["kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"];

/// What `shardlease bench` also sends, on the throw-away tables it makes: each deleted after
/// its run.
pub const BENCH_ACTIONS: &[&str] = &["dynamodb:DeleteTable"];

/// The tables `shardlease bench` makes, by their default name.
pub const BENCH_TABLES: &str = "shardlease-bench-*";

/// What the consumer reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading<'a> {
    /// The streams, by name or ARN (none: the policy covers the lease table only).
    pub streams: &'a [String],
    /// With enhanced fan-out.
    pub fan_out: bool,
    /// As a consumer of several streams (implied by more than one).
    pub multi_stream: bool,
    /// Also what `shardlease bench` needs, on its own tables.
    pub bench: bool,
}

/// The policy for the lease table `table` and what the consumer reads, in `region` and
/// `account` (`*` where not given; a stream given by ARN is taken as it is).
pub fn policy(
    table: &str,
    reading: Reading<'_>,
    region: Option<&str>,
    account: Option<&str>,
) -> Value {
    let region = region.unwrap_or("*");
    let account = account.unwrap_or("*");
    let mut statements = vec![json!({
        "Sid": "ShardleaseLeaseTable",
        "Effect": "Allow",
        "Action": DYNAMODB_ACTIONS,
        "Resource": format!("arn:aws:dynamodb:{region}:{account}:table/{table}"),
    })];
    if !reading.streams.is_empty() {
        let arns: Vec<String> = reading
            .streams
            .iter()
            .map(|stream| {
                if stream.starts_with("arn:") {
                    stream.clone()
                } else {
                    format!("arn:aws:kinesis:{region}:{account}:stream/{stream}")
                }
            })
            .collect();
        let mut actions = KINESIS_ACTIONS.to_vec();
        if reading.fan_out || reading.multi_stream || arns.len() > 1 {
            actions.extend(STREAM_LOOKUP_ACTIONS);
        }
        if reading.fan_out {
            actions.extend(FAN_OUT_STREAM_ACTIONS);
        }
        let one_or_many = |resources: Vec<String>| match <[String; 1]>::try_from(resources) {
            Ok([one]) => Value::from(one),
            Err(many) => Value::from(many),
        };
        let consumers = arns.iter().map(|arn| format!("{arn}/consumer/*")).collect();
        statements.push(json!({
            "Sid": "ShardleaseKinesisStream",
            "Effect": "Allow",
            "Action": actions,
            "Resource": one_or_many(arns),
        }));
        if reading.fan_out {
            statements.push(json!({
                "Sid": "ShardleaseKinesisStreamConsumer",
                "Effect": "Allow",
                "Action": FAN_OUT_CONSUMER_ACTIONS,
                "Resource": one_or_many(consumers),
            }));
        }
    }
    if reading.bench {
        let mut actions = DYNAMODB_ACTIONS.to_vec();
        actions.extend(BENCH_ACTIONS);
        statements.push(json!({
            "Sid": "ShardleaseBench",
            "Effect": "Allow",
            "Action": actions,
            "Resource": format!("arn:aws:dynamodb:{region}:{account}:table/{BENCH_TABLES}"),
        }));
    }
    json!({
        "Version": "2012-10-17",
        "Statement": statements,
    })
}
