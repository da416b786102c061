//! One handler per operation: the request's parameters and body in, the store changed, the
//! answer out, in the SDK's wire format.

use serde::Deserialize;
use serde_json::json;

use crate::api::{Op, Req};
use crate::codec::{self, Compression};
use crate::error::ApiError;
use crate::groups::ConsumerGroup;
use crate::keys;
use crate::server::{Reply, Shared};
use crate::state::{self, Logstore, Now, Project, Store};

/// The most log groups one PullLogs may ask for (the reference's range is 1 to 1000).
const MAX_PULL_COUNT: usize = 1000;

/// The most shards a logstore may be created with here.
const MAX_SHARDS: u32 = 256;

pub(crate) fn execute(op: &Op, req: &Req, shared: &Shared) -> Result<Reply, ApiError> {
    let now = Now::current();
    let mut store = shared.store();
    let store = &mut *store;
    match op {
        Op::CreateProject => create_project(store, req, now),
        Op::ListProject => list_projects(store, req),
        Op::GetProject => {
            let name = req.project()?;
            let project = project(store, name)?;
            Ok(Reply::json(200, &project_json(name, project)))
        }
        Op::DeleteProject => {
            let name = req.project()?;
            store
                .projects
                .remove(name)
                .ok_or_else(|| ApiError::project_not_exist(name))?;
            Ok(Reply::empty())
        }
        Op::CreateLogStore => create_logstore(store, req, now),
        Op::ListLogStores => list_logstores(store, req),
        Op::GetLogStore(name) => {
            let ls = logstore(store, req, name)?;
            Ok(Reply::json(
                200,
                &json!({
                    "logstoreName": name,
                    "ttl": ls.ttl,
                    "shardCount": ls.readwrite_count(),
                    "enable_tracking": false,
                    "autoSplit": false,
                    "createTime": ls.created,
                    "lastModifyTime": ls.modified,
                    "appendMeta": false,
                    "telemetryType": "None",
                    "mode": "standard",
                }),
            ))
        }
        Op::DeleteLogStore(name) => {
            let project = project_mut(store, req)?;
            project
                .logstores
                .remove(name)
                .ok_or_else(|| ApiError::logstore_not_exist(name))?;
            Ok(Reply::empty())
        }
        Op::ListShards(name) => {
            let ls = logstore(store, req, name)?;
            let shards: Vec<_> = ls.shards.iter().map(state::Shard::view).collect();
            Ok(Reply::json(200, &shards))
        }
        Op::PutLogs(name) => put_logs(store, req, name, now),
        Op::SplitShard(name, shard) => {
            let key = match req.param("key") {
                None => None,
                Some(text) => Some(
                    keys::parse_key(text)
                        .ok_or_else(|| ApiError::parameter_invalid("invalid mid hash"))?,
                ),
            };
            let count = match req.param("shardCount") {
                None => None,
                Some(text) => Some(
                    text.parse()
                        .map_err(|_| ApiError::parameter_invalid("invalid shardCount"))?,
                ),
            };
            let (ls, bases) = logstore_and_bases(store, req, name)?;
            Ok(Reply::json(200, &ls.split(*shard, key, count, now, bases)?))
        }
        Op::MergeShards(name, shard) => {
            let (ls, bases) = logstore_and_bases(store, req, name)?;
            Ok(Reply::json(200, &ls.merge(*shard, now, bases)?))
        }
        Op::GetCursor(name, shard) => {
            let from = match req.param("from") {
                Some("begin") => state::From::Begin,
                Some("end") => state::From::End,
                Some(t) => state::From::Time(
                    t.parse()
                        .map_err(|_| ApiError::parameter_invalid("Parameter From is invalid"))?,
                ),
                None => return Err(ApiError::parameter_invalid("Parameter From is invalid")),
            };
            let shard = logstore(store, req, name)?.shard(*shard)?;
            Ok(Reply::json(
                200,
                &json!({ "cursor": shard.cursor_from(from) }),
            ))
        }
        Op::PullLogs(name, shard) => pull_logs(store, req, name, *shard),
        Op::CreateConsumerGroup(name) => create_consumer_group(store, req, name),
        Op::ListConsumerGroup(name) => {
            let ls = logstore(store, req, name)?;
            let groups: Vec<_> = ls
                .consumer_groups
                .iter()
                .map(|(g, cg)| json!({ "name": g, "timeout": cg.timeout, "order": cg.order }))
                .collect();
            Ok(Reply::json(200, &groups))
        }
        Op::UpdateConsumerGroup(name, group) => {
            #[derive(Deserialize)]
            struct Body {
                timeout: Option<i32>,
                order: Option<bool>,
            }
            let body: Body = json_body(req).map_err(ApiError::json_info_invalid)?;
            if body.timeout.is_some_and(|t| t <= 0) {
                return Err(ApiError::json_info_invalid("timeout must be positive"));
            }
            let cg = logstore_mut(store, req, name)?
                .consumer_groups
                .get_mut(group)
                .ok_or_else(|| ApiError::consumer_group_not_exist(group))?;
            cg.timeout = body.timeout.unwrap_or(cg.timeout);
            cg.order = body.order.unwrap_or(cg.order);
            Ok(Reply::empty())
        }
        Op::DeleteConsumerGroup(name, group) => {
            logstore_mut(store, req, name)?
                .consumer_groups
                .remove(group)
                .ok_or_else(|| ApiError::consumer_group_not_exist(group))?;
            Ok(Reply::empty())
        }
        Op::ConsumerGroupHeartBeat(name, group) => {
            let consumer = consumer_param(req)?;
            let held: Vec<i32> = if req.body.is_empty() {
                Vec::new()
            } else {
                json_body(req).map_err(ApiError::parameter_invalid)?
            };
            let shards = with_group(store, req, name, group, |cg, ls| {
                cg.heartbeat(ls, consumer, &held, now)
            })?;
            Ok(Reply::json(200, &shards))
        }
        Op::UpdateCheckPoint(name, group) => {
            #[derive(Deserialize)]
            struct Body {
                shard: i32,
                checkpoint: String,
            }
            let body: Body = json_body(req).map_err(ApiError::parameter_invalid)?;
            let consumer = req.param("consumer").unwrap_or("");
            let force = match req.param("forceSuccess") {
                None | Some("false") => false,
                Some("true") => true,
                Some(_) => {
                    return Err(ApiError::parameter_invalid(
                        "forceSuccess must be true or false",
                    ))
                }
            };
            with_group(store, req, name, group, |cg, ls| {
                cg.update_checkpoint(ls, consumer, body.shard, body.checkpoint, force, now)
            })?;
            Ok(Reply::empty())
        }
        Op::GetCheckPoint(name, group) => {
            let shard = match req.param("shard") {
                None => None,
                Some(text) => Some(
                    text.parse()
                        .map_err(|_| ApiError::parameter_invalid("invalid shard id"))?,
                ),
            };
            let ls = logstore(store, req, name)?;
            let cg = ls
                .consumer_groups
                .get(group)
                .ok_or_else(|| ApiError::consumer_group_not_exist(group))?;
            Ok(Reply::json(200, &cg.checkpoints(ls, shard)))
        }
    }
}

