//! The elements of one set or map, kept as compactly as their shape allows: at 10^6 elements
//! the largest thing the agent holds. A set's keys, and a map's data, share one length, so an
//! [`ElementMap`] keeps packed records in sorted chunks (an IPv4 endpoint slot 26 bytes, not the
//! 89 of a `BTreeMap<Blob, Elem>` entry; see [`comments`]); mixed shapes (only a foreign table
//! read back has them) go in a plain `BTreeMap`. Either way it reads as a sorted map.

mod comments;

use crate::primitives::{Blob, Elem, ElemData, Verdict};
use comments::Comments;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Elements per chunk after a bulk build or a split; a chunk splits when it reaches twice
/// this. Small enough that an insert moves a few KiB, large enough that the chunk index of a
/// million elements is a few thousand entries.
const CHUNK: usize = 128;

/// Elements by key, sorted by key.
#[derive(Clone, Default)]
pub struct ElementMap {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Packed(Packed),
    /// Elements of mixed shapes.
    Mixed(BTreeMap<Blob, Elem>),
}

impl Default for Repr {
    fn default() -> Repr {
        Repr::Packed(Packed::default())
    }
}

/// What every element of a packed map carries besides its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum DataShape {
    /// Nothing: a set.
    #[default]
    Plain,
    /// A value of this many bytes.
    Value(u8),
    /// A verdict.
    Verdict,
}

impl DataShape {
    fn of(elem: &Elem) -> DataShape {
        match &elem.data {
            None => DataShape::Plain,
            Some(ElemData::Value(v)) => DataShape::Value(v.as_slice().len() as u8),
            Some(ElemData::Verdict(_)) => DataShape::Verdict,
        }
    }
}

/// Elements of one shape, in sorted chunks of parallel columns.
#[derive(Clone, Default)]
struct Packed {
    key_len: u8,
    shape: DataShape,
    len: usize,
    chunks: Vec<Chunk>,
}

#[derive(Clone, Default)]
struct Chunk {
    /// `key_len` bytes per element.
    keys: Vec<u8>,
    /// `DataShape::Value` bytes per element.
    values: Vec<u8>,
    /// One per element in a verdict map.
    verdicts: Vec<Verdict>,
    /// One per element, or none at all while no element of the chunk has a comment.
    comments: Comments,
}

impl Chunk {
    /// An empty chunk with room for `n` elements of this shape.
    fn with_room(key_len: usize, shape: DataShape, n: usize) -> Chunk {
        let mut chunk = Chunk { keys: Vec::with_capacity(n * key_len), ..Chunk::default() };
        match shape {
            DataShape::Plain => {}
            DataShape::Value(w) => chunk.values.reserve_exact(n * w as usize),
            DataShape::Verdict => chunk.verdicts.reserve_exact(n),
        }
        chunk
    }

    fn len(&self, key_len: usize) -> usize {
        self.keys.len() / key_len.max(1)
    }

    fn key(&self, key_len: usize, i: usize) -> &[u8] {
        &self.keys[i * key_len..(i + 1) * key_len]
    }

    /// Where `key` is or would go.
    fn search(&self, key_len: usize, key: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len(key_len));
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(key_len, mid).cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn elem(&self, shape: DataShape, i: usize) -> Elem {
        let data = match shape {
            DataShape::Plain => None,
            DataShape::Value(n) => {
                let n = n as usize;
                Some(ElemData::Value(Blob::new(&self.values[i * n..(i + 1) * n])))
            }
            DataShape::Verdict => Some(ElemData::Verdict(self.verdicts[i].clone())),
        };
        Elem { data, comment: self.comments.get(i).cloned() }
    }

