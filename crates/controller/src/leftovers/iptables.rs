//! kube-proxy's iptables leftovers (its iptables and ipvs modes), for each iptables backend.
//!
//! Like upstream's `CleanupLeftovers`, one `*-save` shows what exists and one
//! `*-restore --noflush` per table removes it atomically: declaring a chain flushes it, `-D`
//! removes the jumps to it from the built-in chains, `-X` deletes it. Parsing the save output
//! and writing the restore input are pure functions, below; running the programs is at the end.
//!
//! Ownership follows upstream exactly: kube-proxy's chains are the fixed names its iptables
//! and ipvs proxiers create (and clean up), and the per-service chains (`KUBE-SVC-`,
//! `KUBE-SVL-`, `KUBE-SEP-`, `KUBE-FW-`, `KUBE-EXT-`, and the older `KUBE-XLB-`) in `nat`.
//! Chains kubelet creates (`KUBE-FIREWALL` in `filter`, `KUBE-KUBELET-CANARY`,
//! `KUBE-MARK-DROP`, `KUBE-IPTABLES-HINT`) are not kube-proxy's and stay, as does every rule in
//! a chain that stays, except jumps from built-in chains to the chains that go.

use super::{ExecError, LeftoverReport, find_program, run};
use std::collections::BTreeSet;
use std::path::Path;

/// Fixed chain names kube-proxy creates in `nat` (iptables mode, ipvs mode, older releases).
/// `KUBE-FIREWALL` in `nat` is the old ipvs proxier's (kubelet's is in `filter`).
const NAT_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-PROXY-CANARY",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL",
];

/// Fixed chain names kube-proxy creates in `filter`.
const FILTER_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FORWARD",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-FIREWALL",
    "KUBE-PROXY-CANARY",
    "KUBE-NODE-PORT",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
];

/// Fixed chain names kube-proxy creates in `mangle`.
const MANGLE_CHAINS: &[&str] = &["KUBE-PROXY-CANARY"];

/// Prefixes of the per-service and per-endpoint chains of the iptables proxier (`nat`).
const SERVICE_CHAIN_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-FW-", "KUBE-EXT-", "KUBE-XLB-"];

/// The tables kube-proxy writes to.
const TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// Whether `chain` in `table` is one kube-proxy creates.
pub(crate) fn owned_by_kube_proxy(table: &str, chain: &str) -> bool {
    match table {
        "nat" => NAT_CHAINS.contains(&chain) || SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p)),
        "filter" => FILTER_CHAINS.contains(&chain),
        "mangle" => MANGLE_CHAINS.contains(&chain),
        _ => false,
    }
}

/// A chain declared in `*-save` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedChain {
    pub name: String,
    /// Built-in chains have a policy (`ACCEPT`, `DROP`); user chains show `-`.
    pub builtin: bool,
}

/// One `-A` line of `*-save` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedRule {
    pub chain: String,
    /// Everything after `-A <chain> `, exactly as printed (so it reloads as a `-D` spec).
    pub spec: String,
    /// The `-j`/`-g` target, if any.
    pub target: Option<String>,
}

/// One table of `*-save` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedTable {
    pub name: String,
    pub chains: Vec<SavedChain>,
    pub rules: Vec<SavedRule>,
}

/// `*-save` output that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected iptables-save output at line {line}: {problem}: {text:?}")]
pub(crate) struct SaveParseError {
    line: usize,
    problem: &'static str,
    text: String,
}

