//! `verdict-load`: the data-plane benchmark's load generator and its server, both plain
//! threads over blocking sockets (no per-request allocation, no interpreter loop).
//!
//! ```text
//! verdict-load serve PORT [THREADS]             TCP: accept, write one byte, read to EOF;
//!                                               UDP: echo every datagram (same port)
//! verdict-load connect IP:PORT WORKERS SECONDS  connect + first byte + close (RST), in a loop
//! verdict-load bulk IP:PORT STREAMS SECONDS     S streams writing as fast as they can
//! verdict-load udp-rr IP:PORT WORKERS SECONDS   one datagram out, its echo back, in a loop
//! ```
//!
//! Each client mode prints one line of JSON. The server answers a connection inline in one of
//! its acceptor threads; a connection that sends data after the first byte (a bulk stream) is
//! handed to a thread of its own, so streams never hold up the short connections.

use anyhow::{Context, Result, bail};
use socket2::SockRef;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(1);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).with_context(|| format!("argument {i} missing; see the usage in the source"));
    match args.first().map(String::as_str) {
        Some("serve") => {
            let port: u16 = arg(1)?.parse()?;
            let acceptors = args.get(2).map_or(Ok(4), |a| a.parse())?;
            serve(port, acceptors)
        }
        Some(mode @ ("connect" | "bulk" | "udp-rr")) => {
            let to: SocketAddr = arg(1)?.parse().context("IP:PORT")?;
            let workers: usize = arg(2)?.parse()?;
            let secs: f64 = arg(3)?.parse()?;
            let d = Duration::from_secs_f64(secs);
            let json = match mode {
                "connect" => connect(to, workers, d),
                "bulk" => bulk(to, workers, d),
                _ => udp_rr(to, workers, d),
            }?;
            println!("{json}");
            Ok(())
        }
        _ => bail!("usage: verdict-load serve PORT | connect|bulk|udp-rr IP:PORT WORKERS SECONDS"),
    }
}

