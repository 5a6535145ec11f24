//! Programming a node namespace the way the agent does: render, read the kernel, diff, commit.

use crate::netns::Netns;
use verdict_model::ProxyModel;
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{RenderOptions, Ruleset, diff, render};

/// Programs `model` into `ns` and returns what was committed.
pub fn program(ns: &Netns, model: &ProxyModel) -> Ruleset {
    let desired = render(model, &RenderOptions::default());
    ns.run(|| {
        let mut nl = Netlink::open().expect("netlink socket");
        let current = observe(&mut nl, &desired.table.name).expect("read the table");
        let plan = diff(current.as_ref().map(|o| &o.ruleset), &desired);
        nl.commit(&plan.transaction).unwrap_or_else(|e| panic!("commit failed: {e}"));
        plan.result
    })
}
