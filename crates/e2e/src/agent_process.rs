//! The one launcher of the long-running `verdict run` daemon, for the agent's tests, the
//! benchmarks and the cluster harness alike: it is started inside a network namespace the
//! harness owns (never the host's), directly, behind a wrapper that execs it (a mount
//! namespace), or as a container joined to that namespace; its stderr goes to a log file that
//! every failure message quotes; and it is killed and reaped when dropped, also when a test
//! panics half-way.

use crate::netns::{self, Netns};
use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// kube-proxy's default healthz port, where [`AgentProcess::wait_healthy`] asks unless told.
pub const HEALTHZ_PORT: u16 = 10256;

/// How much of the log a failure message quotes: enough for a test's whole run, bounded for a
/// benchmark's.
const QUOTED_LINES: usize = 200;

/// What a daemon is started with; [`AgentLaunch::spawn`] starts it.
pub struct AgentLaunch {
    netns: String,
    program: OsString,
    args: Vec<OsString>,
    /// Environment variables set (`Some`) or removed (`None`) for the process.
    env: Vec<(OsString, Option<OsString>)>,
    wrapper: Vec<OsString>,
    container: Option<Container>,
    log: Option<PathBuf>,
    healthz: SocketAddr,
    scratch: TempDir,
}

/// A container whose engine client is the process started: removed by name on drop, since
/// killing the client does not stop the container.
struct Container {
    engine: OsString,
    name: String,
}

impl AgentLaunch {
    /// `program` (the verdict binary, or a link to it under another name) run in `ns`, with a
    /// scratch directory `verdict-<tag>-*` that lives as long as the process (its log, and
    /// whatever the caller puts there: a kubeconfig, the state directory).
    pub fn new(ns: &Netns, program: impl AsRef<OsStr>, tag: &str) -> Result<AgentLaunch> {
        Ok(AgentLaunch {
            netns: ns.name().to_string(),
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env: Vec::new(),
            wrapper: Vec::new(),
            container: None,
            log: None,
            healthz: SocketAddr::from(([127, 0, 0, 1], HEALTHZ_PORT)),
            scratch: TempDir::with_prefix(format!("verdict-{tag}-")).context("a scratch directory")?,
        })
    }

    /// The container named `name`, started by `engine` with `run_args` (attached, so that
    /// its stderr is the log and a signal to the client reaches it). `ns` is the namespace
    /// the container joins: where its health is asked.
    pub fn container(ns: &Netns, engine: &str, name: &str, run_args: &[String]) -> Result<AgentLaunch> {
        let mut launch = AgentLaunch::new(ns, engine, "agent-container")?;
        launch.container = Some(Container { engine: engine.into(), name: name.to_string() });
        launch.args = run_args.iter().map(OsString::from).collect();
        Ok(launch)
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> AgentLaunch {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// More arguments.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> AgentLaunch {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// An environment variable for the process (a pod's, e.g. `KUBERNETES_SERVICE_HOST`; for a
    /// container, its engine client's).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> AgentLaunch {
        self.env.push((name.as_ref().to_os_string(), Some(value.as_ref().to_os_string())));
        self
    }

    /// An environment variable the process must not inherit from the test's.
    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> AgentLaunch {
        self.env.push((name.as_ref().to_os_string(), None));
        self
    }

    /// Runs `wrapper` in the namespace with the program and its arguments after it. The
    /// wrapper must exec them: the PID signalled must stay the agent's.
    pub fn wrapped_in<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, wrapper: I) -> AgentLaunch {
        self.wrapper = wrapper.into_iter().map(|a| a.as_ref().to_os_string()).collect();
        self
    }

    /// Appends the log to `path` instead of the scratch directory's `agent.log`: a restarted
    /// agent's log follows the last one's.
    pub fn log_file(mut self, path: &Path) -> AgentLaunch {
        self.log = Some(path.to_path_buf());
        self
    }

    /// Where `/healthz` answers, inside the namespace (default 127.0.0.1:10256).
    pub fn healthz(mut self, addr: SocketAddr) -> AgentLaunch {
        self.healthz = addr;
        self
    }

    /// Starts it.
    pub fn spawn(self) -> Result<AgentProcess> {
        let log = self.log.unwrap_or_else(|| self.scratch.path().join("agent.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("the log {}", log.display()))?;
        // The log may hold an earlier agent's lines: only what follows is this one's.
        let start_of_log = file.metadata()?.len();
        let mut cmd = match &self.container {
            Some(_) => Command::new(&self.program),
            None => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", &self.netns]).args(&self.wrapper).arg(&self.program);
                cmd
            }
        };
        for (name, value) in &self.env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(file);
        let started = Instant::now();
        let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
        Ok(AgentProcess {
            pid: child.id(),
            child: Mutex::new(child),
            netns: self.netns,
            log,
            healthz: self.healthz,
            started,
            read_up_to: Mutex::new(start_of_log),
            container: self.container,
            scratch: self.scratch,
        })
    }
}

/// A running daemon; killed and reaped on drop (its container removed, its scratch directory
/// with it).
pub struct AgentProcess {
    pid: u32,
    child: Mutex<Child>,
    netns: String,
    log: PathBuf,
    healthz: SocketAddr,
    started: Instant,
    /// Where [`AgentProcess::wait_line`] goes on reading the log.
    read_up_to: Mutex<u64>,
    container: Option<Container>,
    scratch: TempDir,
}

impl AgentProcess {
    /// The PID started: the agent's own (`ip netns exec` and the wrappers exec it), or a
    /// container engine client's, which forwards signals.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// What it logged so far (with an appended log file, what the earlier agents logged too).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&self) -> Result<Option<ExitStatus>> {
        Ok(self.child.lock().unwrap_or_else(|e| e.into_inner()).try_wait()?)
    }

