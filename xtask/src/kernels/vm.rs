//! One QEMU run: the kernel, the initramfs, the host's root shared read-only over 9p, a
//! writable share for results, the serial console to a log, and a deadline after which the VM
//! is killed so that a hang is reported as one.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a run ended.
pub enum Ended {
    /// The guest powered off by itself.
    PoweredOff,
    /// The deadline passed; the VM was killed.
    TimedOut(Duration),
}

/// The accelerator: KVM where it is allowed and works, else TCG (software emulation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// Everything a VM run needs.
pub struct Vm<'a> {
    pub vmlinuz: &'a Path,
    pub initramfs: &'a Path,
    pub share: &'a Path,
    pub console: &'a Path,
    pub accel: Accel,
    pub memory_mib: u32,
    pub cpus: u32,
    pub deadline: Duration,
}

impl Vm<'_> {
    /// Boots the VM and waits for it to power off or for the deadline.
    pub fn run(&self) -> Result<Ended> {
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args(["-machine", "q35", "-nodefaults", "-no-reboot", "-display", "none", "-nic", "none"]);
        match self.accel {
            // `-cpu host` fails on an MSR on these machines; `max` gives the same features
            // without passing the host's MSRs through.
            Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "max"]),
            Accel::Tcg => cmd.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
        };
        cmd.args(["-m", &self.memory_mib.to_string(), "-smp", &self.cpus.to_string()])
            .arg("-kernel")
            .arg(self.vmlinuz)
            .arg("-initrd")
            .arg(self.initramfs)
            .args(["-append", "console=ttyS0 panic=-1 oops=panic quiet loglevel=4 rdinit=/init"])
            .args(["-serial", &format!("file:{}", self.console.display())])
            .args(["-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"])
            .args(["-virtfs", &format!("local,path={},mount_tag=out,security_model=none", self.share.display())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().context("starting qemu-system-x86_64")?;
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    anyhow::bail!("qemu exited with {status}: {}", err.trim());
                }
                return Ok(Ended::PoweredOff);
            }
            if started.elapsed() > self.deadline {
                // Our own child, by its handle: no other qemu on the machine is touched.
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Ended::TimedOut(started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
