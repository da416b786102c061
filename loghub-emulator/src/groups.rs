//! Consumer groups: their consumers (alive while they heartbeat within the group's timeout),
//! which consumer each shard is assigned to, and the checkpoint of each shard.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::error::ApiError;
use crate::state::{Logstore, Now, Status};

/// A consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    /// Seconds without a heartbeat after which a consumer leaves the group.
    pub timeout: i32,
    /// Whether a shard's children wait until it is consumed to its end.
    pub order: bool,
    /// Live consumers and their last heartbeat.
    pub consumers: BTreeMap<String, tokio::time::Instant>,
    /// The consumer each shard is assigned to.
    pub assignment: BTreeMap<i32, String>,
    /// The checkpoint of each shard.
    pub checkpoints: BTreeMap<i32, Checkpoint>,
}

/// A shard's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The cursor written.
    pub cursor: String,
    /// When, in microseconds since the epoch.
    pub updated_micros: i64,
    /// The consumer that wrote it.
    pub consumer: String,
}

/// A checkpoint as GetCheckPoint answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointView {
    /// `shard`.
    pub shard: i32,
    /// `checkpoint` (empty for a shard never checkpointed).
    pub checkpoint: String,
    /// `updateTime`. The reference's text says seconds, its example (1524224984800922) is
    /// microseconds; microseconds here, as the example.
    #[serde(rename = "updateTime")]
    pub update_time: i64,
    /// `consumer`.
    pub consumer: String,
}

impl ConsumerGroup {
    /// A group with no consumer and no checkpoint.
    pub fn new(timeout: i32, order: bool) -> Self {
        ConsumerGroup {
            timeout,
            order,
            consumers: BTreeMap::new(),
            assignment: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
        }
    }

    /// Removes the consumers silent for longer than the timeout, and their assignments.
    pub fn expire(&mut self, now: Now) {
        let timeout = Duration::from_secs(self.timeout.max(0) as u64);
        self.consumers
            .retain(|_, last| now.instant.saturating_duration_since(*last) <= timeout);
        let consumers = &self.consumers;
        self.assignment.retain(|_, c| consumers.contains_key(c));
    }

    /// ConsumerGroupHeartBeat: keeps `consumer` alive (a consumer not in the group joins, unless
    /// it claims shards: the reference's NotExistConsumerWithBody), reassigns the shards and
    /// answers the ones `consumer` should hold.
    pub fn heartbeat(
        &mut self,
        logstore: &Logstore,
        consumer: &str,
        held: &[i32],
        now: Now,
    ) -> Result<Vec<i32>, ApiError> {
        self.expire(now);
        if !self.consumers.contains_key(consumer) && !held.is_empty() {
            return Err(ApiError::new(
                400,
                "NotExistConsumerWithBody",
                "non-exist consumer with non-empty body of heartbeat message",
            ));
        }
        self.consumers.insert(consumer.to_string(), now.instant);
        let shards = self.assignable(logstore);
        let consumers: Vec<String> = self.consumers.keys().cloned().collect();
        self.assignment = assign(&shards, &consumers, &self.assignment);
        Ok(self
            .assignment
            .iter()
            .filter(|(_, c)| c.as_str() == consumer)
            .map(|(s, _)| *s)
            .collect())
    }

    /// Whether a shard is done: readonly and checkpointed at its end.
    fn finished(&self, logstore: &Logstore, id: i32) -> bool {
        logstore.shard(i64::from(id)).is_ok_and(|s| {
            s.status == Status::ReadOnly
                && self
                    .checkpoints
                    .get(&id)
                    .is_some_and(|c| c.cursor == s.end_cursor())
        })
    }

    /// The shards to hand out: every shard not finished and, in an ordered group, whose parents
    /// are all finished (or gone).
    pub fn assignable(&self, logstore: &Logstore) -> Vec<i32> {
        logstore
            .shards
            .iter()
            .filter(|s| !self.finished(logstore, s.id))
            .filter(|s| {
                !self.order
                    || s.parents.iter().all(|&p| {
                        logstore.shard(i64::from(p)).is_err() || self.finished(logstore, p)
                    })
            })
            .map(|s| s.id)
            .collect()
    }

