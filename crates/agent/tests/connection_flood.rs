//! A client that holds more connections than any cap locks nobody out (root only, each test in
//! a network namespace of its own): 2,000 connections that never finish their request, from
//! one address and then from 2,000 addresses, re-opened as soon as the agent closes them,
//! while the node's own probes (`/healthz` from 127.0.0.1, `/livez` from the node's address)
//! and a load balancer's check of a healthCheckNodePort are each answered within a second,
//! every time. Under a low open-file limit (`prlimit`), the agent raises what it may, keeps its
//! connections under the limit and still does its own work (reads its manifests, programs the
//! table).

use socket2::{Domain, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use verdict_e2e::agent_process::{AgentLaunch, AgentProcess};
use verdict_e2e::netns::{Netns, spawn_in};
use verdict_e2e::require_kernel;

const HEALTH_CHECK_PORT: u16 = 30999;
const HEALTHZ_PORT: u16 = 10256;
/// The node's address: health check ports and `/healthz` listen on it.
const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 11);
/// A load balancer's health checker.
const CHECKER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 99);
/// How many connections the flood holds open (more than any cap of the agent's).
const FLOOD: usize = 2000;
/// How long every probe may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// A namespace with the node's address and the checker's on its loopback, and 10.77.0.0/16
/// local (any address in it can be a flood client's source).
fn namespace(tag: &str) -> Netns {
    let ns = Netns::new(tag).unwrap();
    ns.ip(&["addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"]).unwrap();
    ns.ip(&["addr", "add", &format!("{CHECKER_IP}/32"), "dev", "lo"]).unwrap();
    ns.ip(&["route", "add", "local", "10.77.0.0/16", "dev", "lo"]).unwrap();
    ns
}

fn objects(extra_service: bool) -> String {
    let mut text = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node1}}\nstatus: {{addresses: [{{type: InternalIP, address: {NODE_IP}}}]}}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo}}\n\
         spec: {{type: LoadBalancer, clusterIP: 172.30.0.10, externalTrafficPolicy: Local, healthCheckNodePort: {HEALTH_CHECK_PORT}, \
         ports: [{{name: http, port: 80, nodePort: 30080}}]}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: web-1, namespace: demo, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\n\
         ports: [{{name: http, port: 8080}}]\nendpoints: [{{addresses: [10.244.1.10], nodeName: node1, conditions: {{ready: true}}}}]\n"
    );
    if extra_service {
        text.push_str(
            "---\napiVersion: v1\nkind: Service\nmetadata: {name: later, namespace: demo}\n\
             spec: {clusterIP: 172.30.0.77, ports: [{name: http, port: 81}]}\n",
        );
    }
    text
}

/// The agent in manifests mode, `/healthz` on every address, one eTP=Local Service with a
/// health check port; `wrapper` (e.g. `prlimit`) execs it.
fn start_agent(ns: &Netns, scratch: &TempDir, wrapper: &[&str]) -> AgentProcess {
    let dir = scratch.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("objects.yaml"), objects(false)).unwrap();
    AgentLaunch::new(ns, env!("CARGO_BIN_EXE_verdict"), "flood")
        .unwrap()
        .wrapped_in(wrapper)
        .arg("run")
        .arg("--manifests")
        .arg(&dir)
        .args(["--hostname-override", "node1", "--cluster-cidr", "10.244.0.0/16"])
        .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "0.0.0.0:10256"])
        .args(["--min-sync-period", "100ms", "--sync-period", "2s", "--state-dir"])
        .arg(scratch.path().join("state"))
        .spawn()
        .unwrap()
}

/// A TCP connection from `source` (any port) to `target`.
fn connect_from(source: Ipv4Addr, target: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((source, 0)).into())?;
    socket.connect_timeout(&target.into(), timeout)?;
    Ok(socket.into())
}

