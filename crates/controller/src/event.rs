//! What the sources (API watches, a manifests directory) tell the sync loop.

use verdict_model::{Problem, source};

/// How many events wait for the sync loop at most; a watcher with more to send waits for it
/// (see `watch`). A few thousand objects: a few MiB.
pub const QUEUE: usize = 4096;

/// The sync loop's event queue: what [`crate::sync::SyncLoop::run`] reads, and what the
/// watchers, the table monitor and the manifests directory send to.
pub fn queue() -> (std::sync::mpsc::SyncSender<Event>, std::sync::mpsc::Receiver<Event>) {
    std::sync::mpsc::sync_channel(QUEUE)
}

/// The kinds of object verdict watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 Service.
    Service,
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// core/v1 Node (this node only).
    Node,
    /// networking.k8s.io/v1 ServiceCIDR (optional: older API servers do not serve it).
    ServiceCidr,
}

impl Kind {
    /// The kinds programming waits for: it starts once each has been listed.
    pub const ALL: [Kind; 3] = [Kind::Service, Kind::EndpointSlice, Kind::Node];
}

/// An object, translated.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A Service.
    Service(source::Service),
    /// An EndpointSlice.
    EndpointSlice(source::EndpointSlice),
    /// This node's Node.
    Node(source::Node),
    /// A ServiceCIDR.
    ServiceCidr(source::ServiceCidr),
}

/// One thing a source observed.
// Nearly every event is an `Apply`: boxing it would add an allocation per event and save no
// memory.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// An object was added or changed (or listed).
    Apply(Object),
    /// An object was deleted.
    Delete {
        /// Its kind.
        kind: Kind,
        /// Its namespace ("" for Nodes).
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A (re)list of `kind` begins: objects of that kind not applied again before
    /// [`Event::InitDone`] are gone. Nothing is deleted before then, so a relist never empties
    /// the table, even briefly.
    InitStart(Kind),
    /// The (re)list of `kind` is complete.
    InitDone(Kind),
    /// Problems of the source itself (manifest files that do not parse); replaces the previous.
    SourceProblems(Vec<Problem>),
    /// Another program changed the table: reconcile it, unless a reconcile already read it
    /// since.
    TableChanged {
        /// What it did ("delete chain"; "notices lost" when the monitor overflowed).
        what: String,
        /// The low 16 bits of the generation its commit made (`None`: unknown, as after an
        /// overflow).
        generation: Option<u16>,
    },
    /// `verdict trace` added or removed its chains, and nothing else: no reconcile, but the
    /// chains are removed at their deadline if their trace has not removed them by then.
    TraceChains(Vec<verdict_nft::netlink::monitor::TraceChange>),
    /// Another program changed a table of its own (a firewall may now drop Service traffic):
    /// look again (see [`crate::firewalls`]).
    OtherTablesChanged,
    /// The node's interfaces the fast path's flowtable should hold now (see
    /// [`crate::fast_path`]).
    FastPathDevices(std::collections::BTreeSet<String>),
    /// The table monitor stopped: changes by other programs would go unnoticed, so full
    /// reconciles read the kernel's table again.
    MonitorStopped,
    /// Stop: save the table's state for the next start (see [`verdict_nft::snapshot`]) and
    /// return.
    Shutdown,
}
