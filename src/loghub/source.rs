//! The shard source of a LogHub logstore: `ListShards` (one call, no paging), each shard a
//! lease keyed by its id, `readonly` closed, parents derived from the hash-key ranges
//! (`ranges.rs`). The last listing is kept, so that a record loop at the end of a shard's data
//! can ask whether the shard is `readonly` without a call of its own each time.

use std::sync::Arc;
use std::time::Duration;

use aliyun_log_rust_sdk::{Client, Error as SdkError};
use async_trait::async_trait;
use tokio::time::Instant;

use super::ranges::{self, ListedShard, RangeError};
use super::{classify, describe, Failure};
use crate::lease::LeaseKey;
use crate::source::{Shard, ShardSource, SourceError};

/// A listing younger than this answers "is this shard readonly?" without a new call.
const STATUS_MAX_AGE: Duration = Duration::from_secs(10);

/// Why a logstore cannot be read at all, found by [`LogHubShardSource::check`] when a
/// consumer starts. Each message is one line that says what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogHubError {
    /// No project of this name at the client's endpoint.
    #[error(
        "project {project:?} does not exist at the LogHub endpoint: check the project name \
         and the endpoint (the project's region)"
    )]
    ProjectNotFound {
        /// The project.
        project: String,
    },
    /// The project has no logstore of this name.
    #[error("project {project:?} has no logstore {logstore:?}: check the logstore name")]
    LogstoreNotFound {
        /// The project.
        project: String,
        /// The logstore.
        logstore: String,
    },
    /// LogHub refused the credentials or the call.
    #[error(
        "LogHub refused {call} on {project}/{logstore} ({reason}): check the access key and \
         that it may call log:{call} there"
    )]
    Refused {
        /// The call.
        call: String,
        /// The project.
        project: String,
        /// The logstore.
        logstore: String,
        /// The error's code and message.
        reason: String,
    },
    /// The endpoint cannot be reached (nothing listens there, a name that does not resolve,
    /// no route).
    #[error("cannot reach LogHub for project {project:?}: {reason}")]
    Unreachable {
        /// The project.
        project: String,
        /// What the HTTP client said.
        reason: String,
    },
    /// The listing cannot be read as shards (a key, a range or a status the parent rule does
    /// not know).
    #[error("ListShards on {project}/{logstore} is unreadable")]
    Listing {
        /// The project.
        project: String,
        /// The logstore.
        logstore: String,
        /// What is wrong with it.
        #[source]
        source: RangeError,
    },
}

/// A failed listing: the call, or an answer the parent rule cannot read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListFailure {
    #[error("{}", describe(.0))]
    Call(#[from] SdkError),
    #[error(transparent)]
    Listing(#[from] RangeError),
}

/// Lists the shards of one logstore: id (the lease key, in decimal), parents (derived from
/// the key ranges: a split has one, a merge two), closed (`readonly`).
pub struct LogHubShardSource {
    client: Arc<Client>,
    project: String,
    logstore: String,
    last: tokio::sync::Mutex<Option<(Instant, Vec<Shard>)>>,
}

impl std::fmt::Debug for LogHubShardSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHubShardSource")
            .field("project", &self.project)
            .field("logstore", &self.logstore)
            .finish_non_exhaustive()
    }
}

