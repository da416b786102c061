//! Maps every SDK error onto the store's classes: throttled, transient, fatal, and the
//! requests that could not be sent at all: a client without region or credentials
//! (misconfigured, fatal) and an endpoint where nothing listens (unreachable, retryable and
//! never ambiguous).

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::store::sdk::{send_failure, SendFailure};
use crate::store::StoreError;

/// How an unreachable endpoint is named when the failed request did not record its URL.
pub(crate) const UNKNOWN_ENDPOINT: &str = "the DynamoDB endpoint";

/// Error codes DynamoDB uses when it refuses a request for lack of capacity.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
];

/// Error codes of passing server-side trouble (the request may or may not have been applied).
const TRANSIENT_CODES: &[&str] = &[
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "TransactionConflictException",
];

/// Classifies an SDK error for `operation` on `key`.
pub(crate) fn classify<E>(
    operation: &'static str,
    key: &str,
    err: SdkError<E, HttpResponse>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let key = key.to_owned();
    if matches!(
        err,
        SdkError::DispatchFailure(_) | SdkError::ConstructionFailure(_)
    ) {
        match send_failure(&err) {
            Some(SendFailure::Misconfigured(problem)) => {
                return StoreError::Misconfigured {
                    operation,
                    problem,
                    source: Some(Box::new(err)),
                }
            }
            Some(SendFailure::Refused) => {
                return StoreError::Unreachable {
                    operation,
                    key,
                    endpoint: UNKNOWN_ENDPOINT.to_owned(),
                    source: Box::new(err),
                }
            }
            None => {}
        }
    }
    let code = err
        .as_service_error()
        .and_then(|e| e.code())
        .map(str::to_owned);
    let (throttled, transient) = match &err {
        SdkError::ServiceError(service) => {
            let code = code.as_deref().unwrap_or_default();
            let status = service.raw().status();
            (
                THROTTLING_CODES.contains(&code) || status.as_u16() == 429,
                TRANSIENT_CODES.contains(&code) || status.is_server_error(),
            )
        }
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => (false, true),
        SdkError::DispatchFailure(failure) => (false, !failure.is_user()),
        _ => (false, false),
    };
    let source = Box::new(err);
    if throttled {
        StoreError::Throttled {
            operation,
            key,
            source,
        }
    } else if transient {
        // A throttled request is refused before it is applied; for anything else that went
        // wrong after the request left, we cannot know, so it is ambiguous.
        StoreError::Transient {
            operation,
            key,
            ambiguous: true,
            source,
        }
    } else {
        StoreError::Fatal {
            operation,
            key,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty())
    }

    fn service(code: &str, status: u16) -> StoreError {
        let err = UpdateItemError::generic(ErrorMetadata::builder().code(code).build());
        classify("renew", "k", SdkError::service_error(err, response(status)))
    }

    #[test]
    fn capacity_refusals_are_throttling_and_not_ambiguous() {
        for code in THROTTLING_CODES {
            let err = service(code, 400);
            assert!(
                matches!(err, StoreError::Throttled { .. }),
                "{code}: {err:?}"
            );
            assert!(err.is_retryable() && !err.is_ambiguous());
        }
        assert!(matches!(
            service("Unknown", 429),
            StoreError::Throttled { .. }
        ));
    }

    #[test]
    fn server_errors_are_transient_and_ambiguous() {
        for code in TRANSIENT_CODES {
            let err = service(code, 500);
            assert!(err.is_retryable() && err.is_ambiguous(), "{code}: {err:?}");
        }
        assert!(service("SomethingNew", 503).is_ambiguous());
    }

    #[test]
    fn client_errors_are_fatal() {
        for code in [
            "AccessDeniedException",
            "ValidationException",
            "ResourceNotFoundException",
        ] {
            let err = service(code, 400);
            assert!(matches!(err, StoreError::Fatal { .. }), "{code}: {err:?}");
        }
    }

    #[test]
    fn transport_failures_are_transient() {
        let timeout: SdkError<UpdateItemError, HttpResponse> = SdkError::timeout_error("slow");
        assert!(classify("renew", "k", timeout).is_ambiguous());
        let io = SdkError::<UpdateItemError, HttpResponse>::dispatch_failure(ConnectorError::io(
            "reset".into(),
        ));
        assert!(classify("renew", "k", io).is_retryable());
        let lost = SdkError::<UpdateItemError, HttpResponse>::response_error("cut", response(200));
        assert!(classify("renew", "k", lost).is_ambiguous());
        let bad = SdkError::<UpdateItemError, HttpResponse>::construction_failure("bad input");
        assert!(matches!(
            classify("renew", "k", bad),
            StoreError::Fatal { .. }
        ));
    }

    /// What a real client's `GetItem` fails with, classified. Nothing reaches the network
    /// but a connection attempt to a closed port on 127.0.0.1.
    async fn get_item_with(config: aws_sdk_dynamodb::config::Builder) -> StoreError {
        use aws_sdk_dynamodb::config::BehaviorVersion;
        let client = aws_sdk_dynamodb::Client::from_conf(
            config.behavior_version(BehaviorVersion::latest()).build(),
        );
        let sent = client
            .get_item()
            .table_name("t")
            .key("k", aws_sdk_dynamodb::types::AttributeValue::S("v".into()))
            .send()
            .await;
        classify("get", "v", sent.expect_err("the request cannot succeed"))
    }

    fn closed_endpoint() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port())
    }

    fn test_credentials() -> aws_sdk_dynamodb::config::Credentials {
        aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "test")
    }

    #[tokio::test]
    async fn a_client_without_a_region_is_misconfigured_with_or_without_an_endpoint() {
        use aws_sdk_dynamodb::Config;
        let with_endpoint = Config::builder()
            .endpoint_url(closed_endpoint())
            .credentials_provider(test_credentials());
        let without = Config::builder().credentials_provider(test_credentials());
        for config in [with_endpoint, without] {
            let err = get_item_with(config).await;
            assert!(
                matches!(
                    err,
                    StoreError::Misconfigured {
                        problem: crate::store::Misconfiguration::NoRegion,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_client_without_credentials_is_misconfigured() {
        let config = aws_sdk_dynamodb::Config::builder()
            .endpoint_url(closed_endpoint())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
        let err = get_item_with(config).await;
        assert!(
            matches!(
                err,
                StoreError::Misconfigured {
                    problem: crate::store::Misconfiguration::NoCredentials,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_retryable_and_never_ambiguous() {
        let config = aws_sdk_dynamodb::Config::builder()
            .endpoint_url(closed_endpoint())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(test_credentials());
        let err = get_item_with(config).await;
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
        assert!(err.is_retryable() && !err.is_ambiguous());
        assert!(err
            .to_string()
            .starts_with("nothing listens at the DynamoDB endpoint"));
    }
}
