//! Shard key ranges: LogHub's 128-bit MD5 hash space, written as 32 lowercase hexadecimal
//! digits. A shard covers `[inclusiveBeginKey, exclusiveEndKey)`; the last shard's end is
//! written `ffffffffffffffffffffffffffffffff` (2^128 has no 32-digit form), and that key itself
//! belongs to the last shard.

/// The largest key, the written end of the last shard.
pub const MAX_KEY: u128 = u128::MAX;

/// `key` as LogHub writes it: 32 lowercase hexadecimal digits.
pub fn format_key(key: u128) -> String {
    format!("{key:032x}")
}

/// A key as clients send it (SplitShard's `key`, PutLogs' route `key`): 1 to 32 hexadecimal
/// digits, either case. A shorter key is a prefix, padded on the right with zeros, so `8`
/// is `80000000000000000000000000000000`. `None` for anything else.
pub fn parse_key(text: &str) -> Option<u128> {
    if text.is_empty() || text.len() > 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u128::from_str_radix(text, 16).ok()?;
    Some(value << (4 * (32 - text.len())))
}

/// `count` ranges tiling the whole key space evenly, as a logstore's shards are at creation:
/// range `i` begins at `floor(i * 2^128 / count)`, the last ends at [`MAX_KEY`].
pub fn even_ranges(count: u32) -> Vec<(u128, u128)> {
    split_evenly(0, MAX_KEY, count)
}

/// `[begin, end)` cut into `count` adjacent ranges of (nearly) equal width; `end` of
/// [`MAX_KEY`] stands for 2^128. `count` of 0 gives no range.
pub fn split_evenly(begin: u128, end: u128, count: u32) -> Vec<(u128, u128)> {
    if count == 0 {
        return Vec::new();
    }
    // Widths fit in u128 except the whole space, 2^128, whose cuts are computed as
    // floor(i * 2^128 / count) without overflow: (i * (2^128 / count)) plus the remainder share.
    let whole = end == MAX_KEY && begin == 0;
    // A range ending at MAX_KEY really ends at 2^128: one wider than `end - begin`.
    let width: u128 = if end == MAX_KEY && !whole {
        MAX_KEY - begin + 1
    } else {
        end - begin
    };
    let cut = |i: u32| -> u128 {
        if i == count {
            return end;
        }
        let (i, n) = (i as u128, count as u128);
        if whole {
            let quotient = MAX_KEY / n;
            let remainder = MAX_KEY % n + 1; // 2^128 = n * quotient + remainder
            let (q, r) = (quotient, remainder);
            // i * 2^128 / n = i * q + i * r / n, with i * r < n * n: no overflow.
            i * q + (i * r) / n
        } else {
            begin + mul_div(width, i, n)
        }
    };
    (0..count).map(|i| (cut(i), cut(i + 1))).collect()
}

/// `floor(a * b / c)` for `b <= c`, without overflowing u128.
fn mul_div(a: u128, b: u128, c: u128) -> u128 {
    (a / c) * b + ((a % c) * b) / c
}

/// Whether `key` falls in the shard range `[begin, end)`; the range ending at [`MAX_KEY`] holds
/// [`MAX_KEY`] too.
pub fn contains(begin: u128, end: u128, key: u128) -> bool {
    key >= begin && (key < end || end == MAX_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_shards_meet_in_the_middle_as_loghub_writes_them() {
        let ranges: Vec<_> = even_ranges(2)
            .into_iter()
            .map(|(b, e)| (format_key(b), format_key(e)))
            .collect();
        assert_eq!(
            ranges,
            [
                (
                    "00000000000000000000000000000000".into(),
                    "80000000000000000000000000000000".into()
                ),
                (
                    "80000000000000000000000000000000".into(),
                    "ffffffffffffffffffffffffffffffff".into()
                ),
            ] as [(String, String); 2]
        );
    }

    #[test]
    fn even_ranges_tile_the_space_for_every_count() {
        for count in 1..=64u32 {
            let ranges = even_ranges(count);
            assert_eq!(ranges.len(), count as usize);
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges.last().unwrap().1, MAX_KEY);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].1, pair[1].0, "count {count}");
                assert!(pair[0].0 < pair[0].1);
            }
        }
        assert_eq!(even_ranges(4)[1].0, 1u128 << 126);
        assert_eq!(
            even_ranges(3)[1].0,
            0x5555_5555_5555_5555_5555_5555_5555_5555
        );
    }

    #[test]
    fn a_short_key_is_a_prefix_and_bad_keys_are_none() {
        assert_eq!(parse_key("8"), Some(1u128 << 127));
        assert_eq!(
            parse_key("EF000000000000000000000000000000"),
            Some(0xef << 120)
        );
        assert_eq!(parse_key(""), None);
        assert_eq!(parse_key("xyz"), None);
        assert_eq!(parse_key(&"0".repeat(33)), None);
    }

    #[test]
    fn the_last_range_holds_the_largest_key() {
        assert!(contains(1 << 127, MAX_KEY, MAX_KEY));
        assert!(!contains(0, 1 << 127, 1 << 127));
        assert!(contains(0, 1 << 127, (1 << 127) - 1));
    }

    #[test]
    fn a_range_splits_evenly_into_three() {
        let parts = split_evenly(0, 300, 3);
        assert_eq!(parts, vec![(0, 100), (100, 200), (200, 300)]);
    }
}
