//! `verdict trace`: a real connection to a ClusterIP, traced through the kernel's table while
//! the agent runs, names the chains and map entries it passed and the endpoint that answered
//! it (TCP over IPv4 and IPv6, and a UDP datagram); the trace chains are gone when the
//! command ends (by count, SIGHUP, SIGINT or SIGTERM), and a full sync deletes the chains of a trace
//! that died (root only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verdict_e2e::agent_process::{AgentLaunch, AgentProcess};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const CLUSTER_IP: &str = "172.30.0.10";
const ENDPOINTS: [&str; 2] = ["10.0.1.1", "10.0.1.2"];

/// A child process killed (by its own PID) if the test ends before it does.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits for the exit within `within`; (success, stdout read so far from `lines`).
    fn finish(&mut self, lines: &mpsc::Receiver<String>, within: Duration) -> (bool, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "verdict trace did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        while let Ok(line) = lines.recv_timeout(Duration::from_secs(2)) {
            out.push_str(&line);
            out.push('\n');
        }
        (status.success(), out)
    }
}

/// Lines of the child's stdout, as they come.
fn lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Starts `verdict trace ARGS` in `ns` and waits until it says it is tracing.
fn start_trace(ns: &Netns, args: &[&str]) -> (Proc, mpsc::Receiver<String>) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_verdict"), "trace"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start verdict trace");
    let rx = lines(child.stdout.take().expect("stdout"));
    let proc = Proc(child);
    let first = rx.recv_timeout(Duration::from_secs(10)).expect("verdict trace says it is tracing");
    assert!(first.starts_with("tracing new connections to"), "{first}");
    (proc, rx)
}

fn table(ns: &Netns) -> String {
    ns.exec(&["nft", "list", "table", "inet", "kube-proxy"]).map(|o| String::from_utf8_lossy(&o.stdout).into()).unwrap()
}

fn trace_chains(ns: &Netns) -> Vec<String> {
    table(ns)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("chain trace-").map(|c| format!("trace-{}", c.trim_end_matches(" {"))))
        .collect()
}

/// Endpoints on the namespace's loopback, each answering with its own address, and a route
/// for the ClusterIP (a node's default route), so the node's own connection reaches the
/// output hook where verdict DNATs it.
fn endpoints(ns: &Netns) {
    ns.ip(&["route", "add", "172.30.0.0/16", "dev", "lo"]).unwrap();
    for ep in ENDPOINTS {
        ns.ip(&["addr", "add", &format!("{ep}/32"), "dev", "lo"]).unwrap();
        let listener = ns.run(|| TcpListener::bind(format!("{ep}:8080"))).unwrap();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let _ = conn.write_all(ep.as_bytes());
            }
        });
    }
}

/// Connects to the ClusterIP from inside the namespace: the endpoint that answered.
fn ask(ns: &Netns) -> String {
    ask_at(ns, &format!("{CLUSTER_IP}:80"))
}

/// Connects to `addr` (`IP:PORT`, `[IPv6]:PORT`) from inside the namespace: what answered.
fn ask_at(ns: &Netns, addr: &str) -> String {
    let addr: SocketAddr = addr.parse().unwrap();
    ns.run(|| {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect to the ClusterIP");
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).expect("the endpoint's answer");
        out
    })
}

