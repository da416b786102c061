//! This process's session as the worker's loops read it: open or not, valid here until when,
//! the heartbeat it last wrote, and the sessions of this id its opening replaced. Written by
//! the session loop (each beat, opening and loss); read by the taker (may it take?), by the
//! takes (how long is a lease taken now valid?) and by the worker's readiness. The control
//! loop, which only reports, fences and lets go of leases, is not handed it.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use super::parts::Base;
use crate::lease::Incarnation;

/// This process's session.
#[derive(Debug)]
pub(crate) struct Session {
    /// Open: its last beat (or its opening) was accepted, and no beat was refused since.
    pub open: bool,
    /// The end of its validity here: start of the last accepted beat + the lease validity.
    pub valid_until: Instant,
    /// The heartbeat of the record as this process last wrote it.
    pub heartbeat: u64,
    /// When the opening (or adoption) that made this session the record's started, and the
    /// sessions of this id it read in the record on the way (see [`OwnSession::opened`]).
    pub opened: Option<(Instant, Vec<Incarnation>)>,
    /// This process's own earlier sessions, each with the end of its validity here when it
    /// ended (see [`OwnSession::ended`]); the latest few.
    pub earlier: Vec<(Incarnation, Instant)>,
}

/// How many of its own ended sessions a process remembers (see [`OwnSession::ended`]).
const EARLIER: usize = 4;

/// This process's session, shared by the loops that read it (see the module's doc).
pub(crate) struct OwnSession {
    base: Arc<Base>,
    session: Mutex<Session>,
}

impl OwnSession {
    /// A session not open yet.
    pub fn new(base: Arc<Base>) -> Self {
        let now = base.now();
        Self {
            base,
            session: Mutex::new(Session {
                open: false,
                valid_until: now,
                heartbeat: 0,
                opened: None,
                earlier: Vec::new(),
            }),
        }
    }

    /// The session.
    pub fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session is open and its validity has not run out here. A session
    /// whose beats went unanswered past its validity may have been fenced by a peer already
    /// (it learns so at its next beat's answer): until a beat lands it must neither take nor
    /// ask for a lease, which it could not start (or would have to give on again).
    pub fn valid(&self) -> bool {
        let now = self.base.now();
        let session = self.lock();
        session.open && now < session.valid_until
    }

    /// The session this process has just opened (or adopted, see `session::open`), the
    /// opening answered now, having read the sessions `replaced` in the record. Each of those
    /// can never beat again (it was replaced, by this opening or before its next read), and
    /// its last beat began before the replacing write landed, so before now: it is over a
    /// lease duration from now. Not from the read's start:
    /// a read answered by a retry shows the record as of that retry, and a beat that began
    /// between the two lived up to a lease duration after it (a twin took the leases of the
    /// process it replaced while that one still worked on them: `tests/twin_opening.rs`, and
    /// `a_replaced_session_is_over_a_lease_duration_after_the_opening_was_answered` in
    /// `sim/tests/campaign_holes.rs`).
    pub fn opened(&self, replaced: Vec<Incarnation>) {
        let answered = self.base.now();
        self.lock().opened = Some((answered, replaced));
    }

    /// While this session is valid: when the sessions of this worker's id its opening
    /// replaced (see [`OwnSession::opened`]) are all surely over, whatever record an eventually
    /// consistent scan still shows for them, and which they are. `None` otherwise (a session
    /// of this id opened later is judged as any other).
    pub fn predecessors(&self) -> Option<(Instant, Vec<Incarnation>)> {
        let now = self.base.now();
        let session = self.lock();
        if !session.open || now >= session.valid_until {
            return None;
        }
        let (at, replaced) = session.opened.as_ref()?;
        Some((*at + self.base.config.lease_duration, replaced.clone()))
    }

    /// How long a lease whose take started at `start` is valid here: as long as the session,
    /// and not at all while it is not open.
    pub fn validity_from(&self, start: Instant) -> Instant {
        let session = self.lock();
        if session.open {
            session.valid_until
        } else {
            start
        }
    }

    /// A beat (or the opening of the session) that started at `start` was accepted, writing
    /// `heartbeat`: the session is valid a lease validity from `start`. Returns that
    /// validity, and whether the session, open, had lapsed here before this beat: every lease
    /// was lost here, yet nobody fenced the session (the beat landed), so the leases are still
    /// this session's in the table and nobody else may start them: a placement round resumes
    /// them.
    pub fn beaten(&self, start: Instant, heartbeat: u64) -> (Instant, bool) {
        let valid_until = start + self.base.config.validity();
        let mut session = self.lock();
        let lapsed = session.open && session.valid_until <= self.base.now();
        session.open = true;
        session.heartbeat = heartbeat;
        if valid_until > session.valid_until {
            session.valid_until = valid_until;
        }
        (valid_until, lapsed)
    }

    /// The session ended under this process.
    pub fn close(&self) {
        self.lock().open = false;
    }

    /// Session `incarnation` of this process ended (a beat refused): every lease it held was
    /// lost here at once, and none was valid past the validity it had then. Nobody else works
    /// on that session's leases (an incarnation is one process's), so this process may take
    /// them back from then on, without the lease duration another observer waits.
    pub fn ended(&self, incarnation: Incarnation) {
        let mut session = self.lock();
        let until = session.valid_until;
        session.earlier.retain(|(i, _)| *i != incarnation);
        session.earlier.push((incarnation, until));
        if session.earlier.len() > EARLIER {
            session.earlier.remove(0);
        }
    }

    /// When a lease of this process's own earlier session `incarnation` may be taken back
    /// (see [`OwnSession::ended`]); `None` when it is no session of this process's.
    pub fn earlier_over(&self, incarnation: Incarnation) -> Option<Instant> {
        let session = self.lock();
        session
            .earlier
            .iter()
            .find(|(i, _)| *i == incarnation)
            .map(|(_, until)| *until)
    }
}
