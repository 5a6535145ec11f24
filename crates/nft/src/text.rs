//! nft syntax for rulesets and transactions.
//!
//! [`listing`] prints a ruleset exactly as `nft list table inet <name>` prints the same table
//! (nft 1.0.6): the kernel tests compare the two byte for byte, so an operator reading `nft`
//! output sees what verdict meant to write. [`script`] prints a transaction as an `nft -f` file,
//! for dry runs, logs and the benchmark's `nft -f` baseline.

use crate::rule::{
    CT_STATE_ESTABLISHED, CT_STATE_INVALID, CT_STATE_NEW, CT_STATUS_DNAT, DnatTarget, Item, Match, Op, Reject, Rule,
    Selector, Stmt, Value, decode_concat,
};
use crate::ruleset::{
    BaseChain, Blob, Chain, ChainKind, DataSpec, Datatype, Elem, ElemData, ElementMap, Flowtable, Hook, KeySpec,
    Ruleset, Set, SetDecl,
};
use crate::transaction::{Op as TxOp, Transaction};
use std::fmt::Write;
use std::net::IpAddr;
use verdict_net::IpFamily;

/// The table as `nft list table inet <name>` prints it.
pub fn listing(rs: &Ruleset) -> String {
    let mut out = format!("table inet {} {{\n", rs.table.name);
    if let Some(c) = &rs.table.comment {
        let _ = writeln!(out, "\tcomment {}", quote(c));
    }
    let mut blocks: Vec<String> = Vec::new();
    for set in rs.sets.values() {
        blocks.push(set_block(set));
    }
    for flowtable in rs.flowtables.values() {
        blocks.push(flowtable_block(flowtable));
    }
    for chain in rs.chains.values() {
        blocks.push(chain_block(chain));
    }
    out.push_str(&blocks.join("\n"));
    out.push_str("}\n");
    out
}

fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

fn flowtable_block(ft: &Flowtable) -> String {
    let mut out = format!("\tflowtable {} {{\n", ft.name);
    let _ = writeln!(out, "\t\thook ingress priority {}", flowtable_priority(ft.priority));
    if !ft.devices.is_empty() {
        let _ = writeln!(out, "\t\tdevices = {{ {} }}", ft.devices.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    out.push_str("\t}\n");
    out
}

/// nft's spelling of an ingress priority: `filter` and offsets from it.
fn flowtable_priority(p: i32) -> String {
    match p {
        0 => "filter".into(),
        p if p > 0 => format!("filter + {p}"),
        p => format!("filter - {}", -p),
    }
}

fn set_block(set: &Set) -> String {
    let d = &set.decl;
    let kind = if d.data.is_some() { "map" } else { "set" };
    let mut out = format!("\t{kind} {} {{\n", d.name);
    let _ = writeln!(out, "\t\t{}", type_line(d));
    if let Some(size) = d.size {
        let _ = writeln!(out, "\t\tsize {size}");
    }
    if let Some(t) = d.timeout {
        let _ = writeln!(out, "\t\tflags dynamic,timeout");
        let _ = writeln!(out, "\t\ttimeout {}", duration(t));
    }
    if d.counter {
        let _ = writeln!(out, "\t\tcounter");
    }
    if let Some(c) = &d.comment {
        let _ = writeln!(out, "\t\tcomment {}", quote(c));
    }
    if !set.elements.is_empty() {
        let _ = writeln!(out, "\t\telements = {{ {} }}", elements(d, &set.elements));
    }
    out.push_str("\t}\n");
    out
}

/// `type ...` or `typeof ...` with the data part for maps.
pub(crate) fn type_line(d: &SetDecl) -> String {
    let key = match &d.key {
        KeySpec::Type(types) => format!("type {}", types.iter().map(|t| t.name()).collect::<Vec<_>>().join(" . ")),
        KeySpec::Typeof(sels) => format!("typeof {}", concat_expr(sels)),
    };
    match &d.data {
        None => key,
        Some(DataSpec::Verdict) => format!("{key} : verdict"),
        Some(DataSpec::Typeof(sels)) => format!("{key} : {}", concat_expr(sels)),
    }
}

/// nft's duration spelling (`3h`, `10s`, `1d3h`).
pub fn duration(secs: u32) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, n) in [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)] {
        if rest >= n {
            let _ = write!(out, "{}{unit}", rest / n);
            rest %= n;
        }
    }
    out
}

