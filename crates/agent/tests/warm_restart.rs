//! A warm restart at 20,000 Services (root only): the real `verdict run` binary against the
//! test API server is stopped with SIGTERM and started again over the table it left. The
//! second start must adopt the table as it is (0 objects written, its elements not read back
//! from the kernel), and a client connecting to a Service over and over across the restart
//! must never fail.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, service, slice};
use verdict_e2e::endtoend::agent;
use verdict_e2e::endtoend::{NODE, Point, load};
use verdict_e2e::require_kernel;

const SERVICES: usize = 20_000;
const STABLE_IP: &str = "172.31.0.1";
const POD_IP: &str = "10.200.0.1";

/// Runs `f` on a new thread inside the namespace.
fn in_netns(ns: &str, f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("namespace");
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f();
    })
}

#[test]
fn warm_restart_writes_nothing_and_keeps_connections() {
    require_kernel!();
    let lab = ApiLab::new("warm").unwrap();
    lab.ns.ip(&["link", "add", "pod0", "type", "veth", "peer", "name", "pod1"]).unwrap();
    lab.ns.ip(&["link", "set", "pod1", "up"]).unwrap();
    lab.ns.ip(&["link", "set", "pod0", "up"]).unwrap();
    lab.ns.ip(&["addr", "add", &format!("{POD_IP}/24"), "dev", "pod0"]).unwrap();
    lab.ns.ip(&["route", "add", "default", "dev", "pod0"]).unwrap();
    load(&lab, Point { services: SERVICES, endpoints: 10 });
    lab.server.apply(service("bench", "stable", STABLE_IP, 80));
    lab.server.apply(slice("bench", "stable", &[POD_IP.to_string()], None));

    let listener_ready = Arc::new(AtomicBool::new(false));
    let ready = listener_ready.clone();
    in_netns(lab.ns.name(), move || {
        let listener = TcpListener::bind((POD_IP, 8080)).expect("bind the pod's port");
        ready.store(true, Ordering::SeqCst);
        for mut conn in listener.incoming().map_while(Result::ok) {
            let _ = conn.write_all(b"stable\n");
        }
    });
    while !listener_ready.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }

    let dir = std::env::temp_dir().join(format!("verdict-warm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig).unwrap();
    let state = dir.join("state").display().to_string();
    let verdict = std::path::Path::new(env!("CARGO_BIN_EXE_verdict"));
    let all = (SERVICES + 1) as u64;
    let start = || agent::start(&lab.ns, verdict, &kubeconfig, NODE, &["--state-dir", &state]).unwrap();

    let first = start();
    let cold = agent::wait_synced(&first, Duration::from_secs(300), |s| s.full && s.services == all).unwrap();
    assert!(cold.objects > (SERVICES * 10) as u64, "the cold start programs everything: {cold:?}");

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let prober = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        in_netns(lab.ns.name(), move || {
            let addr: SocketAddr = format!("{STABLE_IP}:80").parse().unwrap();
            while !stop.load(Ordering::SeqCst) {
                let answered = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok().and_then(|mut c| {
                    c.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
                    let mut reply = String::new();
                    c.read_to_string(&mut reply).ok()?;
                    (reply == "stable\n").then_some(())
                });
                match answered {
                    Some(()) => ok.fetch_add(1, Ordering::SeqCst),
                    None => failed.fetch_add(1, Ordering::SeqCst),
                };
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    first.terminate(Duration::from_secs(20)).unwrap();
    let second = start();
    let warm = agent::wait_synced(&second, Duration::from_secs(300), |s| s.full && s.services == all).unwrap();
    let log = second.log_tail(200);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    prober.join().unwrap();
    second.terminate(Duration::from_secs(20)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(warm.objects, 0, "the warm restart wrote {} objects; log:\n{log}", warm.objects);
    assert!(
        log.contains("adopting the table state saved at the last stop"),
        "the warm restart read the table's elements back instead of adopting the saved state; log:\n{log}"
    );
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    assert!(ok > 10, "the prober connected only {ok} times");
    assert_eq!(failed, 0, "{failed} of {} connections to the stable Service failed across the restart", ok + failed);
}

/// The inode of `ns`'s network namespace (what the state file's name carries).
fn netns_inode(ns: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/run/netns/{ns}")).unwrap().ino()
}

#[test]
fn links_planted_in_the_state_dir_are_not_written_through_and_a_linked_dir_is_not_used() {
    use std::os::unix::fs::symlink;
    require_kernel!();
    let lab = ApiLab::new("warmlink").unwrap();
    load(&lab, Point { services: 10, endpoints: 2 });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig).unwrap();
    let verdict = std::path::Path::new(env!("CARGO_BIN_EXE_verdict"));
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();

    // What another user of the node could plant in a state dir it could write: links at the
    // temporary name earlier versions wrote to first, and at the state file itself.
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let file = state.join(format!("kube-proxy-netns{}.state", netns_inode(lab.ns.name())));
    symlink(&victim, file.with_extension("tmp")).unwrap();
    let run = |state: &std::path::Path| {
        let agent =
            agent::start(&lab.ns, verdict, &kubeconfig, NODE, &["--state-dir", state.to_str().unwrap()]).unwrap();
        agent::wait_synced(&agent, Duration::from_secs(60), |s| s.full && s.services == 10).unwrap();
        symlink(&victim, &file).unwrap_or_default();
        agent.terminate(Duration::from_secs(20)).unwrap();
        agent.log()
    };
    let log = run(&state);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "written through a link; log:\n{log}");
    assert!(std::fs::symlink_metadata(&file).unwrap().is_file(), "the state file replaced the link; log:\n{log}");
    assert!(log.contains("saved the table state for the next start"), "{log}");

    // A state dir that is a link (to a directory the agent could use) is not used at all.
    std::fs::remove_file(&file).unwrap();
    let linked = dir.path().join("linked");
    symlink(&state, &linked).unwrap();
    let log = run(&linked);
    assert!(log.contains("it is a symbolic link"), "{log}");
    assert!(std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink(), "nothing saved over the link");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}
