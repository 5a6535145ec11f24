//! Issue 23, with real packets: a Service from an untrusted namespace cannot take, wipe or
//! open another Service's traffic. Each test programs node1 with the owner's Services, opens
//! the owner's flows (a UDP flow to kube-dns's ClusterIP, a TCP connection to the API
//! server's), adds the hostile Service and runs the conntrack cleanup as the agent does after
//! a sync, then deletes it and runs the cleanup again. Through all of it the owner's flows
//! keep their conntrack entries (same ids) and their endpoints, new connections still reach
//! the owner, and the hostile object is reported as a problem.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;
use verdict_controller::conntrack::ConntrackCleaner;
use verdict_controller::sync::AfterSync;
use verdict_e2e::flows::{self, entry_of};
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{Cond, Eps, Expect, From, Lab, Svc};
use verdict_model::{BuildOutput, ProxyModel};

const DNS: &str = "172.30.0.10:53";
const API: &str = "172.30.0.1:443";
const HOSTILE_NAMESPACE: &str = "attacker";

fn lab(tag: &str) -> Lab {
    Lab::new(tag, Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab")
}

/// kube-dns (UDP 53, endpoint b1) and the API server's Service (TCP 443, endpoint b2).
fn owners(lab: &Lab) -> (Vec<Svc>, Vec<Eps>) {
    let services = vec![
        Svc::new("kube-dns", &["172.30.0.10"]).port("dns", "UDP", 53),
        Svc::new("kubernetes", &["172.30.0.1"]).port("https", "TCP", 443),
    ];
    let slices = vec![
        Eps::v4("kube-dns").port("dns", "UDP", 8080).pod(lab, "b1", Cond::Ready),
        Eps::v4("kubernetes").port("https", "TCP", 8080).pod(lab, "b2", Cond::Ready),
    ];
    (services, slices)
}

/// A Service of the untrusted namespace.
fn hostile(svc: Svc) -> Svc {
    let mut svc = svc;
    svc.0.namespace = HOSTILE_NAMESPACE.into();
    svc
}

/// An EndpointSlice of the untrusted namespace.
fn hostile_slice(eps: Eps) -> Eps {
    let mut eps = eps;
    eps.0.namespace = HOSTILE_NAMESPACE.into();
    eps
}

/// A UDP flow from pod c1: one socket, so one conntrack entry, asked again and again.
struct UdpFlow {
    socket: UdpSocket,
}

impl UdpFlow {
    fn open(lab: &Lab, to: &str) -> UdpFlow {
        let c1 = lab.cluster.pod("c1");
        let to: SocketAddr = to.parse().unwrap();
        let socket = c1.ns.run(|| {
            let s = UdpSocket::bind((c1.ip(to.is_ipv6()), 0)).unwrap();
            s.connect(to).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s
        });
        UdpFlow { socket }
    }

    fn port(&self) -> u16 {
        self.socket.local_addr().unwrap().port()
    }

    /// Who answers a datagram on this flow.
    fn ask(&self) -> Option<String> {
        self.socket.send(b"who").ok()?;
        let mut buf = [0u8; 256];
        let n = self.socket.recv(&mut buf).ok()?;
        verdict_e2e::probe::parse_reply(&String::from_utf8_lossy(&buf[..n])).map(|r| r.backend)
    }
}

/// The owner's flows, held open across the hostile Service's life.
struct OwnerFlows {
    dns: UdpFlow,
    api: TcpStream,
    entries: Vec<Option<String>>,
}

impl OwnerFlows {
    fn open(lab: &Lab) -> OwnerFlows {
        let dns = UdpFlow::open(lab, DNS);
        assert_eq!(dns.ask().as_deref(), Some("b1"), "kube-dns answers at first");
        let c1 = lab.cluster.pod("c1");
        let api = c1.ns.run(|| TcpStream::connect_timeout(&API.parse().unwrap(), Duration::from_secs(2)).expect("API"));
        let mut flows = OwnerFlows { dns, api, entries: Vec::new() };
        flows.entries = flows.now(lab);
        assert!(flows.entries.iter().all(Option::is_some), "the owner's entries exist: {:?}", flows.entries);
        flows
    }

    fn now(&self, lab: &Lab) -> Vec<Option<String>> {
        let entries = flows::entries(&lab.cluster.nodes[0].ns);
        [self.dns.port(), self.api.local_addr().unwrap().port()].iter().map(|&p| entry_of(&entries, p)).collect()
    }

    /// The flows kept their entries, and kube-dns's flow still reaches b1.
    fn intact(&self, lab: &Lab, when: &str) {
        assert_eq!(self.now(lab), self.entries, "{when}: the owner's conntrack entries changed");
        assert_eq!(self.dns.ask().as_deref(), Some("b1"), "{when}: kube-dns's flow");
    }
}

/// Programs `after` over `before` and runs the conntrack cleanup as the agent does after it.
fn sync(lab: &Lab, before: &ProxyModel, after: &ProxyModel) {
    lab.program(after);
    let changes = flows::changes(before, after);
    lab.cluster.nodes[0].ns.run(|| ConntrackCleaner::new().after_sync(after, false, &changes));
}

/// The owner's Services with `extra` added.
fn with(lab: &Lab, extra_services: &[Svc], extra_slices: &[Eps]) -> BuildOutput {
    let (mut services, mut slices) = owners(lab);
    services.extend(extra_services.iter().cloned());
    slices.extend(extra_slices.iter().cloned());
    lab.build(lab.config(), &services, &slices)
}

/// The node's IPv6 conntrack entries (`conntrack -L` lists IPv4 only unless told).
fn v6_entries(lab: &Lab) -> Vec<String> {
    let out = lab.cluster.nodes[0].ns.check(&["conntrack", "-L", "-f", "ipv6", "-o", "id"]).expect("conntrack -L");
    out.lines().map(str::to_string).collect()
}

fn reported(out: &BuildOutput, reason: &str) -> bool {
    out.problems.iter().any(|p| p.reason == reason && p.object.namespace == HOSTILE_NAMESPACE)
}

/// The owner's new connections: DNS from a pod, the API server from a pod.
fn owners_answer(lab: &Lab, rs: &verdict_nft::Ruleset) {
    lab.check(rs, From::Pod("c1"), &format!("{DNS}/udp"), Expect::pods(&["b1"], false));
    lab.check(rs, From::Pod("c1"), API, Expect::pods(&["b2"], false));
}

/// Runs the hostile Service's life over the owner's held flows.
fn hostile_life(lab: &Lab, hostile: &BuildOutput) {
    let alone = with(lab, &[], &[]);
    assert!(alone.problems.is_empty(), "{:?}", alone.problems);
    lab.program(&alone.model);
    let flows = OwnerFlows::open(lab);

    sync(lab, &alone.model, &hostile.model);
    flows.intact(lab, "with the hostile Service");
    owners_answer(lab, &lab.program(&hostile.model));

    sync(lab, &hostile.model, &alone.model);
    flows.intact(lab, "after the hostile Service is deleted");
    owners_answer(lab, &lab.program(&alone.model));
}

#[test]
fn an_external_ip_on_another_services_cluster_ip_takes_neither_its_traffic_nor_its_flows() {
    require_kernel!();
    let lab = lab("hostext");
    // The CVE-2020-8554 squatter, named before the owners: kube-dns's and the API server's
    // ClusterIPs as its externalIPs, on their ports, with an endpoint of its own (a1).
    let squatter = hostile(
        Svc::new("aaa-squatter", &["172.30.0.99"])
            .port("dns", "UDP", 53)
            .port("https", "TCP", 443)
            .external_ips(&["172.30.0.10", "172.30.0.1"]),
    );
    let slice = hostile_slice(Eps::v4("aaa-squatter").port("dns", "UDP", 8080).port("https", "TCP", 8080).pod(
        &lab,
        "a1",
        Cond::Ready,
    ));
    let out = with(&lab, &[squatter], &[slice]);
    assert!(reported(&out, "AddressConflict"), "the squatter is told: {:?}", out.problems);
    hostile_life(&lab, &out);
    // Its own ClusterIP still works: only what it does not own is refused.
    let rs = lab.program(&out.model);
    lab.check(&rs, From::Pod("c1"), "172.30.0.99:53/udp", Expect::pods(&["a1"], false));
}

#[test]
fn an_ipv4_mapped_external_ip_is_refused_and_flushes_nobodys_flows() {
    require_kernel!();
    let lab = lab("hostmap");
    // No endpoints: were `::ffff:172.30.0.10` read as IPv4 by the cleanup, creating and
    // deleting this Service would delete every UDP flow of kube-dns.
    let mapped =
        hostile(Svc::new("mapped", &["172.30.0.98"]).port("dns", "UDP", 53).external_ips(&["::ffff:172.30.0.10"]));
    let empty = hostile_slice(Eps::v4("mapped").port("dns", "UDP", 8080));
    let out = with(&lab, &[mapped], &[empty]);
    assert!(reported(&out, "InvalidExternalIP"), "the mapped address is refused: {:?}", out.problems);
    hostile_life(&lab, &out);
}

#[test]
fn special_external_ips_are_refused_and_change_nothing() {
    require_kernel!();
    let lab = lab("hostspec");
    let special = hostile(Svc::new("special", &["172.30.0.97"]).port("dns", "UDP", 53).external_ips(&[
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.251",
        "127.0.0.1",
        "169.254.169.254",
    ]));
    let out = with(&lab, &[special], &[]);
    let refused = out.problems.iter().filter(|p| p.reason == "InvalidExternalIP").count();
    assert_eq!(refused, 5, "each special address is refused: {:?}", out.problems);
    hostile_life(&lab, &out);
    let listing = verdict_nft::text::listing(&lab.program(&out.model));
    for ip in ["0.0.0.0 ", "255.255.255.255", "224.0.0.251", "127.0.0.1 .", "169.254.169.254"] {
        assert!(!listing.contains(ip), "{ip} is programmed:\n{listing}");
    }
}

#[test]
fn a_source_range_that_cannot_be_applied_drops_the_load_balancer_traffic() {
    require_kernel!();
    let lab = lab("hostrange");
    let lb = |ranges: &[&str]| {
        hostile(
            Svc::new("lb", &["172.30.0.43"]).port("http", "TCP", 80).load_balancer(&["1.2.3.4"]).source_ranges(ranges),
        )
    };
    let eps = hostile_slice(Eps::v4("lb").port("http", "TCP", 8080).pod(&lab, "a1", Cond::Ready));

    // The control: the range as IPv4 lets its client in.
    let open = with(&lab, &[lb(&["203.0.113.0/25"])], std::slice::from_ref(&eps));
    let rs = lab.program(&open.model);
    lab.check(&rs, From::ExternalAt("203.0.113.2"), "1.2.3.4:80", Expect::pods(&["a1"], true));

    // The same range written as IPv4-mapped IPv6 cannot be applied: it fails closed, for the
    // client it meant and every other, and says why; the ClusterIP is not filtered.
    let closed = with(&lab, &[lb(&["::ffff:203.0.113.0/121"])], &[eps]);
    assert!(reported(&closed, "InvalidSourceRange"), "{:?}", closed.problems);
    let rs = lab.program(&closed.model);
    lab.check(&rs, From::ExternalAt("203.0.113.2"), "1.2.3.4:80", Expect::Drop);
    lab.check(&rs, From::External, "1.2.3.4:80", Expect::Drop);
    lab.check(&rs, From::Pod("c1"), "172.30.0.43:80", Expect::pods(&["a1"], false));
    owners_answer(&lab, &rs);
}

#[test]
fn an_object_over_the_element_cap_is_left_out_and_the_rest_is_programmed() {
    require_kernel!();
    let lab = lab("hostbig");
    // 20 ports x 31 addresses, no endpoints: 640 objects (a cluster-ips element and a
    // no-endpoint element per address and port), over a cap of 100.
    let ips: Vec<String> = (1..=30).map(|i| format!("192.168.99.{i}")).collect();
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    let mut big = Svc::new("big", &["172.30.0.96"]).external_ips(&ip_refs);
    for port in 0..20 {
        big = big.port(&format!("p{port}"), "TCP", 1000 + port);
    }
    let big = hostile(big);
    let (mut services, slices) = owners(&lab);
    services.push(big);
    let config = verdict_model::ProxyConfig { max_elements_per_service: 100, ..lab.config() };
    let out = lab.build(config, &services, &slices);
    assert!(reported(&out, "TooManyElements"), "{:?}", out.problems);
    assert!(
        out.model.services.keys().all(|name| &*name.namespace != HOSTILE_NAMESPACE),
        "the big Service is left out whole"
    );
    let rs = lab.program(&out.model);
    let listing = verdict_nft::text::listing(&rs);
    assert!(!listing.contains("192.168.99.") && !listing.contains("172.30.0.96"), "{listing}");
    owners_answer(&lab, &rs);
}

#[test]
fn a_single_stack_service_takes_neither_the_other_familys_address_nor_its_flows() {
    require_kernel!();
    let lab = lab("hostfam");
    // A dual-stack Service answering DNS on an IPv6 externalIP, and an IPv4-only Service of
    // the untrusted namespace (named first) listing that address too, with an endpoint of its
    // own. Upstream's per-family proxiers ignore the IPv4-only Service's IPv6 address.
    const EXTERNAL: &str = "[2001:db8:99::53]:53";
    let victim = Svc::new("victim", &["172.30.0.60", "fd00:172:30::60"])
        .port("dns", "UDP", 53)
        .external_ips(&["2001:db8:99::53"]);
    let victim_slices = [
        Eps::v4("victim").port("dns", "UDP", 8080).pod(&lab, "a1", Cond::Ready),
        Eps::v6("victim").port("dns", "UDP", 8080).pod(&lab, "a1", Cond::Ready),
    ];
    let contender =
        hostile(Svc::new("contender", &["172.30.0.61"]).port("dns", "UDP", 53).external_ips(&["2001:db8:99::53"]));
    let contender_slice = hostile_slice(Eps::v4("contender").port("dns", "UDP", 8080).pod(&lab, "a2", Cond::Ready));

    let alone = with(&lab, std::slice::from_ref(&victim), &victim_slices);
    assert!(alone.problems.is_empty(), "{:?}", alone.problems);
    lab.program(&alone.model);
    let flow = UdpFlow::open(&lab, EXTERNAL);
    assert_eq!(flow.ask().as_deref(), Some("a1"), "the victim answers on its IPv6 externalIP");
    let entry = entry_of(&v6_entries(&lab), flow.port());
    assert!(entry.is_some(), "the flow's entry exists");

    let mut slices = victim_slices.to_vec();
    slices.push(contender_slice);
    let contended = with(&lab, &[victim, contender], &slices);
    assert!(contended.problems.is_empty(), "{:?}", contended.problems);
    for (before, after, when) in
        [(&alone, &contended, "with the contender"), (&contended, &alone, "after it is deleted")]
    {
        sync(&lab, &before.model, &after.model);
        assert_eq!(entry_of(&v6_entries(&lab), flow.port()), entry, "{when}: the victim's IPv6 flow's entry changed");
        assert_eq!(flow.ask().as_deref(), Some("a1"), "{when}: the victim's IPv6 flow");
        let rs = lab.program(&after.model);
        lab.check(&rs, From::Pod("c1"), &format!("{EXTERNAL}/udp"), Expect::pods(&["a1"], true));
    }
}
