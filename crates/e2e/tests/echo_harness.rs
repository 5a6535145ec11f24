//! The harness itself: pods answer with their name, and the source they see is the client's.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::{require_kernel, topology};

#[test]
fn pods_answer_with_their_name_over_every_protocol() {
    require_kernel!();
    let c = topology::build("harn", &[&["pod-a", "client"]], Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).unwrap();
    let client = c.pod("client");
    let a = c.pod("pod-a");
    for v6 in [false, true] {
        let addr = SocketAddr::new(a.ip(v6), topology::ECHO_PORT);
        let t = client.ns.run(|| probe::tcp(addr, Duration::from_secs(2)));
        assert_eq!(t.reply().map(|r| (r.backend.as_str(), r.peer)), Some(("pod-a", client.ip(v6))), "{t:?}");
        let u = client.ns.run(|| probe::udp(addr, Duration::from_secs(2)));
        assert_eq!(u.reply().map(|r| r.backend.as_str()), Some("pod-a"), "{u:?}");
    }
    // Nothing listens on port 1: refused, not a timeout.
    let refused = client.ns.run(|| probe::tcp(SocketAddr::new(IpAddr::V4(a.ipv4), 1), Duration::from_secs(2)));
    assert_eq!(refused, Outcome::Refused);
}
