//! The harness's threads, each in the client's namespace: a scheduler and a pool for the new
//! connections, one thread per long-lived connection and per UDP flow. They record into
//! [`super::Records`] as things happen; blocking calls wait at most a poll period, so that a
//! stop is seen at once.

use super::summary::{Attempt, ConnEnd, FailureKind};
use super::{Shared, Target};
use crate::netns::spawn_in;
use crate::probe::parse_reply;
use anyhow::Result;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker blocks at most before it looks at the stop flag again.
const POLL: Duration = Duration::from_millis(20);

/// Starts every worker.
pub(super) fn spawn_all(netns: Option<&str>, shared: &Arc<Shared>) -> Vec<JoinHandle<Result<()>>> {
    let c = &shared.config;
    let mut out = Vec::new();
    if c.new_per_second > 0.0 {
        // Enough workers for every attempt of two timeouts to be in flight at once.
        let pool = ((c.new_per_second * c.timeout.as_secs_f64()).ceil() as usize * 2 + 2).max(4);
        let (tx, rx) = sync_channel::<usize>(4096);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..pool {
            let (shared, rx) = (Arc::clone(shared), Arc::clone(&rx));
            out.push(spawn_in(netns, move || attempts(&shared, &rx)));
        }
        let s = Arc::clone(shared);
        out.push(spawn_in(netns, move || {
            let period = Duration::from_secs_f64(1.0 / s.config.new_per_second);
            for i in 0.. {
                let due = s.start + period * i;
                while Instant::now() < due {
                    if s.stopping() {
                        return;
                    }
                    std::thread::sleep(POLL.min(due.saturating_duration_since(Instant::now())));
                }
                if s.stopping() || tx.send(i as usize).is_err() {
                    return;
                }
            }
        }));
    }
    for i in 0..c.long_lived {
        let s = Arc::clone(shared);
        out.push(spawn_in(netns, move || long_lived(&s, i)));
    }
    for i in 0..c.udp_flows {
        let s = Arc::clone(shared);
        out.push(spawn_in(netns, move || udp_flow(&s, i)));
    }
    out
}

/// A pool worker: runs the attempts the scheduler hands out until the stop.
fn attempts(shared: &Shared, rx: &Mutex<Receiver<usize>>) {
    let targets = &shared.config.tcp;
    loop {
        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv_timeout(POLL);
        let i = match next {
            Ok(i) => i,
            Err(RecvTimeoutError::Timeout) if !shared.stopping() => continue,
            Err(_) => return,
        };
        let target = &targets[i % targets.len()];
        let at_s = shared.now();
        let outcome = one_connection(target, shared.config.timeout);
        let attempt = Attempt { at_s, target: target.addr.to_string(), outcome };
        shared.records.attempts.lock().unwrap_or_else(|e| e.into_inner()).push(attempt);
    }
}

fn failure(e: &std::io::Error) -> (FailureKind, String) {
    (FailureKind::of(e), e.to_string())
}

fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, (FailureKind, String)> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| failure(&e))?;
    s.connect_timeout(&addr.into(), timeout).map_err(|e| failure(&e))?;
    let s: TcpStream = s.into();
    s.set_nodelay(true).map_err(|e| failure(&e))?;
    Ok(s)
}

