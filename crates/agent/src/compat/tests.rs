//! The compatibility table held to the code and to upstream's lists.

use super::*;
use crate::cli::Cli;
use crate::config::KubeProxyConfiguration;
use clap::{CommandFactory, Parser};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first column of a fixture's lines, skipping comments and rows whose columns say skip.
fn names(text: &str, skip: impl Fn(&[&str]) -> bool) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|cols| !skip(cols))
        .map(|cols| cols[0].to_string())
        .collect()
}

/// Whether a row names an upstream name: itself, or a family of them (`rest_client_*`).
fn covers(row: &str, name: &str) -> bool {
    row == name || row.strip_suffix('*').is_some_and(|prefix| name.starts_with(prefix))
}

fn same_names(what: &str, upstream: &[String], ours: &[Entry]) {
    let ours: Vec<&str> = ours.iter().map(|e| e.0).collect();
    let missing: Vec<&String> = upstream.iter().filter(|n| !ours.iter().any(|r| covers(r, n))).collect();
    let stale: Vec<&&str> = ours.iter().filter(|r| !upstream.iter().any(|u| covers(r, u))).collect();
    assert!(missing.is_empty() && stale.is_empty(), "{what}: not in the table: {missing:?}; not upstream's: {stale:?}");
    let mut sorted = ours.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), ours.len(), "{what}: a name is listed twice");
}

#[test]
fn every_linux_flag_of_kube_proxy_has_a_row() {
    let upstream = names(&fixture("flags.txt"), |cols| cols.get(3) == Some(&"windows") || cols[0] == "--help");
    same_names("flags", &upstream, FLAGS);
}

#[test]
fn every_flag_in_the_table_parses_as_kube_proxy_spells_it() {
    let run = Cli::command().find_subcommand("run").expect("run").clone();
    let upstream = fixture("flags.txt");
    for (flag, _, _) in FLAGS {
        let long = flag.trim_start_matches("--");
        assert!(run.get_arguments().any(|a| a.get_long() == Some(long)), "{flag} is not a flag of `verdict run`");
        let kind = upstream.lines().find_map(|l| l.strip_prefix(&format!("{flag}\t"))).unwrap_or("value");
        let spellings: Vec<Vec<String>> = match kind.split('\t').next() {
            Some("optional-bool") => {
                vec![vec![flag.to_string()], vec![format!("{flag}=false")], vec![format!("{flag}=true")]]
            }
            _ => vec![vec![format!("{flag}=1")], vec![flag.to_string(), "1".into()]],
        };
        for spelling in spellings {
            let args = ["verdict", "run"].into_iter().map(String::from).chain(spelling.clone());
            if let Err(e) = Cli::try_parse_from(args) {
                panic!("{spelling:?} does not parse: {e}");
            }
        }
    }
    for short in [["-v", "2"].as_slice(), &["-v=2"]] {
        let args = ["verdict", "run"].iter().chain(short);
        assert!(Cli::try_parse_from(args).is_ok(), "{short:?}");
    }
}

#[test]
fn every_field_of_v1alpha1_has_a_row_and_is_read_without_a_warning() {
    let upstream: Vec<String> = names(&fixture("config-fields.txt"), |cols| ["apiVersion", "kind"].contains(&cols[0]))
        .into_iter()
        .map(|n| n.split("[]").next().unwrap_or_default().to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    same_names("configuration fields", &upstream, CONFIG_FIELDS);
    // Every path present (null leaves): nothing may be reported unknown.
    let mut doc = serde_norway::Mapping::new();
    for path in &upstream {
        let mut map = &mut doc;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let key = serde_norway::Value::from(*part);
            if i + 1 == parts.len() {
                map.insert(key, serde_norway::Value::Null);
            } else {
                let next = map.entry(key).or_insert_with(|| serde_norway::Mapping::new().into());
                map = next.as_mapping_mut().expect("a section");
            }
        }
    }
    let text = serde_norway::to_string(&doc).unwrap();
    let loaded = KubeProxyConfiguration::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(loaded.unknown_fields.is_empty(), "unknown: {:?}", loaded.unknown_fields);
    // And a field that is not upstream's is reported.
    let loaded = KubeProxyConfiguration::parse("nftables:\n  syncPeriods: 1s\n").unwrap();
    assert_eq!(loaded.unknown_fields, ["nftables.syncPeriods"]);
}

#[test]
fn every_label_row_is_one_the_code_reads() {
    let read: Vec<&str> = [verdict_controller::translate::SERVICE_NAME_LABEL, verdict_model::ZONE_LABEL]
        .into_iter()
        .chain(verdict_model::UNPROXIED_LABELS)
        .collect();
    let mut rows: Vec<&str> = LABELS.iter().map(|e| e.0).collect();
    let mut read_sorted = read.clone();
    rows.sort_unstable();
    read_sorted.sort_unstable();
    assert_eq!(rows, read_sorted);
    for label in verdict_model::UNPROXIED_LABELS {
        let labels = std::collections::BTreeMap::from([(label.to_string(), "any".to_string())]);
        assert!(!verdict_model::proxied_by_labels(&labels), "{label}");
        assert!(verdict_model::proxied_services_selector().contains(&format!("!{label}")), "{label}");
    }
}

#[test]
fn every_metric_of_kube_proxy_has_a_row_and_the_honoured_ones_are_served() {
    let upstream: Vec<String> = names(&fixture("metrics.txt"), |_| false);
    same_names("metrics", &upstream, METRICS);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        verdict_controller::metrics::describe();
        verdict_controller::family_metrics::register(&[verdict_model::IpFamily::V4, verdict_model::IpFamily::V6]);
        crate::rest_metrics::describe();
        // A family is rendered once it has a series: one request, as the client layer records it.
        metrics::counter!(crate::rest_metrics::REQUESTS, "code" => "200", "host" => "h:6443", "method" => "GET")
            .increment(1);
    });
    let mut served = handle.render();
    crate::process_metrics::render_into(&mut served);
    for (name, support, _) in METRICS {
        // `family_*` rows stand for every metric of the family.
        let type_line = match name.strip_suffix('*') {
            Some(family) => format!("# TYPE {family}"),
            None => format!("# TYPE {name} "),
        };
        let is_served = served.lines().any(|l| l.starts_with(&type_line));
        assert_eq!(is_served, *support == Support::Honoured, "{name}: served {is_served}, table says {support:?}");
    }
}

#[test]
fn docs_show_the_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = ("<!-- compat:begin -->\n", "<!-- compat:end -->");
    let (Some(b), Some(e)) = (docs.find(begin), docs.find(end)) else {
        panic!("no compat markers in {}", path.display())
    };
    let want = markdown();
    if std::env::var_os("UPDATE_COMPAT").is_some() {
        let updated = format!("{}{begin}{want}{}", &docs[..b], &docs[e..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &docs[b + begin.len()..e],
        want,
        "docs/operations.md is stale: UPDATE_COMPAT=1 cargo test -p verdict-agent compat"
    );
}
