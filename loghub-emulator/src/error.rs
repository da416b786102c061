//! LogHub's error answers: an HTTP status and the JSON body
//! `{"errorCode": ..., "errorMessage": ...}` that the SDK parses into
//! `aliyun_log_rust_sdk::Error::Server`. Statuses, codes and messages follow the API
//! reference (its common error codes and each operation's own); where the reference names a
//! code without a status, the comment says which status was chosen and why.

/// One error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// `errorCode`.
    pub code: String,
    /// `errorMessage`.
    pub message: String,
}

impl ApiError {
    /// An error answer with any status, code and message (the injected faults use it).
    pub fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::json!({ "errorCode": self.code, "errorMessage": self.message }).to_string()
    }

    pub(crate) fn parameter_invalid(message: impl Into<String>) -> Self {
        Self::new(400, "ParameterInvalid", message)
    }

    pub(crate) fn project_not_exist(project: &str) -> Self {
        Self::new(
            404,
            "ProjectNotExist",
            format!("The Project does not exist : {project}"),
        )
    }

    pub(crate) fn project_already_exist(project: &str) -> Self {
        Self::new(
            400,
            "ProjectAlreadyExist",
            format!("Project {project} already exist"),
        )
    }

    pub(crate) fn logstore_not_exist(logstore: &str) -> Self {
        Self::new(
            404,
            "LogStoreNotExist",
            format!("logstore {logstore} does not exist"),
        )
    }

    pub(crate) fn logstore_already_exist(logstore: &str) -> Self {
        Self::new(
            400,
            "LogStoreAlreadyExist",
            format!("logstore {logstore} already exists"),
        )
    }

    /// The reference names ShardNotExist for reads of a shard that is not there; 404 like the
    /// other "does not exist" codes.
    pub(crate) fn shard_not_exist(shard: i64) -> Self {
        Self::new(
            404,
            "ShardNotExist",
            format!("Shard {shard} does not exist"),
        )
    }

    pub(crate) fn invalid_cursor(cursor: &str) -> Self {
        Self::new(400, "InvalidCursor", format!("cursor {cursor} is invalid"))
    }

    pub(crate) fn consumer_group_not_exist(group: &str) -> Self {
        Self::new(
            404,
            "ConsumerGroupNotExist",
            format!("consumer group {group} does not exist"),
        )
    }

    pub(crate) fn consumer_group_already_exist(_group: &str) -> Self {
        Self::new(
            400,
            "ConsumerGroupAlreadyExist",
            "consumer group already exist",
        )
    }

    /// A consumer group body that is not `{"consumerGroup", "timeout", "order"}`.
    pub(crate) fn json_info_invalid(message: impl Into<String>) -> Self {
        Self::new(400, "JsonInfoInvalid", message)
    }

    /// The consumer libraries (Java, Go) match LogHub's own spelling of this code,
    /// `ConsumerNotExsit`, when a checkpoint is refused because the consumer left the group;
    /// 400 like the group's other refusals.
    pub(crate) fn consumer_not_exist(consumer: &str) -> Self {
        Self::new(
            400,
            "ConsumerNotExsit",
            format!("consumer {consumer} does not exist"),
        )
    }

    /// A checkpoint from a consumer the shard is not assigned to (the consumer libraries give
    /// the shard up on this code); 400 like the group's other refusals.
    pub(crate) fn consumer_not_match(consumer: &str, shard: i32) -> Self {
        Self::new(
            400,
            "ConsumerNotMatch",
            format!("consumer {consumer} does not hold shard {shard}"),
        )
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "Unauthorized", message)
    }

    pub(crate) fn unsupported(method: &str, path: &str) -> Self {
        Self::parameter_invalid(format!("the emulator serves no {method} {path}"))
    }
}
