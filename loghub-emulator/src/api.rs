//! LogHub's calls: which API a request is (method, path, query, and the project from the
//! host), then authentication, the injected faults, and the handler ([`crate::handlers`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use bytes::Bytes;
use hyper::http::request::Parts;
use hyper::{HeaderMap, Method};
use tokio_util::sync::CancellationToken;

use crate::control::Call;
use crate::error::ApiError;
use crate::handlers;
use crate::server::{Reply, Shared};

/// A request, parsed.
pub(crate) struct Req {
    pub(crate) method: Method,
    /// The path, percent-decoded.
    pub(crate) path: String,
    /// The raw query string.
    pub(crate) query: String,
    /// The query parameters, decoded.
    pub(crate) params: BTreeMap<String, String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The project the host names (`<project>.<endpoint>`), if it names one.
    pub(crate) project: Option<String>,
}

impl Req {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The project, for the calls whose host must name one.
    pub(crate) fn project(&self) -> Result<&str, ApiError> {
        self.project.as_deref().ok_or_else(|| {
            ApiError::new(
                400,
                "InvalidHost",
                "the Host header names no project (<project>.<endpoint>)",
            )
        })
    }
}

/// A LogHub operation and what its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    CreateProject,
    ListProject,
    GetProject,
    DeleteProject,
    CreateLogStore,
    ListLogStores,
    GetLogStore(String),
    DeleteLogStore(String),
    ListShards(String),
    PutLogs(String),
    SplitShard(String, i64),
    MergeShards(String, i64),
    GetCursor(String, i64),
    PullLogs(String, i64),
    CreateConsumerGroup(String),
    ListConsumerGroup(String),
    UpdateConsumerGroup(String, String),
    DeleteConsumerGroup(String, String),
    ConsumerGroupHeartBeat(String, String),
    UpdateCheckPoint(String, String),
    GetCheckPoint(String, String),
}

impl Op {
    /// The name the API reference gives the operation.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::CreateProject => "CreateProject",
            Op::ListProject => "ListProject",
            Op::GetProject => "GetProject",
            Op::DeleteProject => "DeleteProject",
            Op::CreateLogStore => "CreateLogStore",
            Op::ListLogStores => "ListLogStores",
            Op::GetLogStore(_) => "GetLogStore",
            Op::DeleteLogStore(_) => "DeleteLogStore",
            Op::ListShards(_) => "ListShards",
            Op::PutLogs(_) => "PutLogs",
            Op::SplitShard(..) => "SplitShard",
            Op::MergeShards(..) => "MergeShards",
            Op::GetCursor(..) => "GetCursor",
            Op::PullLogs(..) => "PullLogs",
            Op::CreateConsumerGroup(_) => "CreateConsumerGroup",
            Op::ListConsumerGroup(_) => "ListConsumerGroup",
            Op::UpdateConsumerGroup(..) => "UpdateConsumerGroup",
            Op::DeleteConsumerGroup(..) => "DeleteConsumerGroup",
            Op::ConsumerGroupHeartBeat(..) => "ConsumerGroupHeartBeat",
            Op::UpdateCheckPoint(..) => "UpdateCheckPoint",
            Op::GetCheckPoint(..) => "GetCheckPoint",
        }
    }

    fn logstore(&self) -> Option<&str> {
        match self {
            Op::GetLogStore(l)
            | Op::DeleteLogStore(l)
            | Op::ListShards(l)
            | Op::PutLogs(l)
            | Op::SplitShard(l, _)
            | Op::MergeShards(l, _)
            | Op::GetCursor(l, _)
            | Op::PullLogs(l, _)
            | Op::CreateConsumerGroup(l)
            | Op::ListConsumerGroup(l)
            | Op::UpdateConsumerGroup(l, _)
            | Op::DeleteConsumerGroup(l, _)
            | Op::ConsumerGroupHeartBeat(l, _)
            | Op::UpdateCheckPoint(l, _)
            | Op::GetCheckPoint(l, _) => Some(l),
            _ => None,
        }
    }

    fn shard(&self) -> Option<i64> {
        match self {
            Op::SplitShard(_, s)
            | Op::MergeShards(_, s)
            | Op::GetCursor(_, s)
            | Op::PullLogs(_, s) => Some(*s),
            _ => None,
        }
    }
}

/// The project a host names: its first label, unless the host is an IP address or a single
/// label (`localhost`), which name none. `demo.loghub.local:4580` names `demo`.
pub(crate) fn host_project(host: &str) -> Option<String> {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        })
    };
    if name.parse::<IpAddr>().is_ok() || !name.contains('.') {
        return None;
    }
    name.split('.')
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_ascii_lowercase)
}