#[test]
fn a_traced_connection_names_its_path_and_the_endpoint_that_answered() {
    require_kernel!();
    let lab = ApiLab::new("trace").unwrap();
    endpoints(&lab.ns);
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", CLUSTER_IP, 80));
    lab.server.apply(slice("ns1", "web", &ENDPOINTS.map(String::from), None));

    // The agent runs: it sees the trace chains appear and leaves them alone, without reading
    // its table again (a full reconcile at 100k Services dumps 1.35 M elements).
    let launch = AgentLaunch::new(&lab.ns, env!("CARGO_BIN_EXE_verdict"), "trace").unwrap();
    let kubeconfig = launch.dir().join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig).unwrap();
    let agent = launch
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
        .args(["--metrics-bind-address", "", "--healthz-bind-address", ""])
        .args(["--min-sync-period", "50ms", "--cleanup-leftovers=false", "--state-dir", ""])
        // nftables mode: iptables mode's localhost NodePorts would set route_localnet, and the
        // lab's connection (routed over `lo`) would then leave from 127.0.0.1.
        .arg("--proxy-mode=nftables")
        .spawn()
        .unwrap();
    let agent_log = || agent.log();
    agent.wait("the agent to program the Service", || lab.table().contains(&format!("{CLUSTER_IP} . tcp . 80")));

    let (mut trace, out) =
        start_trace(&lab.ns, &["--dst", &format!("{CLUSTER_IP}:80"), "--count", "1", "--for", "60s"]);
    agent.wait("the agent to notice the trace chains", || agent_log().contains("a `verdict trace` added a chain"));
    assert!(!agent_log().contains("another program changed the table"), "no reconcile:\n{}", agent_log());
    assert_eq!(trace_chains(&lab.ns).len(), 2, "the agent kept the trace chains:\n{}", table(&lab.ns));

    let answered = ask(&lab.ns);
    assert!(ENDPOINTS.contains(&answered.as_str()), "answer {answered:?}");
    let (ok, text) = trace.finish(&out, Duration::from_secs(10));
    println!("{text}");
    assert!(ok, "verdict trace failed:\n{text}");
    assert!(text.contains("trace 1: 10.0.1.1:") && text.contains(&format!("-> {CLUSTER_IP}:80/tcp")), "{text}");
    for step in [
        "nat-output",
        "rule",
        "jump services",
        &format!("@service-ips: {CLUSTER_IP} . tcp . 80 : goto endpoints-2  (ns1/web:http)"),
        &format!("@endpoints-2: {CLUSTER_IP} . tcp . 80 . "),
        "verdict: accept",
    ] {
        assert!(text.contains(step), "no {step:?} in:\n{text}");
    }
    let dnat = format!("DNAT to {answered}:8080 (endpoint of ns1/web:http)");
    assert!(text.contains(&dnat), "the trace names the endpoint that answered ({answered}): no {dnat:?} in\n{text}");
    assert!(text.contains("1 connection(s) traced (count reached); trace chains removed"), "{text}");
    assert!(trace_chains(&lab.ns).is_empty(), "chains left:\n{}", table(&lab.ns));

    // A trace killed outright leaves its chains: the agent removes them once their deadline
    // has passed, from the name the monitor reported, still without a reconcile.
    let until = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 3;
    let name = format!("trace-99-output-until-{until}");
    let chain = format!(
        "add chain inet kube-proxy {name} {{ type filter hook output priority mangle; policy accept; }}\n\
         add rule inet kube-proxy {name} ip daddr {CLUSTER_IP} tcp dport 80 ct state new meta nftrace set 1 \
         comment \"verdict trace until unix time {until}\"\n"
    );
    lab.ns.nft_stdin(&["-f", "-"], &chain).unwrap();
    assert_eq!(trace_chains(&lab.ns), std::slice::from_ref(&name));
    agent
        .wait_until(&format!("the agent to remove {name}"), Duration::from_secs(10), || {
            trace_chains(&lab.ns).is_empty()
        })
        .unwrap();
    let removed_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(removed_at >= until, "removed before its deadline ({removed_at} < {until})");
    assert!(agent_log().contains("removed the chains of a `verdict trace` past their deadline"), "{}", agent_log());
    assert!(!agent_log().contains("another program changed the table"), "no reconcile:\n{}", agent_log());
}

/// `verdict run --once` in `ns` with one ClusterIP Service, with [`ENDPOINTS`] or without.
fn run_once(ns: &Netns, with_endpoints: bool) {
    let mut web = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: ns1}}\n\
         spec: {{clusterIP: {CLUSTER_IP}, ports: [{{name: http, port: 80}}]}}\n"
    );
    if with_endpoints {
        web.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: web-1, namespace: ns1, labels: {{kubernetes.io/service-name: web}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080}}]\n\
             endpoints: [{{addresses: [{}]}}, {{addresses: [{}]}}]\n",
            ENDPOINTS[0], ENDPOINTS[1]
        ));
    }
    run_manifest(ns, &web);
}

/// A namespace of the test's own with the table programmed.
fn programmed(tag: &str) -> Netns {
    let ns = Netns::new(tag).unwrap();
    run_once(&ns, false);
    ns
}

