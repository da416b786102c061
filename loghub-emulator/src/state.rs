//! The emulator's state, in memory: projects, their logstores, each logstore's shards with
//! their log groups in order, and its consumer groups ([`crate::groups`]). Plain data and plain
//! functions over it: the HTTP layer (the `server` module) only parses, locks and answers.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cursor::{self, Bases};
use crate::error::ApiError;
use crate::groups::ConsumerGroup;
use crate::keys;

/// The time of one request: wall-clock time for what clients see (`createTime`, receive times,
/// checkpoint `updateTime`), monotonic time for consumer heartbeats.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Microseconds since the Unix epoch.
    pub unix_micros: i64,
    /// The monotonic instant (tokio's, so that tests may pause it).
    pub instant: tokio::time::Instant,
}

impl Now {
    /// The current time.
    pub fn current() -> Self {
        let unix_micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        Now {
            unix_micros,
            instant: tokio::time::Instant::now(),
        }
    }

    /// Seconds since the Unix epoch.
    pub fn unix_secs(&self) -> i64 {
        self.unix_micros / 1_000_000
    }
}

/// Every project, and the cursor bases of their shards.
#[derive(Debug, Default)]
pub struct Store {
    /// Projects by name.
    pub projects: BTreeMap<String, Project>,
    /// Where the next shard's cursor base comes from.
    pub bases: Bases,
}

/// A project.
#[derive(Debug)]
pub struct Project {
    /// Its description.
    pub description: String,
    /// `createTime`, in seconds.
    pub created: i64,
    /// Logstores by name.
    pub logstores: BTreeMap<String, Logstore>,
}

/// A logstore.
#[derive(Debug)]
pub struct Logstore {
    /// The retention in days (kept and reported; data does not expire here).
    pub ttl: i32,
    /// `createTime`, in seconds.
    pub created: i64,
    /// `lastModifyTime`, in seconds.
    pub modified: i64,
    /// Every shard, readonly ones included, by increasing id.
    pub shards: Vec<Shard>,
    /// The id the next shard gets.
    pub next_shard_id: i32,
    /// The round-robin turn of the next load-balanced PutLogs.
    pub next_lb: usize,
    /// Consumer groups by name.
    pub consumer_groups: BTreeMap<String, ConsumerGroup>,
}

/// A shard's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Takes writes.
    #[serde(rename = "readwrite")]
    ReadWrite,
    /// Split or merged: readable to its end, no more writes.
    #[serde(rename = "readonly")]
    ReadOnly,
}

/// A shard.
#[derive(Debug)]
pub struct Shard {
    /// `shardID`.
    pub id: i32,
    /// `status`.
    pub status: Status,
    /// `inclusiveBeginKey`.
    pub begin: u128,
    /// `exclusiveEndKey`.
    pub end: u128,
    /// `createTime`, in seconds.
    pub created: i64,
    /// The shards it was split or merged from (none for a shard the logstore was created with).
    pub parents: Vec<i32>,
    /// The position of its first log group (see [`crate::cursor`]).
    pub cursor_base: u64,
    /// Its log groups, oldest first.
    pub groups: Vec<StoredGroup>,
}

/// One log group as written.
#[derive(Debug)]
pub struct StoredGroup {
    /// The `LogGroup` protobuf, as the client sent it (decompressed).
    pub bytes: Vec<u8>,
    /// When it arrived, in seconds.
    pub received: i64,
}

/// A shard as ListShards, SplitShard and MergeShards describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardView {
    /// `shardID`.
    #[serde(rename = "shardID")]
    pub id: i32,
    /// `status`.
    pub status: Status,
    /// `inclusiveBeginKey`.
    #[serde(rename = "inclusiveBeginKey")]
    pub begin: String,
    /// `exclusiveEndKey`.
    #[serde(rename = "exclusiveEndKey")]
    pub end: String,
    /// `createTime`.
    #[serde(rename = "createTime")]
    pub created: i64,
}

/// GetCursor's `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The first log group kept.
    Begin,
    /// After the last log group: where the next write goes.
    End,
    /// The first log group received at or after this time (seconds); the end if none.
    Time(i64),
}

/// What one PullLogs reads.
#[derive(Debug)]
pub struct Pulled<'a> {
    /// The log groups, in order.
    pub groups: Vec<&'a [u8]>,
    /// The cursor after them (the given cursor when none is left).
    pub next_cursor: String,
}

