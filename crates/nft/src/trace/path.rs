//! Trace events grouped into connections, and each connection's path told in verdict's
//! terms: the rules of the kernel's table the events name by handle, the map entries a vmap
//! or a DNAT map picked (with their `namespace/name:port` comments), the endpoint the DNAT
//! chose and the final verdict.

use super::chains::is_trace_chain;
use super::event::{EventKind, TraceEvent, Tuple, proto_name, sockaddr};
use crate::observe::Observed;
use crate::rule::{DnatTarget, Item, Selector, Stmt, Value};
use crate::ruleset::{Chain, ElemData, Hook, padded};
use crate::text::rule_text;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// NFPROTO_INET: the family of verdict's table.
const FAMILY_INET: u8 = 1;
const NF_DROP: i32 = 0;

/// One traced connection: the events of its first packet.
#[derive(Clone, Debug)]
pub struct Connection {
    /// 1, 2, ... in the order connections started.
    pub number: usize,
    /// The packet as it arrived (before any DNAT).
    pub tuple: Option<Tuple>,
    /// Every event, in order.
    pub events: Vec<TraceEvent>,
}

struct Open {
    conn: Connection,
    ids: Vec<u32>,
    last: Instant,
}

/// Collects events into connections. A connection starts with an event of one of verdict's
/// trace chains (the rule that set the flag); later events with the same id are its own.
/// The kernel derives the id from the packet's input interface too, so a packet the node
/// sends to itself (a Service DNATed to a local address) comes back through loopback under
/// another id: such an event joins the connection whose client address and port it carries.
pub struct Collector {
    table: String,
    open: Vec<Open>,
    started: usize,
}

impl Collector {
    /// Collects the events of connections traced in `inet <table>`.
    pub fn new(table: &str) -> Collector {
        Collector { table: table.to_string(), open: Vec::new(), started: 0 }
    }

    /// Adds an event received at `now`.
    pub fn add(&mut self, ev: TraceEvent, now: Instant) {
        if let Some(o) = self.open.iter_mut().find(|o| o.ids.contains(&ev.id)) {
            o.last = now;
            o.conn.events.push(ev);
            return;
        }
        // Only the rule that set the flag starts a connection: a flagged packet passes the
        // trace chains again in later hooks (their ends and policies are reported too).
        let flagged_here = ev.kind == EventKind::Rule && ev.handle.is_some();
        if ev.family == FAMILY_INET && ev.table == self.table && is_trace_chain(&ev.chain) && flagged_here {
            self.started += 1;
            let conn = Connection { number: self.started, tuple: ev.tuple(), events: vec![ev.clone()] };
            self.open.push(Open { conn, ids: vec![ev.id], last: now });
            return;
        }
        let Some(t) = ev.tuple() else { return };
        let same_client = |o: &&mut Open| {
            o.conn.tuple.is_some_and(|c| c.proto == t.proto && c.src == t.src && c.sport == t.sport && t.sport != 0)
        };
        if let Some(o) = self.open.iter_mut().rev().find(same_client) {
            o.ids.push(ev.id);
            o.last = now;
            o.conn.events.push(ev);
        }
    }

    /// Connections without an event for `quiet` (a packet passes all hooks in microseconds),
    /// in the order they started.
    pub fn finished(&mut self, now: Instant, quiet: Duration) -> Vec<Connection> {
        let (done, open): (Vec<Open>, Vec<Open>) =
            self.open.drain(..).partition(|o| now.saturating_duration_since(o.last) >= quiet);
        self.open = open;
        done.into_iter().map(|o| o.conn).collect()
    }

    /// Every connection still open.
    pub fn drain(&mut self) -> Vec<Connection> {
        self.open.drain(..).map(|o| o.conn).collect()
    }
}

