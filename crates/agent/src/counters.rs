//! `verdict_service_connections_total`: the kernel's per-Service connection counters
//! (`--service-counters`), read when `/metrics` is scraped.
//!
//! The series are written here rather than through the `metrics` recorder: the recorder keeps
//! every series it has seen forever, while a Service that is deleted must leave `/metrics`,
//! so that the number of series never exceeds (counted Service ports) x 3 outcomes.
//!
//! A scrape asks the kernel for each counting-set element by key ([`Netlink::service_counts_of`]),
//! which grows linearly with the counted ports, where a dump of the sets grows with their
//! square. The keys are those of the last successful sync ([`CountedKeysPublisher`]).

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use verdict_controller::sync::AfterSync;
use verdict_model::{PortChange, ProxyModel};
use verdict_nft::netlink::Netlink;
use verdict_nft::netlink::counters::ServiceCount;
use verdict_nft::render::counters::CountedKeys;

/// The metric's name.
pub const NAME: &str = "verdict_service_connections_total";

/// The counting-set keys of the table as last committed, shared by the sync loop and the
/// reader. A scrape holds its own `Arc` while it reads, so a sync meanwhile copies the keys
/// rather than waiting for the scrape.
#[derive(Clone, Default)]
pub struct SharedKeys(Arc<Mutex<Arc<CountedKeys>>>);

impl SharedKeys {
    fn current(&self) -> Arc<CountedKeys> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Keeps [`SharedKeys`] equal to the table after every successful sync: a full sync
/// recomputes them from the model, a partial one changes only the changed ports.
pub struct CountedKeysPublisher(pub SharedKeys);

impl AfterSync for CountedKeysPublisher {
    fn after_sync(&mut self, model: &ProxyModel, full: bool, changes: &[PortChange]) {
        if full {
            let keys = Arc::new(CountedKeys::of_model(model));
            *self.0.0.lock().unwrap_or_else(|e| e.into_inner()) = keys;
            return;
        }
        if changes.is_empty() {
            return;
        }
        let mut guard = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        let keys = Arc::make_mut(&mut guard);
        for c in changes {
            keys.update(model, &c.name, c.new.as_deref());
        }
    }
}

/// Reads the counters of one table over a netlink socket of its own.
pub struct CounterReader {
    table: String,
    keys: SharedKeys,
    nl: Mutex<Option<Netlink>>,
}

impl CounterReader {
    /// A reader of table `table`'s elements `keys` (the socket is opened at the first scrape).
    pub fn new(table: &str, keys: SharedKeys) -> CounterReader {
        CounterReader { table: table.to_string(), keys, nl: Mutex::new(None) }
    }

    /// The metric in Prometheus text format; nothing (and a warning) when the kernel cannot
    /// be read.
    pub fn render(&self) -> String {
        let mut guard = self.nl.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            match Netlink::open() {
                Ok(nl) => *guard = Some(nl),
                Err(e) => {
                    tracing::warn!("service counters: cannot open netlink: {e}");
                    return String::new();
                }
            }
        }
        let nl = guard.as_mut().expect("opened above");
        let keys = self.keys.current();
        match nl.service_counts_of(&self.table, keys.iter()) {
            Ok(counts) => format_counts(&counts),
            Err(e) => {
                // A fresh socket next time: a failed dump may leave replies behind.
                *guard = None;
                tracing::warn!("service counters: cannot read the counting sets: {e}");
                String::new()
            }
        }
    }
}

/// The counts as Prometheus text.
pub fn format_counts(counts: &[ServiceCount]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {NAME} New connections to a Service port by outcome (accepted: DNATed to an endpoint; rejected: \
         the Service has no endpoint; firewalled: dropped by loadBalancerSourceRanges), counted in the kernel."
    );
    let _ = writeln!(out, "# TYPE {NAME} counter");
    for c in counts {
        let (namespace, service, port) = split_port(&c.port);
        let _ = writeln!(
            out,
            "{NAME}{{namespace=\"{}\",service=\"{}\",port=\"{}\",outcome=\"{}\"}} {}",
            escape(namespace),
            escape(service),
            escape(port),
            c.outcome.label(),
            c.connections
        );
    }
    out
}

/// `namespace/name:port` into its parts (the port name is empty for an unnamed port).
fn split_port(comment: &str) -> (&str, &str, &str) {
    let (namespace, rest) = comment.split_once('/').unwrap_or(("", comment));
    let (service, port) = rest.split_once(':').unwrap_or((rest, ""));
    (namespace, service, port)
}

/// A label value as the text format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_nft::render::counters::Outcome;

    #[test]
    fn one_series_per_port_and_outcome() {
        let counts = vec![
            ServiceCount { port: "ns1/web:http".into(), outcome: Outcome::Accepted, connections: 3 },
            ServiceCount { port: "ns2/api".into(), outcome: Outcome::Rejected, connections: 1 },
        ];
        let text = format_counts(&counts);
        assert!(text.contains(
            "verdict_service_connections_total{namespace=\"ns1\",service=\"web\",port=\"http\",outcome=\"accepted\"} 3\n"
        ));
        assert!(text.contains(
            "verdict_service_connections_total{namespace=\"ns2\",service=\"api\",port=\"\",outcome=\"rejected\"} 1\n"
        ));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 2);
    }
}
