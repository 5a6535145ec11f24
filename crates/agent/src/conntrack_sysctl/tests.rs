//! `apply` against a fake /proc/sys and /sys in a temporary directory, holding a fresh
//! kernel's defaults. Root writes through file modes, so the failure that has to be real
//! here is a directory where a sysctl's file should be (EISDIR for anyone).

use super::*;
use tempfile::TempDir;

const NETFILTER: &str = "proc/sys/net/netfilter";
const PARAM: &str = "sys/module/nf_conntrack/parameters/hashsize";
const LOCALNET: &str = "proc/sys/net/ipv4/conf/all/route_localnet";

/// A fake tree, removed pass or fail.
struct Fake {
    dir: TempDir,
    paths: SysPaths,
}

impl Fake {
    fn new(test: &str) -> Fake {
        let dir = TempDir::with_prefix(format!("vd-ct-{test}-")).unwrap();
        let paths = SysPaths { proc_sys: dir.path().join("proc/sys"), sys: dir.path().join("sys") };
        let fake = Fake { dir, paths };
        std::fs::create_dir_all(fake.dir.path().join(NETFILTER)).unwrap();
        std::fs::create_dir_all(fake.dir.path().join(PARAM).parent().unwrap()).unwrap();
        for (file, value) in [
            ("nf_conntrack_max", 65536),
            ("nf_conntrack_buckets", 16384),
            ("nf_conntrack_tcp_timeout_established", 432000),
            ("nf_conntrack_tcp_timeout_close_wait", 60),
            ("nf_conntrack_tcp_be_liberal", 0),
            ("nf_conntrack_udp_timeout", 30),
            ("nf_conntrack_udp_timeout_stream", 120),
        ] {
            fake.set(file, value);
        }
        std::fs::write(fake.dir.path().join(PARAM), "16384\n").unwrap();
        std::fs::create_dir_all(fake.dir.path().join(LOCALNET).parent().unwrap()).unwrap();
        std::fs::write(fake.dir.path().join(LOCALNET), "0\n").unwrap();
        fake
    }

    fn set(&self, file: &str, value: u64) {
        std::fs::write(self.dir.path().join(NETFILTER).join(file), format!("{value}\n")).unwrap();
    }

    fn get(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(NETFILTER).join(file)).unwrap().trim().to_string()
    }

    fn hashsize(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(PARAM)).unwrap().trim().to_string()
    }

    /// Puts a directory where `file` should be: writing it fails even for root.
    fn break_file(&self, path: &str) {
        let path = self.dir.path().join(path);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
    }
}

fn find<'a>(outcomes: &'a [Outcome], wanted: &str) -> &'a Outcome {
    outcomes
        .iter()
        .find(|o| match o {
            Outcome::Written { name, .. }
            | Outcome::AlreadySet { name, .. }
            | Outcome::Failed { name, .. }
            | Outcome::Skipped { name, .. } => *name == wanted,
        })
        .unwrap_or_else(|| panic!("no outcome for {wanted} in {outcomes:?}"))
}

fn settings(max_per_core: u32, min: u32) -> ConntrackSettings {
    ConntrackSettings {
        max_per_core,
        min,
        tcp_established_timeout: Duration::ZERO,
        tcp_close_wait_timeout: Duration::ZERO,
        tcp_be_liberal: false,
        udp_timeout: Duration::ZERO,
        udp_stream_timeout: Duration::ZERO,
        route_localnet: false,
    }
}

#[test]
fn the_defaults_are_upstreams() {
    let d = ConntrackSettings::default();
    assert_eq!((d.max_per_core, d.min), (32768, 131072));
    assert_eq!(d.tcp_established_timeout, Duration::from_secs(86400));
    assert_eq!(d.tcp_close_wait_timeout, Duration::from_secs(3600));
    assert!(!d.tcp_be_liberal);
    assert_eq!((d.udp_timeout, d.udp_stream_timeout), (Duration::ZERO, Duration::ZERO));
}

