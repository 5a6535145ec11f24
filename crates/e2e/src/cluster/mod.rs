//! A two-node cluster of network namespaces with a real `verdict run` daemon on each node,
//! watching the test API server over the LAN: what `cargo xtask e2e` and the demo run.
//!
//! ```text
//!   api      192.168.50.2    the test API server (the only stand-in for Kubernetes)
//!   external 192.168.50.100
//!   node1    192.168.50.11   verdict run   pods a1, a2, c1 (10.244.1.0/24)
//!   node2    192.168.50.12   verdict run   pods b1, b2, c2 (10.244.2.0/24)
//! ```

mod agent;
pub mod container;
pub mod objects;
mod privileged;
pub mod prober;
pub mod scenarios;
mod startup;

use crate::agent_process::{self, AgentProcess};
use crate::netns::Netns;
use crate::topology::{self, Cluster};
use anyhow::{Context, Result, bail};
use container::{Containers, Pause};
use objects::{Ep, State, Svc};
use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::runtime::Runtime;
use verdict_testapi::TestApiServer;

/// The binaries the cluster runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `verdict`.
    pub verdict: PathBuf,
    /// `verdict-echo`.
    pub echo: PathBuf,
}

/// The API server's LAN address.
pub const API_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 2);

/// The running cluster. Fields drop in order: agents, then the server, then the namespaces.
pub struct NsCluster {
    agents: Vec<AgentProcess>,
    rt: Runtime,
    /// The test API server.
    pub server: TestApiServer,
    api: Netns,
    /// The namespaces: nodes, pods, the external host.
    pub topo: Cluster,
    /// With agents in containers: the pause containers holding the nodes' namespaces.
    pauses: Vec<Pause>,
    containers: Option<Containers>,
    bins: Binaries,
    workdir: TempDir,
}

/// kubeadm 1.37's `config.conf`, unedited: zero values mean kube-proxy's defaults, and `mode:
/// iptables` the iptables section's periods (sync 30 s, min sync 1 s), which the scenarios
/// do not wait on: each change triggers a sync, at most a second after the last one.
const KUBEADM_CONFIG: &str = include_str!("../../../agent/tests/fixtures/kubeadm/v1.37/config.conf");

/// A kubeadm cluster's `kube-proxy` ConfigMap, its `kubeconfig.conf` (which `config.conf`
/// names beside it) being `kubeconfig`: the test API server's, with its real address, where
/// kubeadm's names the control plane's.
/// With `VERDICT_FAST_PATH=1`, `config.conf` also turns the fast path on for every
/// interface, through verdict's own field of the `nftables` section.
fn kubeadm_config_map(kubeconfig: String) -> Vec<(&'static str, String)> {
    let mut config = KUBEADM_CONFIG.to_string();
    if crate::dataplane::fast_path_from_env() {
        assert!(config.contains("\nnftables:\n"), "kubeadm's config.conf has an nftables section");
        config = config.replacen("\nnftables:\n", &format!("\nnftables:\n  {FAST_PATH_FIELD}\n"), 1);
    }
    vec![("config.conf", config), ("kubeconfig.conf", kubeconfig)]
}

/// The field `VERDICT_FAST_PATH=1` adds to kubeadm's `nftables` section.
pub const FAST_PATH_FIELD: &str = "flowtableInterfaces: [\"*\"]";

/// Without containers: node `node`'s volumes as the DaemonSet names them (and as
/// [`container::volumes_dir`] lays them out): (the ConfigMap `kube-proxy`, the `state`
/// directory).
fn namespace_volumes(workdir: &Path, node: &str) -> (PathBuf, PathBuf) {
    let dir = container::volumes_dir(workdir, node);
    (dir.join("kube-proxy"), dir.join("state"))
}

impl NsCluster {
    /// Builds the namespaces, starts the API server and one agent per node, and waits until
    /// every agent is healthy.
    pub fn start(tag: &str, bins: &Binaries) -> Result<NsCluster> {
        Self::start_with(tag, bins, None)
    }

