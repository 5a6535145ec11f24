//! Upstream kube-proxy's nftables table appearing while verdict runs (a `kubeadm upgrade
//! apply` that re-applied kube-proxy): the agent says so once, as a log line naming the
//! table, `verdict_foreign_proxy_detected{what="nftables ip kube-proxy"}` and a Warning Event
//! on its Node, and the gauge returns to 0 when the table goes. The real binary and the test
//! API server, in a network namespace of its own (root only).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::require_kernel;
use verdict_e2e::scratch::ScratchDir;

const WHAT: &str = "verdict_foreign_proxy_detected{what=\"nftables ip kube-proxy\"}";
const WARNING: &str = "another proxy programs Services on this node (nftables ip kube-proxy)";

struct Agent {
    child: Child,
    log: std::path::PathBuf,
    /// Its kubeconfig and log: removed after the agent is stopped.
    _dir: ScratchDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(lab: &ApiLab) -> Agent {
        let dir = ScratchDir::new("verdict-foreign-proxy").unwrap();
        let kubeconfig = dir.join("kubeconfig");
        lab.server.write_kubeconfig(&kubeconfig).unwrap();
        let log = dir.join("agent.log");
        let child = Command::new("ip")
            .args(["netns", "exec", lab.ns.name(), env!("CARGO_BIN_EXE_verdict"), "run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
            .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
            .args(["--min-sync-period", "50ms", "--state-dir", ""])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { child, log, _dir: dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait(&self, what: &str, within: Duration, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}\nagent log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn gauge(lab: &ApiLab) -> Option<f64> {
    let body = lab.ns.run(|| {
        let mut s = TcpStream::connect("127.0.0.1:10249").ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    })?;
    let line = body.lines().find(|l| l.starts_with(WHAT))?;
    line.rsplit(' ').next()?.parse().ok()
}

fn nft(lab: &ApiLab, args: &[&str]) {
    let status = Command::new("ip").args(["netns", "exec", lab.ns.name(), "nft"]).args(args).status().expect("nft");
    assert!(status.success(), "nft {args:?}");
}

fn node_events(lab: &ApiLab) -> Vec<String> {
    lab.server
        .events()
        .iter()
        .filter(|e| {
            let about = e.get("regarding").or_else(|| e.get("involvedObject")).cloned().unwrap_or_default();
            about["kind"] == "Node" && about["name"] == "n1"
        })
        .map(|e| {
            format!("{} {}: {}", e["type"], e["reason"], e["note"].as_str().or(e["message"].as_str()).unwrap_or(""))
        })
        .collect()
}

#[test]
fn upstreams_table_appearing_is_reported_once_and_its_removal_seen() {
    require_kernel!();
    let lab = ApiLab::new("fproxy").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    let agent = Agent::start(&lab);
    agent.wait("web programmed", Duration::from_secs(20), || lab.table().contains("172.30.0.10 . tcp . 80"));
    agent.wait("the gauge at 0", Duration::from_secs(5), || gauge(&lab) == Some(0.0));

    nft(&lab, &["table ip kube-proxy {\n    chain services {\n    }\n}"]);
    // A notice of the new table, not a periodic look: well within a sync period.
    agent.wait("the warning", Duration::from_secs(5), || agent.log().contains(WARNING));
    agent.wait("the gauge at 1", Duration::from_secs(5), || gauge(&lab) == Some(1.0));
    agent.wait("a Warning Event on the Node", Duration::from_secs(10), || !node_events(&lab).is_empty());
    let events = node_events(&lab);
    assert!(events[0].contains("Warning") && events[0].contains("ForeignProxy"), "{events:?}");
    assert!(events[0].contains("skip-phases=addon/kube-proxy"), "it says what to do: {events:?}");

    // Once: more changes to the other table and to Services bring no new line nor Event.
    nft(&lab, &["add chain ip kube-proxy nat-prerouting"]);
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string(), "10.0.1.2".to_string()], None));
    agent.wait("the change programmed", Duration::from_secs(10), || lab.table().contains("10.0.1.2 . 8080"));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.log().matches(WARNING).count(), 1, "{}", agent.log());
    assert_eq!(node_events(&lab).len(), 1, "{:?}", node_events(&lab));
    assert_eq!(gauge(&lab), Some(1.0));

    nft(&lab, &["delete table ip kube-proxy"]);
    agent.wait("the gauge back at 0", Duration::from_secs(5), || gauge(&lab) == Some(0.0));
    agent.wait("resolved in the log", Duration::from_secs(5), || {
        agent.log().contains("Node n1: its problems are resolved")
    });
}
