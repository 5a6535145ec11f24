//! A fast hasher for the maps the renderer and the desired table consult once per element (a
//! million times in a cold sync at 100k Services): keys are our own set names and element
//! bytes, never chosen by an attacker, so SipHash's flooding resistance buys nothing there
//! and cost a tenth of a render. FxHash's scheme (rustc's): a rotate, a xor and a multiply
//! per word, and a finalizer once per key.

use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FxHasher`].
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// FxHash over 64-bit words.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
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

    /// The words only carry entropy upwards (a multiply), and the table picks buckets by the
    /// low bits: splitmix64's finalizer folds the high bits down.
    fn finish(&self) -> u64 {
        let mut z = self.hash;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash<T: Hash>(t: &T) -> u64 {
        let mut h = FxHasher::default();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn spreads_nearby_keys() {
        let keys: Vec<[u8; 16]> = (0..10_000u32)
            .map(|i| {
                let mut k = [0u8; 16];
                k[..4].copy_from_slice(&[172, 30, (i >> 8) as u8, i as u8]);
                k
            })
            .collect();
        let hashes: std::collections::HashSet<u64> = keys.iter().map(hash).collect();
        assert_eq!(hashes.len(), keys.len());
        // The low bits pick the bucket: they must differ too.
        let low: std::collections::HashSet<u64> = keys.iter().map(|k| hash(k) & 0xffff).collect();
        assert!(low.len() > 8_000, "{} distinct low halves of 10,000", low.len());
        assert_ne!(hash(&"endpoints-1"), hash(&"endpoints-2"));
    }
}
