//! kube-proxy's flags laid over the configuration as upstream's `options.go` lays them: without
//! `--config` every flag sets its field; with `--config` the file wins, and only
//! `--hostname-override` and the logging flags still apply (upstream's help says "This
//! parameter is ignored if a config file is specified by --config"). verdict names each flag
//! it ignores that way, once, rather than ignoring it silently.

use super::defaults::with_port;
use super::file::{DetectLocalSection, KubeProxyConfiguration, Logging};
use crate::cli::{RulesArgs, UpstreamArgs};
use std::path::PathBuf;

/// The flags of `run` that set configuration fields (`RunArgs` without the rule flags).
#[derive(Debug, Default, Clone, Copy)]
pub struct RunFlags<'a> {
    /// `--kubeconfig`.
    pub kubeconfig: Option<&'a PathBuf>,
    /// `--metrics-bind-address`.
    pub metrics_bind_address: Option<&'a str>,
    /// `--healthz-bind-address`.
    pub healthz_bind_address: Option<&'a str>,
    /// The rest of kube-proxy's flags.
    pub upstream: Option<&'a UpstreamArgs>,
}

/// The names of the given flags that set configuration fields (ignored with `--config`).
pub fn given_field_flags(rules: &RulesArgs, run: &RunFlags) -> Vec<&'static str> {
    let u = run.upstream.cloned().unwrap_or_default();
    let given = [
        ("--cluster-cidr", rules.cluster_cidr.is_some()),
        ("--nodeport-addresses", !rules.nodeport_addresses.is_empty()),
        ("--masquerade-all", rules.masquerade_all.is_some()),
        ("--detect-local-mode", rules.detect_local_mode.is_some()),
        ("--pod-bridge-interface", rules.pod_bridge_interface.is_some()),
        ("--pod-interface-name-prefix", rules.pod_interface_name_prefix.is_some()),
        ("--kubeconfig", run.kubeconfig.is_some()),
        ("--metrics-bind-address", run.metrics_bind_address.is_some()),
        ("--healthz-bind-address", run.healthz_bind_address.is_some()),
        ("--proxy-mode", u.proxy_mode.is_some()),
        ("--bind-address", u.bind_address.is_some()),
        ("--bind-address-hard-fail", u.bind_address_hard_fail.is_some()),
        ("--healthz-port", u.healthz_port.is_some()),
        ("--metrics-port", u.metrics_port.is_some()),
        ("--feature-gates", !u.feature_gates.is_empty()),
        ("--kube-api-content-type", u.kube_api_content_type.is_some()),
        ("--kube-api-qps", u.kube_api_qps.is_some()),
        ("--kube-api-burst", u.kube_api_burst.is_some()),
        ("--config-sync-period", u.config_sync_period.is_some()),
        ("--oom-score-adj", u.oom_score_adj.is_some()),
        ("--profiling", u.profiling.is_some()),
        ("--show-hidden-metrics-for-version", u.show_hidden_metrics_for_version.is_some()),
        ("--conntrack-max-per-core", u.conntrack_max_per_core.is_some()),
        ("--conntrack-min", u.conntrack_min.is_some()),
        ("--conntrack-tcp-timeout-established", u.conntrack_tcp_timeout_established.is_some()),
        ("--conntrack-tcp-timeout-close-wait", u.conntrack_tcp_timeout_close_wait.is_some()),
        ("--conntrack-tcp-be-liberal", u.conntrack_tcp_be_liberal.is_some()),
        ("--conntrack-udp-timeout", u.conntrack_udp_timeout.is_some()),
        ("--conntrack-udp-timeout-stream", u.conntrack_udp_timeout_stream.is_some()),
        ("--iptables-masquerade-bit", u.iptables_masquerade_bit.is_some()),
        ("--iptables-localhost-nodeports", u.iptables_localhost_nodeports.is_some()),
        ("--iptables-sync-period", u.iptables_sync_period.is_some()),
        ("--iptables-min-sync-period", u.iptables_min_sync_period.is_some()),
        ("--ipvs-sync-period", u.ipvs_sync_period.is_some()),
        ("--ipvs-min-sync-period", u.ipvs_min_sync_period.is_some()),
        ("--ipvs-scheduler", u.ipvs_scheduler.is_some()),
        ("--ipvs-exclude-cidrs", !u.ipvs_exclude_cidrs.is_empty()),
        ("--ipvs-strict-arp", u.ipvs_strict_arp.is_some()),
        ("--ipvs-tcp-timeout", u.ipvs_tcp_timeout.is_some()),
        ("--ipvs-tcpfin-timeout", u.ipvs_tcpfin_timeout.is_some()),
        ("--ipvs-udp-timeout", u.ipvs_udp_timeout.is_some()),
    ];
    given.into_iter().filter(|(_, g)| *g).map(|(name, _)| name).collect()
}