    /// Appends or inserts at `i` (the caller checked the shape).
    fn insert(&mut self, key_len: usize, i: usize, key: &[u8], elem: Elem) {
        let n = self.len(key_len);
        self.keys.splice(i * key_len..i * key_len, key.iter().copied());
        match elem.data {
            None => {}
            Some(ElemData::Value(v)) => {
                let w = v.as_slice().len();
                self.values.splice(i * w..i * w, v.as_slice().iter().copied());
            }
            Some(ElemData::Verdict(v)) => self.verdicts.insert(i, v),
        }
        if elem.comment.is_some() || !self.comments.is_empty() {
            if self.comments.is_empty() {
                self.comments = Comments::none(n);
            }
            self.comments.insert(i, elem.comment);
        }
    }

    fn replace(&mut self, key_len: usize, shape: DataShape, i: usize, elem: Elem) {
        match (shape, elem.data) {
            (DataShape::Value(n), Some(ElemData::Value(v))) => {
                let n = n as usize;
                self.values[i * n..(i + 1) * n].copy_from_slice(v.as_slice());
            }
            (DataShape::Verdict, Some(ElemData::Verdict(v))) => self.verdicts[i] = v,
            _ => {}
        }
        if elem.comment.is_some() && self.comments.is_empty() {
            self.comments = Comments::none(self.len(key_len));
        }
        if !self.comments.is_empty() {
            self.comments.set(i, elem.comment);
            if self.comments.all_none() {
                self.comments = Comments::default();
            }
        }
    }

    fn remove(&mut self, key_len: usize, shape: DataShape, i: usize) {
        self.keys.drain(i * key_len..(i + 1) * key_len);
        match shape {
            DataShape::Plain => {}
            DataShape::Value(n) => {
                let n = n as usize;
                self.values.drain(i * n..(i + 1) * n);
            }
            DataShape::Verdict => {
                self.verdicts.remove(i);
            }
        }
        if !self.comments.is_empty() {
            self.comments.remove(i);
            if self.comments.all_none() {
                self.comments = Comments::default();
            }
        }
    }

    /// Moves the elements from `at` on into a new chunk.
    fn split_off(&mut self, key_len: usize, shape: DataShape, at: usize) -> Chunk {
        let mut tail = Chunk { keys: self.keys.split_off(at * key_len), ..Chunk::default() };
        match shape {
            DataShape::Plain => {}
            DataShape::Value(n) => tail.values = self.values.split_off(at * n as usize),
            DataShape::Verdict => tail.verdicts = self.verdicts.split_off(at),
        }
        if !self.comments.is_empty() {
            tail.comments = self.comments.split_off(at);
        }
        self.shrink();
        tail.shrink();
        tail
    }

    fn shrink(&mut self) {
        self.keys.shrink_to_fit();
        self.values.shrink_to_fit();
        self.verdicts.shrink_to_fit();
        self.comments.shrink_to_fit();
    }
}

impl Packed {
    fn fits(&self, key: &Blob, elem: &Elem) -> bool {
        self.len == 0 || (key.as_slice().len() == self.key_len as usize && DataShape::of(elem) == self.shape)
    }

    /// The chunk that holds `key` or would hold it.
    fn chunk_of(&self, key: &[u8]) -> usize {
        let kl = self.key_len as usize;
        self.chunks.partition_point(|c| c.key(kl, 0) <= key).saturating_sub(1)
    }

    fn find(&self, key: &Blob) -> Option<(usize, usize)> {
        if self.len == 0 || key.as_slice().len() != self.key_len as usize {
            return None;
        }
        let c = self.chunk_of(key.as_slice());
        self.chunks[c].search(self.key_len as usize, key.as_slice()).ok().map(|i| (c, i))
    }

    fn get(&self, key: &Blob) -> Option<Elem> {
        self.find(key).map(|(c, i)| self.chunks[c].elem(self.shape, i))
    }

