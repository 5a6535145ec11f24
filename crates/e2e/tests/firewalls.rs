//! Finding other tables' base chains that drop Service traffic, on a real kernel: what
//! `nft -f` loads is what `Netlink::dropping_chains` reads back, and only what ends in a drop.

use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;
use verdict_nft::netlink::Netlink;
use verdict_nft::netlink::firewalls::{DropKind, Hook};

const TABLES: &str = "
table inet filter {
    chain forward { type filter hook forward priority 0; policy drop; ct state established accept; }
    chain input { type filter hook input priority 0; policy accept; tcp dport 22 drop; }
}
table ip firewalld {
    chain filter_INPUT { type filter hook input priority 10; policy accept; ct state established accept; counter reject; }
    chain helper { counter drop; }
}
table ip6 quiet {
    chain output { type filter hook output priority 0; policy accept; }
}
table inet kube-proxy {
    chain filter-forward { type filter hook forward priority -110; policy drop; }
}
table bridge br {
    chain forward { type filter hook forward priority 0; policy drop; }
}
";

#[test]
fn default_drop_base_chains_of_other_tables_are_found_and_nothing_else() {
    require_kernel!();
    let ns = Netns::new("fwscan").unwrap();
    let file = std::env::temp_dir().join(format!("verdict-fwscan-{}.nft", std::process::id()));
    std::fs::write(&file, TABLES).unwrap();
    let out = ns.exec(&["nft", "-f", file.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "nft -f: {}", String::from_utf8_lossy(&out.stderr));

    let found = ns.run(|| Netlink::open().unwrap().dropping_chains("kube-proxy")).unwrap();
    let seen: Vec<(String, String, String, Hook, i32, DropKind)> = found
        .iter()
        .map(|c| (c.family.name().to_string(), c.table.clone(), c.chain.clone(), c.hook, c.priority, c.drop.clone()))
        .collect();
    let want = [
        ("ip", "firewalld", "filter_INPUT", Hook::Input, 10, DropKind::FinalRule("reject")),
        ("inet", "filter", "forward", Hook::Forward, 0, DropKind::Policy),
    ]
    .map(|(f, t, c, h, p, d)| (f.to_string(), t.to_string(), c.to_string(), h, p, d));
    // Not found: a conditional drop, a regular chain, an accepting chain, verdict's own
    // table, a bridge table.
    assert_eq!(seen, want, "{found:#?}");
    assert_eq!(found[1].to_string(), "table inet filter, chain forward (hook forward, priority 0) has policy drop");
}
