//! kube-proxy's iptables mode (`pkg/proxy/iptables/proxier.go`) and kubelet's chains
//! (`pkg/kubelet/kubelet_network_linux.go`), through `iptables-nft` or `iptables-legacy`.
//!
//! A full sync, as kube-proxy makes one at start: the jumps from the built-in chains ensured
//! one by one (`-C`, else `-I`), its canary chains, then one `iptables-restore --noflush
//! --counters` of the filter and nat tables: the top-level chains, the per-Service chains
//! (`KUBE-SVC-`, `KUBE-EXT-`, `KUBE-SEP-`, named by upstream's hash), REJECT rules for Services
//! without endpoints, and `-X` for per-Service chains no Service has any more. Kubelet's part:
//! `KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY` and `KUBE-FIREWALL` with its jumps.

use super::{Backend, Family, KubeProxy, MASQ_MARK, SvcPort, feed, hash};
use crate::netns::Netns;
use anyhow::{Result, bail};
use std::collections::BTreeSet;
use std::fmt::Write;

fn svc_chain(p: &SvcPort) -> String {
    format!("KUBE-SVC-{}", hash(&format!("{}{}", p.name(), p.proto), 16))
}

fn ext_chain(p: &SvcPort) -> String {
    format!("KUBE-EXT-{}", hash(&format!("{}{}", p.name(), p.proto), 16))
}

fn sep_chain(p: &SvcPort, ep: &super::Ep) -> String {
    format!("KUBE-SEP-{}", hash(&format!("{}{}{ep}", p.name(), p.proto), 16))
}

/// The chains kube-proxy jumps to from built-in chains: (table, from, to, comment, extra
/// matches), each ensured at the top of `from`, in this order (so the last ends up first).
pub const JUMPS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "filter",
        "INPUT",
        "KUBE-EXTERNAL-SERVICES",
        "kubernetes externally-visible service portals",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        "kubernetes externally-visible service portals",
        "-m conntrack --ctstate NEW",
    ),
    ("filter", "INPUT", "KUBE-NODEPORTS", "kubernetes health check service ports", ""),
    ("filter", "FORWARD", "KUBE-SERVICES", "kubernetes service portals", "-m conntrack --ctstate NEW"),
    ("filter", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals", "-m conntrack --ctstate NEW"),
    ("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules", ""),
    ("filter", "INPUT", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),
    ("filter", "OUTPUT", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),
    ("filter", "FORWARD", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),
    ("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals", ""),
    ("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals", ""),
    ("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules", ""),
    // Kubelet's, which kube-proxy ensures too.
    ("filter", "INPUT", "KUBE-FIREWALL", "", ""),
    ("filter", "OUTPUT", "KUBE-FIREWALL", "", ""),
];

/// kube-proxy's copy of kubelet's martian-packet rule (IPv4 only; both write it).
const LOCALNET_RULE: &str = "-m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP";

/// The `iptables-restore --noflush` input of a full sync of `ports` (all of `family`), with
/// `cluster_cidr` as the local-traffic detector, as kube-proxy writes it: the filter table,
/// then the nat table; no built-in chain is named, so their rules stay.
pub fn restore_input(ports: &[SvcPort], cluster_cidr: &str, family: Family) -> String {
    let mut s = String::with_capacity(ports.len() * 2048 + 2048);
    filter_table(&mut s, ports, family);
    nat_table(&mut s, ports, cluster_cidr, family, &[]);
    s
}

