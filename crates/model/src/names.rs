//! Names shared by every structure that spells them.
//!
//! A Service's namespace and name are held by the cache's maps (its object, its slices' index,
//! its claims) and by each of its ports in the model; held as separate strings they were the
//! largest part of the cache's keys, about 250 bytes per Service at 100k Services.

use std::collections::HashSet;
use std::sync::Arc;

/// Spellings that recur across objects (namespaces, port names): one allocation each.
#[derive(Debug, Default)]
pub(crate) struct Spellings(HashSet<Arc<str>>);

/// Past this many, new spellings are no longer remembered: namespaces and port names number a
/// few thousand in the largest clusters, and a stream of unique ones must not grow the set
/// without bound.
const REMEMBERED: usize = 1 << 16;

impl Spellings {
    /// The shared spelling of `s`.
    pub(crate) fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(known) = self.0.get(s) {
            return known.clone();
        }
        let fresh: Arc<str> = Arc::from(s);
        if self.0.len() < REMEMBERED {
            self.0.insert(fresh.clone());
        }
        fresh
    }
}

/// The names a Service's ports are built with: its namespace and name, as its cache key holds
/// them, and the shared port names.
pub(crate) struct ServiceNames<'a> {
    pub namespace: &'a Arc<str>,
    pub name: &'a Arc<str>,
    pub ports: &'a mut Spellings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spelling_is_allocated_once() {
        let mut s = Spellings::default();
        let a = s.get("http");
        let b = s.get("http");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &s.get("grpc")));
        assert_eq!(&*s.get("grpc"), "grpc");
    }
}
