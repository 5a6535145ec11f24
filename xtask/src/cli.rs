//! What `cargo xtask` accepts, declared for clap: every command answers `--help`, and a
//! mistyped flag is an error (exit 2) rather than ignored, which used to start an 18-minute
//! kernel matrix or the e2e scenarios with defaults.
//!
//! The benchmark drivers (`verdict-bench`, `verdict-bench-e2e`, `verdict-bench-counters`) keep
//! their defaults; the flags here are forwarded to them only when given, so a default is stated
//! in one place: the driver (the help text repeats it).

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum, builder::PossibleValuesParser};
use std::path::PathBuf;

#[cfg(test)]
mod tests;

/// verdict's developer commands.
///
/// xtask itself has no C dependencies, so it can install the Debian packages the rest of the
/// workspace needs (libnftnl, libmnl, nftables, ...) before building it. Most commands need root.
#[derive(Parser, Debug)]
#[command(name = "xtask", bin_name = "cargo xtask")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Installs missing packages (as root), then fmt, clippy, cargo deny, every test and the e2e
    /// scenarios
    Test(Test),
    /// cargo-deny (installed once if missing): advisories from the vendored RustSec database,
    /// licences, bans and sources, as deny.toml says, after checking deny.toml refuses what it should
    Deny,
    /// A two-node namespace cluster with verdict agents: a Service created, scaled, deleted
    Demo,
    /// Cold sync and one-endpoint change: verdict over netlink vs `nft -f` (report in
    /// target/bench/report.md); or --e2e, or --counters, or --dataplane
    Bench(Box<Bench>),
    /// The e2e scenarios on a two-node namespace cluster; or on kind (--kind); or with each agent
    /// a container of the image (--containers)
    E2e(E2e),
    /// Builds the container image with docker or podman
    Image(Image),
    /// The kernel and packet suites on Debian's kernels (or one built here), each booted in QEMU
    Kernels(Kernels),
}

#[derive(Args, Debug)]
pub struct Test {
    /// Extra arguments for `cargo test --workspace --release`, such as a test name filter
    #[arg(allow_hyphen_values = true, value_name = "CARGO_TEST_ARGS")]
    pub cargo_test: Vec<String>,
    /// Arguments for the test binaries, after `--` (such as --nocapture)
    #[arg(last = true, value_name = "TEST_ARGS")]
    pub test_binaries: Vec<String>,
}

impl Test {
    /// What follows `cargo test --workspace --release`, the `--` kept.
    pub fn forwarded(&self) -> Vec<String> {
        let mut out = self.cargo_test.clone();
        if !self.test_binaries.is_empty() {
            out.push("--".into());
            out.extend(self.test_binaries.iter().cloned());
        }
        out
    }
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("mode").args(["e2e", "counters", "dataplane"])))]
pub struct Bench {
    /// The real `verdict run` binary against the test API server: start to programmed, warm
    /// restart, RSS (verdict-bench-e2e; report and plots in target/bench)
    #[arg(long)]
    pub e2e: bool,
    /// What --service-counters costs: cold commit, connect latency, connections/s, counter reads
    /// (verdict-bench-counters)
    #[arg(long)]
    pub counters: bool,

    /// The data plane: connections/s, connect latency, bulk throughput, CPU per GB and UDP
    /// request/response through no proxy, one static DNAT rule, verdict and kube-proxy's iptables
    /// modes, at each of --sizes (verdict-bench-dataplane; target/bench/dataplane.md and plots)
    #[arg(long)]
    pub dataplane: bool,

    /// Cold-sync sizes, in Services [default: 1000,10000,100000; with --dataplane:
    /// 100,10000,100000]
    #[arg(long, value_name = "N,...", value_delimiter = ',', conflicts_with_all = ["e2e", "counters"])]
    pub sizes: Vec<usize>,
    /// One-endpoint-change sizes, in Services [default: 1000,100000]
    #[arg(long, value_name = "N,...", value_delimiter = ',', conflicts_with = "mode")]
    pub change_sizes: Vec<usize>,
    /// Endpoints per Service [default: 10; with --counters: 2; with --dataplane also the server
    /// pods per node]
    #[arg(long, value_name = "E", conflicts_with = "e2e")]
    pub endpoints: Option<usize>,
    /// Runs per size (the median is reported) [default: 3]
    #[arg(long, value_name = "R", conflicts_with_all = ["e2e", "dataplane"])]
    pub runs: Option<usize>,
    /// One-endpoint changes per size [default: 9]
    #[arg(long, value_name = "C", conflicts_with = "mode")]
    pub changes: Option<usize>,
    /// Every endpoint a different pod address, instead of a shared pool of pods
    #[arg(long, conflicts_with = "mode")]
    pub unique_pods: bool,

