//! What building a Service's endpoints reads from its EndpointSlices, in two forms: the source
//! record as the API server spells it, and [`StoredSlice`], the compact copy the
//! [`crate::ModelCache`] keeps of every slice.
//!
//! The cache must keep every slice (a change to one rebuilds its Service from all of them), and
//! as source records slices were the largest thing the agent held: about 170 bytes per endpoint,
//! mostly strings (the address, its vector, the node name). The stored form keeps only what the
//! model reads, with canonical addresses as [`IpAddr`] and node names shared, about 56 bytes per
//! endpoint. Both forms go through the same [`SliceView`], so validation and its problems are
//! written once.

use crate::source;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::SystemTime;

/// An endpoint's first address (the one kube-proxy uses).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Address<'a> {
    /// An address already parsed from its canonical spelling.
    Ip(IpAddr),
    /// The address as written, to be parsed (and perhaps rejected) by the builder.
    Text(&'a str),
}

/// An EndpointSlice as the builder reads it.
pub(crate) trait SliceView {
    /// Its endpoints.
    type Endpoint: EndpointView;
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
    fn address_type(&self) -> &str;
    fn ports(&self) -> &[source::EndpointPort];
    fn endpoints(&self) -> &[Self::Endpoint];
}

/// An endpoint's `conditions`, as written (absent: `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conditions {
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

/// One endpoint of a slice as the builder reads it.
pub(crate) trait EndpointView {
    fn address(&self) -> Option<Address<'_>>;
    fn conditions(&self) -> Conditions;
    fn node_name(&self) -> Option<&str>;
    fn zone_hints(&self) -> Option<&[String]>;
    fn node_hints(&self) -> Option<&[String]>;
}

impl<T: SliceView> SliceView for &T {
    type Endpoint = T::Endpoint;
    fn namespace(&self) -> &str {
        (*self).namespace()
    }
    fn name(&self) -> &str {
        (*self).name()
    }
    fn address_type(&self) -> &str {
        (*self).address_type()
    }
    fn ports(&self) -> &[source::EndpointPort] {
        (*self).ports()
    }
    fn endpoints(&self) -> &[T::Endpoint] {
        (*self).endpoints()
    }
}

impl SliceView for source::EndpointSlice {
    type Endpoint = source::Endpoint;
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn address_type(&self) -> &str {
        &self.address_type
    }
    fn ports(&self) -> &[source::EndpointPort] {
        &self.ports
    }
    fn endpoints(&self) -> &[source::Endpoint] {
        &self.endpoints
    }
}

impl EndpointView for source::Endpoint {
    fn address(&self) -> Option<Address<'_>> {
        self.addresses.first().map(|a| Address::Text(a))
    }
    fn conditions(&self) -> Conditions {
        Conditions { ready: self.ready, serving: self.serving, terminating: self.terminating }
    }
    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }
    fn zone_hints(&self) -> Option<&[String]> {
        self.zone_hints.as_deref()
    }
    fn node_hints(&self) -> Option<&[String]> {
        self.node_hints.as_deref()
    }
}

/// Node names, shared by every endpoint that names them (a cluster has far fewer nodes than
/// endpoints), and numbered for packed slices. Names are never forgotten: there are as many
/// as the cluster had nodes.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some((known, _)) = self.ids.get_key_value(name) {
            return known.clone();
        }
        let name: Arc<str> = Arc::from(name);
        self.ids.insert(name.clone(), self.names.len() as u32);
        self.names.push(name.clone());
        name
    }

    /// The number of an interned name.
    pub(crate) fn id(&self, name: &str) -> u32 {
        self.ids[name]
    }

    /// The name of a number [`Interner::id`] gave.
    pub(crate) fn name(&self, id: u32) -> Arc<str> {
        self.names[id as usize].clone()
    }
}