    /// Inserts an element of this map's shape (see [`Packed::fits`]).
    fn insert(&mut self, key: Blob, elem: Elem) -> Option<Elem> {
        if self.len == 0 {
            self.key_len = key.as_slice().len() as u8;
            self.shape = DataShape::of(&elem);
            self.chunks.clear();
        }
        let kl = self.key_len as usize;
        if self.chunks.is_empty() {
            let mut first = Chunk::default();
            first.insert(kl, 0, key.as_slice(), elem);
            self.chunks.push(first);
            self.len = 1;
            return None;
        }
        // Appends (a table rendered in address order arrives sorted) fill chunks to CHUNK.
        let last = self.chunks.last_mut().expect("not empty");
        let n = last.len(kl);
        if last.key(kl, n - 1) < key.as_slice() {
            if n < CHUNK {
                last.insert(kl, n, key.as_slice(), elem);
            } else {
                let mut next = Chunk::with_room(kl, self.shape, CHUNK);
                next.insert(kl, 0, key.as_slice(), elem);
                self.chunks.push(next);
            }
            self.len += 1;
            return None;
        }
        let c = self.chunk_of(key.as_slice());
        let chunk = &mut self.chunks[c];
        match chunk.search(kl, key.as_slice()) {
            Ok(i) => {
                let old = chunk.elem(self.shape, i);
                chunk.replace(kl, self.shape, i, elem);
                Some(old)
            }
            Err(i) => {
                chunk.insert(kl, i, key.as_slice(), elem);
                self.len += 1;
                if chunk.len(kl) >= 2 * CHUNK {
                    let tail = chunk.split_off(kl, self.shape, CHUNK);
                    self.chunks.insert(c + 1, tail);
                }
                None
            }
        }
    }

    fn remove(&mut self, key: &Blob) -> Option<Elem> {
        let (c, i) = self.find(key)?;
        let kl = self.key_len as usize;
        let chunk = &mut self.chunks[c];
        let old = chunk.elem(self.shape, i);
        chunk.remove(kl, self.shape, i);
        if chunk.keys.is_empty() {
            self.chunks.remove(c);
        }
        self.len -= 1;
        if self.len == 0 {
            *self = Packed::default();
        }
        Some(old)
    }

    /// From elements sorted by key, without duplicates, all of one shape.
    fn from_sorted(sorted: Vec<(Blob, Elem)>) -> Packed {
        let Some((first_key, first)) = sorted.first() else { return Packed::default() };
        let key_len = first_key.as_slice().len();
        let shape = DataShape::of(first);
        let mut packed = Packed { key_len: key_len as u8, shape, len: sorted.len(), chunks: Vec::new() };
        let per_value = match shape {
            DataShape::Value(n) => n as usize,
            _ => 0,
        };
        let mut it = sorted.into_iter().peekable();
        while it.peek().is_some() {
            let batch: Vec<(Blob, Elem)> = it.by_ref().take(CHUNK).collect();
            let mut chunk = Chunk {
                keys: Vec::with_capacity(batch.len() * key_len),
                values: Vec::with_capacity(batch.len() * per_value),
                ..Chunk::default()
            };
            if shape == DataShape::Verdict {
                chunk.verdicts.reserve_exact(batch.len());
            }
            let with_comments = batch.iter().any(|(_, e)| e.comment.is_some());
            if with_comments {
                chunk.comments.reserve_exact(batch.len());
            }
            for (key, elem) in batch {
                chunk.keys.extend_from_slice(key.as_slice());
                match elem.data {
                    None => {}
                    Some(ElemData::Value(v)) => chunk.values.extend_from_slice(v.as_slice()),
                    Some(ElemData::Verdict(v)) => chunk.verdicts.push(v),
                }
                if with_comments {
                    chunk.comments.push(elem.comment);
                }
            }
            chunk.comments.shrink_to_fit();
            packed.chunks.push(chunk);
        }
        packed
    }
}

