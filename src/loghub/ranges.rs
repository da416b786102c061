//! LogHub shards as the library's [`Shard`]s: `readonly` is closed, and parents from splits
//! and merges derived from the shards' hash-key ranges, since `ListShards` names no parents.
//! Plain functions over plain data, unit-tested below without LogHub (the shard source,
//! `source.rs`, feeds them its listings).
//!
//! # The rule
//!
//! A shard covers the MD5 hash keys `[inclusiveBeginKey, exclusiveEndKey)`. A split turns a
//! `readwrite` shard `readonly` and creates shards that tile its range; a merge turns two
//! adjacent `readwrite` shards `readonly` and creates one shard covering both. So the parents
//! of a shard S are found among the *candidates*: the listed `readonly` shards created before S
//! (ordered by `createTime`, then by shard id) whose range strictly contains S's range (S came
//! from a split) or lies strictly inside it (S came from a merge). A shard with S's exact
//! range, or one that only partly overlaps it, is never a parent.
//!
//! - If the most recently created candidate contains S, it is S's only parent (a split).
//! - Otherwise S is a merge: walking S's range from its begin key, the parent at each point is
//!   the most recently created candidate that begins there; the walk goes on from its end key.
//!   Where no candidate begins (that parent has expired), the walk jumps to the next begin key.
//!
//! Why the most recently created: shards that exist at the same time never overlap, so every
//! candidate that is not a real parent overlaps a real parent and was retired before that
//! parent was created. After split-then-merge the merged shard has the range of the shard that
//! was split, but the halves are newer; after merge-then-split the children lie inside the
//! halves that were merged, but the merged shard is newer.
//!
//! # Limits
//!
//! - The order of creation must be the real one: `createTime` is in seconds, so two shards
//!   created in the same second are ordered by shard id, which LogHub assigns increasing.
//! - A parent gone from the listing (its data expired) is simply not named: a child of expired
//!   shards has fewer parents, or none, and starts at once, which is right since nothing is
//!   left to read in them. This relies on `readonly` shards expiring in the order they turned
//!   `readonly` (one retention for the logstore): an older, non-parent candidate must not
//!   outlive a real parent, or it would be taken for one.
//! - Keys must be hexadecimal, at most 32 digits; a shorter key is read as a prefix (right
//!   padded with zeros). A key that is not, a range that is empty, or a status other than
//!   `readwrite` and `readonly` fails the whole listing rather than guess.

use crate::lease::{InvalidId, LeaseKey};
use crate::source::Shard;

/// One shard as LogHub's `ListShards` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedShard {
    /// `shardID`.
    pub id: i32,
    /// `status`: `readwrite` or `readonly`.
    pub status: String,
    /// `inclusiveBeginKey`.
    pub begin: String,
    /// `exclusiveEndKey`.
    pub end: String,
    /// `createTime`, in seconds since the epoch.
    pub created: i64,
}

/// A listing the rule cannot read.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    /// A key that is not 1 to 32 hexadecimal digits.
    #[error("shard {shard}: key {key:?} is not 1 to 32 hexadecimal digits")]
    BadKey {
        /// The shard's id.
        shard: i32,
        /// The key as listed.
        key: String,
    },
    /// A begin key at or after the end key.
    #[error("shard {shard}: empty key range [{begin}, {end})")]
    EmptyRange {
        /// The shard's id.
        shard: i32,
        /// `inclusiveBeginKey`.
        begin: String,
        /// `exclusiveEndKey`.
        end: String,
    },
    /// A status other than `readwrite` and `readonly`.
    #[error("shard {shard}: unknown status {status:?} (expected readwrite or readonly)")]
    UnknownStatus {
        /// The shard's id.
        shard: i32,
        /// The status as listed.
        status: String,
    },
    /// A shard id the library refuses as a lease key.
    #[error("shard {shard}: its id is not a valid lease key")]
    Key {
        /// The shard's id.
        shard: i32,
        /// Why the key was refused.
        source: InvalidId,
    },
}

