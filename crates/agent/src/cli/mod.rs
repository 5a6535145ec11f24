//! What the user typed. Validation into a [`crate::config`] happens in `config`; flags left
//! unset are `None`, so that `config` knows which were given: with `--config`, kube-proxy's
//! own flags are ignored but for a few (`config` says which, as upstream's `options.go` does),
//! while verdict's own flags still apply.

mod upstream;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
pub use upstream::UpstreamArgs;

/// verdict: an nftables-native Kubernetes Service proxy.
///
/// A flag given twice is read as kube-proxy's pflag reads it: the last value wins, but for the
/// list flags (`--nodeport-addresses`, `--ipvs-exclude-cidrs`, `--feature-gates`, `--vmodule`,
/// and verdict's `--flowtable-interfaces` and `--node-address`), whose values add up.
#[derive(Debug, Parser)]
#[command(name = "verdict", version, about, long_about = None, args_override_self = true)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Program the node's nftables table from the cluster (or a manifests directory) and keep it
    /// up to date.
    Run(Box<RunArgs>),
    /// Print the nft text of the table that would be programmed (no root, no kernel).
    Render(RenderArgs),
    /// Delete verdict's table (never kube-proxy's rules): with `--after-kube-proxy`, only once
    /// kube-proxy's rules serve what it serves (the way back to kube-proxy).
    Cleanup(CleanupArgs),
    /// Remove what upstream kube-proxy programmed, in every mode (iptables chains, the
    /// `ip`/`ip6 kube-proxy` tables, IPVS virtual servers, `kube-ipvs0`, ipsets). `verdict
    /// run` starts it itself once its own table is in place.
    RemoveLeftovers(RemoveLeftoversArgs),
    /// Say where a new connection ends in the table `run` would program (endpoints it may
    /// reach, masqueraded or not, DROP, REJECT, not handled) and which rules and map entries
    /// decide it. No root, no kernel.
    Explain(ExplainArgs),
    /// Trace real new connections to a destination through the kernel's table: the chains,
    /// map entries and verdicts each passed, and the endpoint it was DNATed to. Needs
    /// CAP_NET_ADMIN, on the node.
    Trace(TraceArgs),
}

/// Flags that shape the rules, shared by `run` and `render` (kube-proxy's names).
#[derive(Debug, Clone, Args)]
pub struct RulesArgs {
    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1). As with kube-proxy,
    /// it wins over kube-proxy's flags but `--hostname-override` and the logging flags;
    /// verdict's own flags apply over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The name of this node (default: the host name).
    #[arg(long, value_name = "NODE")]
    pub hostname_override: Option<String>,
    /// The pod network(s), at most one per family, comma-separated; traffic to a ClusterIP
    /// from outside it is masqueraded. One string, as kube-proxy's: given twice, the last wins.
    #[arg(long, value_name = "CIDR[,CIDR]")]
    pub cluster_cidr: Option<String>,
    /// Which node addresses accept NodePort traffic, comma-separated: CIDRs (the node addresses
    /// inside them), `primary` (the Node's primary IPs), `all` (every local address, including
    /// ones added later), `localhost` (IPv4 127.0.0.0/8, for the node's own connections), in
    /// any combination (the union). `0.0.0.0/0` or `::/0` is `all` for its family, and a family
    /// no CIDR names takes every address. Unset: `primary` in nftables mode, every local
    /// address in iptables or ipvs mode's place (as upstream).
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub nodeport_addresses: Vec<String>,
    /// Masquerade all traffic sent to ClusterIPs (`--masquerade-all` or `=true|false`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub masquerade_all: Option<bool>,
    /// The packet-mark bit (0-31) that asks for masquerading (default 14).
    #[arg(long, value_name = "BIT")]
    pub masquerade_bit: Option<i64>,
    /// The nftables table (family inet) verdict owns (default `kube-proxy`).
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    /// How traffic from pods is recognised: ClusterCIDR (default), NodeCIDR (the Node's
    /// podCIDRs), BridgeInterface or InterfaceNamePrefix.
    #[arg(long, value_name = "MODE")]
    pub detect_local_mode: Option<String>,
    /// The pods' bridge, for `--detect-local-mode=BridgeInterface`.
    #[arg(long, value_name = "NAME")]
    pub pod_bridge_interface: Option<String>,
    /// The prefix of pod interface names, for `--detect-local-mode=InterfaceNamePrefix`.
    #[arg(long, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,
    /// The Service ClusterIP range(s), comma-separated, like kube-apiserver's flag (one
    /// string: given twice, the last wins): traffic to unallocated addresses in them is dropped
    /// (networking.k8s.io/v1 ServiceCIDR objects add to these).
    #[arg(long, value_name = "CIDR,...")]
    pub service_cluster_ip_range: Option<String>,
    /// Per-Service connection counters in the kernel, exported as
    /// `verdict_service_connections_total`: `off` (default), `all` Service ports, or only the
    /// ports of Services whose labels match `--service-counters-selector` (`labelled`).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = CountersMode::Off)]
    pub service_counters: CountersMode,
    /// The label selector of `--service-counters=labelled`: comma-separated `key` (the label
    /// is present) or `key=value` requirements, all of which must hold.
    #[arg(long, value_name = "SELECTOR")]
    pub service_counters_selector: Option<String>,
    /// The most table objects one Service may add (its set elements, addresses x endpoints in
    /// the shared maps, and the chains, rules and sets of ports with chains of their own),
    /// counted before rendering; a Service beyond it is left out whole with a problem and an
    /// Event, so that one object cannot grow the table without bound (default 50000).
    #[arg(long, value_name = "N")]
    pub max_elements_per_service: Option<usize>,
    /// The fast path (off by default): interfaces, by name or name prefix (`veth*`),
    /// comma-separated, whose established Service connections are offloaded to a software
    /// flowtable in verdict's table. Their later packets skip routing and the netfilter hooks
    /// (a NetworkPolicy filtering established traffic in `forward` no longer sees them; see
    /// docs/operations.md). New matching interfaces, such as pod veths, join as they appear.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub flowtable_interfaces: Vec<String>,
}

