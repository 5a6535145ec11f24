//! The real kernel holds exactly what verdict renders: checked with `nft list`, with our own
//! netlink dump, and by reloading `nft list` output with `nft -f`.

use std::path::Path;
use verdict_e2e::netns::Netns;
use verdict_e2e::{fixtures, require_kernel};
use verdict_layout::{RenderOptions, render};
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{Ruleset, diff, text};

fn program(ns: &Netns, rs: &verdict_nft::Ruleset) {
    ns.run(|| {
        let mut nl = Netlink::open().expect("netlink socket");
        let plan = diff(None, rs);
        nl.commit(&plan.transaction).expect("commit");
    });
}

#[test]
fn nft_lists_exactly_what_we_render() {
    require_kernel!();
    lists_exactly(&render(&fixtures::mixed(), &RenderOptions::default()));
}

#[test]
fn nft_lists_every_feature_exactly_as_rendered_and_as_the_golden_file() {
    require_kernel!();
    let rs = render(&fixtures::all_features(), &RenderOptions::default());
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/all-features/expected.nft");
    assert_eq!(text::listing(&rs), std::fs::read_to_string(golden).unwrap(), "the golden file is this model's listing");
    lists_exactly(&rs);
}

/// Programs `rs` over netlink in a fresh namespace; `nft list` must print our listing.
fn lists_exactly(rs: &Ruleset) {
    let ns = Netns::new("list").unwrap();
    program(&ns, rs);
    let listed = ns.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
    let ours = text::listing(rs);
    if listed != ours {
        let d: Vec<String> = listed
            .lines()
            .zip(ours.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}:\n  nft:  {a}\n  ours: {b}", i + 1))
            .collect();
        panic!("nft list differs from our listing:\n{}\n--- nft ---\n{listed}", d.join("\n"));
    }
}

#[test]
fn observe_reads_back_what_was_rendered() {
    require_kernel!();
    for model in [fixtures::mixed(), fixtures::all_features()] {
        let rs = render(&model, &RenderOptions::default());
        let ns = Netns::new("observe").unwrap();
        program(&ns, &rs);
        let observed = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("table exists");
        assert!(observed.foreign.is_empty(), "foreign objects: {:?}", observed.foreign);
        assert_eq!(text::listing(&observed.ruleset), text::listing(&rs));
        assert_eq!(observed.ruleset, rs);
    }
}

#[test]
fn nft_list_output_reloads_into_the_same_table() {
    require_kernel!();
    // all_features: iptables mode's kept rules too (the loopback guard, the output hook's
    // localhost NodePorts, `ct state invalid drop`); longest_names: the longest names
    // Kubernetes allows, whose comments `nft` must read back.
    for model in [fixtures::mixed(), fixtures::all_features(), fixtures::longest_names()] {
        let rs = render(&model, &RenderOptions::default());
        let first = Netns::new("rt1").unwrap();
        program(&first, &rs);
        let listed = first.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();

        let second = Netns::new("rt2").unwrap();
        second.nft_stdin(&["-f", "-"], &listed).expect("nft -f accepts its own listing of our table");
        let reloaded =
            second.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("table exists");
        assert!(reloaded.foreign.is_empty(), "foreign objects after reload: {:?}", reloaded.foreign);
        assert_eq!(reloaded.ruleset, rs, "nft -f of the listing built a different table");
    }
}

#[test]
fn a_failing_transaction_changes_nothing() {
    require_kernel!();
    use verdict_nft::netlink::NetlinkError;
    use verdict_nft::rule::{Rule, build::goto};
    use verdict_nft::transaction::Op;

    let rs = render(&fixtures::mixed(), &RenderOptions::default());
    let ns = Netns::new("fail").unwrap();
    program(&ns, &rs);
    let before = ns.check(&["nft", "list", "ruleset"]).unwrap();

    // A valid change (a new chain and a rule in it) followed by a rule that jumps to a chain
    // that does not exist.
    let mut tx = verdict_nft::Transaction::new("kube-proxy");
    tx.ops.push(Op::AddChain { name: "extra".into(), base: None });
    tx.ops.push(Op::AddRule { chain: "extra".into(), rule: Rule::new(vec![goto("services")]) });
    tx.ops.push(Op::FlushChain("services".into()));
    tx.ops.push(Op::AddRule { chain: "services".into(), rule: Rule::new(vec![goto("no-such-chain")]) });
    let err = ns.run(|| Netlink::open().unwrap().commit(&tx)).expect_err("the kernel must refuse the batch");
    match &err {
        NetlinkError::Rejected { index, op, errno, .. } => {
            assert_eq!(*index, 3, "the error names the failing operation: {err}");
            assert!(op.contains("services") && op.contains("no-such-chain"), "{op}");
            assert_eq!(*errno, nix::errno::Errno::ENOENT);
        }
        other => panic!("expected a rejected transaction, got {other}"),
    }
    assert_eq!(
        ns.check(&["nft", "list", "ruleset"]).unwrap(),
        before,
        "a refused batch must leave the kernel untouched"
    );
}