/// The elements in nft's order and line layout.
fn elements(d: &SetDecl, elems: &ElementMap) -> String {
    let key_types = d.key_types();
    // nft sorts by value: concatenations (and host-order integers) compare as host-endian
    // numbers, addresses and ports as network-order numbers.
    let host_order = key_types.len() > 1 || !key_types[0].big_endian();
    let mut sorted: Vec<(Blob, Elem)> = elems.iter().collect();
    sorted.sort_by_cached_key(|(k, _)| {
        let mut b = k.as_slice().to_vec();
        if host_order {
            b.reverse();
        }
        b
    });
    // Plain IPv4 sets print two per line, other single types sixteen, everything else one.
    let per_line = match key_types.as_slice() {
        [Datatype::Ipv4Addr] => 2,
        [Datatype::InetProto | Datatype::InetService | Datatype::Integer | Datatype::Mark] => 16,
        _ => 1,
    };
    let data_types = d.data.as_ref().map(|s| s.datatypes()).unwrap_or_default();
    let mut out = String::new();
    for (i, (key, elem)) in sorted.iter().enumerate() {
        if i > 0 {
            out.push_str(if i % per_line == 0 { ",\n\t\t\t     " } else { ", " });
        }
        out.push_str(&values(&key_types, key.as_slice()));
        if d.counter {
            // What nft lists for a freshly programmed element (the values live in the kernel
            // only, see `netlink::counters`); nft reloads it as a zeroed counter.
            out.push_str(" counter packets 0 bytes 0");
        }
        if let Some(c) = &elem.comment {
            let _ = write!(out, " comment {}", quote(c));
        }
        match &elem.data {
            None => {}
            Some(ElemData::Verdict(v)) => {
                let _ = write!(out, " : {v}");
            }
            Some(ElemData::Value(b)) => {
                let _ = write!(out, " : {}", values(&data_types, b.as_slice()));
            }
        }
    }
    out
}

