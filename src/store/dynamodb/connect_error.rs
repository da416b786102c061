//! Why a [`DynamoStore`](super::DynamoStore) could not connect to its table: the table's own
//! setup (missing, another key schema, KCL's, not ACTIVE in time), or a request that failed.
//! A store of one's own never produces these: they are DynamoDB's, and apart from
//! [`StoreError`], which every store's calls answer with.

use std::time::Duration;

use crate::store::StoreError;

/// Why [`DynamoStore::connect`](super::DynamoStore::connect) (or
/// [`from_env`](super::DynamoStore::from_env)) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The lease table does not exist and the store was not allowed to create it.
    #[error(
        "table {table:?} does not exist at this endpoint and region: create it, or set \
         create_if_missing to let the store create it"
    )]
    TableNotFound {
        /// The table's name.
        table: String,
    },
    /// The lease table exists but its key schema is not the one this library writes.
    #[error("table {table:?} has an incompatible key schema: {detail}")]
    SchemaMismatch {
        /// The table's name.
        table: String,
        /// What differs.
        detail: String,
    },
    /// The table holds KCL's leases: it has our key schema, but its items are KCL's (they
    /// carry KCL-only attributes and none of ours). Using it would skip every item as
    /// malformed; copy its checkpoints into a table of our own instead (see
    /// `store::dynamodb::kcl`).
    #[error(
        "table {table:?} looks like a KCL lease table (item {key:?} has KCL's {attribute} and \
         not shardlease's leaseTenure and lastOp); shardlease cannot share a table with KCL: \
         copy its checkpoints into a new table with `shardlease import-kcl --from {table} --to NEW`"
    )]
    KclTable {
        /// The table's name.
        table: String,
        /// The key of the item that gave it away.
        key: String,
        /// The KCL attribute that item carries.
        attribute: &'static str,
    },
    /// The lease table did not become ACTIVE in time.
    #[error("table {table:?} is still {status} after {waited:?}")]
    TableNotActive {
        /// The table's name.
        table: String,
        /// Its last seen status.
        status: String,
        /// How long the store waited.
        waited: Duration,
    },
    /// A request failed (no region, no credentials, nothing listening at the endpoint, access
    /// denied, ...), or the configuration was refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ConnectError {
    /// Whether trying again later may succeed: only for a request that failed for a passing
    /// reason (see [`StoreError::is_retryable`]); the table's own problems need a change.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Store(err) if err.is_retryable())
    }
}

impl From<crate::config::ConfigError> for ConnectError {
    fn from(err: crate::config::ConfigError) -> Self {
        Self::Store(StoreError::from(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_passing_request_failure_is_retryable() {
        assert!(!ConnectError::TableNotFound { table: "t".into() }.is_retryable());
        let transient = StoreError::Transient {
            operation: "describe_table",
            key: "t".into(),
            ambiguous: false,
            source: "reset".into(),
        };
        assert!(ConnectError::from(transient).is_retryable());
    }

    #[test]
    fn a_kcl_table_is_fatal_and_says_how_to_import_it() {
        let err = ConnectError::KclTable {
            table: "orders-kcl".into(),
            key: "shardId-000000000000".into(),
            attribute: "checkpointSubSequenceNumber",
        };
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "table \"orders-kcl\" looks like a KCL lease table (item \"shardId-000000000000\" \
             has KCL's checkpointSubSequenceNumber and not shardlease's leaseTenure and lastOp); \
             shardlease cannot share a table with KCL: copy its checkpoints into a new table \
             with `shardlease import-kcl --from orders-kcl --to NEW`"
        );
    }
}