/// The connection's path as text: a header line, one line per rule, chain end or policy (map
/// entries and the DNAT target indented under their rule), then the result.
pub fn describe(conn: &Connection, table: &str, live: &Observed) -> String {
    let mut out = String::new();
    let head = conn.tuple.map(|t| t.arrow()).unwrap_or_else(|| "(headers not reported)".into());
    let _ = writeln!(out, "trace {}: {head}", conn.number);
    let ours = |ev: &TraceEvent| ev.family == FAMILY_INET && ev.table == table;
    let mut dnat: Option<(String, Option<String>)> = None;
    let mut end: Option<String> = None;
    let width =
        conn.events.iter().filter(|e| ours(e) && !is_trace_chain(&e.chain)).map(|e| e.chain.len()).max().unwrap_or(0);
    // The kernel copies the headers into the first event of each hook only: the packet as
    // it is at an event is the one last reported.
    let mut packet = conn.tuple;
    for (i, ev) in conn.events.iter().enumerate() {
        if let Some(t) = ev.tuple() {
            packet = Some(t);
        }
        if ours(ev) && is_trace_chain(&ev.chain) {
            continue;
        }
        let verdict = match (ev.kind, ev.policy, &ev.verdict) {
            (EventKind::Policy, Some(p), _) => {
                if p == NF_DROP as u32 {
                    "drop".into()
                } else {
                    "accept".into()
                }
            }
            (_, _, Some(v)) => v.to_string(),
            _ => "?".into(),
        };
        let dropped = verdict == "drop";
        if !ours(ev) {
            let family = family_name(ev.family);
            let what = match ev.kind {
                EventKind::Rule => format!("rule handle {}: {verdict}", ev.handle.unwrap_or(0)),
                EventKind::Return => "return".into(),
                EventKind::Policy => format!("policy {verdict}"),
                EventKind::Other(n) => format!("event type {n}"),
            };
            let _ = writeln!(out, "  [table {family} {}] {}  {what}", ev.table, ev.chain);
            if dropped {
                end = Some(format!("dropped by table {family} {}, chain {}", ev.table, ev.chain));
            }
            continue;
        }
        let rule = ev.handle.and_then(|h| live.handles.get(&h)).and_then(|(chain, idx)| {
            live.ruleset.chains.get(chain).and_then(|c| c.rules.get(*idx)).map(|r| (chain, r))
        });
        let chain = format!("{:width$}", ev.chain);
        match (ev.kind, ev.handle, rule) {
            (EventKind::Rule, Some(_), Some((_, rule))) => {
                let text = rule_text(rule);
                let shows_verdict = rule.items.iter().any(|i| matches!(i, Item::Stmt(Stmt::Verdict(_))));
                let tail = if shows_verdict { String::new() } else { format!("  => {verdict}") };
                let _ = writeln!(out, "  {chain}  rule {}: {text}{tail}", ev.handle.unwrap_or(0));
                let tuple = packet;
                for item in &rule.items {
                    match item {
                        Item::Stmt(Stmt::Vmap { key, map }) => {
                            if let Some(line) = tuple.and_then(|t| vmap_entry(live, key, map, &t)) {
                                let _ = writeln!(out, "  {:width$}    {line}", "");
                            }
                        }
                        Item::Stmt(Stmt::Dnat { target, .. }) => {
                            let after = translated(&conn.events[i + 1..], tuple);
                            let (line, summary) = dnat_entry(live, target, tuple, after);
                            let _ = writeln!(out, "  {:width$}    {line}", "");
                            dnat = Some(summary);
                        }
                        Item::Stmt(Stmt::Reject(_)) => end = Some(format!("rejected by chain {}", ev.chain)),
                        _ => {}
                    }
                }
            }
            // No handle: the end of the chain's rules was reached. A base chain's policy
            // event follows; a regular chain returns to the rule that jumped to it.
            (EventKind::Rule, None, _) => {
                if live.ruleset.chains.get(&ev.chain).is_none_or(|c| c.base.is_none()) {
                    let _ = writeln!(out, "  {chain}  end of chain: return");
                }
            }
            (EventKind::Rule, Some(handle), None) => {
                let _ = writeln!(out, "  {chain}  rule {handle} (not in the table as read): {verdict}");
            }
            (EventKind::Return, _, _) => {
                let _ = writeln!(out, "  {chain}  end of chain: return");
            }
            (EventKind::Policy, _, _) => {
                let _ = writeln!(out, "  {chain}  policy {verdict}");
            }
            (EventKind::Other(n), _, _) => {
                let _ = writeln!(out, "  {chain}  event type {n}");
            }
        }
        if end.is_none() && dropped {
            end = Some(format!("dropped by chain {}", ev.chain));
        }
    }
    match &dnat {
        Some((target, Some(owner))) => {
            let _ = writeln!(out, "  DNAT to {target} (endpoint of {owner})");
        }
        Some((target, None)) => {
            let _ = writeln!(out, "  DNAT to {target}");
        }
        None => {}
    }
    let forwarded = conn.events.iter().any(|e| ours(e) && forward_chains(live).any(|c| c.name == e.chain));
    if dnat.is_some() && end.is_none() && forwarded {
        let proto = conn.tuple.map(|t| t.proto);
        if let Some(note) = offload_note(live, proto) {
            let _ = writeln!(out, "  {note}");
        }
    }
    let result =
        end.unwrap_or_else(|| if dnat.is_some() { "accept".into() } else { "accept (not DNATed by verdict)".into() });
    let _ = writeln!(out, "  verdict: {result}");
    out
}

