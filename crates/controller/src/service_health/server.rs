//! The listeners: opened, kept, retried and closed on each sync.

use super::http::{Shared, serve};
use super::targets::HealthTarget;
use crate::health::ProxyHealth;
use crate::http_serve::{Caps, Connections};
use crate::sync::ProblemNotice;
use nix::sys::socket::{setsockopt, sockopt::Ipv6V6Only};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use verdict_model::{ObjectKind, ObjectRef, Problem};

/// The backlog of each listener.
const BACKLOG: u32 = 1024;

/// How long `sync` waits for a closed listener to release its port.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The Event reason upstream kube-proxy uses when a health check port cannot be opened.
pub const FAILED_TO_START: &str = "FailedToStartServiceHealthcheck";

/// One Service's listeners.
#[derive(Debug)]
struct Instance {
    port: u16,
    shared: Arc<Shared>,
    /// One serving task per bound address.
    listeners: BTreeMap<IpAddr, JoinHandle<()>>,
    /// The bind failure last announced, so a port that stays busy is announced once, not on
    /// every retry.
    announced_failure: Option<String>,
}

/// The health-check listeners of every eTP=Local Service with a `healthCheckNodePort`.
///
/// `sync` is called from the (synchronous) sync loop; the listeners are served on the given
/// tokio runtime. Dropping the server closes every listener.
pub struct ServiceHealthServer {
    runtime: Handle,
    proxy: Arc<ProxyHealth>,
    services: Mutex<BTreeMap<(String, String), Instance>>,
    notices: Option<Notices>,
    connections: Arc<Connections>,
}

/// Where bind failures are announced (as Events, by the agent).
struct Notices {
    node: String,
    notify: Box<dyn Fn(ProblemNotice) + Send + Sync>,
}

impl fmt::Debug for ServiceHealthServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceHealthServer").field("services", &self.lock().len()).finish_non_exhaustive()
    }
}

/// The addresses to bind: the given ones (an unspecified address of a family replaces the other
/// addresses of that family), or 0.0.0.0 and :: when none are given.
fn bind_addresses(bind: &[IpAddr]) -> Vec<IpAddr> {
    if bind.is_empty() {
        return vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::UNSPECIFIED)];
    }
    let any_v4 = bind.iter().any(|ip| ip.is_ipv4() && ip.is_unspecified());
    let any_v6 = bind.iter().any(|ip| ip.is_ipv6() && ip.is_unspecified());
    let mut addrs: Vec<IpAddr> = bind
        .iter()
        .filter(|ip| ip.is_unspecified() || !(if ip.is_ipv4() { any_v4 } else { any_v6 }))
        .copied()
        .collect();
    addrs.sort();
    addrs.dedup();
    addrs
}

/// Whether a failure to bind `::` only means the host has no IPv6.
fn no_ipv6(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == nix::errno::Errno::EAFNOSUPPORT as i32 || c == nix::errno::Errno::EADDRNOTAVAIL as i32)
}