/// The same rules, whole, for a flushing `iptables-restore` of a namespace with nothing else:
/// the built-in chains declared with kube-proxy's jumps in them (the data-plane benchmark's).
pub fn standalone_restore_input(ports: &[SvcPort], cluster_cidr: &str) -> String {
    let text = restore_input(ports, cluster_cidr, Family::V4);
    let builtin = |table: &str| -> &[&str] {
        match table {
            "filter" => &["INPUT", "FORWARD", "OUTPUT"],
            _ => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        }
    };
    let mut out = String::with_capacity(text.len() + 4096);
    let mut table = "";
    let mut jumps_due = false;
    for line in text.lines() {
        // The jumps go after the table's chain declarations, before its first rule.
        if jumps_due && (line.starts_with("-A ") || line == "COMMIT") {
            // In the order the prepending leaves them: the last one first.
            for (_, from, to, comment, extra) in JUMPS.iter().rev().filter(|j| j.0 == table) {
                let _ = writeln!(out, "-A {from} {}", jump_args(to, comment, extra));
            }
            jumps_due = false;
        }
        out.push_str(line);
        out.push('\n');
        if let Some(t) = line.strip_prefix('*') {
            table = t;
            for chain in builtin(table) {
                let _ = writeln!(out, ":{chain} ACCEPT [0:0]");
            }
            jumps_due = true;
        }
    }
    out
}

fn jump_args(to: &str, comment: &str, extra: &str) -> String {
    let mut args = String::new();
    if !extra.is_empty() {
        args.push_str(extra);
        args.push(' ');
    }
    if !comment.is_empty() {
        let _ = write!(args, "-m comment --comment \"{comment}\" ");
    }
    let _ = write!(args, "-j {to}");
    args
}

fn filter_table(s: &mut String, ports: &[SvcPort], family: Family) {
    s.push_str("*filter\n");
    for c in ["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL"] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    if family == Family::V4 {
        s.push_str(":KUBE-FIREWALL - [0:0]\n");
        let _ = writeln!(s, "-A KUBE-FIREWALL {LOCALNET_RULE}");
    }
    let bits = family.host_bits();
    for p in ports.iter().filter(|p| p.endpoints.is_empty()) {
        let (name, proto) = (p.name(), &p.proto);
        let _ = writeln!(
            s,
            "-A KUBE-SERVICES -m comment --comment \"{name} has no endpoints\" -m {proto} -p {proto} -d {}/{bits} --dport {} -j REJECT",
            p.vip, p.port
        );
        if let Some(np) = p.node_port {
            let _ = writeln!(
                s,
                "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"{name} has no endpoints\" -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {np} -j REJECT"
            );
        }
    }
    s.push_str("-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n");
    let _ = writeln!(
        s,
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT"
    );
    s.push_str("-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n");
    s.push_str("COMMIT\n");
}

/// Whether `chain` is one of kube-proxy's per-Service nat chains (which a full sync deletes
/// when no Service uses them).
fn is_service_chain(chain: &str) -> bool {
    ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"].iter().any(|p| chain.starts_with(p))
}

