//! The agents as containers of the image, run as the kubeadm overlay's DaemonSet says: user,
//! capabilities, read-only root, `allowPrivilegeEscalation`, volumes, command and env are read
//! from the rendered DaemonSet (`kubectl kustomize deploy/overlays/kubeadm`), not written here.
//!
//! The node's network namespace is that of a pause container (`--network none`), named with
//! `ip netns attach` so that the topology wires it like any other node; the agent container
//! joins it with `--network container:<pause>`, as a pod's containers join its sandbox. A
//! Docker container cannot join a namespace by path, and `--network host` would be the
//! daemon's namespace, the host's.

use super::privileged;
use crate::agent_process::{AgentLaunch, AgentProcess};
use crate::topology::Node;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, Probe};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The label on every container the e2e run starts (`docker rm -f` by it cleans up).
pub const LABEL: &str = "verdict-e2e";

/// Which of the pod's containers is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An init container, run to completion before the agent.
    Init,
    /// The agent container.
    Agent,
}

/// How to run agents as containers.
#[derive(Clone, Debug)]
pub struct Containers {
    /// The container engine's client (docker).
    pub engine: String,
    /// The image (`cargo xtask image`).
    pub image: String,
    /// The DaemonSet's pod.
    pub pod: PodSpec,
}

impl Containers {
    /// From the output of `kubectl kustomize` with one DaemonSet in it.
    pub fn from_rendered(engine: &str, image: &str, rendered: &str) -> Result<Containers> {
        for doc in serde_norway::Deserializer::from_str(rendered) {
            let value = serde_norway::Value::deserialize(doc)?;
            if value.get("kind").and_then(|k| k.as_str()) == Some("DaemonSet") {
                let ds: DaemonSet = serde_norway::from_value(value)?;
                let pod = ds.spec.and_then(|s| s.template.spec).context("the DaemonSet has no pod spec")?;
                return Ok(Containers { engine: engine.into(), image: image.into(), pod });
            }
        }
        bail!("no DaemonSet in the rendered manifests")
    }

    /// The agent container (the pod's first).
    pub fn agent(&self) -> &Container {
        &self.pod.containers[0]
    }

    /// Starts a pause container with a network namespace of its own.
    pub fn pause(&self, name: &str) -> Result<Pause> {
        let pause = Pause { engine: self.engine.clone(), name: name.into() };
        let _ = self.engine_cmd(&["rm", "-f", name]).output();
        let args = ["run", "-d", "--name", name, "--label", LABEL, "--network", "none", "--read-only"];
        let user = ["--user", "65532:65532", "--cap-drop", "ALL", "--entrypoint", "sleep", &self.image, "infinity"];
        check(self.engine_cmd(&args).args(user))?;
        Ok(pause)
    }

    /// Makes the pod's volumes for `node` under `dir`: hostPath ones as empty directories or
    /// files (kubelet's `DirectoryOrCreate`, `FileOrCreate`), configMap ones with `files`.
    pub fn make_volumes(&self, dir: &Path, files: &[(&str, String)]) -> Result<()> {
        for v in self.pod.volumes.iter().flatten() {
            let path = dir.join(&v.name);
            if let Some(host) = &v.host_path {
                std::fs::create_dir_all(dir)?;
                if host.type_.as_deref() == Some("FileOrCreate") {
                    std::fs::write(&path, "")?;
                } else {
                    std::fs::create_dir_all(&path)?;
                }
            } else if v.config_map.is_some() {
                std::fs::create_dir_all(&path)?;
                for (name, text) in files {
                    std::fs::write(path.join(name), text)?;
                }
            } else {
                bail!("volume {}: only hostPath and configMap volumes are supported here", v.name);
            }
        }
        Ok(())
    }