#[test]
fn a_connection_from_a_pod_is_traced_at_prerouting_and_src_filters() {
    require_kernel!();
    let node = Netns::new("trnode").unwrap();
    let pod = Netns::new("trpod").unwrap();
    endpoints(&node);
    run_once(&node, true);
    // The pod: a veth to the node, its default route through it.
    node.ip(&["link", "add", "vnode", "type", "veth", "peer", "name", "vpod", "netns", pod.name()]).unwrap();
    node.ip(&["addr", "add", "10.1.0.1/24", "dev", "vnode"]).unwrap();
    node.ip(&["link", "set", "vnode", "up"]).unwrap();
    pod.ip(&["addr", "add", "10.1.0.2/24", "dev", "vpod"]).unwrap();
    pod.ip(&["link", "set", "vpod", "up"]).unwrap();
    pod.ip(&["route", "add", "default", "via", "10.1.0.1"]).unwrap();

    let dst = format!("{CLUSTER_IP}:80");
    let (mut trace, out) = start_trace(&node, &["--dst", &dst, "--src", "10.1.0.0/24", "--count", "1", "--for", "60s"]);
    // The node's own connection comes from outside --src: not traced.
    let _ = ask(&node);
    let answered = ask(&pod);
    assert!(ENDPOINTS.contains(&answered.as_str()), "answer {answered:?}");
    let (ok, text) = trace.finish(&out, Duration::from_secs(10));
    println!("{text}");
    assert!(ok, "verdict trace failed:\n{text}");
    assert!(text.contains("trace 1: 10.1.0.2:"), "the pod's connection is the one traced:\n{text}");
    assert!(!text.contains("trace 2"), "{text}");
    for step in ["filter-prerouting-pre-dnat", "nat-prerouting", "jump services", "filter-input", "verdict: accept"] {
        assert!(text.contains(step), "no {step:?} in:\n{text}");
    }
    let dnat = format!("DNAT to {answered}:8080 (endpoint of ns1/web:http)");
    assert!(text.contains(&dnat), "no {dnat:?} in\n{text}");
    assert!(trace_chains(&node).is_empty(), "chains left:\n{}", table(&node));
}

#[test]
fn sighup_sigint_and_sigterm_remove_the_trace_chains() {
    require_kernel!();
    let ns = programmed("trsig");
    use nix::sys::signal::Signal;
    for signal in [Signal::SIGHUP, Signal::SIGINT, Signal::SIGTERM] {
        let (mut trace, out) = start_trace(&ns, &["--dst", &format!("{CLUSTER_IP}:80"), "--for", "60s"]);
        assert_eq!(trace_chains(&ns).len(), 2, "while tracing:\n{}", table(&ns));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(trace.0.id() as i32), signal).unwrap();
        let (ok, text) = trace.finish(&out, Duration::from_secs(5));
        assert!(ok, "{signal}: verdict trace failed:\n{text}");
        assert!(text.contains("0 connection(s) traced (signalled); trace chains removed"), "{signal}: {text}");
        assert!(trace_chains(&ns).is_empty(), "{signal}: chains left:\n{}", table(&ns));
    }
    // The time limit ends it too.
    let (mut trace, out) = start_trace(&ns, &["--dst", &format!("{CLUSTER_IP}:80"), "--for", "1s"]);
    let (ok, text) = trace.finish(&out, Duration::from_secs(5));
    assert!(ok && text.contains("(time is up); trace chains removed"), "{text}");
    assert!(trace_chains(&ns).is_empty(), "chains left:\n{}", table(&ns));
}

#[test]
fn a_full_sync_deletes_the_chains_of_a_dead_trace_and_keeps_a_live_one() {
    require_kernel!();
    let ns = programmed("trsync");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let (dead, live) = (format!("trace-1-output-until-{}", now - 1), format!("trace-2-output-until-{}", now + 3600));
    for (name, until) in [(&dead, now - 1), (&live, now + 3600)] {
        let chain = format!(
            "add chain inet kube-proxy {name} {{ type filter hook output priority mangle; policy accept; }}\n\
             add rule inet kube-proxy {name} ip daddr {CLUSTER_IP} tcp dport 80 ct state new meta nftrace set 1 \
             comment \"verdict trace until unix time {until}\"\n"
        );
        ns.nft_stdin(&["-f", "-"], &chain).unwrap();
    }
    assert_eq!(trace_chains(&ns), [dead.clone(), live.clone()]);
    run_once(&ns, false);
    assert_eq!(trace_chains(&ns), [live], "only the expired trace is deleted:\n{}", table(&ns));
}

