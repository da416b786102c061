//! Request authentication as LogHub's signature version 1 defines it: the headers every signed
//! request carries, and, when the emulator is given an access key, the signature itself.
//!
//! The string signed is
//! `METHOD \n Content-MD5 \n Content-Type \n Date \n` then every `x-log-*` and `x-acs-*`
//! header as `name:value\n` sorted by name, then the path and, if any, `?` and the query
//! parameters sorted by name as `name=value` joined by `&` (values decoded); the signature is
//! the base64 of its HMAC-SHA1 under the access key secret. The SDK's signing crate
//! (`aliyun-log-sdk-sign`) computes it from the clock at signing time, so it cannot check a
//! request signed a moment earlier: the check is written here and tested against that crate.

use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hyper::HeaderMap;

use crate::error::ApiError;

/// How far a request's `Date` may be from the emulator's clock: LogHub's 15 minutes
/// (RequestTimeExpired).
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// An access key whose signatures are checked.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKey {
    /// The access key id.
    pub id: String,
    /// The access key secret.
    pub secret: String,
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Checks the headers a signed request carries (`Authorization: LOG id:signature`, `Date`,
/// `x-log-apiversion`, `x-log-signaturemethod`) and, with `key`, the access key id and the
/// signature. `path` is decoded; `query` is the raw query string.
pub fn check(
    key: Option<&AccessKey>,
    method: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    now: SystemTime,
) -> Result<(), ApiError> {
    // The reference gives no code for a missing Authorization header; 401 Unauthorized, the
    // code of its other authentication failures.
    let authorization = header(headers, "authorization")
        .ok_or_else(|| ApiError::unauthorized("Authorization does not exist in http header"))?;
    let (id, signature) = authorization
        .strip_prefix("LOG ")
        .and_then(|rest| rest.rsplit_once(':'))
        .filter(|(id, signature)| !id.is_empty() && !signature.is_empty())
        .ok_or_else(|| {
            ApiError::unauthorized("Authorization must be LOG <accessKeyId>:<signature>")
        })?;
    let date = header(headers, "date")
        .ok_or_else(|| ApiError::new(400, "MissingDate", "Date does not exist in http header."))?;
    let sent = httpdate::parse_http_date(date).map_err(|_| {
        ApiError::new(
            400,
            "InvalidDateFormat",
            format!("Date {date} must follow RFC822."),
        )
    })?;
    let skew = now
        .duration_since(sent)
        .or_else(|e| Ok::<_, ()>(e.duration()))
        .unwrap_or_default();
    if skew > MAX_SKEW {
        return Err(ApiError::new(
            400,
            "RequestTimeExpired",
            format!(
                "Request time {date} has been expired while server time is {}.",
                httpdate::fmt_http_date(now)
            ),
        ));
    }
    match header(headers, "x-log-apiversion") {
        None => {
            return Err(ApiError::new(
                400,
                "MissingAPIVersion",
                "x-log-apiversion does not exist in http header.",
            ))
        }
        Some("0.6.0") => {}
        Some(other) => {
            return Err(ApiError::new(
                400,
                "InvalidAPIVersion",
                format!("x-log-apiversion {other} is unsupported."),
            ))
        }
    }
    match header(headers, "x-log-signaturemethod") {
        None => {
            return Err(ApiError::new(
                400,
                "MissingSignatureMethod",
                "x-log-signaturemethod does not exist in http header.",
            ))
        }
        Some("hmac-sha1") => {}
        Some(other) => {
            return Err(ApiError::new(
                400,
                "InvalidSignatureMethod",
                format!("signature method {other} is unsupported."),
            ))
        }
    }
    let Some(key) = key else {
        return Ok(());
    };
    if id != key.id {
        return Err(ApiError::unauthorized(format!(
            "AccessKeyId not found: {id}"
        )));
    }
    let expected = signature_of(&key.secret, method, path, query, headers);
    if expected != signature {
        return Err(ApiError::new(
            401,
            "SignatureNotMatch",
            format!("Signature {signature} not matched."),
        ));
    }
    Ok(())
}

/// The signature of a request under `secret`.
pub fn signature_of(
    secret: &str,
    method: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
) -> String {
    let mut message = format!(
        "{method}\n{}\n{}\n{}\n",
        header(headers, "content-md5").unwrap_or(""),
        header(headers, "content-type").unwrap_or(""),
        header(headers, "date").unwrap_or(""),
    );
    let mut signed: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(name, _)| {
            name.as_str().starts_with("x-log-") || name.as_str().starts_with("x-acs-")
        })
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    signed.sort_by_key(|(name, _)| *name);
    for (name, value) in signed {
        message.push_str(name);
        message.push(':');
        message.push_str(value);
        message.push('\n');
    }
    message.push_str(path);
    let mut params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if !params.is_empty() {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let joined: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        message.push('?');
        message.push_str(&joined.join("&"));
    }
    STANDARD.encode(hmac_sha1::hmac_sha1(secret.as_bytes(), message.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aliyun_log_sdk_sign::{sign_v1, QueryParams};

    fn signed(secret: &str, query: &[(&str, &str)], body: Option<&[u8]>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-log-bodyrawsize", "0".parse().unwrap());
        sign_v1(
            "my-id",
            secret,
            None,
            http::Method::POST,
            "/logstores/ls/consumergroups/g",
            &mut headers,
            QueryParams::from(query.iter().copied()),
            body,
        )
        .unwrap();
        headers
    }

    fn key() -> AccessKey {
        AccessKey {
            id: "my-id".into(),
            secret: "right".into(),
        }
    }

    const PATH: &str = "/logstores/ls/consumergroups/g";

    #[test]
    fn the_sdks_signature_is_accepted_and_a_wrong_secret_is_not() {
        let query = [
            ("type", "checkpoint"),
            ("consumer", "c 1"),
            ("forceSuccess", "false"),
        ];
        let raw_query = "type=checkpoint&consumer=c+1&forceSuccess=false";
        let now = SystemTime::now();
        let good = signed("right", &query, Some(b"{\"shard\":0}"));
        check(Some(&key()), "POST", PATH, raw_query, &good, now).unwrap();
        let bad = signed("wrong", &query, Some(b"{\"shard\":0}"));
        let err = check(Some(&key()), "POST", PATH, raw_query, &bad, now).unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (401, "SignatureNotMatch"));
        // The same request with another query is another signature.
        let err = check(Some(&key()), "POST", PATH, "type=heartbeat", &good, now).unwrap_err();
        assert_eq!(err.code, "SignatureNotMatch");
        // Without a key only the headers are checked.
        check(None, "POST", PATH, raw_query, &bad, now).unwrap();
    }

    #[test]
    fn missing_and_stale_headers_are_refused() {
        let now = SystemTime::now();
        let headers = signed("right", &[], None);
        let code = |h: &HeaderMap, now| check(None, "POST", PATH, "", h, now).unwrap_err().code;
        let mut without = headers.clone();
        without.remove("authorization");
        assert_eq!(code(&without, now), "Unauthorized");
        let mut without = headers.clone();
        without.remove("date");
        assert_eq!(code(&without, now), "MissingDate");
        let mut without = headers.clone();
        without.remove("x-log-apiversion");
        assert_eq!(code(&without, now), "MissingAPIVersion");
        assert_eq!(
            code(&headers, now + Duration::from_secs(16 * 60)),
            "RequestTimeExpired"
        );
        let mut other = key();
        other.id = "other".into();
        let err = check(Some(&other), "POST", PATH, "", &headers, now).unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (401, "Unauthorized"));
    }
}
