//! SplitShard and MergeShards over plain HTTP (the SDK has no call for them), then what the
//! SDK sees of the shards: ListShards, a readonly shard read to its end, writes that go to the
//! shards that replaced it.

mod common;

use std::process::ExitCode;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use common::{group, values, Case, CaseFuture, Ctx};
use serde_json::Value;
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        (
            "a_split_turns_the_parent_readonly_and_its_children_readwrite",
            split,
        ),
        ("a_readonly_shard_is_read_to_its_end", readonly_read),
        ("a_readonly_shard_takes_no_write", readonly_write),
        (
            "a_merge_turns_both_readonly_and_one_child_covers_them",
            merge,
        ),
        (
            "splits_by_shard_count_and_bad_splits",
            split_count_and_refusals,
        ),
    ];
    common::run(Emulator::new(), cases)
}

const MID: &str = "40000000000000000000000000000000";
const ZERO: &str = "00000000000000000000000000000000";
const HALF: &str = "80000000000000000000000000000000";
const TOP: &str = "ffffffffffffffffffffffffffffffff";

async fn shard_call(
    ctx: &Ctx,
    project: &str,
    logstore: &str,
    shard: i32,
    query: &[(&str, &str)],
) -> common::Raw {
    let path = format!("/logstores/{logstore}/shards/{shard}");
    ctx.call("POST", Some(project), &path, query, &[], b"")
        .await
}

/// `(id, status, begin, end)` of each shard of an answer.
fn summary(shards: &[Value]) -> Vec<(i64, String, String, String)> {
    shards
        .iter()
        .map(|s| {
            (
                s["shardID"].as_i64().unwrap(),
                s["status"].as_str().unwrap().to_string(),
                s["inclusiveBeginKey"].as_str().unwrap().to_string(),
                s["exclusiveEndKey"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row(id: i64, status: &str, begin: &str, end: &str) -> (i64, String, String, String) {
    (id, status.into(), begin.into(), end.into())
}

fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn split_at_mid(ctx: &Ctx, project: &str, logstore: &str) -> Vec<Value> {
    let answer = shard_call(
        ctx,
        project,
        logstore,
        0,
        &[("action", "split"), ("key", MID)],
    )
    .await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.json().as_array().unwrap().clone()
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

fn split(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        let created = ctx.shards(&project, &logstore).await[0]["createTime"]
            .as_i64()
            .unwrap();
        let before = unix_secs();
        let answer = split_at_mid(&ctx, &project, &logstore).await;
        let after = unix_secs();
        assert_eq!(
            summary(&answer),
            [
                row(0, "readonly", ZERO, HALF),
                row(2, "readwrite", ZERO, MID),
                row(3, "readwrite", MID, HALF)
            ]
        );
        assert_eq!(
            answer[0]["createTime"].as_i64(),
            Some(created),
            "the parent keeps its createTime"
        );
        for child in &answer[1..] {
            assert!((before..=after).contains(&child["createTime"].as_i64().unwrap()));
        }
        // The SDK lists the same, every shard by id.
        let listed = ctx
            .client()
            .list_shards(&project, &logstore)
            .send()
            .await
            .unwrap();
        let sdk: Vec<_> = listed
            .get_body()
            .shards()
            .iter()
            .map(|s| {
                (
                    i64::from(*s.shard_id()),
                    s.status().clone(),
                    s.inclusive_begin_key().clone(),
                    s.exclusive_end_key().clone(),
                )
            })
            .collect();
        assert_eq!(
            sdk,
            [
                row(0, "readonly", ZERO, HALF),
                row(1, "readwrite", HALF, TOP),
                row(2, "readwrite", ZERO, MID),
                row(3, "readwrite", MID, HALF)
            ]
        );
    })
}

fn readonly_read(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let client = ctx.client();
        for v in ["a", "b"] {
            client
                .put_logs(&project, &logstore)
                .log_group(group(v))
                .send()
                .await
                .unwrap();
        }
        split_at_mid(&ctx, &project, &logstore).await;
        let begin = cursor(&ctx, &project, &logstore, 0, CursorPos::Begin).await;
        let read = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&begin)
            .count(100)
            .send()
            .await
            .unwrap();
        assert_eq!(values(read.get_body().log_group_list()), ["a", "b"]);
        let last = read.get_body().next_cursor().clone();
        assert_eq!(
            last,
            cursor(&ctx, &project, &logstore, 0, CursorPos::End).await
        );
        let end = client
            .pull_logs(&project, &logstore, 0)
            .cursor(&last)
            .count(100)
            .send()
            .await
            .unwrap();
        assert!(end.get_body().log_group_list().is_empty());
        assert_eq!(end.get_body().next_cursor(), &last);
    })
}

fn readonly_write(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let client = ctx.client();
        split_at_mid(&ctx, &project, &logstore).await;
        let parent_end = cursor(&ctx, &project, &logstore, 0, CursorPos::End).await;
        // Load-balanced writes go to the readwrite children only.
        for n in 0..4 {
            client
                .put_logs(&project, &logstore)
                .log_group(group(&n.to_string()))
                .send()
                .await
                .unwrap();
        }
        // A key in the readonly parent's range goes to the child holding it.
        let raw = group("keyed").encode().unwrap();
        let size = raw.len().to_string();
        let path = format!("/logstores/{logstore}/shards/route");
        let headers = [
            ("content-type", "application/x-protobuf"),
            ("x-log-bodyrawsize", size.as_str()),
        ];
        let keyed = ctx
            .call(
                "POST",
                Some(&project),
                &path,
                &[("key", "1")],
                &headers,
                &raw,
            )
            .await;
        assert_eq!(
            keyed.status,
            200,
            "{}",
            String::from_utf8_lossy(&keyed.body)
        );
        assert_eq!(
            cursor(&ctx, &project, &logstore, 0, CursorPos::End).await,
            parent_end
        );
        let mut children = Vec::new();
        for shard in [1, 2] {
            let begin = cursor(&ctx, &project, &logstore, shard, CursorPos::Begin).await;
            let read = client
                .pull_logs(&project, &logstore, shard)
                .cursor(&begin)
                .count(100)
                .send()
                .await
                .unwrap();
            children.push(values(read.get_body().log_group_list()));
        }
        assert_eq!(children[0].len() + children[1].len(), 5);
        assert!(children[0].contains(&"keyed".to_string()));
        assert!(
            children.iter().all(|c| c.len() >= 2),
            "round robin: {children:?}"
        );
        // The readonly parent cannot be split again.
        let again = shard_call(
            &ctx,
            &project,
            &logstore,
            0,
            &[("action", "split"), ("key", MID)],
        )
        .await;
        assert_eq!(
            (again.status, again.error_code().as_str()),
            (400, "ParameterInvalid")
        );
    })
}

