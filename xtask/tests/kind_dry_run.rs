//! `cargo xtask e2e --kind --dry-run` prints the whole kind run, in order, and everything it
//! refers to exists in the repository. (The kind run itself needs Docker: see docs/testing.md.)

use std::path::Path;
use std::process::Command;

fn dry_run(engine: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["e2e", "--kind", "--dry-run", "--engine", engine])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn position(text: &str, needle: &str) -> usize {
    text.find(needle).unwrap_or_else(|| panic!("the dry run does not contain {needle:?}:\n{text}"))
}

#[test]
fn the_kind_run_creates_builds_loads_deploys_tests_and_always_deletes_in_that_order() {
    let text = dry_run("docker");
    let order = [
        "kind create cluster --name verdict-e2e --config deploy/kind/cluster.yaml",
        "docker build --target runtime -t verdict:dev .",
        "docker build --target e2e-echo -t verdict-echo:dev .",
        "kind load docker-image verdict:dev --name verdict-e2e",
        "kubectl --context kind-verdict-e2e apply -k deploy/overlays/kind",
        "rollout status daemonset/verdict",
        "apply -f deploy/kind/e2e-workload.yaml",
        "verdict-echo probe 10.96.100.10:80",
        "verdict-echo probe ${WORKER_IP}:30080",
        "--dropped",
        "scaled-",
        "--refused",
        "delete pod echo-a1",
        "wait  # rolling",
        "delete pod -l k8s-app=verdict",
        "wait  # restart",
        "# --- only if a step failed",
        "logs -l k8s-app=verdict",
        "docker exec verdict-e2e-worker nft list ruleset",
        "# --- always",
        "kind delete cluster --name verdict-e2e",
    ];
    let mut last = 0;
    for needle in order {
        let at = position(&text, needle);
        assert!(at >= last, "{needle:?} is out of order:\n{text}");
        last = at;
    }
    assert!(text.trim_end().ends_with("kind delete cluster --name verdict-e2e"), "cleanup comes last");
}

#[test]
fn podman_is_used_when_asked() {
    let text = dry_run("podman");
    assert!(text.contains("podman build --target runtime") && !text.contains("docker build"), "{text}");
}

#[test]
fn everything_the_run_refers_to_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for path in ["deploy/kind/cluster.yaml", "deploy/overlays/kind/kustomization.yaml", "deploy/kind/e2e-workload.yaml"]
    {
        assert!(root.join(path).is_file(), "{path} is missing");
    }
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    for stage in [" AS runtime", " AS e2e-echo"] {
        assert!(dockerfile.contains(stage), "the Dockerfile has no stage{stage}");
    }
    let workload = std::fs::read_to_string(root.join("deploy/kind/e2e-workload.yaml")).unwrap();
    for ip in ["10.96.100.10", "10.96.100.13", "10.96.100.14", "10.96.100.15", "10.96.100.16"] {
        assert!(workload.contains(ip) && dry_run("docker").contains(ip), "{ip} must be in the workload and the plan");
    }
}