#[test]
fn nf_conntrack_max_is_max_per_core_times_cpus_but_at_least_min() {
    let d = ConntrackSettings::default();
    assert_eq!(conntrack_max(&d, 2), Some(131072), "min wins on 2 CPUs");
    assert_eq!(conntrack_max(&d, 4), Some(131072), "a tie is min");
    assert_eq!(conntrack_max(&d, 8), Some(262144), "scaled wins on 8 CPUs");
    assert_eq!(conntrack_max(&settings(1000, 0), 3), Some(3000));
    assert_eq!(conntrack_max(&settings(0, 131072), 8), None, "0 per core ignores min");
    assert_eq!(conntrack_max(&settings(u32::MAX, 0), 1024), Some(u64::from(u32::MAX) * 1024), "no overflow");
}

#[test]
fn max_per_core_zero_leaves_max_and_hashsize_alone() {
    let fake = Fake::new("zero-max");
    let outcomes = apply(&settings(0, 131072), 8, &fake.paths);
    assert_eq!(outcomes, vec![]);
    assert_eq!(fake.get("nf_conntrack_max"), "65536");
    assert_eq!(fake.hashsize(), "16384");
}

#[test]
fn max_and_hashsize_are_written_and_a_second_run_writes_nothing() {
    let fake = Fake::new("max");
    let first = apply(&settings(32768, 131072), 8, &fake.paths);
    assert_eq!(
        first,
        vec![
            Outcome::Written { name: MAX, from: Some(65536), to: 262144 },
            Outcome::Written { name: HASHSIZE, from: Some(16384), to: 65536 },
        ]
    );
    assert_eq!((fake.get("nf_conntrack_max").as_str(), fake.hashsize().as_str()), ("262144", "65536"));
    let second = apply(&settings(32768, 131072), 8, &fake.paths);
    assert_eq!(
        second,
        vec![Outcome::AlreadySet { name: MAX, value: 262144 }, Outcome::AlreadySet { name: HASHSIZE, value: 65536 }]
    );
}

#[test]
fn a_different_nf_conntrack_max_is_written_even_when_lower() {
    let fake = Fake::new("lower");
    fake.set("nf_conntrack_max", 1_000_000);
    let outcomes = apply(&settings(32768, 131072), 2, &fake.paths);
    assert_eq!(outcomes[0], Outcome::Written { name: MAX, from: Some(1_000_000), to: 131072 });
}

#[test]
fn hashsize_is_raised_only_when_lower_than_a_quarter_of_max() {
    let fake = Fake::new("hashsize");
    std::fs::write(fake.dir.path().join(PARAM), "262144\n").unwrap();
    let outcomes = apply(&settings(32768, 131072), 2, &fake.paths);
    assert_eq!(find(&outcomes, HASHSIZE), &Outcome::AlreadySet { name: HASHSIZE, value: 262144 });
    assert_eq!(fake.hashsize(), "262144", "never lowered");

    std::fs::write(fake.dir.path().join(PARAM), "32767\n").unwrap();
    let outcomes = apply(&settings(32768, 131072), 2, &fake.paths);
    assert_eq!(find(&outcomes, HASHSIZE), &Outcome::Written { name: HASHSIZE, from: Some(32767), to: 32768 });
    assert_eq!(fake.hashsize(), "32768");
}

#[test]
fn an_unreadable_hashsize_is_judged_by_nf_conntrack_buckets() {
    let fake = Fake::new("buckets");
    fake.break_file(PARAM);
    fake.set("nf_conntrack_buckets", 65536);
    let outcomes = apply(&settings(32768, 131072), 2, &fake.paths);
    assert_eq!(find(&outcomes, HASHSIZE), &Outcome::AlreadySet { name: HASHSIZE, value: 65536 });

    fake.set("nf_conntrack_buckets", 1024);
    let outcomes = apply(&settings(32768, 131072), 2, &fake.paths);
    assert!(
        matches!(find(&outcomes, HASHSIZE), Outcome::Failed { want: 32768, reason, .. } if reason.contains("directory")),
        "{outcomes:?}"
    );
}