/// The lease key of a LogHub shard: its id in decimal.
pub fn lease_key(id: i32) -> Result<LeaseKey, RangeError> {
    LeaseKey::new(id.to_string()).map_err(|source| RangeError::Key { shard: id, source })
}

/// A listed shard with its range read as numbers.
struct Parsed {
    id: i32,
    closed: bool,
    begin: u128,
    end: u128,
    created: i64,
}

impl Parsed {
    fn read(shard: &ListedShard) -> Result<Self, RangeError> {
        let key = |text: &str| {
            parse_key(text).ok_or_else(|| RangeError::BadKey {
                shard: shard.id,
                key: text.to_owned(),
            })
        };
        let (begin, end) = (key(&shard.begin)?, key(&shard.end)?);
        if begin >= end {
            return Err(RangeError::EmptyRange {
                shard: shard.id,
                begin: shard.begin.clone(),
                end: shard.end.clone(),
            });
        }
        let closed = match shard.status.as_str() {
            "readonly" => true,
            "readwrite" => false,
            _ => {
                return Err(RangeError::UnknownStatus {
                    shard: shard.id,
                    status: shard.status.clone(),
                })
            }
        };
        Ok(Self {
            id: shard.id,
            closed,
            begin,
            end,
            created: shard.created,
        })
    }

    /// The order of creation: `createTime`, then the id.
    fn order(&self) -> (i64, i32) {
        (self.created, self.id)
    }

    /// Strictly contains `other`'s range (a split parent's relation to its child).
    fn contains(&self, other: &Parsed) -> bool {
        self.begin <= other.begin
            && other.end <= self.end
            && self.end - self.begin > other.end - other.begin
    }
}

/// A key as a 128-bit number; a key shorter than 32 digits is a prefix, padded with zeros.
fn parse_key(text: &str) -> Option<u128> {
    if text.is_empty() || text.len() > 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u128::from_str_radix(text, 16).ok()?;
    Some(value << (4 * (32 - text.len())))
}

/// The listing as the library's shards: `readonly` ones closed, parents derived by the rule
/// in this module's documentation. Keeps the listing's order.
pub fn to_shards(listed: &[ListedShard]) -> Result<Vec<Shard>, RangeError> {
    let parsed = listed
        .iter()
        .map(Parsed::read)
        .collect::<Result<Vec<_>, _>>()?;
    parsed
        .iter()
        .map(|shard| {
            let parents = parents(shard, &parsed)
                .into_iter()
                .map(lease_key)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Shard {
                key: lease_key(shard.id)?,
                parents,
                closed: shard.closed,
            })
        })
        .collect()
}

/// The ids of `shard`'s parents among `all`.
fn parents(shard: &Parsed, all: &[Parsed]) -> Vec<i32> {
    let candidates: Vec<&Parsed> = all
        .iter()
        .filter(|c| c.closed && c.order() < shard.order())
        .filter(|c| c.contains(shard) || shard.contains(c))
        .collect();
    let Some(latest) = candidates.iter().max_by_key(|c| c.order()) else {
        return Vec::new();
    };
    if latest.contains(shard) {
        return vec![latest.id];
    }
    // A merge: tile the range with the newest candidate beginning at each point.
    let inside: Vec<&Parsed> = candidates
        .into_iter()
        .filter(|c| shard.contains(c))
        .collect();
    let mut parents = Vec::new();
    let mut at = shard.begin;
    while at < shard.end {
        // The lowest begin key at or after `at`; of the candidates beginning there, the newest.
        let next = inside
            .iter()
            .filter(|c| c.begin >= at)
            .min_by(|a, b| a.begin.cmp(&b.begin).then(b.order().cmp(&a.order())));
        let Some(next) = next else {
            break;
        };
        parents.push(next.id);
        at = next.end;
    }
    parents
}

#[cfg(test)]
mod tests {
    use super::*;

    const END: &str = "ffffffffffffffffffffffffffffffff";

    /// A 32-digit key from its leading digits.
    fn key(prefix: &str) -> String {
        if prefix == "end" {
            END.to_owned()
        } else {
            format!("{prefix:0<32}")
        }
    }