fn nat_table(s: &mut String, ports: &[SvcPort], cluster_cidr: &str, family: Family, stale: &[String]) {
    s.push_str("*nat\n");
    for c in ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    let live: Vec<&SvcPort> = ports.iter().filter(|p| !p.endpoints.is_empty()).collect();
    for p in &live {
        if p.node_port.is_some() {
            let _ = writeln!(s, ":{} - [0:0]", ext_chain(p));
        }
        let _ = writeln!(s, ":{} - [0:0]", svc_chain(p));
        for ep in &p.endpoints {
            let _ = writeln!(s, ":{} - [0:0]", sep_chain(p, ep));
        }
    }
    for c in stale {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    let _ = writeln!(s, "-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN");
    let _ = writeln!(s, "-A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}");
    s.push_str(
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    );
    let _ = writeln!(s, "-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}");
    let bits = family.host_bits();
    for p in &live {
        let (svc, proto, name) = (svc_chain(p), &p.proto, p.name());
        let _ = writeln!(
            s,
            "-A KUBE-SERVICES -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {}/{bits} --dport {} -j {svc}",
            p.vip, p.port
        );
        if let Some(np) = p.node_port {
            let ext = ext_chain(p);
            let _ = writeln!(
                s,
                "-A KUBE-NODEPORTS -m comment --comment {name} -m {proto} -p {proto} --dport {np} -j {ext}"
            );
            let _ = writeln!(
                s,
                "-A {ext} -m comment --comment \"masquerade traffic for {name} external destinations\" -j KUBE-MARK-MASQ"
            );
            let _ = writeln!(s, "-A {ext} -j {svc}");
        }
        let _ = writeln!(
            s,
            "-A {svc} -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {}/{bits} --dport {} ! -s {cluster_cidr} -j KUBE-MARK-MASQ",
            p.vip, p.port
        );
        let n = p.endpoints.len();
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = sep_chain(p, ep);
            if i + 1 < n {
                let probability = 1.0 / (n - i) as f64;
                let _ = writeln!(
                    s,
                    "-A {svc} -m comment --comment \"{name} -> {ep}\" -m statistic --mode random --probability {probability:.10} -j {sep}"
                );
            } else {
                let _ = writeln!(s, "-A {svc} -m comment --comment \"{name} -> {ep}\" -j {sep}");
            }
        }
        for ep in &p.endpoints {
            let sep = sep_chain(p, ep);
            let _ = writeln!(s, "-A {sep} -m comment --comment {name} -s {}/{bits} -j KUBE-MARK-MASQ", ep.ip);
            let _ =
                writeln!(s, "-A {sep} -m comment --comment {name} -m {proto} -p {proto} -j DNAT --to-destination {ep}");
        }
    }
    let not_localhost = if family == Family::V6 { " ! -d ::1/128" } else { "" };
    let _ = writeln!(
        s,
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL{not_localhost} -j KUBE-NODEPORTS"
    );
    for c in stale {
        let _ = writeln!(s, "-X {c}");
    }
    s.push_str("COMMIT\n");
}

