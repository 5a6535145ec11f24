//! What a kubeadm cluster hands kube-proxy, handed to verdict (root only): the `kube-proxy`
//! ConfigMaps kubeadm 1.33 to 1.37 write (tests/fixtures/kubeadm, with their provenance) and
//! kubeadm's DaemonSet command line, the binary invoked as `kube-proxy`, in a network
//! namespace of its own, against the test API server; and `kube-proxy --init-only` writing the
//! conntrack sysctls (and `route_localnet`, for iptables mode's localhost NodePorts) into that
//! namespace, read back from its `/proc/sys`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tempfile::TempDir;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadm")
}

/// Every kubeadm release's `config.conf`, by release.
fn kubeadm_configs() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("v1."))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path().join("config.conf")).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 5, "kubeadm 1.33 to 1.37 expected, found {:?}", out.iter().map(|c| &c.0).collect::<Vec<_>>());
    out
}

/// `kube-proxy`: a link to the binary, as the image has it.
fn kube_proxy(dir: &TempDir) -> PathBuf {
    let link = dir.path().join("kube-proxy");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_verdict"), &link).unwrap();
    link
}

/// kubeadm's DaemonSet command line with `extra` after it, in `ns`.
fn kubeadm_command(ns: &Netns, kube_proxy: &Path, config: &Path, extra: &[&str]) -> Output {
    let command = std::fs::read_to_string(fixtures().join("daemonset-command.txt")).unwrap();
    let args: Vec<String> = command
        .lines()
        .skip(1)
        .map(|a| {
            a.replace("/var/lib/kube-proxy/config.conf", &config.display().to_string()).replace("$(NODE_NAME)", "n1")
        })
        .collect();
    Command::new("ip").args(["netns", "exec", ns.name()]).arg(kube_proxy).args(&args).args(extra).output().unwrap()
}