/// Adds chain `name` (`header`: its type, hook, priority and policy) holding `rules` (nft
/// syntax, one per line) to verdict's table in `ns`.
fn plant(ns: &Netns, name: &str, header: &str, rules: &[String]) {
    let mut text = format!("add chain inet kube-proxy {name} {{ {header} }}\n");
    for rule in rules {
        text.push_str(&format!("add rule inet kube-proxy {name} {rule}\n"));
    }
    ns.nft_stdin(&["-f", "-"], &text).unwrap();
}

/// Whether a connection from the node to the ClusterIP is answered (within 2 s).
fn answered(ns: &Netns) -> bool {
    let addr: SocketAddr = format!("{CLUSTER_IP}:80").parse().unwrap();
    ns.run(|| {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut out = String::new();
        s.read_to_string(&mut out).is_ok() && ENDPOINTS.contains(&out.as_str())
    })
}

/// A lab whose agent runs with its table monitor, the Service programmed and answering.
fn watched(tag: &str) -> (ApiLab, AgentProcess) {
    let lab = ApiLab::new(tag).unwrap();
    endpoints(&lab.ns);
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", CLUSTER_IP, 80));
    lab.server.apply(slice("ns1", "web", &ENDPOINTS.map(String::from), None));
    let launch = AgentLaunch::new(&lab.ns, env!("CARGO_BIN_EXE_verdict"), tag).unwrap();
    let kubeconfig = launch.dir().join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig).unwrap();
    let agent = launch
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
        .args(["--metrics-bind-address", "", "--healthz-bind-address", ""])
        .args(["--min-sync-period", "50ms", "--cleanup-leftovers=false", "--state-dir", "", "--proxy-mode=nftables"])
        .spawn()
        .unwrap();
    agent.wait("the agent to program the Service", || lab.table().contains(&format!("{CLUSTER_IP} . tcp . 80")));
    assert!(answered(&lab.ns), "the Service answers before anything is planted");
    (lab, agent)
}

#[test]
fn another_programs_policy_drop_on_a_chain_of_verdicts_is_repaired() {
    require_kernel!();
    let (lab, agent) = watched("trpolicy");
    lab.ns.nft_stdin(&["-f", "-"], "chain inet kube-proxy filter-output { policy drop; }\n").unwrap();
    agent
        .wait_until("the agent to restore policy accept", Duration::from_secs(10), || {
            table(&lab.ns).contains("type filter hook output priority filter; policy accept;")
        })
        .unwrap();
    assert!(answered(&lab.ns), "the node's connections pass again");
    assert!(agent.log().contains("base chain filter-output has policy drop"), "{}", agent.log());
}