    /// ConsumerGroupUpdateCheckPoint: with `force`, written whoever holds the shard; without,
    /// only by the consumer the shard is assigned to.
    pub fn update_checkpoint(
        &mut self,
        logstore: &Logstore,
        consumer: &str,
        shard: i32,
        cursor: String,
        force: bool,
        now: Now,
    ) -> Result<(), ApiError> {
        logstore.shard(i64::from(shard))?;
        self.expire(now);
        if !force {
            if !self.consumers.contains_key(consumer) {
                return Err(ApiError::consumer_not_exist(consumer));
            }
            if self.assignment.get(&shard).map(String::as_str) != Some(consumer) {
                return Err(ApiError::consumer_not_match(consumer, shard));
            }
        }
        self.checkpoints.insert(
            shard,
            Checkpoint {
                cursor,
                updated_micros: now.unix_micros,
                consumer: consumer.to_string(),
            },
        );
        Ok(())
    }

    /// GetCheckPoint: every shard of the logstore, or only `shard` (none if it does not exist,
    /// as the reference says).
    pub fn checkpoints(&self, logstore: &Logstore, shard: Option<i32>) -> Vec<CheckpointView> {
        logstore
            .shards
            .iter()
            .filter(|s| shard.is_none_or(|id| id == s.id))
            .map(|s| match self.checkpoints.get(&s.id) {
                Some(c) => CheckpointView {
                    shard: s.id,
                    checkpoint: c.cursor.clone(),
                    update_time: c.updated_micros,
                    consumer: c.consumer.clone(),
                },
                None => CheckpointView {
                    shard: s.id,
                    checkpoint: String::new(),
                    update_time: 0,
                    consumer: String::new(),
                },
            })
            .collect()
    }
}

/// An even assignment of `shards` to `consumers` that moves as few shards as it can: every
/// consumer gets `shards / consumers` shards, the first `shards % consumers` of them (those
/// holding most now, then by name) one more; a consumer keeps what it holds up to its share
/// (lowest ids first) and the rest go, lowest id first, to the consumer furthest below its
/// share.
pub fn assign(
    shards: &[i32],
    consumers: &[String],
    current: &BTreeMap<i32, String>,
) -> BTreeMap<i32, String> {
    let mut result = BTreeMap::new();
    if consumers.is_empty() {
        return result;
    }
    let held = |c: &String| shards.iter().filter(|s| current.get(s) == Some(c)).count();
    let mut order: Vec<&String> = consumers.iter().collect();
    order.sort_by(|a, b| held(b).cmp(&held(a)).then(a.cmp(b)));
    let (base, extra) = (
        shards.len() / consumers.len(),
        shards.len() % consumers.len(),
    );
    let mut share: BTreeMap<&String, usize> = order
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, base + usize::from(i < extra)))
        .collect();
    let mut free = Vec::new();
    for &shard in shards {
        match current
            .get(&shard)
            .and_then(|c| share.get_mut(c).map(|left| (c, left)))
        {
            Some((c, left)) if *left > 0 => {
                *left -= 1;
                result.insert(shard, c.clone());
            }
            _ => free.push(shard),
        }
    }
    for shard in free {
        let (c, left) = share
            .iter_mut()
            .max_by(|a, b| (*a.1).cmp(&*b.1).then(b.0.cmp(a.0)))
            .expect("consumers is not empty");
        *left -= 1;
        result.insert(shard, (*c).clone());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn counts(assignment: &BTreeMap<i32, String>) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for c in assignment.values() {
            *counts.entry(c.clone()).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn an_assignment_is_even_and_keeps_what_it_can() {
        let shards = [0, 1, 2, 3];
        let first = assign(&shards, &names(&["a"]), &BTreeMap::new());
        assert_eq!(counts(&first)["a"], 4);
        let second = assign(&shards, &names(&["a", "b", "c"]), &first);
        let c = counts(&second);
        assert_eq!((c["a"], c["b"], c["c"]), (2, 1, 1));
        assert_eq!((second[&0].as_str(), second[&1].as_str()), ("a", "a"));
        // b and c held one each: the extra shard stays with a, nothing else moves.
        assert_eq!(assign(&shards, &names(&["a", "b", "c"]), &second), second);
        assert!(assign(&shards, &[], &second).is_empty());
    }

    #[test]
    fn a_consumer_that_left_gives_its_shards_to_the_others() {
        let shards = [0, 1, 2, 3, 4, 5];
        let three = assign(&shards, &names(&["a", "b", "c"]), &BTreeMap::new());
        assert!(counts(&three).values().all(|&n| n == 2));
        let two = assign(&shards, &names(&["a", "c"]), &three);
        assert!(counts(&two).values().all(|&n| n == 3));
        for (s, c) in &three {
            if c != "b" {
                assert_eq!(&two[s], c, "shard {s} moved");
            }
        }
    }
}