#[test]
fn every_kubeadm_configmap_programs_the_table_as_kubeadm_runs_kube_proxy() {
    require_kernel!();
    for (release, config) in kubeadm_configs() {
        let lab = ApiLab::new(&format!("kubeadm{}", release.replace('.', ""))).unwrap();
        lab.server.apply(node("n1", "192.168.0.2"));
        lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
        lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
        let dir = TempDir::with_prefix(format!("verdict-kubeadm-{release}-")).unwrap();
        let kubeconfig = dir.path().join("kubeconfig.conf");
        lab.server.write_kubeconfig(&kubeconfig).unwrap();
        // kubeadm's file, its kubeconfig path pointed at the test API server's: nothing else.
        let path = dir.path().join("config.conf");
        std::fs::write(&path, config.replace("/var/lib/kube-proxy/kubeconfig.conf", &kubeconfig.display().to_string()))
            .unwrap();
        let out = kubeadm_command(
            &lab.ns,
            &kube_proxy(&dir),
            &path,
            &["--once", "--state-dir=", "--cleanup-leftovers=false"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{release}: {stderr}");
        assert!(lab.table().contains("172.30.0.10 . tcp . 80"), "{release}: not programmed:\n{}", lab.table());
        assert!(!stderr.contains("is not a field"), "{release}: kubeadm's fields are all v1alpha1's: {stderr}");
        let mode = if config.contains("mode: iptables") { "iptables" } else { "" };
        assert!(
            stderr.contains(&format!("mode {mode:?}: verdict replaces kube-proxy's iptables mode")),
            "{release}: one line names the mode replaced: {stderr}"
        );
        assert!(
            stderr.contains(
                "replacing kube-proxy's iptables mode: keeping NodePorts on every local address (nodePortAddresses unset), \
                 localhost NodePorts (iptables.localhostNodePorts), the conntrack-INVALID drop in forward \
                 (conntrack.tcpBeLiberal: false); set mode: nftables to leave them"
            ),
            "{release}: one line names the behaviours kept and how to leave them: {stderr}"
        );
        let table = lab.table();
        for kept in [
            "fib daddr type local ip daddr != 127.0.0.0/8",
            "ip daddr 127.0.0.0/8 meta l4proto",
            "ct state invalid drop",
        ] {
            assert!(table.contains(kept), "{release}: no {kept:?} in\n{table}");
        }
    }
}

/// A sysctl of the namespace, read from its own `/proc/sys` by a process inside it.
fn read_sysctl(ns: &Netns, name: &str) -> String {
    let out = ns.exec(&["cat", &format!("/proc/sys/net/netfilter/{name}")]).unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn host_sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/net/netfilter/{name}")).unwrap_or_default().trim().to_string()
}

const TIMEOUTS: [&str; 5] = [
    "nf_conntrack_tcp_timeout_established",
    "nf_conntrack_tcp_timeout_close_wait",
    "nf_conntrack_tcp_be_liberal",
    "nf_conntrack_udp_timeout",
    "nf_conntrack_udp_timeout_stream",
];

/// A namespace where conntrack's sysctls exist (a `ct` rule loads the module if needed).
fn conntrack_namespace(tag: &str) -> Netns {
    let ns = Netns::new(tag).unwrap();
    let out = ns.exec(&["nft", "add table ip t; add chain ip t c; add rule ip t c ct state new accept"]).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ns
}

#[test]
fn init_only_writes_the_conntrack_sysctls_of_kubeadms_configmap_into_the_namespace() {
    require_kernel!();
    let host_before: Vec<String> = TIMEOUTS.iter().map(|n| host_sysctl(n)).collect();
    let route_localnet_host = std::fs::read_to_string(ROUTE_LOCALNET).unwrap();
    let ns = conntrack_namespace("kubeadm-init");
    assert_eq!(read_route_localnet(&ns), "0", "a new namespace starts without it");
    // A new namespace starts from the kernel's defaults (5 days established, 60 s close-wait).
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_established"), "432000");
    let dir = TempDir::with_prefix("verdict-kubeadm-init-").unwrap();
    let path = dir.path().join("config.conf");
    std::fs::write(&path, &kubeadm_configs().last().unwrap().1).unwrap();
    let out = kubeadm_command(&ns, &kube_proxy(&dir), &path, &["--init-only"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // kubeadm's nulls are upstream's defaults: 24 h and 1 h.
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_established"), "86400", "{stderr}");
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_close_wait"), "3600", "{stderr}");
    assert!(stderr.contains("nf_conntrack_max"), "nf_conntrack_max is read-only here, and one line says so: {stderr}");
    // kubeadm's `mode: iptables` keeps localhost NodePorts, which need route_localnet.
    assert_eq!(read_route_localnet(&ns), "1", "{stderr}");
    assert!(stderr.contains("set net.ipv4.conf.all.route_localnet to 1 (was 0)"), "{stderr}");
    let host_after: Vec<String> = TIMEOUTS.iter().map(|n| host_sysctl(n)).collect();
    assert_eq!(host_before, host_after, "the host's sysctls are untouched");
    assert_eq!(route_localnet_host, std::fs::read_to_string(ROUTE_LOCALNET).unwrap(), "the host's too");

    // nftables mode has no localhost NodePorts unless the list names loopback: left alone.
    let ns = conntrack_namespace("kubeadm-init-nft");
    let nft = dir.path().join("nft.conf");
    std::fs::write(&nft, "kind: KubeProxyConfiguration\nmode: nftables\n").unwrap();
    let out =
        ns.exec(&[env!("CARGO_BIN_EXE_verdict"), "run", "--init-only", "--config", nft.to_str().unwrap()]).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read_route_localnet(&ns), "0");
}

const ROUTE_LOCALNET: &str = "/proc/sys/net/ipv4/conf/all/route_localnet";

/// `net.ipv4.conf.all.route_localnet` of the namespace.
fn read_route_localnet(ns: &Netns) -> String {
    ns.check(&["cat", ROUTE_LOCALNET]).unwrap().trim().to_string()
}

#[test]
fn every_conntrack_setting_from_flags_and_from_the_file() {
    require_kernel!();
    let host_before: Vec<String> = TIMEOUTS.iter().map(|n| host_sysctl(n)).collect();
    let want = ["7200", "120", "1", "45", "150"];
    // kube-proxy's flags, without --config.
    let ns = conntrack_namespace("ct-flags");
    let out = ns
        .exec(&[
            env!("CARGO_BIN_EXE_verdict"),
            "run",
            "--init-only",
            "--conntrack-tcp-timeout-established=2h",
            "--conntrack-tcp-timeout-close-wait=2m",
            "--conntrack-tcp-be-liberal",
            "--conntrack-udp-timeout=45s",
            "--conntrack-udp-timeout-stream=150s",
        ])
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<String> = TIMEOUTS.iter().map(|n| read_sysctl(&ns, n)).collect();
    assert_eq!(got, want, "flags");
    // The same from the `conntrack` section of a file.
    let ns = conntrack_namespace("ct-file");
    let dir = TempDir::with_prefix("verdict-ct-file-").unwrap();
    let path = dir.path().join("config.conf");
    std::fs::write(
        &path,
        "kind: KubeProxyConfiguration\nconntrack:\n  tcpEstablishedTimeout: 2h\n  tcpCloseWaitTimeout: 2m\n  \
         tcpBeLiberal: true\n  udpTimeout: 45s\n  udpStreamTimeout: 150s\n",
    )
    .unwrap();
    let out =
        ns.exec(&[env!("CARGO_BIN_EXE_verdict"), "run", "--init-only", "--config", path.to_str().unwrap()]).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<String> = TIMEOUTS.iter().map(|n| read_sysctl(&ns, n)).collect();
    assert_eq!(got, want, "file");
    // 0s leaves a value alone.
    let ns = conntrack_namespace("ct-zero");
    let out = ns
        .exec(&[env!("CARGO_BIN_EXE_verdict"), "run", "--init-only", "--conntrack-tcp-timeout-established=0s"])
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_established"), "432000", "0s: the kernel's value stays");
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_close_wait"), "3600", "the default still applies");
    let host_after: Vec<String> = TIMEOUTS.iter().map(|n| host_sysctl(n)).collect();
    assert_eq!(host_before, host_after, "the host's sysctls are untouched");
}

#[test]
fn init_only_fails_when_a_sysctl_cannot_be_written() {
    require_kernel!();
    let ns = conntrack_namespace("ct-denied");
    // An unprivileged user: /proc/sys is root's, so the timeouts cannot be written.
    let out = ns
        .exec(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_verdict"),
            "run",
            "--init-only",
        ])
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nf_conntrack_tcp_timeout_established"), "the line names the sysctl: {stderr}");
    assert!(stderr.contains("could not be written"), "{stderr}");
    assert_eq!(read_sysctl(&ns, "nf_conntrack_tcp_timeout_established"), "432000");
}
