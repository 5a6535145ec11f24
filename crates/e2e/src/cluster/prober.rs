//! A prober: a client that keeps opening connections to one address and counts what fails.

use crate::netns::Netns;
use crate::probe::{self, Outcome};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a prober saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Connections opened.
    pub attempts: usize,
    /// The failed ones: when (since the start) and how.
    pub failures: Vec<(Duration, Outcome)>,
    /// Answers per backend.
    pub backends: BTreeMap<String, usize>,
}

/// A running prober; [`Prober::stop`] returns its tally.
pub struct Prober {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Tally>,
}

impl Prober {
    /// Starts connecting to `target` from `src` inside `ns`, one connection every `every`.
    pub fn start(ns: &Netns, src: IpAddr, target: SocketAddr, every: Duration) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = format!("/run/netns/{}", ns.name());
        let handle = std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("namespace file");
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let started = Instant::now();
            let mut tally = Tally::default();
            while !flag.load(Ordering::Relaxed) {
                let outcome = probe::tcp_from(Some(src), target, Duration::from_secs(1));
                tally.attempts += 1;
                match &outcome {
                    Outcome::Reply(r) => *tally.backends.entry(r.backend.clone()).or_default() += 1,
                    _ => tally.failures.push((started.elapsed(), outcome)),
                }
                std::thread::sleep(every);
            }
            tally
        });
        Prober { stop, handle }
    }

    /// Stops and returns what it saw.
    pub fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the prober thread")
    }
}
