//! Compression both ways: PutLogs bodies in lz4, deflate or none (the SDK's raw PutLogs), read
//! back by the SDK (lz4), and PullLogs answered in what `Accept-Encoding` asks (plain HTTP, since
//! the SDK only asks for lz4); bodies whose size or compression is wrong are refused.

mod common;

use std::io::Write;
use std::process::ExitCode;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use bytes::Bytes;
use common::{group, refused, values, Case, CaseFuture, Ctx};
use shardlease_loghub_emulator::codec;
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("lz4_deflate_and_plain_bodies_round_trip", round_trip),
        ("pull_logs_answers_in_the_compression_asked_for", answers),
        (
            "bodies_with_a_wrong_size_or_compression_are_refused",
            refusals,
        ),
    ];
    common::run(Emulator::new(), cases)
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

async fn put_raw(
    ctx: &Ctx,
    project: &str,
    logstore: &str,
    data: Vec<u8>,
    raw_size: usize,
    compress: &str,
) -> Result<(), aliyun_log_rust_sdk::Error> {
    ctx.client()
        .put_logs_raw(project, logstore)
        .data(Bytes::from(data))
        .raw_size(raw_size)
        .compress_type(compress.to_string())
        .send()
        .await
        .map(|_| ())
}

fn round_trip(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let raw = |v: &str| group(v).encode().unwrap();
        let lz4 = raw("lz4");
        put_raw(
            &ctx,
            &project,
            &logstore,
            lz4::block::compress(&lz4, None, false).unwrap(),
            lz4.len(),
            "lz4",
        )
        .await
        .unwrap();
        let zlib = raw("deflate");
        put_raw(
            &ctx,
            &project,
            &logstore,
            deflate(&zlib),
            zlib.len(),
            "deflate",
        )
        .await
        .unwrap();
        let plain = raw("plain");
        put_raw(&ctx, &project, &logstore, plain.clone(), plain.len(), "")
            .await
            .unwrap();
        let client = ctx.client();
        let begin = client
            .get_cursor(&project, &logstore, 0)
            .cursor_pos(CursorPos::Begin)
            .send()
            .await
            .unwrap();
        let pulled = client
            .pull_logs(&project, &logstore, 0)
            .cursor(begin.get_body().cursor())
            .count(10)
            .send()
            .await
            .unwrap();
        assert_eq!(
            values(pulled.get_body().log_group_list()),
            ["lz4", "deflate", "plain"]
        );
    })
}

fn answers(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let client = ctx.client();
        for v in ["x", "y"] {
            client
                .put_logs(&project, &logstore)
                .log_group(group(v))
                .send()
                .await
                .unwrap();
        }
        let begin = client
            .get_cursor(&project, &logstore, 0)
            .cursor_pos(CursorPos::Begin)
            .send()
            .await
            .unwrap();
        let begin = begin.get_body().cursor().to_string();
        let path = format!("/logstores/{logstore}/shards/0");
        let query = [
            ("type", "logs"),
            ("cursor", begin.as_str()),
            ("count", "10"),
        ];
        for accept in [Some("lz4"), Some("deflate"), Some("\"\""), None] {
            let mut headers = vec![("accept", "application/x-protobuf")];
            if let Some(accept) = accept {
                headers.push(("accept-encoding", accept));
            }
            let answer = ctx
                .call("GET", Some(&project), &path, &query, &headers, b"")
                .await;
            assert_eq!(
                answer.status,
                200,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            let raw_size: usize = answer.header("x-log-bodyrawsize").unwrap().parse().unwrap();
            let raw = match answer.header("x-log-compresstype") {
                Some("lz4") => lz4::block::decompress(&answer.body, Some(raw_size as i32)).unwrap(),
                Some("deflate") => {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::ZlibDecoder::new(&answer.body[..]),
                        &mut out,
                    )
                    .unwrap();
                    out
                }
                Some(other) => panic!("compressed with {other}"),
                None => answer.body.clone(),
            };
            let expected = match accept {
                Some("lz4") => Some("lz4"),
                Some("deflate") => Some("deflate"),
                _ => None,
            };
            assert_eq!(
                answer.header("x-log-compresstype"),
                expected,
                "accept {accept:?}"
            );
            assert_eq!(raw.len(), raw_size);
            let groups = codec::decode_group_list(&raw).unwrap();
            let got: Vec<_> = groups
                .iter()
                .map(|g| g.logs[0].contents[0].value.clone())
                .collect();
            assert_eq!(got, ["x", "y"]);
            assert_eq!(answer.header("x-log-count"), Some("2"));
            assert_eq!(
                answer.header("content-type"),
                Some("application/x-protobuf")
            );
        }
    })
}

fn refusals(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let raw = group("z").encode().unwrap();
        let packed = lz4::block::compress(&raw, None, false).unwrap();
        let wrong_size = refused(
            put_raw(
                &ctx,
                &project,
                &logstore,
                packed.clone(),
                raw.len() + 1,
                "lz4",
            )
            .await,
        );
        assert_eq!(wrong_size, (400, "InvalidBodyRawSize".into()));
        let unknown = refused(put_raw(&ctx, &project, &logstore, packed, raw.len(), "zstd").await);
        assert_eq!(unknown, (400, "InvalidCompressType".into()));
        let garbage = refused(put_raw(&ctx, &project, &logstore, vec![0xff, 0xff], 2, "").await);
        assert_eq!(garbage, (400, "PostBodyInvalid".into()));
        let end = ctx
            .client()
            .get_cursor(&project, &logstore, 0)
            .cursor_pos(CursorPos::End)
            .send()
            .await
            .unwrap();
        let begin = ctx
            .client()
            .get_cursor(&project, &logstore, 0)
            .cursor_pos(CursorPos::Begin)
            .send()
            .await
            .unwrap();
        assert_eq!(
            end.get_body().cursor(),
            begin.get_body().cursor(),
            "nothing was written"
        );
    })
}
