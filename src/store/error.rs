//! Store errors, classified so that callers know what to do with them.
//!
//! A lost conditional write is *not* an error: it is [`Outcome::LostRace`](super::Outcome).
//! Errors are what stops an operation from having a definite answer.

use std::time::Duration;

use crate::config::ConfigError;

/// A boxed error from a backend (an SDK error, for DynamoDB).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Why a store operation has no definite answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend refused the request for lack of capacity. The write was not applied.
    /// Retryable.
    #[error("{operation} on {key:?} was throttled")]
    Throttled {
        /// The store operation (`"renew"`, `"take"`, ...).
        operation: &'static str,
        /// The item's key, or the table name for table-wide operations.
        key: String,
        /// What the backend said.
        #[source]
        source: BoxError,
    },
    /// A passing failure: a timeout, a dropped connection, a server error. Retryable.
    ///
    /// When `ambiguous` is true the request may have been applied even though no answer came
    /// back; see [`LeaseStore`](super::LeaseStore) for how to recover.
    #[error("{operation} on {key:?} failed transiently (ambiguous: {ambiguous})")]
    Transient {
        /// The store operation.
        operation: &'static str,
        /// The item's key, or the table name.
        key: String,
        /// True when the write may have been applied.
        ambiguous: bool,
        /// What went wrong.
        #[source]
        source: BoxError,
    },
    /// A failure that retrying will not cure: bad credentials, access denied, a validation
    /// error, an item too large.
    #[error("{operation} on {key:?} failed")]
    Fatal {
        /// The store operation.
        operation: &'static str,
        /// The item's key, or the table name.
        key: String,
        /// What went wrong.
        #[source]
        source: BoxError,
    },
    /// An item in the table could not be decoded. It is left as it is.
    #[error("item {key:?} is malformed: field {field:?} {reason}")]
    Malformed {
        /// The item's key (or `"<missing>"` when the key itself is absent).
        key: String,
        /// The attribute at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value is not acceptable: the field and why.
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    /// The client cannot send any request as it is configured (no region, no credentials).
    /// Nothing was sent; retrying will not cure it: fix the configuration.
    #[error("{problem}")]
    Misconfigured {
        /// The store operation.
        operation: &'static str,
        /// What the configuration lacks, and how to provide it.
        problem: Misconfiguration,
        /// What the SDK said, when the problem came from a failed request.
        #[source]
        source: Option<BoxError>,
    },
    /// Nothing listens at the endpoint: the connection was refused, so the request was never
    /// sent (never ambiguous).
    ///
    /// At startup (`DynamoStore::connect`) it means a wrong endpoint or a service that is not
    /// running, and is returned at once. Afterwards it may be a passing blip (a proxy or a
    /// load balancer restarting, an emulator restarted), so it is retryable like a transient
    /// failure.
    #[error(
        "nothing listens at {endpoint} (connection refused): is the endpoint right, is the \
         service (or the emulator) running?"
    )]
    Unreachable {
        /// The store operation.
        operation: &'static str,
        /// The item's key, or the table name.
        key: String,
        /// The endpoint's URL when known, otherwise a description of it.
        endpoint: String,
        /// What the SDK said.
        #[source]
        source: BoxError,
    },
}

/// What a client's configuration lacks, stated with the way to provide it. The [`Display`]
/// is one line an operator can act on.
///
/// [`Display`]: std::fmt::Display
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Misconfiguration {
    /// No region: requests can be neither addressed nor signed.
    #[error(
        "no AWS region configured: set AWS_REGION, or region in ~/.aws/config, or the \
         client's region"
    )]
    NoRegion,
    /// No credentials: the client has no credentials provider, none of its providers found
    /// any, or a provider's own configuration is unusable (a profile file it cannot read).
    #[error(
        "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
         AWS_PROFILE (a profile in ~/.aws/credentials), or run with an instance, task or pod \
         role"
    )]
    NoCredentials,
    /// The Redis server refused the credentials of the URL, or their permissions.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    #[error(
        "the Redis server refused the credentials: put the user and password in the URL \
         (redis://USER:PASSWORD@HOST:PORT/), and check that the server's ACL (or requirepass) \
         lets them run EVALSHA, SCRIPT LOAD, HGETALL and ZRANGEBYLEX"
    )]
    RedisAuth,
}