/// Which operation a request is. The SDK's requests are the model: where it and the API
/// reference disagree, the SDK's form is taken (and the reference's too where both fit).
pub(crate) fn route(req: &Req) -> Result<Op, ApiError> {
    let segments: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let shard_id = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| ApiError::parameter_invalid("invalid shard id"))
    };
    let kind = req.param("type");
    let own = |s: &str| s.to_string();
    let op = match (&req.method, segments.as_slice()) {
        // CreateProject and ListProject go to the endpoint itself (no project in the host); the
        // project of CreateProject is in its body, and ListProject always has offset and size.
        (&Method::POST, []) => Op::CreateProject,
        (&Method::GET, []) if req.param("offset").is_some() || req.param("size").is_some() => {
            Op::ListProject
        }
        (&Method::GET, []) => Op::GetProject,
        (&Method::DELETE, []) => Op::DeleteProject,
        (&Method::POST, ["logstores"]) => Op::CreateLogStore,
        (&Method::GET, ["logstores"]) => Op::ListLogStores,
        (&Method::GET, ["logstores", l]) => Op::GetLogStore(own(l)),
        (&Method::DELETE, ["logstores", l]) => Op::DeleteLogStore(own(l)),
        (&Method::GET, ["logstores", l, "shards"]) => Op::ListShards(own(l)),
        (&Method::POST, ["logstores", l, "shards", "lb" | "route"]) => Op::PutLogs(own(l)),
        (&Method::POST, ["logstores", l, "shards", s]) => match req.param("action") {
            Some("split") => Op::SplitShard(own(l), shard_id(s)?),
            Some("merge") => Op::MergeShards(own(l), shard_id(s)?),
            _ => return Err(ApiError::parameter_invalid("action must be split or merge")),
        },
        (&Method::GET, ["logstores", l, "shards", s]) => match kind {
            Some("cursor") => Op::GetCursor(own(l), shard_id(s)?),
            // The reference writes type=log, the SDK sends type=logs: both are PullLogs.
            Some("log" | "logs") => Op::PullLogs(own(l), shard_id(s)?),
            _ => return Err(ApiError::parameter_invalid("type must be cursor or logs")),
        },
        (&Method::POST, ["logstores", l, "consumergroups"]) => Op::CreateConsumerGroup(own(l)),
        (&Method::GET, ["logstores", l, "consumergroups"]) => Op::ListConsumerGroup(own(l)),
        (&Method::PUT, ["logstores", l, "consumergroups", g]) => {
            Op::UpdateConsumerGroup(own(l), own(g))
        }
        (&Method::DELETE, ["logstores", l, "consumergroups", g]) => {
            Op::DeleteConsumerGroup(own(l), own(g))
        }
        (&Method::GET, ["logstores", l, "consumergroups", g]) => Op::GetCheckPoint(own(l), own(g)),
        (&Method::POST, ["logstores", l, "consumergroups", g]) => match kind {
            Some("heartbeat") => Op::ConsumerGroupHeartBeat(own(l), own(g)),
            Some("checkpoint") => Op::UpdateCheckPoint(own(l), own(g)),
            _ => {
                return Err(ApiError::parameter_invalid(
                    "type must be heartbeat or checkpoint",
                ))
            }
        },
        _ => return Err(ApiError::unsupported(req.method.as_str(), &req.path)),
    };
    Ok(op)
}

fn parse(parts: &Parts, body: Bytes) -> Req {
    let raw_path = parts.uri.path();
    let path = percent_encoding::percent_decode_str(raw_path)
        .decode_utf8()
        .map_or_else(|_| raw_path.to_string(), |p| p.into_owned());
    let query = parts.uri.query().unwrap_or("").to_string();
    let params = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    // An absolute-form target (a client whose HTTP proxy is the emulator) names the host in
    // the target; otherwise the Host header does.
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            parts
                .headers
                .get("host")
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        });
    Req {
        method: parts.method.clone(),
        path,
        query,
        params,
        headers: parts.headers.clone(),
        body,
        project: host.as_deref().and_then(host_project),
    }
}

/// Serves one LogHub call.
pub(crate) async fn handle(
    parts: &Parts,
    body: Bytes,
    shared: &Shared,
    token: &CancellationToken,
) -> Reply {
    let req = parse(parts, body);
    match serve(&req, shared, token).await {
        Ok(reply) => reply,
        Err(error) => Reply::error(&error),
    }
}

async fn serve(req: &Req, shared: &Shared, token: &CancellationToken) -> Result<Reply, ApiError> {
    let op = route(req)?;
    crate::auth::check(
        shared.access_key.as_ref(),
        req.method.as_str(),
        &req.path,
        &req.query,
        &req.headers,
        std::time::SystemTime::now(),
    )?;
    let call = Call {
        api: op.name(),
        project: match op {
            Op::CreateProject | Op::ListProject => None,
            _ => req.project.clone(),
        },
        logstore: op.logstore().map(str::to_string),
        shard: op.shard(),
    };
    let hit = shared.control().on_call(&call);
    if let Some(hit) = hit {
        if !hit.delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(hit.delay) => {}
                _ = token.cancelled() => {}
            }
        }
        if let Some(error) = hit.error {
            return Err(error);
        }
    }
    handlers::execute(&op, req, shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_is_the_first_label_of_a_host_name() {
        assert_eq!(
            host_project("demo.loghub.local:4580").as_deref(),
            Some("demo")
        );
        assert_eq!(
            host_project("demo.cn-hangzhou.log.aliyuncs.com").as_deref(),
            Some("demo")
        );
        assert_eq!(host_project("demo.127.0.0.1:4580").as_deref(), Some("demo"));
        assert_eq!(host_project("127.0.0.1:4580"), None);
        assert_eq!(host_project("[::1]:4580"), None);
        assert_eq!(host_project("localhost:4580"), None);
    }
}
