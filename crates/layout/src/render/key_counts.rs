//! Reference counts by element key, for one shared set.
//!
//! A set's keys all have its key type's length; when that is 8 bytes or less (IPv4 ClusterIPs
//! and IPv4 hairpin pairs: nearly every shared element of a large cluster) the key is held as
//! a `u64`, an entry of 16 bytes where a [`Blob`] entry is 40. While a whole table is rendered
//! every shared key is counted once (a million hairpin pairs at 100k Services), so this also
//! shrinks the render's transient peak.

use crate::FastMap;
use verdict_nft::ruleset::Blob;

/// Counts by key; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct KeyCounts {
    /// The length of the keys held in `short` (set by the first key of 8 bytes or less).
    short_len: Option<u8>,
    short: FastMap<u64, u32>,
    /// Keys of any other length.
    long: FastMap<Blob, u32>,
}

enum Key {
    Short(u64),
    Long(Blob),
}

impl KeyCounts {
    fn key(&mut self, key: &Blob) -> Key {
        let bytes = key.as_slice();
        if bytes.len() > 8 {
            return Key::Long(*key);
        }
        match self.short_len {
            Some(len) if usize::from(len) != bytes.len() => Key::Long(*key),
            _ => {
                self.short_len = Some(bytes.len() as u8);
                Key::Short(pack(bytes))
            }
        }
    }

    fn lookup(&self, key: &Blob) -> Key {
        let bytes = key.as_slice();
        match self.short_len {
            Some(len) if usize::from(len) == bytes.len() => Key::Short(pack(bytes)),
            _ => Key::Long(*key),
        }
    }

    /// The count of `key`, made `start` if there was none.
    pub fn entry(&mut self, key: &Blob, start: u32) -> &mut u32 {
        match self.key(key) {
            Key::Short(k) => self.short.entry(k).or_insert(start),
            Key::Long(k) => self.long.entry(k).or_insert(start),
        }
    }

    /// The count of `key`, if it has one.
    pub fn get_mut(&mut self, key: &Blob) -> Option<&mut u32> {
        match self.lookup(key) {
            Key::Short(k) => self.short.get_mut(&k),
            Key::Long(k) => self.long.get_mut(&k),
        }
    }

    /// Forgets `key`'s count.
    pub fn remove(&mut self, key: &Blob) {
        match self.lookup(key) {
            Key::Short(k) => self.short.remove(&k),
            Key::Long(k) => self.long.remove(&k),
        };
    }

    /// Keeps the counts `keep` says yes to, and gives back the room the others took.
    pub fn retain_and_shrink(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.short.retain(|_, n| keep(*n));
        self.long.retain(|_, n| keep(*n));
        self.short.shrink_to_fit();
        self.long.shrink_to_fit();
    }

    /// How many keys have a count.
    pub fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    /// (key, count), in no order.
    pub fn iter(&self) -> impl Iterator<Item = (Blob, u32)> + '_ {
        let len = usize::from(self.short_len.unwrap_or(0));
        let short = self.short.iter().map(move |(k, n)| (Blob::new(&k.to_le_bytes()[..len]), *n));
        short.chain(self.long.iter().map(|(k, n)| (*k, *n)))
    }

    /// Adds `other`'s counts to these.
    pub fn absorb(&mut self, other: KeyCounts) {
        for (key, n) in other.iter() {
            *self.entry(&key, 0) += n;
        }
    }
}

/// Equal when every key has the same count, however the keys are held.
impl PartialEq for KeyCounts {
    fn eq(&self, other: &KeyCounts) -> bool {
        self.len() == other.len()
            && self.iter().all(|(k, n)| {
                let found = match other.lookup(&k) {
                    Key::Short(s) => other.short.get(&s),
                    Key::Long(l) => other.long.get(&l),
                };
                found == Some(&n)
            })
    }
}

fn pack(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Keys of the set's own length and of others (a four-byte key with trailing zeros and a
    /// longer one with the same first bytes must stay apart), counted up and down, against a
    /// plain map.
    #[test]
    fn counts_equal_a_plain_map_whatever_the_key_lengths() {
        let keys: Vec<Blob> = vec![
            Blob::new(&[10, 0, 0, 1]),
            Blob::new(&[10, 0, 0, 0]),
            Blob::new(&[10, 0, 0]),
            Blob::new(&[10, 0, 0, 1, 0, 0, 0, 0]),
            Blob::new(&[10, 0, 0, 1, 10, 0, 0, 1]),
            Blob::new(&[0; 16]),
            Blob::new(&[1; 32]),
            Blob::new(&[]),
        ];
        let mut counts = KeyCounts::default();
        let mut plain: BTreeMap<Blob, u32> = BTreeMap::new();
        let mut seed = 7u64;
        for step in 0..4000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = keys[(seed >> 33) as usize % keys.len()];
            match (seed >> 20) % 3 {
                0 | 1 => {
                    *counts.entry(&key, 1) += 1;
                    *plain.entry(key).or_insert(1) += 1;
                }
                _ => {
                    let n = counts.get_mut(&key).map(|n| {
                        *n -= 1;
                        *n
                    });
                    assert_eq!(
                        n,
                        plain.get_mut(&key).map(|n| {
                            *n -= 1;
                            *n
                        })
                    );
                    if n.is_some_and(|n| n <= 1) {
                        counts.remove(&key);
                        plain.remove(&key);
                    }
                }
            }
            let held: BTreeMap<Blob, u32> = counts.iter().collect();
            assert_eq!(held, plain, "step {step}");
        }
        assert!(!counts.short.is_empty() && !counts.long.is_empty(), "both kinds of key were held");
    }

    #[test]
    fn equal_counts_compare_equal_however_held() {
        let (four, eight) = (Blob::new(&[1, 2, 3, 4]), Blob::new(&[1, 2, 3, 4, 5, 6, 7, 8]));
        let mut a = KeyCounts::default();
        *a.entry(&four, 0) += 2;
        *a.entry(&eight, 0) += 3;
        let mut b = KeyCounts::default();
        *b.entry(&eight, 0) += 3;
        *b.entry(&four, 0) += 2;
        assert_eq!(a, b, "the first key decides which length is held short");
        *b.entry(&four, 0) += 1;
        assert_ne!(a, b);

        let mut merged = KeyCounts::default();
        *merged.entry(&eight, 0) += 1;
        merged.absorb(a);
        assert_eq!(merged.iter().collect::<BTreeMap<_, _>>(), BTreeMap::from([(four, 2), (eight, 4)]));
    }
}
