//! A fast hasher for the maps a taker round builds over every lease and member of a scan.
//!
//! A round looks each lease's owner and key up in a few maps; at 100,000 leases the standard
//! library's SipHash was a tenth of a round's work (a profile of the simulator at 300 workers
//! x 30,000 leases). Its resistance to chosen collisions buys nothing here: the keys are lease
//! keys and worker ids from the application's own table. This hasher mixes eight bytes at a
//! time and finishes with a full avalanche, so the low bits a table indexes by depend on every
//! byte of the key.
//!
//! Nothing may depend on the iteration order of these maps (it differs from the standard
//! maps'): every decision sorts what it iterates, as it had to with the randomly seeded ones.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// An odd constant with well spread bits (the golden ratio's fraction, times 2^64).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// See the module's documentation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(23) ^ word).wrapping_mul(MIX);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let word = rest
                .iter()
                .rev()
                .fold(0u64, |word, byte| (word << 8) | u64::from(*byte));
            // The length tells "ab" from "ab\0".
            self.add(word ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // MurmurHash3's 64-bit finaliser: every input bit reaches every output bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};

    fn hash(value: impl Hash) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(value)
    }

    #[test]
    fn keys_that_differ_only_in_their_last_bytes_spread_over_the_low_bits() {
        // Shard ids share long prefixes; a table of 2^k buckets indexes by the low k bits.
        let buckets: HashSet<u64> = (0..4096)
            .map(|i| hash(format!("shardId-{i:012}")) & 0xfff)
            .collect();
        // 4,096 keys into 4,096 buckets at random fill about 63 % of them.
        assert!(buckets.len() > 2400, "{} buckets of 4096", buckets.len());
    }

    #[test]
    fn trailing_zero_bytes_and_lengths_are_told_apart() {
        assert_ne!(hash(b"ab".as_slice()), hash(b"ab\0".as_slice()));
        assert_ne!(hash("abcdefgh"), hash("abcdefgh\0"));
        assert_ne!(hash(""), hash("\0"));
        assert_eq!(hash("shard-1"), hash("shard-1"));
    }

    #[test]
    fn maps_work_as_the_standard_ones() {
        let mut map: FastMap<String, usize> = FastMap::default();
        for i in 0..1000 {
            map.insert(format!("k{i}"), i);
        }
        assert_eq!(map.len(), 1000);
        assert!((0..1000).all(|i| map[&format!("k{i}")] == i));
    }
}