#[test]
fn a_chain_only_named_as_a_trace_is_deleted_by_the_reconcile_its_appearance_starts() {
    require_kernel!();
    let (lab, agent) = watched("trforge");

    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let trace_rule = |until: u64| {
        format!(
            "ip daddr {CLUSTER_IP} meta l4proto tcp th dport 80 ct state new meta nftrace set 1 \
             comment \"verdict trace until unix time {until}\""
        )
    };
    let filter = |hook: &str, policy: &str| format!("type filter hook {hook} priority mangle; policy {policy};");
    // Each forgery drops the node's connections to the ClusterIP while it stands. A deadline
    // in 300 years, in the name and the comment, with a drop rule after the trace's.
    let far = now + 300 * 365 * 86_400;
    let forgeries = [
        (
            format!("trace-1-output-until-{far}"),
            filter("output", "accept"),
            vec![trace_rule(far), format!("ip daddr {CLUSTER_IP} drop")],
        ),
        // A deadline as near as a real trace's, the trace's rule alone, and policy drop.
        (format!("trace-2-output-until-{}", now + 600), filter("output", "drop"), vec![trace_rule(now + 600)]),
        // A near deadline and a drop rule.
        (
            format!("trace-3-output-until-{}", now + 600),
            filter("output", "accept"),
            vec![format!("ip daddr {CLUSTER_IP} drop")],
        ),
    ];
    for (name, header, rules) in &forgeries {
        plant(&lab.ns, name, header, rules);
        agent
            .wait_until(&format!("the agent to delete {name}"), Duration::from_secs(10), || {
                !trace_chains(&lab.ns).contains(name)
            })
            .unwrap();
        assert!(answered(&lab.ns), "{name} is gone and the Service answers again");
    }
    let log = agent.log();
    assert!(log.contains("is named as a `verdict trace`'s, but"), "the log says why:\n{log}");

    // A real trace still runs to its end while the agent watches, and is left alone.
    let (mut trace, out) =
        start_trace(&lab.ns, &["--dst", &format!("{CLUSTER_IP}:80"), "--count", "1", "--for", "60s"]);
    agent.wait("the agent to notice the trace chains", || agent.log().contains("a `verdict trace` added a chain"));
    assert_eq!(trace_chains(&lab.ns).len(), 2, "the agent kept the trace chains:\n{}", table(&lab.ns));
    assert!(answered(&lab.ns));
    let (ok, text) = trace.finish(&out, Duration::from_secs(10));
    assert!(ok && text.contains("1 connection(s) traced (count reached)"), "{text}");
}

#[test]
fn mistakes_are_one_line_errors() {
    require_kernel!();
    let ns = Netns::new("trerr").unwrap();
    let verdict = |args: &[&str]| {
        let cmd: Vec<&str> = [env!("CARGO_BIN_EXE_verdict"), "trace"].into_iter().chain(args.iter().copied()).collect();
        let out = ns.exec(&cmd).unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = verdict(&["--dst", "172.30.0.10"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--dst \"172.30.0.10\" is not IP:PORT"), "{err}");
    let (code, err) = verdict(&["--dst", "172.30.0.10:80", "--for", "61m"]);
    assert!(code == Some(1) && err.contains("--for 61m is longer than a trace may run (1h)"), "{err}");
    let (code, err) = verdict(&["--dst", "172.30.0.10:80", "--src", "fd00::/64"]);
    assert!(code == Some(1) && err.contains("different address families"), "{err}");
    let (code, err) = verdict(&["--dst", "172.30.0.10:80"]);
    assert!(code == Some(1) && err.contains("has no table inet kube-proxy"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(ns.exec(&["nft", "list", "tables"]).unwrap().stdout.is_empty(), "nothing was created");
}

/// Programs `manifest` (YAML) with `verdict run --once` in `ns`.
fn run_manifest(ns: &Netns, manifest: &str) {
    let dir = std::env::temp_dir().join(format!("verdict-trace-{}-{}", ns.name(), std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("svc.yaml"), manifest).unwrap();
    let manifests = dir.to_str().unwrap();
    let args = ["run", "--manifests", manifests, "--once", "--state-dir", "", "--hostname-override", "n1"];
    let cmd: Vec<&str> = [env!("CARGO_BIN_EXE_verdict")].into_iter().chain(args).collect();
    let out = ns.exec(&cmd).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "run --once: {}", String::from_utf8_lossy(&out.stderr));
}

/// A Service `ns1/NAME` with one port `PORT_NAME` of `proto` on `cluster_ip:port`, and its two
/// endpoints `eps` on `target`.
fn manifest(name: &str, cluster_ip: &str, family: &str, proto: &str, port: u16, eps: [&str; 2], target: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: ns1}}\n\
         spec: {{clusterIP: \"{cluster_ip}\", ipFamilies: [{family}], ports: [{{name: p, protocol: {proto}, port: {port}}}]}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}-1, namespace: ns1, labels: {{kubernetes.io/service-name: {name}}}}}\n\
         addressType: {family}\nports: [{{name: p, protocol: {proto}, port: {target}}}]\n\
         endpoints: [{{addresses: [\"{}\"]}}, {{addresses: [\"{}\"]}}]\n",
        eps[0], eps[1]
    )
}

/// Runs one trace of `dst` (`ADDR:PORT[/PROTO]`) while `client` makes one connection; the
/// trace's text, after checking that it ended by count.
fn trace_one(ns: &Netns, dst: &str, client: impl FnOnce() -> String) -> (String, String) {
    let (mut trace, out) = start_trace(ns, &["--dst", dst, "--count", "1", "--for", "60s"]);
    let answered = client();
    let (ok, text) = trace.finish(&out, Duration::from_secs(10));
    println!("{text}");
    assert!(ok, "verdict trace failed:\n{text}");
    assert!(text.contains("1 connection(s) traced (count reached); trace chains removed"), "{text}");
    assert!(trace_chains(ns).is_empty(), "chains left:\n{}", table(ns));
    (answered, text)
}

#[test]
fn a_udp_datagram_to_a_clusterip_is_traced_to_the_endpoint_that_answered() {
    require_kernel!();
    let ns = Netns::new("trudp").unwrap();
    ns.ip(&["route", "add", "172.30.0.0/16", "dev", "lo"]).unwrap();
    for ep in ENDPOINTS {
        ns.ip(&["addr", "add", &format!("{ep}/32"), "dev", "lo"]).unwrap();
        let sock = ns.run(|| std::net::UdpSocket::bind(format!("{ep}:5353"))).unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((_, peer)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(ep.as_bytes(), peer);
            }
        });
    }
    run_manifest(&ns, &manifest("dns", CLUSTER_IP, "IPv4", "UDP", 53, ENDPOINTS, 5353));
    let (answered, text) = trace_one(&ns, &format!("{CLUSTER_IP}:53/udp"), || {
        ns.run(|| {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.send_to(b"q", format!("{CLUSTER_IP}:53")).unwrap();
            let mut buf = [0u8; 64];
            let (n, _) = s.recv_from(&mut buf).expect("the endpoint's answer");
            String::from_utf8_lossy(&buf[..n]).into_owned()
        })
    });
    assert!(ENDPOINTS.contains(&answered.as_str()), "answer {answered:?}");
    for step in [
        format!("-> {CLUSTER_IP}:53/udp"),
        format!("@service-ips: {CLUSTER_IP} . udp . 53 : goto endpoints-2  (ns1/dns:p)"),
        format!("DNAT to {answered}:5353 (endpoint of ns1/dns:p)"),
    ] {
        assert!(text.contains(&step), "no {step:?} in:\n{text}");
    }
}