fn json_body<T: for<'de> Deserialize<'de>>(req: &Req) -> Result<T, String> {
    serde_json::from_slice(&req.body).map_err(|e| format!("the body is not valid: {e}"))
}

fn project<'a>(store: &'a Store, name: &str) -> Result<&'a Project, ApiError> {
    store
        .projects
        .get(name)
        .ok_or_else(|| ApiError::project_not_exist(name))
}

fn project_mut<'a>(store: &'a mut Store, req: &Req) -> Result<&'a mut Project, ApiError> {
    let name = req.project()?;
    store
        .projects
        .get_mut(name)
        .ok_or_else(|| ApiError::project_not_exist(name))
}

fn logstore<'a>(store: &'a Store, req: &Req, name: &str) -> Result<&'a Logstore, ApiError> {
    project(store, req.project()?)?
        .logstores
        .get(name)
        .ok_or_else(|| ApiError::logstore_not_exist(name))
}

fn logstore_mut<'a>(
    store: &'a mut Store,
    req: &Req,
    name: &str,
) -> Result<&'a mut Logstore, ApiError> {
    project_mut(store, req)?
        .logstores
        .get_mut(name)
        .ok_or_else(|| ApiError::logstore_not_exist(name))
}

fn logstore_and_bases<'a>(
    store: &'a mut Store,
    req: &Req,
    name: &str,
) -> Result<(&'a mut Logstore, &'a mut crate::cursor::Bases), ApiError> {
    let project_name = req.project()?;
    let Store { projects, bases } = store;
    let ls = projects
        .get_mut(project_name)
        .ok_or_else(|| ApiError::project_not_exist(project_name))?
        .logstores
        .get_mut(name)
        .ok_or_else(|| ApiError::logstore_not_exist(name))?;
    Ok((ls, bases))
}