#[test]
fn timeouts_are_written_in_whole_seconds_and_be_liberal_as_1() {
    let fake = Fake::new("timeouts");
    let wanted = ConntrackSettings {
        tcp_established_timeout: Duration::from_secs(7200),
        tcp_close_wait_timeout: Duration::from_millis(120_900),
        tcp_be_liberal: true,
        udp_timeout: Duration::from_secs(45),
        udp_stream_timeout: Duration::from_secs(150),
        ..settings(0, 0)
    };
    let outcomes = apply(&wanted, 2, &fake.paths);
    assert_eq!(
        outcomes,
        vec![
            Outcome::Written { name: TCP_ESTABLISHED, from: Some(432000), to: 7200 },
            Outcome::Written { name: TCP_CLOSE_WAIT, from: Some(60), to: 120 },
            Outcome::Written { name: TCP_BE_LIBERAL, from: Some(0), to: 1 },
            Outcome::Written { name: UDP, from: Some(30), to: 45 },
            Outcome::Written { name: UDP_STREAM, from: Some(120), to: 150 },
        ]
    );
    for (file, value) in [
        ("nf_conntrack_tcp_timeout_established", "7200"),
        ("nf_conntrack_tcp_timeout_close_wait", "120"),
        ("nf_conntrack_tcp_be_liberal", "1"),
        ("nf_conntrack_udp_timeout", "45"),
        ("nf_conntrack_udp_timeout_stream", "150"),
    ] {
        assert_eq!(fake.get(file), value, "{file}");
    }
    assert!(apply(&wanted, 2, &fake.paths).iter().all(|o| matches!(o, Outcome::AlreadySet { .. })));
}

#[test]
fn zero_and_false_leave_everything_as_it_is() {
    let fake = Fake::new("leave");
    fake.set("nf_conntrack_tcp_be_liberal", 1);
    assert_eq!(apply(&settings(0, 0), 2, &fake.paths), vec![]);
    assert_eq!(fake.get("nf_conntrack_tcp_be_liberal"), "1", "false does not write 0");
    assert_eq!(fake.get("nf_conntrack_tcp_timeout_established"), "432000");
}

#[test]
fn a_failure_is_reported_and_the_others_still_apply() {
    let fake = Fake::new("failure");
    fake.break_file(&format!("{NETFILTER}/nf_conntrack_tcp_timeout_established"));
    let wanted = ConntrackSettings { udp_timeout: Duration::from_secs(45), ..ConntrackSettings::default() };
    let outcomes = apply(&wanted, 2, &fake.paths);
    assert!(
        matches!(find(&outcomes, TCP_ESTABLISHED), Outcome::Failed { want: 86400, reason, .. } if reason.contains("directory")),
        "{outcomes:?}"
    );
    assert_eq!(find(&outcomes, TCP_CLOSE_WAIT), &Outcome::Written { name: TCP_CLOSE_WAIT, from: Some(60), to: 3600 });
    assert_eq!(find(&outcomes, UDP), &Outcome::Written { name: UDP, from: Some(30), to: 45 });
    assert_eq!(fake.get("nf_conntrack_max"), "131072");
    assert_eq!(log_outcomes(&outcomes), 1);
}

#[test]
fn a_missing_sysctl_says_the_module_is_not_loaded_and_is_not_created() {
    let fake = Fake::new("missing");
    let path = fake.dir.path().join(NETFILTER).join("nf_conntrack_udp_timeout_stream");
    std::fs::remove_file(&path).unwrap();
    let wanted = ConntrackSettings { udp_stream_timeout: Duration::from_secs(150), ..settings(0, 0) };
    let outcomes = apply(&wanted, 2, &fake.paths);
    assert!(
        matches!(&outcomes[..], [Outcome::Failed { reason, .. }] if reason.contains("nf_conntrack module is not loaded")),
        "{outcomes:?}"
    );
    assert!(!path.exists());
}

