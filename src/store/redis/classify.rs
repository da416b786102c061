//! Maps every error of the `redis` crate onto the store's classes.
//!
//! | what the client or server says | class |
//! |---|---|
//! | connection refused | unreachable: retryable, never ambiguous (nothing was sent) |
//! | I/O error, connection reset or dropped, timeout | transient and ambiguous: the script may have run |
//! | `BUSY`, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` | transient, not ambiguous: refused before running |
//! | `NOSCRIPT` | loaded and sent again at once; a second `NOSCRIPT` (another `SCRIPT FLUSH` meanwhile) is transient, not ambiguous |
//! | authentication (`NOAUTH`, `WRONGPASS`, `NOPERM`), `WRONGTYPE`, script errors, anything else | fatal |

use redis::{ErrorKind, RedisError};

use crate::store::StoreError;

/// How an unreachable server is named (the URL may carry a password, so it is not repeated).
pub(super) const UNKNOWN_ENDPOINT: &str = "the Redis server";

/// Error codes of a server that refuses a command for a moment, before running it.
pub(super) const RETRYABLE_CODES: &[&str] = &[
    "NOSCRIPT",
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
];

/// Error codes of a refused authentication or permission.
pub(super) const AUTH_CODES: &[&str] = &["NOAUTH", "WRONGPASS", "NOPERM"];

/// True when the server refused the client's credentials or permissions.
pub(super) fn is_auth(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
        || err.code().is_some_and(|code| AUTH_CODES.contains(&code))
}

/// Classifies `err`, from `operation` on `key`.
pub(super) fn classify(operation: &'static str, key: &str, err: RedisError) -> StoreError {
    let key = key.to_owned();
    if err.is_connection_refusal() {
        return StoreError::Unreachable {
            operation,
            key,
            endpoint: UNKNOWN_ENDPOINT.to_owned(),
            source: Box::new(err),
        };
    }
    if err
        .code()
        .is_some_and(|code| RETRYABLE_CODES.contains(&code))
    {
        return StoreError::Transient {
            operation,
            key,
            ambiguous: false,
            source: Box::new(err),
        };
    }
    let lost = err.is_io_error() || err.is_timeout() || err.is_connection_dropped();
    if lost && !is_auth(&err) {
        return StoreError::Transient {
            operation,
            key,
            ambiguous: true,
            source: Box::new(err),
        };
    }
    StoreError::Fatal {
        operation,
        key,
        source: Box::new(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> RedisError {
        // What the client makes of an error reply `-CODE detail`.
        let reply = format!("-{code} some detail\r\n");
        match redis::parse_redis_value(reply.as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            other => panic!("not a server error: {other:?}"),
        }
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        std::io::Error::new(kind, "test").into()
    }

    #[test]
    fn a_refused_connection_is_unreachable_and_never_ambiguous() {
        let err = classify("take", "k", io(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
        assert!(err.is_retryable() && !err.is_ambiguous());
    }

    #[test]
    fn a_lost_connection_or_a_timeout_is_transient_and_ambiguous() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let err = classify("take", "k", io(kind));
            assert!(
                err.is_retryable() && err.is_ambiguous(),
                "{kind:?}: {err:?}"
            );
        }
    }

    #[test]
    fn a_busy_or_failing_over_server_is_retryable_and_not_ambiguous() {
        for code in RETRYABLE_CODES {
            let err = classify("renew", "k", server(code));
            assert!(err.is_retryable() && !err.is_ambiguous(), "{code}: {err:?}");
        }
    }

    #[test]
    fn auth_wrong_type_and_script_errors_are_fatal() {
        for code in ["NOAUTH", "WRONGPASS", "NOPERM", "WRONGTYPE", "ERR"] {
            let err = classify("renew", "k", server(code));
            assert!(matches!(err, StoreError::Fatal { .. }), "{code}: {err:?}");
        }
        assert!(is_auth(&server("WRONGPASS")) && !is_auth(&server("WRONGTYPE")));
    }
}