    /// With --e2e: a second `verdict` binary, measured side by side
    #[arg(long, value_name = "PATH", requires = "e2e")]
    pub baseline: Option<PathBuf>,
    /// With --e2e: the points, Services x endpoints [default:
    /// 1000x10,10000x2,10000x10,20000x10,100000x10]
    #[arg(long, value_name = "SxE,...", requires = "e2e")]
    pub points: Option<String>,
    /// With --e2e: seconds to wait after the sync for RSS to settle [default: 15]
    #[arg(long, value_name = "S", requires = "e2e")]
    pub settle: Option<f64>,
    /// With --e2e: cold starts with streaming lists and with resourceVersion 0 lists, in JSON
    /// and in protobuf (time, transactions, API bytes and requests per start; with --baseline,
    /// the baseline's too) [points default: 10000x10,100000x10]
    #[arg(long, requires = "e2e")]
    pub api: bool,

    /// With --dataplane: seconds per measure (each of connections/s, UDP request/response, one
    /// stream, eight streams, on each of three paths) [default: 2]
    #[arg(long, value_name = "S", requires = "dataplane")]
    pub seconds: Option<f64>,
    /// With --dataplane: parallel clients for connections/s [default: 32]
    #[arg(long, value_name = "W", requires = "dataplane")]
    pub workers: Option<usize>,
    /// With --dataplane: parallel clients (one flow each) for UDP request/response [default: 8]
    #[arg(long, value_name = "W", requires = "dataplane")]
    pub udp_workers: Option<usize>,
    /// With --dataplane: seconds an iptables-restore may take before it is reported as not
    /// loaded [default: 300]
    #[arg(long, value_name = "S", requires = "dataplane")]
    pub iptables_budget: Option<f64>,
    /// With --dataplane: rounds per size, contenders in alternating order, each cell the median
    /// [default: 1]
    #[arg(long, value_name = "N", requires = "dataplane")]
    pub rounds: Option<usize>,
    /// With --dataplane: also record each contender's same-node connect load with a
    /// system-wide `perf record -a -g` into DIR/<contender>-<services>.perf.data (compare with
    /// `perf report -i FILE --no-children --sort sym`)
    #[arg(long, value_name = "DIR", requires = "dataplane")]
    pub profile: Option<std::path::PathBuf>,

    /// With --counters: Services [default: 100000]
    #[arg(long, value_name = "N", requires = "counters")]
    pub services: Option<usize>,
    /// With --counters: connections per run [default: 3000]
    #[arg(long, value_name = "C", requires = "counters")]
    pub connections: Option<usize>,
    /// With --counters: measure only the counter reads, at each size
    #[arg(long, value_name = "N,...", value_delimiter = ',', requires = "counters")]
    pub read_sizes: Vec<usize>,
    /// With --counters: the real agent's /metrics scrape, at each size
    #[arg(long, value_name = "N,...", value_delimiter = ',', requires = "counters")]
    pub scrape_sizes: Vec<usize>,
}

#[derive(Args, Debug, Default)]
#[command(group(ArgGroup::new("where").args(["kind", "containers"])))]
pub struct E2e {
    /// On a kind cluster (Docker or Podman; kind and kubectl on PATH) instead of namespaces
    #[arg(long)]
    pub kind: bool,
    /// Each agent a container of the image (built here from the host's binary), run as
    /// deploy/overlays/kubeadm renders it
    #[arg(long)]
    pub containers: bool,
    /// With --containers: the image's base made with debootstrap (no registry needed)
    #[arg(long, requires = "containers")]
    pub base_from_debootstrap: bool,
    /// Print the commands instead of running them (namespaces or --kind)
    #[arg(long, conflicts_with = "containers")]
    pub dry_run: bool,
    /// With --kind or --containers: the container engine's client [default: docker if it
    /// works, else podman]
    #[arg(long, value_name = "CLIENT", requires = "where")]
    pub engine: Option<String>,
    /// Only the scenarios whose name contains TEXT
    #[arg(long, value_name = "TEXT", conflicts_with = "kind")]
    pub only: Option<String>,
}