/// Runs `f` on a consumer group and its logstore (taken out of the logstore meanwhile, since
/// the group's decisions read the logstore's shards).
fn with_group<T>(
    store: &mut Store,
    req: &Req,
    name: &str,
    group: &str,
    f: impl FnOnce(&mut ConsumerGroup, &Logstore) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let ls = logstore_mut(store, req, name)?;
    let mut cg = ls
        .consumer_groups
        .remove(group)
        .ok_or_else(|| ApiError::consumer_group_not_exist(group))?;
    let result = f(&mut cg, ls);
    ls.consumer_groups.insert(group.to_string(), cg);
    result
}

fn consumer_param(req: &Req) -> Result<&str, ApiError> {
    req.param("consumer")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::parameter_invalid("consumer is required"))
}

/// Project names are host labels: 3 to 63 lowercase letters, digits and hyphens, not
/// beginning or ending with a hyphen (the reference's rule).
fn valid_project_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Logstore names: 2 to 63 lowercase letters, digits, hyphens and underscores, beginning and
/// ending with a letter or digit.
fn valid_logstore_name(name: &str) -> bool {
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (2..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && edge(name.bytes().next())
        && edge(name.bytes().last())
}

fn project_json(name: &str, project: &Project) -> serde_json::Value {
    json!({
        "projectName": name,
        "status": "Normal",
        "owner": "loghub-emulator",
        "description": project.description,
        "region": "emulator",
        "createTime": project.created.to_string(),
        "lastModifyTime": project.created.to_string(),
        "dataRedundancyType": "LRS",
    })
}

fn create_project(store: &mut Store, req: &Req, now: Now) -> Result<Reply, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "projectName")]
        project_name: String,
        #[serde(default)]
        description: String,
    }
    let body: Body = json_body(req).map_err(|e| ApiError::new(400, "PostBodyInvalid", e))?;
    if !valid_project_name(&body.project_name) {
        return Err(ApiError::parameter_invalid(format!(
            "invalid project name {}",
            body.project_name
        )));
    }
    if store.projects.contains_key(&body.project_name) {
        return Err(ApiError::project_already_exist(&body.project_name));
    }
    store.projects.insert(
        body.project_name,
        Project {
            description: body.description,
            created: now.unix_secs(),
            logstores: Default::default(),
        },
    );
    Ok(Reply::empty())
}

/// `offset` and `size` of a list call (defaults 0 and 100, size at most 500).
fn page(req: &Req) -> Result<(usize, usize), ApiError> {
    let number = |name: &str, default: usize| match req.param(name) {
        None => Ok(default),
        Some(t) => t
            .parse::<usize>()
            .map_err(|_| ApiError::parameter_invalid(format!("invalid {name}"))),
    };
    Ok((number("offset", 0)?, number("size", 100)?.min(500)))
}

fn list_projects(store: &Store, req: &Req) -> Result<Reply, ApiError> {
    let (offset, size) = page(req)?;
    let filter = req.param("projectName").unwrap_or("");
    let matching: Vec<_> = store
        .projects
        .iter()
        .filter(|(n, _)| n.contains(filter))
        .collect();
    let projects: Vec<_> = matching
        .iter()
        .skip(offset)
        .take(size)
        .map(|(n, p)| project_json(n, p))
        .collect();
    Ok(Reply::json(
        200,
        &json!({ "count": projects.len(), "total": matching.len(), "projects": projects }),
    ))
}

fn create_logstore(store: &mut Store, req: &Req, now: Now) -> Result<Reply, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "logstoreName")]
        name: String,
        #[serde(rename = "shardCount")]
        shard_count: i64,
        ttl: i64,
    }
    let body: Body = json_body(req).map_err(|e| ApiError::new(400, "PostBodyInvalid", e))?;
    if !valid_logstore_name(&body.name) {
        return Err(ApiError::parameter_invalid(format!(
            "invalid logstore name {}",
            body.name
        )));
    }
    let shard_count = u32::try_from(body.shard_count)
        .ok()
        .filter(|n| (1..=MAX_SHARDS).contains(n))
        .ok_or_else(|| {
            ApiError::parameter_invalid(format!("shardCount must be 1 to {MAX_SHARDS}"))
        })?;
    let ttl = i32::try_from(body.ttl)
        .ok()
        .filter(|t| (1..=3650).contains(t))
        .ok_or_else(|| ApiError::parameter_invalid("ttl must be 1 to 3650 days"))?;
    let project_name = req.project()?;
    let Store { projects, bases } = store;
    let project = projects
        .get_mut(project_name)
        .ok_or_else(|| ApiError::project_not_exist(project_name))?;
    if project.logstores.contains_key(&body.name) {
        return Err(ApiError::logstore_already_exist(&body.name));
    }
    project
        .logstores
        .insert(body.name, Logstore::new(shard_count, ttl, now, bases));
    Ok(Reply::empty())
}

