//! Programming a node namespace the way the agent does: render, read the kernel, diff, commit;
//! with the fast path, the flowtable's devices joined after, in a transaction of their own.

use crate::netns::Netns;
use std::collections::BTreeSet;
use verdict_layout::render::FAST_PATH;
use verdict_layout::{RenderOptions, render};
use verdict_model::ProxyModel;
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{Ruleset, Transaction, diff};

/// Whether the packet tests run with the fast path on (`VERDICT_FAST_PATH=1`): `cargo xtask
/// test` runs the scenario suites once more that way.
pub fn fast_path_from_env() -> bool {
    std::env::var("VERDICT_FAST_PATH").is_ok_and(|v| v == "1")
}

/// Programs `model` into `ns` and returns what was committed.
pub fn program(ns: &Netns, model: &ProxyModel) -> Ruleset {
    program_with(ns, model, &RenderOptions::default(), None)
}

/// Programs `model` into `ns` with `opts`; with the fast path, then makes its flowtable hold
/// `devices` (every link of `ns` but `lo` when `None`), as the agent's link watcher would.
pub fn program_with(ns: &Netns, model: &ProxyModel, opts: &RenderOptions, devices: Option<&[&str]>) -> Ruleset {
    let desired = render(model, opts);
    ns.run(|| {
        let mut nl = Netlink::open().expect("netlink socket");
        let current = observe(&mut nl, &desired.table.name).expect("read the table");
        let plan = diff(current.as_ref().map(|o| &o.ruleset), &desired);
        nl.commit(&plan.transaction).unwrap_or_else(|e| panic!("commit failed: {e}"));
        let mut result = plan.result;
        if let Some(ft) = result.flowtables.get_mut(FAST_PATH) {
            let wanted: BTreeSet<String> = match devices {
                Some(d) => d.iter().map(|s| s.to_string()).collect(),
                None => verdict_controller::fast_path::links()
                    .expect("list the links")
                    .into_iter()
                    .filter(|l| l != "lo")
                    .collect(),
            };
            let tx = Transaction::flowtable_devices(&desired.table.name, ft, &wanted);
            nl.commit(&tx).unwrap_or_else(|e| panic!("joining the flowtable's devices failed: {e}"));
            ft.devices = wanted;
        }
        result
    })
}