    /// `docker run` arguments for container `c` of the pod on `node`, named `name`, in the
    /// pause container's network namespace, with the volumes under `volumes`. `privileged` is
    /// honoured only for an init container (`Role::Init`): the agent must run without it.
    pub fn run_args(
        &self,
        c: &Container,
        role: Role,
        node: &str,
        name: &str,
        pause: &str,
        volumes: &Path,
    ) -> Result<Vec<String>> {
        let mut a: Vec<String> = ["run", "--rm", "--name", name, "--label", LABEL].map(String::from).into();
        a.extend(["--network".into(), format!("container:{pause}")]);
        let sc = c.security_context.clone().unwrap_or_default();
        let (uid, gid) = (sc.run_as_user.unwrap_or(0), sc.run_as_group.unwrap_or(0));
        if sc.run_as_non_root == Some(true) && uid == 0 {
            bail!("{}: runAsNonRoot with user 0 (the kubelet would refuse it)", c.name);
        }
        a.extend(["--user".into(), format!("{uid}:{gid}")]);
        let caps = sc.capabilities.clone().unwrap_or_default();
        for cap in caps.drop.iter().flatten() {
            a.extend(["--cap-drop".into(), cap.clone()]);
        }
        for cap in caps.add.iter().flatten() {
            a.extend(["--cap-add".into(), cap.clone()]);
        }
        if sc.read_only_root_filesystem == Some(true) {
            a.push("--read-only".into());
        }
        if sc.allow_privilege_escalation == Some(false) {
            a.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        if sc.privileged == Some(true) {
            // The conntrack sysctls need it (a privileged container's /proc/sys is writable);
            // the agent itself must prove it works with NET_ADMIN alone.
            if role != Role::Init {
                bail!("{}: only init containers may be privileged here: the agent must run without it", c.name);
            }
            a.push("--privileged".into());
        }
        let env = self.env(c, node)?;
        for (k, v) in &env {
            a.extend(["-e".into(), format!("{k}={v}")]);
        }
        for m in c.volume_mounts.iter().flatten() {
            let host = volumes.join(&m.name);
            let ro = if m.read_only == Some(true) { ":ro" } else { "" };
            a.extend(["-v".into(), format!("{}:{}{ro}", host.display(), m.mount_path)]);
        }
        let expand = |s: &String| env.iter().fold(s.clone(), |s, (k, v)| s.replace(&format!("$({k})"), v));
        let command: Vec<String> = c.command.iter().flatten().map(expand).collect();
        if let Some(entry) = command.first() {
            a.extend(["--entrypoint".into(), entry.clone()]);
        }
        a.push(self.image.clone());
        a.extend(command.iter().skip(1).cloned());
        a.extend(c.args.iter().flatten().map(expand));
        Ok(a)
    }

    /// The container's environment: values, and `spec.nodeName` field references.
    fn env(&self, c: &Container, node: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for e in c.env.iter().flatten() {
            let field = e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()).map(|f| f.field_path.as_str());
            let value = match (&e.value, field) {
                (Some(v), _) => v.clone(),
                (None, Some("spec.nodeName")) => node.to_string(),
                _ => bail!("env {}: only values and spec.nodeName are supported here", e.name),
            };
            out.push((e.name.clone(), value));
        }
        Ok(out)
    }