fn list_logstores(store: &Store, req: &Req) -> Result<Reply, ApiError> {
    let (offset, size) = page(req)?;
    let filter = req.param("logstoreName").unwrap_or("");
    let project = project(store, req.project()?)?;
    let matching: Vec<&String> = project
        .logstores
        .keys()
        .filter(|n| n.contains(filter))
        .collect();
    let names: Vec<_> = matching.iter().skip(offset).take(size).collect();
    Ok(Reply::json(
        200,
        &json!({ "count": names.len(), "total": matching.len(), "logstores": names }),
    ))
}

fn put_logs(store: &mut Store, req: &Req, name: &str, now: Now) -> Result<Reply, ApiError> {
    // The route key is the `key` parameter (`/shards/route?key=`); older references put it in
    // an `x-log-hashkey` header on `/shards/lb`. Both are taken.
    let key = match req.param("key").or_else(|| req.header("x-log-hashkey")) {
        None => None,
        Some(text) => Some(
            keys::parse_key(text)
                .ok_or_else(|| ApiError::parameter_invalid(format!("invalid hash key {text}")))?,
        ),
    };
    let ls = logstore_mut(store, req, name)?;
    let (raw, _group) = codec::decode_put_body(
        &req.body,
        req.header("x-log-compresstype"),
        req.header("x-log-bodyrawsize"),
    )?;
    ls.put(key, raw, now)?;
    Ok(Reply::empty())
}

fn pull_logs(store: &Store, req: &Req, name: &str, shard: i64) -> Result<Reply, ApiError> {
    let cursor = req
        .param("cursor")
        .ok_or_else(|| ApiError::parameter_invalid("cursor is required"))?;
    let count = req
        .param("count")
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|c| (1..=MAX_PULL_COUNT).contains(c))
        .ok_or_else(|| {
            ApiError::parameter_invalid(format!("count must be 1 to {MAX_PULL_COUNT}"))
        })?;
    if req.param("query").is_some() {
        return Err(ApiError::parameter_invalid(
            "the emulator runs no SPL query",
        ));
    }
    // The SDK sends `endCursor`, the reference writes `end_cursor`: both are taken.
    let end_cursor = req.param("endCursor").or_else(|| req.param("end_cursor"));
    let shard = logstore(store, req, name)?.shard(shard)?;
    let pulled = shard.pull(cursor, count, end_cursor)?;
    let raw = codec::encode_group_list(&pulled.groups);
    let mut reply = Reply {
        status: 200,
        content_type: Some("application/x-protobuf"),
        headers: vec![
            ("x-log-cursor", pulled.next_cursor),
            ("x-log-count", pulled.groups.len().to_string()),
            ("x-log-bodyrawsize", raw.len().to_string()),
        ],
        body: Vec::new(),
    };
    match req
        .header("accept-encoding")
        .and_then(Compression::from_accept_encoding)
    {
        Some(compression) => {
            reply
                .headers
                .push(("x-log-compresstype", compression.name().to_string()));
            reply.body = compression.compress(&raw);
        }
        None => reply.body = raw,
    }
    Ok(reply)
}

fn create_consumer_group(store: &mut Store, req: &Req, name: &str) -> Result<Reply, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "consumerGroup")]
        name: String,
        timeout: i32,
        #[serde(default)]
        order: bool,
    }
    let body: Body = json_body(req).map_err(ApiError::json_info_invalid)?;
    if body.name.is_empty() || body.timeout <= 0 {
        return Err(ApiError::json_info_invalid(
            "consumerGroup or timeout is of error format",
        ));
    }
    let ls = logstore_mut(store, req, name)?;
    if ls.consumer_groups.contains_key(&body.name) {
        return Err(ApiError::consumer_group_already_exist(&body.name));
    }
    ls.consumer_groups
        .insert(body.name, ConsumerGroup::new(body.timeout, body.order));
    Ok(Reply::empty())
}
