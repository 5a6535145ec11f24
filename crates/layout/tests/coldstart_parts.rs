//! The cold start of issue 32's size, 100,000 Services x 10 endpoints (1.35 million objects),
//! planned as verdict plans it: no transaction over `coldstart::MAX_OBJECTS`, every object sent
//! once, and a switch of a few rules. (How long each transaction holds the kernel's commit:
//! `cargo xtask bench --e2e`, docs/benchmarks.md.)

use verdict_layout::{RenderOptions, render};
use verdict_model::synth;
use verdict_nft::coldstart::{MAX_OBJECTS, SIZE_PER_OBJECT, split};
use verdict_nft::diff;
use verdict_nft::transaction::{Op, Transaction};

#[test]
fn a_cold_start_at_100k_services_is_bounded_transactions_and_a_small_switch() {
    let (services, slices) = synth::cluster(100_000, 10, synth::POD_POOL);
    let want = render(&synth::model(&services, &slices).model, &RenderOptions::default());
    drop((services, slices));
    let whole = diff(None, &want).transaction;
    let objects = whole.object_count();
    assert!(objects > 1_300_000, "{objects}");
    let parts = split(whole, &want, MAX_OBJECTS);
    let sizes: Vec<usize> = parts.iter().map(|t| t.object_count()).collect();
    assert!(sizes.iter().all(|n| *n <= MAX_OBJECTS), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), objects);
    // Parts are weighed by kernel cost (a verdict map's elements count 3x): more than the
    // unweighted minimum, but not many more.
    let fewest = objects.div_ceil(MAX_OBJECTS) + 1;
    assert!(parts.len() >= fewest && parts.len() <= fewest * 3 / 2, "{} parts: {sizes:?}", parts.len());
    // The kernel allocates a set's whole hash table at its creation: a set sized for 100,000
    // elements or more is created in a transaction of its own, not with elements on top.
    let big = |op: &Op| matches!(op, Op::AddSet(d) if d.size.unwrap_or(0) / SIZE_PER_OBJECT >= 100_000);
    let holding: Vec<&Transaction> = parts.iter().filter(|t| t.ops.iter().any(big)).collect();
    assert!(!holding.is_empty(), "no set sized for 2 million slots");
    assert!(holding.iter().all(|t| t.ops.len() == 1), "{:?}", holding.iter().map(|t| t.ops.len()).collect::<Vec<_>>());
    let switch = parts.last().unwrap();
    assert!(switch.ops.iter().all(|op| matches!(op, Op::AddRule { chain, .. } if want.chains[chain].base.is_some())));
    assert!(switch.object_count() < 50, "the switch: {} rules", switch.object_count());
}
