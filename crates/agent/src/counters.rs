//! `verdict_service_connections_total`: the kernel's per-Service connection counters
//! (`--service-counters`), read in the background and served by `/metrics`.
//!
//! The series are written here rather than through the `metrics` recorder: the recorder keeps
//! every series it has seen forever, while a Service that is deleted must leave `/metrics`,
//! so that the number of series never exceeds (counted Service ports) x 3 outcomes.
//!
//! Reading costs about 6 µs per counted element (1.0 to 1.2 s at 100k counted ports,
//! docs/benchmarks.md), so a scrape does not wait for it: a thread reads every
//! `--service-counters-period`, or every 20 reads' duration if that is longer (reading takes
//! at most 5% of a core whatever the table's size and however many scrapers there are), and
//! sooner when Service ports come and go. A scrape serves the latest reading and its time
//! (`verdict_service_counters_read_timestamp_seconds`): its values are at most one period
//! plus one read old.
//!
//! A read asks the kernel for each counting-set element by key ([`Netlink::service_counts_of`]):
//! an element the sync loop replaces meanwhile is read whole or not at all, where a dump under
//! a concurrent commit can skip or repeat elements (a false reset or a spike of a counter),
//! and it grows linearly with the counted ports (a dump faster). The keys are those of the
//! last successful sync ([`CountedKeysPublisher`]).

use std::fmt::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};
use verdict_controller::sync::AfterSync;
use verdict_layout::counts::{ServiceCount, ServiceCounts};
use verdict_layout::render::counted_keys::CountedKeys;
use verdict_model::{PortChange, ProxyModel};
use verdict_nft::netlink::Netlink;

/// The metric's name.
pub const NAME: &str = "verdict_service_connections_total";
/// When the counters served were read.
pub const READ_TIMESTAMP: &str = "verdict_service_counters_read_timestamp_seconds";
/// How long that read took.
pub const READ_DURATION: &str = "verdict_service_counters_read_duration_seconds";

/// Reads never take more than 1/`READ_SHARE` of the time.
const READ_SHARE: u32 = 20;

/// The counting-set keys of the table as last committed (and a version that changes with
/// them), shared by the sync loop and the reader. A read holds its own `Arc` of the keys, so
/// a sync meanwhile copies them rather than waiting for the read.
#[derive(Clone, Default)]
pub struct SharedKeys(Arc<(Mutex<Versioned>, Condvar)>);

/// The keys, and how many times they changed.
type Versioned = (Arc<CountedKeys>, u64);

