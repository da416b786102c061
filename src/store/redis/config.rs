//! [`RedisConfig`]: where the server is, which table, how to retry.

use std::fmt;
use std::path::PathBuf;

use crate::config::ConfigError;
use crate::store::RetryPolicy;

/// Default [`RedisConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "shardlease";

/// Default [`RedisConfig::page_size`].
pub const DEFAULT_PAGE_SIZE: u32 = 1000;

/// Configuration of the Redis store: [`RedisConfig::new`] with the server's URL and the
/// table's name, then a setter per field to change.
///
/// Its `Debug` shows the URL without its password.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server: `redis://[USER:PASSWORD@]HOST[:PORT][/DB]` (user and password are sent
    /// with `AUTH`), or `rediss://` for TLS, which needs the `redis-tls` feature (the
    /// platform's TLS: OpenSSL on Linux). Required.
    pub url: String,
    /// For `rediss://`: a PEM file of the certificate authority that signed the server's
    /// certificate, for a server whose certificate does not chain to the system's trust store
    /// (a private CA, a self-signed test server). Default: `None`, the system's trust store.
    pub ca_file: Option<PathBuf>,
    /// The table's name: the hash tag every key of the table lives under. 1 to 255
    /// characters, no `{`, `}` or control character. Required.
    pub table: String,
    /// The first part of every key, so that many applications share one Redis. No `{`, `}`
    /// or control character. Default: [`DEFAULT_KEY_PREFIX`].
    pub key_prefix: String,
    /// Retries of transient failures, and the timeout of each attempt (connecting and each
    /// reply). Default: [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Items per listing page, at least 1. Default: [`DEFAULT_PAGE_SIZE`].
    pub page_size: u32,
}

impl RedisConfig {
    /// A configuration with every default, the server's URL and the table's name.
    pub fn new(url: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ca_file: None,
            table: table.into(),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            retry: RetryPolicy::default(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Sets [`url`](Self::url).
    #[must_use]
    pub fn url(mut self, value: impl Into<String>) -> Self {
        self.url = value.into();
        self
    }

    /// Sets [`ca_file`](Self::ca_file).
    #[must_use]
    pub fn ca_file(mut self, value: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(value.into());
        self
    }

    /// Sets [`table`](Self::table).
    #[must_use]
    pub fn table(mut self, value: impl Into<String>) -> Self {
        self.table = value.into();
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix).
    #[must_use]
    pub fn key_prefix(mut self, value: impl Into<String>) -> Self {
        self.key_prefix = value.into();
        self
    }

    /// Sets [`retry`](Self::retry).
    #[must_use]
    pub fn retry(mut self, value: RetryPolicy) -> Self {
        self.retry = value;
        self
    }

    /// Sets [`page_size`](Self::page_size).
    #[must_use]
    pub fn page_size(mut self, value: u32) -> Self {
        self.page_size = value;
        self
    }

    /// Checks every field; the error names the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = redacted(&self.url);
        let tls = self.url.starts_with("rediss://");
        if tls && !cfg!(feature = "redis-tls") {
            return Err(ConfigError::invalid(
                "url",
                format!(
                    "{url:?} is a TLS URL, and this build has no TLS for Redis: build shardlease \
                     with the redis-tls feature"
                ),
            ));
        }
        if !tls
            && !["redis://", "redis+unix://", "unix://"]
                .iter()
                .any(|scheme| self.url.starts_with(scheme))
        {
            return Err(ConfigError::invalid(
                "url",
                format!("{url:?} is not a redis://, rediss:// or unix:// URL"),
            ));
        }
        if self.ca_file.is_some() && !tls {
            return Err(ConfigError::invalid(
                "ca_file",
                format!("a CA file is for a rediss:// (TLS) URL, not {url:?}"),
            ));
        }
        if let Err(err) = redis::Client::open(self.url.as_str()) {
            return Err(ConfigError::invalid(
                "url",
                format!("{url:?} cannot be used: {err}"),
            ));
        }
        if self.table.is_empty() || self.table.len() > 255 || !plain(&self.table) {
            return Err(ConfigError::invalid(
                "table",
                format!(
                    "table name {:?} must be 1 to 255 characters without '{{', '}}' or a control \
                     character",
                    self.table
                ),
            ));
        }
        if !plain(&self.key_prefix) {
            return Err(ConfigError::invalid(
                "key_prefix",
                format!(
                    "key prefix {:?} must not hold '{{', '}}' or a control character (the \
                     table's name is the hash tag)",
                    self.key_prefix
                ),
            ));
        }
        if self.page_size == 0 {
            return Err(ConfigError::invalid(
                "page_size",
                "page_size must be at least 1",
            ));
        }
        Ok(())
    }
}

/// No brace (the hash tag is the table's) and no control character.
fn plain(text: &str) -> bool {
    !text.chars().any(|c| c == '{' || c == '}' || c.is_control())
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redacted(&self.url))
            .field("ca_file", &self.ca_file)
            .field("table", &self.table)
            .field("key_prefix", &self.key_prefix)
            .field("retry", &self.retry)
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// `url` with the password of its user information, if any, replaced by `***`.
pub(super) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user = match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{user}{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(config: RedisConfig) -> &'static str {
        match config.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn every_field_is_checked_and_named() {
        let ok = RedisConfig::new("redis://127.0.0.1:6390", "orders");
        ok.validate().unwrap();
        assert_eq!(field(ok.clone().url("http://127.0.0.1")), "url");
        let tls = ok.clone().url("rediss://127.0.0.1");
        if cfg!(feature = "redis-tls") {
            tls.clone().validate().unwrap();
            tls.ca_file("/etc/ca.pem").validate().unwrap();
        } else {
            assert_eq!(field(tls), "url");
        }
        assert_eq!(field(ok.clone().ca_file("/etc/ca.pem")), "ca_file");
        assert_eq!(field(ok.clone().url("redis://[::1")), "url");
        assert_eq!(field(ok.clone().table("")), "table");
        assert_eq!(field(ok.clone().table("a{b}")), "table");
        assert_eq!(field(ok.clone().table("x".repeat(256))), "table");
        assert_eq!(field(ok.clone().key_prefix("app{1}")), "key_prefix");
        assert_eq!(field(ok.page_size(0)), "page_size");
    }

    #[test]
    fn the_password_never_shows() {
        assert_eq!(
            redacted("redis://app:s3cret@cache:6379/2"),
            "redis://app:***@cache:6379/2"
        );
        assert_eq!(redacted("rediss://s3cret@cache"), "rediss://***@cache");
        assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
        let config = RedisConfig::new("redis://:s3cret@cache:6379", "t");
        assert!(!format!("{config:?}").contains("s3cret"));
    }
}
