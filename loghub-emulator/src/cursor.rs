//! Cursors: opaque to clients, as LogHub's are. Like LogHub's, a cursor is the base64 of a
//! decimal number: the shard's *cursor base* plus the index of a log group in the shard (the
//! number of groups is the end cursor). Each shard gets its own base, at least 2^32 above the
//! previous shard's, so a cursor of one shard is out of range in every other
//! ([`Bases`]).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// The gap between two shards' cursor bases: no shard holds 2^32 log groups.
pub const BASE_GAP: u64 = 1 << 32;

/// The cursor of position `position`.
pub fn encode(position: u64) -> String {
    STANDARD.encode(position.to_string())
}

/// The position a cursor names, `None` for a string that is not one of ours.
pub fn decode(cursor: &str) -> Option<u64> {
    let bytes = STANDARD.decode(cursor.trim()).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Hands out cursor bases: time-like (the creation time in microseconds, times 1000, as
/// LogHub's cursors look), strictly increasing by at least [`BASE_GAP`].
#[derive(Debug, Default)]
pub struct Bases {
    last: Option<u64>,
}

impl Bases {
    /// The base of a shard created at `unix_micros`.
    pub fn next(&mut self, unix_micros: i64) -> u64 {
        let time_like = u64::try_from(unix_micros).unwrap_or(0).saturating_mul(1000);
        let base = match self.last {
            Some(last) => time_like.max(last + BASE_GAP),
            None => time_like,
        };
        self.last = Some(base);
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_others_do_not_decode() {
        let c = encode(1_700_000_000_000_000_123);
        assert_eq!(decode(&c), Some(1_700_000_000_000_000_123));
        assert_eq!(decode("not base64!"), None);
        assert_eq!(decode(&STANDARD.encode("12a")), None);
        assert_eq!(decode(""), None);
    }

    #[test]
    fn bases_are_apart_even_in_the_same_microsecond() {
        let mut bases = Bases::default();
        let a = bases.next(5);
        let b = bases.next(5);
        let c = bases.next(4);
        assert_eq!(a, 5000);
        assert!(b >= a + BASE_GAP && c >= b + BASE_GAP);
    }
}
