//! EndpointSlices, packed: a [`StoredSlice`] is about 56 bytes per endpoint plus its vectors
//! and strings; packed, an IPv4 endpoint is seven or eight bytes (address, conditions, node).

use super::{Reader, Writer};
use crate::slices::{Conditions, Hints, Interner, StoredAddress, StoredEndpoint, StoredSlice};
use crate::source::EndpointPort;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, UNIX_EPOCH};

/// A stored slice, encoded. Node names are numbered by the cache's [`Interner`], so equal
/// slices pack to equal bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PackedSlice(Box<[u8]>);

const MISSING: u8 = 0;
const V4: u8 = 4;
const V6: u8 = 6;
const TEXT: u8 = 1;

/// A condition as two bits: absent, false, true.
fn tri(c: Option<bool>) -> u8 {
    match c {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    }
}

fn untri(bits: u8) -> Option<bool> {
    match bits & 3 {
        1 => Some(false),
        2 => Some(true),
        _ => None,
    }
}

impl PackedSlice {
    /// `slice` packed; its node names were interned in `names`.
    pub fn new(slice: &StoredSlice, names: &Interner) -> PackedSlice {
        let mut w = Writer::with_capacity(32 + 8 * slice.endpoints.len());
        w.str(&slice.service_name);
        w.str(&slice.address_type);
        w.len(slice.ports.len());
        for p in slice.ports.iter() {
            w.str(&p.name);
            w.str(&p.protocol);
            w.int(p.port);
        }
        match slice.trigger_time.map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default()) {
            None => w.byte(0),
            Some(d) => {
                w.byte(1);
                w.bytes(&d.as_secs().to_le_bytes());
                w.bytes(&d.subsec_nanos().to_le_bytes());
            }
        }
        w.len(slice.endpoints.len());
        for ep in slice.endpoints.iter() {
            match &ep.address {
                StoredAddress::Missing => w.byte(MISSING),
                StoredAddress::Ip(IpAddr::V4(a)) => {
                    w.byte(V4);
                    w.bytes(&a.octets());
                }
                StoredAddress::Ip(IpAddr::V6(a)) => {
                    w.byte(V6);
                    w.bytes(&a.octets());
                }
                StoredAddress::Text(t) => {
                    w.byte(TEXT);
                    w.str(t);
                }
            }
            let c = ep.conditions;
            w.byte(tri(c.ready) | tri(c.serving) << 2 | tri(c.terminating) << 4);
            w.len(ep.node_name.as_deref().map_or(0, |n| names.id(n) as usize + 1));
            match &ep.hints {
                None => w.byte(0),
                Some(h) => {
                    w.byte(1);
                    for list in [&h.zones, &h.nodes] {
                        match list {
                            None => w.byte(0),
                            Some(v) => {
                                w.byte(1);
                                w.strs(v);
                            }
                        }
                    }
                }
            }
        }
        PackedSlice(w.finish())
    }

    /// The Service the slice belongs to (its first field: nothing else is decoded).
    pub fn service_name(&self) -> &str {
        Reader::new(&self.0).str_ref()
    }

    /// The stored slice again.
    pub fn unpack(&self, names: &Interner) -> StoredSlice {
        let mut r = Reader::new(&self.0);
        let service_name = r.str_ref().into();
        let address_type = r.str_ref().into();
        let ports =
            (0..r.len()).map(|_| EndpointPort { name: r.string(), protocol: r.string(), port: r.int() }).collect();
        let trigger_time = (r.byte() == 1).then(|| {
            let secs = u64::from_le_bytes(r.take(8).try_into().expect("8 bytes"));
            let nanos = u32::from_le_bytes(r.take(4).try_into().expect("4 bytes"));
            UNIX_EPOCH + Duration::new(secs, nanos)
        });
        let endpoints = (0..r.len())
            .map(|_| {
                let address = match r.byte() {
                    V4 => StoredAddress::Ip(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(r.take(4)).expect("4")))),
                    V6 => StoredAddress::Ip(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(r.take(16)).expect("16")))),
                    TEXT => StoredAddress::Text(r.str_ref().into()),
                    _ => StoredAddress::Missing,
                };
                let c = r.byte();
                let conditions = Conditions { ready: untri(c), serving: untri(c >> 2), terminating: untri(c >> 4) };
                let node_name = match r.len() {
                    0 => None,
                    id => Some(names.name(id as u32 - 1)),
                };
                let hints = (r.byte() == 1).then(|| {
                    let mut list = || (r.byte() == 1).then(|| r.strings());
                    let zones = list();
                    let nodes = list();
                    Box::new(Hints { zones, nodes })
                });
                StoredEndpoint { address, conditions, node_name, hints }
            })
            .collect();
        StoredSlice { service_name, address_type, ports, endpoints, trigger_time }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source;
    use proptest::collection::vec;
    use proptest::option::of;
    use proptest::prelude::*;

    fn address() -> impl Strategy<Value = String> {
        prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(a, b)| format!("10.0.{a}.{b}")),
            any::<u16>().prop_map(|a| format!("fd00::{a:x}")),
            Just("10.01.0.1".to_string()),
            Just("FD00::1".to_string()),
            ".{0,10}",
        ]
    }

    fn endpoint() -> impl Strategy<Value = source::Endpoint> {
        (
            vec(address(), 0..2),
            (of(any::<bool>()), of(any::<bool>()), of(any::<bool>())),
            of(prop_oneof![Just("node-a".to_string()), Just("node-b".to_string()), ".{0,6}"]),
            (of(vec("[a-z]{0,4}", 0..3)), of(vec("[a-z]{0,4}", 0..3))),
        )
            .prop_map(|(addresses, (ready, serving, terminating), node_name, (zone_hints, node_hints))| {
                source::Endpoint {
                    addresses,
                    ready,
                    serving,
                    terminating,
                    node_name,
                    zone: None,
                    zone_hints,
                    node_hints,
                }
            })
    }

    fn slice() -> impl Strategy<Value = source::EndpointSlice> {
        let port = (".{0,6}", "[A-Z]{0,4}", of(any::<i32>())).prop_map(|(name, protocol, port)| EndpointPort {
            name,
            protocol,
            port,
        });
        ((".{0,8}", "[A-Za-z0-9]{0,5}"), vec(port, 0..3), vec(endpoint(), 0..20), of(0u64..4_000_000_000)).prop_map(
            |((service_name, address_type), ports, endpoints, t)| source::EndpointSlice {
                namespace: "ns".into(),
                name: "s".into(),
                service_name,
                address_type,
                ports,
                endpoints,
                trigger_time: t.map(|n| UNIX_EPOCH + Duration::from_nanos(n * 1_000_123)),
            },
        )
    }

    proptest! {
        #[test]
        fn a_slice_comes_back_as_it_went_in(a in slice(), b in slice()) {
            let mut names = Interner::default();
            let (sa, sb) = (StoredSlice::new(&a, &mut names), StoredSlice::new(&b, &mut names));
            let (pa, pb) = (PackedSlice::new(&sa, &names), PackedSlice::new(&sb, &names));
            prop_assert_eq!(pa.unpack(&names), sa.clone());
            prop_assert_eq!(pa.service_name(), &*sa.service_name);
            prop_assert_eq!(pa == pb, sa == sb);
        }
    }

    #[test]
    fn an_ipv4_endpoint_takes_eight_bytes() {
        let endpoints: Vec<source::Endpoint> = (0..10)
            .map(|i| source::Endpoint {
                addresses: vec![format!("10.1.0.{i}")],
                node_name: Some("node-a".into()),
                ..Default::default()
            })
            .collect();
        let s = source::EndpointSlice {
            service_name: "svc-12345".into(),
            address_type: "IPv4".into(),
            ports: vec![EndpointPort { name: "http".into(), protocol: "TCP".into(), port: Some(8080) }],
            endpoints,
            ..Default::default()
        };
        let mut names = Interner::default();
        let packed = PackedSlice::new(&StoredSlice::new(&s, &mut names), &names);
        assert!(packed.size() <= 40 + 10 * 8, "{} bytes", packed.size());
    }
}
