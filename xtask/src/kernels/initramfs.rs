//! The guest's initramfs: static busybox, `init.sh`, and the kernel's own modules that verdict
//! and the tests need, in load order. Written as a `newc` cpio archive by hand (a few lines,
//! and no cpio binary needed on the host).

use super::fetch::Kernel;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module directories loaded whole: everything netfilter (nf_tables, its expressions, conntrack,
/// NAT, x_tables for the leftovers tests), and what the VM itself needs to mount its root.
const TREES: &[&str] = &["kernel/net/netfilter/", "kernel/net/ipv4/netfilter/", "kernel/net/ipv6/netfilter/"];
/// Single modules, by name: veth, bridge (with br_netfilter) and dummy for the tests' topologies,
/// 9p over virtio and overlayfs for the root, sctp for the SCTP packet tests, and crc32c, which
/// libcrc32c (conntrack, NAT) asks for only as a soft dependency that modules.dep does not list.
const SINGLE: &[&str] = &[
    "crc32c_generic",
    "veth",
    "bridge",
    "br_netfilter",
    "dummy",
    "9p",
    "9pnet_virtio",
    "virtio_pci",
    "overlay",
    "sctp",
    "nf_conntrack_netlink",
    "ip_tables",
];

/// The modules to load, dependencies first: each path relative to the module tree, and in it.
fn module_order(kernel: &Kernel) -> Result<Vec<(String, PathBuf)>> {
    let Some(modules) = &kernel.modules else { return Ok(Vec::new()) };
    let dep_file = modules.join("modules.dep");
    let text = std::fs::read_to_string(&dep_file).with_context(|| format!("reading {}", dep_file.display()))?;
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some((m, d)) = line.split_once(':') {
            deps.insert(m.to_string(), d.split_whitespace().map(str::to_string).collect());
        }
    }
    let name = |p: &str| p.rsplit('/').next().unwrap_or(p).trim_end_matches(".ko").replace('-', "_");
    let wanted: Vec<String> = deps
        .keys()
        .filter(|p| TREES.iter().any(|t| p.starts_with(t)) || SINGLE.contains(&name(p).as_str()))
        .cloned()
        .collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in wanted {
        visit(&m, &deps, &mut seen, &mut order);
    }
    Ok(order.into_iter().map(|rel| (rel.clone(), modules.join(rel))).collect())
}

fn visit(m: &str, deps: &BTreeMap<String, Vec<String>>, seen: &mut BTreeSet<String>, order: &mut Vec<String>) {
    if !seen.insert(m.to_string()) {
        return;
    }
    for d in deps.get(m).into_iter().flatten() {
        visit(d, deps, seen, order);
    }
    order.push(m.to_string());
}

/// Writes the initramfs for `kernel` to `out`.
pub fn build(kernel: &Kernel, init: &str, out: &Path) -> Result<()> {
    let busybox = std::fs::read("/bin/busybox").context("reading /bin/busybox (Debian's busybox-static)")?;
    let mut cpio = Cpio::default();
    for dir in ["bin", "modules", "proc", "sys", "dev"] {
        cpio.dir(dir);
    }
    cpio.file("bin/busybox", &busybox, 0o755);
    cpio.file("init", init.as_bytes(), 0o755);
    let mut names = String::new();
    for (rel, path) in &module_order(kernel)? {
        let flat = rel.replace('/', "_");
        let bytes = std::fs::read(path).with_context(|| format!("reading module {rel}"))?;
        cpio.file(&format!("modules/{flat}"), &bytes, 0o644);
        names.push_str(&flat);
        names.push('\n');
    }
    cpio.file("modules/order", names.as_bytes(), 0o644);
    std::fs::write(out, cpio.finish()).with_context(|| format!("writing {}", out.display()))
}

/// A `newc` cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
struct Cpio {
    bytes: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[]);
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [self.ino, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        self.bytes.extend_from_slice(b"070701");
        for f in fields {
            self.bytes.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}