/// What the fast path does with the connection's later packets, when the table has it: the
/// trace sees only the first packet, which is never offloaded.
fn offload_note(live: &Observed, proto: Option<u8>) -> Option<String> {
    let flowtable = forward_chains(live).flat_map(|c| &c.rules).flat_map(|r| r.flowtable_refs()).next()?;
    if !matches!(proto, Some(6 | 17)) {
        return None;
    }
    let devices: Vec<String> =
        live.ruleset.flowtables.get(flowtable).map(|f| f.devices.iter().cloned().collect()).unwrap_or_default();
    Some(format!(
        "once established: offloaded to flowtable @{flowtable} (fast path; devices: {}): its later packets skip the netfilter hooks and are not traced",
        if devices.is_empty() { "none yet".to_string() } else { devices.join(", ") }
    ))
}

/// The table's base chains on the forward hook, where a flow offload rule can be: found by
/// their hook, as `explain` does, not by the name one table layout gives them.
fn forward_chains(live: &Observed) -> impl Iterator<Item = &Chain> {
    live.ruleset.chains.values().filter(|c| c.base.as_ref().is_some_and(|b| b.hook == Hook::Forward))
}

fn family_name(family: u8) -> &'static str {
    match family {
        1 => "inet",
        2 => "ip",
        10 => "ip6",
        7 => "bridge",
        5 => "netdev",
        3 => "arp",
        _ => "?",
    }
}

/// The packet's destination after a DNAT: from the first later event whose headers differ.
fn translated(later: &[TraceEvent], original: Option<Tuple>) -> Option<Tuple> {
    let original = original?;
    later.iter().filter_map(TraceEvent::tuple).find(|t| (t.dst, t.dport) != (original.dst, original.dport))
}

/// The value a key part has for this packet, when the packet's headers tell it.
fn part(sel: &Selector, t: &Tuple) -> Option<Value> {
    Some(match sel {
        Selector::Daddr(_) => Value::Addr(t.dst),
        Selector::Saddr(_) => Value::Addr(t.src),
        Selector::L4Proto => Value::Proto(t.proto),
        Selector::ThDport => Value::Port(t.dport),
        _ => return None,
    })
}

/// A concatenation's bytes, each part padded to 4 bytes (a lone value unpadded).
fn key_bytes(values: &[Value], concat: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        v.encode(&mut out);
        if concat {
            out.resize(padded(out.len()), 0);
        }
    }
    out
}

fn show(values: &[Value]) -> String {
    values.iter().map(crate::text::value).collect::<Vec<_>>().join(" . ")
}

/// `@service-ips: 172.30.0.41 . tcp . 80 : goto endpoints-2  (ns/web:http)`.
fn vmap_entry(live: &Observed, key: &[Selector], map: &str, t: &Tuple) -> Option<String> {
    let values: Vec<Value> = key.iter().map(|s| part(s, t)).collect::<Option<_>>()?;
    let set = live.ruleset.sets.get(map)?;
    let bytes = key_bytes(&values, values.len() > 1);
    let entry = crate::ruleset::Blob::try_new(&bytes).and_then(|b| set.elements.get(&b));
    Some(match entry {
        Some(e) => {
            let data = match &e.data {
                Some(ElemData::Verdict(v)) => v.to_string(),
                _ => "?".into(),
            };
            let owner = e.comment.as_deref().map(|c| format!("  ({c})")).unwrap_or_default();
            format!("@{map}: {} : {data}{owner}", show(&values))
        }
        None => format!("@{map}: no entry for {}", show(&values)),
    })
}

