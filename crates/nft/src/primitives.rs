//! The leaf vocabulary of a ruleset: nft datatypes, byte strings in the kernel's layout
//! ([`Blob`]), verdicts and element data.
//!
//! `ruleset`, `rule` and `elements` all speak it; it lives here, importing nothing from the
//! crate, so that none of them has to import another's file to name a key or a verdict (they
//! used to form an import circle through `ruleset`). `ruleset` re-exports every name, the
//! paths other code knows.

use std::fmt;
use std::sync::Arc;

/// The length of a concatenation in the kernel's layout: each part padded to 4 bytes, except a
/// lone value which keeps its own length.
pub fn concat_len(types: &[Datatype]) -> usize {
    match types {
        [single] => single.bytes(),
        many => many.iter().map(|t| padded(t.bytes())).sum(),
    }
}

/// `n` rounded up to a whole 32-bit register.
pub fn padded(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// nft datatypes verdict uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Datatype {
    /// `ipv4_addr`.
    Ipv4Addr,
    /// `ipv6_addr`.
    Ipv6Addr,
    /// `inet_proto`.
    InetProto,
    /// `inet_service`.
    InetService,
    /// `mark`.
    Mark,
    /// `integer` of 32 bits (what `numgen` yields).
    Integer,
    /// `fib_addrtype`.
    FibAddrType,
    /// `ifname`.
    Ifname,
    /// `ct_state`.
    CtState,
    /// `ct_status`.
    CtStatus,
}

impl Datatype {
    /// nft's datatype number.
    pub fn id(self) -> u32 {
        match self {
            Datatype::Integer => 4,
            Datatype::Ipv4Addr => 7,
            Datatype::Ipv6Addr => 8,
            Datatype::InetProto => 12,
            Datatype::InetService => 13,
            Datatype::Mark => 19,
            Datatype::CtState => 26,
            Datatype::CtStatus => 28,
            Datatype::FibAddrType => 36,
            Datatype::Ifname => 41,
        }
    }

    /// The datatype with this number.
    pub fn from_id(id: u32) -> Option<Datatype> {
        use Datatype::*;
        [Ipv4Addr, Ipv6Addr, InetProto, InetService, Mark, Integer, FibAddrType, Ifname, CtState, CtStatus]
            .into_iter()
            .find(|t| t.id() == id)
    }

    /// nft's name for the datatype.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Ipv4Addr => "ipv4_addr",
            Datatype::Ipv6Addr => "ipv6_addr",
            Datatype::InetProto => "inet_proto",
            Datatype::InetService => "inet_service",
            Datatype::Mark => "mark",
            Datatype::Integer => "integer",
            Datatype::FibAddrType => "fib_addrtype",
            Datatype::Ifname => "ifname",
            Datatype::CtState => "ct_state",
            Datatype::CtStatus => "ct_status",
        }
    }

    /// Width of a value in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Datatype::Ipv4Addr | Datatype::Mark | Datatype::Integer | Datatype::FibAddrType => 4,
            Datatype::CtState | Datatype::CtStatus => 4,
            Datatype::Ipv6Addr | Datatype::Ifname => 16,
            Datatype::InetProto => 1,
            Datatype::InetService => 2,
        }
    }

    /// Whether values are stored big-endian (network order) rather than in host order.
    pub fn big_endian(self) -> bool {
        matches!(self, Datatype::Ipv4Addr | Datatype::Ipv6Addr | Datatype::InetService)
    }
}

/// The kernel's identifier of a concatenated type: each part's id in 6 bits.
pub fn concat_type_id(types: &[Datatype]) -> u32 {
    types.iter().fold(0, |acc, t| (acc << 6) | t.id())
}

/// An element's data: nothing for a plain set, a verdict for a vmap, bytes for a data map.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Elem {
    /// The mapped value.
    pub data: Option<ElemData>,
    /// Element comment (`ns/name:port`).
    pub comment: Option<Arc<str>>,
}

impl Elem {
    /// A plain set element.
    pub fn plain() -> Elem {
        Elem { data: None, comment: None }
    }

    /// A plain set element with a comment (`ns/name:port`).
    pub fn plain_commented(comment: Arc<str>) -> Elem {
        Elem { data: None, comment: Some(comment) }
    }

    /// An element mapping to a verdict.
    pub fn verdict(v: Verdict, comment: Option<Arc<str>>) -> Elem {
        Elem { data: Some(ElemData::Verdict(v)), comment }
    }

    /// An element mapping to bytes.
    pub fn value(b: Blob, comment: Option<Arc<str>>) -> Elem {
        Elem { data: Some(ElemData::Value(b)), comment }
    }
}

/// Map element data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ElemData {
    /// A verdict.
    Verdict(Verdict),
    /// A value in the kernel layout.
    Value(Blob),
}

/// A verdict, as a statement or as vmap data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `return`.
    Return,
    /// `jump <chain>`.
    Jump(Arc<str>),
    /// `goto <chain>`.
    Goto(Arc<str>),
}

impl Verdict {
    /// The chain this verdict refers to, if any.
    pub fn chain(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Return => f.write_str("return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

/// A small byte string (a set key or map value in the kernel's layout), stored inline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Blob {
    len: u8,
    bytes: [u8; Blob::MAX],
}

impl Blob {
    /// The longest key verdict builds: `ip6 saddr . ip6 daddr`, 32 bytes.
    pub const MAX: usize = 32;

    /// Bytes as a blob. Panics if longer than [`Blob::MAX`] (keys are built by our own code).
    pub fn new(b: &[u8]) -> Blob {
        assert!(b.len() <= Blob::MAX, "set key of {} bytes exceeds {}", b.len(), Blob::MAX);
        let mut bytes = [0u8; Blob::MAX];
        bytes[..b.len()].copy_from_slice(b);
        Blob { len: b.len() as u8, bytes }
    }

    /// Bytes read from the kernel, which may be longer than anything verdict builds.
    pub fn try_new(b: &[u8]) -> Option<Blob> {
        (b.len() <= Blob::MAX).then(|| Blob::new(b))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The first `n` bytes.
    pub fn prefix(&self, n: usize) -> Blob {
        Blob::new(&self.as_slice()[..n.min(self.len as usize)])
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_slice() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