/// `--service-counters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CountersMode {
    /// No counters (the table has no counting sets).
    Off,
    /// Every Service port.
    All,
    /// Services matching `--service-counters-selector`.
    Labelled,
}

/// `verdict run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A kubeconfig file. Without one, `--master` names the API server and the pod's service
    /// account authenticates; with neither, in-cluster configuration, as kube-proxy (the
    /// `kubernetes` Service's ClusterIP, reachable only while a proxy serves it: a warning says
    /// so).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The API server's real address (e.g. `https://10.0.0.10:6443`), overriding the
    /// kubeconfig's.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// Read Services, EndpointSlices and Nodes from YAML files in this directory instead of an
    /// API server (and follow changes to them).
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Program the table once and exit: 0 on success, non-zero with the reason on failure.
    #[arg(long)]
    pub once: bool,
    /// Remove the proxy rules of every mode (verdict's table and kube-proxy's rules) and exit,
    /// as `kube-proxy --cleanup` does.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub cleanup: Option<bool>,
    /// Once verdict's table is in place (its first sync), remove what upstream kube-proxy
    /// programmed in any mode (iptables KUBE-* chains, the `ip`/`ip6 kube-proxy` tables, IPVS
    /// state), as kube-proxy does when it switches modes.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub cleanup_leftovers: bool,
    /// How long kube-proxy's IPVS virtual servers and `kube-ipvs0` are kept, after verdict's
    /// first sync, while IPVS still forwards connections of theirs (new connections are
    /// verdict's at once); `0s` removes them with the rest.
    #[arg(long, value_name = "DURATION", default_value = "15m")]
    pub ipvs_drain_timeout: String,
    /// Where `/metrics` and `/proxyMode` are served (default 127.0.0.1:10249; empty: off;
    /// ignored with `--config`, as kube-proxy ignores it).
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_bind_address: Option<String>,
    /// Where `/healthz` and `/livez` are served (default 0.0.0.0:10256; empty: off; ignored
    /// with `--config`, as kube-proxy ignores it).
    #[arg(long, value_name = "IP:PORT")]
    pub healthz_bind_address: Option<String>,
    /// Minimum time between syncs (default 1s), e.g. `500ms`, `1s`, `1m`.
    #[arg(long, value_name = "DURATION")]
    pub min_sync_period: Option<String>,
    /// kube-proxy's sync period: the table is synced at least this often (a sync with nothing
    /// to do writes nothing), failures are retried within it, and the agent is unhealthy after
    /// twice this without programming (default 30s).
    #[arg(long, value_name = "DURATION")]
    pub sync_period: Option<String>,
    /// Where the table's state is saved on SIGTERM, so that the next start adopts the table
    /// without reading its elements back from the kernel (a hostPath in the DaemonSet; empty:
    /// every start reads the whole table).
    #[arg(long, value_name = "DIR", default_value = "/run/verdict")]
    pub state_dir: String,
    /// How long the API server has to answer a request, to send a whole list page, and to
    /// send the next object of a list (default 1m, the API server's own request timeout):
    /// beyond it the list or watch is abandoned and retried.
    #[arg(long, value_name = "DURATION")]
    pub api_timeout: Option<String>,
    /// How often `--service-counters` are read from the kernel for `/metrics` (default 10s;
    /// never more often than every 20 reads' duration, so reading takes at most 5% of a core).
    #[arg(long, value_name = "DURATION")]
    pub service_counters_period: Option<String>,
    /// Rule flags.
    #[command(flatten)]
    pub rules: RulesArgs,
    /// kube-proxy's other flags.
    #[command(flatten)]
    pub upstream: UpstreamArgs,
}

