//! What a backend's decoder makes of a stored item, one type for the DynamoDB and Redis
//! schemas: a lease or a membership record, each with the token of its last write (`lastOp`),
//! and the refusal of an item of the other kind.

use super::error::StoreError;
use crate::lease::{Lease, Member, WorkerId, RESERVED_PREFIX};

/// A decoded item: a lease or a membership record, with the token of its last write.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A lease, with the token of its last write.
    Lease(Lease, Option<String>),
    /// A membership record, with the token of its last write.
    Member(Member, Option<String>),
}

impl Decoded {
    /// The lease, or [`StoreError::Malformed`] when the item is a membership record. `key`
    /// names the attribute whose value says which kind the item is.
    pub fn into_lease(self, key: &'static str) -> Result<(Lease, Option<String>), StoreError> {
        match self {
            Decoded::Lease(lease, op) => Ok((lease, op)),
            Decoded::Member(member, _) => Err(StoreError::Malformed {
                key: member_key(&member.worker),
                field: key,
                reason: "names a membership record where a lease was expected".into(),
            }),
        }
    }

    /// The membership record, or [`StoreError::Malformed`] when the item is a lease.
    /// `heartbeat` names the attribute a membership record has and a lease lacks.
    pub fn into_member(
        self,
        heartbeat: &'static str,
    ) -> Result<(Member, Option<String>), StoreError> {
        match self {
            Decoded::Member(member, op) => Ok((member, op)),
            Decoded::Lease(lease, _) => Err(StoreError::Malformed {
                key: lease.key.to_string(),
                field: heartbeat,
                reason: "is missing: the item is a lease, not a membership record".into(),
            }),
        }
    }
}

/// The item key of `worker`'s membership record: `shardlease#member#<worker id>`.
pub fn member_key(worker: &WorkerId) -> String {
    format!("{RESERVED_PREFIX}member#{worker}")
}