fn serve(port: u16, acceptors: usize) -> Result<()> {
    let addr = SocketAddr::from(([0, 0, 0, 0], port));
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    let listener: Arc<TcpListener> = Arc::new(s.into());
    let udp = UdpSocket::bind(addr)?;
    let mut handles = Vec::new();
    for _ in 0..acceptors {
        let listener = Arc::clone(&listener);
        handles.push(thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                answer(conn);
            }
        }));
    }
    // As many UDP threads as a client has workers, so that one pod (the floors' target) is
    // not slower to answer than ten (a Service's).
    for _ in 0..acceptors.min(16) {
        let udp = udp.try_clone()?;
        handles.push(thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, peer)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(&buf[..n], peer);
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// One byte out; then EOF (a short connection, done here) or data (a stream: its own thread).
fn answer(mut conn: TcpStream) {
    if conn.write_all(b"!").is_err() {
        return;
    }
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut first = [0u8; 1];
    if matches!(conn.read(&mut first), Ok(1)) {
        thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
        });
    }
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// W workers, each: connect (timed), read the server's byte, close with a reset (no TIME_WAIT,
/// so the client's ports never run out).
fn connect(to: SocketAddr, workers: usize, d: Duration) -> Result<String> {
    let start = Instant::now();
    let deadline = start + d;
    let results: Vec<(Vec<u32>, u64)> = thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(move || {
                    let (mut lat, mut errors) = (Vec::with_capacity(65536), 0u64);
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let Ok(mut c) = TcpStream::connect_timeout(&to, TIMEOUT) else {
                            errors += 1;
                            continue;
                        };
                        let us = t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                        let _ = c.set_read_timeout(Some(TIMEOUT));
                        let mut b = [0u8; 1];
                        if matches!(c.read(&mut b), Ok(1)) {
                            lat.push(us);
                        } else {
                            errors += 1;
                        }
                        let _ = SockRef::from(&c).set_linger(Some(Duration::ZERO));
                    }
                    (lat, errors)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker")).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let errors: u64 = results.iter().map(|r| r.1).sum();
    let mut lat: Vec<u32> = results.into_iter().flat_map(|r| r.0).collect();
    lat.sort_unstable();
    Ok(format!(
        r#"{{"mode":"connect","connections":{},"errors":{errors},"seconds":{secs:.3},"per_sec":{:.1},"p50_us":{},"p99_us":{}}}"#,
        lat.len(),
        lat.len() as f64 / secs,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    ))
}

/// Busy and total jiffies of all CPUs (namespaces share one kernel, so this is everything the
/// machine did: the load, the forwarding, and whatever else runs).
fn cpu_jiffies() -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat is empty")?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

/// S streams, each: connect, read the server's byte, then write until the deadline.
fn bulk(to: SocketAddr, streams: usize, d: Duration) -> Result<String> {
    let conns: Vec<TcpStream> = (0..streams)
        .map(|_| -> Result<TcpStream> {
            let mut c = TcpStream::connect_timeout(&to, TIMEOUT)?;
            c.set_read_timeout(Some(TIMEOUT))?;
            let mut b = [0u8; 1];
            c.read_exact(&mut b)?;
            Ok(c)
        })
        .collect::<Result<_>>()
        .context("opening the streams")?;
    let stop = AtomicBool::new(false);
    let (busy0, total0) = cpu_jiffies()?;
    let start = Instant::now();
    let bytes: u64 = thread::scope(|s| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut c| {
                let stop = &stop;
                s.spawn(move || {
                    let buf = vec![0x5au8; 128 * 1024];
                    let mut sent = 0u64;
                    let _ = c.set_write_timeout(Some(TIMEOUT));
                    while !stop.load(Ordering::Relaxed) {
                        match c.write(&buf) {
                            Ok(n) => sent += n as u64,
                            Err(_) => break,
                        }
                    }
                    sent
                })
            })
            .collect();
        thread::sleep(d);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().expect("a stream")).sum()
    });
    let secs = start.elapsed().as_secs_f64();
    let (busy1, total1) = cpu_jiffies()?;
    Ok(format!(
        r#"{{"mode":"bulk","streams":{streams},"bytes":{bytes},"seconds":{secs:.3},"bytes_per_sec":{:.0},"busy_jiffies":{},"total_jiffies":{}}}"#,
        bytes as f64 / secs,
        busy1 - busy0,
        total1 - total0
    ))
}

/// W workers, each with its own connected UDP socket (its own flow): send, wait for the echo.
fn udp_rr(to: SocketAddr, workers: usize, d: Duration) -> Result<String> {
    let start = Instant::now();
    let deadline = start + d;
    let results: Vec<Result<(u64, u64)>> = thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || -> Result<(u64, u64)> {
                    let sock = UdpSocket::bind("0.0.0.0:0")?;
                    sock.connect(to)?;
                    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
                    let (mut ok, mut lost) = (0u64, 0u64);
                    let mut seq = 0u64;
                    let mut buf = [0u8; 64];
                    while Instant::now() < deadline {
                        seq += 1;
                        let msg = [(w as u64).to_le_bytes(), seq.to_le_bytes()].concat();
                        sock.send(&msg)?;
                        // A late echo of an earlier request is skipped, not counted.
                        loop {
                            match sock.recv(&mut buf) {
                                Ok(16) if buf[8..16] == seq.to_le_bytes() => {
                                    ok += 1;
                                    break;
                                }
                                Ok(_) => continue,
                                Err(_) => {
                                    lost += 1;
                                    break;
                                }
                            }
                        }
                    }
                    Ok((ok, lost))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker")).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let (mut ok, mut lost) = (0, 0);
    for r in results {
        let (o, l) = r?;
        ok += o;
        lost += l;
    }
    Ok(format!(
        r#"{{"mode":"udp-rr","replies":{ok},"lost":{lost},"seconds":{secs:.3},"per_sec":{:.1}}}"#,
        ok as f64 / secs
    ))
}