impl StoreError {
    /// A request that got no answer within `waited`: transient, and ambiguous, since it may
    /// have been applied all the same.
    pub(crate) fn unanswered(operation: &'static str, key: &str, waited: Duration) -> Self {
        Self::Transient {
            operation,
            key: key.to_owned(),
            ambiguous: true,
            source: format!("no answer within {waited:?}").into(),
        }
    }

    /// True for throttling, transient failures and refused connections: the same call may
    /// succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Throttled { .. } | Self::Transient { .. } | Self::Unreachable { .. }
        )
    }

    /// This error, as the answer of a call an earlier attempt of which may have been applied
    /// (`maybe_applied`): a retryable failure becomes an ambiguous transient one, naming the
    /// last attempt's error. Other errors are as they are.
    pub(crate) fn maybe_applied_before(self, maybe_applied: bool) -> Self {
        if !maybe_applied || self.is_ambiguous() || !self.is_retryable() {
            return self;
        }
        let (operation, key) = match &self {
            Self::Throttled { operation, key, .. }
            | Self::Transient { operation, key, .. }
            | Self::Unreachable { operation, key, .. } => (*operation, key.clone()),
            _ => return self,
        };
        Self::Transient {
            operation,
            key,
            ambiguous: true,
            source: format!("an earlier attempt may have been applied; the last one: {self}")
                .into(),
        }
    }

    /// True when the failed write may nevertheless have been applied.
    pub fn is_ambiguous(&self) -> bool {
        matches!(
            self,
            Self::Transient {
                ambiguous: true,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> BoxError {
        "boom".into()
    }

    #[test]
    fn only_throttling_and_transient_errors_are_retryable() {
        let throttled = StoreError::Throttled {
            operation: "renew",
            key: "a".into(),
            source: src(),
        };
        let transient = StoreError::Transient {
            operation: "take",
            key: "a".into(),
            ambiguous: true,
            source: src(),
        };
        let fatal = StoreError::Fatal {
            operation: "take",
            key: "a".into(),
            source: src(),
        };
        assert!(throttled.is_retryable() && !throttled.is_ambiguous());
        assert!(transient.is_retryable() && transient.is_ambiguous());
        assert!(!fatal.is_retryable());
    }

    #[test]
    fn a_refused_connection_is_retryable_and_never_ambiguous_and_misconfiguration_is_fatal() {
        let refused = StoreError::Unreachable {
            operation: "renew",
            key: "a".into(),
            endpoint: "http://127.0.0.1:4567".into(),
            source: src(),
        };
        assert!(refused.is_retryable() && !refused.is_ambiguous());
        for problem in [Misconfiguration::NoRegion, Misconfiguration::NoCredentials] {
            let err = StoreError::Misconfigured {
                operation: "renew",
                problem,
                source: None,
            };
            assert!(!err.is_retryable() && !err.is_ambiguous());
        }
    }

    #[test]
    fn configuration_errors_say_in_one_line_what_to_fix() {
        let refused = StoreError::Unreachable {
            operation: "describe_table",
            key: "t".into(),
            endpoint: "http://127.0.0.1:4567".into(),
            source: src(),
        };
        assert_eq!(
            refused.to_string(),
            "nothing listens at http://127.0.0.1:4567 (connection refused): is the endpoint \
             right, is the service (or the emulator) running?"
        );
        let region = StoreError::Misconfigured {
            operation: "describe_table",
            problem: Misconfiguration::NoRegion,
            source: None,
        };
        assert_eq!(
            region.to_string(),
            "no AWS region configured: set AWS_REGION, or region in ~/.aws/config, or the \
             client's region"
        );
    }

    #[test]
    fn messages_name_the_item_and_do_not_repeat_the_source() {
        let err = StoreError::Fatal {
            operation: "checkpoint",
            key: "shard-1".into(),
            source: src(),
        };
        assert_eq!(err.to_string(), r#"checkpoint on "shard-1" failed"#);
    }
}
