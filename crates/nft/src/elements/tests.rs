use super::*;
use proptest::prelude::*;

fn key(b: u8) -> Blob {
    Blob::new(&[10, 0, 0, b])
}

fn commented() -> Elem {
    Elem::verdict(Verdict::Accept, Some(Arc::from("ns/svc:http")))
}

fn packed(m: &ElementMap) -> bool {
    matches!(m.repr, Repr::Packed(_))
}

#[test]
fn plain_elements_are_packed_keys() {
    let mut m = ElementMap::new();
    assert_eq!(m.insert(key(2), Elem::plain()), None);
    assert_eq!(m.insert(key(1), Elem::plain()), None);
    assert_eq!(m.insert(key(1), Elem::plain()), Some(Elem::plain()));
    assert!(packed(&m));
    assert_eq!(m.iter().collect::<Vec<_>>(), vec![(key(1), Elem::plain()), (key(2), Elem::plain())]);
    assert_eq!(m.get(&key(2)), Some(Elem::plain()));
    assert!(m.contains_key(&key(1)));
    assert_eq!(m.remove(&key(2)), Some(Elem::plain()));
    assert_eq!(m.get(&key(2)), None);
    assert_eq!(m.len(), 1);
}

#[test]
fn a_second_shape_turns_the_map_into_a_mixed_one_that_reads_the_same() {
    let mut m: ElementMap = [(key(1), Elem::plain()), (key(2), Elem::plain())].into();
    assert!(packed(&m));
    assert_eq!(m.insert(key(3), commented()), None);
    assert!(!packed(&m), "a verdict in a plain set cannot be packed with the rest");
    assert_eq!(
        m.iter().collect::<Vec<_>>(),
        vec![(key(1), Elem::plain()), (key(2), Elem::plain()), (key(3), commented())]
    );
    let longer = Blob::new(&[10, 0, 0, 0, 1]);
    let mut n: ElementMap = [(key(1), Elem::plain())].into();
    n.insert(longer, Elem::plain());
    assert!(!packed(&n), "keys of two lengths");
    assert_eq!(n.get(&longer), Some(Elem::plain()));
}

#[test]
fn equality_ignores_the_form() {
    let a: ElementMap = [(key(1), Elem::plain()), (key(2), Elem::plain())].into();
    let b = ElementMap { repr: Repr::Mixed(BTreeMap::from([(key(1), Elem::plain()), (key(2), Elem::plain())])) };
    assert_eq!(a, b);
    let c = ElementMap { repr: Repr::Mixed(BTreeMap::from([(key(1), Elem::plain()), (key(2), commented())])) };
    assert_ne!(a, c);
    assert_ne!(a, [(key(1), Elem::plain())].into());
}

#[test]
fn emptied_maps_take_any_shape_again() {
    let mut m: ElementMap = [(key(1), Elem::plain())].into();
    m.remove(&key(1));
    assert!(m.is_empty());
    m.insert(key(5), commented());
    assert!(packed(&m));
    assert_eq!(m.get(&key(5)), Some(commented()));
}

#[test]
fn of_equal_keys_collected_the_last_is_kept() {
    let m: ElementMap = [(key(1), commented()), (key(1), Elem::verdict(Verdict::Drop, None))].into();
    assert_eq!(m.iter().collect::<Vec<_>>(), vec![(key(1), Elem::verdict(Verdict::Drop, None))]);
}

/// An operation on both a map and the `BTreeMap` it must behave like.
#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u8, bool),
    Remove(u16),
}

/// Keys spread over a range wide enough to split chunks, values of one shape (an endpoint
/// slot: 8 bytes), comments on some.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..2000, any::<u8>(), any::<bool>()).prop_map(|(k, v, c)| Op::Insert(k, v, c)),
        2 => (0u16..2000).prop_map(Op::Remove),
    ]
}

fn slot_key(k: u16) -> Blob {
    let [hi, lo] = k.to_be_bytes();
    Blob::new(&[172, 30, hi, lo, 6, 0, 0, 0, 0, 80, 0, 0, 0, 0, 0, 1])
}

fn slot_elem(v: u8, comment: bool) -> Elem {
    // Few distinct comments, each allocated anew: neighbours often share one by value.
    Elem::value(Blob::new(&[10, 0, 1, v, 0, 0, 31, 144]), comment.then(|| Arc::from(format!("ns/svc-{}:http", v % 5))))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn behaves_as_a_sorted_map(
        initial in proptest::collection::vec((0u16..2000, any::<u8>(), any::<bool>()), 0..600),
        ops in proptest::collection::vec(op(), 0..800),
    ) {
        let mut model: BTreeMap<Blob, Elem> = BTreeMap::new();
        for (k, v, c) in &initial {
            model.insert(slot_key(*k), slot_elem(*v, *c));
        }
        let mut map: ElementMap = initial.iter().map(|(k, v, c)| (slot_key(*k), slot_elem(*v, *c))).collect();
        for op in ops {
            match op {
                Op::Insert(k, v, c) => {
                    prop_assert_eq!(map.insert(slot_key(k), slot_elem(v, c)), model.insert(slot_key(k), slot_elem(v, c)));
                }
                Op::Remove(k) => prop_assert_eq!(map.remove(&slot_key(k)), model.remove(&slot_key(k))),
            }
            prop_assert_eq!(map.len(), model.len());
        }
        prop_assert!(packed(&map));
        let all: Vec<(Blob, Elem)> = map.iter().collect();
        let want: Vec<(Blob, Elem)> = model.iter().map(|(k, e)| (*k, e.clone())).collect();
        prop_assert_eq!(all, want);
        // Equality: chunked differently (after inserts and removes) and alike (collected).
        let collected: ElementMap = model.iter().map(|(k, e)| (*k, e.clone())).collect();
        prop_assert!(map == collected);
        prop_assert!(collected == collected.clone());
        if let Some((k, e)) = model.iter().next() {
            let changed = slot_elem(e.comment.as_deref().map_or(7, |_| 8), e.comment.is_none());
            let mut other = collected.clone();
            other.insert(*k, changed);
            prop_assert!(other != collected && other != map);
        }
        for k in (0..2000).step_by(7) {
            prop_assert_eq!(map.get(&slot_key(k)), model.get(&slot_key(k)).cloned());
        }
        // Absorbing: a map of later keys (chunks moved), then one of interleaved keys.
        let at = model.len() / 2;
        let mut head: ElementMap = model.iter().take(at).map(|(k, e)| (*k, e.clone())).collect();
        head.absorb(model.iter().skip(at).map(|(k, e)| (*k, e.clone())).collect());
        prop_assert!(head == collected);
        let mut even: ElementMap = model.iter().step_by(2).map(|(k, e)| (*k, e.clone())).collect();
        even.absorb(model.iter().skip(1).step_by(2).map(|(k, e)| (*k, e.clone())).collect());
        prop_assert!(even == collected);
        if let Repr::Packed(p) = &map.repr {
            let kl = p.key_len as usize;
            prop_assert!(p.chunks.iter().all(|c| c.len(kl) > 0 && c.len(kl) < 2 * CHUNK));
            prop_assert!(p.chunks.iter().all(|c| c.comments.is_empty() || c.comments.len() == c.len(kl)));
        }
    }
}
