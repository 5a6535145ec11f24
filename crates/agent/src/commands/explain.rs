//! `verdict explain`: where a new connection ends, from the same table `run` programs.

use crate::cli::ExplainArgs;
use crate::config::RulesConfig;
use crate::source;
use anyhow::{Context, Result, bail};
use std::net::{IpAddr, SocketAddr};
use verdict_model::{Protocol, parse_ip_tolerant};
use verdict_nft::explain::{Host, Packet, explain};
use verdict_nft::{RenderOptions, render};

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
    let built = source::model_from_manifests(&args.manifests, cfg, &extra)?;
    source::report(&built.problems);
    let rs = render(&built.model, &RenderOptions { table: cfg.table.clone() });
    let mut local: Vec<IpAddr> = built.model.node.addresses.clone();
    local.extend(&built.model.node.primary_ips);
    local.extend(["127.0.0.1".parse::<IpAddr>()?, "::1".parse()?]);
    local.sort();
    local.dedup();
    let packet = Packet { src, dst: dst.ip(), protocol, dport: dst.port(), in_interface: args.in_interface.clone() };
    print!("{}", explain(&rs, &packet, &Host { local_addresses: local }));
    Ok(())
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