impl ElementMap {
    /// No elements.
    pub fn new() -> ElementMap {
        ElementMap::default()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Packed(p) => p.len,
            Repr::Mixed(map) => map.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element under `key`.
    pub fn get(&self, key: &Blob) -> Option<Elem> {
        match &self.repr {
            Repr::Packed(p) => p.get(key),
            Repr::Mixed(map) => map.get(key).cloned(),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &Blob) -> bool {
        match &self.repr {
            Repr::Packed(p) => p.find(key).is_some(),
            Repr::Mixed(map) => map.contains_key(key),
        }
    }

    /// Sets `key` to `elem`, returning what it was.
    pub fn insert(&mut self, key: Blob, elem: Elem) -> Option<Elem> {
        if let Repr::Packed(p) = &mut self.repr {
            if p.fits(&key, &elem) {
                return p.insert(key, elem);
            }
            let mixed = self.iter().collect();
            self.repr = Repr::Mixed(mixed);
        }
        match &mut self.repr {
            Repr::Mixed(map) => map.insert(key, elem),
            Repr::Packed(_) => unreachable!("converted above"),
        }
    }

    /// Removes `key`, returning its element.
    pub fn remove(&mut self, key: &Blob) -> Option<Elem> {
        match &mut self.repr {
            Repr::Packed(p) => p.remove(key),
            Repr::Mixed(map) => map.remove(key),
        }
    }

    /// Elements in key order.
    pub fn iter(&self) -> Iter<'_> {
        match &self.repr {
            Repr::Packed(p) => Iter(Walk::Packed { map: p, chunk: 0, at: 0, left: p.len }),
            Repr::Mixed(map) => Iter(Walk::Mixed(map.iter())),
        }
    }

    /// Elements in key order from the `start`-th on (a transaction split into batches sends
    /// a map in ranges without walking what earlier batches sent).
    pub fn iter_from(&self, start: usize) -> Iter<'_> {
        match &self.repr {
            Repr::Packed(p) => {
                let (kl, mut skipped) = (p.key_len as usize, 0);
                for (chunk, c) in p.chunks.iter().enumerate() {
                    let n = c.len(kl);
                    if skipped + n > start {
                        let left = p.len - start;
                        return Iter(Walk::Packed { map: p, chunk, at: start - skipped, left });
                    }
                    skipped += n;
                }
                Iter(Walk::Packed { map: p, chunk: p.chunks.len(), at: 0, left: 0 })
            }
            Repr::Mixed(map) => {
                let mut it = map.iter();
                if start > 0 {
                    it.nth(start - 1);
                }
                Iter(Walk::Mixed(it))
            }
        }
    }

    /// Adds `other`'s elements (of equal keys, `other`'s is kept). When they all come after
    /// this map's, as a render split by address hands them over, its chunks are moved.
    pub fn absorb(&mut self, other: ElementMap) {
        if let (Repr::Packed(mine), Repr::Packed(theirs)) = (&mut self.repr, &other.repr)
            && mine.len > 0
            && theirs.len > 0
            && (mine.key_len, mine.shape) == (theirs.key_len, theirs.shape)
        {
            let kl = mine.key_len as usize;
            let last = mine.chunks.last().map(|c| c.key(kl, c.len(kl) - 1));
            if last < Some(theirs.chunks[0].key(kl, 0)) {
                let Repr::Packed(theirs) = other.repr else { unreachable!("matched above") };
                mine.len += theirs.len;
                mine.chunks.extend(theirs.chunks);
                return;
            }
        }
        if self.is_empty() {
            *self = other;
            return;
        }
        for (key, elem) in other.iter() {
            self.insert(key, elem);
        }
    }
}

/// Iterator over an [`ElementMap`], in key order.
pub struct Iter<'a>(Walk<'a>);