    /// [`NsCluster::start`], with each agent a container when `containers` is given.
    pub fn start_with(tag: &str, bins: &Binaries, containers: Option<Containers>) -> Result<NsCluster> {
        let pods: &[&[&str]] = &[&["a1", "a2", "c1"], &["b1", "b2", "c2"]];
        let pauses = RefCell::new(Vec::new());
        let topo = match &containers {
            None => topology::build(tag, pods, &bins.echo)?,
            Some(c) => topology::build_with(tag, pods, &bins.echo, &|ns_tag| {
                let pause = c.pause(&format!("vd-{ns_tag}-{}-pause", std::process::id()))?;
                let pid = pause.pid()?;
                pauses.borrow_mut().push(pause);
                let ns = Netns::attach(ns_tag, pid)?;
                // Docker turns IPv6 off in the namespaces it makes for networks without it.
                ns.sysctl("net.ipv6.conf.all.disable_ipv6", "0")?;
                ns.sysctl("net.ipv6.conf.default.disable_ipv6", "0")?;
                Ok(ns)
            })?,
        };
        let api = topo.add_host(tag, "api", API_ADDRESS)?;
        let rt = api.run(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build())?;
        let listen = SocketAddr::new(API_ADDRESS.into(), 0);
        let server = rt.block_on(rt.spawn(TestApiServer::start_on(listen)))??;
        // Removed on drop, also when the start fails half-way (after the agents, see Drop).
        // Readable by all, as a directory made by hand is: the containers' volumes are in it,
        // and some of their processes run as other users.
        let workdir = tempfile::Builder::new()
            .prefix(&format!("verdict-e2e-{tag}-"))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .tempdir()?;
        server.write_kubeconfig(&workdir.path().join("kubeconfig"))?;
        for node in &topo.nodes {
            let pod_cidr = format!("10.244.{}.0/24", node.index);
            server.apply(objects::node(&node.name, &node.ipv4.to_string(), &pod_cidr));
        }
        let config_map = kubeadm_config_map(std::fs::read_to_string(workdir.path().join("kubeconfig"))?);
        match &containers {
            Some(c) => {
                for (node, pause) in topo.nodes.iter().zip(pauses.borrow().iter()) {
                    let volumes = container::volumes_dir(workdir.path(), &node.name);
                    c.make_volumes(&volumes, &config_map)?;
                    startup::reset_conntrack_sysctls(&node.ns)?;
                    c.run_init(&node.name, &pause.name, &pause.name, &volumes)?;
                    startup::expect_conntrack_sysctls(&node.ns, &node.name)?;
                }
            }
            None => {
                for node in &topo.nodes {
                    let (config, state) = namespace_volumes(workdir.path(), &node.name);
                    std::fs::create_dir_all(&config)?;
                    std::fs::create_dir_all(&state)?;
                    for (name, text) in &config_map {
                        std::fs::write(config.join(name), text)?;
                    }
                }
                // kubeadm's command line runs `kube-proxy`: the name makes verdict `run`.
                let verdict = std::fs::canonicalize(&bins.verdict)
                    .with_context(|| format!("the verdict binary {}", bins.verdict.display()))?;
                std::os::unix::fs::symlink(verdict, workdir.path().join("kube-proxy"))?;
            }
        }
        // The API server's own Service, before any agent: the agents cannot need it.
        let (kubernetes, slice) = objects::kubernetes_service(startup::KUBERNETES_CLUSTER_IP, server.addr());
        server.apply(kubernetes);
        server.apply(slice);
        startup::expect_api_unreachable(&topo.nodes[0].ns, &topo.nodes[0].name)?;
        let pauses = pauses.into_inner();
        let mut cluster =
            NsCluster { agents: Vec::new(), rt, server, api, topo, pauses, containers, bins: bins.clone(), workdir };
        for i in 0..cluster.topo.nodes.len() {
            cluster.start_agent(i)?;
        }
        startup::expect_api_reachable(&cluster.topo.nodes[0].ns, &cluster.topo.nodes[0].name)?;
        Ok(cluster)
    }

    /// Starts the agent of node `i` (0-based) and waits until `/healthz` answers 200.
    pub fn start_agent(&mut self, i: usize) -> Result<()> {
        let node = &self.topo.nodes[i];
        let log = self.workdir.path().join(format!("{}.log", node.name));
        let agent = match &self.containers {
            None => {
                let (config, state) = namespace_volumes(self.workdir.path(), &node.name);
                agent::start(&node.ns, &node.name, &self.workdir.path().join("kube-proxy"), (&config, &state), &log)?
            }
            Some(c) => {
                let pause = &self.pauses[i].name;
                let volumes = container::volumes_dir(self.workdir.path(), &node.name);
                c.start_agent(node, &format!("{pause}-agent"), pause, &volumes, &log)?
            }
        };
        agent.wait_healthy(Duration::from_secs(30))?;
        match self.agents.get_mut(i) {
            Some(slot) => *slot = agent,
            None => self.agents.push(agent),
        }
        Ok(())
    }

