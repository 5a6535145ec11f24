//! What each proxy's rules serve on this node: the Service addresses and NodePorts verdict's
//! table DNATs, and those kube-proxy's rules DNAT in whichever mode they are (nftables,
//! iptables with either back end, IPVS). Handing a node back to kube-proxy removes verdict's
//! table only once kube-proxy's rules serve what it served (`verdict cleanup
//! --after-kube-proxy`), so that no new connection meets neither.

use super::iptables::{SavedTable, saved_by_backend, words};
use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use verdict_nft::netlink::{Netlink, NetlinkError, TableFamily};

/// One thing a proxy answers for: a Service address and port, or a NodePort (on the node's
/// addresses), each with its IP protocol number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Served {
    /// A ClusterIP, external IP or load balancer IP, with a port.
    Address {
        /// The address.
        addr: IpAddr,
        /// The IP protocol number (6 TCP, 17 UDP, 132 SCTP).
        proto: u8,
        /// The port.
        port: u16,
    },
    /// A NodePort.
    NodePort {
        /// The IP protocol number.
        proto: u8,
        /// The port.
        port: u16,
    },
}

fn proto_name(proto: u8) -> String {
    match i32::from(proto) {
        nix::libc::IPPROTO_TCP => "tcp".into(),
        nix::libc::IPPROTO_UDP => "udp".into(),
        nix::libc::IPPROTO_SCTP => "sctp".into(),
        other => format!("proto {other}"),
    }
}

fn proto_number(name: &str) -> Option<u8> {
    match name {
        "tcp" | "6" => Some(nix::libc::IPPROTO_TCP as u8),
        "udp" | "17" => Some(nix::libc::IPPROTO_UDP as u8),
        "sctp" | "132" => Some(nix::libc::IPPROTO_SCTP as u8),
        _ => None,
    }
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Served::Address { addr: IpAddr::V6(a), proto, port } => write!(f, "[{a}]:{port}/{}", proto_name(*proto)),
            Served::Address { addr, proto, port } => write!(f, "{addr}:{port}/{}", proto_name(*proto)),
            Served::NodePort { proto, port } => write!(f, "NodePort {port}/{}", proto_name(*proto)),
        }
    }
}

/// The maps of upstream's dispatch, named as both upstream's nftables mode and verdict's table
/// name them (verdict's IPv6 twins carry `-v6`).
const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";

/// An `addr . inet_proto . inet_service` key as the kernel holds it: each component padded to
/// 4 bytes.
fn address_key(key: &[u8]) -> Option<Served> {
    let (addr, rest) = match key.len() {
        12 => (IpAddr::from(<[u8; 4]>::try_from(&key[..4]).ok()?), &key[4..]),
        24 => (IpAddr::from(<[u8; 16]>::try_from(&key[..16]).ok()?), &key[16..]),
        _ => return None,
    };
    let (proto, port) = port_key(rest)?;
    Some(Served::Address { addr, proto, port })
}

