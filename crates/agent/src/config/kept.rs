//! The replaced mode's behaviour, kept (issue 30): where nftables mode differs from the mode
//! verdict runs in place of, verdict does what that mode did. One pure decision from the
//! configuration, which the rules (`ProxyConfig`), the sysctls (`route_localnet`) and the
//! start-up log line all read.
//!
//! What upstream's proxiers do, and so what is kept:
//!
//! | behaviour | iptables | ipvs | nftables |
//! |---|---|---|---|
//! | `nodePortAddresses` unset | every local address | every local address | `primary` |
//! | localhost NodePorts (IPv4) | `iptables.localhostNodePorts` and a list covering 127.0.0.0 | never (kubernetes #67730) | `localhost` (or a loopback CIDR) listed, unless `KubeProxyNFTablesLocalhostNodePorts=false` |
//! | `ct state invalid drop` in forward | unless `conntrack.tcpBeLiberal` | no (the ipvs proxier has no such rule) | no |

use super::resolve::Mode;
use verdict_model::{IpFamily, NodePortAddresses};

/// The feature gate of upstream's localhost NodePorts in nftables mode (KEP-6032).
pub const LOCALHOST_GATE: &str = "KubeProxyNFTablesLocalhostNodePorts";

/// What the decision reads from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs<'a> {
    /// The mode verdict runs in place of.
    pub mode: Mode,
    /// `nodePortAddresses`, parsed with `mode`'s default.
    pub nodeport_addresses: &'a NodePortAddresses,
    /// Whether `nodePortAddresses` was unset (the mode's default applies).
    pub nodeport_addresses_unset: bool,
    /// `iptables.localhostNodePorts` (`--iptables-localhost-nodeports`, default true).
    pub iptables_localhost_node_ports: bool,
    /// `conntrack.tcpBeLiberal`.
    pub tcp_be_liberal: bool,
    /// `featureGates.KubeProxyNFTablesLocalhostNodePorts`, when set.
    pub localhost_gate: Option<bool>,
}

/// Which of the replaced mode's behaviours verdict keeps, and what to say about them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// NodePorts on every local address because `nodePortAddresses` is unset (iptables, ipvs).
    pub nodeports_on_every_address: bool,
    /// IPv4 NodePorts on 127.0.0.0/8 for the node's own connections.
    pub localhost_nodeports: bool,
    /// Why localhost NodePorts are on: iptables mode's setting, or nftables mode's keyword.
    pub localhost_from_keyword: bool,
    /// The list names `::1` too: upstream's userspace proxy serves it, the kernel cannot.
    pub ipv6_localhost_unserved: bool,
    /// The list names loopback but the feature gate is explicitly off (nftables mode).
    pub localhost_gated_off: bool,
    /// `ct state invalid drop` in forward.
    pub drop_ct_invalid: bool,
}

/// Decides which behaviours are kept (see the module's table).
pub fn decide(i: &Inputs) -> Kept {
    let npa = i.nodeport_addresses;
    let replaced = i.mode != Mode::Nftables;
    let names_loopback = npa.names_loopback(IpFamily::V4) || npa.names_loopback(IpFamily::V6);
    let gated_off = i.mode == Mode::Nftables && names_loopback && i.localhost_gate == Some(false);
    let localhost_nodeports = match i.mode {
        Mode::Iptables => i.iptables_localhost_node_ports && npa.covers_loopback(IpFamily::V4),
        Mode::Ipvs => false,
        Mode::Nftables => !gated_off && npa.names_loopback(IpFamily::V4),
    };
    Kept {
        nodeports_on_every_address: replaced && i.nodeport_addresses_unset,
        localhost_nodeports,
        localhost_from_keyword: i.mode == Mode::Nftables && localhost_nodeports,
        ipv6_localhost_unserved: i.mode == Mode::Nftables && !gated_off && npa.names_loopback(IpFamily::V6),
        localhost_gated_off: gated_off,
        drop_ct_invalid: i.mode == Mode::Iptables && !i.tcp_be_liberal,
    }
}

impl Kept {
    /// The start-up line naming each behaviour kept from the replaced mode and how to leave
    /// them; `None` when nothing is kept (or verdict is nftables mode itself).
    pub fn announcement(&self, mode: Mode) -> Option<String> {
        if mode == Mode::Nftables {
            return None;
        }
        let mut kept = Vec::new();
        if self.nodeports_on_every_address {
            kept.push("NodePorts on every local address (nodePortAddresses unset)");
        }
        if self.localhost_nodeports {
            kept.push("localhost NodePorts (iptables.localhostNodePorts)");
        }
        if self.drop_ct_invalid {
            kept.push("the conntrack-INVALID drop in forward (conntrack.tcpBeLiberal: false)");
        }
        if kept.is_empty() {
            return None;
        }
        Some(format!(
            "replacing kube-proxy's {} mode: keeping {}; set mode: nftables to leave them",
            mode.name(),
            kept.join(", ")
        ))
    }