/// Parses `iptables-save` (or `ip6tables-save`) output, all tables.
pub(crate) fn parse_save(text: &str) -> Result<Vec<SavedTable>, SaveParseError> {
    let mut tables = Vec::new();
    let mut current: Option<SavedTable> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let err = |problem| SaveParseError { line: i + 1, problem, text: raw.to_string() };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            if current.is_some() {
                return Err(err("table starts before the previous one's COMMIT"));
            }
            current = Some(SavedTable { name: name.trim().to_string(), chains: Vec::new(), rules: Vec::new() });
            continue;
        }
        let Some(table) = current.as_mut() else {
            return Err(err("line outside a table"));
        };
        if line == "COMMIT" {
            tables.extend(current.take());
        } else if let Some(decl) = line.strip_prefix(':') {
            let mut words = decl.split_whitespace();
            let (Some(name), Some(policy)) = (words.next(), words.next()) else {
                return Err(err("chain line without a policy"));
            };
            table.chains.push(SavedChain { name: name.to_string(), builtin: policy != "-" });
        } else {
            // `[packets:bytes] -A ...` when saved with counters.
            let rule = match line.strip_prefix('[') {
                Some(rest) => rest.split_once(']').map(|(_, r)| r.trim_start()).unwrap_or(line),
                None => line,
            };
            let Some(rest) = rule.strip_prefix("-A ") else {
                return Err(err("neither a chain, a rule nor COMMIT"));
            };
            let rest = rest.trim_start();
            let (chain, spec) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let spec = spec.trim().to_string();
            table.rules.push(SavedRule { chain: chain.to_string(), target: jump_target(&spec), spec });
        }
    }
    if current.is_some() {
        return Err(SaveParseError {
            line: text.lines().count(),
            problem: "table without COMMIT",
            text: String::new(),
        });
    }
    Ok(tables)
}

/// Splits a rule spec into words as iptables-restore does (double quotes group, backslash
/// escapes inside quotes); each word says whether it was quoted.
pub(crate) fn words(spec: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut in_word, mut quoted, mut was_quoted) = (false, false, false);
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => word.extend(chars.next()),
            '"' => {
                quoted = !quoted;
                in_word = true;
                was_quoted = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push((std::mem::take(&mut word), was_quoted));
                }
                in_word = false;
                was_quoted = false;
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push((word, was_quoted));
    }
    out
}

/// The target of a rule: the word after an unquoted `-j`/`--jump`/`-g`/`--goto`.
fn jump_target(spec: &str) -> Option<String> {
    let words = words(spec);
    words
        .windows(2)
        .find(|w| !w[0].1 && matches!(w[0].0.as_str(), "-j" | "--jump" | "-g" | "--goto"))
        .map(|w| w[1].0.clone())
}

/// What to remove from one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TablePlan {
    pub table: String,
    /// kube-proxy's chains to flush and delete, in save order.
    pub chains: Vec<String>,
    /// Rules of built-in chains that jump to those chains.
    pub jumps: Vec<SavedRule>,
    /// kube-proxy's chains that must stay because a chain that stays (not built in, not
    /// kube-proxy's) jumps to them, with that chain: deleting them would fail the whole table.
    pub kept: Vec<(String, String)>,
}

/// Decides what to remove from one table of save output.
pub(crate) fn plan_table(table: &SavedTable) -> TablePlan {
    let builtin: BTreeSet<&str> = table.chains.iter().filter(|c| c.builtin).map(|c| c.name.as_str()).collect();
    let mut doomed: BTreeSet<&str> = table
        .chains
        .iter()
        .filter(|c| !c.builtin && owned_by_kube_proxy(&table.name, &c.name))
        .map(|c| c.name.as_str())
        .collect();
    // A user chain that stays may jump to one of ours (another program's rule): keep the
    // target, then whatever the kept chain jumps to, until nothing changes.
    let mut kept = Vec::new();
    loop {
        let newly: Vec<(String, String)> = table
            .rules
            .iter()
            .filter(|r| !builtin.contains(r.chain.as_str()) && !doomed.contains(r.chain.as_str()))
            .filter_map(|r| {
                let t = r.target.as_deref()?;
                doomed.contains(t).then(|| (t.to_string(), r.chain.clone()))
            })
            .collect();
        if newly.is_empty() {
            break;
        }
        for (chain, referrer) in newly {
            if doomed.remove(chain.as_str()) {
                kept.push((chain, referrer));
            }
        }
    }
    TablePlan {
        table: table.name.clone(),
        chains: table.chains.iter().filter(|c| doomed.contains(c.name.as_str())).map(|c| c.name.clone()).collect(),
        jumps: table
            .rules
            .iter()
            .filter(|r| builtin.contains(r.chain.as_str()) && r.target.as_deref().is_some_and(|t| doomed.contains(t)))
            .cloned()
            .collect(),
        kept,
    }
}

