//! Consumer groups through the SDK: create, list, update, delete, heartbeats and the shards
//! they hand out, checkpoints with and without forceSuccess.

mod common;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use aliyun_log_rust_sdk::get_cursor_models::CursorPos;
use aliyun_log_rust_sdk::Client;
use common::{refused, Case, CaseFuture, Ctx};
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("a_group_is_created_listed_updated_and_deleted", lifecycle),
        ("heartbeats_share_the_shards_evenly", heartbeats),
        (
            "only_the_assigned_consumer_checkpoints_unless_forced",
            checkpoints,
        ),
        (
            "an_ordered_group_hands_out_children_once_the_parent_is_consumed",
            ordered,
        ),
        (
            "a_consumer_that_stops_heartbeating_leaves_its_shards",
            timeout,
        ),
    ];
    common::run(Emulator::new(), cases)
}

struct Group {
    client: Client,
    project: String,
    logstore: String,
    name: String,
}

impl Group {
    async fn new(ctx: &Ctx, shards: i32, timeout: i32, order: bool) -> Self {
        let (project, logstore) = ctx.logstore(shards).await;
        let group = Group {
            client: ctx.client(),
            project,
            logstore,
            name: ctx.unique("group"),
        };
        group
            .client
            .create_consumer_group(&group.project, &group.logstore, &group.name)
            .timeout(timeout)
            .order(order)
            .send()
            .await
            .unwrap();
        group
    }

    async fn heartbeat(&self, consumer: &str, held: Vec<i32>) -> Vec<i32> {
        let answer = self
            .client
            .consumer_group_heartbeat(&self.project, &self.logstore, &self.name)
            .consumer(consumer)
            .shards(held)
            .send()
            .await
            .unwrap();
        answer.get_body().shards().clone()
    }

    async fn checkpoint(
        &self,
        consumer: &str,
        shard: i32,
        cursor: &str,
        force: bool,
    ) -> Result<(), aliyun_log_rust_sdk::Error> {
        self.client
            .update_consumer_group_checkpoint(&self.project, &self.logstore, &self.name)
            .shard_id(shard)
            .consumer_id(consumer)
            .checkpoint(cursor)
            .force_success(force)
            .send()
            .await
            .map(|_| ())
    }

    /// `(shard, checkpoint, consumer)` of GetCheckPoint, for one shard or all.
    async fn checkpoints(&self, shard: Option<i32>) -> Vec<(i32, String, String, i64)> {
        let mut request =
            self.client
                .get_consumer_group_checkpoint(&self.project, &self.logstore, &self.name);
        if let Some(shard) = shard {
            request = request.shard_id(shard);
        }
        let answer = request.send().await.unwrap();
        answer
            .get_body()
            .checkpoints()
            .iter()
            .map(|c| {
                (
                    *c.shard_id(),
                    c.checkpoint().clone(),
                    c.consumer().clone(),
                    *c.update_time(),
                )
            })
            .collect()
    }

    async fn end_cursor(&self, shard: i32) -> String {
        let answer = self
            .client
            .get_cursor(&self.project, &self.logstore, shard)
            .cursor_pos(CursorPos::End)
            .send()
            .await
            .unwrap();
        answer.get_body().cursor().to_string()
    }
}

fn lifecycle(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let g = Group::new(&ctx, 1, 30, false).await;
        let (c, p, l, n) = (&g.client, &g.project, &g.logstore, &g.name);
        let list = |c: &Client| c.list_consumer_groups(p, l).send();
        let listed = list(c).await.unwrap();
        let groups: Vec<_> = listed
            .get_body()
            .consumer_groups()
            .iter()
            .map(|g| (g.consumer_group_name().clone(), *g.timeout(), *g.order()))
            .collect();
        assert_eq!(groups, [(n.clone(), 30, false)]);
        let again = refused(
            c.create_consumer_group(p, l, n)
                .timeout(30)
                .order(false)
                .send()
                .await,
        );
        assert_eq!(again, (400, "ConsumerGroupAlreadyExist".into()));
        c.update_consumer_group(p, l, n)
            .timeout(60)
            .order(true)
            .send()
            .await
            .unwrap();
        let listed = list(c).await.unwrap();
        let updated = &listed.get_body().consumer_groups()[0];
        assert_eq!((*updated.timeout(), *updated.order()), (60, true));
        c.delete_consumer_group(p, l, n).send().await.unwrap();
        assert!(list(c)
            .await
            .unwrap()
            .get_body()
            .consumer_groups()
            .is_empty());
        let gone = refused(c.delete_consumer_group(p, l, n).send().await);
        assert_eq!(gone, (404, "ConsumerGroupNotExist".into()));
        let gone = refused(
            c.update_consumer_group(p, l, n)
                .timeout(5)
                .order(true)
                .send()
                .await,
        );
        assert_eq!(gone, (404, "ConsumerGroupNotExist".into()));
        let bad = refused(
            c.create_consumer_group(p, l, "zero")
                .timeout(0)
                .order(true)
                .send()
                .await,
        );
        assert_eq!(bad, (400, "JsonInfoInvalid".into()));
    })
}

