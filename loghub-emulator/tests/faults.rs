//! The control API: readiness, injected faults (errors the SDK parses, delays), their filters
//! and counts, and the counts of calls.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use common::{refused, Case, CaseFuture, Ctx};
use serde_json::json;
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("ready_answers_on_any_host", ready),
        (
            "a_fault_fails_the_given_number_of_matching_calls",
            counted_fault,
        ),
        ("the_sdk_retries_a_503_and_each_retry_takes_a_hit", retried),
        ("a_delay_answers_late_then_serves", delay),
        ("faults_and_counts_are_cleared", clearing),
    ];
    common::run(Emulator::new(), cases)
}

fn ready(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        assert_eq!(ctx.control("GET", "/_emulator/ready", "").await.status, 200);
        let head = b"GET http://demo.loghub.local/_emulator/ready HTTP/1.1\r\nhost: demo.loghub.local\r\nconnection: close\r\n\r\n";
        assert_eq!(ctx.exchange(head.to_vec(), b"").await.status, 200);
        assert_eq!(
            ctx.control("GET", "/_emulator/nothing", "").await.status,
            404
        );
    })
}

fn counted_fault(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(2).await;
        ctx.fault(json!({
            "api": "PullLogs", "project": project, "logstore": logstore, "shard": 1,
            "status": 403, "errorCode": "ReadQuotaExceed", "errorMessage": "slow down", "times": 3
        }))
        .await;
        let client = ctx.client();
        let mut cursors = Vec::new();
        for shard in [0, 1] {
            let c = client
                .get_cursor(&project, &logstore, shard)
                .cursor_pos(CursorPos::Begin)
                .send()
                .await
                .unwrap();
            cursors.push(c.get_body().cursor().to_string());
        }
        client
            .pull_logs(&project, &logstore, 0)
            .cursor(&cursors[0])
            .count(10)
            .send()
            .await
            .unwrap();
        for _ in 0..3 {
            let refusal = refused(
                client
                    .pull_logs(&project, &logstore, 1)
                    .cursor(&cursors[1])
                    .count(10)
                    .send()
                    .await,
            );
            assert_eq!(refusal, (403, "ReadQuotaExceed".into()));
        }
        client
            .pull_logs(&project, &logstore, 1)
            .cursor(&cursors[1])
            .count(10)
            .send()
            .await
            .unwrap();
        let counts = ctx.counts().await;
        assert_eq!(counts["apis"]["PullLogs"], 5);
        assert_eq!(counts["apis"]["GetCursor"], 2);
        assert_eq!(counts["pullLogs"][format!("{project}/{logstore}/0")], 1);
        assert_eq!(counts["pullLogs"][format!("{project}/{logstore}/1")], 4);
    })
}

fn retried(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        ctx.fault(
            json!({"api": "ListShards", "status": 503, "errorCode": "ServerBusy", "times": 2}),
        )
        .await;
        let patient = common::client_with(common::KEY_ID, common::KEY_SECRET, 3);
        let listed = patient
            .list_shards(&project, &logstore)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.get_body().shards().len(), 1);
        assert_eq!(ctx.counts().await["apis"]["ListShards"], 3);
    })
}

fn delay(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        ctx.fault(json!({"api": "GetCursor", "delayMs": 400})).await;
        let client = ctx.client();
        let get = || {
            client
                .get_cursor(&project, &logstore, 0)
                .cursor_pos(CursorPos::End)
                .send()
        };
        let started = Instant::now();
        get().await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
        let started = Instant::now();
        get().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    })
}

fn clearing(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        ctx.fault(json!({"api": "ListShards", "status": 500, "errorCode": "InternalServerError", "times": 5}))
            .await;
        let client = ctx.client();
        let refusal = refused(client.list_shards(&project, &logstore).send().await);
        assert_eq!(refusal, (500, "InternalServerError".into()));
        assert_eq!(
            ctx.control("DELETE", "/_emulator/faults", "").await.status,
            200
        );
        client
            .list_shards(&project, &logstore)
            .send()
            .await
            .unwrap();
        assert_eq!(ctx.counts().await["apis"]["ListShards"], 2);
        assert_eq!(
            ctx.control("DELETE", "/_emulator/requests", "")
                .await
                .status,
            200
        );
        assert_eq!(ctx.counts().await, json!({"apis": {}, "pullLogs": {}}));
        for bad in [
            r#"{"api": "ListShards"}"#,
            r#"{"api": "ListShards", "status": 99}"#,
            "not json",
        ] {
            assert_eq!(
                ctx.control("POST", "/_emulator/faults", bad).await.status,
                400,
                "{bad}"
            );
        }
    })
}