impl TablePlan {
    /// The `*-restore --noflush` input that carries the plan out, or `None` if there is
    /// nothing to remove. Declaring a chain flushes it (so chains referring to each other can
    /// all be deleted), then the jumps from built-in chains go, then the chains.
    pub(crate) fn restore_input(&self) -> Option<String> {
        if self.chains.is_empty() {
            return None;
        }
        let mut out = format!("*{}\n", self.table);
        for chain in &self.chains {
            out.push_str(&format!(":{chain} - [0:0]\n"));
        }
        for rule in &self.jumps {
            out.push_str(&format!("-D {} {}\n", rule.chain, rule.spec));
        }
        for chain in &self.chains {
            out.push_str(&format!("-X {chain}\n"));
        }
        out.push_str("COMMIT\n");
        Some(out)
    }

    /// The report lines for a plan carried out by backend `label`.
    fn removed_lines(&self, label: &str) -> Vec<String> {
        let jumps = self
            .jumps
            .iter()
            .map(|r| format!("{label} {} jump {} -> {}", self.table, r.chain, r.target.as_deref().unwrap_or("?")));
        let chains = self.chains.iter().map(|c| format!("{label} {} chain {c}", self.table));
        jumps.chain(chains).collect()
    }
}

/// One iptables backend and address family: a pair of save/restore programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backend {
    /// How reports name it.
    label: &'static str,
    save: &'static str,
    restore: &'static str,
    /// For the legacy backend: the kernel's list of existing tables, in the calling thread's
    /// namespace. No list, or an empty one, means no legacy table exists.
    legacy_tables: Option<&'static str>,
}

const NFT_V4: Backend =
    Backend { label: "iptables-nft", save: "iptables-nft-save", restore: "iptables-nft-restore", legacy_tables: None };
const NFT_V6: Backend = Backend {
    label: "ip6tables-nft",
    save: "ip6tables-nft-save",
    restore: "ip6tables-nft-restore",
    legacy_tables: None,
};
const LEGACY_V4: Backend = Backend {
    label: "iptables-legacy",
    save: "iptables-legacy-save",
    restore: "iptables-legacy-restore",
    legacy_tables: Some("/proc/thread-self/net/ip_tables_names"),
};
const LEGACY_V6: Backend = Backend {
    label: "ip6tables-legacy",
    save: "ip6tables-legacy-save",
    restore: "ip6tables-legacy-restore",
    legacy_tables: Some("/proc/thread-self/net/ip6_tables_names"),
};
const PLAIN_V4: Backend =
    Backend { label: "iptables", save: "iptables-save", restore: "iptables-restore", legacy_tables: None };
const PLAIN_V6: Backend =
    Backend { label: "ip6tables", save: "ip6tables-save", restore: "ip6tables-restore", legacy_tables: None };

/// The backends to clean, given which programs exist: the nft and legacy variants of each
/// family, or the plain programs when neither variant is installed.
fn backends(exists: impl Fn(&str) -> bool) -> Vec<Backend> {
    let mut out = Vec::new();
    for (variants, plain) in [([NFT_V4, LEGACY_V4], PLAIN_V4), ([NFT_V6, LEGACY_V6], PLAIN_V6)] {
        let found: Vec<Backend> = variants.into_iter().filter(|b| exists(b.save)).collect();
        if found.is_empty() {
            out.push(plain);
        } else {
            out.extend(found);
        }
    }
    out
}

/// Removes kube-proxy's chains and jumps from every iptables backend installed.
pub(crate) fn remove_iptables_leftovers(report: &mut LeftoverReport) {
    for backend in backends(|name| find_program(name).is_some()) {
        clean_backend(backend, report);
    }
}

