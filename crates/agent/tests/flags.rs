//! Invalid configuration exits 64 with one clear line, before anything is opened or bound.

use std::process::Command;

fn verdict(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_verdict")).args(args).output().unwrap();
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
    let ipvs = config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n");
    assert_usage(&["run", "--config", ipvs.path()], "mode \"ipvs\" is not supported");
    let kind = config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n");
    assert_usage(&["run", "--config", kind.path()], "kind \"KubeletConfiguration\"");
    let broken =
        config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnftables: [\n");
    assert_usage(&["run", "--config", broken.path()], "not a KubeProxyConfiguration");
    let bad_period = config_file("kind: KubeProxyConfiguration\nhostnameOverride: n\nnftables:\n  syncPeriod: soon\n");
    assert_usage(&["run", "--config", bad_period.path()], "\"soon\"");
}

#[test]
fn flags_override_the_file() {
    // The file's bad sync period is overridden by a good flag, so only the (unreachable)
    // kubeconfig is left to fail, later than validation: the error is no longer exit 64.
    let file = config_file(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: n\nmetricsBindAddress: \"\"\nhealthzBindAddress: \"\"\nnftables:\n  syncPeriod: soon\n",
    );
    let (code, stderr) =
        verdict(&["run", "--config", file.path(), "--sync-period", "30s", "--manifests", "/nonexistent-dir"]);
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("--manifests /nonexistent-dir"), "the flag's value was used: {stderr}");
}

#[test]
fn invoked_as_kube_proxy_it_runs() {
    let dir = std::env::temp_dir().join(format!("verdict-kp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kube-proxy");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_verdict"), &link).unwrap();
    // kubeadm's invocation, with a config file that asks for ipvs: refused as `run` refuses it.
    let ipvs = config_file("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n");
    let out =
        Command::new(&link).args([&format!("--config={}", ipvs.path()), "--hostname-override=node1"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mode \"ipvs\""));
}
