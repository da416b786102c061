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

/// What a consumer with enhanced fan-out also sends on the stream: its ARN looked up, and its
/// stream consumer registered (`Retrieval::FanOut`).
pub const FAN_OUT_STREAM_ACTIONS: &[&str] = &[
    "kinesis:DescribeStreamSummary",
    "kinesis:RegisterStreamConsumer",
];

/// What a consumer with enhanced fan-out sends on its stream consumer: waited for until
/// active, and subscribed to.
pub const FAN_OUT_CONSUMER_ACTIONS: &[&str] =
    &["kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"];

/// The policy for the lease table `table` (and the stream `stream`, read with enhanced
/// fan-out when `fan_out`), in `region` and `account` (`*` where not given).
pub fn policy(
    table: &str,
    stream: Option<&str>,
    fan_out: bool,
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
    if let Some(stream) = stream {
        let stream_arn = format!("arn:aws:kinesis:{region}:{account}:stream/{stream}");
        let mut actions = KINESIS_ACTIONS.to_vec();
        if fan_out {
            actions.extend(FAN_OUT_STREAM_ACTIONS);
        }
        statements.push(json!({
            "Sid": "ShardleaseKinesisStream",
            "Effect": "Allow",
            "Action": actions,
            "Resource": stream_arn,
        }));
        if fan_out {
            statements.push(json!({
                "Sid": "ShardleaseKinesisStreamConsumer",
                "Effect": "Allow",
                "Action": FAN_OUT_CONSUMER_ACTIONS,
                "Resource": format!("{stream_arn}/consumer/*"),
            }));
        }
    }
    json!({
        "Version": "2012-10-17",
        "Statement": statements,
    })
}
