//! The measures of one path through one contender, each a run of `verdict-load` in the
//! client's namespace.

use super::Path;
use super::lab::{Bins, Lab};
use crate::netns::Netns;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::net::SocketAddr;

/// Durations and concurrency.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seconds per measure.
    pub seconds: f64,
    /// Parallel clients for connections/s.
    pub workers: usize,
    /// Parallel clients for UDP request/response.
    pub udp_workers: usize,
}

/// New connections.
#[derive(Clone, Debug, Default)]
pub struct Connect {
    /// Completed connections per second (connect, first byte, close).
    pub per_sec: f64,
    /// Connect latency, median, µs.
    pub p50_us: f64,
    /// Connect latency, 99th percentile, µs.
    pub p99_us: f64,
    /// Connections that failed or timed out.
    pub errors: u64,
}

/// Established-flow throughput.
#[derive(Clone, Debug, Default)]
pub struct Bulk {
    /// Bytes per second.
    pub bytes_per_sec: f64,
    /// CPU seconds (all CPUs, busy jiffies) per GB moved.
    pub cpu_s_per_gb: f64,
}

/// Everything measured on one path; each measure is its result or why it failed.
#[derive(Clone, Debug)]
pub struct Measures {
    /// Connections per second and connect latency.
    pub connect: Result<Connect, String>,
    /// One stream.
    pub bulk1: Result<Bulk, String>,
    /// Eight streams.
    pub bulk8: Result<Bulk, String>,
    /// UDP request/response per second.
    pub udp_rr: Result<f64, String>,
}

fn load(ns: &Netns, bins: &Bins, mode: &str, to: SocketAddr, workers: usize, seconds: f64) -> Result<Value> {
    let out = ns.check(&[bins.load(), mode, &to.to_string(), &workers.to_string(), &format!("{seconds}")])?;
    serde_json::from_str(out.trim()).with_context(|| format!("verdict-load {mode} printed {out:?}"))
}