impl Shard {
    /// The shard as ListShards describes it.
    pub fn view(&self) -> ShardView {
        ShardView {
            id: self.id,
            status: self.status,
            begin: keys::format_key(self.begin),
            end: keys::format_key(self.end),
            created: self.created,
        }
    }

    /// The cursor before log group `index` (`groups.len()` is the end).
    pub fn cursor_at(&self, index: usize) -> String {
        cursor::encode(self.cursor_base + index as u64)
    }

    /// The end cursor.
    pub fn end_cursor(&self) -> String {
        self.cursor_at(self.groups.len())
    }

    /// The index a cursor of this shard names, or InvalidCursor.
    pub fn index_of(&self, cursor: &str) -> Result<usize, ApiError> {
        cursor::decode(cursor)
            .and_then(|p| p.checked_sub(self.cursor_base))
            .filter(|&i| i <= self.groups.len() as u64)
            .map(|i| i as usize)
            .ok_or_else(|| ApiError::invalid_cursor(cursor))
    }

    /// GetCursor.
    pub fn cursor_from(&self, from: From) -> String {
        match from {
            From::Begin => self.cursor_at(0),
            From::End => self.end_cursor(),
            From::Time(t) => {
                let index = self.groups.partition_point(|g| g.received < t);
                self.cursor_at(index)
            }
        }
    }

    /// PullLogs: up to `count` log groups from `cursor`, stopping at `end_cursor` if given.
    /// At the end of the data the next cursor is the cursor given and no group comes back.
    pub fn pull(
        &self,
        cursor: &str,
        count: usize,
        end_cursor: Option<&str>,
    ) -> Result<Pulled<'_>, ApiError> {
        let start = self.index_of(cursor)?;
        let stop = match end_cursor {
            Some(end) => self.index_of(end)?,
            None => self.groups.len(),
        };
        let upto = start.saturating_add(count).min(stop).max(start);
        Ok(Pulled {
            groups: self.groups[start..upto]
                .iter()
                .map(|g| g.bytes.as_slice())
                .collect(),
            next_cursor: if upto == start {
                cursor.to_string()
            } else {
                self.cursor_at(upto)
            },
        })
    }
}

impl Logstore {
    /// A logstore of `shard_count` readwrite shards tiling the key space evenly.
    pub fn new(shard_count: u32, ttl: i32, now: Now, bases: &mut Bases) -> Self {
        let shards = keys::even_ranges(shard_count)
            .into_iter()
            .enumerate()
            .map(|(i, (begin, end))| Shard {
                id: i as i32,
                status: Status::ReadWrite,
                begin,
                end,
                created: now.unix_secs(),
                parents: Vec::new(),
                cursor_base: bases.next(now.unix_micros),
                groups: Vec::new(),
            })
            .collect();
        Logstore {
            ttl,
            created: now.unix_secs(),
            modified: now.unix_secs(),
            shards,
            next_shard_id: shard_count as i32,
            next_lb: 0,
            consumer_groups: BTreeMap::new(),
        }
    }

    /// The shard of this id, or ShardNotExist.
    pub fn shard(&self, id: i64) -> Result<&Shard, ApiError> {
        self.shards
            .iter()
            .find(|s| i64::from(s.id) == id)
            .ok_or_else(|| ApiError::shard_not_exist(id))
    }