/// The flags that apply with or without `--config`: the node's name and the logging flags.
pub fn overlay_always(c: &mut KubeProxyConfiguration, rules: &RulesArgs, run: &RunFlags) {
    if let Some(name) = rules.hostname_override.as_deref().filter(|n| !n.is_empty()) {
        // Upstream's processHostnameOverrideFlag: trimmed and lower-cased (all blanks stay, for
        // `resolve` to refuse), whatever the file says.
        let trimmed = name.trim();
        c.hostname_override = Some(if trimmed.is_empty() { name.to_string() } else { trimmed.to_lowercase() });
    }
    let Some(u) = run.upstream else { return };
    let log = c.logging.get_or_insert_with(Logging::default);
    if let Some(v) = u.verbosity {
        log.verbosity = Some(v);
    }
    if let Some(f) = &u.logging_format {
        log.format = Some(f.clone());
    }
}

/// Every flag, over a configuration already defaulted (no `--config`).
pub fn overlay_all(c: &mut KubeProxyConfiguration, rules: &RulesArgs, run: &RunFlags) {
    overlay_always(c, rules, run);
    set(&mut c.cluster_cidr, &rules.cluster_cidr);
    if !rules.nodeport_addresses.is_empty() {
        c.node_port_addresses = Some(rules.nodeport_addresses.clone());
    }
    if let Some(all) = rules.masquerade_all {
        // kube-proxy's flag sets the one masqueradeAll every mode reads.
        c.iptables.get_or_insert_default().masquerade_all = Some(all);
        c.nftables.get_or_insert_default().masquerade_all = Some(all);
    }
    set(&mut c.detect_local_mode, &rules.detect_local_mode);
    let dl = c.detect_local.get_or_insert_with(DetectLocalSection::default);
    set(&mut dl.bridge_interface, &rules.pod_bridge_interface);
    set(&mut dl.interface_name_prefix, &rules.pod_interface_name_prefix);
    if let Some(k) = run.kubeconfig {
        c.client_connection.get_or_insert_default().kubeconfig = Some(k.display().to_string());
    }
    set(&mut c.metrics_bind_address, &run.metrics_bind_address.map(str::to_string));
    set(&mut c.healthz_bind_address, &run.healthz_bind_address.map(str::to_string));
    let Some(u) = run.upstream else { return };
    set(&mut c.mode, &u.proxy_mode);
    set(&mut c.bind_address, &u.bind_address);
    set(&mut c.bind_address_hard_fail, &u.bind_address_hard_fail);
    // The deprecated port flags: 0 turns the server off, another port is added when the
    // address has none. Upstream applies them only when it neither reads nor writes a file
    // (options.go, Complete), so `--write-config-to` writes the addresses without them.
    let ports = match u.write_config_to {
        None => [(&mut c.healthz_bind_address, u.healthz_port), (&mut c.metrics_bind_address, u.metrics_port)],
        Some(_) => [(&mut c.healthz_bind_address, None), (&mut c.metrics_bind_address, None)],
    };
    for (field, port) in ports {
        match port {
            Some(0) => *field = Some(String::new()),
            Some(p) => *field = field.as_deref().map(|a| with_port(a, p)),
            None => {}
        }
    }
    for gate in &u.feature_gates {
        if let Some((name, value)) = gate.split_once('=') {
            // A malformed value is kept as a string for `resolve` to refuse in one line.
            let value = value.trim().parse::<bool>().ok();
            let gates = c.feature_gates.get_or_insert_default();
            match value {
                Some(v) => {
                    gates.insert(name.trim().to_string(), v);
                }
                None => c.malformed_feature_gates.push(gate.clone()),
            }
        } else if !gate.trim().is_empty() {
            c.malformed_feature_gates.push(gate.clone());
        }
    }
    let cc = c.client_connection.get_or_insert_default();
    set(&mut cc.content_type, &u.kube_api_content_type);
    set(&mut cc.qps, &u.kube_api_qps.map(f64::from));
    set(&mut cc.burst, &u.kube_api_burst.map(i64::from));
    set(&mut c.config_sync_period, &u.config_sync_period);
    set(&mut c.oom_score_adj, &u.oom_score_adj.map(i64::from));
    set(&mut c.enable_profiling, &u.profiling);
    set(&mut c.show_hidden_metrics_for_version, &u.show_hidden_metrics_for_version);
    let ct = c.conntrack.get_or_insert_default();
    set(&mut ct.max_per_core, &u.conntrack_max_per_core.map(i64::from));
    set(&mut ct.min, &u.conntrack_min.map(i64::from));
    set(&mut ct.tcp_established_timeout, &u.conntrack_tcp_timeout_established);
    set(&mut ct.tcp_close_wait_timeout, &u.conntrack_tcp_timeout_close_wait);
    set(&mut ct.tcp_be_liberal, &u.conntrack_tcp_be_liberal);
    set(&mut ct.udp_timeout, &u.conntrack_udp_timeout);
    set(&mut ct.udp_stream_timeout, &u.conntrack_udp_timeout_stream);
    let ipt = c.iptables.get_or_insert_default();
    set(&mut ipt.masquerade_bit, &u.iptables_masquerade_bit.map(i64::from));
    set(&mut ipt.localhost_node_ports, &u.iptables_localhost_nodeports);
    // The sync-period flags of a mode apply only when it is the mode in effect; the iptables
    // ones are upstream's generic ones, for every mode but ipvs.
    let ipvs = c.mode.as_deref().map(str::trim) == Some("ipvs");
    if !ipvs {
        for section in
            [&mut c.iptables.get_or_insert_default().sync_period, &mut c.nftables.get_or_insert_default().sync_period]
        {
            set(section, &u.iptables_sync_period);
        }
        for section in [
            &mut c.iptables.get_or_insert_default().min_sync_period,
            &mut c.nftables.get_or_insert_default().min_sync_period,
        ] {
            set(section, &u.iptables_min_sync_period);
        }
    }
    let v = c.ipvs.get_or_insert_default();
    if ipvs {
        set(&mut v.sync_period, &u.ipvs_sync_period);
        set(&mut v.min_sync_period, &u.ipvs_min_sync_period);
    }
    set(&mut v.scheduler, &u.ipvs_scheduler);
    if !u.ipvs_exclude_cidrs.is_empty() {
        v.exclude_cidrs = Some(u.ipvs_exclude_cidrs.clone());
    }
    set(&mut v.strict_arp, &u.ipvs_strict_arp);
    set(&mut v.tcp_timeout, &u.ipvs_tcp_timeout);
    set(&mut v.tcp_fin_timeout, &u.ipvs_tcpfin_timeout);
    set(&mut v.udp_timeout, &u.ipvs_udp_timeout);
}

fn set<T: Clone>(field: &mut Option<T>, flag: &Option<T>) {
    if let Some(v) = flag {
        *field = Some(v.clone());
    }
}