impl SharedKeys {
    fn current(&self) -> (Arc<CountedKeys>, u64) {
        self.0.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Applies `f`; if it says the keys changed, the reader is woken.
    fn change(&self, f: impl FnOnce(&mut Arc<CountedKeys>) -> bool) {
        let mut guard = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if f(&mut guard.0) {
            guard.1 += 1;
            self.0.1.notify_all();
        }
    }

    /// Waits until the keys change from `version` or `until` passes; whether they changed.
    fn wait_change(&self, version: u64, until: Instant) -> bool {
        let mut guard = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        while guard.1 == version {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self.0.1.wait_timeout(guard, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }
}

/// Keeps [`SharedKeys`] equal to the table after every successful sync: a full sync
/// recomputes them from the model, a partial one changes only the changed ports.
pub struct CountedKeysPublisher(pub SharedKeys);

impl AfterSync for CountedKeysPublisher {
    fn after_sync(&mut self, model: &ProxyModel, full: bool, changes: &[PortChange]) {
        if full {
            let keys = Arc::new(CountedKeys::of_model(model));
            self.0.change(|k| {
                *k = keys;
                true
            });
            return;
        }
        if changes.is_empty() {
            return;
        }
        self.0.change(|k| {
            let keys = Arc::make_mut(k);
            let mut changed = false;
            for c in changes {
                changed |= keys.update(model, &c.name, c.new.as_deref());
            }
            changed
        });
    }
}

/// The latest reading, ready to serve.
struct Reading {
    /// Kept as read and formatted per scrape: at 100k counted ports the text is 21 MB.
    counts: Arc<Vec<ServiceCount>>,
    at: SystemTime,
    took: Duration,
}

/// Reads the counters of one table in the background; [`CounterReader::render_into`] serves the
/// latest reading.
pub struct CounterReader {
    latest: Arc<Mutex<Option<Reading>>>,
}

impl CounterReader {
    /// Starts reading table `table`'s counting-set elements `keys` every `period` (see the
    /// module's comment) on a thread of its own, in the calling thread's network namespace.
    pub fn start(table: &str, keys: SharedKeys, period: Duration) -> std::io::Result<CounterReader> {
        let latest = Arc::new(Mutex::new(None));
        let shared = latest.clone();
        let table = table.to_string();
        std::thread::Builder::new()
            .name("counters".into())
            .spawn(move || read_forever(&table, &keys, period, &shared))?;
        Ok(CounterReader { latest })
    }

    /// The latest reading in Prometheus text format; nothing before the first one.
    /// (Appended to `out`.)
    pub fn render_into(&self, out: &mut String) {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = latest.as_ref() else { return };
        let (counts, at, took) = (r.counts.clone(), r.at, r.took);
        drop(latest);
        format_counts(&counts, out);
        let at = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let _ = writeln!(
            out,
            "# HELP {READ_TIMESTAMP} When the {NAME} served were read from the kernel (Unix time).\n\
             # TYPE {READ_TIMESTAMP} gauge\n{READ_TIMESTAMP} {at:.3}"
        );
        let _ = writeln!(
            out,
            "# HELP {READ_DURATION} How long reading them took.\n# TYPE {READ_DURATION} gauge\n{READ_DURATION} {:.6}",
            took.as_secs_f64()
        );
    }
}

/// The reader thread: reads, publishes, waits (see the module's comment).
fn read_forever(table: &str, keys: &SharedKeys, period: Duration, latest: &Mutex<Option<Reading>>) {
    let mut nl: Option<Netlink> = None;
    loop {
        let (current, version) = keys.current();
        let started = Instant::now();
        let at = SystemTime::now();
        if nl.is_none() {
            match Netlink::open() {
                Ok(n) => nl = Some(n),
                Err(e) => tracing::warn!("service counters: cannot open netlink: {e}"),
            }
        }
        if let Some(n) = nl.as_mut() {
            match n.service_counts_of(table, current.iter()) {
                Ok(counts) => {
                    let took = started.elapsed();
                    *latest.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Reading { counts: Arc::new(counts), at, took });
                }
                Err(e) => {
                    // A fresh socket next time: a failed read may leave replies behind.
                    nl = None;
                    tracing::warn!("service counters: cannot read the counting sets: {e}");
                }
            }
        }
        drop(current);
        let cost = started.elapsed() * READ_SHARE;
        if keys.wait_change(version, started + period.max(cost)) {
            // Ports came or went: read again as soon as the share allows.
            std::thread::sleep((started + cost).saturating_duration_since(Instant::now()));
        }
    }
}

/// The counts as Prometheus text.
pub fn format_counts(counts: &[ServiceCount], out: &mut String) {
    // About 110 bytes a series; sized once rather than doubled (and copied) 20 times.
    out.reserve(512 + counts.len() * 112);
    let _ = writeln!(
        out,
        "# HELP {NAME} New connections to a Service port by outcome (accepted: DNATed to an endpoint; rejected: \
         the Service has no endpoint; firewalled: dropped by loadBalancerSourceRanges), counted in the kernel \
         and read in the background: as of {READ_TIMESTAMP}, at most --service-counters-period (or 20 reads' \
         duration) plus one read old."
    );
    let _ = writeln!(out, "# TYPE {NAME} counter");
    for c in counts {
        let (namespace, service, port) = split_port(&c.port);
        out.push_str(NAME);
        for (label, value) in [("{namespace", namespace), (",service", service), (",port", port)] {
            out.push_str(label);
            out.push_str("=\"");
            push_escaped(out, value);
            out.push('"');
        }
        let _ = writeln!(out, ",outcome=\"{}\"}} {}", c.outcome.label(), c.connections);
    }
}

/// `namespace/name:port` into its parts (the port name is empty for an unnamed port).
fn split_port(comment: &str) -> (&str, &str, &str) {
    let (namespace, rest) = comment.split_once('/').unwrap_or(("", comment));
    let (service, port) = rest.split_once(':').unwrap_or((rest, ""));
    (namespace, service, port)
}

/// A label value as the text format wants it.
fn push_escaped(out: &mut String, v: &str) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_layout::render::counters::Outcome;

    #[test]
    fn one_series_per_port_and_outcome() {
        let counts = vec![
            ServiceCount { port: "ns1/web:http".into(), outcome: Outcome::Accepted, connections: 3 },
            ServiceCount { port: "ns2/api".into(), outcome: Outcome::Rejected, connections: 1 },
        ];
        let mut text = String::new();
        format_counts(&counts, &mut text);
        assert!(text.contains(
            "verdict_service_connections_total{namespace=\"ns1\",service=\"web\",port=\"http\",outcome=\"accepted\"} 3\n"
        ));
        assert!(text.contains(
            "verdict_service_connections_total{namespace=\"ns2\",service=\"api\",port=\"\",outcome=\"rejected\"} 1\n"
        ));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 2);
    }

    #[test]
    fn label_values_are_escaped() {
        let counts =
            vec![ServiceCount { port: "n\\s/we\"b:x\ny".into(), outcome: Outcome::Firewalled, connections: 0 }];
        let mut text = String::new();
        format_counts(&counts, &mut text);
        assert!(text.contains("{namespace=\"n\\\\s\",service=\"we\\\"b\",port=\"x\\ny\",outcome=\"firewalled\"} 0\n"));
    }
}