impl LogHubShardSource {
    /// A source for `logstore` of `project`.
    pub fn new(
        client: Arc<Client>,
        project: impl Into<String>,
        logstore: impl Into<String>,
    ) -> Self {
        Self {
            client,
            project: project.into(),
            logstore: logstore.into(),
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The logstore.
    pub fn logstore(&self) -> &str {
        &self.logstore
    }

    /// One `ListShards`, as the library's shards. (The SDK retries network errors and 500 to
    /// 503 answers itself.)
    pub(crate) async fn list(&self) -> Result<Vec<Shard>, ListFailure> {
        let started = Instant::now();
        let response = self
            .client
            .list_shards(&self.project, &self.logstore)
            .send()
            .await?;
        let listed: Vec<ListedShard> = response
            .get_body()
            .shards()
            .iter()
            .map(|s| ListedShard {
                id: *s.shard_id(),
                status: s.status().clone(),
                begin: s.inclusive_begin_key().clone(),
                end: s.exclusive_end_key().clone(),
                created: *s.create_time(),
            })
            .collect();
        let shards = ranges::to_shards(&listed)?;
        *self.last.lock().await = Some((started, shards.clone()));
        Ok(shards)
    }

    /// Whether the shard was `readonly` in a listing taken at most 10 s ago (listing again if
    /// needed). Readonly is for good: a listing that says so stays right.
    pub(crate) async fn is_readonly(&self, key: &LeaseKey) -> Result<bool, ListFailure> {
        {
            let last = self.last.lock().await;
            if let Some((at, shards)) = &*last {
                if at.elapsed() < STATUS_MAX_AGE {
                    return Ok(shards.iter().any(|s| s.key == *key && s.closed));
                }
            }
        }
        let shards = self.list().await?;
        Ok(shards.iter().any(|s| s.key == *key && s.closed))
    }

    /// Lists the shards once, to find the errors that make the logstore unreadable: a project
    /// or logstore that does not exist, refused credentials, an endpoint that cannot be
    /// reached, a listing the parent rule cannot read. Throttling and passing failures are
    /// let through with a warning: the discoverer keeps trying.
    /// [`LogHubConsumer`](super::LogHubConsumer) calls it before it starts.
    pub async fn check(&self) -> Result<(), LogHubError> {
        let err = match self.list().await {
            Ok(_) => return Ok(()),
            Err(ListFailure::Listing(source)) => {
                return Err(LogHubError::Listing {
                    project: self.project.clone(),
                    logstore: self.logstore.clone(),
                    source,
                })
            }
            Err(ListFailure::Call(err)) => err,
        };
        match unreadable("ListShards", &self.project, &self.logstore, &err) {
            Some(error) => Err(error),
            None => {
                tracing::warn!(project = %self.project, logstore = %self.logstore, error = %describe(&err), "the logstore could not be listed at startup; the discoverer keeps trying");
                Ok(())
            }
        }
    }

    /// A failed listing for the discoverer, in one line that names the logstore.
    fn source_error(&self, err: &ListFailure) -> SourceError {
        let text = format!("ListShards {}/{}: {err}", self.project, self.logstore);
        match err {
            ListFailure::Call(call) if classify(call) == Failure::Throttled => {
                SourceError::Throttled(text.into())
            }
            _ => SourceError::Failed(text.into()),
        }
    }
}

/// The [`LogHubError`] a failed `call` at startup means, or `None` for a throttled or passing
/// failure, which the consumer's loops retry.
pub(crate) fn unreadable(
    call: &str,
    project: &str,
    logstore: &str,
    err: &SdkError,
) -> Option<LogHubError> {
    if let SdkError::Server { error_code, .. } = err {
        match error_code.as_str() {
            "ProjectNotExist" => {
                return Some(LogHubError::ProjectNotFound {
                    project: project.to_owned(),
                })
            }
            "LogStoreNotExist" => {
                return Some(LogHubError::LogstoreNotFound {
                    project: project.to_owned(),
                    logstore: logstore.to_owned(),
                })
            }
            _ => {}
        }
    }
    if let SdkError::Network(network) = err {
        // A refused or unresolvable connection at startup is a wrong endpoint, not a blip.
        if network.is_connect() || network.is_builder() {
            return Some(LogHubError::Unreachable {
                project: project.to_owned(),
                reason: describe(err),
            });
        }
    }
    (classify(err) == Failure::Fatal).then(|| LogHubError::Refused {
        call: call.to_owned(),
        project: project.to_owned(),
        logstore: logstore.to_owned(),
        reason: describe(err),
    })
}

#[async_trait]
impl ShardSource for LogHubShardSource {
    async fn list_shards(&self) -> Result<Vec<Shard>, SourceError> {
        self.list().await.map_err(|err| self.source_error(&err))
    }
}
