//! `verdict run`: the node agent.

use crate::config::{Action, RunConfig, Source};
use crate::counters::{CountedKeysPublisher, CounterReader, SharedKeys};
use crate::http;
use anyhow::{Context, Result, anyhow};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;
use std::time::Duration;
use verdict_controller::conntrack::ConntrackCleaner;
use verdict_controller::health::ProxyHealth;
use verdict_controller::http_serve::Connections;
use verdict_controller::metrics as m;
use verdict_controller::service_health::ServiceHealthServer;
use verdict_controller::sync::{ProblemNotice, SyncConfig, SyncLoop};
use verdict_model::ModelCache;
use verdict_nft::netlink::Netlink;
use verdict_nft::transaction::kernel_needs_deferred_chain_deletion;

/// How long a stop waits for the sync loop to save the table's state.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How often a manifests directory is checked for changes.
const MANIFEST_POLL: Duration = Duration::from_millis(500);

fn install_metrics() -> Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in m::histogram_buckets().into_iter().chain(crate::rest_metrics::histogram_buckets()) {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), &buckets)?;
    }
    let handle = builder.install_recorder().context("installing the metrics recorder")?;
    m::describe();
    crate::memory::describe();
    crate::rest_metrics::describe();
    Ok(handle)
}

/// Why the agent stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// SIGTERM or SIGINT.
    Signalled,
    /// The `--config` file changed.
    ConfigChanged,
    /// The sync loop returned (`--once`, or a fatal error).
    SyncLoopEnded,
    /// The Node object was deleted: as kube-proxy 1.36's node manager, the agent exits (and its
    /// DaemonSet's next pod waits for the Node); rules stay in place.
    NodeDeleted,
}

