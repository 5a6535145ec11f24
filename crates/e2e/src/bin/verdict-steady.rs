//! `verdict-steady`: the steady-traffic harness ([`verdict_e2e::steady`]) as a program, for a
//! namespace (`ip netns exec NS verdict-steady ...`) or a VM.
//!
//! ```text
//! verdict-steady --tcp IP:PORT[,IP:PORT...] [--udp IP:PORT,...] [--expect POD,POD...]
//!                [--rate 20] [--long-lived 20] [--udp-flows 3] [--interval-ms 100]
//!                [--timeout-ms 1000] [--udp-source-port 47000] [--seconds S]
//! ```
//! It runs for `--seconds`, or without it until its standard input ends; a line `stop` on it
//! stops it either way, and a line `mark LABEL` marks the moment. It prints `ready` on stderr
//! once every long-lived connection and UDP flow has answered, then at the end the summary as
//! JSON on stdout and each disruption on stderr. Exit status: 0 undisrupted, 1 disrupted, 64 for
//! bad arguments.

use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use verdict_e2e::steady::{Config, Steady, Target};

const USAGE: &str = "usage: verdict-steady --tcp IP:PORT[,...] [--udp IP:PORT,...] [--expect POD,...] [--rate N] \
[--long-lived N] [--udp-flows N] [--interval-ms N] [--timeout-ms N] [--udp-source-port N] [--seconds S]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (config, seconds) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("verdict-steady: {e:#}\n{USAGE}");
            std::process::exit(64);
        }
    };
    match run(config, seconds) {
        Ok(clean) => std::process::exit(if clean { 0 } else { 1 }),
        Err(e) => {
            eprintln!("verdict-steady: {e:#}");
            std::process::exit(2);
        }
    }
}

fn targets(list: &str, expect: &[String]) -> Result<Vec<Target>> {
    list.split(',')
        .filter(|a| !a.is_empty())
        .map(|a| {
            let addr: SocketAddr = a.parse().with_context(|| format!("{a} is not IP:PORT"))?;
            Ok(Target { addr, pods: expect.to_vec() })
        })
        .collect()
}

fn parse(args: &[String]) -> Result<(Config, Option<Duration>)> {
    let mut c = Config::new(Vec::new(), Vec::new());
    let (mut tcp, mut udp, mut expect, mut seconds) = (String::new(), None, Vec::new(), None);
    for pair in args.chunks(2) {
        let flag = pair[0].as_str();
        let v = pair.get(1).with_context(|| format!("{flag} needs a value"))?;
        let n = || v.parse::<u64>().with_context(|| format!("{flag}: {v} is not a number"));
        match flag {
            "--tcp" => tcp = v.clone(),
            "--udp" => udp = Some(v.clone()),
            "--expect" => expect = v.split(',').map(str::to_string).collect(),
            "--rate" => c.new_per_second = v.parse().with_context(|| format!("--rate: {v} is not a number"))?,
            "--long-lived" => c.long_lived = n()? as usize,
            "--udp-flows" => c.udp_flows = n()? as usize,
            "--interval-ms" => c.interval = Duration::from_millis(n()?),
            "--timeout-ms" => c.timeout = Duration::from_millis(n()?),
            "--udp-source-port" => c.udp_source_port = u16::try_from(n()?).context("--udp-source-port")?,
            "--seconds" => seconds = Some(Duration::from_secs_f64(v.parse().context("--seconds")?)),
            other => bail!("unknown argument {other}"),
        }
    }
    c.tcp = targets(&tcp, &expect)?;
    // UDP goes to the TCP targets unless told otherwise.
    c.udp = match udp {
        Some(list) => targets(&list, &expect)?,
        None => c.tcp.clone(),
    };
    Ok((c, seconds))
}

enum Line {
    Mark(String),
    Stop,
}

fn run(config: Config, seconds: Option<Duration>) -> Result<bool> {
    let steady = Steady::start(None, config)?;
    eprintln!("ready");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let line = line.trim();
            let msg = match line.strip_prefix("mark ") {
                Some(label) => Line::Mark(label.to_string()),
                None if line == "stop" => Line::Stop,
                None => continue,
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        // Standard input ended; with --seconds the deadline decides.
        if seconds.is_none() {
            let _ = tx.send(Line::Stop);
        }
    });
    let deadline = seconds.map(|s| Instant::now() + s);
    loop {
        let wait = deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
        match rx.recv_timeout(wait) {
            Ok(Line::Mark(label)) => steady.mark(&label),
            Ok(Line::Stop) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(wait.min(Duration::from_millis(100)));
                if deadline.is_none_or(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
    }
    let summary = steady.stop();
    println!("{}", serde_json::to_string_pretty(&summary)?);
    let disruptions = summary.disruptions();
    for d in &disruptions {
        eprintln!("disrupted: {d}");
    }
    Ok(disruptions.is_empty())
}