/// The same-node connect load once more, under a system-wide `perf record` with call graphs
/// (the kernel's softirq work runs in whichever context the packet arrives in, so only `-a`
/// sees all of it), written to `file`; what the load printed goes next to it (`.json`).
pub fn profile(lab: &Lab, bins: &Bins, to: SocketAddr, s: &Settings, file: &std::path::Path) -> Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let ns = lab.client(Path::Local);
    let out = std::process::Command::new("perf")
        .args(["record", "-a", "-g", "-F", "1999", "-q", "-o"])
        .arg(file)
        .args(["--", "ip", "netns", "exec", ns.name(), bins.load(), "connect"])
        .args([to.to_string(), s.workers.to_string(), format!("{}", s.seconds)])
        .output()
        .context("running perf (Debian: apt install linux-perf)")?;
    if !out.status.success() {
        bail!("perf record failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    // What the load achieved while recorded: samples per connection need the count.
    std::fs::write(file.with_extension("json"), &out.stdout)?;
    Ok(())
}

/// The median of each measure over rounds (failed rounds left out; failures summed): one
/// short run on a shared machine moves by several percent, and with it a contender's place in
/// the order.
pub fn median(rounds: &[Measures]) -> Measures {
    fn mid(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
    fn each<T: Clone>(
        rounds: &[Measures],
        pick: impl Fn(&Measures) -> &Result<T, String>,
        combine: impl Fn(&[&T]) -> T,
    ) -> Result<T, String> {
        let ok: Vec<&T> = rounds.iter().filter_map(|m| pick(m).as_ref().ok()).collect();
        match (ok.is_empty(), rounds.first()) {
            (false, _) => Ok(combine(&ok)),
            (true, Some(first)) => pick(first).clone(),
            (true, None) => Err("not measured".into()),
        }
    }
    let bulk = |b: &[&Bulk]| Bulk {
        bytes_per_sec: mid(b.iter().map(|b| b.bytes_per_sec).collect()),
        cpu_s_per_gb: mid(b.iter().map(|b| b.cpu_s_per_gb).collect()),
    };
    Measures {
        connect: each(
            rounds,
            |m| &m.connect,
            |c| Connect {
                per_sec: mid(c.iter().map(|c| c.per_sec).collect()),
                p50_us: mid(c.iter().map(|c| c.p50_us).collect()),
                p99_us: mid(c.iter().map(|c| c.p99_us).collect()),
                errors: c.iter().map(|c| c.errors).sum(),
            },
        ),
        bulk1: each(rounds, |m| &m.bulk1, bulk),
        bulk8: each(rounds, |m| &m.bulk8, bulk),
        udp_rr: each(rounds, |m| &m.udp_rr, |r| mid(r.iter().map(|r| **r).collect())),
    }
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v[key].as_f64().with_context(|| format!("no {key} in {v}"))
}

/// USER_HZ: /proc/stat counts in hundredths of a second.
const JIFFIES_PER_SECOND: f64 = 100.0;

fn bulk(ns: &Netns, bins: &Bins, to: SocketAddr, streams: usize, s: &Settings) -> Result<Bulk> {
    let v = load(ns, bins, "bulk", to, streams, s.seconds)?;
    let bytes = num(&v, "bytes")?;
    if bytes <= 0.0 {
        bail!("no bytes moved");
    }
    Ok(Bulk {
        bytes_per_sec: num(&v, "bytes_per_sec")?,
        cpu_s_per_gb: num(&v, "busy_jiffies")? / JIFFIES_PER_SECOND / (bytes / 1e9),
    })
}

/// Runs every measure of `path` against `to`.
pub fn path(lab: &Lab, bins: &Bins, path: Path, to: SocketAddr, s: &Settings) -> Measures {
    let ns = lab.client(path);
    let connect = (|| -> Result<Connect> {
        let v = load(ns, bins, "connect", to, s.workers, s.seconds)?;
        let c = Connect {
            per_sec: num(&v, "per_sec")?,
            p50_us: num(&v, "p50_us")?,
            p99_us: num(&v, "p99_us")?,
            errors: v["errors"].as_u64().unwrap_or(0),
        };
        if c.per_sec <= 0.0 {
            bail!("no connection completed ({} errors)", c.errors);
        }
        Ok(c)
    })();
    let udp_rr = (|| -> Result<f64> {
        let v = load(ns, bins, "udp-rr", to, s.udp_workers, s.seconds)?;
        let rate = num(&v, "per_sec")?;
        if rate <= 0.0 {
            bail!("no reply ({} lost)", v["lost"]);
        }
        Ok(rate)
    })();
    let text = |e: anyhow::Error| format!("{e:#}").lines().next().unwrap_or("failed").to_string();
    Measures {
        connect: connect.map_err(text),
        bulk1: bulk(ns, bins, to, 1, s).map_err(text),
        bulk8: bulk(ns, bins, to, 8, s).map_err(text),
        udp_rr: udp_rr.map_err(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(per_sec: f64, udp: Result<f64, String>) -> Measures {
        let bulk = Ok(Bulk { bytes_per_sec: per_sec, cpu_s_per_gb: 1.0 });
        Measures {
            connect: Ok(Connect { per_sec, p50_us: per_sec / 1000.0, p99_us: 1.0, errors: 1 }),
            bulk1: bulk.clone(),
            bulk8: bulk,
            udp_rr: udp,
        }
    }

    #[test]
    fn the_median_of_rounds_leaves_failed_rounds_out_and_sums_failures() {
        let m = median(&[round(30.0, Ok(5.0)), round(10.0, Err("lost".into())), round(20.0, Ok(7.0))]);
        let c = m.connect.unwrap();
        assert_eq!((c.per_sec, c.p50_us, c.errors), (20.0, 0.02, 3));
        assert_eq!(m.udp_rr, Ok(6.0), "the two rounds that answered");
        assert_eq!(m.bulk8.unwrap().bytes_per_sec, 20.0);
        let failed = median(&[round(1.0, Err("lost".into())), round(2.0, Err("again".into()))]);
        assert_eq!(failed.udp_rr, Err("lost".into()));
    }
}