#[test]
fn an_ipv6_connection_to_a_clusterip_is_traced_to_the_endpoint_that_answered() {
    require_kernel!();
    const IP6: &str = "fd00:172:30::10";
    const EPS6: [&str; 2] = ["fd00:10:1::1", "fd00:10:1::2"];
    let ns = Netns::new("trv6").unwrap();
    ns.ip(&["-6", "route", "add", "fd00:172:30::/64", "dev", "lo"]).unwrap();
    for ep in EPS6 {
        // `nodad`: even on lo an address is tentative until the DAD work runs, and binding a
        // tentative address fails with EADDRNOTAVAIL (seen in CI under load).
        ns.ip(&["-6", "addr", "add", &format!("{ep}/128"), "dev", "lo", "nodad"]).unwrap();
        let listener = ns.run(|| TcpListener::bind(format!("[{ep}]:8080"))).unwrap();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let _ = conn.write_all(ep.as_bytes());
            }
        });
    }
    run_manifest(&ns, &manifest("web6", IP6, "IPv6", "TCP", 80, EPS6, 8080));
    let (answered, text) = trace_one(&ns, &format!("[{IP6}]:80"), || ask_at(&ns, &format!("[{IP6}]:80")));
    assert!(EPS6.contains(&answered.as_str()), "answer {answered:?}");
    for step in [
        format!("-> [{IP6}]:80/tcp"),
        format!("@service-ips-v6: {IP6} . tcp . 80 : goto endpoints-2-v6  (ns1/web6:p)"),
        format!("DNAT to [{answered}]:8080 (endpoint of ns1/web6:p)"),
    ] {
        assert!(text.contains(&step), "no {step:?} in:\n{text}");
    }
}
