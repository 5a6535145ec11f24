//! A node's conntrack entries as the packet tests look at them: which flows exist, and whether
//! a change to the ruleset (and the cleanup after it) left a flow's entry as it was.

use crate::netns::Netns;
use verdict_model::{PortChange, ProxyModel};

/// The namespace's conntrack entries (`conntrack -L -o id`), one line each.
pub fn entries(ns: &Netns) -> Vec<String> {
    let out = ns.check(&["conntrack", "-L", "-o", "id"]).expect("conntrack -L");
    out.lines().map(str::to_string).collect()
}

/// The id of the entry whose original source port is `port`, if any (the rest of the line,
/// such as the remaining timeout and the TCP state, moves on by itself).
pub fn entry_of(entries: &[String], port: u16) -> Option<String> {
    let line = line_of(entries, port)?;
    line.split_whitespace().find(|w| w.starts_with("id=")).map(str::to_string)
}

/// The line of the entry whose original source port is `port`, if any. Only the original
/// direction counts: an endpoint's late answer to a deleted flow starts an entry of its own,
/// from the endpoint to the client, whose reply direction has the client's port.
pub fn line_of(entries: &[String], port: u16) -> Option<String> {
    let sport = format!("sport={port}");
    entries.iter().find(|l| l.split_whitespace().find(|w| w.starts_with("sport=")) == Some(sport.as_str())).cloned()
}

/// The change from `before` to `after` of every port, as the sync loop hands it to the
/// conntrack cleanup.
pub fn changes(before: &ProxyModel, after: &ProxyModel) -> Vec<PortChange> {
    let names: std::collections::BTreeSet<_> = before.services.keys().chain(after.services.keys()).collect();
    names
        .into_iter()
        .map(|name| PortChange {
            name: name.clone(),
            old: before.services.get(name).cloned(),
            new: after.services.get(name).cloned(),
        })
        .filter(|c| c.old != c.new)
        .collect()
}
