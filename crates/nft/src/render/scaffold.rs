//! The objects every table has, whatever its Services: base chains in upstream's hook and
//! priority contract, the dispatch chains, and the sets they consult.

use super::names::*;
use super::{addr_key, addr_vmap, port_vmap};
use crate::rule::build::*;
use crate::rule::{Item, Match, Op, Reject, Rule, Selector, Stmt};
use crate::ruleset::{Chain, ChainKind, Datatype, Elem, Hook, KeySpec, Ruleset, Set, SetDecl};
use verdict_model::{IpFamily, ProxyModel};

/// Priorities of the hook contract (docs/design.md): DNAT at dstnat, no-endpoint checks at
/// filter, masquerade at srcnat.
const DSTNAT: i32 = -100;
const FILTER: i32 = 0;
const SRCNAT: i32 = 100;

pub(super) fn render(model: &ProxyModel, families: &[IpFamily], b: &mut Ruleset) {
    let declare = |rs: &mut Ruleset, decl: SetDecl| {
        rs.sets.insert(decl.name.clone(), Set::new(decl));
    };
    let mark = model.config.masquerade_mark();
    let chain = |rs: &mut Ruleset, c: Chain| {
        rs.chains.insert(c.name.clone(), c);
    };
    for &f in families {
        let ip_type = match f {
            IpFamily::V4 => Datatype::Ipv4Addr,
            IpFamily::V6 => Datatype::Ipv6Addr,
        };
        declare(
            b,
            SetDecl::set(&family_name(CLUSTER_IPS, f), KeySpec::Type(vec![ip_type])).with_comment("Active ClusterIPs"),
        );
        declare(
            b,
            SetDecl::set(&family_name(NODEPORT_IPS, f), KeySpec::Type(vec![ip_type]))
                .with_comment("IPs that accept NodePort traffic"),
        );
        declare(b, addr_vmap(SERVICE_IPS, f, "ClusterIP, ExternalIP and LoadBalancer IP traffic"));
        declare(b, port_vmap(SERVICE_NODEPORTS, f, "NodePort traffic"));
        declare(b, addr_vmap(NO_ENDPOINT_SERVICES, f, "vmap to drop or reject packets to services with no endpoints"));
        declare(
            b,
            port_vmap(
                NO_ENDPOINT_NODEPORTS,
                f,
                "vmap to drop or reject packets to service nodeports with no endpoints",
            ),
        );
        declare(
            b,
            SetDecl::set(&family_name(HAIRPIN_ENDPOINTS, f), KeySpec::Type(vec![ip_type, ip_type]))
                .with_comment("endpoints reaching themselves through a Service"),
        );
    }
    for ip in model.nodeport_ips() {
        let f = IpFamily::of(&ip);
        if families.contains(&f) {
            let set = b.sets.get_mut(&family_name(NODEPORT_IPS, f)).expect("declared above");
            std::sync::Arc::make_mut(&mut set.elements)
                .insert(crate::rule::encode_concat(&[crate::rule::Value::Addr(ip)]), Elem::plain());
        }
    }

    chain(
        b,
        Chain::base(NAT_PREROUTING, ChainKind::Nat, Hook::Prerouting, DSTNAT, vec![Rule::new(vec![jump(SERVICES)])]),
    );
    chain(b, Chain::base(NAT_OUTPUT, ChainKind::Nat, Hook::Output, DSTNAT, vec![Rule::new(vec![jump(SERVICES)])]));
    chain(
        b,
        Chain::base(
            NAT_POSTROUTING,
            ChainKind::Nat,
            Hook::Postrouting,
            SRCNAT,
            vec![Rule::new(vec![jump(MASQUERADING)])],
        ),
    );
    let new_jump = |chain: &str| Rule::new(vec![ct_state_new(), jump(chain)]);
    chain(
        b,
        Chain::base(
            FILTER_INPUT,
            ChainKind::Filter,
            Hook::Input,
            FILTER,
            vec![new_jump(NODEPORT_ENDPOINTS_CHECK), new_jump(SERVICE_ENDPOINTS_CHECK)],
        ),
    );
    chain(
        b,
        Chain::base(
            FILTER_FORWARD,
            ChainKind::Filter,
            Hook::Forward,
            FILTER,
            vec![new_jump(SERVICE_ENDPOINTS_CHECK), new_jump(CLUSTER_IPS_CHECK)],
        ),
    );
    chain(
        b,
        Chain::base(
            FILTER_OUTPUT,
            ChainKind::Filter,
            Hook::Output,
            FILTER,
            vec![new_jump(SERVICE_ENDPOINTS_CHECK), new_jump(CLUSTER_IPS_CHECK)],
        ),
    );

    let mut services = Vec::new();
    for &f in families {
        let to_cluster_ip = in_set(&[Selector::Daddr(f)], &family_name(CLUSTER_IPS, f));
        if model.config.masquerade_all {
            services.push(
                Rule::new(vec![to_cluster_ip, stmt(Stmt::MarkOr(mark))]).comment("masquerade all ClusterIP traffic"),
            );
        } else if let Some(cidr) = model.cluster_cidr(f) {
            services.push(
                Rule::new(vec![to_cluster_ip, in_net(Selector::Saddr(f), Op::Neq, cidr), stmt(Stmt::MarkOr(mark))])
                    .comment("masquerade ClusterIP traffic from outside the cluster"),
            );
        }
    }
    for &f in families {
        services.push(Rule::new(vec![vmap(&addr_key(f), &family_name(SERVICE_IPS, f))]));
    }
    for &f in families {
        services.push(Rule::new(vec![
            in_set(&[Selector::Daddr(f)], &family_name(NODEPORT_IPS, f)),
            vmap(&[Selector::L4Proto, Selector::ThDport], &family_name(SERVICE_NODEPORTS, f)),
        ]));
    }
    chain(b, Chain::regular(SERVICES, services));

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
    chain(b, Chain::regular(MASQUERADING, masquerading));

    chain(
        b,
        Chain::regular(
            SERVICE_ENDPOINTS_CHECK,
            families
                .iter()
                .map(|&f| Rule::new(vec![vmap(&addr_key(f), &family_name(NO_ENDPOINT_SERVICES, f))]))
                .collect(),
        ),
    );
    chain(
        b,
        Chain::regular(
            NODEPORT_ENDPOINTS_CHECK,
            families
                .iter()
                .map(|&f| {
                    Rule::new(vec![
                        in_set(&[Selector::Daddr(f)], &family_name(NODEPORT_IPS, f)),
                        vmap(&[Selector::L4Proto, Selector::ThDport], &family_name(NO_ENDPOINT_NODEPORTS, f)),
                    ])
                })
                .collect(),
        ),
    );
    chain(
        b,
        Chain::regular(
            CLUSTER_IPS_CHECK,
            families
                .iter()
                .map(|&f| {
                    let reject = match f {
                        IpFamily::V4 => Reject::Icmp,
                        IpFamily::V6 => Reject::Icmpv6,
                    };
                    Rule::new(vec![
                        in_set(&[Selector::Daddr(f)], &family_name(CLUSTER_IPS, f)),
                        stmt(Stmt::Reject(reject)),
                    ])
                    .comment("reject traffic to invalid ports of ClusterIPs")
                })
                .collect(),
        ),
    );
    chain(b, Chain::regular(REJECT_CHAIN, vec![Rule::new(vec![stmt(Stmt::Reject(Reject::PortUnreachable))])]));
}
