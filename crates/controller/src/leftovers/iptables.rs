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
mod tests;
