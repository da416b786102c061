//! Projects, logstores and ListShards through the SDK, and the routing of a request to its
//! project by its host.

mod common;

use std::process::ExitCode;

use common::{refused, Case, CaseFuture, Ctx};
use shardlease_loghub_emulator::Emulator;

fn main() -> ExitCode {
    let cases: &[Case] = &[
        (
            "a_project_is_created_read_listed_and_deleted",
            project_lifecycle,
        ),
        (
            "a_logstore_is_created_read_listed_and_deleted",
            logstore_lifecycle,
        ),
        ("list_shards_tiles_the_key_space_evenly", list_shards),
        (
            "the_project_comes_from_the_host_or_an_absolute_target",
            routing,
        ),
    ];
    common::run(Emulator::new(), cases)
}

fn project_lifecycle(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let client = ctx.client();
        let name = ctx.unique("life");
        client
            .create_project(&name)
            .description("mine")
            .send()
            .await
            .unwrap();
        let got = client.get_project(&name).send().await.unwrap();
        assert_eq!(got.get_body().project_name(), &name);
        assert_eq!(got.get_body().description(), "mine");
        let listed = client
            .list_projects(0, 100)
            .project_name(&name)
            .send()
            .await
            .unwrap();
        let names: Vec<_> = listed
            .get_body()
            .projects()
            .iter()
            .map(|p| p.project_name().clone())
            .collect();
        assert_eq!(names, std::slice::from_ref(&name));
        let again = refused(
            client
                .create_project(&name)
                .description("mine")
                .send()
                .await,
        );
        assert_eq!(again, (400, "ProjectAlreadyExist".into()));
        client.delete_project(&name).send().await.unwrap();
        let gone = refused(client.get_project(&name).send().await);
        assert_eq!(gone, (404, "ProjectNotExist".into()));
    })
}

fn logstore_lifecycle(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let client = ctx.client();
        let (project, first) = ctx.logstore(4).await;
        client
            .create_logstore(&project, "second")
            .shard_count(1)
            .ttl(7)
            .send()
            .await
            .unwrap();
        let got = client.get_logstore(&project, &first).send().await.unwrap();
        assert_eq!(
            (*got.get_body().shard_count(), *got.get_body().ttl()),
            (4, 1)
        );
        let listed = client
            .list_logstores(&project, 0, 100)
            .send()
            .await
            .unwrap();
        let mut names = listed.get_body().logstores().clone();
        names.sort();
        let mut expected = vec![first.clone(), "second".to_string()];
        expected.sort();
        assert_eq!(names, expected);
        let again = refused(
            client
                .create_logstore(&project, "second")
                .shard_count(1)
                .ttl(7)
                .send()
                .await,
        );
        assert_eq!(again, (400, "LogStoreAlreadyExist".into()));
        let bad = refused(
            client
                .create_logstore(&project, "third")
                .shard_count(0)
                .ttl(7)
                .send()
                .await,
        );
        assert_eq!(bad, (400, "ParameterInvalid".into()));
        client
            .delete_logstore(&project, "second")
            .send()
            .await
            .unwrap();
        let gone = refused(client.get_logstore(&project, "second").send().await);
        assert_eq!(gone, (404, "LogStoreNotExist".into()));
        let nowhere = refused(client.list_shards("no-such-project", &first).send().await);
        assert_eq!(nowhere, (404, "ProjectNotExist".into()));
    })
}

fn list_shards(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let before = unix_secs();
        let (project, logstore) = ctx.logstore(4).await;
        let after = unix_secs();
        let listed = ctx
            .client()
            .list_shards(&project, &logstore)
            .send()
            .await
            .unwrap();
        let shards = listed.get_body().shards();
        let got: Vec<_> = shards
            .iter()
            .map(|s| {
                (
                    *s.shard_id(),
                    s.status().as_str(),
                    s.inclusive_begin_key().as_str(),
                    s.exclusive_end_key().as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    0,
                    "readwrite",
                    "00000000000000000000000000000000",
                    "40000000000000000000000000000000"
                ),
                (
                    1,
                    "readwrite",
                    "40000000000000000000000000000000",
                    "80000000000000000000000000000000"
                ),
                (
                    2,
                    "readwrite",
                    "80000000000000000000000000000000",
                    "c0000000000000000000000000000000"
                ),
                (
                    3,
                    "readwrite",
                    "c0000000000000000000000000000000",
                    "ffffffffffffffffffffffffffffffff"
                ),
            ]
        );
        for shard in shards {
            assert!(
                (before..=after).contains(shard.create_time()),
                "createTime {}",
                shard.create_time()
            );
        }
    })
}

fn routing(ctx: Ctx) -> CaseFuture {
    Box::pin(async move {
        let (project, logstore) = ctx.logstore(1).await;
        let path = format!("/logstores/{logstore}/shards");
        // Another project in the host: the logstore is not there.
        let other = ctx
            .call("GET", Some("someone-else"), &path, &[], &[], b"")
            .await;
        assert_eq!(
            (other.status, other.error_code().as_str()),
            (404, "ProjectNotExist")
        );
        // A bare IP names no project.
        let head = format!(
            "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: LOG a:b\r\ndate: {}\r\nx-log-apiversion: 0.6.0\r\nx-log-signaturemethod: hmac-sha1\r\n\r\n",
            httpdate::fmt_http_date(std::time::SystemTime::now())
        );
        let bare = ctx.exchange(head.into_bytes(), b"").await;
        assert_eq!(
            (bare.status, bare.error_code().as_str()),
            (400, "InvalidHost")
        );
        // An absolute-form target, as a proxy receives it, names the project in its authority.
        let head = format!(
            "GET http://{project}.cn-hangzhou.log.aliyuncs.com{path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: LOG a:b\r\ndate: {}\r\nx-log-apiversion: 0.6.0\r\nx-log-signaturemethod: hmac-sha1\r\n\r\n",
            httpdate::fmt_http_date(std::time::SystemTime::now())
        );
        let absolute = ctx.exchange(head.into_bytes(), b"").await;
        assert_eq!(
            absolute.status,
            200,
            "{}",
            String::from_utf8_lossy(&absolute.body)
        );
        assert_eq!(absolute.json().as_array().unwrap().len(), 1);
    })
}

fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
