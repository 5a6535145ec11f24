//! Invalid configuration exits 64 with one clear line, before anything is opened or bound.

use std::process::Command;

/// The binary, in a network namespace of its own when it could touch the host's: a case that
/// wrongly passes validation must not program the host's table or write the host's sysctls.
fn isolated(program: &std::path::Path) -> Command {
    verdict_e2e::privilege::host_safe_command(program)
}

fn verdict(args: &[&str]) -> (i32, String) {
    let out = isolated(env!("CARGO_BIN_EXE_verdict").as_ref()).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn config_file(text: &str) -> tempfile_path::TempFile {
    tempfile_path::TempFile::new(text)
}

/// A file removed on drop.
mod tempfile_path {
    pub struct TempFile(pub std::path::PathBuf);
    impl TempFile {
        pub fn new(text: &str) -> TempFile {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("verdict-flags-{}-{n}.yaml", std::process::id()));
            std::fs::write(&p, text).unwrap();
            TempFile(p)
        }
        pub fn path(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn assert_usage(args: &[&str], needle: &str) {
    let (code, stderr) = verdict(args);
    assert_eq!(code, 64, "{args:?} should exit 64, got {code}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: one line expected:\n{stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr:?} should mention {needle:?}");
}

#[test]
fn bad_flags_exit_64_with_one_line() {
    assert_usage(&["run", "--no-such-flag"], "--no-such-flag");
    assert_usage(&["run", "--sync-period", "10x", "--hostname-override", "n"], "--sync-period \"10x\"");
    assert_usage(&["run", "--masquerade-bit", "40", "--hostname-override", "n"], "--masquerade-bit 40");
    assert_usage(&["run", "--cluster-cidr", "10.0.0.0/33", "--hostname-override", "n"], "10.0.0.0/33");
    assert_usage(
        &["run", "--cluster-cidr", "10.0.0.0/8,10.1.0.0/16", "--hostname-override", "n"],
        "more than one IPv4",
    );
    assert_usage(
        &["run", "--metrics-bind-address", "localhost:x", "--hostname-override", "n"],
        "--metrics-bind-address",
    );
    assert_usage(
        &["run", "--min-sync-period", "1m", "--sync-period", "30s", "--hostname-override", "n"],
        "must not exceed",
    );
    assert_usage(&["run", "--kubeconfig", "/nonexistent/kubeconfig", "--hostname-override", "n"], "no such file");
    assert_usage(&["render", "--manifests", ".", "--nodeport-addresses", "primary,10.0.0.0/8,primary"], "`primary`");
    assert_usage(&["run", "--service-counters", "some", "--hostname-override", "n"], "--service-counters");
    assert_usage(
        &["run", "--service-counters-period", "soon", "--hostname-override", "n"],
        "--service-counters-period",
    );
    assert_usage(&["run", "--service-counters-period", "0s", "--hostname-override", "n"], "greater than 0");
    assert_usage(&["run", "--api-timeout", "soon", "--hostname-override", "n"], "--api-timeout");
    assert_usage(&["run", "--api-timeout", "0s", "--hostname-override", "n"], "--api-timeout must be greater than 0");
    assert_usage(
        &["run", "--service-counters", "labelled", "--hostname-override", "n"],
        "needs --service-counters-selector",
    );
    assert_usage(
        &["run", "--service-counters-selector", "team=a", "--hostname-override", "n"],
        "needs --service-counters=labelled",
    );
    assert_usage(
        &["run", "--service-counters", "labelled", "--service-counters-selector", "a b", "--hostname-override", "n"],
        "is not `key` or `key=value`",
    );
}

#[test]
fn bad_config_files_exit_64_with_one_line() {
    assert_usage(&["run", "--config", "/nonexistent/config.yaml"], "/nonexistent/config.yaml");
    let mode =
        config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: userspace\n");
    assert_usage(&["run", "--config", mode.path()], "mode \"userspace\" is not supported");
    let kind = config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n");
    assert_usage(&["run", "--config", kind.path()], "kind \"KubeletConfiguration\"");
    let broken =
        config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnftables: [\n");
    assert_usage(&["run", "--config", broken.path()], "not a KubeProxyConfiguration");
    // A bad duration is refused in a section the mode does not read, too: upstream decodes all.
    let bad_period = config_file("kind: KubeProxyConfiguration\nhostnameOverride: n\nnftables:\n  syncPeriod: soon\n");
    assert_usage(&["run", "--config", bad_period.path()], "nftables.syncPeriod \"soon\"");
    let typed = config_file("kind: KubeProxyConfiguration\nconntrack:\n  maxPerCore: many\n");
    assert_usage(&["run", "--config", typed.path()], "not a KubeProxyConfiguration");
}

/// `verdict run ARGS --write-config-to FILE`: exit code, stderr, and the file written.
fn written(args: &[&str]) -> (i32, String, serde_json::Value) {
    let out = config_file("");
    let mut all: Vec<&str> = ["run"].into();
    all.extend(args);
    let to = format!("--write-config-to={}", out.path());
    all.push(&to);
    let (code, stderr) = verdict(&all);
    let text = std::fs::read_to_string(&out.0).unwrap_or_default();
    let value: serde_json::Value = serde_norway::from_str(&text).unwrap_or_default();
    (code, stderr, value)
}

#[test]
fn kube_proxys_flags_are_honoured_without_a_config_file() {
    let (code, stderr, c) = written(&[
        "--v=2",
        "--proxy-mode=nftables",
        "--feature-gates=TopologyAwareHints=true,ServiceTrafficDistribution=false",
        "--conntrack-max-per-core=0",
        "--conntrack-min=1000",
        "--conntrack-tcp-timeout-established=2h",
        "--conntrack-tcp-timeout-close-wait=30m",
        "--conntrack-tcp-be-liberal",
        "--conntrack-udp-timeout=45s",
        "--conntrack-udp-timeout-stream=150s",
        "--oom-score-adj=-500",
        "--bind-address=0.0.0.0",
        "--kube-api-qps=50",
        "--kube-api-burst",
        "100",
        "--kube-api-content-type=application/json",
        "--iptables-sync-period=7s",
        "--iptables-min-sync-period=500ms",
        "--masquerade-all=true",
        "--cluster-cidr=10.244.0.0/16",
        "--hostname-override=Node-A",
        "--metrics-bind-address=0.0.0.0:9999",
        "--profiling=false",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["logging"]["verbosity"], 2);
    assert_eq!(c["mode"], "nftables");
    assert_eq!(c["featureGates"]["TopologyAwareHints"], true);
    assert_eq!(c["featureGates"]["ServiceTrafficDistribution"], false);
    let ct = &c["conntrack"];
    assert_eq!((ct["maxPerCore"].as_i64(), ct["min"].as_i64()), (Some(0), Some(1000)));
    assert_eq!((ct["tcpEstablishedTimeout"].as_str(), ct["tcpCloseWaitTimeout"].as_str()), (Some("2h"), Some("30m")));
    assert_eq!(ct["tcpBeLiberal"], true);
    assert_eq!((ct["udpTimeout"].as_str(), ct["udpStreamTimeout"].as_str()), (Some("45s"), Some("150s")));
    assert_eq!(c["oomScoreAdj"], -500);
    assert_eq!(c["clientConnection"]["qps"], 50.0);
    assert_eq!(c["clientConnection"]["burst"], 100);
    assert_eq!(c["clientConnection"]["contentType"], "application/json");
    // The iptables flags are upstream's generic sync periods: nftables mode reads them too.
    assert_eq!(c["nftables"]["syncPeriod"], "7s");
    assert_eq!(c["nftables"]["minSyncPeriod"], "500ms");
    assert_eq!(c["nftables"]["masqueradeAll"], true);
    assert_eq!(c["clusterCIDR"], "10.244.0.0/16");
    assert_eq!(c["hostnameOverride"], "node-a", "trimmed and lower-cased, as upstream's flag");
    assert_eq!(c["metricsBindAddress"], "0.0.0.0:9999");
    assert_eq!(c["healthzBindAddress"], "0.0.0.0:10256", "the default stays");
}

#[test]
fn a_flag_given_twice_is_read_as_pflag_reads_it() {
    let (code, stderr, c) = written(&[
        "-v",
        "2",
        "--v=4",
        "--proxy-mode=ipvs",
        "--proxy-mode=nftables",
        "--cluster-cidr=10.1.0.0/16,fd00:1::/64",
        "--cluster-cidr=10.2.0.0/16",
        "--conntrack-min=5",
        "--conntrack-min",
        "6",
        "--conntrack-tcp-timeout-established=1h",
        "--conntrack-tcp-timeout-established=2h",
        "--masquerade-all",
        "--masquerade-all=false",
        "--kube-api-qps=1",
        "--kube-api-qps=7.5",
        "--hostname-override=first",
        "--hostname-override=second",
        "--nodeport-addresses=10.0.0.0/8",
        "--nodeport-addresses=192.168.0.0/16,172.16.0.0/12",
        "--ipvs-exclude-cidrs=10.3.0.0/16",
        "--ipvs-exclude-cidrs=10.4.0.0/16",
        "--feature-gates=A=true,B=true",
        "--feature-gates=A=false",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Scalars: the last value.
    assert_eq!(c["logging"]["verbosity"], 4);
    assert_eq!(c["mode"], "nftables");
    assert_eq!(c["clusterCIDR"], "10.2.0.0/16", "a string upstream, not a list");
    assert_eq!(c["conntrack"]["min"], 6);
    assert_eq!(c["conntrack"]["tcpEstablishedTimeout"], "2h");
    assert_eq!(c["nftables"]["masqueradeAll"], false);
    assert_eq!(c["clientConnection"]["qps"], 7.5);
    assert_eq!(c["hostnameOverride"], "second");
    // stringSlice: values add up; mapStringBool: gates merge, the last value of a gate wins.
    assert_eq!(c["nodePortAddresses"], serde_json::json!(["10.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12"]));
    assert_eq!(c["ipvs"]["excludeCIDRs"], serde_json::json!(["10.3.0.0/16", "10.4.0.0/16"]));
    assert_eq!(c["featureGates"], serde_json::json!({"A": false, "B": true}));
}

#[test]
fn verdicts_own_flags_given_twice_keep_the_last_value_and_its_lists_add_up() {
    let dir = std::env::temp_dir().join(format!("verdict-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("node.yaml"), "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\n").unwrap();
    let render = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["render", "--hostname-override", "node1", "--manifests", "/nonexistent", "--manifests"])
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = render(&["--table", "first", "--table", "second", "--masquerade-bit", "3", "--masquerade-bit=5"]);
    // A list adds up: the bad pattern is refused whether it comes first or last.
    let lists = [
        render(&["--flowtable-interfaces=ve*th", "--flowtable-interfaces=eth0"]),
        render(&["--flowtable-interfaces=eth0", "--flowtable-interfaces=ve*th"]),
    ];
    let _ = std::fs::remove_dir_all(&dir);
    let (table, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(table.contains("table inet second") && !table.contains("table inet first"), "{table}");
    assert!(table.contains("0x00000020") && !table.contains("0x00000008"), "mark bit 5: {table}");
    for out in lists {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains("--flowtable-interfaces") && stderr.contains("ve*th"), "{stderr}");
    }
}

#[test]
fn the_mode_picks_the_section_and_its_flags() {
    let (code, stderr, c) = written(&["--proxy-mode=ipvs", "--ipvs-sync-period=9s", "--iptables-sync-period=3s"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["ipvs"]["syncPeriod"], "9s");
    assert_eq!(c["iptables"]["syncPeriod"], "30s", "--iptables-sync-period applies only when the mode is not ipvs");
    let (code, stderr, c) = written(&["--ipvs-sync-period=9s", "--iptables-sync-period=3s"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["ipvs"]["syncPeriod"], "30s", "--ipvs-sync-period applies only in ipvs mode");
    assert_eq!(c["iptables"]["syncPeriod"], "3s");
}

/// Every leaf's dotted path (a list, an empty map and a scalar are leaves).
fn leaf_paths(value: &serde_json::Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, v) in map {
                leaf_paths(v, &if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

fn fixture_paths(text: &str) -> std::collections::BTreeSet<String> {
    let mut paths = std::collections::BTreeSet::new();
    leaf_paths(&serde_norway::from_str(text).unwrap(), "", &mut paths);
    paths
}

#[test]
fn write_config_to_writes_upstreams_fields_only_completed_as_upstream_completes_them() {
    let fixtures = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
    // Upstream's own encoding of v1alpha1 with every field at its zero value (kubeadm writes
    // it through upstream's types): the fields written whatever their value.
    let always = fixture_paths(&std::fs::read_to_string(format!("{fixtures}/kubeadm/v1.37/config.conf")).unwrap());
    // Every field of v1alpha1 (upstream's types.go): the rest are `omitempty` ones.
    let every: Vec<String> = std::fs::read_to_string(format!("{fixtures}/upstream/config-fields.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap().split("[]").next().unwrap().to_string())
        .collect();
    let upstreams = |path: &str| every.iter().any(|f| path == f || path.starts_with(&format!("{f}.")));
    let file = config_file(
        "kind: KubeProxyConfiguration\nmode: \"\"\ndetectLocalMode: \"\"\nnftables:\n  flowtableInterfaces: [eth0]\n",
    );
    let with_gates: &[&str] = &["--feature-gates=A=true", "--hostname-override=Node-A"];
    for (args, gates) in [(&["--config", file.path(), "--hostname-override=Node-A"][..], false), (with_gates, true)] {
        let (code, stderr, c) = written(args);
        assert_eq!(code, 0, "{stderr}");
        let mut paths = std::collections::BTreeSet::new();
        leaf_paths(&c, "", &mut paths);
        let foreign: Vec<&String> = paths.iter().filter(|p| !upstreams(p)).collect();
        assert!(foreign.is_empty(), "{args:?}: not upstream's: {foreign:?}");
        let missing: Vec<&String> = always.iter().filter(|p| !paths.contains(*p)).collect();
        assert!(missing.is_empty(), "{args:?}: upstream writes these: {missing:?}");
        // platformApplyDefaults, then processHostnameOverrideFlag, before writing.
        assert_eq!(c["mode"], "iptables", "{args:?}");
        assert_eq!(c["detectLocalMode"], "ClusterCIDR", "{args:?}");
        assert_eq!(c["hostnameOverride"], "node-a", "{args:?}");
        assert_eq!(c["nodePortAddresses"], serde_json::Value::Null, "iptables mode: no default");
        // Zero values as upstream writes them, not null.
        assert_eq!((c["showHiddenMetricsForVersion"].as_str(), c["portRange"].as_str()), (Some(""), Some("")));
        assert_eq!((c["enableProfiling"].as_bool(), c["bindAddressHardFail"].as_bool()), (Some(false), Some(false)));
        assert_eq!(c["logging"]["format"], "text");
        assert_eq!(c["featureGates"].is_object(), gates, "{args:?}: omitted when empty, as upstream");
    }
    // nftables mode's empty nodePortAddresses is `primary` once completed.
    let (code, stderr, c) = written(&["--proxy-mode=nftables"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["nodePortAddresses"], serde_json::json!(["primary"]));
    let (_, _, c) = written(&["--proxy-mode=nftables", "--nodeport-addresses=10.0.0.0/8"]);
    assert_eq!(c["nodePortAddresses"], serde_json::json!(["10.0.0.0/8"]));
}

#[test]
fn a_written_configuration_reads_back_to_itself() {
    let file = config_file(
        "kind: KubeProxyConfiguration\nmode: ipvs\nclusterCIDR: 10.244.0.0/16,fd00:10::/56\n\
         conntrack: {maxPerCore: 0, udpTimeout: 45s}\niptables: {masqueradeAll: true, masqueradeBit: 9}\n\
         ipvs: {syncPeriod: 9s, excludeCIDRs: [10.9.0.0/16]}\nlogging: {verbosity: 3}\nfeatureGates: {A: true}\n",
    );
    let (code, stderr, first) = written(&["--config", file.path(), "--hostname-override=n1"]);
    assert_eq!(code, 0, "{stderr}");
    let again = config_file(&serde_norway::to_string(&first).unwrap());
    let (code, stderr, second) = written(&["--config", again.path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first, second, "written, read and written again: the same configuration");
    assert!(!stderr.contains("is not a field"), "{stderr}");
    assert_eq!(first["ipvs"]["excludeCIDRs"], serde_json::json!(["10.9.0.0/16"]));
    assert_eq!(first["conntrack"]["maxPerCore"], 0);
}

#[test]
fn deprecated_ports_and_empty_addresses_turn_servers_off_only_from_flags() {
    let (code, stderr, c) = written(&["--healthz-port=0", "--metrics-bind-address="]);
    assert_eq!(code, 0, "{stderr}");
    // Upstream applies the deprecated ports only when it neither reads nor writes a file
    // (options.go Complete), so the file written keeps the default address; the servers are
    // off when it runs (config's unit tests).
    assert_eq!(c["healthzBindAddress"], "0.0.0.0:10256");
    assert_eq!(c["metricsBindAddress"], "");
    // The file's empty addresses are upstream's defaults, not "off".
    let file = config_file(
        "kind: KubeProxyConfiguration\nhealthzBindAddress: \"\"\nmetricsBindAddress: \"\"\nbindAddress: \"::\"\n",
    );
    let (code, stderr, c) = written(&["--config", file.path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["healthzBindAddress"], "[::]:10256");
    assert_eq!(c["metricsBindAddress"], "[::1]:10249");
}

#[test]
fn with_a_config_file_the_file_wins_as_upstream_decides() {
    let file = config_file(
        "kind: KubeProxyConfiguration\nclusterCIDR: 10.1.0.0/16\nhostnameOverride: from-file\nlogging: {verbosity: 1}\n\
         nftables: {syncPeriod: 12s}\nmode: nftables\nnoSuchField: 1\n",
    );
    let (code, stderr, c) = written(&[
        "--config",
        file.path(),
        "--cluster-cidr=10.2.0.0/16",
        "--hostname-override=from-flag",
        "--v=4",
        "--conntrack-min=5",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["clusterCIDR"], "10.1.0.0/16", "kube-proxy's flag is ignored with --config");
    assert_eq!(c["conntrack"]["min"], 131072);
    assert_eq!(c["hostnameOverride"], "from-flag", "--hostname-override wins");
    assert_eq!(c["logging"]["verbosity"], 4, "logging flags win");
    assert_eq!(c["nftables"]["syncPeriod"], "12s");
    for flag in ["--cluster-cidr is ignored because --config", "--conntrack-min is ignored because --config"] {
        assert_eq!(stderr.matches(flag).count(), 1, "one warning for {flag}: {stderr}");
    }
    assert!(!stderr.contains("--hostname-override is ignored"), "{stderr}");
    assert_eq!(stderr.matches("noSuchField is not a field").count(), 1, "{stderr}");
}

#[test]
fn zero_values_mean_upstreams_defaults() {
    let file = config_file(
        "kind: KubeProxyConfiguration\nmode: \"\"\nconfigSyncPeriod: 0s\nhealthzBindAddress: \"\"\n\
         iptables: {syncPeriod: 0s, minSyncPeriod: 0s, masqueradeBit: null}\n\
         conntrack: {maxPerCore: null, min: null, tcpEstablishedTimeout: null, tcpCloseWaitTimeout: null, udpTimeout: 0s}\n",
    );
    let (code, stderr, c) = written(&["--config", file.path()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        (c["iptables"]["syncPeriod"].as_str(), c["iptables"]["minSyncPeriod"].as_str()),
        (Some("30s"), Some("1s"))
    );
    assert_eq!(c["iptables"]["masqueradeBit"], 14);
    assert_eq!(c["configSyncPeriod"], "15m0s");
    assert_eq!(c["healthzBindAddress"], "0.0.0.0:10256");
    assert_eq!(c["conntrack"]["maxPerCore"], 32768);
    assert_eq!(c["conntrack"]["tcpEstablishedTimeout"], "24h0m0s");
    assert_eq!(c["conntrack"]["udpTimeout"], "0s", "0s leaves the kernel's value");
}

#[test]
fn bad_kube_proxy_flags_exit_64_with_one_line() {
    assert_usage(&["run", "--feature-gates=Foo"], "--feature-gates \"Foo\"");
    assert_usage(&["run", "--feature-gates=Foo=maybe"], "--feature-gates \"Foo=maybe\"");
    assert_usage(&["run", "--proxy-mode=userspace"], "mode \"userspace\"");
    assert_usage(&["run", "--oom-score-adj=2000"], "--oom-score-adj 2000");
    assert_usage(&["run", "--logging-format=xml"], "--logging-format \"xml\"");
    assert_usage(&["run", "--bind-address=nowhere"], "--bind-address \"nowhere\"");
    assert_usage(&["run", "--conntrack-min=-1"], "conntrack.min -1");
    assert_usage(&["run", "--conntrack-tcp-timeout-established=long"], "conntrack.tcpEstablishedTimeout \"long\"");
    assert_usage(&["run", "--kube-api-qps=-1"], "--kube-api-qps");
    assert_usage(&["run", "--masquerade-all", "false"], "false");
    assert_usage(&["run", "--cleanup", "--init-only"], "cannot be combined");
    assert_usage(&["render", "--manifests", ".", "--max-elements-per-service", "0"], "greater than 0");
}

#[test]
fn master_must_be_a_url() {
    assert_usage(&["run", "--hostname-override", "n", "--master", "nowhere"], "--master \"nowhere\" is not a URL");
    assert_usage(&["run", "--hostname-override", "n", "--master", "10.0.0.1:6443"], "is not a URL");
    // With it, validation passes and the (unreachable) server is tried later: not exit 64.
    let file = config_file("kind: KubeProxyConfiguration\nmetricsBindAddress: \"\"\nhealthzBindAddress: \"\"\n");
    let (code, stderr, _) =
        written(&["--config", file.path(), "--hostname-override", "n", "--master", "https://192.0.2.1:6443"]);
    assert_eq!(code, 0, "{stderr}");
}

fn kube_proxy_link(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("verdict-kp-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kube-proxy");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_verdict"), &link).unwrap();
    (dir, link)
}

#[test]
fn invoked_as_kube_proxy_it_runs() {
    let (dir, link) = kube_proxy_link("run");
    let version = isolated(&link).arg("--version").output().unwrap();
    // kubeadm's invocation, with a config file kubeadm wrote: validated as `run` validates it.
    let fixture = format!("{}/tests/fixtures/kubeadm/v1.37/config.conf", env!("CARGO_MANIFEST_DIR"));
    let out = config_file("");
    let written = isolated(&link)
        .args([
            &format!("--config={fixture}"),
            "--hostname-override=node1",
            &format!("--write-config-to={}", out.path()),
        ])
        .output()
        .unwrap();
    let bad = config_file("kind: KubeProxyConfiguration\nmode: kernelspace\n");
    let refused =
        isolated(&link).args([&format!("--config={}", bad.path()), "--hostname-override=node1"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(version.status.success() && String::from_utf8_lossy(&version.stdout).starts_with("verdict v"));
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let c: serde_json::Value = serde_norway::from_str(&std::fs::read_to_string(&out.0).unwrap()).unwrap();
    assert_eq!(c["mode"], "iptables");
    assert_eq!(c["clientConnection"]["kubeconfig"], "/var/lib/kube-proxy/kubeconfig.conf");
    assert_eq!(refused.status.code(), Some(64), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("mode \"kernelspace\""));
}

#[test]
fn a_service_beyond_max_elements_per_service_is_left_out_and_the_rest_rendered() {
    let dir = std::env::temp_dir().join(format!("verdict-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("objects.yaml"),
        "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\nstatus: {addresses: [{type: InternalIP, address: 192.168.1.2}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: wide, namespace: demo}\n\
         spec: {clusterIP: 10.96.0.50, externalIPs: [192.0.2.1, 192.0.2.2, 192.0.2.3], ports: [{name: a, port: 80}, {name: b, port: 81}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: small, namespace: demo}\nspec: {clusterIP: 10.96.0.51, ports: [{name: a, port: 80}]}\n",
    )
    .unwrap();
    let render = |cap: &str| {
        Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["render", "--hostname-override", "node1", "--max-elements-per-service", cap, "--manifests"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    // No endpoints: each of 2 ports writes its cluster-ips element and a no-endpoint element
    // for each of its 4 addresses, 10 objects in all.
    let (capped, roomy) = (render("9"), render("10"));
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&capped.stdout);
    assert!(capped.status.success(), "{}", String::from_utf8_lossy(&capped.stderr));
    assert!(!text.contains("10.96.0.50") && text.contains("10.96.0.51"), "{text}");
    assert!(String::from_utf8_lossy(&capped.stderr).contains("TooManyElements"));
    assert!(String::from_utf8_lossy(&roomy.stdout).contains("10.96.0.50"), "10 objects fit a cap of 10");
}

#[test]
fn the_fast_path_is_configured_by_flag_or_by_the_files_own_field_and_the_flag_wins() {
    let dir = std::env::temp_dir().join(format!("verdict-fastpath-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("node.yaml"), "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\n").unwrap();
    let file = |interfaces: &str| {
        config_file(&format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
             nftables:\n  flowtableInterfaces: [{interfaces}]\n"
        ))
    };
    let render = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["render", "--hostname-override", "node1", "--manifests"])
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let from_file = file("eth0, \"veth*\"");
    let (table, log) = render(&["--config", from_file.path()]);
    assert!(table.contains("flowtable fastpath") && table.contains("flow add @fastpath"), "{table}");
    assert!(!log.contains("flowtableInterfaces"), "verdict knows its own field: {log}");
    let (plain, _) = render(&[]);
    assert!(!plain.contains("flowtable"), "off by default: {plain}");

    let broken = file("\"ve*th\"");
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["render", "--hostname-override", "node1", "--config", broken.path(), "--manifests"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("nftables.flowtableInterfaces") && stderr.contains("ve*th"), "{stderr}");
    // verdict's own flag applies with --config too, and wins over the file's field.
    let (table, _) = render(&["--config", broken.path(), "--flowtable-interfaces", "eth1"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(table.contains("flowtable fastpath"), "{table}");
}

#[test]
fn localhost_in_nodeport_addresses_is_a_keyword_and_its_gate_turns_it_off_with_one_warning() {
    assert_usage(&["run", "--nodeport-addresses", "primary,LocalHost", "--hostname-override", "n"], "`localhost`");
    assert_usage(
        &["run", "--nodeport-addresses", "localhost,primary,localhost", "--hostname-override", "n"],
        "`localhost` is listed more than once",
    );
    let dir = std::env::temp_dir().join(format!("verdict-localhost-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("node.yaml"), "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\n").unwrap();
    let render = |gates: &str| {
        let file = config_file(&format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
             nodePortAddresses: [primary, localhost]\nfeatureGates: {{{gates}}}\n"
        ));
        let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["render", "--hostname-override", "node1", "--config", file.path(), "--manifests"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{gates}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (table, log) = render("");
    assert!(table.contains("ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"), "{table}");
    assert!(table.contains("iifname != \"lo\" ip daddr 127.0.0.0/8 drop"), "the guard comes with it: {table}");
    assert!(!table.contains("ct state invalid"), "nftables mode has no INVALID drop: {table}");
    assert_eq!(log.matches("127.0.0.0/8 only").count(), 1, "the ::1 half is said once: {log}");
    let (table, log) = render("KubeProxyNFTablesLocalhostNodePorts: false");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!table.contains("127.0.0.0/8 meta l4proto") && !table.contains("iifname"), "{table}");
    assert_eq!(log.matches("KubeProxyNFTablesLocalhostNodePorts=false").count(), 1, "one warning: {log}");
}