    /// How many shards are readwrite (GetLogStore's `shardCount`).
    pub fn readwrite_count(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| s.status == Status::ReadWrite)
            .count()
    }

    fn readwrite_index(&self, id: i64) -> Result<usize, ApiError> {
        // The reference answers a split or merge of a shard it cannot use with ParameterInvalid.
        let index = self
            .shards
            .iter()
            .position(|s| i64::from(s.id) == id)
            .ok_or_else(|| ApiError::parameter_invalid("invalid shard id"))?;
        if self.shards[index].status != Status::ReadWrite {
            return Err(ApiError::parameter_invalid(format!(
                "shard {id} is not readwrite"
            )));
        }
        Ok(index)
    }

    fn add_child(
        &mut self,
        begin: u128,
        end: u128,
        parents: Vec<i32>,
        now: Now,
        bases: &mut Bases,
    ) -> ShardView {
        let shard = Shard {
            id: self.next_shard_id,
            status: Status::ReadWrite,
            begin,
            end,
            created: now.unix_secs(),
            parents,
            cursor_base: bases.next(now.unix_micros),
            groups: Vec::new(),
        };
        self.next_shard_id += 1;
        let view = shard.view();
        self.shards.push(shard);
        view
    }

    /// SplitShard: the readwrite shard `id` turns readonly and new readwrite shards tile its
    /// range, cut at `key` (two children) or evenly into `shard_count` (default 2). The answer
    /// is the parent, then the children, as the reference shows.
    pub fn split(
        &mut self,
        id: i64,
        key: Option<u128>,
        shard_count: Option<u32>,
        now: Now,
        bases: &mut Bases,
    ) -> Result<Vec<ShardView>, ApiError> {
        let index = self.readwrite_index(id)?;
        let (begin, end) = (self.shards[index].begin, self.shards[index].end);
        let ranges = match (key, shard_count) {
            (Some(key), None | Some(2)) => {
                if key <= begin || key >= end {
                    return Err(ApiError::parameter_invalid("invalid mid hash"));
                }
                vec![(begin, key), (key, end)]
            }
            (Some(_), Some(_)) => {
                return Err(ApiError::parameter_invalid(
                    "a split key makes two shards, not shardCount",
                ))
            }
            (None, count) => {
                let count = count.unwrap_or(2);
                if !(2..=64).contains(&count) {
                    return Err(ApiError::parameter_invalid("shardCount must be 2 to 64"));
                }
                let ranges = keys::split_evenly(begin, end, count);
                if ranges.iter().any(|(b, e)| b >= e) {
                    return Err(ApiError::parameter_invalid(
                        "the shard's range is too narrow to split",
                    ));
                }
                ranges
            }
        };
        self.shards[index].status = Status::ReadOnly;
        self.modified = now.unix_secs();
        let parent = self.shards[index].id;
        let mut answer = vec![self.shards[index].view()];
        for (b, e) in ranges {
            answer.push(self.add_child(b, e, vec![parent], now, bases));
        }
        Ok(answer)
    }

    /// MergeShards: the readwrite shard `id` and its right neighbour (the readwrite shard that
    /// begins where it ends) turn readonly and one readwrite shard covers both. The answer is
    /// the new shard, then the two merged, as the reference shows.
    pub fn merge(
        &mut self,
        id: i64,
        now: Now,
        bases: &mut Bases,
    ) -> Result<Vec<ShardView>, ApiError> {
        let left = self.readwrite_index(id)?;
        let right = self
            .shards
            .iter()
            .position(|s| s.status == Status::ReadWrite && s.begin == self.shards[left].end)
            .ok_or_else(|| {
                ApiError::parameter_invalid(format!(
                    "shard {id} has no readwrite shard on its right"
                ))
            })?;
        for i in [left, right] {
            self.shards[i].status = Status::ReadOnly;
        }
        self.modified = now.unix_secs();
        let (begin, end) = (self.shards[left].begin, self.shards[right].end);
        let parents = vec![self.shards[left].id, self.shards[right].id];
        let child = self.add_child(begin, end, parents, now, bases);
        Ok(vec![
            child,
            self.shards[left].view(),
            self.shards[right].view(),
        ])
    }

    /// PutLogs: the log group goes to the readwrite shard whose range holds `key`, or, without
    /// a key, to the readwrite shards in turn. A readonly shard never takes a write: LogHub's
    /// write calls name a key, never a shard, and the readwrite shards tile the key space, so a
    /// key in a readonly shard's range lands in the shard that replaced it. Returns its id.
    pub fn put(&mut self, key: Option<u128>, bytes: Vec<u8>, now: Now) -> Result<i32, ApiError> {
        let writable: Vec<usize> = (0..self.shards.len())
            .filter(|&i| self.shards[i].status == Status::ReadWrite)
            .collect();
        let index = match key {
            Some(key) => writable
                .iter()
                .copied()
                .find(|&i| keys::contains(self.shards[i].begin, self.shards[i].end, key)),
            None => {
                let turn = self.next_lb;
                self.next_lb = self.next_lb.wrapping_add(1);
                (!writable.is_empty()).then(|| writable[turn % writable.len()])
            }
        }
        // Unreachable through split and merge, which keep the key space tiled; said plainly
        // rather than assumed.
        .ok_or_else(|| {
            ApiError::new(
                500,
                "InternalServerError",
                "no readwrite shard holds the key",
            )
        })?;
        let shard = &mut self.shards[index];
        shard.groups.push(StoredGroup {
            bytes,
            received: now.unix_secs(),
        });
        Ok(shard.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(secs: i64) -> Now {
        Now {
            unix_micros: secs * 1_000_000,
            instant: tokio::time::Instant::now(),
        }
    }

    fn logstore(shards: u32) -> (Logstore, Bases) {
        let mut bases = Bases::default();
        (Logstore::new(shards, 7, now(100), &mut bases), bases)
    }

    #[test]
    fn a_split_turns_the_parent_readonly_and_its_children_tile_its_range() {
        let (mut ls, mut bases) = logstore(2);
        let answer = ls
            .split(0, keys::parse_key("4"), None, now(200), &mut bases)
            .unwrap();
        let ids: Vec<_> = answer.iter().map(|v| (v.id, v.status, v.created)).collect();
        assert_eq!(
            ids,
            [
                (0, Status::ReadOnly, 100),
                (2, Status::ReadWrite, 200),
                (3, Status::ReadWrite, 200)
            ]
        );
        assert_eq!(answer[1].begin, answer[0].begin);
        assert_eq!(answer[1].end, "40000000000000000000000000000000");
        assert_eq!(answer[2].begin, answer[1].end);
        assert_eq!(answer[2].end, answer[0].end);
        assert_eq!(ls.readwrite_count(), 3);
        assert_eq!(
            ls.split(0, None, None, now(200), &mut bases)
                .unwrap_err()
                .code,
            "ParameterInvalid"
        );
        assert_eq!(
            ls.split(1, keys::parse_key("4"), None, now(200), &mut bases)
                .unwrap_err()
                .message,
            "invalid mid hash"
        );
    }

    #[test]
    fn a_merge_takes_the_right_neighbour() {
        let (mut ls, mut bases) = logstore(3);
        let answer = ls.merge(1, now(300), &mut bases).unwrap();
        assert_eq!(answer[0].id, 3);
        assert_eq!((answer[1].id, answer[2].id), (1, 2));
        assert_eq!(answer[0].begin, answer[1].begin);
        assert_eq!(answer[0].end, "ffffffffffffffffffffffffffffffff");
        assert!(answer[1..].iter().all(|v| v.status == Status::ReadOnly));
        assert_eq!(ls.shards[3].parents, vec![1, 2]);
        // The last readwrite shard has no right neighbour.
        assert!(ls.merge(3, now(300), &mut bases).is_err());
    }

    #[test]
    fn writes_never_land_in_a_readonly_shard() {
        let (mut ls, mut bases) = logstore(1);
        ls.split(0, None, None, now(200), &mut bases).unwrap();
        for turn in 0..4 {
            assert_ne!(ls.put(None, vec![turn], now(201)).unwrap(), 0);
        }
        assert_eq!(ls.put(keys::parse_key("1"), vec![9], now(201)).unwrap(), 1);
        assert_eq!(ls.put(Some(keys::MAX_KEY), vec![9], now(201)).unwrap(), 2);
        assert!(ls.shards[0].groups.is_empty());
    }

    #[test]
    fn a_pull_at_the_end_hands_back_its_cursor_and_bad_cursors_are_refused() {
        let (mut ls, mut bases) = logstore(1);
        for t in 0..3 {
            ls.put(None, vec![t], now(1000 + i64::from(t))).unwrap();
        }
        let other = Logstore::new(1, 1, now(100), &mut bases);
        let shard = &ls.shards[0];
        let begin = shard.cursor_from(From::Begin);
        let first = shard.pull(&begin, 2, None).unwrap();
        assert_eq!(first.groups, vec![&[0u8][..], &[1u8][..]]);
        let rest = shard.pull(&first.next_cursor, 100, None).unwrap();
        assert_eq!(rest.groups.len(), 1);
        assert_eq!(rest.next_cursor, shard.end_cursor());
        let end = shard.pull(&rest.next_cursor, 100, None).unwrap();
        assert!(end.groups.is_empty());
        assert_eq!(end.next_cursor, rest.next_cursor);
        let bounded = shard.pull(&begin, 100, Some(&first.next_cursor)).unwrap();
        assert_eq!(bounded.groups.len(), 2);
        assert_eq!(shard.cursor_from(From::Time(1001)), shard.cursor_at(1));
        assert_eq!(shard.cursor_from(From::Time(5000)), shard.end_cursor());
        let foreign = other.shards[0].cursor_from(From::Begin);
        assert_eq!(
            shard.pull(&foreign, 1, None).unwrap_err().code,
            "InvalidCursor"
        );
        assert_eq!(
            shard.pull("bm9wZQ==", 1, None).unwrap_err().code,
            "InvalidCursor"
        );
    }
}
