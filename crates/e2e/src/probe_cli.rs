//! `verdict-echo probe`: the client side of the kind e2e run, inside a test pod. It opens
//! connections to one address and checks what answered, so that each scenario step is one
//! `kubectl exec` whose exit status is the verdict.
//!
//! ```text
//! verdict-echo probe ADDR [--count N] [--expect NAME,NAME] [--masquerade yes|no]
//!                         [--refused | --dropped] [--for SECONDS --every MILLIS]
//!                         [--within SECONDS]
//! ```
//! `--expect` names must be the exact set of backends that answer (prefixes: `echo-a` matches
//! `echo-a-7d9f...`); `--for` keeps probing for that long and fails on any failed connection.

use crate::probe::{self, Outcome};
use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Spec {
    addr: Option<SocketAddr>,
    count: usize,
    expect: Vec<String>,
    masquerade: Option<bool>,
    refused: bool,
    dropped: bool,
    duration: Option<Duration>,
    every: Duration,
    within: Option<Duration>,
}

fn parse(args: &[String]) -> Result<Spec> {
    let mut spec = Spec { count: 10, every: Duration::from_millis(50), ..Spec::default() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--count" => spec.count = value()?.parse()?,
            "--expect" => spec.expect = value()?.split(',').map(str::to_string).collect(),
            "--masquerade" => spec.masquerade = Some(value()? == "yes"),
            "--refused" => spec.refused = true,
            "--dropped" => spec.dropped = true,
            "--for" => spec.duration = Some(Duration::from_secs(value()?.parse()?)),
            "--every" => spec.every = Duration::from_millis(value()?.parse()?),
            "--within" => spec.within = Some(Duration::from_secs(value()?.parse()?)),
            addr if spec.addr.is_none() => {
                spec.addr = Some(addr.parse().with_context(|| format!("{addr} is not IP:PORT"))?)
            }
            other => bail!("unexpected argument {other}"),
        }
    }
    Ok(spec)
}

/// Runs the probe; an error means the expectation failed.
pub fn run(args: &[String]) -> Result<()> {
    let spec = parse(args)?;
    let deadline = spec.within.map(|w| Instant::now() + w);
    loop {
        match check(&spec) {
            Err(e) if deadline.is_some_and(|d| Instant::now() < d) => {
                println!("not yet: {e:#}");
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

fn check(spec: &Spec) -> Result<()> {
    let addr = spec.addr.context("usage: verdict-echo probe IP:PORT [options]")?;
    let started = Instant::now();
    let mut outcomes = Vec::new();
    loop {
        outcomes.push(probe::tcp(addr, Duration::from_secs(1)));
        let done = match spec.duration {
            Some(d) => started.elapsed() >= d,
            None => outcomes.len() >= spec.count,
        };
        if done {
            break;
        }
        std::thread::sleep(spec.every);
    }
    let backends: BTreeSet<&str> = outcomes.iter().filter_map(|o| o.reply()).map(|r| r.backend.as_str()).collect();
    let failed = outcomes.iter().filter(|o| o.reply().is_none()).count();
    println!("{addr}: {} connections, {failed} failed, answered by {backends:?}", outcomes.len());
    if spec.refused {
        ensure!(outcomes.iter().all(|o| *o == Outcome::Refused), "expected every connection refused: {outcomes:?}");
        return Ok(());
    }
    if spec.dropped {
        ensure!(outcomes.iter().all(|o| *o == Outcome::Timeout), "expected every connection dropped: {outcomes:?}");
        return Ok(());
    }
    ensure!(
        failed == 0,
        "{failed} connections failed: {:?}",
        outcomes.iter().filter(|o| o.reply().is_none()).collect::<Vec<_>>()
    );
    if !spec.expect.is_empty() {
        let matched: BTreeSet<&str> = backends
            .iter()
            .filter_map(|b| spec.expect.iter().find(|e| b.starts_with(e.as_str())).map(String::as_str))
            .collect();
        let unexpected: Vec<&&str> =
            backends.iter().filter(|b| !spec.expect.iter().any(|e| b.starts_with(e.as_str()))).collect();
        ensure!(unexpected.is_empty(), "unexpected backends {unexpected:?}");
        ensure!(matched.len() == spec.expect.len(), "expected answers from {:?}, got {backends:?}", spec.expect);
    }
    if let Some(m) = spec.masquerade {
        let wrong: Vec<_> = outcomes.iter().filter_map(|o| o.reply()).filter(|r| !r.agrees_with(m, false)).collect();
        ensure!(wrong.is_empty(), "masquerade expected {m}: {wrong:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        let args: Vec<String> =
            "10.96.0.10:80 --count 5 --expect echo-a,echo-b --masquerade no".split(' ').map(str::to_string).collect();
        let s = parse(&args).unwrap();
        assert_eq!(s.addr, Some("10.96.0.10:80".parse().unwrap()));
        assert_eq!((s.count, s.expect.len(), s.masquerade), (5, 2, Some(false)));
        assert!(parse(&["nonsense".to_string()]).is_err());
    }
}
