//! Network namespaces owned by a test: unique names, removed on drop (also when the test
//! panics), and processes started inside them killed by their own PIDs.

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace created with `ip netns add`, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    children: Vec<Child>,
}

impl Netns {
    /// Creates `vd-<tag>-<pid>-<n>` with its loopback up.
    pub fn new(tag: &str) -> Result<Netns> {
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(remove_orphans);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("vd-{tag}-{}-{n}", std::process::id());
        if name.len() > 60 {
            bail!("namespace name {name} is too long");
        }
        run(&["ip", "netns", "add", &name])?;
        let ns = Netns { name, children: Vec::new() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Names the network namespace of process `pid` (e.g. a container's) `vd-<tag>-<pid>-<n>`
    /// with `ip netns attach`, its loopback up. Drop removes the name, not the namespace: that
    /// lives as long as the process.
    pub fn attach(tag: &str, pid: u32) -> Result<Netns> {
        let name = format!("vd-{tag}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        run(&["ip", "netns", "attach", &name, &pid.to_string()])?;
        let ns = Netns { name, children: Vec::new() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run(&full).map(|_| ())
    }

    /// Runs a command inside the namespace and returns its output (any exit status).
    pub fn exec(&self, cmd: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(cmd)
            .output()
            .with_context(|| format!("running {cmd:?} in {}", self.name))
    }

    /// Runs a command inside the namespace and fails unless it succeeds; returns stdout.
    pub fn check(&self, cmd: &[&str]) -> Result<String> {
        let out = self.exec(cmd)?;
        if !out.status.success() {
            bail!(
                "{cmd:?} in {} failed ({}): {}{}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `nft` in the namespace with `input` on stdin (for `nft -f -`).
    pub fn nft_stdin(&self, args: &[&str], input: &str) -> Result<String> {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("stdin").write_all(input.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("nft {args:?} in {} failed: {}", self.name, String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Sets a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.check(&["sysctl", "-qw", &format!("{key}={value}")]).map(|_| ())
    }

    /// Starts a long-running process in the namespace; it is killed when the namespace is
    /// dropped.
    pub fn spawn(&mut self, cmd: &[&str]) -> Result<u32> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {cmd:?} in {}", self.name))?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Kills every process started with [`Netns::spawn`].
    pub fn stop_all(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Runs `f` on a thread that has entered this namespace (sockets it opens live there).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        enter(&self.name, f)
    }
}

/// Runs `f` on a thread that has entered the namespace named `name` (for holders of the name
/// only, such as a process started in it).
pub fn enter<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{name}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("setns into {path}: {e}"));
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Starts a thread that enters the namespace named `name` (or stays in the current one when
/// `name` is `None`) and runs `f` there; for long-running workers, such as the steady-traffic
/// harness's. Fails (on the thread) if the namespace cannot be entered.
pub fn spawn_in<T: Send + 'static>(
    name: Option<&str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    let path = name.map(|n| format!("/run/netns/{n}"));
    std::thread::spawn(move || {
        if let Some(path) = path {
            let file = File::open(&path).with_context(|| format!("open {path}"))?;
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("setns into {path}"))?;
        }
        Ok(f())
    })
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).stderr(Stdio::null()).status();
    }
}

/// Deletes the namespaces a killed test process left (`vd-<tag>-<pid>-<n>` whose process is
/// gone): a process killed by a signal or a timeout runs no `Drop`. Namespaces of running test
/// processes are left alone.
fn remove_orphans() {
    let Ok(out) = run(&["ip", "netns", "list"]) else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next().filter(|n| n.starts_with("vd-")) else { continue };
        let Some(pid) = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing network namespace {name}, left by process {pid}, which is gone");
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}

/// Runs a command in the current namespace (only `ip netns add/del` and `ip -n`).
fn run(cmd: &[&str]) -> Result<Output> {
    let out = Command::new(cmd[0]).args(&cmd[1..]).output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out)
}