/// The DNAT's line and (target, the Service port it belongs to).
fn dnat_entry(
    live: &Observed,
    target: &DnatTarget,
    before: Option<Tuple>,
    after: Option<Tuple>,
) -> (String, (String, Option<String>)) {
    let seen = after.map(|t| sockaddr(t.dst, t.dport));
    match target {
        DnatTarget::Addr { addr, port } => {
            let to = sockaddr(*addr, *port);
            (format!("dnat to {to}"), (to, None))
        }
        DnatTarget::Map { key, map } => {
            let (Some(b), Some(a)) = (before, after) else {
                let what = seen.unwrap_or_else(|| "(the translated packet was not seen)".into());
                return (format!("@{map}: target not identified"), (what, None));
            };
            let to = sockaddr(a.dst, a.dport);
            match endpoint_entry(live, key, map, &b, &a) {
                Some((slot_key, comment)) => {
                    let owner = comment.clone().map(|c| format!("  (endpoint of {c})")).unwrap_or_default();
                    (format!("@{map}: {slot_key} : {} . {}{owner}", a.dst, a.dport), (to, comment))
                }
                None => (format!("@{map}: no entry maps to {to}"), (to, None)),
            }
        }
    }
}

/// The element of an endpoint map that sent `before` to `after`: its key as text and its
/// comment. The key's random slot is not in the packet, so every slot is tried.
fn endpoint_entry(
    live: &Observed,
    key: &[Selector],
    map: &str,
    before: &Tuple,
    after: &Tuple,
) -> Option<(String, Option<String>)> {
    let set = live.ruleset.sets.get(map)?;
    let mut fixed = Vec::new();
    let mut slots = None;
    for sel in key {
        match sel {
            Selector::Numgen(n) => slots = Some(*n),
            other => fixed.push(part(other, before)?),
        }
    }
    let want = key_bytes(&[Value::Addr(after.dst), Value::Port(after.dport)], true);
    for slot in 0..slots.unwrap_or(1) {
        let mut values = fixed.clone();
        if slots.is_some() {
            values.push(Value::Int(slot));
        }
        let bytes = key_bytes(&values, values.len() > 1);
        let Some(e) = crate::ruleset::Blob::try_new(&bytes).and_then(|b| set.elements.get(&b)) else { continue };
        if matches!(&e.data, Some(ElemData::Value(v)) if v.as_slice() == want.as_slice()) {
            return Some((show(&values), e.comment.as_deref().map(str::to_string)));
        }
    }
    None
}

