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
    let worker = notice
        .strip_prefix(crate::lease::RESERVED_PREFIX)?
        .strip_prefix("member#")?;
    WorkerId::new(worker).ok()
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
