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
