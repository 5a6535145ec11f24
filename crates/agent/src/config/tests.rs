//! `verdict run`'s command line read into a configuration, as kube-proxy reads its own.

use super::*;
use crate::cli::{Cli, Command};
use clap::Parser;

fn run_config(args: &[&str]) -> Result<(RunConfig, Effective), ConfigError> {
    let argv = ["verdict", "run", "--hostname-override=n", "--master=https://192.0.2.1:6443"];
    let cli = Cli::try_parse_from(argv.iter().chain(args)).unwrap();
    let Command::Run(run) = cli.command else { panic!("run") };
    RunConfig::from_args(&run)
}

#[test]
fn the_deprecated_ports_turn_servers_off_when_running() {
    let (cfg, _) = run_config(&["--healthz-port=0", "--metrics-bind-address=0.0.0.0", "--metrics-port=9999"]).unwrap();
    assert_eq!(cfg.healthz_addr, None);
    assert_eq!(cfg.metrics_addr, Some("0.0.0.0:9999".parse().unwrap()));
    // Writing a file, upstream leaves them out (Complete): the file has the addresses.
    let (_, effective) = run_config(&["--healthz-port=0", "--write-config-to=/dev/null"]).unwrap();
    assert_eq!(effective.config.healthz_bind_address.as_deref(), Some("0.0.0.0:10256"));
}

#[test]
fn a_written_configuration_reads_back_to_the_same_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("written.yaml");
    let path_arg = format!("--write-config-to={}", path.display());
    let (cfg, effective) = run_config(&[
        "--proxy-mode=nftables",
        "--cluster-cidr=10.244.0.0/16,fd00:10::/56",
        "--masquerade-all",
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=veth",
        "--iptables-sync-period=7s",
        "--conntrack-max-per-core=0",
        "--v=3",
        &path_arg,
    ])
    .unwrap();
    write_config(&effective, &path).unwrap();
    let config_arg = format!("--config={}", path.display());
    let (back, effective_back) = run_config(&[&config_arg]).unwrap();
    assert!(effective_back.warnings.is_empty(), "{:?}", effective_back.warnings);
    assert_eq!(format!("{:?}", back.rules), format!("{:?}", cfg.rules));
    let (a, b) = (&cfg.settings, &back.settings);
    assert_eq!((a.mode, a.sync_period, a.min_sync_period), (b.mode, b.sync_period, b.min_sync_period));
    assert_eq!((a.healthz, a.metrics, a.verbosity), (b.healthz, b.metrics, b.verbosity));
    assert_eq!(format!("{:?}", a.conntrack), format!("{:?}", b.conntrack));
    assert_eq!(a.api, b.api);
}