enum Walk<'a> {
    Packed { map: &'a Packed, chunk: usize, at: usize, left: usize },
    Mixed(std::collections::btree_map::Iter<'a, Blob, Elem>),
}

impl Iterator for Iter<'_> {
    type Item = (Blob, Elem);

    fn next(&mut self) -> Option<(Blob, Elem)> {
        match &mut self.0 {
            Walk::Packed { map, chunk, at, left } => {
                let kl = map.key_len as usize;
                let c = map.chunks.get(*chunk)?;
                let item = (Blob::new(c.key(kl, *at)), c.elem(map.shape, *at));
                *at += 1;
                *left -= 1;
                if *at == c.len(kl) {
                    *chunk += 1;
                    *at = 0;
                }
                Some(item)
            }
            Walk::Mixed(it) => it.next().map(|(k, e)| (*k, e.clone())),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            Walk::Packed { left, .. } => (*left, Some(*left)),
            Walk::Mixed(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ElementMap {
    type Item = (Blob, Elem);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Equal when they hold the same elements, whichever form holds them.
impl PartialEq for ElementMap {
    fn eq(&self, other: &ElementMap) -> bool {
        if self.len() != other.len() {
            return false;
        }
        // Packed maps of one shape compare column by column, whatever their chunking: at a
        // restart that changed nothing this is most of the diff.
        if let (Repr::Packed(a), Repr::Packed(b)) = (&self.repr, &other.repr)
            && (a.key_len, a.shape) == (b.key_len, b.shape)
        {
            return same_run(a.chunks.iter().map(|c| &c.keys[..]), b.chunks.iter().map(|c| &c.keys[..]))
                && same_run(a.chunks.iter().map(|c| &c.values[..]), b.chunks.iter().map(|c| &c.values[..]))
                && same_run(a.chunks.iter().map(|c| &c.verdicts[..]), b.chunks.iter().map(|c| &c.verdicts[..]))
                && a.comments().eq(b.comments());
        }
        self.iter().eq(other.iter())
    }
}

/// Whether two sequences of slices hold the same items once concatenated.
fn same_run<'a, T: PartialEq + 'a>(a: impl Iterator<Item = &'a [T]>, b: impl Iterator<Item = &'a [T]>) -> bool {
    let (mut a, mut b) = (a.filter(|s| !s.is_empty()), b.filter(|s| !s.is_empty()));
    let (mut x, mut y): (&[T], &[T]) = (&[], &[]);
    loop {
        if x.is_empty() {
            x = a.next().unwrap_or_default();
        }
        if y.is_empty() {
            y = b.next().unwrap_or_default();
        }
        if x.is_empty() || y.is_empty() {
            return x.is_empty() && y.is_empty();
        }
        let n = x.len().min(y.len());
        if x[..n] != y[..n] {
            return false;
        }
        (x, y) = (&x[n..], &y[n..]);
    }
}

impl Packed {
    /// Every element's comment, in key order.
    fn comments(&self) -> impl Iterator<Item = Option<&Arc<str>>> + '_ {
        let kl = self.key_len as usize;
        self.chunks.iter().flat_map(move |c| {
            let none = std::iter::repeat_n(None, if c.comments.is_empty() { c.len(kl) } else { 0 });
            c.comments.iter().chain(none)
        })
    }
}

impl Eq for ElementMap {}

impl std::fmt::Debug for ElementMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(Blob, Elem)> for ElementMap {
    fn from_iter<I: IntoIterator<Item = (Blob, Elem)>>(iter: I) -> ElementMap {
        let mut sorted: Vec<(Blob, Elem)> = iter.into_iter().collect();
        // Stable, and of equal keys the last one given is kept (as a map's inserts would).
        sorted.sort_by_key(|e| e.0);
        sorted.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let uniform = sorted.first().is_none_or(|(k0, e0)| {
            let (kl, shape) = (k0.as_slice().len(), DataShape::of(e0));
            sorted.iter().all(|(k, e)| k.as_slice().len() == kl && DataShape::of(e) == shape)
        });
        let repr =
            if uniform { Repr::Packed(Packed::from_sorted(sorted)) } else { Repr::Mixed(sorted.into_iter().collect()) };
        ElementMap { repr }
    }
}

impl<const N: usize> From<[(Blob, Elem); N]> for ElementMap {
    fn from(elements: [(Blob, Elem); N]) -> ElementMap {
        elements.into_iter().collect()
    }
}

#[cfg(test)]
mod tests;
