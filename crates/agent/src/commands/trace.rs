//! `verdict trace`: real new connections to a destination, followed through the kernel's
//! table with nftables tracing.
//!
//! Two temporary base chains flag matching new connections (`meta nftrace set 1`); the
//! kernel then reports every rule, chain end and policy each flagged packet passes, and
//! those events are told in the table's terms. The chains are added in one transaction and
//! removed in one: on exit, on an error, on Ctrl-C, SIGTERM and SIGHUP; if this process is killed
//! outright, a running agent removes them once the deadline their names carry has passed.

use crate::cli::TraceArgs;
use crate::commands::explain::parse_destination;
use crate::config::parse_duration;
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verdict_model::Cidr;
use verdict_nft::netlink::Netlink;
use verdict_nft::netlink::trace::{TraceListener, TraceRead};
use verdict_nft::observe::{Observed, observe};
use verdict_nft::trace::chains::{self, TraceSpec};
use verdict_nft::trace::{Collector, Connection, describe};

/// A packet passes every hook within microseconds: a connection without events for this
/// long is complete.
const QUIET: Duration = Duration::from_millis(300);

/// `verdict trace`.
pub fn run(args: &TraceArgs) -> Result<()> {
    let (dst, protocol) = parse_destination(&args.dst)?;
    let src = match &args.src {
        None => None,
        Some(raw) => {
            let cidr = Cidr::parse_tolerant(raw)
                .or_else(|| verdict_model::parse_ip_tolerant(raw).map(Cidr::host))
                .with_context(|| format!("--src {raw:?} is not a CIDR or an address"))?;
            if cidr.addr().is_ipv4() != dst.ip().is_ipv4() {
                bail!("--src {raw} and --dst {} are of different address families", args.dst);
            }
            Some(cidr)
        }
    };
    let duration = parse_duration(&args.duration)
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--for {:?} is not a duration (e.g. 30s, 5m)", args.duration))?;
    // A running agent keeps trace chains only for that long (see `chains::check_base`).
    if duration > chains::MAX_DURATION {
        bail!("--for {} is longer than a trace may run (1h)", args.duration);
    }
    if args.count == Some(0) {
        bail!("--count 0 would trace nothing");
    }
    crate::privileges::ensure_net_admin()?;

    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop))?;

    let mut nl = Netlink::open().context("opening netlink (verdict trace needs CAP_NET_ADMIN)")?;
    let mut live = read_table(&mut nl, &args.table)?;
    // Listen before the chains exist, so that no event of the first connection is missed.
    let mut listener = TraceListener::open(Duration::from_millis(100)).context("joining the nftables trace group")?;
    let until =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) + (duration + chains::GRACE).as_secs();
    let spec = TraceSpec { dst: dst.ip(), port: dst.port(), protocol, src, until };
    let chains = chains::trace_chains(&spec, &std::process::id().to_string());
    nl.commit(&chains::install(&args.table, &chains)).context("adding the trace chains")?;
    let mut installed =
        Installed { nl, table: args.table.clone(), names: chains.iter().map(|c| c.name.clone()).collect() };

    let what = verdict_nft::trace::path::destination(dst.ip(), dst.port(), protocol.number());
    let from = src.map(|s| format!(" from {s}")).unwrap_or_default();
    let limit = args.count.map(|n| format!(", at most {n} connection(s)")).unwrap_or_default();
    println!(
        "tracing new connections to {what}{from} in table inet {} for {}{limit} (Ctrl-C stops)",
        args.table, args.duration
    );

    let mut collector = Collector::new(&args.table);
    let deadline = Instant::now() + duration;
    let mut shown = 0u32;
    let done = |shown: u32| args.count.is_some_and(|n| shown >= n);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && !done(shown) {
        match listener.read().context("reading trace events")? {
            TraceRead::Events(events) => {
                let now = Instant::now();
                for ev in events {
                    collector.add(ev, now);
                }
            }
            TraceRead::Overflow => eprintln!("verdict: trace events were lost (the socket overflowed)"),
            TraceRead::Malformed(e) => eprintln!("verdict: skipped a trace message: {e}"),
        }
        for conn in collector.finished(Instant::now(), QUIET) {
            if done(shown) {
                break;
            }
            show(&conn, &mut installed, &mut live);
            shown += 1;
        }
    }
    for conn in collector.drain() {
        if !done(shown) {
            show(&conn, &mut installed, &mut live);
            shown += 1;
        }
    }
    let why = if stop.load(Ordering::Relaxed) {
        "signalled"
    } else if done(shown) {
        "count reached"
    } else {
        "time is up"
    };
    installed.remove().context("removing the trace chains")?;
    println!("{shown} connection(s) traced ({why}); trace chains removed");
    Ok(())
}

/// Prints one connection, re-reading the table first when it names rules the copy read
/// earlier does not have (the agent rewrote a chain since).
fn show(conn: &Connection, nl: &mut Installed, live: &mut Observed) {
    let unknown = conn.events.iter().any(|e| {
        e.table == nl.table
            && !chains::is_trace_chain(&e.chain)
            && e.handle.is_some_and(|h| !live.handles.contains_key(&h))
    });
    if unknown && let Ok(fresh) = read_table(&mut nl.nl, &nl.table) {
        *live = fresh;
    }
    print!("{}", describe(conn, &nl.table, live));
}

fn read_table(nl: &mut Netlink, table: &str) -> Result<Observed> {
    observe(nl, table).context("reading the table from the kernel")?.with_context(|| {
        format!("the kernel has no table inet {table}: verdict has not programmed this node (or uses another --table)")
    })
}

/// The trace chains while they exist: removed on drop too (an error or a panic on the way).
struct Installed {
    nl: Netlink,
    table: String,
    names: Vec<String>,
}

impl Installed {
    fn remove(&mut self) -> Result<()> {
        let names = std::mem::take(&mut self.names);
        if names.is_empty() {
            return Ok(());
        }
        self.nl.commit(&chains::removal(&self.table, &names))?;
        Ok(())
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("verdict: could not remove the trace chains: {e:#}; the agent's next full sync removes them");
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session, whose default action would
/// kill the process with its chains in place) set `stop` (the loop notices within its 100 ms
/// wait), so that the chains are removed before the process exits. Registered before the
/// chains are added.
fn watch_signals(stop: Arc<AtomicBool>) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (mut int, mut term, mut hup) = {
        let _guard = rt.enter();
        (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?, signal(SignalKind::hangup())?)
    };
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    Ok(())
}
