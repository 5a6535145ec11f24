//! verdict's test harness: network namespaces the tests create and always remove, echo
//! servers that answer with their own name, and clients that report who answered.
//!
//! Nothing here touches the host's own network: every link, address, route, sysctl and
//! nftables table lives in a namespace created by the harness, and traffic only goes to
//! addresses inside those namespaces.

pub mod agent_process;
pub mod apilab;
pub mod cluster;
pub mod dataplane;
pub mod dataplane_bench;
pub mod endtoend;
pub mod fixtures;
pub mod flows;
pub mod lab_agent;
pub mod netns;
pub mod privilege;
pub mod probe;
pub mod probe_cli;
pub mod scenario;
pub mod steady;
pub mod topology;
pub mod upstream_proxy;

pub use verdict_model::synth;