    fn shard(id: i32, status: &str, begin: &str, end: &str, created: i64) -> ListedShard {
        ListedShard {
            id,
            status: status.to_owned(),
            begin: key(begin),
            end: key(end),
            created,
        }
    }

    fn open(id: i32, begin: &str, end: &str, created: i64) -> ListedShard {
        shard(id, "readwrite", begin, end, created)
    }

    fn closed(id: i32, begin: &str, end: &str, created: i64) -> ListedShard {
        shard(id, "readonly", begin, end, created)
    }

    /// Each shard's parents as ids, in the listing's order.
    fn parents_by_id(listed: &[ListedShard]) -> Vec<(i32, Vec<i32>)> {
        to_shards(listed)
            .unwrap()
            .iter()
            .map(|s| {
                let id = s.key.as_str().parse().unwrap();
                let parents = s.parents.iter().map(|p| p.as_str().parse().unwrap());
                (id, parents.collect())
            })
            .collect()
    }

    #[test]
    fn a_new_logstore_has_open_shards_without_parents() {
        let listed = [open(0, "0", "8", 100), open(1, "8", "end", 100)];
        let shards = to_shards(&listed).unwrap();
        assert!(shards.iter().all(|s| !s.closed && s.parents.is_empty()));
        assert_eq!(shards[0].key.as_str(), "0");
    }

    #[test]
    fn a_split_shard_is_closed_and_the_parent_of_both_halves() {
        let listed = [
            closed(0, "0", "8", 100),
            open(1, "8", "end", 100),
            open(2, "0", "4", 200),
            open(3, "4", "8", 200),
        ];
        assert_eq!(
            parents_by_id(&listed),
            [(0, vec![]), (1, vec![]), (2, vec![0]), (3, vec![0])]
        );
        assert!(to_shards(&listed).unwrap()[0].closed);
    }

    #[test]
    fn a_split_into_three_names_the_one_parent_of_each_part() {
        let listed = [
            closed(0, "0", "end", 100),
            open(1, "0", "5", 200),
            open(2, "5", "a", 200),
            open(3, "a", "end", 200),
        ];
        let parents = parents_by_id(&listed);
        assert!(parents[1..].iter().all(|(_, p)| p == &[0]));
    }

    #[test]
    fn a_merged_shard_has_both_closed_neighbours_as_parents() {
        let listed = [
            closed(0, "0", "8", 100),
            closed(1, "8", "end", 100),
            open(2, "0", "end", 200),
        ];
        assert_eq!(parents_by_id(&listed)[2], (2, vec![0, 1]));
    }

    #[test]
    fn split_then_merge_names_the_halves_not_the_older_shard_of_the_same_range() {
        // 0 splits into 1 and 2, which merge again into 3: 3 has 0's range.
        let listed = [
            closed(0, "0", "end", 100),
            closed(1, "0", "8", 200),
            closed(2, "8", "end", 200),
            open(3, "0", "end", 300),
        ];
        assert_eq!(
            parents_by_id(&listed),
            [(0, vec![]), (1, vec![0]), (2, vec![0]), (3, vec![1, 2])]
        );
    }

    #[test]
    fn merge_then_split_names_the_merged_shard_not_the_older_halves() {
        // 0 and 1 merge into 2, which splits again into 3 and 4, each with 0's or 1's range.
        let listed = [
            closed(0, "0", "8", 100),
            closed(1, "8", "end", 100),
            closed(2, "0", "end", 200),
            open(3, "0", "8", 300),
            open(4, "8", "end", 300),
        ];
        assert_eq!(
            parents_by_id(&listed)[2..],
            [(2, vec![0, 1]), (3, vec![2]), (4, vec![2])]
        );
    }

    #[test]
    fn a_nested_split_names_the_nearest_ancestor() {
        let listed = [
            closed(0, "0", "end", 100),
            closed(1, "0", "8", 200),
            open(2, "8", "end", 200),
            open(3, "0", "4", 300),
            open(4, "4", "8", 300),
        ];
        assert_eq!(parents_by_id(&listed)[3..], [(3, vec![1]), (4, vec![1])]);
    }

