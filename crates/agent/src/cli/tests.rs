//! A flag given twice is read as kube-proxy's pflag reads it, for every flag of every command.

use super::*;
use clap::{ArgAction, CommandFactory};

/// The flags whose repeated use adds values, as pflag's `stringSlice` and `mapStringBool` do
/// (`--nodeport-addresses`, `--ipvs-exclude-cidrs`, `--feature-gates` in kube-proxy's
/// options.go) and klog's `VModuleConfiguration` (`--vmodule`), and verdict's own lists, which
/// follow them. Every other flag keeps its last
/// value, as pflag's string, bool, int, float and duration flags do.
const LISTS: &[&str] =
    &["nodeport-addresses", "ipvs-exclude-cidrs", "feature-gates", "vmodule", "flowtable-interfaces", "node-address"];

/// What a command needs besides the flag under test.
fn required(command: &str) -> &'static [&'static str] {
    match command {
        "render" => &["--manifests=dir"],
        "explain" => &["--live", "--src=192.0.2.1", "--dst=192.0.2.2:80"],
        "trace" => &["--dst=192.0.2.2:80"],
        _ => &[],
    }
}

/// Two values the flag accepts, the second different from the first.
fn two_values(arg: &clap::Arg) -> (String, String) {
    let possible: Vec<String> = arg.get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
    match possible.as_slice() {
        [a, b, ..] => (a.clone(), b.clone()),
        _ => ("1".into(), "2".into()),
    }
}

#[test]
fn every_flag_given_twice_keeps_the_last_value_or_adds_up_as_pflag_does() {
    let mut cli = Cli::command();
    cli.build();
    let mut checked = Vec::new();
    for sub in cli.get_subcommands() {
        let command = sub.get_name();
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(arg.get_action(), ArgAction::Help | ArgAction::HelpShort | ArgAction::Version) {
                continue;
            }
            let id = arg.get_id().as_str();
            let mut args = vec!["verdict".to_string(), command.to_string()];
            args.extend(required(command).iter().map(|s| s.to_string()));
            let raw = |m: &clap::ArgMatches| -> Vec<String> {
                m.subcommand_matches(command)
                    .and_then(|s| s.get_raw(id))
                    .or_else(|| m.get_raw(id))
                    .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default()
            };
            if matches!(arg.get_action(), ArgAction::SetTrue) {
                args.extend([format!("--{long}"), format!("--{long}")]);
                let m = Cli::command().try_get_matches_from(&args);
                assert!(m.is_ok(), "{args:?}: {}", m.unwrap_err());
                checked.push(long);
                continue;
            }
            let (first, second) = two_values(arg);
            args.extend([format!("--{long}={first}"), format!("--{long}={second}")]);
            let m = Cli::command().try_get_matches_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let want = match LISTS.contains(&long) {
                true => vec![first, second],
                false => vec![second],
            };
            assert_eq!(raw(&m), want, "{args:?}");
            checked.push(long);
        }
    }
    for long in LISTS.iter().chain(&["v", "cluster-cidr", "service-cluster-ip-range", "master", "log-format", "once"]) {
        assert!(checked.contains(long), "--{long} was not checked: {checked:?}");
    }
}

#[test]
fn the_short_and_long_log_level_are_one_flag() {
    let cli = Cli::try_parse_from(["verdict", "run", "-v", "2", "--v=4"]).unwrap();
    let Command::Run(run) = cli.command else { panic!("run") };
    assert_eq!(run.upstream.verbosity, Some(4));
    let cli = Cli::try_parse_from(["verdict", "run", "--v=4", "-v=1"]).unwrap();
    let Command::Run(run) = cli.command else { panic!("run") };
    assert_eq!(run.upstream.verbosity, Some(1));
}

#[test]
fn cluster_cidr_is_one_string_as_upstreams_and_the_last_one_wins() {
    let cli =
        Cli::try_parse_from(["verdict", "run", "--cluster-cidr=10.0.0.0/8,fd00::/48", "--cluster-cidr=10.1.0.0/16"])
            .unwrap();
    let Command::Run(run) = cli.command else { panic!("run") };
    assert_eq!(run.rules.cluster_cidr.as_deref(), Some("10.1.0.0/16"));
}