/// Aborts serving tasks and waits (briefly) until they are gone, so their ports are free again.
fn close(tasks: Vec<JoinHandle<()>>) {
    if tasks.is_empty() {
        return;
    }
    for t in &tasks {
        t.abort();
    }
    let deadline = Instant::now() + CLOSE_WAIT;
    while !tasks.iter().all(JoinHandle::is_finished) {
        if Instant::now() >= deadline {
            tracing::warn!("health check listeners are slow to close; their ports may be busy until they do");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl ServiceHealthServer {
    /// A server with no listeners yet; they are served on `runtime`, and answer with the
    /// proxy's health.
    pub fn new(runtime: Handle, proxy: Arc<ProxyHealth>) -> Self {
        ServiceHealthServer {
            runtime,
            proxy,
            services: Mutex::new(BTreeMap::new()),
            notices: None,
            connections: Connections::new(Caps::default()),
        }
    }

    /// Serves the listeners' connections from `connections`, the table the process's other
    /// HTTP listeners share (by default, a table of its own).
    pub fn with_connections(mut self, connections: Arc<Connections>) -> Self {
        self.connections = connections;
        self
    }

    /// Announces each Service whose health check port cannot be opened through `notify`, once
    /// per distinct failure, with upstream's reason and message (naming `node`).
    pub fn with_notices(mut self, node: &str, notify: impl Fn(ProblemNotice) + Send + Sync + 'static) -> Self {
        self.notices = Some(Notices { node: node.to_string(), notify: Box::new(notify) });
        self
    }

    fn announce(&self, inst: &mut Instance, failure: Option<String>) {
        if inst.announced_failure == failure {
            return;
        }
        inst.announced_failure = failure.clone();
        let (Some(notices), Some(error)) = (&self.notices, failure) else { return };
        let object = ObjectRef::new(ObjectKind::Service, &inst.shared.namespace, &inst.shared.name);
        let message = format!(
            "node {} failed to start healthcheck \"{}\" on port {}: {error}",
            notices.node, inst.shared, inst.port
        );
        (notices.notify)(ProblemNotice {
            problems: vec![Problem::new(object.clone(), FAILED_TO_START, message)],
            object,
        });
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<(String, String), Instance>> {
        self.services.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the listeners match `targets`: opens those of new Services (and retries those that
    /// failed before), closes those of Services that are gone or changed port, and updates the
    /// counts. `bind` are the addresses to listen on; empty means every address.
    pub fn sync(&self, targets: &[HealthTarget], bind: &[IpAddr]) {
        let addrs = bind_addresses(bind);
        let mut wanted: BTreeMap<(&str, &str), &HealthTarget> = BTreeMap::new();
        for t in targets {
            match wanted.entry((t.namespace.as_str(), t.name.as_str())) {
                Entry::Vacant(v) => {
                    v.insert(t);
                }
                Entry::Occupied(_) => {
                    tracing::debug!(service = %format!("{}/{}", t.namespace, t.name), "duplicate health check target ignored");
                }
            }
        }

        let mut services = self.lock();
        let mut closing = Vec::new();
        services.retain(|(namespace, name), inst| {
            let keep = wanted.get(&(namespace.as_str(), name.as_str())).is_some_and(|t| t.port == inst.port);
            if !keep {
                tracing::info!(service = %inst.shared, port = inst.port, "closing health check");
                closing.extend(std::mem::take(&mut inst.listeners).into_values());
                return false;
            }
            let gone: Vec<IpAddr> = inst.listeners.keys().filter(|a| !addrs.contains(a)).copied().collect();
            for addr in gone {
                tracing::info!(service = %inst.shared, port = inst.port, %addr, "closing health check address");
                closing.extend(inst.listeners.remove(&addr));
            }
            true
        });
        close(closing);

        for ((namespace, name), t) in wanted {
            let inst = services.entry((namespace.to_string(), name.to_string())).or_insert_with(|| Instance {
                port: t.port,
                shared: Arc::new(Shared {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    local_endpoints: AtomicUsize::new(t.local_endpoints),
                }),
                listeners: BTreeMap::new(),
                announced_failure: None,
            });
            inst.shared.local_endpoints.store(t.local_endpoints, Ordering::Relaxed);
            let mut failure = None;
            for &addr in &addrs {
                if inst.listeners.contains_key(&addr) {
                    continue;
                }
                match self.listen(SocketAddr::new(addr, inst.port)) {
                    Ok(listener) => {
                        tracing::info!(service = %inst.shared, port = inst.port, %addr, "opened health check");
                        let task = self.runtime.spawn(serve(
                            listener,
                            inst.shared.clone(),
                            self.proxy.clone(),
                            self.connections.clone(),
                        ));
                        inst.listeners.insert(addr, task);
                    }
                    Err(e) if bind.is_empty() && addr.is_ipv6() && no_ipv6(&e) => {
                        tracing::debug!(service = %inst.shared, port = inst.port, "no IPv6 health check: {e}");
                    }
                    Err(e) => {
                        tracing::warn!(
                            service = %inst.shared,
                            port = inst.port,
                            %addr,
                            "failed to start health check (retried on the next sync): {e}"
                        );
                        failure.get_or_insert_with(|| format!("listen tcp {}: {e}", SocketAddr::new(addr, inst.port)));
                    }
                }
            }
            self.announce(inst, failure);
        }
    }

    fn listen(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        let _runtime = self.runtime.enter();
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => {
                let socket = TcpSocket::new_v6()?;
                // `::` must not take the IPv4 port too: 0.0.0.0 is bound separately.
                setsockopt(&socket, Ipv6V6Only, &true)?;
                socket
            }
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(BACKLOG)
    }

    /// The addresses and ports listened on now, sorted.
    pub fn listening(&self) -> Vec<(IpAddr, u16)> {
        let services = self.lock();
        let mut out: Vec<(IpAddr, u16)> = services
            .values()
            .flat_map(|inst| {
                inst.listeners.iter().filter(|(_, task)| !task.is_finished()).map(|(addr, _)| (*addr, inst.port))
            })
            .collect();
        out.sort();
        out
    }
}

impl Drop for ServiceHealthServer {
    fn drop(&mut self) {
        let services = self.services.get_mut().unwrap_or_else(|p| p.into_inner());
        for inst in services.values() {
            for task in inst.listeners.values() {
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn no_bind_addresses_means_every_address_of_both_families() {
        assert_eq!(bind_addresses(&[]), ips(&["0.0.0.0", "::"]));
    }

    #[test]
    fn an_unspecified_address_replaces_the_others_of_its_family() {
        assert_eq!(
            bind_addresses(&ips(&["192.0.2.1", "0.0.0.0", "2001:db8::1", "192.0.2.1"])),
            ips(&["0.0.0.0", "2001:db8::1"])
        );
    }
}
