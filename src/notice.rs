//! The notices one worker leaves in another's membership record (see "Sessions" in
//! `docs/ARCHITECTURE.md`): what each says and how it is written. Shared by the worker and the
//! operator's tools ([`admin`](crate::admin)).

use crate::lease::{Incarnation, LeaseKey, WorkerId};

/// A membership notice: `shardlease#member#<worker id>` tells the receiver that the fleet
/// changed next to it (that worker joined or left), so that it looks again at which session it
/// watches.
pub(crate) fn member_notice(worker: &WorkerId) -> String {
    format!("{}member#{worker}", crate::lease::RESERVED_PREFIX)
}

/// The worker a [`member_notice`] names.
pub(crate) fn member_of_notice(notice: &str) -> Option<WorkerId> {
    worker_named(notice, "member#")
}

/// The worker named by a notice of `kind` (`member#`, `joined#`).
fn worker_named(notice: &str, kind: &str) -> Option<WorkerId> {
    let worker = notice
        .strip_prefix(crate::lease::RESERVED_PREFIX)?
        .strip_prefix(kind)?;
    WorkerId::new(worker).ok()
}

/// An announcement: `shardlease#joined#<worker id>` tells the receiver that that worker joined
/// among the next two after it in id order, so that it watches that worker's session. Unlike a
/// [`member_notice`] it asks for nothing else: a receiver that watches that worker already
/// (it saw the record first) does nothing. (A version that does not know it reads it as a
/// membership notice naming nobody: it looks again at the fleet.)
pub(crate) fn joined_notice(worker: &WorkerId) -> String {
    format!("{}joined#{worker}", crate::lease::RESERVED_PREFIX)
}

/// The worker a [`joined_notice`] names.
pub(crate) fn joined_of_notice(notice: &str) -> Option<WorkerId> {
    worker_named(notice, "joined#")
}

/// A revocation: `shardlease#revoke#<lease key>` tells the owner of a lease asked for in a
/// handoff that the requester waited long enough: the owner tells its application that the
/// lease is lost and hands it over at once. The requester never takes a lease from a live
/// owner: until the owner lets go (or its session is over), the table names the
/// owner, and whoever looks at the lease waits for it.
pub(crate) fn revoke_notice(key: &LeaseKey) -> String {
    format!("{REVOKE_PREFIX}{key}")
}

/// The prefix of a revocation notice (see [`revoke_notice`]).
pub(crate) const REVOKE_PREFIX: &str = "shardlease#revoke#";

/// Separates a notice's text (a lease key, or a marker) from the nonce that makes it unique;
/// no key or id contains a control character.
pub(crate) const NOTICE_SEPARATOR: char = '\u{1f}';

/// The text of a notice, without its nonce.
pub(crate) fn notice_text(notice: &str) -> &str {
    notice.split(NOTICE_SEPARATOR).next().unwrap_or(notice)
}

/// An expectation notice: a session the receiver's leases may come from looks dead (its
/// watcher has not seen it beat for a while), so the receiver should look at its own record
/// often until the leases are given to it, rather than wait for its next beat.
pub(crate) const EXPECT_NOTICE: &str = "shardlease#expect";

/// A drain: `shardlease#drain#<incarnation>` asks that process of the worker to leave the
/// fleet gracefully, as its shutdown signal would (an operator's `shardlease drain`). It names
/// the incarnation so that another process of the id does not leave too.
pub(crate) fn drain_notice(incarnation: Incarnation) -> String {
    format!("{DRAIN_PREFIX}{incarnation}")
}

/// The prefix of a drain notice (see [`drain_notice`]).
pub(crate) const DRAIN_PREFIX: &str = "shardlease#drain#";

/// A notice as stored: its text and a nonce, so that the same text named again before the
/// receiver acknowledged the first is not removed with it.
pub(crate) fn with_nonce(text: &str) -> String {
    format!("{text}{NOTICE_SEPARATOR}{:x}", crate::store::new_nonce())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_and_a_membership_notice_name_their_worker_and_are_told_apart() {
        let worker = WorkerId::new("w-7").unwrap();
        let joined = joined_notice(&worker);
        let member = member_notice(&worker);
        assert_eq!(joined, "shardlease#joined#w-7");
        assert_eq!(
            joined_of_notice(notice_text(&with_nonce(&joined))),
            Some(worker.clone())
        );
        assert_eq!(member_of_notice(&member), Some(worker));
        assert_eq!(member_of_notice(&joined), None);
        assert_eq!(joined_of_notice(&member), None);
        assert_eq!(joined_of_notice("shard-1"), None);
    }
}