/// The `--dst` of a trace as text (for messages).
pub fn destination(dst: std::net::IpAddr, port: u16, proto: u8) -> String {
    format!("{}/{}", sockaddr(dst, port), proto_name(proto))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Rule;
    use crate::ruleset::{Blob, Chain, DataSpec, Datatype, Elem, KeySpec, Ruleset, Set, SetDecl, Table, Verdict};
    use crate::trace::event::TraceVerdict;
    use std::collections::HashMap;
    use std::sync::Arc;
    use verdict_net::IpFamily;

    /// A table with the shapes a ClusterIP's path passes: the dispatch vmap and an endpoint
    /// map with two slots.
    fn live() -> Observed {
        let mut rs = Ruleset::new(Table::default());
        let key = KeySpec::Type(vec![Datatype::Ipv4Addr, Datatype::InetProto, Datatype::InetService]);
        let comment: Arc<str> = Arc::from("ns/web:http");
        let mut vmap = Set::new(SetDecl::map("service-ips", key.clone(), DataSpec::Verdict));
        vmap.elements = Arc::new(crate::ruleset::ElementMap::from([(
            Blob::new(&[172, 30, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]),
            Elem::verdict(Verdict::Goto(Arc::from("endpoints-2")), Some(comment.clone())),
        )]));
        let mut eps = Set::new(SetDecl::map("endpoints-2", key, DataSpec::Verdict));
        eps.elements = Arc::new(crate::ruleset::ElementMap::from([
            (
                Blob::new(&[172, 30, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0, 0, 0, 0, 0]),
                Elem::value(Blob::new(&[10, 0, 2, 2, 0x1f, 0x90, 0, 0]), Some(comment.clone())),
            ),
            (
                Blob::new(&[172, 30, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0, 1, 0, 0, 0]),
                Elem::value(Blob::new(&[10, 0, 1, 1, 0x1f, 0x90, 0, 0]), Some(comment)),
            ),
        ]));
        rs.sets.insert("service-ips".into(), vmap);
        rs.sets.insert("endpoints-2".into(), eps);
        let dispatch = [Selector::Daddr(IpFamily::V4), Selector::L4Proto, Selector::ThDport];
        let services = Rule::new(vec![Item::Stmt(Stmt::Vmap { key: dispatch.to_vec(), map: "service-ips".into() })]);
        let mut pick = dispatch.to_vec();
        pick.push(Selector::Numgen(2));
        let target = DnatTarget::Map { key: pick, map: "endpoints-2".into() };
        let dnat = Rule::new(vec![Item::Stmt(Stmt::Dnat { family: IpFamily::V4, target })]);
        let jump = Rule::new(vec![Item::Stmt(Stmt::Verdict(Verdict::Jump(Arc::from("services"))))]);
        for (name, rule) in [("nat-output", jump), ("services", services), ("endpoints-2", dnat)] {
            rs.chains.insert(name.into(), Chain::regular(name, vec![rule]));
        }
        let handles = HashMap::from([
            (5, ("nat-output".to_string(), 0)),
            (10, ("services".to_string(), 0)),
            (20, ("endpoints-2".to_string(), 0)),
        ]);
        Observed { ruleset: rs, foreign: Vec::new(), handles, generation: None }
    }

    fn headers(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> (Vec<u8>, Vec<u8>) {
        let mut ip = vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        let mut th = sport.to_be_bytes().to_vec();
        th.extend_from_slice(&dport.to_be_bytes());
        (ip, th)
    }

    fn event(id: u32, kind: EventKind, table: &str, chain: &str, handle: Option<u64>, verdict: i32) -> TraceEvent {
        TraceEvent {
            id,
            kind,
            family: FAMILY_INET,
            table: table.into(),
            chain: chain.into(),
            handle,
            verdict: Some(TraceVerdict { code: verdict, chain: None }),
            policy: (kind == EventKind::Policy).then_some(verdict as u32),
            nfproto: Some(2),
            network: None,
            transport: None,
            iif: None,
            oif: None,
            mark: None,
        }
    }

    fn with(mut ev: TraceEvent, (ip, th): (Vec<u8>, Vec<u8>)) -> TraceEvent {
        ev.network = Some(ip);
        ev.transport = Some(th);
        ev
    }

    const CLIENT: [u8; 4] = [10, 0, 1, 9];

    #[test]
    fn a_connection_is_grouped_and_told_with_its_map_entries_and_endpoint() {
        let t0 = Instant::now();
        let mut c = Collector::new("kube-proxy");
        let rule = EventKind::Rule;
        let original = headers(CLIENT, 40000, [172, 30, 0, 1], 80);
        let translated = headers(CLIENT, 40000, [10, 0, 1, 1], 8080);
        // A trace chain's end, met by a flagged packet in a later hook, starts nothing.
        c.add(event(4, rule, "kube-proxy", "trace-9-prerouting", None, -1), t0);
        c.add(with(event(1, rule, "kube-proxy", "trace-9-output", Some(99), -1), original.clone()), t0);
        c.add(event(1, rule, "kube-proxy", "nat-output", Some(5), -3), t0);
        let mut goto = event(1, rule, "kube-proxy", "services", Some(10), -4);
        goto.verdict = Some(TraceVerdict { code: -4, chain: Some("endpoints-2".into()) });
        c.add(goto, t0);
        c.add(event(1, rule, "kube-proxy", "endpoints-2", Some(20), 1), t0);
        c.add(with(event(1, EventKind::Policy, "kube-proxy", "filter-output", None, 1), translated.clone()), t0);
        // The same packet back through loopback, under another id: joined by its client.
        c.add(with(event(2, EventKind::Policy, "kube-proxy", "filter-input", None, 1), translated), t0);
        // Somebody else's flagged packet.
        c.add(with(event(3, rule, "filter", "input", Some(1), 1), headers([10, 9, 9, 9], 1, [10, 0, 0, 1], 2)), t0);

        assert!(c.finished(t0 + Duration::from_millis(100), Duration::from_millis(300)).is_empty(), "not quiet yet");
        let done = c.finished(t0 + Duration::from_secs(1), Duration::from_millis(300));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].events.len(), 6);
        assert!(c.drain().is_empty());

        let text = describe(&done[0], "kube-proxy", &live());
        assert!(text.starts_with("trace 1: 10.0.1.9:40000 -> 172.30.0.1:80/tcp\n"), "{text}");
        // Lines as words: the column widths follow the longest chain name.
        let lines: Vec<String> = text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        for line in [
            "nat-output rule 5: jump services",
            "services rule 10: ip daddr . meta l4proto . th dport vmap @service-ips => goto endpoints-2",
            "@service-ips: 172.30.0.1 . tcp . 80 : goto endpoints-2 (ns/web:http)",
            "@endpoints-2: 172.30.0.1 . tcp . 80 . 1 : 10.0.1.1 . 8080 (endpoint of ns/web:http)",
            "filter-input policy accept",
            "DNAT to 10.0.1.1:8080 (endpoint of ns/web:http)",
        ] {
            assert!(lines.iter().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert_eq!(lines.last().map(String::as_str), Some("verdict: accept"), "{text}");
        assert!(!text.contains("trace-9"), "verdict's own trace chains are left out:\n{text}");
    }

    #[test]
    fn a_drop_in_another_table_is_the_result() {
        let t0 = Instant::now();
        let mut c = Collector::new("kube-proxy");
        let original = headers(CLIENT, 40000, [172, 30, 0, 1], 80);
        c.add(with(event(1, EventKind::Rule, "kube-proxy", "trace-9-output", Some(99), -1), original), t0);
        c.add(event(1, EventKind::Rule, "kube-proxy", "nat-output", Some(5), -3), t0);
        c.add(event(1, EventKind::Policy, "hostfw", "output", None, 0), t0);
        let done = c.drain();
        let text = describe(&done[0], "kube-proxy", &live());
        assert!(text.contains("  [table inet hostfw] output  policy drop\n"), "{text}");
        assert!(text.ends_with("  verdict: dropped by table inet hostfw, chain output\n"), "{text}");
    }

    #[test]
    fn a_forwarded_connection_is_told_it_will_be_offloaded_when_the_table_has_the_fast_path() {
        let t0 = Instant::now();
        let mut c = Collector::new("kube-proxy");
        let rule = EventKind::Rule;
        let original = headers(CLIENT, 40000, [172, 30, 0, 1], 80);
        let translated = headers(CLIENT, 40000, [10, 0, 1, 1], 8080);
        c.add(with(event(1, rule, "kube-proxy", "trace-9-prerouting", Some(99), -1), original), t0);
        c.add(event(1, rule, "kube-proxy", "nat-output", Some(5), -3), t0);
        let mut goto = event(1, rule, "kube-proxy", "services", Some(10), -4);
        goto.verdict = Some(TraceVerdict { code: -4, chain: Some("endpoints-2".into()) });
        c.add(goto, t0);
        c.add(event(1, rule, "kube-proxy", "endpoints-2", Some(20), 1), t0);
        c.add(with(event(1, EventKind::Policy, "kube-proxy", "filter-forward", None, 1), translated), t0);
        let done = c.drain();
        let mut live = live();
        let without = describe(&done[0], "kube-proxy", &live);
        assert!(!without.contains("offloaded"), "{without}");

        let offload = Rule::new(vec![Item::Stmt(Stmt::FlowAdd { flowtable: "fastpath".into() })]);
        let forward = Chain::base(
            "filter-forward",
            crate::ruleset::ChainKind::Filter,
            crate::ruleset::Hook::Forward,
            0,
            vec![offload],
        );
        live.ruleset.chains.insert("filter-forward".into(), forward);
        let mut ft = crate::ruleset::Flowtable::new("fastpath");
        ft.devices.insert("br0".into());
        live.ruleset.flowtables.insert("fastpath".into(), ft);
        let text = describe(&done[0], "kube-proxy", &live);
        assert!(
            text.contains("  once established: offloaded to flowtable @fastpath (fast path; devices: br0)"),
            "{text}"
        );
        assert!(text.ends_with("  verdict: accept\n"), "{text}");
    }
}