/// The tables `*-save` of a backend prints, or `None` when the backend is not installed or
/// holds no table verdict looks at (a legacy back end with none loaded in this namespace).
fn read_backend(backend: &Backend) -> Option<Result<Vec<SavedTable>, String>> {
    let label = backend.label;
    let Some(save) = find_program(backend.save) else {
        tracing::debug!(backend = label, "{} not installed: skipped", backend.save);
        return None;
    };
    if let Some(list) = backend.legacy_tables {
        let tables = std::fs::read_to_string(list).unwrap_or_default();
        if !tables.lines().any(|t| TABLES.contains(&t.trim())) {
            tracing::debug!(backend = label, "no legacy nat, filter or mangle table in this namespace: skipped");
            return None;
        }
    }
    let saved = match run(&save, &[], None) {
        Ok(text) => text,
        Err(e) => return Some(Err(format!("{label}: {e}"))),
    };
    Some(parse_save(&saved).map_err(|e| format!("{label}: {e}")))
}

/// The saved tables of every iptables back end installed that holds any, by label.
pub(crate) fn saved_by_backend() -> Vec<(&'static str, Result<Vec<SavedTable>, String>)> {
    backends(|name| find_program(name).is_some())
        .into_iter()
        .filter_map(|b| read_backend(&b).map(|saved| (b.label, saved)))
        .collect()
}

fn clean_backend(backend: Backend, report: &mut LeftoverReport) {
    let label = backend.label;
    let Some(restore) = find_program(backend.restore) else {
        tracing::debug!(backend = label, "{} not installed: skipped", backend.restore);
        return;
    };
    let tables = match read_backend(&backend) {
        None => return,
        Some(Ok(tables)) => tables,
        Some(Err(e)) => return report.failed(e),
    };
    for table in tables.iter().filter(|t| TABLES.contains(&t.name.as_str())) {
        let plan = plan_table(table);
        for (chain, referrer) in &plan.kept {
            report.failed(format!(
                "{label} {} chain {chain} kept: chain {referrer} (not kube-proxy's) jumps to it",
                plan.table
            ));
        }
        let Some(input) = plan.restore_input() else { continue };
        tracing::debug!(backend = label, table = %plan.table, input = %input, "removing kube-proxy chains");
        match apply(&restore, &input) {
            Ok(()) => plan.removed_lines(label).into_iter().for_each(|line| report.removed(line)),
            Err(e) => report.failed(format!("{label} {}: {e}", plan.table)),
        }
    }
}