/// `verdict render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The manifests directory.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// Rule flags.
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// `verdict cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// The nftables table (family inet) to delete.
    #[arg(long, value_name = "NAME", default_value = verdict_nft::ruleset::DEFAULT_TABLE)]
    pub table: String,
    /// Wait until kube-proxy's rules (any mode) serve every Service address and NodePort
    /// verdict's table serves, or serve some and have not changed for `--settle`, then delete
    /// the table. The way back to kube-proxy: run it beside the restored kube-proxy.
    #[arg(long)]
    pub after_kube_proxy: bool,
    /// With `--after-kube-proxy`: how long kube-proxy's rules must stay unchanged before the
    /// addresses they still lack count as Services deleted since verdict stopped.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub settle: String,
    /// With `--after-kube-proxy`: give up after this long (exit 1, the table kept); default:
    /// wait as long as it takes.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Once done, keep running until signalled (for a container that must not exit).
    #[arg(long)]
    pub keep_running: bool,
    /// Change nothing: exit 0 when the table is absent, 1 when it exists (a readiness probe).
    #[arg(long, conflicts_with_all = ["after_kube_proxy", "keep_running"])]
    pub check: bool,
}

/// `verdict remove-leftovers`.
#[derive(Debug, Args)]
pub struct RemoveLeftoversArgs {
    /// Wait for a line on stdin before removing anything; end of input first removes nothing.
    /// `verdict run` starts this command so and writes the line after its first sync.
    #[arg(long)]
    pub wait_for_stdin: bool,
    /// How long kube-proxy's IPVS virtual servers and `kube-ipvs0` are kept while IPVS still
    /// forwards connections of theirs (`0s`: at once). With `--wait-for-stdin`, end of input
    /// ends the wait and keeps them.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub ipvs_drain_timeout: String,
}

/// `verdict explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The manifests directory: the table they render is explained (with `--live`: compared
    /// with the kernel's).
    #[arg(long, value_name = "DIR", required_unless_present = "live")]
    pub manifests: Option<PathBuf>,
    /// Explain the table the kernel holds (needs CAP_NET_ADMIN, on the node), not a rendered
    /// one.
    #[arg(long)]
    pub live: bool,
    /// The client's address (one of the node's own addresses: a connection the node opens).
    #[arg(long, value_name = "IP")]
    pub src: String,
    /// The destination: `IP:PORT`, `[IPv6]:PORT`, with `/tcp` (default), `/udp` or `/sctp`.
    #[arg(long, value_name = "IP:PORT[/PROTO]")]
    pub dst: String,
    /// The interface the packet arrives on (for the BridgeInterface and InterfaceNamePrefix
    /// detect-local modes).
    #[arg(long, value_name = "NAME")]
    pub in_interface: Option<String>,
    /// More addresses of the node, besides its Node object's (`fib ... type local`).
    #[arg(long, value_name = "IP,...", value_delimiter = ',')]
    pub node_address: Vec<String>,
    /// Rule flags.
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// `verdict trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The destination: `IP:PORT`, `[IPv6]:PORT`, with `/tcp` (default), `/udp` or `/sctp`.
    #[arg(long, value_name = "IP:PORT[/PROTO]")]
    pub dst: String,
    /// Only connections from clients in this network (an address is a /32 or /128).
    #[arg(long, value_name = "CIDR")]
    pub src: Option<String>,
    /// Stop after this many traced connections.
    #[arg(long, value_name = "N")]
    pub count: Option<u32>,
    /// Stop after this long (e.g. `30s`, `5m`; at most `1h`); also how long a running agent
    /// keeps the trace chains should this command die without removing them.
    #[arg(long = "for", value_name = "DURATION", default_value = "5m")]
    pub duration: String,
    /// The nftables table (family inet) verdict programs.
    #[arg(long, value_name = "NAME", default_value = verdict_nft::ruleset::DEFAULT_TABLE)]
    pub table: String,
}

#[cfg(test)]
mod tests;