/// Runs the agent until SIGTERM/SIGINT (rules stay in place) or, with `--once`, one sync.
pub fn run(mut cfg: RunConfig, log_format: crate::cli::LogFormat) -> Result<()> {
    if cfg.action == Action::InitOnly {
        // Upstream's split: a privileged init container writes what needs full root.
        // As upstream, a setting that could not be written fails the init container, so the
        // pod does not start on a node left with the kernel's defaults. What the kernel
        // refuses by design (nf_conntrack_max outside the initial network namespace) is no
        // failure.
        return match super::setup::conntrack(&cfg.settings.conntrack) {
            0 => {
                tracing::info!("--init-only: the conntrack sysctls are set");
                Ok(())
            }
            failed => Err(anyhow!("--init-only: {failed} conntrack sysctl(s) could not be written (see above)")),
        };
    }
    crate::privileges::ensure_net_admin()?;
    if cfg.action == Action::Cleanup {
        return super::cleanup::remove_all(&cfg.rules.table);
    }
    super::setup::announce(&cfg);
    if !cfg.once {
        super::setup::conntrack(&cfg.settings.conntrack);
        super::setup::oom_score_adj(cfg.settings.oom_score_adj);
    }
    // Started while the agent still has what removing them takes; told to go after the first
    // sync, so that kube-proxy's rules serve until verdict's do (see commands::leftovers).
    let mut removal = match cfg.cleanup_leftovers {
        true => {
            let drain = if cfg.once { Duration::ZERO } else { cfg.ipvs_drain_timeout };
            Some(super::leftovers::PendingRemoval::start(&format!("{}ms", drain.as_millis()), log_format)?)
        }
        false => None,
    };
    // Before the first thread: capabilities are per thread.
    crate::privileges::drop_after_start()?;
    crate::memory::return_freed_memory();
    let prom = install_metrics()?;
    let connections = crate::open_files::connections(crate::open_files::raise_to_hard_limit());
    let health = Arc::new(ProxyHealth::new(cfg.sync_period * 2));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // A one-shot run serves nothing: its ports would be open for a moment, to nobody, and
    // could collide with the daemon of the same node.
    let counted_keys = SharedKeys::default();
    if !cfg.once {
        rt.block_on(serve_endpoints(&cfg, prom, health.clone(), counted_keys.clone(), connections.clone()))?;
    }

    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    let (tx, rx) = verdict_controller::event::queue();
    let (notice_tx, notice_rx) = crate::notices::queue(crate::notices::CAPACITY);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let defer_chain_deletion = kernel_needs_deferred_chain_deletion(kernel.trim());
    if defer_chain_deletion {
        tracing::info!(
            kernel = kernel.trim(),
            "kernel before 6.4: unused chains are deleted a second after they are flushed"
        );
    }
    let sync_cfg = SyncConfig {
        table: cfg.rules.table.clone(),
        min_sync_period: cfg.min_sync_period,
        sync_period: cfg.sync_period,
        once: cfg.once,
        defer_chain_deletion,
        state_dir: cfg.state_dir.clone(),
        fast_path: cfg.rules.fast_path.is_some() && fast_path_supported(&mut nl, &cfg.rules.table),
        replacing_kube_proxy: removal.as_ref().map(|r| r.replacing.clone()),
        ..SyncConfig::default()
    };
    let fast_path_on = sync_cfg.fast_path;
    cfg.rules.proxy.families = crate::platform::kernel_families();
    if let Source::ApiServer { kubeconfig, master } = &cfg.source {
        cfg.rules.proxy.reserved_addresses = crate::api_address::reserved(kubeconfig.as_deref(), master.as_deref());
    }
    cfg.rules.proxy.loopback_guard = !cfg.rules.proxy.localhost_nodeports && crate::platform::route_localnet_on();
    crate::platform::log_families(&cfg.rules.proxy.families);
    let cache = ModelCache::new(cfg.rules.proxy.clone(), &cfg.rules.node_name);
    verdict_controller::family_metrics::register(&cache.model().families());
    let health_notice_tx = notice_tx.clone();
    let mut sync_loop =
        SyncLoop::new(cache, nl, sync_cfg, health.clone()).with_notices(move |n: ProblemNotice| notice_tx.send(n));
    if !cfg.once {
        let service_health = ServiceHealthServer::new(rt.handle().clone(), health.clone())
            .with_connections(connections)
            .with_notices(&cfg.rules.node_name, move |n| health_notice_tx.send(n));
        sync_loop = sync_loop
            .with_after_sync(service_health)
            .with_after_sync(ConntrackCleaner::new())
            .with_after_sync(crate::memory::MemoryStats)
            .with_memory_release(crate::memory::release_freed_memory);
        if cfg.rules.proxy.service_counters.enabled() {
            sync_loop = sync_loop.with_after_sync(CountedKeysPublisher(counted_keys));
        }
        if let Some(removal) = removal.take() {
            sync_loop = sync_loop.with_after_sync(RemoveAfterFirstSync {
                removal: Some(removal),
                events: tx.clone(),
                pipe: None,
            });
        }
        match verdict_controller::drift::watch_table(&cfg.rules.table, tx.clone()) {
            Ok(gate) => sync_loop = sync_loop.with_monitor(gate),
            Err(e) => tracing::warn!("not watching the table for changes by other programs: {e}"),
        }
    }
    if let Some(interfaces) = cfg.rules.fast_path.as_ref().filter(|_| fast_path_on) {
        tracing::info!(%interfaces, "fast path on: established Service connections are offloaded to a flowtable");
        if let Err(e) = verdict_controller::fast_path::watch(interfaces.clone(), tx.clone()) {
            tracing::warn!("the fast path's link watcher did not start; no interface will join the flowtable: {e}");
        }
    }
    let syncer = std::thread::Builder::new().name("sync".into()).spawn(move || sync_loop.run(rx))?;
    let stop = tx.clone();

    let node = cfg.rules.node_name.clone();
    tracing::info!(node, table = cfg.rules.table, "verdict starting");
    match &cfg.source {
        Source::Manifests(dir) => {
            let dir = dir.clone();
            std::thread::Builder::new().name("manifests".into()).spawn(move || {
                if let Err(e) = verdict_controller::dir::watch_dir(&dir, &node, MANIFEST_POLL, &tx) {
                    tracing::error!("{e}");
                }
            })?;
            drop(notice_rx);
        }
        Source::ApiServer { kubeconfig, master } => {
            let api = &cfg.settings.api;
            let timeout = cfg.api_timeout;
            let new_client = || {
                rt.block_on(crate::kube::client(kubeconfig.as_deref(), master.as_deref(), api.qps, api.burst, timeout))
            };
            let client = new_client()?;
            // Events get a client of their own, with its own request budget (as upstream's
            // event client): a burst of them never delays a watch or a relist.
            let events = new_client()?;
            rt.spawn(crate::events::publish_events(events, node.clone(), notice_rx));
            use verdict_controller::watch::{ContentTypes, WatchBounds, WatchOptions};
            let options = WatchOptions {
                bounds: WatchBounds { list_progress: timeout },
                content: ContentTypes::new(&api.content_type, &api.accept_content_types),
            };
            tracing::info!(accept = options.content.accept(), "API content types");
            rt.spawn(async move { verdict_controller::watch::watch_with(client, &node, tx, options).await });
        }
    }

    let config_file = cfg.config_file.clone().map(super::setup::ConfigFileWatch::new);
    // A directory of manifests has no Node life cycle to follow.
    let node_watched = matches!(cfg.source, Source::ApiServer { .. }).then_some(health.clone());
    let outcome = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            tokio::select! {
                _ = term.recv() => return Ok::<Stop, anyhow::Error>(Stop::Signalled),
                _ = tokio::signal::ctrl_c() => return Ok(Stop::Signalled),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if syncer.is_finished() {
                        return Ok(Stop::SyncLoopEnded);
                    }
                    if config_file.as_ref().is_some_and(|w| w.changed()) {
                        return Ok(Stop::ConfigChanged);
                    }
                    if node_watched.as_ref().is_some_and(|h| h.is_node_deleted()) {
                        return Ok(Stop::NodeDeleted);
                    }
                }
            }
        }
    })?;
    if outcome != Stop::SyncLoopEnded {
        match outcome {
            Stop::ConfigChanged => tracing::warn!(
                "the --config file changed: exiting so that the agent restarts with it (as kube-proxy does); rules stay in place"
            ),
            Stop::NodeDeleted => tracing::warn!(
                "the Node {} was deleted: exiting, as kube-proxy does; rules stay in place",
                cfg.rules.node_name
            ),
            _ => tracing::info!("signalled: exiting, rules stay in place"),
        }
        // The sync loop saves the table's state for the next start; a sync in progress is
        // finished first, but a stop never waits on one for long.
        let _ = stop.send(verdict_controller::event::Event::Shutdown);
        let deadline = std::time::Instant::now() + SHUTDOWN_GRACE;
        while !syncer.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        return match outcome {
            Stop::ConfigChanged => Err(anyhow!("the configuration file was updated")),
            Stop::NodeDeleted => Err(anyhow!("the Node {} was deleted", cfg.rules.node_name)),
            _ => Ok(()),
        };
    }
    match syncer.join() {
        // `--once`: kube-proxy's rules go once verdict's table is in place.
        Ok(Ok(())) => removal.map_or(Ok(()), |r| r.go_and_wait()),
        Ok(Err(e)) => Err(anyhow!(e)),
        Err(_) => Err(anyhow!("the sync loop panicked")),
    }
}