    /// Lines to warn with, once each, for every command that reads the configuration.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.localhost_gated_off {
            out.push(format!(
                "nodePortAddresses names loopback (`localhost`), but featureGates sets {LOCALHOST_GATE}=false: \
                 ignored, NodePorts do not answer on loopback"
            ));
        }
        if self.ipv6_localhost_unserved {
            out.push(
                "nodePortAddresses names ::1 (`localhost`): verdict serves localhost NodePorts on 127.0.0.0/8 only; \
                 the kernel does not route the replies of a connection from ::1 that left the node \
                 (upstream's userspace proxy does; docs/operations.md#migrating-from-kube-proxy)"
                    .to_string(),
            );
        }
        out
    }

    /// Whether `net.ipv4.conf.all.route_localnet` must be 1: a packet from 127.0.0.1 DNATed to
    /// an endpoint is routed out of the node only then, as kube-proxy's iptables mode sets it.
    pub fn route_localnet(&self) -> bool {
        self.localhost_nodeports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npa(items: &[&str], mode: Mode) -> NodePortAddresses {
        let unset = match mode {
            Mode::Nftables => NodePortAddresses::primary(),
            Mode::Iptables | Mode::Ipvs => NodePortAddresses::all(),
        };
        verdict_model::parse_nodeport_addresses(items, unset).unwrap()
    }

    fn decide_for(mode: Mode, items: &[&str], localhost: bool, liberal: bool, gate: Option<bool>) -> Kept {
        let addresses = npa(items, mode);
        decide(&Inputs {
            mode,
            nodeport_addresses: &addresses,
            nodeport_addresses_unset: items.iter().all(|i| i.trim().is_empty()),
            iptables_localhost_node_ports: localhost,
            tcp_be_liberal: liberal,
            localhost_gate: gate,
        })
    }

    #[test]
    fn kubeadms_iptables_mode_keeps_all_three() {
        let k = decide_for(Mode::Iptables, &[], true, false, None);
        assert!(k.nodeports_on_every_address && k.localhost_nodeports && k.drop_ct_invalid, "{k:?}");
        assert!(k.route_localnet());
        assert_eq!(
            k.announcement(Mode::Iptables).unwrap(),
            "replacing kube-proxy's iptables mode: keeping NodePorts on every local address (nodePortAddresses unset), \
             localhost NodePorts (iptables.localhostNodePorts), the conntrack-INVALID drop in forward \
             (conntrack.tcpBeLiberal: false); set mode: nftables to leave them"
        );
        assert!(k.warnings().is_empty());
    }

    #[test]
    fn each_iptables_setting_turns_its_behaviour_off_alone() {
        let k = decide_for(Mode::Iptables, &[], false, false, None);
        assert!(k.nodeports_on_every_address && !k.localhost_nodeports && k.drop_ct_invalid);
        assert!(!k.announcement(Mode::Iptables).unwrap().contains("localhost"));
        let k = decide_for(Mode::Iptables, &[], true, true, None);
        assert!(k.nodeports_on_every_address && k.localhost_nodeports && !k.drop_ct_invalid);
        assert!(!k.announcement(Mode::Iptables).unwrap().contains("INVALID"));
        // A list: no every-address default; localhost only if the list covers 127.0.0.0.
        let k = decide_for(Mode::Iptables, &["primary"], true, true, None);
        assert_eq!(k, Kept::default());
        assert_eq!(k.announcement(Mode::Iptables), None, "nothing kept, nothing said");
        assert!(decide_for(Mode::Iptables, &["127.0.0.0/8", "10.0.0.0/8"], true, true, None).localhost_nodeports);
        assert!(decide_for(Mode::Iptables, &["all"], true, true, None).localhost_nodeports);
        assert!(
            decide_for(Mode::Iptables, &["fd00::/64"], true, true, None).localhost_nodeports,
            "IPv4: every address"
        );
        assert!(!decide_for(Mode::Iptables, &["10.0.0.0/8"], true, true, None).localhost_nodeports);
        // The gate is nftables mode's: iptables mode ignores it.
        assert!(decide_for(Mode::Iptables, &["localhost"], true, true, Some(false)).localhost_nodeports);
    }

    #[test]
    fn ipvs_mode_keeps_the_nodeport_default_only() {
        let k = decide_for(Mode::Ipvs, &[], true, false, None);
        assert_eq!(k, Kept { nodeports_on_every_address: true, ..Kept::default() });
        assert_eq!(
            k.announcement(Mode::Ipvs).unwrap(),
            "replacing kube-proxy's ipvs mode: keeping NodePorts on every local address (nodePortAddresses unset); \
             set mode: nftables to leave them"
        );
        assert!(!decide_for(Mode::Ipvs, &["localhost"], true, false, None).localhost_nodeports);
    }

    #[test]
    fn nftables_mode_serves_localhost_only_when_named_and_not_gated_off() {
        assert_eq!(decide_for(Mode::Nftables, &[], true, false, None), Kept::default());
        assert_eq!(decide_for(Mode::Nftables, &["all"], true, false, None), Kept::default(), "all asks for none");
        let k = decide_for(Mode::Nftables, &["primary", "localhost"], true, false, None);
        assert!(k.localhost_nodeports && k.localhost_from_keyword && k.ipv6_localhost_unserved, "{k:?}");
        assert!(!k.drop_ct_invalid && !k.nodeports_on_every_address);
        assert_eq!(k.announcement(Mode::Nftables), None, "nothing is replaced");
        assert_eq!(k.warnings().len(), 1, "the ::1 difference: {:?}", k.warnings());
        assert!(decide_for(Mode::Nftables, &["localhost"], false, false, Some(true)).localhost_nodeports);
        let k = decide_for(Mode::Nftables, &["primary", "127.0.0.1/32"], true, false, None);
        assert!(k.localhost_nodeports && !k.ipv6_localhost_unserved, "a loopback CIDR of IPv4 only");
        let off = decide_for(Mode::Nftables, &["primary", "localhost"], true, false, Some(false));
        assert!(!off.localhost_nodeports && off.localhost_gated_off && !off.route_localnet());
        let warnings = off.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("KubeProxyNFTablesLocalhostNodePorts=false") && warnings[0].contains("ignored"));
        assert!(decide_for(Mode::Nftables, &["primary"], true, false, Some(false)).warnings().is_empty());
    }
}