/// Connect, one request, one answer, close; all within `timeout`.
fn one_connection(target: &Target, timeout: Duration) -> Result<String, (FailureKind, String)> {
    let deadline = Instant::now() + timeout;
    let mut s = connect(target.addr, timeout)?;
    s.set_write_timeout(Some(timeout)).map_err(|e| failure(&e))?;
    s.write_all(b"q\n").map_err(|e| failure(&e))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    let line = loop {
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            break String::from_utf8_lossy(&buf[..end]).into_owned();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((FailureKind::Timeout, "no answer within the timeout".into()));
        }
        s.set_read_timeout(Some(left)).map_err(|e| failure(&e))?;
        match s.read(&mut chunk) {
            Ok(0) => return Err((FailureKind::Closed, "closed before answering".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(failure(&e)),
        }
    };
    answer_of(target, &line)
}

/// The pod named by an answer the target accepts.
fn answer_of(target: &Target, line: &str) -> Result<String, (FailureKind, String)> {
    match parse_reply(line) {
        Some(r) if target.accepts(&r.backend) => Ok(r.backend),
        _ => Err((FailureKind::WrongAnswer, format!("answer {line:?}"))),
    }
}

/// One long-lived connection: a request every interval, one outstanding at a time.
fn long_lived(shared: &Shared, i: usize) {
    let c = &shared.config;
    let target = &c.tcp[i % c.tcp.len()];
    let log = &shared.records.conns[i];
    let record =
        |f: &mut dyn FnMut(&mut super::summary::ConnLog)| f(&mut log.lock().unwrap_or_else(|e| e.into_inner()));
    let mut s = match connect(target.addr, c.timeout) {
        Ok(s) => s,
        Err(e) => return record(&mut |l| l.open_failed = Some(e.clone())),
    };
    let end = |kind: FailureKind, detail: String| ConnEnd { at_s: shared.now(), kind, detail };
    if let Err(e) = s.set_read_timeout(Some(POLL)) {
        return record(&mut |l| l.ended = Some(end(FailureKind::Other, e.to_string())));
    }
    // Spread the connections' requests over the interval.
    let mut next = Instant::now() + c.interval.mul_f64(i as f64 / c.long_lived as f64);
    let (mut buf, mut chunk, mut waiting) = (Vec::new(), [0u8; 256], false);
    while !shared.stopping() {
        if !waiting {
            let now = Instant::now();
            if now < next {
                std::thread::sleep(POLL.min(next - now));
                continue;
            }
            if let Err(e) = s.write_all(b"q\n") {
                let (kind, detail) = failure(&e);
                return record(&mut |l| l.ended = Some(end(kind, detail.clone())));
            }
            next = now + c.interval;
            waiting = true;
            record(&mut |l| l.flow.sent(shared.now()));
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                return record(&mut |l| l.ended = Some(end(FailureKind::Closed, "closed by the other side".into())));
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                record(&mut |l| l.flow.waiting(shared.now(), c.timeout.as_secs_f64()));
            }
            Err(e) => {
                let (kind, detail) = failure(&e);
                return record(&mut |l| l.ended = Some(end(kind, detail.clone())));
            }
        }
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line[..pos]).into_owned();
            waiting = false;
            match answer_of(target, &line) {
                Ok(pod) => record(&mut |l| l.flow.answered(shared.now(), &pod)),
                Err(_) => record(&mut |l| l.wrong_answers += 1),
            }
        }
    }
}

/// One UDP flow from a fixed source port: a datagram every interval, answers as they come.
fn udp_flow(shared: &Shared, i: usize) {
    let c = &shared.config;
    let target = &c.udp[i % c.udp.len()];
    let log = &shared.records.flows[i];
    let record = |f: &mut dyn FnMut(&mut super::summary::UdpLog)| f(&mut log.lock().unwrap_or_else(|e| e.into_inner()));
    let port = c.udp_source_port + i as u16;
    let local: SocketAddr = if target.addr.is_ipv4() { ([0u8; 4], port).into() } else { ([0u16; 8], port).into() };
    let sock = match UdpSocket::bind(local)
        .and_then(|s| s.connect(target.addr).map(|()| s))
        .and_then(|s| s.set_read_timeout(Some(POLL)).map(|()| s))
    {
        Ok(s) => s,
        Err(e) => return record(&mut |l| l.open_failed = Some(format!("{local} -> {}: {e}", target.addr))),
    };
    let mut next = Instant::now() + c.interval.mul_f64(i as f64 / c.udp_flows as f64);
    let mut buf = [0u8; 512];
    while !shared.stopping() {
        if Instant::now() >= next {
            next += c.interval;
            match sock.send(b"q") {
                Ok(_) => record(&mut |l| l.flow.sent(shared.now())),
                Err(e) => record(&mut |l| l.flow.error(FailureKind::of(&e))),
            }
        }
        match sock.recv(&mut buf) {
            Ok(n) => {
                let line = String::from_utf8_lossy(&buf[..n]).into_owned();
                match answer_of(target, &line) {
                    Ok(pod) => record(&mut |l| l.flow.answered(shared.now(), &pod)),
                    Err(_) => record(&mut |l| l.wrong_answers += 1),
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                record(&mut |l| l.flow.waiting(shared.now(), c.timeout.as_secs_f64()));
            }
            // An ICMP error for an earlier datagram: counted, the flow goes on.
            Err(e) => record(&mut |l| {
                l.flow.error(FailureKind::of(&e));
                l.flow.waiting(shared.now(), c.timeout.as_secs_f64());
            }),
        }
    }
}
