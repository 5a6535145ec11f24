//! The comments column of a chunk.
//!
//! Every element a Service port adds carries the port's `namespace/name:port` comment, and
//! the elements of one port sit next to each other in most maps (its endpoint slots share a
//! key prefix). A comment per element cost 16 bytes, more than the key of most elements; here
//! each element holds a 2-byte slot in a small table of the chunk's comments, and neighbours
//! with the same comment share a slot.

use std::sync::Arc;

/// One chunk's comments, by element.
#[derive(Clone, Default)]
pub(super) struct Comments {
    /// Per element, its comment's index in `table`.
    slots: Vec<u16>,
    /// The comments slots point at; entries no slot points at any more are dropped by
    /// [`Comments::compact`] once they could outnumber the elements.
    table: Vec<Option<Arc<str>>>,
}

fn same(a: &Option<Arc<str>>, b: &Option<Arc<str>>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y) || **x == **y,
        (None, None) => true,
        _ => false,
    }
}

impl Comments {
    /// `n` elements without a comment.
    pub(super) fn none(n: usize) -> Comments {
        Comments { slots: vec![0; n], table: if n == 0 { Vec::new() } else { vec![None] } }
    }

    /// Whether the column is absent (no element of the chunk has ever had a comment since
    /// the column was last dropped).
    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Element `i`'s comment.
    pub(super) fn get(&self, i: usize) -> Option<&Arc<str>> {
        self.slots.get(i).and_then(|&s| self.table[s as usize].as_ref())
    }

    /// Every element's comment, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Option<&Arc<str>>> + '_ {
        self.slots.iter().map(|&s| self.table[s as usize].as_ref())
    }

    /// Whether no element has a comment.
    pub(super) fn all_none(&self) -> bool {
        self.slots.iter().all(|&s| self.table[s as usize].is_none())
    }

    /// The slot of `comment`: a neighbour's (elements `near`) or the last added when it is
    /// the same, else a new one.
    fn slot_for(&mut self, comment: Option<Arc<str>>, near: [Option<usize>; 2]) -> u16 {
        for i in near.into_iter().flatten() {
            if let Some(&s) = self.slots.get(i)
                && same(&self.table[s as usize], &comment)
            {
                return s;
            }
        }
        if let Some(last) = self.table.last()
            && same(last, &comment)
        {
            return (self.table.len() - 1) as u16;
        }
        self.table.push(comment);
        (self.table.len() - 1) as u16
    }

    /// Inserts element `i`'s comment.
    pub(super) fn insert(&mut self, i: usize, comment: Option<Arc<str>>) {
        let s = self.slot_for(comment, [i.checked_sub(1), Some(i)]);
        self.slots.insert(i, s);
        self.compact_if_sparse();
    }

    /// Appends a comment.
    pub(super) fn push(&mut self, comment: Option<Arc<str>>) {
        self.insert(self.slots.len(), comment);
    }

    /// Replaces element `i`'s comment.
    pub(super) fn set(&mut self, i: usize, comment: Option<Arc<str>>) {
        let s = self.slot_for(comment, [i.checked_sub(1), Some(i + 1)]);
        self.slots[i] = s;
        self.compact_if_sparse();
    }

    /// Removes element `i`'s comment.
    pub(super) fn remove(&mut self, i: usize) {
        self.slots.remove(i);
        self.compact_if_sparse();
    }

    /// Moves the comments of elements from `at` on into a new column.
    pub(super) fn split_off(&mut self, at: usize) -> Comments {
        let mut tail = Comments { slots: self.slots.split_off(at), table: self.table.clone() };
        self.compact();
        tail.compact();
        tail
    }

    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.slots.reserve_exact(n);
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.compact();
        self.slots.shrink_to_fit();
        self.table.shrink_to_fit();
    }

    /// Keeps the table no larger than twice the elements: a chunk holds at most `2 * CHUNK`
    /// elements, so slots stay far below `u16::MAX`.
    fn compact_if_sparse(&mut self) {
        if self.table.len() > 2 * self.slots.len() + 8 {
            self.compact();
        }
    }

    /// Drops the table entries no element uses, and merges equal neighbours.
    fn compact(&mut self) {
        let mut renumbered = vec![u16::MAX; self.table.len()];
        let mut table: Vec<Option<Arc<str>>> = Vec::new();
        for s in &mut self.slots {
            let old = *s as usize;
            if renumbered[old] == u16::MAX {
                let comment = &self.table[old];
                if !table.last().is_some_and(|last| same(last, comment)) {
                    table.push(comment.clone());
                }
                renumbered[old] = (table.len() - 1) as u16;
            }
            *s = renumbered[old];
        }
        self.table = table;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Option<Arc<str>> {
        Some(Arc::from(s))
    }

    #[test]
    fn neighbours_share_a_slot_and_removed_comments_are_dropped() {
        let mut col = Comments::default();
        for _ in 0..10 {
            col.push(c("ns/a:http"));
        }
        col.push(None);
        col.insert(5, c("ns/a:http"));
        assert_eq!(col.table.len(), 2, "one entry per run");
        for _ in 0..40 {
            col.set(3, c("ns/b"));
            col.set(3, c("ns/c"));
        }
        assert!(col.table.len() <= 2 * col.len() + 8);
        assert_eq!(col.get(3).map(|s| &**s), Some("ns/c"));
        assert_eq!(col.get(10).map(|s| &**s), Some("ns/a:http"));
        assert_eq!(col.get(11), None);
        let tail = col.split_off(6);
        assert_eq!(tail.len(), 6);
        assert_eq!(col.table.len(), 2, "the head keeps only its own comments: {:?}", col.table);
        assert!(!tail.all_none());
    }
}