    /// Waits until `f` holds, at most `within`; fails with the log if it does not, or if the
    /// agent exits first (it cannot make `f` hold any more).
    pub fn wait_until(&self, what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if f() {
                return Ok(());
            }
            if let Some(status) = self.try_wait()? {
                bail!("the agent exited ({status}) while waiting for {what}\nagent log:\n{}", self.quoted());
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what} ({within:?})\nagent log:\n{}", self.quoted());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tests' shorthand: [`AgentProcess::wait_until`] 20 s, failing the test.
    pub fn wait(&self, what: &str, f: impl FnMut() -> bool) {
        if let Err(e) = self.wait_until(what, Duration::from_secs(20), f) {
            panic!("{e:#}");
        }
    }

    /// Waits until `/healthz` answers 200 (the agent has programmed its first sync).
    pub fn wait_healthy(&self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if netns::enter(&self.netns, || http_get(self.healthz, "/healthz")) == Some(200) {
                return Ok(());
            }
            if let Some(status) = self.try_wait()? {
                bail!("the agent exited ({status}) before becoming healthy:\n{}", self.log_tail(40));
            }
            if Instant::now() > deadline {
                bail!("the agent did not become healthy within {within:?}:\n{}", self.log_tail(40));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the next log line (after those an earlier call read) that `parse` accepts;
    /// returns what it made of it and when the line was seen, since the start. Fails if the
    /// agent exits first.
    pub fn wait_line<T>(
        &self,
        what: &str,
        within: Duration,
        mut parse: impl FnMut(&str) -> Option<T>,
    ) -> Result<(T, Duration)> {
        let deadline = Instant::now() + within;
        let mut read_up_to = self.read_up_to.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let seen = self.started.elapsed();
            let exited = self.try_wait()?;
            // Whole lines only: the agent may be half-way through writing the next.
            let fresh = self.read_from(*read_up_to)?;
            let whole = fresh.rfind('\n').map_or(0, |end| end + 1);
            let mut consumed = 0;
            for line in fresh[..whole].split_inclusive('\n') {
                consumed += line.len();
                if let Some(t) = parse(line.trim_end()) {
                    *read_up_to += consumed as u64;
                    return Ok((t, seen));
                }
            }
            *read_up_to += whole as u64;
            if let Some(status) = exited {
                bail!("the agent exited ({status}) before {what}:\n{}", self.log_tail(30));
            }
            if Instant::now() > deadline {
                bail!("no {what} within {within:?}:\n{}", self.log_tail(30));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn read_from(&self, offset: u64) -> Result<String> {
        let mut file = std::fs::File::open(&self.log)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        // A multi-byte character cut at the end is completed by the next read.
        Ok(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                String::from_utf8_lossy(&e.into_bytes()[..valid]).into_owned()
            }
        })
    }

    /// Waits (at most `within`) for the agent to exit by itself.
    pub fn wait_exit(&self, within: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("the agent did not exit within {within:?}\nagent log:\n{}", self.quoted());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = i32::try_from(self.pid).context("a PID")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("sending {signal} to the agent"))
    }

    /// SIGTERM, then waits (at most `within`) for a clean exit: the agent leaves its rules in
    /// place and, with a state directory, saves the table's state.
    pub fn terminate(&self, within: Duration) -> Result<()> {
        self.signal(Signal::SIGTERM)?;
        let status = self.wait_exit(within).context("on SIGTERM")?;
        if !status.success() {
            bail!("the agent exited with {status} on SIGTERM:\n{}", self.log_tail(20));
        }
        Ok(())
    }

    fn quoted(&self) -> String {
        self.log_tail(QUOTED_LINES)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        if let Some(c) = &self.container {
            let _ = Command::new(&c.engine)
                .args(["rm", "-f", &c.name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The status code of `GET path` on `addr`, from the current namespace.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The path of a binary built beside the running test executable (`target/<profile>/<name>`,
/// the test being in `target/<profile>/deps/`): how a test of this crate finds the `verdict`
/// binary, which another package builds (`cargo test --workspace` builds both).
pub fn sibling_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run the tests with `cargo test --workspace --release` (or build it first)",
        path.display()
    );
    path
}