async fn serve_endpoints(
    cfg: &RunConfig,
    prom: PrometheusHandle,
    health: Arc<ProxyHealth>,
    counted_keys: SharedKeys,
    connections: Arc<Connections>,
) -> Result<()> {
    if let Some(addr) = cfg.metrics_addr {
        let counters = match cfg.rules.proxy.service_counters.enabled() {
            true => Some(
                CounterReader::start(&cfg.rules.table, counted_keys, cfg.service_counters_period)
                    .context("starting the service counters' reader")?,
            ),
            false => None,
        };
        let routes = http::metrics_routes(prom, counters, cfg.configz.clone());
        let what = "metrics: /metrics /proxyMode /configz /metrics/slis /healthz";
        serve_or_retry(addr, connections.clone(), routes, what, cfg.settings.bind_address_hard_fail).await?;
    }
    if let Some(addr) = cfg.healthz_addr {
        let routes = http::health_routes(health);
        serve_or_retry(addr, connections, routes, "health: /healthz /livez", cfg.settings.bind_address_hard_fail)
            .await?;
    }
    Ok(())
}

/// How often a server whose port was busy tries again (upstream's 5 s).
const BIND_RETRY: Duration = Duration::from_secs(5);

/// Serves `routes` on `addr`. A port that cannot be bound fails the start with
/// `bindAddressHardFail`; otherwise, as kube-proxy does, the agent proxies anyway and tries
/// again every 5 s, with one line per failure.
async fn serve_or_retry<R>(
    addr: std::net::SocketAddr,
    connections: Arc<Connections>,
    routes: R,
    what: &'static str,
    hard_fail: bool,
) -> Result<()>
where
    R: Fn(&str) -> http::RouteResponse + Send + Sync + 'static,
{
    let routes = Arc::new(routes);
    let first = routes.clone();
    match http::serve(addr, connections.clone(), move |path: &str| first(path)).await {
        Ok(bound) => {
            tracing::info!(%bound, "{what}");
            Ok(())
        }
        Err(e) if hard_fail => Err(anyhow!("serving {what} on {addr}: {e} (bindAddressHardFail)")),
        Err(e) => {
            tracing::error!("serving {what} on {addr}: {e}; trying again every {BIND_RETRY:?} while proxying");
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(BIND_RETRY).await;
                    let routes = routes.clone();
                    match http::serve(addr, connections.clone(), move |path: &str| routes(path)).await {
                        Ok(bound) => return tracing::info!(%bound, "{what}"),
                        Err(e) => tracing::error!("serving {what} on {addr}: {e}; trying again in {BIND_RETRY:?}"),
                    }
                }
            });
            Ok(())
        }
    }
}