fn merge(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        let answer = shard_call(&ctx, &project, &logstore, 0, &[("action", "merge")]).await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let answer = answer.json().as_array().unwrap().clone();
        assert_eq!(
            summary(&answer),
            [
                row(2, "readwrite", ZERO, TOP),
                row(0, "readonly", ZERO, HALF),
                row(1, "readonly", HALF, TOP)
            ]
        );
        assert!(
            answer[0]["createTime"].as_i64().unwrap() >= answer[1]["createTime"].as_i64().unwrap()
        );
        assert_eq!(ctx.shards(&project, &logstore).await.len(), 3);
        // The one readwrite shard has no right neighbour; the readonly ones merge no more.
        for shard in [2, 0] {
            let refused =
                shard_call(&ctx, &project, &logstore, shard, &[("action", "merge")]).await;
            assert_eq!(
                (refused.status, refused.error_code().as_str()),
                (400, "ParameterInvalid"),
                "shard {shard}"
            );
        }
    })
}

fn split_count_and_refusals(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let three = shard_call(
            &ctx,
            &project,
            &logstore,
            0,
            &[("action", "split"), ("shardCount", "3")],
        )
        .await;
        assert_eq!(three.status, 200);
        let three = summary(three.json().as_array().unwrap());
        assert_eq!(three.len(), 4);
        assert_eq!(three[1].2, ZERO);
        assert_eq!(three[1].3, "55555555555555555555555555555555");
        assert_eq!(three[3].3, TOP);
        for (shard, query) in [
            (
                1,
                vec![
                    ("action", "split"),
                    ("key", "60000000000000000000000000000000"),
                ],
            ),
            (1, vec![("action", "split"), ("key", "zz")]),
            (7, vec![("action", "split"), ("key", MID)]),
            (1, vec![("action", "explode")]),
        ] {
            let refused = shard_call(&ctx, &project, &logstore, shard, &query).await;
            assert_eq!(
                (refused.status, refused.error_code().as_str()),
                (400, "ParameterInvalid"),
                "{query:?}"
            );
        }
    })
}