    /// Runs the pod's init containers to completion.
    pub fn run_init(&self, node: &str, tag: &str, pause: &str, volumes: &Path) -> Result<()> {
        for c in self.pod.init_containers.iter().flatten() {
            let name = format!("{tag}-{}", c.name);
            let args = self.run_args(c, Role::Init, node, &name, pause, volumes)?;
            let out = self.engine_cmd(&[]).args(&args).output()?;
            if !out.status.success() && privileged::caps_refused(&out.stderr) {
                let missing = privileged::missing_caps(&std::fs::read_to_string("/proc/self/status")?);
                println!(
                    "e2e: {node}: `{} run --privileged` refused (this machine lacks {missing:?}): {} runs with all else it gives",
                    self.engine, c.name
                );
                let args = privileged::emulated(&args, &missing);
                check(self.engine_cmd(&[]).args(&args)).with_context(|| format!("init container {}", c.name))?;
            } else if !out.status.success() {
                bail!(
                    "init container {} failed ({}): {}",
                    c.name,
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    }

    /// Starts the agent container, named `<prefix>-<n>` (a restarted agent's name differs from
    /// the one it replaces, which is removed when dropped): attached, its stderr goes to `log`
    /// and SIGTERM to the client reaches it.
    pub(super) fn start_agent(
        &self,
        node: &Node,
        prefix: &str,
        pause: &str,
        volumes: &Path,
        log: &Path,
    ) -> Result<AgentProcess> {
        static STARTS: AtomicU32 = AtomicU32::new(0);
        let name = &format!("{prefix}-{}", STARTS.fetch_add(1, Ordering::Relaxed));
        let args = self.run_args(self.agent(), Role::Agent, &node.name, name, pause, volumes)?;
        AgentLaunch::container(&node.ns, &self.engine, name, &args)?.log_file(log).spawn()
    }

    /// Runs the agent container with `tweak` applied to its spec until it exits (at most
    /// 30 s): for runs that must fail.
    pub fn run_agent_tweaked(
        &self,
        node: &str,
        name: &str,
        pause: &str,
        volumes: &Path,
        tweak: impl Fn(&mut Container),
    ) -> Result<Output> {
        let mut c = self.agent().clone();
        tweak(&mut c);
        let args = self.run_args(&c, Role::Agent, node, name, pause, volumes)?;
        let mut child = self.engine_cmd(&[]).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait()?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.engine_cmd(&["rm", "-f", name]).output();
        Ok(child.wait_with_output()?)
    }

    fn engine_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.engine);
        cmd.args(args).stdin(Stdio::null());
        cmd
    }
}

/// An HTTP GET probe: (path, port).
pub fn http_probe(p: Option<&Probe>) -> Option<(String, u16)> {
    let get = p?.http_get.as_ref()?;
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => u16::try_from(*n).ok()?,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => return None,
    };
    Some((get.path.clone().unwrap_or_else(|| "/".into()), port))
}

/// A pause container holding a node's network namespace; removed on drop.
pub struct Pause {
    engine: String,
    /// The container's name.
    pub name: String,
}

impl Pause {
    /// The PID of its process (for `ip netns attach`).
    pub fn pid(&self) -> Result<u32> {
        let out = check(Command::new(&self.engine).args(["inspect", "-f", "{{.State.Pid}}", &self.name]))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().context("the pause container's PID")
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        let _ = Command::new(&self.engine)
            .args(["rm", "-f", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs a command, failing with its output unless it succeeds.
fn check(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out)
}

/// Where a pod's volumes live for one node.
pub fn volumes_dir(workdir: &Path, node: &str) -> PathBuf {
    workdir.join(format!("{node}-volumes"))
}

#[cfg(test)]
mod tests {
    use super::{Containers, Role};
    use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};
    use std::path::Path;

    fn privileged() -> Container {
        Container {
            name: "c".into(),
            security_context: Some(SecurityContext { privileged: Some(true), ..SecurityContext::default() }),
            ..Container::default()
        }
    }

    #[test]
    fn only_init_containers_run_privileged() {
        let c = Containers { engine: "docker".into(), image: "i".into(), pod: PodSpec::default() };
        let args = c.run_args(&privileged(), Role::Init, "node1", "n", "p", Path::new("/v")).unwrap();
        assert!(args.iter().any(|a| a == "--privileged"), "{args:?}");
        let err = c.run_args(&privileged(), Role::Agent, "node1", "n", "p", Path::new("/v")).unwrap_err();
        assert!(err.to_string().contains("only init containers may be privileged"), "{err}");
        let plain = Container { name: "c".into(), ..Container::default() };
        let args = c.run_args(&plain, Role::Init, "node1", "n", "p", Path::new("/v")).unwrap();
        assert!(!args.iter().any(|a| a == "--privileged"), "{args:?}");
    }
}