    #[test]
    fn a_merge_of_a_merged_half_names_the_newest_shard_at_each_key() {
        // 1 = [0, 8) was split into 3 and 4, merged back into 5; 5 and 2 merge into 6.
        let listed = [
            closed(0, "0", "end", 100),
            closed(1, "0", "8", 200),
            closed(2, "8", "end", 200),
            closed(3, "0", "4", 300),
            closed(4, "4", "8", 300),
            closed(5, "0", "8", 400),
            open(6, "0", "end", 500),
        ];
        assert_eq!(parents_by_id(&listed)[6], (6, vec![5, 2]));
    }

    #[test]
    fn children_of_expired_shards_have_no_parents() {
        // 0 split into 1 and 2, then expired: gone from the listing.
        let listed = [open(1, "0", "8", 200), open(2, "8", "end", 200)];
        assert_eq!(parents_by_id(&listed), [(1, vec![]), (2, vec![])]);
    }

    #[test]
    fn a_merged_shard_keeps_the_parent_still_listed_when_the_other_expired() {
        let listed = [closed(1, "8", "end", 100), open(2, "0", "end", 200)];
        assert_eq!(parents_by_id(&listed)[1], (2, vec![1]));
    }

    #[test]
    fn a_split_child_skips_an_older_ancestor_when_its_parent_is_listed() {
        // The grandparent 0 is still listed; only 1, the nearest, is named.
        let listed = [
            closed(0, "0", "end", 100),
            closed(1, "0", "8", 200),
            closed(2, "8", "end", 200),
            open(3, "0", "4", 300),
        ];
        assert_eq!(parents_by_id(&listed)[3], (3, vec![1]));
    }

    #[test]
    fn shards_created_in_the_same_second_are_ordered_by_id() {
        // A split and a merge of the halves within one second: the halves (ids 1 and 2)
        // come before the merged shard 3, and after the split shard 0.
        let listed = [
            closed(0, "0", "end", 100),
            closed(1, "0", "8", 100),
            closed(2, "8", "end", 100),
            open(3, "0", "end", 100),
        ];
        assert_eq!(
            parents_by_id(&listed),
            [(0, vec![]), (1, vec![0]), (2, vec![0]), (3, vec![1, 2])]
        );
    }

    #[test]
    fn open_shards_and_overlapping_strangers_are_never_parents() {
        let listed = [
            open(0, "0", "8", 100),   // open: not a parent of 2
            closed(1, "4", "c", 100), // overlaps 2 only in part
            open(2, "2", "6", 200),
        ];
        assert_eq!(parents_by_id(&listed)[2], (2, vec![]));
    }

    #[test]
    fn a_listing_it_cannot_read_fails_with_the_shard_named() {
        let mut bad_key = open(7, "0", "8", 100);
        bad_key.begin = "not-hex".into();
        let err = to_shards(&[bad_key]).unwrap_err().to_string();
        assert!(err.contains("shard 7") && err.contains("not-hex"), "{err}");

        let empty = open(8, "8", "8", 100);
        assert!(matches!(
            to_shards(&[empty]),
            Err(RangeError::EmptyRange { shard: 8, .. })
        ));

        let unknown = shard(9, "deleting", "0", "8", 100);
        assert!(matches!(
            to_shards(&[unknown]),
            Err(RangeError::UnknownStatus { shard: 9, .. })
        ));
    }

    #[test]
    fn keys_compare_as_numbers_and_short_keys_as_prefixes() {
        assert_eq!(parse_key(END), Some(u128::MAX));
        assert_eq!(parse_key("8"), parse_key(&key("8")));
        assert!(parse_key("7f") < parse_key("8"));
        assert_eq!(parse_key(&"0".repeat(33)), None);
        assert_eq!(parse_key(""), None);
        assert_eq!(parse_key("+1"), None);
    }
}
