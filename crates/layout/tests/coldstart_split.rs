//! `verdict_nft::coldstart` on tables verdict renders (they build a model, so they live here and
//! not in verdict-nft, which knows no Services): a cold start split into bounded transactions,
//! the switch last; when a table is dormant; element ranges.

use verdict_layout::{RenderOptions, render};
use verdict_nft::coldstart::{dormant, split};
use verdict_nft::diff;
use verdict_nft::ruleset::{Blob, Ruleset};
use verdict_nft::transaction::{ElementList, Op, Transaction};

fn desired(services: usize) -> Ruleset {
    let (svcs, slices) = verdict_model::synth::cluster(services, 3, services * 3);
    render(&verdict_model::synth::model(&svcs, &slices).model, &RenderOptions::default())
}

/// Every (set, key) a list of transactions adds, in order.
fn added(txs: &[Transaction]) -> Vec<(String, Blob)> {
    let mut out = Vec::new();
    for op in txs.iter().flat_map(|t| &t.ops) {
        if let Op::AddElements { set, elements, .. } = op {
            out.extend(elements.iter().map(|(k, _)| (set.clone(), k)));
        }
    }
    out
}

#[test]
fn a_cold_start_is_split_into_bounded_transactions_and_the_switch_comes_last() {
    let want = desired(400);
    let whole = diff(None, &want).transaction;
    let objects = whole.object_count();
    assert!(objects > 3000, "{objects}");
    let parts = split(whole.clone(), &want, 1000);
    assert!(parts.len() >= objects / 1000, "{} transactions for {objects} objects", parts.len());
    for (i, t) in parts.iter().enumerate() {
        assert!(t.object_count() <= 1000, "transaction {i}: {} objects", t.object_count());
    }
    assert_eq!(parts.iter().map(Transaction::object_count).sum::<usize>(), objects);
    // The same operations in the same order, but for the base chains' rules, which only the
    // last transaction adds, and all of them.
    let is_switch = |op: &Op| matches!(op, Op::AddRule { chain, .. } if want.chains[chain].base.is_some());
    let (last, before) = parts.split_last().unwrap();
    assert!(last.ops.iter().all(is_switch), "the last transaction only switches: {:?}", last.ops);
    assert!(before.iter().flat_map(|t| &t.ops).all(|op| !is_switch(op)));
    let switch_rules: usize = want.chains.values().filter(|c| c.base.is_some()).map(|c| c.rules.len()).sum();
    assert!(switch_rules > 0);
    assert_eq!(last.ops.len(), switch_rules);
    assert_eq!(added(&parts), added(std::slice::from_ref(&whole)));
    assert_eq!(parts[0].ops[0], Op::AddTable(want.table.clone()));
}

#[test]
fn a_split_cold_start_binds_its_maps_before_it_fills_them() {
    let want = desired(400);
    let whole = diff(None, &want).transaction;
    let parts = split(whole.clone(), &want, 1000);
    let ops: Vec<&Op> = parts.iter().flat_map(|t| &t.ops).collect();
    let first_element = ops.iter().position(|op| matches!(op, Op::AddElements { .. })).expect("elements");
    let regular_rule = |op: &&Op| matches!(op, Op::AddRule { chain, .. } if want.chains[chain].base.is_none());
    let rules: Vec<usize> = ops.iter().enumerate().filter(|(_, op)| regular_rule(op)).map(|(i, _)| i).collect();
    assert!(!rules.is_empty());
    assert!(rules.iter().all(|i| *i < first_element), "a regular chain's rule after the first element");
    // Nothing but the order moved: each rule once, after every chain and set it refers to.
    assert_eq!(rules.len(), whole.ops.iter().filter(regular_rule).count());
    let binds_service_ips =
        |op: &&Op| matches!(op, Op::AddRule { rule, .. } if rule.set_refs().any(|s| s == "service-ips"));
    let bound = ops.iter().position(binds_service_ips).expect("a rule binds service-ips");
    let created = ops.iter().position(|op| matches!(op, Op::AddSet(d) if d.name == "service-ips")).expect("created");
    assert!(created < bound && bound < first_element);
    for (i, op) in ops.iter().enumerate().filter(|(_, op)| regular_rule(op)) {
        let Op::AddRule { chain, rule } = op else { unreachable!() };
        let made = |name: &str| ops[..i].iter().any(|o| matches!(o, Op::AddChain { name: n, .. } if n == name));
        assert!(made(chain), "rule {i} in {chain} before its chain");
        for set in rule.set_refs() {
            let exists = ops[..i].iter().any(|o| matches!(o, Op::AddSet(d) if d.name == set));
            assert!(exists, "rule {i} refers to {set} before it exists");
        }
    }
}

#[test]
fn a_small_plan_stays_one_transaction() {
    let want = desired(5);
    let whole = diff(None, &want).transaction;
    assert_eq!(split(whole.clone(), &want, whole.object_count()), vec![whole]);
}

#[test]
fn a_table_is_dormant_until_a_base_chain_has_a_rule() {
    let want = desired(3);
    assert!(dormant(None, &want));
    assert!(!dormant(Some(&want), &want));
    let mut bare = want.clone();
    for chain in bare.chains.values_mut().filter(|c| c.base.is_some()) {
        chain.rules.clear();
    }
    assert!(dormant(Some(&bare), &want), "rules in regular chains only");
    // A chain the kernel does not hold as a base chain, but that should be one.
    let (name, chain) = want.chains.iter().find(|(_, c)| c.base.is_some()).unwrap();
    let mut odd = bare.clone();
    odd.chains.insert(name.clone(), verdict_nft::ruleset::Chain { base: None, ..chain.clone() });
    assert!(!dormant(Some(&odd), &want));
}

#[test]
fn ranges_of_a_map_cover_it_once() {
    let want = desired(300);
    let set = want.sets.values().max_by_key(|s| s.elements.len()).unwrap();
    let all: Vec<_> = set.elements.iter().collect();
    for step in [1, 7, 128, 129, 1000] {
        let mut got = Vec::new();
        let mut from = 0;
        while from < all.len() {
            let n = step.min(all.len() - from);
            got.extend(ElementList::Range { elements: set.elements.clone(), start: from, len: n }.iter());
            from += n;
        }
        assert_eq!(got, all, "step {step}");
    }
    assert_eq!(set.elements.iter_from(all.len()).count(), 0);
}