/// The image's tag unless `--tag` says otherwise.
const DEFAULT_TAG: &str = "verdict:dev";
/// Where debootstrap fetches the base's packages unless `--mirror` says otherwise.
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

#[derive(Args, Debug)]
pub struct Image {
    /// The container engine's client [default: a docker client with BuildKit, else docker, else
    /// podman]
    #[arg(long, value_name = "CLIENT")]
    pub engine: Option<String>,
    /// The image's tag
    #[arg(long, value_name = "T", default_value = DEFAULT_TAG)]
    pub tag: String,
    /// Copy in the host's release binary (built first) instead of building it in the image
    /// (needs BuildKit)
    #[arg(long)]
    pub prebuilt: bool,
    /// Make the runtime base with debootstrap (no registry needed; as root)
    #[arg(long)]
    pub base_from_debootstrap: bool,
    /// With --base-from-debootstrap: the Debian mirror
    #[arg(long, value_name = "URL", default_value = DEFAULT_MIRROR)]
    pub mirror: String,
    /// The Rust build stage's image (Dockerfile's BUILD_IMAGE)
    #[arg(long, value_name = "IMAGE")]
    pub build_image: Option<String>,
    /// Also build the e2e test image, verdict-echo:dev
    #[arg(long)]
    pub with_test_image: bool,
}

/// What `cargo xtask image` alone means (`e2e --containers` builds on it).
impl Default for Image {
    fn default() -> Image {
        Image {
            engine: None,
            tag: DEFAULT_TAG.into(),
            prebuilt: false,
            base_from_debootstrap: false,
            mirror: DEFAULT_MIRROR.into(),
            build_image: None,
            with_test_image: false,
        }
    }
}

/// How QEMU runs the VMs.
#[derive(ValueEnum, Clone, Copy, Debug, Default)]
pub enum Accel {
    /// Software emulation: works everywhere, slowly
    #[default]
    Tcg,
    /// Hardware virtualisation (/dev/kvm)
    Kvm,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("local").args(["kernel_image", "build_unfixed_6_1"])))]
pub struct Kernels {
    /// Debian's kernels to boot [default: all; none when a local image is given]
    #[arg(long, value_name = "K,...", value_delimiter = ',', value_parser = PossibleValuesParser::new(crate::kernels::known()))]
    pub kernel: Vec<String>,
    /// The CI subset of the suites
    #[arg(long, conflicts_with = "suites")]
    pub ci: bool,
    /// The suites to run (test targets such as kernel_golden, packets_core) [default: all]
    #[arg(long, value_name = "SUITE,...", value_delimiter = ',')]
    pub suites: Vec<String>,
    /// QEMU's accelerator
    #[arg(long, value_enum, default_value_t)]
    pub accel: Accel,
    /// vCPUs per VM
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub cpus: u32,
    /// Memory per VM, in MiB
    #[arg(long, value_name = "MiB", default_value_t = 4096)]
    pub memory: u32,
    /// Seconds one suite may take in the VM
    #[arg(long, value_name = "S", default_value_t = 900)]
    pub suite_timeout: u64,
    /// Also the tests marked ignored: the one that must fail on old kernels (the harness's check)
    #[arg(long)]
    pub self_test: bool,
    /// A shell command to run in each VM, in the workspace, as one more column (alone unless
    /// --suites is given)
    #[arg(long, value_name = "CMD")]
    pub command: Option<String>,
    /// Only download the kernels (exit status: could they be fetched)
    #[arg(long)]
    pub fetch_only: bool,
    /// Whether the nft of each Debian release lists and reloads the golden table verdict programs
    /// (target/kernels/nft-versions.md)
    #[arg(long)]
    pub nft_versions: bool,
    /// Boot this kernel image, built here with everything built in
    #[arg(long, value_name = "BZIMAGE")]
    pub kernel_image: Option<PathBuf>,
    /// Build Debian 12's 6.1 without the chain-deletion fix, then boot it
    #[arg(long = "build-unfixed-6.1")]
    pub build_unfixed_6_1: bool,
    /// The local image's name in the report [default: local; 6.1-unfixed]
    #[arg(long, value_name = "NAME", requires = "local")]
    pub label: Option<String>,
}