/// A key or data blob as nft prints it (`10.0.0.1 . tcp . 80`).
pub fn values(types: &[Datatype], bytes: &[u8]) -> String {
    match decode_concat(types, bytes) {
        Some(vals) => vals.iter().map(value).collect::<Vec<_>>().join(" . "),
        None => format!("0x{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

/// One constant as nft prints it.
pub fn value(v: &Value) -> String {
    match v {
        Value::Addr(a) => a.to_string(),
        Value::Proto(p) => match verdict_net::Protocol::from_number(*p) {
            Some(proto) => proto.lower().to_string(),
            None => p.to_string(),
        },
        Value::Port(p) => p.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Local => "local".to_string(),
        Value::Ifname(n) => quote(n),
    }
}

fn chain_block(chain: &Chain) -> String {
    let mut out = format!("\tchain {} {{\n", chain.name);
    if let Some(b) = &chain.base {
        let _ = writeln!(out, "\t\t{}", base_line(b));
    }
    for rule in &chain.rules {
        let _ = writeln!(out, "\t\t{}", rule_text(rule));
    }
    out.push_str("\t}\n");
    out
}

/// `type nat hook prerouting priority dstnat; policy accept;`
pub(crate) fn base_line(b: &BaseChain) -> String {
    format!(
        "type {} hook {} priority {}; policy accept;",
        b.kind.name(),
        b.hook.name(),
        priority(b.kind, b.hook, b.priority)
    )
}

/// nft's spelling of a priority: a standard name when within 10 of one valid for the hook.
pub fn priority(kind: ChainKind, hook: Hook, prio: i32) -> String {
    let _ = kind;
    let mut named = vec![("raw", -300), ("mangle", -150), ("filter", 0), ("security", 50)];
    if hook == Hook::Prerouting {
        named.push(("dstnat", -100));
    }
    if hook == Hook::Postrouting {
        named.push(("srcnat", 100));
    }
    for (name, base) in named {
        let offset = prio - base;
        if offset == 0 {
            return name.to_string();
        }
        if (-10..=10).contains(&offset) {
            return format!("{name} {} {}", if offset > 0 { "+" } else { "-" }, offset.abs());
        }
    }
    prio.to_string()
}

fn selector(s: &Selector) -> String {
    let fam = |f: &IpFamily| match f {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    };
    match s {
        Selector::Saddr(f) => format!("{} saddr", fam(f)),
        Selector::Daddr(f) => format!("{} daddr", fam(f)),
        Selector::L4Proto => "meta l4proto".into(),
        Selector::ThDport => "th dport".into(),
        Selector::Mark => "meta mark".into(),
        Selector::IifName => "iifname".into(),
        Selector::Numgen(m) => format!("numgen random mod {m}"),
        Selector::FibSaddrType => "fib saddr type".into(),
        Selector::FibDaddrType => "fib daddr type".into(),
        Selector::CtState => "ct state".into(),
        Selector::CtStatus => "ct status".into(),
    }
}

fn concat_expr(sels: &[Selector]) -> String {
    sels.iter().map(selector).collect::<Vec<_>>().join(" . ")
}

fn neq(op: Op) -> &'static str {
    match op {
        Op::Eq => "",
        Op::Neq => "!= ",
    }
}

fn flag_names(sel: &Selector, flags: u32) -> String {
    match (sel, flags) {
        (Selector::CtState, CT_STATE_INVALID) => "invalid".into(),
        (Selector::CtState, CT_STATE_NEW) => "new".into(),
        (Selector::CtState, CT_STATE_ESTABLISHED) => "established".into(),
        (Selector::CtStatus, CT_STATUS_DNAT) => "dnat".into(),
        _ => format!("0x{flags:08x}"),
    }
}

/// One rule as nft prints it.
pub fn rule_text(rule: &Rule) -> String {
    let mut parts: Vec<String> = rule.items.iter().map(item_text).collect();
    if let Some(c) = &rule.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    parts.join(" ")
}

fn item_text(item: &Item) -> String {
    match item {
        Item::Match(m) => match m {
            Match::Cmp { left, op, right } => format!("{} {}{}", selector(left), neq(*op), value(right)),
            Match::Prefix { left, op, net } => format!("{} {}{net}", selector(left), neq(*op)),
            Match::IfnamePrefix { op, prefix } => format!("iifname {}\"{prefix}*\"", neq(*op)),
            Match::Flags { left, flags } => format!("{} {}", selector(left), flag_names(left, *flags)),
            Match::Masked { left, mask, op, right } => {
                let op = match op {
                    Op::Eq => "==",
                    Op::Neq => "!=",
                };
                format!("{} & 0x{mask:08x} {op} 0x{right:08x}", selector(left))
            }
            Match::InSet { key, set, op } => format!("{} {}@{set}", concat_expr(key), neq(*op)),
            Match::InAnonSet { left, values } => {
                let mut vals = values.clone();
                vals.sort();
                format!("{} {{ {} }}", selector(left), vals.iter().map(value).collect::<Vec<_>>().join(", "))
            }
        },
        Item::Stmt(s) => match s {
            Stmt::Verdict(v) => v.to_string(),
            Stmt::Vmap { key, map } => format!("{} vmap @{map}", concat_expr(key)),
            Stmt::AnonVmap { key, entries } => format!(
                "{} vmap {{ {} }}",
                selector(key),
                entries.iter().map(|(v, verdict)| format!("{} : {verdict}", value(v))).collect::<Vec<_>>().join(", ")
            ),
            Stmt::MarkOr(bits) => format!("meta mark set meta mark | 0x{bits:08x}"),
            Stmt::MarkXor(bits) => format!("meta mark set meta mark ^ 0x{bits:08x}"),
            Stmt::Dnat { family, target } => {
                let fam = match family {
                    IpFamily::V4 => "ip",
                    IpFamily::V6 => "ip6",
                };
                match target {
                    DnatTarget::Map { key, map } => format!("dnat {fam} to {} map @{map}", concat_expr(key)),
                    DnatTarget::Addr { addr: IpAddr::V4(a), port } => format!("dnat {fam} to {a}:{port}"),
                    DnatTarget::Addr { addr: IpAddr::V6(a), port } => format!("dnat {fam} to [{a}]:{port}"),
                }
            }
            Stmt::Masquerade { fully_random: true } => "masquerade fully-random".into(),
            Stmt::Masquerade { fully_random: false } => "masquerade".into(),
            Stmt::Reject(Reject::PortUnreachable) => "reject".into(),
            Stmt::Reject(Reject::Icmp) => "reject with icmp port-unreachable".into(),
            Stmt::Reject(Reject::Icmpv6) => "reject with icmpv6 port-unreachable".into(),
            Stmt::Counter => "counter".into(),
            Stmt::NfTrace => "meta nftrace set 1".into(),
            Stmt::Update { set, key } => format!("update @{set} {{ {} }}", selector(key)),
            Stmt::FlowAdd { flowtable } => format!("flow add @{flowtable}"),
        },
    }
}

/// Elements per `add element` command: nft 1.0.6 handles large single commands badly.
const ELEMENTS_PER_COMMAND: usize = 500;

/// A transaction as an `nft -f` script.
pub fn script(tx: &Transaction) -> String {
    let mut out = String::new();
    let t = &tx.table;
    for op in &tx.ops {
        match op {
            TxOp::AddTable(table) => match &table.comment {
                Some(c) => {
                    let _ = writeln!(out, "add table inet {t} {{ comment {}; }}", quote(c));
                }
                None => {
                    let _ = writeln!(out, "add table inet {t}");
                }
            },
            TxOp::DeleteTable => {
                let _ = writeln!(out, "delete table inet {t}");
            }
            TxOp::AddChain { name, base } => match base {
                Some(b) => {
                    let _ = writeln!(out, "add chain inet {t} {name} {{ {} }}", base_line(b));
                }
                None => {
                    let _ = writeln!(out, "add chain inet {t} {name}");
                }
            },
            TxOp::FlushChain(name) => {
                let _ = writeln!(out, "flush chain inet {t} {name}");
            }
            TxOp::DeleteChain(name) => {
                let _ = writeln!(out, "delete chain inet {t} {name}");
            }
            TxOp::AddRule { chain, rule } => {
                let _ = writeln!(out, "add rule inet {t} {chain} {}", rule_text(rule));
            }
            TxOp::AddSet(d) => {
                let kind = if d.data.is_some() { "map" } else { "set" };
                let mut body = vec![type_line(d)];
                if let Some(size) = d.size {
                    body.push(format!("size {size}"));
                }
                if let Some(timeout) = d.timeout {
                    body.push("flags dynamic,timeout".into());
                    body.push(format!("timeout {}", duration(timeout)));
                }
                if d.counter {
                    body.push("counter".into());
                }
                if let Some(c) = &d.comment {
                    body.push(format!("comment {}", quote(c)));
                }
                let _ = writeln!(out, "add {kind} inet {t} {} {{ {}; }}", d.name, body.join("; "));
            }
            TxOp::DeleteSet(name) => {
                let _ = writeln!(out, "delete set inet {t} {name}");
            }
            TxOp::AddElements { set, decl, elements: elems } => {
                let key_types = decl.key_types();
                let data_types = decl.data.as_ref().map(|s| s.datatypes()).unwrap_or_default();
                let all: Vec<(Blob, Elem)> = elems.iter().collect();
                for chunk in all.chunks(ELEMENTS_PER_COMMAND) {
                    let body: Vec<String> = chunk
                        .iter()
                        .map(|(k, e)| {
                            let mut s = values(&key_types, k.as_slice());
                            if let Some(c) = &e.comment {
                                let _ = write!(s, " comment {}", quote(c));
                            }
                            match &e.data {
                                None => {}
                                Some(ElemData::Verdict(v)) => {
                                    let _ = write!(s, " : {v}");
                                }
                                Some(ElemData::Value(b)) => {
                                    let _ = write!(s, " : {}", values(&data_types, b.as_slice()));
                                }
                            }
                            s
                        })
                        .collect();
                    let _ = writeln!(out, "add element inet {t} {set} {{ {} }}", body.join(", "));
                }
            }
            TxOp::DeleteElements { set, decl, keys } => {
                let key_types = decl.key_types();
                for chunk in keys.chunks(ELEMENTS_PER_COMMAND) {
                    let body: Vec<String> = chunk.iter().map(|k| values(&key_types, k.as_slice())).collect();
                    let _ = writeln!(out, "delete element inet {t} {set} {{ {} }}", body.join(", "));
                }
            }
            TxOp::AddFlowtable(ft) => {
                let mut body = format!("hook ingress priority {};", flowtable_priority(ft.priority));
                if !ft.devices.is_empty() {
                    let devices = ft.devices.iter().cloned().collect::<Vec<_>>().join(", ");
                    let _ = write!(body, " devices = {{ {devices} }};");
                }
                let _ = writeln!(out, "add flowtable inet {t} {} {{ {body} }}", ft.name);
            }
            TxOp::DeleteFlowtableDevices { name, devices } => {
                let priority = flowtable_priority(0);
                let _ = writeln!(
                    out,
                    "delete flowtable inet {t} {name} {{ hook ingress priority {priority}; devices = {{ {} }}; }}",
                    devices.join(", ")
                );
            }
            TxOp::DeleteFlowtable(name) => {
                let _ = writeln!(out, "delete flowtable inet {t} {name}");
            }
        }
    }
    out
}

// What a transaction says in logs and errors lives here with the rest of nft syntax, so that
// `transaction` stays plain data and imports nothing back from this file.
impl TxOp {
    /// A short description for error messages: what, and on which object.
    pub fn describe(&self) -> String {
        match self {
            TxOp::AddTable(t) => format!("add table {}", t.name),
            TxOp::DeleteTable => "delete table".into(),
            TxOp::AddChain { name, .. } => format!("add chain {name}"),
            TxOp::FlushChain(name) => format!("flush chain {name}"),
            TxOp::DeleteChain(name) => format!("delete chain {name}"),
            TxOp::AddRule { chain, rule } => format!("add rule to chain {chain}: {}", rule_text(rule)),
            TxOp::AddSet(d) => format!("add set {}", d.name),
            TxOp::DeleteSet(name) => format!("delete set {name}"),
            TxOp::AddElements { set, elements, .. } => format!("add {} element(s) to {set}", elements.len()),
            TxOp::DeleteElements { set, keys, .. } => format!("delete {} element(s) from {set}", keys.len()),
            TxOp::AddFlowtable(ft) if ft.devices.is_empty() => format!("add flowtable {}", ft.name),
            TxOp::AddFlowtable(ft) => {
                format!(
                    "add device(s) {} to flowtable {}",
                    ft.devices.iter().cloned().collect::<Vec<_>>().join(", "),
                    ft.name
                )
            }
            TxOp::DeleteFlowtableDevices { name, devices } => {
                format!("remove device(s) {} from flowtable {name}", devices.join(", "))
            }
            TxOp::DeleteFlowtable(name) => format!("delete flowtable {name}"),
        }
    }
}

impl std::fmt::Display for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&script(self))
    }
}