fn heartbeats(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let g = Group::new(&ctx, 4, 60, false).await;
        assert_eq!(g.heartbeat("a", vec![]).await, [0, 1, 2, 3]);
        let b = g.heartbeat("b", vec![]).await;
        let a = g.heartbeat("a", vec![0, 1, 2, 3]).await;
        assert_eq!((a.len(), b.len()), (2, 2));
        let all: BTreeSet<i32> = a.iter().chain(&b).copied().collect();
        assert_eq!(all.len(), 4, "a {a:?}, b {b:?}");
        let stranger = refused(
            g.client
                .consumer_group_heartbeat(&g.project, &g.logstore, &g.name)
                .consumer("stranger")
                .shards(vec![0])
                .send()
                .await,
        );
        assert_eq!(stranger, (400, "NotExistConsumerWithBody".into()));
    })
}

fn checkpoints(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let g = Group::new(&ctx, 2, 60, false).await;
        g.heartbeat("a", vec![]).await;
        let b = g.heartbeat("b", vec![]).await;
        let a = g.heartbeat("a", vec![0, 1]).await;
        let (mine, theirs) = (a[0], b[0]);
        let cursor = g.end_cursor(mine).await;
        g.checkpoint("a", mine, &cursor, false).await.unwrap();
        let wrong = refused(g.checkpoint("a", theirs, &cursor, false).await);
        assert_eq!(wrong, (400, "ConsumerNotMatch".into()));
        let ghost = refused(g.checkpoint("ghost", theirs, "abc", false).await);
        assert_eq!(ghost, (400, "ConsumerNotExsit".into()));
        g.checkpoint("ghost", theirs, "forced", true).await.unwrap();
        let missing = refused(g.checkpoint("a", 9, &cursor, true).await);
        assert_eq!(missing, (404, "ShardNotExist".into()));
        let one = g.checkpoints(Some(mine)).await;
        assert_eq!(one.len(), 1);
        assert_eq!(
            (one[0].0, one[0].1.as_str(), one[0].2.as_str()),
            (mine, cursor.as_str(), "a")
        );
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        assert!(
            (micros - 60_000_000..=micros).contains(&one[0].3),
            "updateTime in microseconds"
        );
        let all = g.checkpoints(None).await;
        let forced = all.iter().find(|c| c.0 == theirs).unwrap();
        assert_eq!((forced.1.as_str(), forced.2.as_str()), ("forced", "ghost"));
        assert_eq!(all.len(), 2);
        assert!(g.checkpoints(Some(9)).await.is_empty());
    })
}

fn ordered(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let g = Group::new(&ctx, 1, 60, true).await;
        let split = ctx
            .call(
                "POST",
                Some(&g.project),
                &format!("/logstores/{}/shards/0", g.logstore),
                &[("action", "split")],
                &[],
                b"",
            )
            .await;
        assert_eq!(split.status, 200);
        // The children wait until the readonly parent is consumed to its end.
        assert_eq!(g.heartbeat("a", vec![]).await, [0]);
        let end = g.end_cursor(0).await;
        g.checkpoint("a", 0, &end, false).await.unwrap();
        assert_eq!(g.heartbeat("a", vec![0]).await, [1, 2]);
    })
}

fn timeout(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let g = Group::new(&ctx, 2, 1, false).await;
        g.heartbeat("a", vec![]).await;
        assert_eq!(g.heartbeat("b", vec![]).await.len(), 1);
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(600)).await;
            g.heartbeat("a", vec![]).await;
        }
        assert_eq!(g.heartbeat("a", vec![]).await, [0, 1]);
        let gone = refused(g.checkpoint("b", 0, "x", false).await);
        assert_eq!(gone, (400, "ConsumerNotExsit".into()));
    })
}
