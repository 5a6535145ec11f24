//! The queue of problem notices from the sync loop and the health check server to the Event
//! publisher: bounded, so that a flood of problems (or an API server that is slow to take
//! Events) cannot grow the agent's memory. When it is full a notice is dropped and counted in
//! `verdict_events_dropped_total`, with a log line at most once a minute; problems also stay
//! visible in the logs and the `verdict_input_problems` gauge, so a dropped Event loses no
//! state, only one announcement of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, Receiver, Sender, error::TrySendError};
use verdict_controller::metrics as m;
use verdict_controller::sync::ProblemNotice;

/// How many notices wait for the publisher at most.
pub const CAPACITY: usize = 1024;

/// How often a full queue is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The sending side; cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct NoticeSender {
    tx: Sender<ProblemNotice>,
    dropped: Arc<Dropped>,
}

#[derive(Debug, Default)]
struct Dropped {
    total: AtomicU64,
    /// When a drop was last logged, and how many had been dropped by then.
    logged: Mutex<Option<(Instant, u64)>>,
}

/// A bounded queue of `capacity` notices.
pub fn queue(capacity: usize) -> (NoticeSender, Receiver<ProblemNotice>) {
    let (tx, rx) = mpsc::channel(capacity);
    (NoticeSender { tx, dropped: Arc::default() }, rx)
}

impl NoticeSender {
    /// Queues `notice`, or drops and counts it when the queue is full. A closed queue (no
    /// publisher, as in manifests mode) drops silently: there is nowhere to publish.
    pub fn send(&self, notice: ProblemNotice) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(notice) {
            let total = self.dropped.total.fetch_add(1, Ordering::Relaxed) + 1;
            metrics::counter!(m::EVENTS_DROPPED).increment(1);
            self.dropped.log(total, Instant::now());
        }
    }

    /// How many notices were dropped so far.
    #[cfg(test)]
    fn dropped(&self) -> u64 {
        self.dropped.total.load(Ordering::Relaxed)
    }
}

impl Dropped {
    /// Logs the drops since the last line, unless one was logged less than a minute ago.
    /// Returns whether it logged.
    fn log(&self, total: u64, now: Instant) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let since = match *logged {
            Some((at, _)) if now.duration_since(at) < LOG_EVERY => return false,
            Some((_, before)) => total - before,
            None => total,
        };
        *logged = Some((now, total));
        tracing::warn!(
            dropped = since,
            total,
            "the Event queue is full: problem Events dropped (the problems are still logged and counted)"
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_model::{ObjectKind, ObjectRef};

    fn notice(name: &str) -> ProblemNotice {
        ProblemNotice { object: ObjectRef::new(ObjectKind::Service, "default", name), problems: vec![] }
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_growing() {
        let (tx, mut rx) = queue(2);
        for i in 0..5 {
            tx.send(notice(&format!("s{i}")));
        }
        assert_eq!(tx.dropped(), 3);
        assert_eq!(rx.try_recv().unwrap().object.name, "s0");
        assert_eq!(rx.try_recv().unwrap().object.name, "s1");
        assert!(rx.try_recv().is_err(), "only the first two were queued");
        // Room again: the next one is queued.
        tx.send(notice("s5"));
        assert_eq!(rx.try_recv().unwrap().object.name, "s5");
        assert_eq!(tx.dropped(), 3);
    }

    #[test]
    fn a_closed_queue_drops_silently() {
        let (tx, rx) = queue(1);
        drop(rx);
        tx.send(notice("s"));
        assert_eq!(tx.dropped(), 0);
    }

    #[test]
    fn drops_are_logged_at_most_once_a_minute() {
        let d = Dropped::default();
        let t0 = Instant::now();
        assert!(d.log(1, t0));
        assert!(!d.log(2, t0 + Duration::from_secs(1)));
        assert!(!d.log(500, t0 + Duration::from_secs(59)));
        assert!(d.log(501, t0 + Duration::from_secs(60)));
        assert_eq!(*d.logged.lock().unwrap(), Some((t0 + Duration::from_secs(60), 501)));
    }
}