#[test]
fn incremental_syncs_converge_to_the_rendered_table() {
    require_kernel!();
    let ns = Netns::new("incr").unwrap();
    let first = render(&fixtures::mixed(), &RenderOptions::default());
    program(&ns, &first);

    // Change endpoints, scale a Service from 2 to 3 endpoints, drop a Service, add one.
    let n = fixtures::node(&["192.168.0.2", "2001:db8::2"]);
    let services = vec![
        fixtures::service("ns1", "web", &["172.30.0.41"], "TCP", 80, None),
        fixtures::service("ns2", "np", &["172.30.0.42"], "TCP", 80, Some(30080)),
        fixtures::service("ns5", "new", &["172.30.0.45"], "TCP", 443, None),
    ];
    let slices = vec![
        fixtures::slice("ns1", "web", "IPv4", "TCP", 8080, &["10.180.0.1", "10.180.1.9", "10.180.2.2"], "test-node"),
        fixtures::slice("ns2", "np", "IPv4", "TCP", 80, &["10.180.0.7"], "test-node"),
        fixtures::slice("ns5", "new", "IPv4", "TCP", 8443, &["10.180.3.1"], "test-node"),
    ];
    let second = render(&fixtures::model(&n, &services, &slices), &RenderOptions::default());
    let committed = ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        let committed = observe(&mut nl, "kube-proxy").unwrap().unwrap().ruleset;
        let plan = diff(Some(&committed), &second);
        assert!(!plan.transaction.is_empty());
        nl.commit(&plan.transaction).unwrap_or_else(|e| panic!("{e}\n{}", plan.transaction));
        let now = observe(&mut nl, "kube-proxy").unwrap().unwrap();
        assert!(now.foreign.is_empty());
        assert!(
            now.ruleset.equivalent(&second),
            "kernel:\n{}\nwanted:\n{}",
            text::listing(&now.ruleset),
            text::listing(&second)
        );
        assert_eq!(now.ruleset, plan.result, "the plan's result is what the kernel now holds");
        // A second diff against what the kernel holds finds nothing to do.
        assert!(diff(Some(&now.ruleset), &second).transaction.is_empty());
        now.ruleset
    });
    // And back again.
    ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        let plan = diff(Some(&committed), &first);
        nl.commit(&plan.transaction).unwrap_or_else(|e| panic!("{e}\n{}", plan.transaction));
        let now = observe(&mut nl, "kube-proxy").unwrap().unwrap();
        assert!(now.ruleset.equivalent(&first));
    });
}

/// Every feature with `--service-counters=all`: the counting sets (`counter` on every
/// element) list exactly as rendered, read back equal (so a restart writes nothing), and a
/// second sync against the kernel plans no operation.
#[test]
fn a_counted_table_lists_exactly_and_reads_back_equal() {
    require_kernel!();
    let mut model = fixtures::all_features();
    model.config.service_counters = verdict_model::ServiceCounters::All;
    model.services =
        model.services.values().map(|p| verdict_model::ServicePort { counted: true, ..(**p).clone() }).collect();
    let rs = render(&model, &RenderOptions::default());
    assert!(rs.sets.get("rejected-ips").is_some_and(|s| s.decl.counter && !s.elements.is_empty()));
    lists_exactly(&rs);
    let ns = Netns::new("counted").unwrap();
    program(&ns, &rs);
    let observed = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("table exists");
    assert!(observed.foreign.is_empty(), "foreign objects: {:?}", observed.foreign);
    assert_eq!(observed.ruleset, rs);
    let again = diff(Some(&observed.ruleset), &rs);
    assert_eq!(again.transaction.ops.len(), 0, "a resync writes {:?}", text::script(&again.transaction));
}
