//! One-shot commands (`run --once`, `run --cleanup`, `cleanup`, `render`, `explain`) open no
//! port (root only). The test holds the metrics and health ports (the defaults,
//! 127.0.0.1:10249 and 0.0.0.0:10256) in a namespace of its own: a command that tried to bind
//! them would fail. The daemon, which does bind them, is the control: it must fail there.

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo");

/// `verdict <args>` in `ns`, killed after 20 s.
fn verdict(ns: &Netns, args: &[&str]) -> Output {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_verdict")])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn one_shot_commands_open_no_port() {
    require_kernel!();
    let ns = Netns::new("ports").unwrap();
    let held = ns.run(|| (TcpListener::bind("127.0.0.1:10249"), TcpListener::bind("0.0.0.0:10256")));
    let _held = (held.0.expect("holding 127.0.0.1:10249"), held.1.expect("holding 0.0.0.0:10256"));
    let node = ["--hostname-override", "node1", "--cluster-cidr", "10.244.0.0/16"];
    let daemon = [&["run", "--manifests", DEMO, "--state-dir=", "--cleanup-leftovers=false"][..], &node[..]].concat();

    // The control: the daemon binds the ports, so here (with bindAddressHardFail) it fails,
    // and says which.
    let out = verdict(&ns, &[&daemon[..], &["--bind-address-hard-fail"]].concat());
    assert!(!out.status.success(), "the daemon started although its ports are taken:\n{}", text(&out));
    assert!(text(&out).contains("127.0.0.1:10249") && text(&out).contains("bindAddressHardFail"), "{}", text(&out));

    let once = [&daemon[..], &["--once"]].concat();
    let cleanup_flag = [&daemon[..], &["--cleanup"]].concat();
    let render = [&["render", "--manifests", DEMO][..], &node[..]].concat();
    let explain =
        [&["explain", "--manifests", DEMO, "--src", "10.244.1.9", "--dst", "172.30.0.10:80"][..], &node[..]].concat();
    for args in [&once[..], &render[..], &explain[..], &cleanup_flag[..], &["cleanup"][..]] {
        let out = verdict(&ns, args);
        assert!(out.status.success(), "`verdict {}` failed with the ports taken:\n{}", args.join(" "), text(&out));
    }
    // --once did program the table (and --cleanup removed it again), so it really ran.
    let out = verdict(&ns, &once);
    assert!(out.status.success(), "{}", text(&out));
    let table = ns.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
    assert!(table.contains("service-ips"), "{table}");
}