    /// With agents in containers: the status code of each HTTP probe of the agent container
    /// (`(probe, path, port, code)`), asked from node `i`'s namespace at the node's address,
    /// as the kubelet asks a host-network pod.
    pub fn probes(&self, i: usize) -> Vec<(&'static str, String, u16, Option<u16>)> {
        let Some(c) = &self.containers else { return Vec::new() };
        let node = &self.topo.nodes[i];
        let agent = c.agent();
        let probes = [("readiness", agent.readiness_probe.as_ref()), ("liveness", agent.liveness_probe.as_ref())];
        probes
            .into_iter()
            .filter_map(|(what, p)| container::http_probe(p).map(|(path, port)| (what, path, port)))
            .map(|(what, path, port)| {
                let addr = SocketAddr::new(node.ipv4.into(), port);
                let code = node.ns.run(|| agent_process::http_get(addr, &path));
                (what, path, port, code)
            })
            .collect()
    }

    /// With agents in containers: runs node `i`'s agent container once more with `tweak`
    /// applied to its spec, until it exits (for runs that must fail; stop the agent first).
    pub fn run_agent_tweaked(
        &self,
        i: usize,
        tweak: impl Fn(&mut k8s_openapi::api::core::v1::Container),
    ) -> Result<std::process::Output> {
        let c = self.containers.as_ref().context("the agents are not containers")?;
        let (node, pause) = (&self.topo.nodes[i].name, &self.pauses[i].name);
        c.run_agent_tweaked(
            node,
            &format!("{pause}-tweaked"),
            pause,
            &container::volumes_dir(self.workdir.path(), node),
            tweak,
        )
    }

    /// Stops node `i`'s agent with SIGTERM (rules stay in place) and waits for it to exit.
    pub fn stop_agent(&mut self, i: usize) -> Result<()> {
        self.agents[i].terminate(Duration::from_secs(10))
    }

    /// Applies a Service.
    pub fn apply_service(&self, svc: &Svc) {
        self.server.apply(svc.object());
    }

    /// Replaces the endpoints of `svc`.
    pub fn set_endpoints(&self, svc: &str, endpoints: &[Ep]) {
        self.server.apply(objects::slice(svc, endpoints));
    }

    /// Deletes a Service and its slice.
    pub fn delete_service(&self, svc: &str) {
        self.server.delete::<k8s_openapi::api::core::v1::Service>(Some(objects::NAMESPACE), svc);
        self.server
            .delete::<k8s_openapi::api::discovery::v1::EndpointSlice>(Some(objects::NAMESPACE), &format!("{svc}-1"));
    }

    /// An endpoint on pod `pod`.
    pub fn ep(&self, pod: &str, state: State) -> Ep {
        (self.topo.pod(pod).ipv4.to_string(), self.topo.node_of(pod).name.clone(), state)
    }

    /// `nft list table inet kube-proxy` on node `i`.
    pub fn table(&self, i: usize) -> String {
        self.topo.nodes[i]
            .ns
            .exec(&["nft", "list", "table", "inet", "kube-proxy"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Waits until every node's table satisfies `check`.
    pub fn wait_programmed(&self, what: &str, check: impl Fn(&str) -> bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if (0..self.topo.nodes.len()).all(|i| check(&self.table(i))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not programmed on every node within 15 s: {what}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills pod `name`'s server.
    pub fn stop_pod(&mut self, name: &str) {
        self.topo.stop_pod(name);
    }

    /// Starts pod `name`'s server again.
    pub fn start_pod(&mut self, name: &str) -> Result<()> {
        let echo = self.bins.echo.clone();
        self.topo.start_pod(name, &echo)?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }

    /// Every node's table and the end of every agent's log: what to look at when a scenario
    /// fails.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.topo.nodes.iter().enumerate() {
            out.push_str(&format!("---- {}: nft list table inet kube-proxy\n{}", node.name, self.table(i)));
            if let Some(agent) = self.agents.get(i) {
                out.push_str(&format!("---- {}: agent log (last 40 lines)\n{}\n", node.name, agent.log_tail(40)));
            }
        }
        out
    }

    /// The log of node `i`'s agent.
    pub fn agent_log(&self, i: usize) -> String {
        self.agents[i].log_tail(usize::MAX)
    }

    /// The namespace of the API server (kept for tools that want to reach it).
    pub fn api_namespace(&self) -> &Netns {
        &self.api
    }

    /// The runtime the API server runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl Drop for NsCluster {
    fn drop(&mut self) {
        // The agents first: they write their state into the work directory as they exit.
        self.agents.clear();
    }
}

/// Reads a path as UTF-8 (for command lines).
fn utf8(p: &Path) -> Result<&str> {
    p.to_str().with_context(|| format!("{} is not UTF-8", p.display()))
}