/// GET `path` on `target` from `source` (call inside the namespace): the status, if an answer
/// came, and how long it took.
fn probe(source: Ipv4Addr, target: SocketAddr, path: &str) -> (Option<u16>, Duration) {
    let start = Instant::now();
    let status = (|| {
        let mut s = connect_from(source, target, ANSWER_WITHIN).ok()?;
        s.set_read_timeout(Some(ANSWER_WITHIN * 2)).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    })();
    (status, start.elapsed())
}

/// Clients that hold `FLOOD` connections to `targets` (spread over them and over `sources`),
/// each having sent half a request line, and re-open each one the agent closes, every
/// 200 ms, until dropped.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections open after the last pass.
    open: Arc<AtomicUsize>,
    /// Connections opened so far.
    opened: Arc<AtomicUsize>,
    /// Connections tried so far (opened or not).
    tried: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Flood {
    fn start(ns: &Netns, sources: Vec<Ipv4Addr>, targets: Vec<SocketAddr>) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let tried = Arc::new(AtomicUsize::new(0));
        let (s, o, d, t) = (stop.clone(), open.clone(), opened.clone(), tried.clone());
        let thread = spawn_in(Some(ns.name()), move || {
            let mut held: Vec<Option<TcpStream>> = (0..FLOOD).map(|_| None).collect();
            while !s.load(Ordering::Relaxed) {
                for (i, slot) in held.iter_mut().enumerate() {
                    if let Some(stream) = slot {
                        let mut byte = [0u8; 512];
                        match stream.read(&mut byte) {
                            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                            _ => *slot = None, // closed by the agent (EOF, reset, or an answer)
                        }
                    }
                    let (source, target) = (sources[i % sources.len()], targets[i % targets.len()]);
                    t.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut stream) = connect_from(source, target, Duration::from_millis(100))
                        && stream.write_all(b"GET /heal").is_ok()
                        && stream.set_nonblocking(true).is_ok()
                    {
                        *slot = Some(stream);
                        d.fetch_add(1, Ordering::Relaxed);
                    }
                }
                o.store(held.iter().flatten().count(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let flood = Flood { stop, open, opened, tried, thread: Some(thread) };
        // Once every connection was tried (an agent that no longer accepts makes each try wait).
        while flood.tried.load(Ordering::Relaxed) < FLOOD && flood.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        flood
    }

    fn opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The probes the flood must not hold up: the node's own `/healthz` on 127.0.0.1 and `/livez`
/// on its address, a load balancer's check of the health check port, and `/healthz` from the
/// same outside address (a client that behaves). Each answered 200 within a second, `rounds`
/// times over; returns the slowest.
fn probes_answer(ns: &Netns, flood: &Flood, rounds: usize) -> Duration {
    let localhost = SocketAddr::from((Ipv4Addr::LOCALHOST, HEALTHZ_PORT));
    let node_healthz = SocketAddr::from((NODE_IP, HEALTHZ_PORT));
    let health_check = SocketAddr::from((NODE_IP, HEALTH_CHECK_PORT));
    let probes = [
        (Ipv4Addr::LOCALHOST, localhost, "/healthz"),
        (NODE_IP, node_healthz, "/livez"),
        (CHECKER_IP, health_check, "/"),
        (CHECKER_IP, node_healthz, "/healthz"),
    ];
    let mut slowest = Duration::ZERO;
    ns.run(|| {
        for round in 0..rounds {
            for (source, target, path) in probes {
                let (status, took) = probe(source, target, path);
                assert_eq!(
                    status,
                    Some(200),
                    "round {round}: {path} on {target} from {source} while the flood holds {} connections \
                     (opened {}), after {took:?}",
                    flood.open.load(Ordering::Relaxed),
                    flood.opened()
                );
                assert!(took < ANSWER_WITHIN, "round {round}: {path} on {target} from {source} took {took:?}");
                slowest = slowest.max(took);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    slowest
}

/// `FLOOD` addresses of 10.77.0.0/16.
fn many_sources() -> Vec<Ipv4Addr> {
    (0..FLOOD).map(|i| Ipv4Addr::new(10, 77, 1 + (i / 250) as u8, 1 + (i % 250) as u8)).collect()
}

fn flood_targets() -> Vec<SocketAddr> {
    vec![SocketAddr::from((NODE_IP, HEALTHZ_PORT)), SocketAddr::from((NODE_IP, HEALTH_CHECK_PORT))]
}

fn ready(ns: &Netns, agent: &AgentProcess) {
    agent.wait("/healthz and the health check port", || {
        ns.run(|| {
            probe(Ipv4Addr::LOCALHOST, SocketAddr::from((Ipv4Addr::LOCALHOST, HEALTHZ_PORT)), "/healthz").0 == Some(200)
                && probe(CHECKER_IP, SocketAddr::from((NODE_IP, HEALTH_CHECK_PORT)), "/").0 == Some(200)
        })
    });
}

#[test]
fn two_thousand_held_connections_lock_out_neither_probes_nor_load_balancers() {
    require_kernel!();
    let ns = namespace("flood");
    let scratch = TempDir::with_prefix("verdict-flood-").unwrap();
    let agent = start_agent(&ns, &scratch, &[]);
    ready(&ns, &agent);

    // One address holding 2,000.
    let flood = Flood::start(&ns, vec![Ipv4Addr::new(10, 77, 0, 1)], flood_targets());
    let slowest = probes_answer(&ns, &flood, 20);
    eprintln!("one source: {} connections opened, slowest probe {slowest:?}", flood.opened());
    drop(flood);

    // 2,000 addresses holding one each.
    let flood = Flood::start(&ns, many_sources(), flood_targets());
    let slowest = probes_answer(&ns, &flood, 20);
    eprintln!("{FLOOD} sources: {} connections opened, slowest probe {slowest:?}", flood.opened());
    assert!(agent.try_wait().unwrap().is_none(), "the agent exited: {}", agent.log_tail(30));
}

/// The agent's open file descriptors.
fn open_fds(agent: &AgentProcess) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", agent.pid())).map(|d| d.count()).unwrap_or(0)
}

/// The agent's soft and hard open-file limits.
fn nofile(agent: &AgentProcess) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_string(), fields[4].to_string())
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit_and_connections_stay_under_it() {
    require_kernel!();
    let ns = namespace("nofile");
    let scratch = TempDir::with_prefix("verdict-nofile-").unwrap();

    // A soft limit under the hard one is raised, and said so.
    let agent = start_agent(&ns, &scratch, &["prlimit", "--nofile=256:4096"]);
    ready(&ns, &agent);
    assert_eq!(nofile(&agent), ("4096".into(), "4096".into()), "{}", agent.log_tail(20));
    assert!(agent.log().contains("open files"), "no log line about the limit: {}", agent.log_tail(20));
    drop(agent);

    // A hard limit of 256: the flood gets what is left after the agent's own work.
    let scratch = TempDir::with_prefix("verdict-nofile-").unwrap();
    let agent = start_agent(&ns, &scratch, &["prlimit", "--nofile=256:256"]);
    ready(&ns, &agent);
    // From many addresses: every place is taken.
    let flood = Flood::start(&ns, many_sources(), flood_targets());
    let slowest = probes_answer(&ns, &flood, 10);
    let fds = open_fds(&agent);
    assert!(fds < 256, "the agent holds {fds} files");
    // Its own work: a manifest read and a Service programmed while the flood holds.
    std::fs::write(scratch.path().join("manifests").join("objects.yaml"), objects(true)).unwrap();
    agent.wait("the later Service programmed", || {
        ns.check(&["nft", "list", "table", "inet", "kube-proxy"]).is_ok_and(|t| t.contains("172.30.0.77"))
    });
    let slowest = slowest.max(probes_answer(&ns, &flood, 10));
    eprintln!(
        "limit 256: {} connections opened, the agent held {fds} files, slowest probe {slowest:?}",
        flood.opened()
    );
    assert!(!agent.log().contains("Too many open files"), "{}", agent.log_tail(30));
}
