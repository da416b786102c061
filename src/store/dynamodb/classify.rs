//! Maps every SDK error onto the store's three classes: throttled, transient, fatal.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::store::StoreError;

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
}
