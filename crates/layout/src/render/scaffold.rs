//! The objects every table has, whatever its Services: base chains in upstream's hook and
//! priority contract, the dispatch chains, and the sets they consult.

use super::counters::{self, Outcome};
use super::matches::{
    nodeport_destinations, not_from_loopback, not_loopback, pod_item, to_localhost, to_nodeport_address,
};
use super::names::*;
use super::{addr_key, addr_vmap, port_vmap};
use verdict_model::{IpFamily, ProxyModel};
use verdict_nft::rule::build::*;
use verdict_nft::rule::{Item, Match, Op, Reject, Rule, Selector, Stmt, Value, encode_concat};
use verdict_nft::ruleset::{Chain, ChainKind, Datatype, Elem, Flowtable, Hook, KeySpec, Ruleset, Set, SetDecl};

/// Priorities of the hook contract (docs/design.md): the source-range firewall before DNAT,
/// DNAT at dstnat, no-endpoint checks at filter, masquerade at srcnat.
const PRE_DNAT: i32 = -110;
const DSTNAT: i32 = -100;
const FILTER: i32 = 0;
const SRCNAT: i32 = 100;

fn declare(rs: &mut Ruleset, decl: SetDecl) {
    rs.sets.insert(decl.name.clone(), Set::new(decl));
}

fn chain(rs: &mut Ruleset, c: Chain) {
    rs.chains.insert(c.name.clone(), c);
}

