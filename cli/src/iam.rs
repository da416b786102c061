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

/// The policy for the lease table `table` (and the stream `stream`), in `region` and
/// `account` (`*` where not given).
pub fn policy(
    table: &str,
    stream: Option<&str>,
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
        statements.push(json!({
            "Sid": "ShardleaseKinesisStream",
            "Effect": "Allow",
            "Action": KINESIS_ACTIONS,
            "Resource": format!("arn:aws:kinesis:{region}:{account}:stream/{stream}"),
        }));
    }
    json!({
        "Version": "2012-10-17",
        "Statement": statements,
    })
}
