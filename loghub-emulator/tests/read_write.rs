//! PutLogs, GetCursor and PullLogs through the SDK (its PullLogs asks for lz4), and a PutLogs
//! routed by its key over plain HTTP (the SDK only writes load-balanced).

mod common;

use std::process::ExitCode;
use std::time::Duration;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use common::{group, refused, values, Case, CaseFuture, Ctx};
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        (
            "logs_written_are_pulled_back_in_order_then_the_end_repeats_its_cursor",
            pull_in_order,
        ),
        ("get_cursor_finds_begin_end_and_a_receive_time", cursors),
        ("an_end_cursor_bounds_a_pull", end_cursor),
        ("bad_cursors_shards_and_counts_are_refused", refusals),
        ("a_route_key_writes_to_the_shard_that_holds_it", route_key),
    ];
    common::run(Emulator::new(), cases)
}

async fn cursor(ctx: &Ctx, project: &str, logstore: &str, shard: i32, pos: CursorPos) -> String {
    let answer = ctx
        .client()
        .get_cursor(project, logstore, shard)
        .cursor_pos(pos)
        .send()
        .await
        .unwrap();
    answer.get_body().cursor().to_string()
}

async fn put(ctx: &Ctx, project: &str, logstore: &str, value: &str) {
    ctx.client()
        .put_logs(project, logstore)
        .log_group(group(value))
        .send()
        .await
        .unwrap();
}

fn pull_in_order(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        for n in 0..5 {
            put(&ctx, &project, &logstore, &n.to_string()).await;
        }
        let client = ctx.client();
        let begin = cursor(&ctx, &project, &logstore, 0, CursorPos::Begin).await;
        let first = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&begin)
            .count(2)
            .send()
            .await
            .unwrap();
        let first = first.get_body();
        assert_eq!(values(first.log_group_list()), ["0", "1"]);
        assert_eq!(*first.log_group_count(), 2);
        assert_eq!(first.log_group_list()[0].topic().as_deref(), Some("test"));
        let rest = client
            .pull_logs(&project, &logstore, 0)
            .cursor(first.next_cursor())
            .count(100)
            .send()
            .await
            .unwrap();
        let rest = rest.get_body();
        assert_eq!(values(rest.log_group_list()), ["2", "3", "4"]);
        let end = cursor(&ctx, &project, &logstore, 0, CursorPos::End).await;
        assert_eq!(rest.next_cursor(), &end);
        let again = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&end)
            .count(100)
            .send()
            .await
            .unwrap();
        assert!(again.get_body().log_group_list().is_empty());
        assert_eq!(*again.get_body().log_group_count(), 0);
        assert_eq!(again.get_body().next_cursor(), &end);
    })
}

fn cursors(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let empty_begin = cursor(&ctx, &project, &logstore, 0, CursorPos::Begin).await;
        assert_eq!(
            empty_begin,
            cursor(&ctx, &project, &logstore, 0, CursorPos::End).await
        );
        put(&ctx, &project, &logstore, "early").await;
        // The next write is received in a later second.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1050 - u64::from(now.subsec_millis()))).await;
        let later = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        put(&ctx, &project, &logstore, "late").await;
        let client = ctx.client();
        let at = cursor(
            &ctx,
            &project,
            &logstore,
            0,
            CursorPos::UnixTimeStamp(later),
        )
        .await;
        let pulled = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&at)
            .count(10)
            .send()
            .await
            .unwrap();
        assert_eq!(values(pulled.get_body().log_group_list()), ["late"]);
        let from_zero = cursor(&ctx, &project, &logstore, 0, CursorPos::UnixTimeStamp(0)).await;
        assert_eq!(from_zero, empty_begin);
        let future = cursor(
            &ctx,
            &project,
            &logstore,
            0,
            CursorPos::UnixTimeStamp(later + 3600),
        )
        .await;
        assert_eq!(
            future,
            cursor(&ctx, &project, &logstore, 0, CursorPos::End).await
        );
        assert_ne!(future, empty_begin);
    })
}

fn end_cursor(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let client = ctx.client();
        for n in 0..4 {
            put(&ctx, &project, &logstore, &n.to_string()).await;
        }
        let begin = cursor(&ctx, &project, &logstore, 0, CursorPos::Begin).await;
        let two = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&begin)
            .count(2)
            .send()
            .await
            .unwrap();
        let stop = two.get_body().next_cursor().clone();
        let bounded = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&begin)
            .count(100)
            .end_cursor(&stop)
            .send()
            .await
            .unwrap();
        assert_eq!(values(bounded.get_body().log_group_list()), ["0", "1"]);
        assert_eq!(bounded.get_body().next_cursor(), &stop);
    })
}

fn refusals(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        let client = ctx.client();
        put(&ctx, &project, &logstore, "x").await;
        let pull = |cursor: String, count: i32| {
            let (client, project, logstore) = (ctx.client(), project.clone(), logstore.clone());
            async move {
                refused(
                    client
                        .pull_logs(&project, &logstore, 0)
                        .cursor(cursor)
                        .count(count)
                        .send()
                        .await,
                )
            }
        };
        assert_eq!(
            pull("garbage".into(), 10).await,
            (400, "InvalidCursor".into())
        );
        // A cursor of shard 1 is no cursor of shard 0.
        let other = cursor(&ctx, &project, &logstore, 1, CursorPos::End).await;
        assert_eq!(pull(other, 10).await, (400, "InvalidCursor".into()));
        let begin = cursor(&ctx, &project, &logstore, 0, CursorPos::Begin).await;
        assert_eq!(
            pull(begin.clone(), 0).await,
            (400, "ParameterInvalid".into())
        );
        assert_eq!(pull(begin, 1001).await, (400, "ParameterInvalid".into()));
        let missing = refused(
            client
                .get_cursor(&project, &logstore, 9)
                .cursor_pos(CursorPos::Begin)
                .send()
                .await,
        );
        assert_eq!(missing, (404, "ShardNotExist".into()));
        let no_store = refused(
            client
                .get_cursor(&project, "nothing", 0)
                .cursor_pos(CursorPos::Begin)
                .send()
                .await,
        );
        assert_eq!(no_store, (404, "LogStoreNotExist".into()));
    })
}

fn route_key(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        let raw = group("routed").encode().unwrap();
        let packed = lz4::block::compress(&raw, None, false).unwrap();
        let size = raw.len().to_string();
        let headers = [
            ("content-type", "application/x-protobuf"),
            ("x-log-compresstype", "lz4"),
            ("x-log-bodyrawsize", size.as_str()),
        ];
        let path = format!("/logstores/{logstore}/shards/route");
        let put = ctx
            .call(
                "POST",
                Some(&project),
                &path,
                &[("key", "c0000000000000000000000000000000")],
                &headers,
                &packed,
            )
            .await;
        assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
        let client = ctx.client();
        for (shard, expected) in [(0, vec![]), (1, vec!["routed".to_string()])] {
            let begin = cursor(&ctx, &project, &logstore, shard, CursorPos::Begin).await;
            let pulled = client
                .pull_logs(&project, &logstore, shard)
                .cursor(&begin)
                .count(10)
                .send()
                .await
                .unwrap();
            assert_eq!(
                values(pulled.get_body().log_group_list()),
                expected,
                "shard {shard}"
            );
        }
        let bad = ctx
            .call(
                "POST",
                Some(&project),
                &path,
                &[("key", "not-hex")],
                &headers,
                &packed,
            )
            .await;
        assert_eq!(
            (bad.status, bad.error_code().as_str()),
            (400, "ParameterInvalid")
        );
    })
}
