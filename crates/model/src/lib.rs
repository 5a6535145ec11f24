//! verdict's model: the one contract between the controller (which watches Kubernetes) and the
//! nftables programmer.
//!
//! The controller turns Kubernetes objects into [`source`] records (plain strings, exactly as the
//! API server holds them). [`build_model`] validates them and applies Kubernetes Service
//! semantics, so that the nftables side only ever sees clean, already-decided facts: which
//! addresses a Service answers on, and which endpoints each kind of traffic may reach.
//!
//! No I/O, no Kubernetes client, no netlink: everything here is a pure function of its inputs.

mod build;
mod cache;
mod claims;
mod cost;
mod endpoints;
mod names;
mod nodeport;
mod packed;
mod ports;
mod problem;
mod proxy_model;
mod slices;
pub mod source;
pub mod synth;
mod types;

pub use build::{
    BuildOutput, DEFAULT_AFFINITY_TIMEOUT, HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL, UNPROXIED_LABELS, ZONE_LABEL,
    build_model, proxied_by_labels, proxied_services_selector,
};
pub use cache::{ModelCache, PortChange, Rebuilt};
pub use nodeport::{NodePortAddresses, NodePortAddressesError, loopback_net, parse_nodeport_addresses};
pub use ports::ServicePorts;
pub use problem::{ObjectKind, ObjectRef, Problem};
pub use proxy_model::ProxyModel;
pub use types::{
    DEFAULT_MAX_ELEMENTS_PER_SERVICE, DetectLocal, Endpoint, EndpointHints, EndpointSelection, EndpointTarget,
    NodeFacts, OutsideAccess, Picks, PodMatch, ProxyConfig, ServiceCounters, ServicePort, ServicePortName, Targets,
    TopologyHints,
};
pub use verdict_net::{
    AddressError, Cidr, IpFamily, Protocol, check_ip, parse_ip_checked, parse_ip_tolerant, refused_endpoint_address,
    special_address,
};
