//! An emulator that checks signatures, as LogHub does: the SDK signing with the right access
//! key is served, another secret or access key id is refused with LogHub's codes, and a
//! request without the signed-request headers is refused.

mod common;

use std::process::ExitCode;

use common::{client_with, refused, Case, CaseFuture, Ctx, KEY_ID, KEY_SECRET};
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("the_right_key_is_served", right_key),
        ("a_wrong_secret_or_key_id_is_refused", wrong_key),
        ("a_request_without_the_signed_headers_is_refused", unsigned),
    ];
    common::run(Emulator::new().access_key(KEY_ID, KEY_SECRET), cases)
}

fn right_key(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        let listed = ctx
            .client()
            .list_shards(&project, &logstore)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.get_body().shards().len(), 2);
        // Query parameters are signed too.
        let path = format!("/logstores/{logstore}/shards/0");
        let split = ctx
            .call(
                "POST",
                Some(&project),
                &path,
                &[("action", "split")],
                &[],
                b"",
            )
            .await;
        assert_eq!(
            split.status,
            200,
            "{}",
            String::from_utf8_lossy(&split.body)
        );
    })
}

fn wrong_key(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let secret = client_with(KEY_ID, "not-the-secret", 0);
        let refusal = refused(secret.list_shards(&project, &logstore).send().await);
        assert_eq!(refusal, (401, "SignatureNotMatch".into()));
        let id = client_with("someone-else", KEY_SECRET, 0);
        let refusal = refused(id.list_shards(&project, &logstore).send().await);
        assert_eq!(refusal, (401, "Unauthorized".into()));
    })
}

fn unsigned(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let base = format!("GET /logstores/{logstore}/shards HTTP/1.1\r\nhost: {project}.loghub.local\r\nconnection: close\r\n");
        let cases = [
            (String::new(), 401, "Unauthorized"),
            ("authorization: Basic abc\r\n".to_string(), 401, "Unauthorized"),
            (format!("authorization: LOG {KEY_ID}:abc\r\n"), 400, "MissingDate"),
            (format!("authorization: LOG {KEY_ID}:abc\r\ndate: yesterday\r\n"), 400, "InvalidDateFormat"),
            (format!("authorization: LOG {KEY_ID}:abc\r\ndate: {date}\r\n"), 400, "MissingAPIVersion"),
            (
                format!("authorization: LOG {KEY_ID}:abc\r\ndate: Mon, 01 Jan 2001 00:00:00 GMT\r\nx-log-apiversion: 0.6.0\r\nx-log-signaturemethod: hmac-sha1\r\n"),
                400,
                "RequestTimeExpired",
            ),
            (
                format!("authorization: LOG {KEY_ID}:abc\r\ndate: {date}\r\nx-log-apiversion: 0.6.0\r\nx-log-signaturemethod: hmac-sha1\r\n"),
                401,
                "SignatureNotMatch",
            ),
        ];
        for (headers, status, code) in cases {
            let answer = ctx
                .exchange(format!("{base}{headers}\r\n").into_bytes(), b"")
                .await;
            assert_eq!(
                (answer.status, answer.error_code().as_str()),
                (status, code),
                "{headers:?}"
            );
            assert_eq!(answer.header("x-log-requestid").map(str::len), Some(24));
        }
    })
}
