//! In-cluster configuration, as kube-proxy falls back to it with neither `--kubeconfig` nor
//! `--master`: the API server at `KUBERNETES_SERVICE_HOST`:`KUBERNETES_SERVICE_PORT` over
//! HTTPS, its certificate checked against the service account's `ca.crt`, the account's token
//! sent; one warning says why a real address is better (root only: the agent programs its
//! table in the lab's namespace). Outside a pod, exit 64 with client-go's line.

use std::path::Path;
use std::time::Duration;
use verdict_e2e::agent_process::{AgentLaunch, AgentProcess};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::require_kernel;
use verdict_testapi::TestApiServer;

const TOKEN: &str = "in-cluster-test-token";
const WARNING: &str = "using in-cluster configuration as kube-proxy does";

/// The agent as a pod starts it: no `--kubeconfig`, no `--master`, the kubelet's variables,
/// the service account in `account` (a pod's is at a fixed path; the test's is named by
/// `VERDICT_SERVICE_ACCOUNT_DIR`).
fn start_in_pod(lab: &ApiLab, tag: &str, write_account: impl FnOnce(&Path)) -> AgentProcess {
    let launch = AgentLaunch::new(&lab.ns, env!("CARGO_BIN_EXE_verdict"), tag).unwrap();
    let account = launch.dir().join("serviceaccount");
    std::fs::create_dir_all(&account).unwrap();
    write_account(&account);
    let state = launch.dir().join("state");
    launch
        .env("KUBERNETES_SERVICE_HOST", lab.server.addr().ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", lab.server.addr().port().to_string())
        .env("VERDICT_SERVICE_ACCOUNT_DIR", &account)
        .env_remove("KUBECONFIG")
        .args(["run", "--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8", "--min-sync-period", "50ms"])
        .args(["--metrics-bind-address=", "--healthz-bind-address=", "--cleanup-leftovers=false", "--state-dir"])
        .arg(&state)
        .spawn()
        .unwrap()
}

fn cluster(lab: &ApiLab) {
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
}

/// An environment variable, set (`Some`) or removed.
type Var<'a> = (&'a str, Option<&'a str>);

/// `verdict ARGS` with the pod's variables set or removed (removed unless given, so that the
/// test's own environment, a CI pod's, decides nothing); in a network namespace of its own
/// when it could touch the host's, so that a case that wrongly passes validation touches nothing there.
fn verdict_in(args: &[&str], env: &[Var]) -> (i32, String) {
    let mut cmd = verdict_e2e::privilege::host_safe_command(env!("CARGO_BIN_EXE_verdict"));
    for name in ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "VERDICT_SERVICE_ACCOUNT_DIR"] {
        cmd.env_remove(name);
    }
    for (name, value) in env {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    let out = cmd.args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn without_a_kubeconfig_or_master_in_cluster_configuration_needs_the_pods_variables() {
    let not_in_cluster =
        "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined";
    let cases: [(&[Var], &str); 4] = [
        (&[], "(KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set)"),
        (&[("KUBERNETES_SERVICE_HOST", Some("10.96.0.1"))], "(KUBERNETES_SERVICE_PORT not set)"),
        (
            &[("KUBERNETES_SERVICE_HOST", Some("")), ("KUBERNETES_SERVICE_PORT", Some("443"))],
            "(KUBERNETES_SERVICE_HOST not set)",
        ),
        (
            &[
                ("KUBERNETES_SERVICE_HOST", Some("10.96.0.1")),
                ("KUBERNETES_SERVICE_PORT", Some("443")),
                ("VERDICT_SERVICE_ACCOUNT_DIR", Some("/nonexistent/serviceaccount")),
            ],
            "the service account token /nonexistent/serviceaccount/token",
        ),
    ];
    for (env, needle) in cases {
        let (code, stderr) = verdict_in(&["run", "--hostname-override", "n"], env);
        assert_eq!(code, 64, "{env:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{env:?}: one line:\n{stderr}");
        assert!(stderr.contains(needle), "{env:?}: {stderr}");
        let named = if needle.contains("not set") { not_in_cluster } else { "unable to load in-cluster configuration" };
        assert!(stderr.contains(named) && stderr.contains("set --master or --kubeconfig"), "{env:?}: {stderr}");
    }
}

#[test]
fn without_an_address_the_agent_reaches_the_api_server_as_a_pod_does() {
    require_kernel!();
    let lab = ApiLab::new_tls("incluster").unwrap();
    cluster(&lab);
    let agent = start_in_pod(&lab, "incluster", |dir| {
        std::fs::write(dir.join("token"), TOKEN).unwrap();
        std::fs::write(dir.join("ca.crt"), TestApiServer::TLS_CA_PEM).unwrap();
    });
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));
    let requests = lab.server.requests();
    let watches: Vec<_> = requests.iter().filter(|r| r.path.starts_with("/api/v1/services")).collect();
    assert!(!watches.is_empty(), "{requests:?}");
    let bearer = format!("Bearer {TOKEN}");
    assert!(
        requests.iter().all(|r| r.authorization.as_deref() == Some(bearer.as_str())),
        "every request carries the service account's token: {requests:?}"
    );
    let log = agent.log();
    assert_eq!(log.matches(WARNING).count(), 1, "{log}");
    assert!(log.contains(&format!("https://{}", lab.server.addr())), "the warning names the address: {log}");
}

#[test]
fn the_api_servers_certificate_is_checked_against_the_service_accounts_ca() {
    require_kernel!();
    let lab = ApiLab::new_tls("incluster-ca").unwrap();
    cluster(&lab);
    // A CA, but not the one that signed the server's certificate.
    let other =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/incluster/other-ca.crt")).unwrap();
    let agent = start_in_pod(&lab, "incluster-ca", |dir| {
        std::fs::write(dir.join("token"), TOKEN).unwrap();
        std::fs::write(dir.join("ca.crt"), other).unwrap();
    });
    // Everything else as in the test above, where the same server is read: the CA alone decides.
    agent.wait("the connection refused", || agent.log().contains("client error (Connect)"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(!lab.table().contains("172.30.0.10"), "nothing is read from a server the CA does not vouch for");
    assert!(lab.server.requests().is_empty(), "no request, so no token, reaches an untrusted server");
    assert!(agent.try_wait().unwrap().is_none(), "the agent keeps retrying, as with any unreachable server");
}