fn apply(restore: &Path, input: &str) -> Result<(), ExecError> {
    run(restore, &["--noflush", "--wait=10"], Some(input)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node after kube-proxy in iptables mode, with kubelet's chains, Docker's and a
    /// user's rules.
    const SAVE: &str = r#"# Generated by iptables-nft-save v1.8.9 (nf_tables) on Sun Nov 22 12:49:48 2026
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
# Completed on Sun Nov 22 12:49:48 2026
# Generated by iptables-nft-save v1.8.9 (nf_tables) on Sun Nov 22 12:49:48 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -j DOCKER-USER
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A DOCKER-USER -j RETURN
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-SERVICES -d 10.96.0.50/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
# Completed on Sun Nov 22 12:49:48 2026
# Generated by iptables-nft-save v1.8.9 (nf_tables) on Sun Nov 22 12:49:48 2026
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-EXT-7EJNTS7AENER2WX5 - [0:0]
:KUBE-FW-7EJNTS7AENER2WX5 - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SEP-IT2ZTR26TO4XFPTO - [0:0]
:KUBE-SEP-N4G2XR5TDX7PQE7P - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:KUBE-SVC-7EJNTS7AENER2WX5 - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
-A KUBE-EXT-7EJNTS7AENER2WX5 -m comment --comment "masquerade traffic for default/web:http external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-7EJNTS7AENER2WX5 -j KUBE-SVC-7EJNTS7AENER2WX5
-A KUBE-FW-7EJNTS7AENER2WX5 -m comment --comment "default/web:http loadbalancer IP" -s 203.0.113.0/24 -j KUBE-EXT-7EJNTS7AENER2WX5
-A KUBE-FW-7EJNTS7AENER2WX5 -m comment --comment "default/web:http loadbalancer IP" -j KUBE-MARK-DROP
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-7EJNTS7AENER2WX5
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-IT2ZTR26TO4XFPTO -s 10.244.0.5/32 -m comment --comment "default/kubernetes:https" -j KUBE-MARK-MASQ
-A KUBE-SEP-IT2ZTR26TO4XFPTO -p tcp -m comment --comment "default/kubernetes:https" -m tcp -j DNAT --to-destination 172.18.0.2:6443
-A KUBE-SEP-N4G2XR5TDX7PQE7P -s 10.244.1.3/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-N4G2XR5TDX7PQE7P -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.244.1.3:8080
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SERVICES -d 203.0.113.10/32 -p tcp -m comment --comment "default/web:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-7EJNTS7AENER2WX5
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-NPX46M4PTMTKRN6Y ! -s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-MARK-MASQ
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 172.18.0.2:6443" -j KUBE-SEP-IT2ZTR26TO4XFPTO
-A KUBE-SVC-7EJNTS7AENER2WX5 -m comment --comment "default/web:http -> 10.244.1.3:8080" -j KUBE-SEP-N4G2XR5TDX7PQE7P
COMMIT
# Completed on Sun Nov 22 12:49:48 2026
"#;

    fn table<'a>(tables: &'a [SavedTable], name: &str) -> &'a SavedTable {
        tables.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no table {name}"))
    }

    #[test]
    fn parses_tables_chains_and_rules() {
        let tables = parse_save(SAVE).expect("parses");
        assert_eq!(tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["mangle", "filter", "nat"]);
        let nat = table(&tables, "nat");
        assert_eq!(nat.chains.len(), 18);
        assert!(nat.chains[0] == SavedChain { name: "PREROUTING".into(), builtin: true });
        assert!(nat.chains[4] == SavedChain { name: "DOCKER".into(), builtin: false });
        assert_eq!(
            nat.rules[0],
            SavedRule {
                chain: "PREROUTING".into(),
                spec: r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#.into(),
                target: Some("KUBE-SERVICES".into()),
            }
        );
        // Targets with options, and a quoted "-> " that is not a jump.
        let masq = nat.rules.iter().find(|r| r.spec.contains("--random-fully")).expect("masquerade rule");
        assert_eq!(masq.target.as_deref(), Some("MASQUERADE"));
        let filter = table(&tables, "filter");
        assert_eq!(filter.chains.iter().filter(|c| c.builtin).count(), 3);
        assert_eq!(filter.rules.iter().filter(|r| r.chain == "INPUT").count(), 5);
        assert_eq!(table(&tables, "mangle").rules, []);
    }

    #[test]
    fn quoted_words_are_never_targets() {
        assert_eq!(jump_target(r#"-m comment --comment "x -j KUBE-SERVICES" -j ACCEPT"#).as_deref(), Some("ACCEPT"));
        assert_eq!(jump_target(r#"-m comment --comment "-j" -g KUBE-SVC-X"#).as_deref(), Some("KUBE-SVC-X"));
        assert_eq!(jump_target(r#"-m comment --comment "say \"-j\" here" --jump DROP"#).as_deref(), Some("DROP"));
        assert_eq!(jump_target("-p tcp -m tcp --dport 22"), None);
    }

    #[test]
    fn parses_counters_and_rejects_garbage() {
        let tables = parse_save("*nat\n:PREROUTING ACCEPT [1:2]\n[3:4] -A PREROUTING -j KUBE-SERVICES\nCOMMIT\n")
            .expect("parses");
        assert_eq!(tables[0].rules[0].chain, "PREROUTING");
        assert_eq!(tables[0].rules[0].target.as_deref(), Some("KUBE-SERVICES"));
        assert!(parse_save("-A PREROUTING -j ACCEPT\n").is_err());
        assert!(parse_save("*nat\n:PREROUTING ACCEPT [0:0]\n").is_err());
        assert!(parse_save("*nat\nbogus\nCOMMIT\n").is_err());
        assert_eq!(parse_save("").expect("empty"), []);
    }

    #[test]
    fn plans_exactly_kube_proxys_chains_and_jumps() {
        let tables = parse_save(SAVE).expect("parses");

        let nat = plan_table(table(&tables, "nat"));
        assert_eq!(
            nat.chains,
            [
                "KUBE-EXT-7EJNTS7AENER2WX5",
                "KUBE-FW-7EJNTS7AENER2WX5",
                "KUBE-MARK-MASQ",
                "KUBE-NODEPORTS",
                "KUBE-POSTROUTING",
                "KUBE-PROXY-CANARY",
                "KUBE-SEP-IT2ZTR26TO4XFPTO",
                "KUBE-SEP-N4G2XR5TDX7PQE7P",
                "KUBE-SERVICES",
                "KUBE-SVC-NPX46M4PTMTKRN6Y",
                "KUBE-SVC-7EJNTS7AENER2WX5",
            ]
        );
        let jumps: Vec<_> = nat.jumps.iter().map(|r| (r.chain.as_str(), r.target.as_deref())).collect();
        assert_eq!(
            jumps,
            [
                ("PREROUTING", Some("KUBE-SERVICES")),
                ("OUTPUT", Some("KUBE-SERVICES")),
                ("POSTROUTING", Some("KUBE-POSTROUTING"))
            ]
        );
        assert_eq!(nat.kept, []);

        let filter = plan_table(table(&tables, "filter"));
        assert_eq!(
            filter.chains,
            [
                "KUBE-EXTERNAL-SERVICES",
                "KUBE-FORWARD",
                "KUBE-NODEPORTS",
                "KUBE-PROXY-CANARY",
                "KUBE-PROXY-FIREWALL",
                "KUBE-SERVICES"
            ]
        );
        assert_eq!(filter.jumps.len(), 9, "{:#?}", filter.jumps);
        assert!(filter.jumps.iter().all(|r| r.target.as_deref() != Some("KUBE-FIREWALL")));

        let mangle = plan_table(table(&tables, "mangle"));
        assert_eq!(mangle.chains, ["KUBE-PROXY-CANARY"]);
        assert_eq!(mangle.jumps, []);
    }

    #[test]
    fn kubelets_and_other_chains_are_not_kube_proxys() {
        for chain in ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", "DOCKER", "KUBE-MARK-DROP"] {
            assert!(!owned_by_kube_proxy("filter", chain), "{chain}");
        }
        for chain in ["KUBE-MARK-DROP", "KUBE-KUBELET-CANARY", "DOCKER", "KUBE-HOSTPORTS", "CNI-HOSTPORT-DNAT"] {
            assert!(!owned_by_kube_proxy("nat", chain), "{chain}");
        }
        for chain in ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"] {
            assert!(!owned_by_kube_proxy("mangle", chain), "{chain}");
        }
        assert!(!owned_by_kube_proxy("raw", "KUBE-SERVICES"));
        assert!(!owned_by_kube_proxy("filter", "KUBE-SVC-ABCDEF"), "service chains live in nat only");
        // ipvs mode's chains.
        for chain in ["KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-MARK-MASQ"] {
            assert!(owned_by_kube_proxy("nat", chain), "{chain}");
        }
        for chain in ["KUBE-FORWARD", "KUBE-NODE-PORT", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER"] {
            assert!(owned_by_kube_proxy("filter", chain), "{chain}");
        }
    }

    #[test]
    fn restore_input_flushes_unlinks_then_deletes() {
        let tables = parse_save(SAVE).expect("parses");
        let input = plan_table(table(&tables, "nat")).restore_input().expect("work to do");
        let lines: Vec<&str> = input.lines().collect();
        assert_eq!(lines[0], "*nat");
        assert_eq!(lines[1], ":KUBE-EXT-7EJNTS7AENER2WX5 - [0:0]");
        assert_eq!(lines[12], r#"-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#);
        assert_eq!(lines[13], r#"-D OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#);
        assert_eq!(
            lines[14],
            r#"-D POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING"#
        );
        assert_eq!(lines[15], "-X KUBE-EXT-7EJNTS7AENER2WX5");
        assert_eq!(lines.last(), Some(&"COMMIT"));
        assert_eq!(lines.len(), 1 + 11 + 3 + 11 + 1);
        for keep in ["DOCKER", "KUBE-MARK-DROP", "KUBE-KUBELET-CANARY", "MASQUERADE", "PREROUTING -m addrtype"] {
            assert!(!input.contains(keep), "{keep} must stay:\n{input}");
        }

        let mangle = plan_table(table(&tables, "mangle")).restore_input().expect("canary");
        assert_eq!(mangle, "*mangle\n:KUBE-PROXY-CANARY - [0:0]\n-X KUBE-PROXY-CANARY\nCOMMIT\n");
    }

    #[test]
    fn nothing_to_do_after_cleanup() {
        let clean = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-MARK-DROP - [0:0]\n\
                     :KUBE-KUBELET-CANARY - [0:0]\n-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE\nCOMMIT\n\
                     *filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n";
        for t in parse_save(clean).expect("parses") {
            let plan = plan_table(&t);
            assert_eq!(plan, TablePlan { table: t.name.clone(), ..TablePlan::default() });
            assert_eq!(plan.restore_input(), None);
        }
    }

    #[test]
    fn a_foreign_chain_jumping_to_ours_keeps_it_and_what_it_needs() {
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-MASQ - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
                    :KUBE-SERVICES - [0:0]\n:KUBE-SVC-AAAA - [0:0]\n\
                    -A PREROUTING -j KUBE-SERVICES\n-A PREROUTING -j KUBE-MARK-MASQ\n\
                    -A CNI-HOSTPORT-MASQ -j KUBE-MARK-MASQ\n-A KUBE-SERVICES -j KUBE-SVC-AAAA\n\
                    -A KUBE-SVC-AAAA -j KUBE-MARK-MASQ\nCOMMIT\n";
        let plan = plan_table(&parse_save(save).expect("parses")[0]);
        assert_eq!(plan.chains, ["KUBE-SERVICES", "KUBE-SVC-AAAA"]);
        assert_eq!(plan.kept, [("KUBE-MARK-MASQ".to_string(), "CNI-HOSTPORT-MASQ".to_string())]);
        assert_eq!(plan.jumps.len(), 1, "the jump to the kept chain stays");
        assert_eq!(plan.jumps[0].target.as_deref(), Some("KUBE-SERVICES"));
    }

    #[test]
    fn report_lines_name_backend_table_and_object() {
        let tables = parse_save(SAVE).expect("parses");
        let lines = plan_table(table(&tables, "nat")).removed_lines("iptables-nft");
        assert!(lines.contains(&"iptables-nft nat chain KUBE-SERVICES".to_string()), "{lines:#?}");
        assert!(lines.contains(&"iptables-nft nat jump PREROUTING -> KUBE-SERVICES".to_string()), "{lines:#?}");
        assert_eq!(lines.len(), 14);
    }

    #[test]
    fn backends_prefer_variants_and_fall_back_to_plain_programs() {
        let labels = |have: &[&str]| -> Vec<&str> {
            let have = have.to_vec();
            backends(|p| have.contains(&p)).into_iter().map(|b| b.label).collect()
        };
        assert_eq!(
            labels(&["iptables-nft-save", "iptables-legacy-save", "ip6tables-nft-save", "ip6tables-legacy-save"]),
            ["iptables-nft", "iptables-legacy", "ip6tables-nft", "ip6tables-legacy"]
        );
        assert_eq!(labels(&["iptables-nft-save", "iptables-save"]), ["iptables-nft", "ip6tables"]);
        assert_eq!(labels(&[]), ["iptables", "ip6tables"]);
    }
}
