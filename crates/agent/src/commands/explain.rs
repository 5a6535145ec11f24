//! `verdict explain`: where a new connection ends, from the same table `run` programs.

use crate::cli::ExplainArgs;
use crate::config::RulesConfig;
use crate::source;
use anyhow::{Context, Result, bail};
use std::net::{IpAddr, SocketAddr};
use verdict_layout::render;
use verdict_model::{Protocol, parse_ip_tolerant};
use verdict_nft::Ruleset;
use verdict_nft::explain::{Host, Packet, explain};
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;

/// Parses `IP:PORT[/PROTO]`.
pub fn parse_destination(raw: &str) -> Result<(SocketAddr, Protocol)> {
    let (addr, proto) = raw.rsplit_once('/').unwrap_or((raw, "tcp"));
    let protocol = match proto.to_ascii_lowercase().as_str() {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        other => bail!("--dst {raw:?}: {other:?} is not tcp, udp or sctp"),
    };
    let addr: SocketAddr = addr.parse().with_context(|| format!("--dst {raw:?} is not IP:PORT (IPv6: [IP]:PORT)"))?;
    Ok((addr, protocol))
}

/// Prints where the packet ends and why.
pub fn run(args: &ExplainArgs, cfg: &RulesConfig) -> Result<()> {
    let src: IpAddr =
        parse_ip_tolerant(&args.src).with_context(|| format!("--src {:?} is not an address", args.src))?;
    let (dst, protocol) = parse_destination(&args.dst)?;
    let mut extra = Vec::new();
    for raw in &args.node_address {
        extra.push(parse_ip_tolerant(raw).with_context(|| format!("--node-address {raw:?} is not an address"))?);
    }
    let packet = Packet { src, dst: dst.ip(), protocol, dport: dst.port(), in_interface: args.in_interface.clone() };
    let desired = match &args.manifests {
        Some(dir) => {
            let built = source::model_from_manifests(dir, cfg, &extra)?;
            source::report(&built.problems);
            let mut local: Vec<IpAddr> = built.model.node.addresses.clone();
            local.extend(&built.model.node.primary_ips);
            Some((render(&built.model, &cfg.render_options()), local))
        }
        None => None,
    };
    if !args.live {
        let (rs, local) = desired.context("--manifests DIR or --live is required")?;
        print!("{}", explain(&rs, &packet, &host(local, &extra)));
        return Ok(());
    }
    let live = live_table(&cfg.table)?;
    let local = host(verdict_controller::sync::local_addresses(), &extra);
    let answer = explain(&live, &packet, &local);
    println!("from the kernel's table inet {}:", cfg.table);
    print!("{answer}");
    if let Some((rs, _)) = desired {
        let wanted = explain(&rs, &packet, &local);
        if wanted.summary() == answer.summary() {
            println!("desired table (--manifests): the same answer");
        } else {
            println!(
                "desired table (--manifests) answers differently: {}\n\
                 the kernel's table drifted from it, or a sync is pending",
                wanted.summary()
            );
        }
    }
    Ok(())
}

/// The addresses `fib daddr type local` matches: the node's, the extra ones, loopback.
fn host(mut local: Vec<IpAddr>, extra: &[IpAddr]) -> Host {
    local.extend(extra);
    local.extend([IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)]);
    local.sort();
    local.dedup();
    Host { local_addresses: local }
}

/// The table the kernel holds, read over netlink.
fn live_table(table: &str) -> Result<Ruleset> {
    crate::privileges::ensure_net_admin()?;
    let mut nl = Netlink::open().context("opening netlink (explain --live needs CAP_NET_ADMIN)")?;
    let observed = observe(&mut nl, table).context("reading the table from the kernel")?;
    let observed = observed.with_context(|| {
        format!("the kernel has no table inet {table}: verdict has not programmed this node (or uses another --table)")
    })?;
    for what in &observed.foreign {
        eprintln!("verdict: note: the kernel's table holds {what}, which verdict did not write");
    }
    Ok(observed.ruleset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_and_without_protocol() {
        assert_eq!(parse_destination("10.0.0.1:80").unwrap(), ("10.0.0.1:80".parse().unwrap(), Protocol::Tcp));
        assert_eq!(parse_destination("[fd00::1]:53/UDP").unwrap(), ("[fd00::1]:53".parse().unwrap(), Protocol::Udp));
        assert!(parse_destination("10.0.0.1:80/icmp").is_err());
        assert!(parse_destination("10.0.0.1").is_err());
    }
}
