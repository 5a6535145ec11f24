//! The `verdict run` daemon against the test API server (root only): it programs what the API
//! says, and publishes one Kubernetes Event per change of a Service it cannot program, not one
//! per sync.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::require_kernel;

struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Agent {
    fn start(lab: &ApiLab, tag: &str) -> Agent {
        let dir = std::env::temp_dir().join(format!("verdict-api-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        lab.server.write_kubeconfig(&kubeconfig).unwrap();
        let log = dir.join("agent.log");
        let child = Command::new("ip")
            .args(["netns", "exec", lab.ns.name(), env!("CARGO_BIN_EXE_verdict"), "run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
            .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
            .args(["--min-sync-period", "50ms", "--cleanup-leftovers=false"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { child, log }
    }

    fn wait(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\nagent log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many times Events about Service `name` were published: one per Event object, plus the
/// repeats a series counts.
fn publications(lab: &ApiLab, name: &str) -> (u64, Vec<String>) {
    let mut count = 0;
    let mut reasons = Vec::new();
    for e in lab.server.events() {
        let about = e.get("regarding").or_else(|| e.get("involvedObject")).cloned().unwrap_or_default();
        if about["kind"] != "Service" || about["name"] != name {
            continue;
        }
        let repeats = e["series"]["count"].as_u64().or(e["count"].as_u64()).unwrap_or(1).max(1);
        count += repeats;
        reasons.push(format!(
            "{} {}: {}",
            e["type"],
            e["reason"],
            e["note"].as_str().or(e["message"].as_str()).unwrap_or("")
        ));
    }
    (count, reasons)
}

fn bad(port: i32) -> k8s_openapi::api::core::v1::Service {
    service("ns1", "bad", "172.30.0.66", port)
}

#[test]
fn a_service_that_cannot_be_programmed_gets_one_event_per_change_not_per_sync() {
    require_kernel!();
    let lab = ApiLab::new("events").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    lab.server.apply(bad(70000));
    let agent = Agent::start(&lab, "events");
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));
    agent.wait("an Event on the bad Service", || publications(&lab, "bad").0 >= 1);
    let (n, reasons) = publications(&lab, "bad");
    assert_eq!(n, 1, "{reasons:?}");
    assert!(
        reasons[0].contains("Warning") && reasons[0].contains("InvalidPort") && reasons[0].contains("70000"),
        "{reasons:?}"
    );
    assert!(!lab.table().contains("172.30.0.66"), "the bad Service is left out");

    // Other changes, other syncs: no new Event about the same problem.
    for k in 2..7 {
        let ip = format!("10.0.1.{k}");
        lab.server.apply(slice("ns1", "web", std::slice::from_ref(&ip), None));
        agent.wait("the change programmed", || lab.table().contains(&format!("{ip} . 8080")));
    }
    assert_eq!(publications(&lab, "bad").0, 1, "one Event per change, not per sync: {:?}", publications(&lab, "bad").1);

    // A different problem is a new change: one more Event.
    lab.server.apply(bad(70001));
    agent.wait("a second Event", || publications(&lab, "bad").0 >= 2);
    // Fixed: it is programmed, and nothing more is said.
    lab.server.apply(bad(8080));
    agent.wait("the fixed Service programmed", || lab.table().contains("172.30.0.66 . tcp . 8080"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(publications(&lab, "bad").0, 2, "{:?}", publications(&lab, "bad").1);
}
