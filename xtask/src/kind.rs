//! `cargo xtask e2e --kind`: the same scenarios on a real kind cluster (Docker or Podman, kind
//! and kubectl needed). The run is a plan of commands, so that `--dry-run` prints exactly what
//! would run, in order, and a test can check it.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::process::{Child, Command};

/// The kind cluster's name (and the kubectl context `kind-<name>`).
pub const CLUSTER: &str = "verdict-e2e";
const NS: &str = "verdict-e2e";

/// What a step does with its command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Run it; it must succeed.
    Run,
    /// Run it and keep its trimmed output as `${name}` for later steps.
    Capture(&'static str),
    /// Start it in the background under this name.
    Start(&'static str),
    /// Wait for the background step of this name; it must have succeeded.
    Wait(&'static str),
}

/// One step.
#[derive(Clone, Debug)]
pub struct Step {
    /// What the step is for (printed as progress).
    pub note: String,
    /// The command.
    pub argv: Vec<String>,
    /// How it runs.
    pub mode: Mode,
}

/// The whole run: the main steps, what to collect if one fails, and what always runs last.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Diagnostics collected after a failure.
    pub on_failure: Vec<Step>,
    /// Cleanup, always.
    pub finally: Vec<Step>,
}

fn step(note: &str, mode: Mode, argv: &[&str]) -> Step {
    Step { note: note.to_string(), argv: argv.iter().map(|s| s.to_string()).collect(), mode }
}

fn kubectl(args: &[&str]) -> Vec<String> {
    let mut v = vec!["kubectl".to_string(), "--context".into(), format!("kind-{CLUSTER}")];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn k(note: &str, mode: Mode, args: &[&str]) -> Step {
    Step { note: note.to_string(), argv: kubectl(args), mode }
}

/// `kubectl exec <pod> -- verdict-echo probe <args>`.
fn probe(note: &str, mode: Mode, pod: &str, args: &[&str]) -> Step {
    let mut all = vec!["-n", NS, "exec", pod, "--", "verdict-echo", "probe"];
    all.extend_from_slice(args);
    k(note, mode, &all)
}

/// The plan, with `engine` (docker or podman) building the images.
pub fn plan(engine: &str) -> Plan {
    use Mode::*;
    let worker_ip = "{.status.addresses[?(@.type==\"InternalIP\")].address}";
    let steps = vec![
        step(
            "create the kind cluster (no kube-proxy, two workers)",
            Run,
            &["kind", "create", "cluster", "--name", CLUSTER, "--config", "deploy/kind/cluster.yaml", "--wait", "180s"],
        ),
        step("build the verdict image", Run, &[engine, "build", "--target", "runtime", "-t", "verdict:dev", "."]),
        step(
            "build the test pods' image",
            Run,
            &[engine, "build", "--target", "e2e-echo", "-t", "verdict-echo:dev", "."],
        ),
        step(
            "load the verdict image into kind",
            Run,
            &["kind", "load", "docker-image", "verdict:dev", "--name", CLUSTER],
        ),
        step(
            "load the test image into kind",
            Run,
            &["kind", "load", "docker-image", "verdict-echo:dev", "--name", CLUSTER],
        ),
        k("deploy verdict (kind overlay)", Run, &["apply", "-k", "deploy/overlays/kind"]),
        k(
            "wait for the DaemonSet",
            Run,
            &["-n", "kube-system", "rollout", "status", "daemonset/verdict", "--timeout=180s"],
        ),
        k("deploy the test workload", Run, &["apply", "-f", "deploy/kind/e2e-workload.yaml"]),
        k(
            "wait for the test pods",
            Run,
            &["-n", NS, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=180s"],
        ),
        k(
            "find worker 1's address",
            Capture("WORKER_IP"),
            &["get", "node", "verdict-e2e-worker", "-o", &format!("jsonpath={worker_ip}")],
        ),
        k(
            "find worker 2's address",
            Capture("WORKER2_IP"),
            &["get", "node", "verdict-e2e-worker2", "-o", &format!("jsonpath={worker_ip}")],
        ),
        probe(
            "ClusterIP reaches endpoints on both nodes",
            Run,
            "client-a",
            &[
                "10.96.100.10:80",
                "--count",
                "20",
                "--expect",
                "echo-a1,echo-b1",
                "--masquerade",
                "no",
                "--within",
                "30",
            ],
        ),
        probe(
            "NodePort on worker 1 reaches a pod on worker 2, masqueraded",
            Run,
            "outside",
            &["${WORKER_IP}:30080", "--count", "10", "--expect", "echo-b1", "--masquerade", "yes", "--within", "30"],
        ),
        probe(
            "externalTrafficPolicy Local: the node with the endpoint answers, client kept",
            Run,
            "outside",
            &["${WORKER_IP}:30081", "--count", "10", "--expect", "echo-a2", "--masquerade", "no", "--within", "30"],
        ),
        probe(
            "externalTrafficPolicy Local: the node without one drops",
            Run,
            "outside",
            &["${WORKER2_IP}:30081", "--count", "2", "--dropped"],
        ),
        probe(
            "internalTrafficPolicy Local from worker 1",
            Run,
            "client-a",
            &["10.96.100.13:80", "--count", "10", "--expect", "echo-a1", "--within", "30"],
        ),
        probe(
            "internalTrafficPolicy Local from worker 2",
            Run,
            "client-b",
            &["10.96.100.13:80", "--count", "10", "--expect", "echo-b2", "--within", "30"],
        ),
        probe(
            "scaled Service answers",
            Run,
            "client-a",
            &["10.96.100.14:80", "--count", "20", "--expect", "echo-a1,echo-b1", "--within", "30"],
        ),
        k("scale to zero", Run, &["-n", NS, "label", "pod", "echo-a1", "echo-b1", "scaled-"]),
        probe(
            "zero endpoints: refused",
            Run,
            "client-a",
            &["10.96.100.14:80", "--count", "3", "--refused", "--within", "30"],
        ),
        k("scale back to one", Run, &["-n", NS, "label", "pod", "echo-a2", "scaled=yes"]),
        probe(
            "back: answered by the new endpoint",
            Run,
            "client-a",
            &["10.96.100.14:80", "--count", "10", "--expect", "echo-a2", "--within", "30"],
        ),
        probe(
            "rolling update: prober for 40 s (no connection may fail)",
            Start("rolling"),
            "client-b",
            &["10.96.100.15:80", "--for", "40", "--every", "50"],
        ),
        k("rolling update: echo-a2 joins", Run, &["-n", NS, "label", "pod", "echo-a2", "stable=yes"]),
        step("rolling update: let it propagate", Run, &["sleep", "5"]),
        k(
            "rolling update: echo-a1 leaves (terminating, preStop 5 s)",
            Run,
            &["-n", NS, "delete", "pod", "echo-a1", "--wait=true"],
        ),
        k("rolling update: echo-b2 joins", Run, &["-n", NS, "label", "pod", "echo-b2", "stable=yes"]),
        step("rolling update: let it propagate", Run, &["sleep", "5"]),
        k("rolling update: echo-b1 leaves", Run, &["-n", NS, "delete", "pod", "echo-b1", "--wait=true"]),
        step("rolling update: prober result", Wait("rolling"), &[]),
        probe(
            "agent restart: prober for 30 s (no connection may fail)",
            Start("restart"),
            "client-a",
            &["10.96.100.16:80", "--for", "30", "--every", "50"],
        ),
        step("agent restart: traffic flowing", Run, &["sleep", "5"]),
        k(
            "agent restart: delete worker 1's verdict pod",
            Run,
            &[
                "-n",
                "kube-system",
                "delete",
                "pod",
                "-l",
                "k8s-app=verdict",
                "--field-selector",
                "spec.nodeName=verdict-e2e-worker",
            ],
        ),
        k(
            "agent restart: wait for the DaemonSet",
            Run,
            &["-n", "kube-system", "rollout", "status", "daemonset/verdict", "--timeout=120s"],
        ),
        step("agent restart: prober result", Wait("restart"), &[]),
    ];
    let mut on_failure =
        vec![k("verdict logs", Run, &["-n", "kube-system", "logs", "-l", "k8s-app=verdict", "--tail=200", "--prefix"])];
    for node in ["verdict-e2e-control-plane", "verdict-e2e-worker", "verdict-e2e-worker2"] {
        on_failure.push(step(&format!("ruleset of {node}"), Run, &[engine, "exec", node, "nft", "list", "ruleset"]));
    }
    let finally = vec![step("delete the kind cluster", Run, &["kind", "delete", "cluster", "--name", CLUSTER])];
    Plan { steps, on_failure, finally }
}

/// The plan as shell lines, in order (`--dry-run`).
pub fn render(plan: &Plan) -> String {
    let line = |s: &Step| -> String {
        let cmd = s.argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
        match &s.mode {
            Mode::Run => cmd,
            Mode::Capture(var) => format!("{var}=$({cmd})"),
            Mode::Start(name) => format!("{cmd} &  # {name}"),
            Mode::Wait(name) => format!("wait  # {name}"),
        }
    };
    let mut out = String::new();
    for s in &plan.steps {
        out.push_str(&format!("# {}\n{}\n", s.note, line(s)));
    }
    out.push_str("# --- only if a step failed: collect diagnostics\n");
    for s in &plan.on_failure {
        out.push_str(&format!("# {}\n{}\n", s.note, line(s)));
    }
    out.push_str("# --- always\n");
    for s in &plan.finally {
        out.push_str(&format!("# {}\n{}\n", s.note, line(s)));
    }
    out
}

fn shell_quote(a: &str) -> String {
    if a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,${}@".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// Runs the plan; diagnostics after a failure; cleanup always.
pub fn execute(plan: &Plan) -> Result<()> {
    for tool in ["kind", "kubectl"] {
        if Command::new(tool).arg("version").output().is_err() {
            bail!("`{tool}` is not installed; see docs/testing.md (use --dry-run to see the commands)");
        }
    }
    let result = run_steps(&plan.steps);
    if result.is_err() {
        let _ = run_steps(&plan.on_failure);
    }
    let cleanup = run_steps(&plan.finally);
    result.and(cleanup)
}

fn run_steps(steps: &[Step]) -> Result<()> {
    let mut vars: BTreeMap<&str, String> = BTreeMap::new();
    let mut background: BTreeMap<&str, Child> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        println!("[{}/{}] {}", i + 1, steps.len(), s.note);
        let argv: Vec<String> = s
            .argv
            .iter()
            .map(|a| vars.iter().fold(a.clone(), |acc, (k, v)| acc.replace(&format!("${{{k}}}"), v)))
            .collect();
        match &s.mode {
            Mode::Wait(name) => {
                let child = background.remove(name).with_context(|| format!("nothing started as {name}"))?;
                let status = child.wait_with_output()?.status;
                if !status.success() {
                    bail!("{}: failed ({status})", s.note);
                }
            }
            mode => {
                let (program, args) = argv.split_first().context("an empty command")?;
                let mut cmd = Command::new(program);
                cmd.args(args);
                match mode {
                    Mode::Start(name) => {
                        background.insert(name, cmd.spawn().with_context(|| format!("starting {program}"))?);
                    }
                    Mode::Capture(var) => {
                        let out = cmd.output().with_context(|| format!("starting {program}"))?;
                        if !out.status.success() {
                            bail!("{}: failed ({})", s.note, out.status);
                        }
                        vars.insert(var, String::from_utf8_lossy(&out.stdout).trim().to_string());
                    }
                    _ => {
                        let status = cmd.status().with_context(|| format!("starting {program}"))?;
                        if !status.success() {
                            bail!("{}: failed ({status})", s.note);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_started_step_is_waited_for_and_every_variable_is_captured_first() {
        let p = plan("docker");
        let mut started = Vec::new();
        let mut captured = Vec::new();
        for s in &p.steps {
            for a in &s.argv {
                for var in ["WORKER_IP", "WORKER2_IP"] {
                    if a.contains(&format!("${{{var}}}")) {
                        assert!(captured.contains(&var), "{var} used before it is captured: {a}");
                    }
                }
            }
            match &s.mode {
                Mode::Capture(v) => captured.push(*v),
                Mode::Start(n) => started.push(*n),
                Mode::Wait(n) => assert_eq!(started.pop(), Some(*n), "waits match starts"),
                Mode::Run => {}
            }
        }
        assert!(started.is_empty(), "started but never waited for: {started:?}");
    }
}