pub(super) fn render(model: &ProxyModel, families: &[IpFamily], rs: &mut Ruleset) {
    let mark = model.config.masquerade_mark();
    for &f in families {
        let ip_type = match f {
            IpFamily::V4 => Datatype::Ipv4Addr,
            IpFamily::V6 => Datatype::Ipv6Addr,
        };
        declare(
            rs,
            SetDecl::set(&family_name(CLUSTER_IPS, f), KeySpec::Type(vec![ip_type])).with_comment("Active ClusterIPs"),
        );
        // Upstream deletes `nodeport-ips` when every local address accepts NodePorts.
        if !model.config.nodeport_addresses.all_local(f) {
            declare(
                rs,
                SetDecl::set(&family_name(NODEPORT_IPS, f), KeySpec::Type(vec![ip_type]))
                    .with_comment("IPs that accept NodePort traffic"),
            );
        }
        declare(rs, addr_vmap(SERVICE_IPS, f, "ClusterIP, ExternalIP and LoadBalancer IP traffic"));
        declare(rs, port_vmap(SERVICE_NODEPORTS, f, "NodePort traffic"));
        declare(rs, addr_vmap(NO_ENDPOINT_SERVICES, f, "vmap to drop or reject packets to services with no endpoints"));
        declare(
            rs,
            port_vmap(
                NO_ENDPOINT_NODEPORTS,
                f,
                "vmap to drop or reject packets to service nodeports with no endpoints",
            ),
        );
        declare(rs, addr_vmap(FIREWALL_IPS, f, "destinations that are subject to LoadBalancerSourceRanges"));
        declare(
            rs,
            SetDecl::set(&family_name(HAIRPIN_ENDPOINTS, f), KeySpec::Type(vec![ip_type, ip_type]))
                .with_comment("endpoints reaching themselves through a Service"),
        );
    }
    for ip in model.nodeport_ips() {
        let f = IpFamily::of(&ip);
        if families.contains(&f) {
            let set = rs.sets.get_mut(family_name(NODEPORT_IPS, f).as_ref()).expect("declared above");
            std::sync::Arc::make_mut(&mut set.elements).insert(encode_concat(&[Value::Addr(ip)]), Elem::plain());
        }
    }

    let new_jump = |to: &str| Rule::new(vec![ct_state_new(), jump(to)]);
    let localhost = model.config.localhost_nodeports && families.contains(&IpFamily::V4);
    let mut prerouting = Vec::new();
    if (localhost || model.config.loopback_guard) && families.contains(&IpFamily::V4) {
        // route_localnet (which localhost NodePorts need) lets the kernel route packets to
        // 127.0.0.0/8 that arrive from the network: before anything else, only the node's own
        // (which come back in over loopback) may reach a NodePort or a local socket there.
        let guard = Rule::new(vec![not_from_loopback(), to_localhost(), verdict(verdict_nft::ruleset::Verdict::Drop)]);
        prerouting.push(guard.comment("127.0.0.0/8 only from the node itself (CVE-2020-8558)"));
    }
    prerouting.push(new_jump(FIREWALL_CHECK));
    chain(rs, Chain::base(FILTER_PREROUTING_PRE_DNAT, ChainKind::Filter, Hook::Prerouting, PRE_DNAT, prerouting));
    chain(
        rs,
        Chain::base(FILTER_OUTPUT_PRE_DNAT, ChainKind::Filter, Hook::Output, PRE_DNAT, vec![new_jump(FIREWALL_CHECK)]),
    );
    chain(
        rs,
        Chain::base(NAT_PREROUTING, ChainKind::Nat, Hook::Prerouting, DSTNAT, vec![Rule::new(vec![jump(SERVICES)])]),
    );
    let mut nat_output = vec![Rule::new(vec![jump(SERVICES)])];
    if localhost {
        // Only here, in the output hook: connections the node opens to 127.0.0.0/8. Their
        // source (127.0.0.1) is masqueraded like any NodePort's, so the endpoint can answer.
        let rule = Rule::new(vec![
            to_localhost(),
            vmap(&[Selector::L4Proto, Selector::ThDport], &family_name(SERVICE_NODEPORTS, IpFamily::V4)),
        ]);
        nat_output.push(rule.comment("localhost NodePorts"));
    }
    chain(rs, Chain::base(NAT_OUTPUT, ChainKind::Nat, Hook::Output, DSTNAT, nat_output));
    chain(
        rs,
        Chain::base(
            NAT_POSTROUTING,
            ChainKind::Nat,
            Hook::Postrouting,
            SRCNAT,
            vec![Rule::new(vec![jump(MASQUERADING)])],
        ),
    );
    let input = vec![new_jump(NODEPORT_ENDPOINTS_CHECK), new_jump(SERVICE_ENDPOINTS_CHECK)];
    chain(rs, Chain::base(FILTER_INPUT, ChainKind::Filter, Hook::Input, FILTER, input));
    let mut forward = Vec::new();
    if model.config.drop_ct_invalid {
        let rule = Rule::new(vec![ct_state_invalid(), verdict(verdict_nft::ruleset::Verdict::Drop)]);
        forward.push(rule.comment("conntrack INVALID (iptables mode's KUBE-FORWARD)"));
    }
    forward.extend([new_jump(SERVICE_ENDPOINTS_CHECK), new_jump(CLUSTER_IPS_CHECK)]);
    chain(rs, Chain::base(FILTER_FORWARD, ChainKind::Filter, Hook::Forward, FILTER, forward));
    let output = vec![new_jump(SERVICE_ENDPOINTS_CHECK), new_jump(CLUSTER_IPS_CHECK)];
    chain(rs, Chain::base(FILTER_OUTPUT, ChainKind::Filter, Hook::Output, FILTER, output));

    let mut services = Vec::new();
    for &f in families {
        let to_cluster_ip = in_set(&[Selector::Daddr(f)], &family_name(CLUSTER_IPS, f));
        if model.config.masquerade_all {
            let rule = Rule::new(vec![to_cluster_ip, stmt(Stmt::MarkOr(mark))]);
            services.push(rule.comment("masquerade all ClusterIP traffic"));
        } else if let Some(pod) = model.pod_match(f) {
            let rule = Rule::new(vec![to_cluster_ip, pod_item(&pod, f, Op::Neq), stmt(Stmt::MarkOr(mark))]);
            services.push(rule.comment("masquerade ClusterIP traffic from outside the cluster"));
        }
    }
    for &f in families {
        services.push(Rule::new(vec![vmap(&addr_key(f), &family_name(SERVICE_IPS, f))]));
    }
    for &f in families {
        let mut rule = to_nodeport_address(model, f);
        rule.push(vmap(&[Selector::L4Proto, Selector::ThDport], &family_name(SERVICE_NODEPORTS, f)));
        services.push(Rule::new(rule));
    }
    chain(rs, Chain::regular(SERVICES, services));

    let mut masquerading = vec![Rule::new(vec![
        Item::Match(Match::Masked { left: Selector::Mark, mask: mark, op: Op::Neq, right: 0 }),
        stmt(Stmt::MarkXor(mark)),
        stmt(Stmt::Masquerade { fully_random: true }),
    ])];
    for &f in families {
        masquerading.push(Rule::new(vec![
            ct_status_dnat(),
            in_set(&[Selector::Saddr(f), Selector::Daddr(f)], &family_name(HAIRPIN_ENDPOINTS, f)),
            stmt(Stmt::Masquerade { fully_random: true }),
        ]));
    }
    chain(rs, Chain::regular(MASQUERADING, masquerading));

    let vmaps = |set: &str| -> Vec<Rule> {
        families.iter().map(|&f| Rule::new(vec![vmap(&addr_key(f), &family_name(set, f))])).collect()
    };
    chain(rs, Chain::regular(FIREWALL_CHECK, vmaps(FIREWALL_IPS)));
    chain(rs, Chain::regular(SERVICE_ENDPOINTS_CHECK, vmaps(NO_ENDPOINT_SERVICES)));
    let mut nodeport_checks = Vec::new();
    for &f in families {
        // Only the input hook jumps here: the destination is local already, so upstream
        // leaves out the `fib` test and keeps the loopback exclusion; localhost NodePorts
        // (which reach input over loopback) are a rule of their own.
        let mut destinations = match model.config.nodeport_addresses.all_local(f) {
            true => vec![vec![not_loopback(f)]],
            false => vec![to_nodeport_address(model, f)],
        };
        if f == IpFamily::V4 && localhost {
            destinations.push(vec![to_localhost()]);
        }
        for mut rule in destinations {
            rule.push(vmap(&[Selector::L4Proto, Selector::ThDport], &family_name(NO_ENDPOINT_NODEPORTS, f)));
            nodeport_checks.push(Rule::new(rule));
        }
    }
    chain(rs, Chain::regular(NODEPORT_ENDPOINTS_CHECK, nodeport_checks));

    let mut cluster_ips_check = Vec::new();
    for &f in families {
        let reject = match f {
            IpFamily::V4 => Reject::Icmp,
            IpFamily::V6 => Reject::Icmpv6,
        };
        let rule =
            Rule::new(vec![in_set(&[Selector::Daddr(f)], &family_name(CLUSTER_IPS, f)), stmt(Stmt::Reject(reject))]);
        cluster_ips_check.push(rule.comment("reject traffic to invalid ports of ClusterIPs"));
    }
    for cidr in model.service_cidrs.iter().filter(|c| families.contains(&c.family())) {
        let rule = Rule::new(vec![
            in_net(Selector::Daddr(cidr.family()), Op::Eq, *cidr),
            verdict(verdict_nft::ruleset::Verdict::Drop),
        ]);
        cluster_ips_check.push(rule.comment("drop traffic to unallocated ClusterIPs"));
    }
    chain(rs, Chain::regular(CLUSTER_IPS_CHECK, cluster_ips_check));
    let mut reject = Vec::new();
    if model.config.service_counters.enabled() {
        for &f in families {
            for (outcome, keyed, _) in counters::sets(f) {
                declare(rs, counters::decl(outcome, keyed, f));
            }
            // Only no-endpoint elements lead here: a hit is a rejected connection.
            reject.push(counters::count_address(Outcome::Rejected, f));
            for guard in nodeport_destinations(model, f) {
                reject.push(counters::count_node_port(Outcome::Rejected, f, guard));
            }
        }
    }
    reject.push(Rule::new(vec![stmt(Stmt::Reject(Reject::PortUnreachable))]));
    chain(rs, Chain::regular(REJECT_CHAIN, reject));
}

/// The fast path: the flowtable, and the rule that offloads to it. Only connections that were
/// DNATed to a Service endpoint qualify, and only once established (a reply was seen), so a
/// connection's first packets, the no-endpoint rejects and the source-range firewall all take
/// the normal path; TCP and UDP are what the kernel's flowtable can forward.
pub(super) fn fast_path(rs: &mut Ruleset) {
    rs.flowtables.insert(FAST_PATH.to_string(), Flowtable::new(FAST_PATH));
    let forward = rs.chains.get_mut(FILTER_FORWARD).expect("the scaffold has filter-forward");
    let offload = Rule::new(vec![
        ct_state_established(),
        ct_status_dnat(),
        Item::Match(Match::InAnonSet {
            left: Selector::L4Proto,
            values: vec![Value::Proto(libc::IPPROTO_TCP as u8), Value::Proto(libc::IPPROTO_UDP as u8)],
        }),
        stmt(Stmt::FlowAdd { flowtable: FAST_PATH.to_string() }),
    ]);
    forward.rules.push(offload.comment("offload established Service connections"));
}