/// An `inet_proto . inet_service` key.
fn port_key(key: &[u8]) -> Option<(u8, u16)> {
    match key {
        [proto, _, _, _, hi, lo, _, _] => Some((*proto, u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

fn node_port_key(key: &[u8]) -> Option<Served> {
    port_key(key).map(|(proto, port)| Served::NodePort { proto, port })
}

/// What verdict's table `inet <table>` DNATs: the keys of its dispatch maps (a Service without
/// endpoints is in the no-endpoint maps instead, and is not served).
pub fn served_by_verdict(nl: &mut Netlink, table: &str) -> Result<BTreeSet<Served>, NetlinkError> {
    let mut served = BTreeSet::new();
    for suffix in ["", "-v6"] {
        let ips = nl.foreign_set_keys(TableFamily::Inet, table, &format!("{SERVICE_IPS}{suffix}"))?;
        served.extend(ips.iter().filter_map(|k| address_key(k)));
        let ports = nl.foreign_set_keys(TableFamily::Inet, table, &format!("{SERVICE_NODEPORTS}{suffix}"))?;
        served.extend(ports.iter().filter_map(|k| node_port_key(k)));
    }
    Ok(served)
}

/// What kube-proxy's rules serve, in every mode found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeProxyRules {
    /// The union over the modes.
    pub served: BTreeSet<Served>,
    /// Where rules were found: `nftables`, `iptables-nft`, `ip6tables-legacy`, `ipvs`, ...
    pub found_in: BTreeSet<String>,
    /// What could not be read, one line each.
    pub unreadable: Vec<String>,
}

impl KubeProxyRules {
    fn add(&mut self, place: &str, served: BTreeSet<Served>) {
        if !served.is_empty() {
            self.found_in.insert(place.to_string());
            self.served.extend(served);
        }
    }
}

/// Reads what kube-proxy's rules serve in the calling thread's network namespace, in every
/// mode: its nftables mode's `ip`/`ip6 kube-proxy` tables, its iptables mode's `KUBE-SERVICES`
/// and `KUBE-NODEPORTS` jumps in each iptables back end, and IPVS's virtual servers. (IPVS
/// virtual servers carry no owner; while verdict's table exists they can only be kube-proxy's
/// or another program's, and the latter serve nothing verdict does.)
pub fn served_by_kube_proxy(nl: &mut Netlink) -> KubeProxyRules {
    let mut rules = KubeProxyRules::default();
    for family in [TableFamily::Ip, TableFamily::Ip6] {
        let mut served = BTreeSet::new();
        match nl.foreign_set_keys(family, "kube-proxy", SERVICE_IPS) {
            Ok(keys) => served.extend(keys.iter().filter_map(|k| address_key(k))),
            Err(e) => rules.unreadable.push(format!("table {} kube-proxy: {e}", family.name())),
        }
        match nl.foreign_set_keys(family, "kube-proxy", SERVICE_NODEPORTS) {
            Ok(keys) => served.extend(keys.iter().filter_map(|k| node_port_key(k))),
            Err(e) => rules.unreadable.push(format!("table {} kube-proxy: {e}", family.name())),
        }
        rules.add("nftables", served);
    }
    let mut ipvs_mode_rules = false;
    for (label, saved) in saved_by_backend() {
        match saved {
            Ok(tables) => {
                ipvs_mode_rules |= ipvs_mode_runs(&tables);
                rules.add(label, from_iptables(&tables));
            }
            Err(e) => rules.unreadable.push(e),
        }
    }
    // Virtual servers alone are no running IPVS mode: verdict keeps kube-proxy's while IPVS
    // still forwards their connections (without the iptables rules that masquerade for them).
    // They serve once kube-proxy's IPVS mode has written its iptables rules again.
    if ipvs_mode_rules {
        match super::ipvs::virtual_servers() {
            Ok(Some(servers)) => rules.add("ipvs", from_ipvs(&servers)),
            Ok(None) => {}
            Err(e) => rules.unreadable.push(format!("ipvs: {e}")),
        }
    }
    rules
}

/// Whether kube-proxy's IPVS mode has its iptables rules in place: its `KUBE-SERVICES` matches
/// the `KUBE-CLUSTER-IP` ipset (IPVS mode's alone; the iptables mode matches addresses).
fn ipvs_mode_runs(tables: &[SavedTable]) -> bool {
    tables
        .iter()
        .filter(|t| t.name == "nat")
        .flat_map(|t| &t.rules)
        .any(|r| r.chain == "KUBE-SERVICES" && r.spec.contains("--match-set KUBE-CLUSTER-IP "))
}

/// The jumps of upstream's iptables mode that DNAT to a Service: to its service, external
/// (`KUBE-EXT-`), firewall (`KUBE-FW-`) or older local (`KUBE-XLB-`, `KUBE-SVL-`) chain. A
/// Service without endpoints has none in `nat` (its reject lives in `filter`).
fn dnat_chain(target: &str) -> bool {
    ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-XLB-"].iter().any(|p| target.starts_with(p))
}

/// What the `nat` table of `*-save` output serves: `KUBE-SERVICES` rules for a destination,
/// protocol and port, and `KUBE-NODEPORTS` rules for a protocol and port.
fn from_iptables(tables: &[SavedTable]) -> BTreeSet<Served> {
    let mut served = BTreeSet::new();
    for rule in tables.iter().filter(|t| t.name == "nat").flat_map(|t| &t.rules) {
        if !rule.target.as_deref().is_some_and(dnat_chain) {
            continue;
        }
        let words: Vec<String> = words(&rule.spec).into_iter().map(|(w, _)| w).collect();
        let after = |flags: &[&str]| words.windows(2).find(|w| flags.contains(&w[0].as_str())).map(|w| w[1].as_str());
        let (Some(proto), Some(port)) = (after(&["-p", "--protocol"]).and_then(proto_number), after(&["--dport"]))
        else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else { continue };
        match rule.chain.as_str() {
            "KUBE-SERVICES" => {
                let Some(addr) = after(&["-d", "--destination"]).and_then(host_address) else { continue };
                served.insert(Served::Address { addr, proto, port });
            }
            "KUBE-NODEPORTS" => {
                served.insert(Served::NodePort { proto, port });
            }
            _ => {}
        }
    }
    served
}

/// `10.96.0.1/32`, `fd00::1/128`: one address (a wider network is no Service address).
fn host_address(text: &str) -> Option<IpAddr> {
    let (addr, prefix) = text.split_once('/').unwrap_or((text, ""));
    let addr: IpAddr = addr.parse().ok()?;
    let host = match addr {
        IpAddr::V4(_) => ["", "32"].contains(&prefix),
        IpAddr::V6(_) => ["", "128"].contains(&prefix),
    };
    host.then_some(addr)
}

/// IPVS virtual servers: the ClusterIP ones on `kube-ipvs0`'s addresses, the NodePort ones on
/// every node address. Which is which is not recorded, so each server counts as both an
/// address and a NodePort (verdict serves no NodePort below 30000 by default, and no Service
/// address on a node address: the two do not meet in practice).
fn from_ipvs(servers: &[(IpAddr, u8, u16)]) -> BTreeSet<Served> {
    let mut served = BTreeSet::new();
    for &(addr, proto, port) in servers {
        if addr != IpAddr::V4(Ipv4Addr::UNSPECIFIED) && addr != IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
            served.insert(Served::Address { addr, proto, port });
        }
        served.insert(Served::NodePort { proto, port });
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: u8 = 6;
    const UDP: u8 = 17;

    fn addr(a: &str, proto: u8, port: u16) -> Served {
        Served::Address { addr: a.parse().unwrap(), proto, port }
    }

    #[test]
    fn keys_are_read_as_the_kernel_pads_them() {
        let v4 = [10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0];
        assert_eq!(address_key(&v4), Some(addr("10.96.0.10", UDP, 53)));
        let mut v6 = vec![0xfd, 0, 0, 0x96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        v6.extend([6, 0, 0, 0, 1, 0xbb, 0, 0]);
        assert_eq!(address_key(&v6), Some(addr("fd00:96::1", TCP, 443)));
        assert_eq!(node_port_key(&[6, 0, 0, 0, 0x76, 0xc0, 0, 0]), Some(Served::NodePort { proto: TCP, port: 30400 }));
        assert_eq!(address_key(&[1, 2, 3]), None);
        assert_eq!(addr("fd00:96::1", TCP, 443).to_string(), "[fd00:96::1]:443/tcp");
        assert_eq!(Served::NodePort { proto: UDP, port: 30053 }.to_string(), "NodePort 30053/udp");
    }

    /// kube-proxy's iptables mode as it saves (nat table), with a Service without endpoints
    /// (no nat rule), a load balancer behind its firewall chain, and kubelet's and others'
    /// rules beside.
    const SAVE: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SERVICES -d 203.0.113.7/32 -p tcp -m comment --comment "default/web:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-7EJNTS7AENER2WX5
-A KUBE-SERVICES -d 10.96.0.0/12 -p tcp -m tcp --dport 9 -j KUBE-SVC-NOTAHOSTXXXXXXXX
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-7EJNTS7AENER2WX5
-A KUBE-SVC-ERIFXISQEP7F7OF4 -m comment --comment "kube-system/kube-dns:dns-tcp -> 10.244.0.3:53" -j KUBE-SEP-IT2ZTR26TO4XFPTO
COMMIT
*filter
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d 10.96.0.99/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
"#;

    #[test]
    fn iptables_mode_serves_what_its_nat_jumps_reach() {
        let tables = super::super::iptables::parse_save(SAVE).unwrap();
        let served = from_iptables(&tables);
        let want: BTreeSet<Served> = [
            addr("10.96.0.10", UDP, 53),
            addr("10.96.0.1", TCP, 443),
            addr("203.0.113.7", TCP, 80),
            Served::NodePort { proto: TCP, port: 30080 },
        ]
        .into();
        assert_eq!(served, want);
    }

    #[test]
    fn ipvs_mode_runs_only_with_its_iptables_rules() {
        let ipvs = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\nCOMMIT\n";
        assert!(ipvs_mode_runs(&super::super::iptables::parse_save(ipvs).unwrap()));
        assert!(!ipvs_mode_runs(&super::super::iptables::parse_save(SAVE).unwrap()), "iptables mode is not IPVS mode");
        assert!(!ipvs_mode_runs(&[]), "no rules: the virtual servers are leftovers being drained");
    }

    #[test]
    fn ipvs_servers_count_as_addresses_and_node_ports() {
        let served = from_ipvs(&[("10.96.0.10".parse().unwrap(), UDP, 53), ("0.0.0.0".parse().unwrap(), TCP, 30080)]);
        assert!(served.contains(&addr("10.96.0.10", UDP, 53)));
        assert!(served.contains(&Served::NodePort { proto: TCP, port: 30080 }));
        assert!(!served.iter().any(|s| matches!(s, Served::Address { addr, .. } if addr.is_unspecified())));
    }
}
