//! What an AWS SDK error says about the client's configuration and endpoint: shared by the
//! DynamoDB store and the Kinesis consumer, whose SDKs report these failures alike.
//!
//! A missing region, missing credentials and a refused connection all reach the caller as a
//! `DispatchFailure` whose connector error is "other" or "io", the same shape as a passing
//! network failure. They are told apart here, from the error's chain.

use std::error::Error;
use std::sync::{Arc, Mutex};

#[cfg(feature = "dynamodb")]
use aws_sdk_dynamodb as sdk;
#[cfg(all(feature = "kinesis", not(feature = "dynamodb")))]
use aws_sdk_kinesis as sdk;

use sdk::config::interceptors::BeforeTransmitInterceptorContextRef;
use sdk::config::{ConfigBag, Intercept, RuntimeComponents};

use super::Misconfiguration;

/// Why a request could not be sent at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendFailure {
    /// The client's configuration lacks something every request needs.
    Misconfigured(Misconfiguration),
    /// The endpoint refused the connection: nothing listens there.
    Refused,
}

/// How the SDK words a missing region: the endpoint rules without an endpoint URL
/// ("Invalid Configuration: Missing Region"), the SigV4 signer with one. Both error types are
/// private to the SDK; `tests/config_errors.rs` pins these texts on real clients.
const NO_REGION: &[&str] = &["Missing Region", "missing signing region"];

/// How the SDK words missing credentials: a client built with no credentials provider (no
/// identity resolver for SigV4), a provider chain in which no provider found any
/// (`CredentialsError::CredentialsNotLoaded`), and a provider whose own configuration is
/// unusable, such as a profile file it cannot read (`CredentialsError::InvalidConfiguration`).
const NO_CREDENTIALS: &[&str] = &[
    "there was no identity resolver",
    "the credential provider was not enabled",
    "the credentials provider was not properly configured",
];

/// Walks `err`'s chain for a configuration problem or a refused connection.
pub(crate) fn send_failure(err: &(dyn Error + 'static)) -> Option<SendFailure> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return Some(SendFailure::Refused);
            }
        }
        let text = err.to_string();
        if NO_REGION.iter().any(|t| text.contains(t)) {
            return Some(SendFailure::Misconfigured(Misconfiguration::NoRegion));
        }
        if NO_CREDENTIALS.iter().any(|t| text.contains(t)) {
            return Some(SendFailure::Misconfigured(Misconfiguration::NoCredentials));
        }
        next = err.source();
    }
    None
}

/// Remembers where the requests it intercepts were sent (`scheme://host:port`), so that an
/// error can name the endpoint: the SDK's config does not tell its endpoint URL.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndpointRecorder(Arc<Mutex<Option<String>>>);

impl EndpointRecorder {
    /// The endpoint of the last request sent, or `fallback` when none was.
    pub(crate) fn endpoint_or(&self, fallback: &str) -> String {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        seen.unwrap_or_else(|| fallback.to_owned())
    }
}

impl Intercept for EndpointRecorder {
    fn name(&self) -> &'static str {
        "EndpointRecorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), sdk::error::BoxError> {
        let endpoint = origin(context.request().uri()).to_owned();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(endpoint);
        Ok(())
    }
}

/// `scheme://authority` of a URI: what follows is the same for every endpoint.
fn origin(uri: &str) -> &str {
    let start = uri.find("://").map_or(0, |i| i + 3);
    match uri[start..].find(['/', '?']) {
        Some(end) => &uri[..start + end],
        None => uri,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_drops_the_path_and_query() {
        assert_eq!(origin("http://127.0.0.1:4567/"), "http://127.0.0.1:4567");
        assert_eq!(
            origin("https://dynamodb.eu-west-1.amazonaws.com?x=1"),
            "https://dynamodb.eu-west-1.amazonaws.com"
        );
        assert_eq!(origin("http://localhost:1"), "http://localhost:1");
    }

    #[test]
    fn a_refused_connection_is_found_deep_in_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("dispatch failure")]
        struct Outer(#[source] std::io::Error);
        let refused = Outer(std::io::ErrorKind::ConnectionRefused.into());
        assert_eq!(send_failure(&refused), Some(SendFailure::Refused));
        let reset = Outer(std::io::ErrorKind::ConnectionReset.into());
        assert_eq!(send_failure(&reset), None);
    }
}