/// Whether `backend` works in `ns` (legacy needs the kernel's x_tables nat table).
pub fn available(ns: &Netns, backend: Backend) -> Result<()> {
    let program = backend.program(Family::V4, "iptables");
    let out = ns.exec(&[&program, "-t", "nat", "-S"])?;
    if !out.status.success() {
        bail!(
            "{program} cannot use the nat table here (legacy needs the ip_tables and iptable_nat modules): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn iptables(ns: &Netns, backend: Backend, family: Family, args: &[&str]) -> Result<std::process::Output> {
    let program = backend.program(family, "iptables");
    let mut cmd = vec![program.as_str()];
    cmd.extend_from_slice(args);
    ns.exec(&cmd)
}

/// `EnsureChain`: creates `chain` in `table` unless it exists.
pub(crate) fn ensure_chain(ns: &Netns, backend: Backend, family: Family, table: &str, chain: &str) -> Result<()> {
    if iptables(ns, backend, family, &["-t", table, "-S", chain])?.status.success() {
        return Ok(());
    }
    let out = iptables(ns, backend, family, &["-t", table, "-N", chain])?;
    if !out.status.success() {
        bail!("creating {table} {chain}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// `EnsureRule`: adds the rule (at the top of `chain` with `prepend`, else at its end) unless
/// `-C` finds it.
pub(crate) fn ensure_rule(
    ns: &Netns,
    backend: Backend,
    family: Family,
    table: &str,
    chain: &str,
    prepend: bool,
    rule: &[&str],
) -> Result<()> {
    let mut check = vec!["-t", table, "-C", chain];
    check.extend_from_slice(rule);
    if iptables(ns, backend, family, &check)?.status.success() {
        return Ok(());
    }
    let mut add = vec!["-t", table, if prepend { "-I" } else { "-A" }, chain];
    add.extend_from_slice(rule);
    let out = iptables(ns, backend, family, &add)?;
    if !out.status.success() {
        bail!("adding {rule:?} to {table} {chain}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Splits a rule as a shell would (double quotes group words).
pub(crate) fn words(rule: &str) -> Vec<String> {
    let (mut out, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in rule.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// What kubelet keeps in place (`syncIPTablesRules` and its canary monitor), for `family`.
pub fn kubelet(ns: &Netns, backend: Backend, family: Family) -> Result<()> {
    ensure_chain(ns, backend, family, "mangle", "KUBE-IPTABLES-HINT")?;
    for table in ["mangle", "nat", "filter"] {
        ensure_chain(ns, backend, family, table, "KUBE-KUBELET-CANARY")?;
    }
    if family == Family::V4 {
        ensure_chain(ns, backend, family, "filter", "KUBE-FIREWALL")?;
        for chain in ["OUTPUT", "INPUT"] {
            ensure_rule(ns, backend, family, "filter", chain, true, &["-j", "KUBE-FIREWALL"])?;
        }
        let rule = words(
            "-m comment --comment \"block incoming localnet connections\" --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
        );
        let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
        ensure_rule(ns, backend, family, "filter", "KUBE-FIREWALL", false, &rule)?;
    }
    Ok(())
}

/// The per-Service nat chains in the kernel that `ports` do not use (a full sync deletes them).
fn stale_chains(ns: &Netns, backend: Backend, family: Family, ports: &[SvcPort]) -> Result<Vec<String>> {
    let out = iptables(ns, backend, family, &["-t", "nat", "-S"])?;
    let mut wanted = BTreeSet::new();
    for p in ports.iter().filter(|p| !p.endpoints.is_empty()) {
        wanted.insert(svc_chain(p));
        wanted.insert(ext_chain(p));
        wanted.extend(p.endpoints.iter().map(|ep| sep_chain(p, ep)));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| is_service_chain(c) && !wanted.contains(*c))
        .map(str::to_string)
        .collect())
}

/// kube-proxy's iptables mode (and kubelet) starting on `ns`, or resyncing there.
pub fn apply(ns: &Netns, backend: Backend, kp: &KubeProxy) -> Result<()> {
    available(ns, backend)?;
    super::conntrack_sysctls(ns)?;
    // iptables.localhostNodePorts (on by default) needs it.
    ns.sysctl("net.ipv4.conf.all.route_localnet", "1")?;
    let families: &[(Family, &[SvcPort])] = if kp.node.ipv6.is_some() {
        &[(Family::V4, &kp.ports_v4), (Family::V6, &kp.ports_v6)]
    } else {
        &[(Family::V4, &kp.ports_v4)]
    };
    for &(family, ports) in families {
        let Some(cidr) = kp.node.cluster_cidr(family) else { continue };
        kubelet(ns, backend, family)?;
        for table in ["mangle", "nat", "filter"] {
            ensure_chain(ns, backend, family, table, "KUBE-PROXY-CANARY")?;
        }
        for (table, from, to, comment, extra) in JUMPS {
            ensure_chain(ns, backend, family, table, to)?;
            let rule = words(&jump_args(to, comment, extra));
            let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
            ensure_rule(ns, backend, family, table, from, true, &rule)?;
        }
        let stale = stale_chains(ns, backend, family, ports)?;
        let mut input = String::new();
        filter_table(&mut input, ports, family);
        nat_table(&mut input, ports, cidr, family, &stale);
        let restore = backend.program(family, "iptables-restore");
        feed(ns, &[&restore, "--noflush", "--counters"], &input)?;
    }
    Ok(())
}

/// `iptables-save` and `ip6tables-save` of `backend` in `ns`, without counters and comments
/// about the time.
pub fn saved(ns: &Netns, backend: Backend) -> Result<String> {
    let mut out = String::new();
    for family in [Family::V4, Family::V6] {
        let text = ns.check(&[&backend.program(family, "iptables-save")])?;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            // Chain lines carry counters: `:INPUT ACCEPT [12:345]`.
            let line = match line.rsplit_once(" [") {
                Some((head, _)) if line.starts_with(':') => head,
                _ => line,
            };
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