/// Whether the kernel has the software flowtables `--flowtable-interfaces` needs; without
/// them the agent runs without the fast path instead of failing every sync. A table that
/// holds the fast path's flowtable already answers without the probe, whose commit would move
/// the generation and so spoil the adoption of the saved state at a warm restart.
fn fast_path_supported(nl: &mut Netlink, table: &str) -> bool {
    let programmed = nl.flowtables(table).is_ok_and(|f| f.iter().any(|f| f.name == verdict_layout::render::FAST_PATH));
    let supported = match if programmed { Ok(true) } else { nl.supports_flowtables() } {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("could not ask the kernel for flowtables; running without the fast path: {e}");
            false
        }
    };
    if !supported {
        tracing::error!(
            "--flowtable-interfaces: this kernel has no software flowtables (CONFIG_NF_FLOW_TABLE_INET); running without the fast path"
        );
    }
    metrics::gauge!(m::FAST_PATH_UNAVAILABLE).set(if supported { 0.0 } else { 1.0 });
    supported
}

/// Tells the remover of kube-proxy's rules to go after the first successful sync (every
/// Service programmed), then has the sync loop look for other proxies again once it is done.
struct RemoveAfterFirstSync {
    removal: Option<super::leftovers::PendingRemoval>,
    events: std::sync::mpsc::SyncSender<verdict_controller::event::Event>,
    /// The remover's stdin, open for the agent's life: closing it tells the remover the agent
    /// stopped.
    pipe: Option<std::process::ChildStdin>,
}

impl verdict_controller::sync::AfterSync for RemoveAfterFirstSync {
    fn after_sync(&mut self, _: &verdict_model::ProxyModel, _: bool, _: &[verdict_model::PortChange]) {
        if let Some(removal) = self.removal.take() {
            tracing::info!("verdict's table is in place: removing kube-proxy's rules");
            let events = self.events.clone();
            self.pipe = Some(removal.go(move || {
                let _ = events.send(verdict_controller::event::Event::OtherTablesChanged);
            }));
        }
    }
}