/// The fields of an EndpointSlice the model reads, compactly (see the module comment). Two
/// stored slices are equal exactly when the model built from them would be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredSlice {
    pub service_name: Box<str>,
    pub address_type: Box<str>,
    pub ports: Box<[source::EndpointPort]>,
    pub endpoints: Box<[StoredEndpoint]>,
    pub trigger_time: Option<SystemTime>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredEndpoint {
    pub address: StoredAddress,
    pub conditions: Conditions,
    pub node_name: Option<Arc<str>>,
    pub hints: Option<Box<Hints>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoredAddress {
    Missing,
    Ip(IpAddr),
    Text(Box<str>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hints {
    pub zones: Option<Vec<String>>,
    pub nodes: Option<Vec<String>>,
}

impl StoredAddress {
    /// Kept parsed only when printing it gives back the text exactly, so that a problem quotes
    /// what the object says; anything else is kept as written.
    fn new(raw: Option<&String>) -> StoredAddress {
        let Some(raw) = raw else { return StoredAddress::Missing };
        // Rust's IPv4 parser admits only the canonical dotted quad (no leading zeros).
        if let Ok(v4) = raw.parse::<Ipv4Addr>() {
            return StoredAddress::Ip(IpAddr::V4(v4));
        }
        match raw.parse::<Ipv6Addr>() {
            Ok(v6) if v6.to_string() == *raw => StoredAddress::Ip(IpAddr::V6(v6)),
            _ => StoredAddress::Text(raw.as_str().into()),
        }
    }
}

impl StoredSlice {
    /// The stored form of `slice`; node names are shared through `names`.
    pub(crate) fn new(slice: &source::EndpointSlice, names: &mut Interner) -> StoredSlice {
        let endpoints = slice
            .endpoints
            .iter()
            .map(|ep| StoredEndpoint {
                address: StoredAddress::new(ep.addresses.first()),
                conditions: ep.conditions(),
                node_name: ep.node_name.as_deref().map(|n| names.intern(n)),
                hints: (ep.zone_hints.is_some() || ep.node_hints.is_some())
                    .then(|| Box::new(Hints { zones: ep.zone_hints.clone(), nodes: ep.node_hints.clone() })),
            })
            .collect();
        StoredSlice {
            service_name: slice.service_name.as_str().into(),
            address_type: slice.address_type.as_str().into(),
            ports: slice.ports.clone().into_boxed_slice(),
            endpoints,
            trigger_time: slice.trigger_time,
        }
    }

    /// This slice under its object name, as the builder reads it.
    pub(crate) fn view<'a>(&'a self, namespace: &'a str, name: &'a str) -> StoredSliceRef<'a> {
        StoredSliceRef { namespace, name, slice: self }
    }
}

/// A stored slice with its namespace and name.
pub(crate) struct StoredSliceRef<'a> {
    namespace: &'a str,
    name: &'a str,
    slice: &'a StoredSlice,
}

impl SliceView for StoredSliceRef<'_> {
    type Endpoint = StoredEndpoint;
    fn namespace(&self) -> &str {
        self.namespace
    }
    fn name(&self) -> &str {
        self.name
    }
    fn address_type(&self) -> &str {
        &self.slice.address_type
    }
    fn ports(&self) -> &[source::EndpointPort] {
        &self.slice.ports
    }
    fn endpoints(&self) -> &[StoredEndpoint] {
        &self.slice.endpoints
    }
}

impl EndpointView for StoredEndpoint {
    fn address(&self) -> Option<Address<'_>> {
        match &self.address {
            StoredAddress::Missing => None,
            StoredAddress::Ip(ip) => Some(Address::Ip(*ip)),
            StoredAddress::Text(raw) => Some(Address::Text(raw)),
        }
    }
    fn conditions(&self) -> Conditions {
        self.conditions
    }
    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }
    fn zone_hints(&self) -> Option<&[String]> {
        self.hints.as_ref().and_then(|h| h.zones.as_deref())
    }
    fn node_hints(&self) -> Option<&[String]> {
        self.hints.as_ref().and_then(|h| h.nodes.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(address: &str) -> source::Endpoint {
        source::Endpoint { addresses: vec![address.to_string()], ..Default::default() }
    }

    #[test]
    fn only_canonical_spellings_are_kept_parsed() {
        for (raw, parsed) in [
            ("10.1.2.3", true),
            ("10.01.2.3", false),
            (" 10.1.2.3", false),
            ("fd00::1", true),
            ("FD00::1", false),
            ("fd00:0::1", false),
            ("not an address", false),
        ] {
            let stored = StoredAddress::new(Some(&raw.to_string()));
            match (stored, parsed) {
                (StoredAddress::Ip(ip), true) => assert_eq!(ip.to_string(), raw),
                (StoredAddress::Text(text), false) => assert_eq!(&*text, raw),
                (other, _) => panic!("{raw:?} stored as {other:?}"),
            }
        }
    }

    #[test]
    fn node_names_are_shared_and_views_read_what_the_source_says() {
        let mut names = Interner::default();
        let mut a = endpoint("10.0.0.1");
        a.node_name = Some("node-a".into());
        a.ready = Some(false);
        a.zone_hints = Some(vec!["z1".into()]);
        let mut b = endpoint("10.0.0.2");
        b.node_name = Some("node-a".into());
        let slice = source::EndpointSlice {
            namespace: "ns".into(),
            name: "web-1".into(),
            service_name: "web".into(),
            address_type: "IPv4".into(),
            endpoints: vec![a.clone(), b, source::Endpoint::default()],
            ..Default::default()
        };
        let stored = StoredSlice::new(&slice, &mut names);
        let (x, y) = (&stored.endpoints[0], &stored.endpoints[1]);
        assert!(Arc::ptr_eq(x.node_name.as_ref().unwrap(), y.node_name.as_ref().unwrap()));
        let view = stored.view("ns", "web-1");
        assert_eq!((view.namespace(), view.name(), view.address_type()), ("ns", "web-1", "IPv4"));
        let first = &view.endpoints()[0];
        assert!(matches!(first.address(), Some(Address::Ip(ip)) if ip.to_string() == "10.0.0.1"));
        assert_eq!((first.conditions(), first.node_name()), (a.conditions(), Some("node-a")));
        assert_eq!(first.conditions().ready, Some(false));
        assert_eq!(first.zone_hints(), Some(&["z1".to_string()][..]));
        assert_eq!(first.node_hints(), None);
        assert!(view.endpoints()[2].address().is_none());
    }
}
