//! The elements of one set or map, kept as compactly as their kind allows.
//!
//! At 10^6 elements the container is most of the agent's memory. Half of a large table's
//! elements carry nothing but a key (the `hairpin` and `cluster-ips` sets): kept as
//! [`Elem`]s they cost 89 bytes each, as bare keys 33. An [`ElementMap`] therefore holds keys
//! alone until an element with data or a comment arrives, and behaves as a sorted map either
//! way.

use crate::ruleset::{Blob, Elem};
use std::collections::{BTreeMap, BTreeSet, btree_map, btree_set};

/// The element every plain-set key stands for.
static PLAIN: Elem = Elem { data: None, comment: None };

/// Elements by key, sorted by key.
#[derive(Clone, Eq)]
pub enum ElementMap {
    /// Every element is plain (no data, no comment).
    Keys(BTreeSet<Blob>),
    /// Some element carries data or a comment.
    Full(BTreeMap<Blob, Elem>),
}

impl Default for ElementMap {
    fn default() -> ElementMap {
        ElementMap::Keys(BTreeSet::new())
    }
}

fn is_plain(elem: &Elem) -> bool {
    elem.data.is_none() && elem.comment.is_none()
}

impl ElementMap {
    /// No elements.
    pub fn new() -> ElementMap {
        ElementMap::default()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ElementMap::Keys(keys) => keys.len(),
            ElementMap::Full(map) => map.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element under `key`.
    pub fn get(&self, key: &Blob) -> Option<&Elem> {
        match self {
            ElementMap::Keys(keys) => keys.contains(key).then_some(&PLAIN),
            ElementMap::Full(map) => map.get(key),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &Blob) -> bool {
        match self {
            ElementMap::Keys(keys) => keys.contains(key),
            ElementMap::Full(map) => map.contains_key(key),
        }
    }

    /// Sets `key` to `elem`, returning what it was.
    pub fn insert(&mut self, key: Blob, elem: Elem) -> Option<Elem> {
        if let ElementMap::Keys(keys) = self {
            if is_plain(&elem) {
                return (!keys.insert(key)).then(Elem::plain);
            }
            let full = std::mem::take(keys).into_iter().map(|k| (k, Elem::plain())).collect();
            *self = ElementMap::Full(full);
        }
        match self {
            ElementMap::Full(map) => map.insert(key, elem),
            ElementMap::Keys(_) => unreachable!("converted above"),
        }
    }

    /// Removes `key`, returning its element.
    pub fn remove(&mut self, key: &Blob) -> Option<Elem> {
        match self {
            ElementMap::Keys(keys) => keys.remove(key).then(Elem::plain),
            ElementMap::Full(map) => map.remove(key),
        }
    }

    /// Elements in key order.
    pub fn iter(&self) -> Iter<'_> {
        match self {
            ElementMap::Keys(keys) => Iter::Keys(keys.iter()),
            ElementMap::Full(map) => Iter::Full(map.iter()),
        }
    }
}

/// Iterator over an [`ElementMap`], in key order.
pub enum Iter<'a> {
    /// Over bare keys.
    Keys(btree_set::Iter<'a, Blob>),
    /// Over full elements.
    Full(btree_map::Iter<'a, Blob, Elem>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Blob, &'a Elem);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Keys(it) => it.next().map(|k| (k, &PLAIN)),
            Iter::Full(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Keys(it) => it.size_hint(),
            Iter::Full(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ElementMap {
    type Item = (&'a Blob, &'a Elem);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Equal when they hold the same elements, whichever form holds them.
impl PartialEq for ElementMap {
    fn eq(&self, other: &ElementMap) -> bool {
        match (self, other) {
            (ElementMap::Keys(a), ElementMap::Keys(b)) => a == b,
            (ElementMap::Full(a), ElementMap::Full(b)) => a == b,
            _ => self.len() == other.len() && self.iter().eq(other.iter()),
        }
    }
}

impl std::fmt::Debug for ElementMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(Blob, Elem)> for ElementMap {
    fn from_iter<I: IntoIterator<Item = (Blob, Elem)>>(iter: I) -> ElementMap {
        let all: Vec<(Blob, Elem)> = iter.into_iter().collect();
        if all.iter().all(|(_, e)| is_plain(e)) {
            ElementMap::Keys(all.into_iter().map(|(k, _)| k).collect())
        } else {
            ElementMap::Full(all.into_iter().collect())
        }
    }
}

impl<const N: usize> From<[(Blob, Elem); N]> for ElementMap {
    fn from(elements: [(Blob, Elem); N]) -> ElementMap {
        elements.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::Verdict;
    use std::sync::Arc;

    fn key(b: u8) -> Blob {
        Blob::new(&[10, 0, 0, b])
    }

    fn commented() -> Elem {
        Elem::verdict(Verdict::Accept, Some(Arc::from("ns/svc:http")))
    }

    #[test]
    fn plain_elements_stay_bare_keys_until_one_carries_something() {
        let mut m = ElementMap::new();
        assert_eq!(m.insert(key(2), Elem::plain()), None);
        assert_eq!(m.insert(key(1), Elem::plain()), None);
        assert_eq!(m.insert(key(1), Elem::plain()), Some(Elem::plain()));
        assert!(matches!(m, ElementMap::Keys(_)));
        assert_eq!(m.insert(key(3), commented()), None);
        assert!(matches!(m, ElementMap::Full(_)));
        let all: Vec<(Blob, Elem)> = m.iter().map(|(k, e)| (*k, e.clone())).collect();
        assert_eq!(all, vec![(key(1), Elem::plain()), (key(2), Elem::plain()), (key(3), commented())]);
        assert_eq!(m.remove(&key(2)), Some(Elem::plain()));
        assert_eq!(m.get(&key(3)), Some(&commented()));
        assert_eq!(m.get(&key(2)), None);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn equality_ignores_the_form() {
        let keys: ElementMap = [(key(1), Elem::plain()), (key(2), Elem::plain())].into();
        let full = ElementMap::Full(BTreeMap::from([(key(1), Elem::plain()), (key(2), Elem::plain())]));
        assert!(matches!(keys, ElementMap::Keys(_)));
        assert_eq!(keys, full);
        let other = ElementMap::Full(BTreeMap::from([(key(1), Elem::plain()), (key(2), commented())]));
        assert_ne!(keys, other);
        assert_ne!(keys, ElementMap::Keys(BTreeSet::from([key(1)])));
    }

    #[test]
    fn a_bare_key_reads_as_a_plain_element() {
        let m: ElementMap = [(key(7), Elem::plain())].into();
        assert_eq!(m.get(&key(7)), Some(&Elem::plain()));
        assert!(m.contains_key(&key(7)));
        assert_eq!(m.iter().map(|(k, e)| (*k, e.clone())).collect::<Vec<_>>(), vec![(key(7), Elem::plain())]);
    }
}