#[test]
fn a_sysctl_without_write_bits_is_skipped_as_read_only_in_this_namespace() {
    let fake = Fake::new("readonly");
    let max = fake.dir.path().join(NETFILTER).join("nf_conntrack_max");
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o444)).unwrap();
    let outcomes = apply(&ConntrackSettings::default(), 2, &fake.paths);
    assert!(
        matches!(find(&outcomes, MAX), Outcome::Skipped { want: 131072, reason, .. } if reason.contains("initial network namespace")),
        "{outcomes:?}"
    );
    assert_eq!(fake.get("nf_conntrack_max"), "65536", "root could have written it, so it must not have tried");
    assert!(matches!(find(&outcomes, TCP_ESTABLISHED), Outcome::Written { .. }));
    assert_eq!(log_outcomes(&outcomes), 0, "skipped is not failed");
}

#[test]
fn reasons_name_the_cause_and_the_way_out() {
    let err = |errno: Errno| io::Error::from_raw_os_error(errno as i32);
    let proc = explain(MAX, Tree::Proc, &err(Errno::EROFS));
    assert!(proc.contains("/proc/sys is mounted read-only") && proc.contains("--init-only"), "{proc}");
    let sys = explain(HASHSIZE, Tree::Sys, &err(Errno::EROFS));
    assert!(sys.contains("/sys is mounted read-only") && sys.contains("24000"), "{sys}");
    let denied = explain(UDP, Tree::Proc, &err(Errno::EACCES));
    assert!(denied.starts_with("permission denied") && denied.contains("privileged init container"), "{denied}");
    assert_eq!(denied, explain(UDP, Tree::Proc, &err(Errno::EPERM)));
    let netns = explain(HASHSIZE, Tree::Sys, &err(Errno::EOPNOTSUPP));
    assert!(netns.contains("initial network namespace"), "{netns}");
    let module = explain(HASHSIZE, Tree::Sys, &err(Errno::ENOENT));
    assert!(module.contains("modprobe nf_conntrack"), "{module}");
    assert!(explain(UDP, Tree::Proc, &err(Errno::EIO)).contains("Input/output error"));
}

#[test]
fn route_localnet_is_written_only_when_localhost_nodeports_ask_for_it() {
    let fake = Fake::new("localnet");
    let localnet = || std::fs::read_to_string(fake.dir.path().join(LOCALNET)).unwrap().trim().to_string();
    assert_eq!(apply(&settings(0, 0), 2, &fake.paths), vec![]);
    assert_eq!(localnet(), "0", "off: left alone");
    let wanted = ConntrackSettings { route_localnet: true, ..settings(0, 0) };
    assert_eq!(apply(&wanted, 2, &fake.paths), vec![Outcome::Written { name: ROUTE_LOCALNET, from: Some(0), to: 1 }]);
    assert_eq!(localnet(), "1");
    assert_eq!(apply(&wanted, 2, &fake.paths), vec![Outcome::AlreadySet { name: ROUTE_LOCALNET, value: 1 }]);
    // One line when it cannot be written, like the others.
    fake.break_file(LOCALNET);
    let outcomes = apply(&wanted, 2, &fake.paths);
    assert!(matches!(&outcomes[..], [Outcome::Failed { name: ROUTE_LOCALNET, want: 1, .. }]), "{outcomes:?}");
    assert_eq!(log_outcomes(&outcomes), 1);
    let missing = explain(ROUTE_LOCALNET, Tree::Proc, &io::Error::from_raw_os_error(Errno::ENOENT as i32));
    assert!(missing.contains("no IPv4"), "{missing}");
}

#[test]
fn online_cpus_counts_the_ranges() {
    let dir = TempDir::with_prefix("vd-ct-cpus-").unwrap();
    let file = dir.path().join("devices/system/cpu/online");
    assert_eq!(online_cpus(dir.path()), None, "no file");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    for (list, count) in [("0-3,8-11\n", Some(8)), ("0\n", Some(1)), ("0,2-3", Some(3)), ("3-1", None), ("x", None)] {
        std::fs::write(&file, list).unwrap();
        assert_eq!(online_cpus(dir.path()), count, "{list:?}");
    }
    assert!(cpus() >= 1);
}
