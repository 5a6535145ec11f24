//! A list response decoded object by object as its bytes arrive.
//!
//! A list at resourceVersion "0" comes whole from the API server's watch cache: at 100k
//! Services x 10 endpoints, 137 MB of JSON or 58 MB of protobuf in one response. Read whole
//! and then decoded, the body and every decoded object were held at once (the start's peak
//! RSS doubled), and the sync loop got the first object only after the last byte had arrived
//! and the whole list had been decoded. Decoded as it arrives, each object goes on as soon as
//! its bytes are in, and only the object being read is held.
//!
//! Both encodings are read as the API server writes them, in any chunking:
//! - JSON: a `…List` document whose `items` array is cut into its elements by a scanner that
//!   knows only strings and brackets; each element, and `metadata`, is then decoded by serde
//!   (other members are checked to be JSON and skipped);
//! - protobuf: the `k8s\0` prefix and the `runtime.Unknown` envelope, whose `raw` field (the
//!   list) is read field by field: the `ListMeta`, then each item, a length-delimited field.
//!
//! No object may be longer than [`MAX_FRAME`] (as a watch event may not): a body that never
//! closes its object is refused once it passes that, not held.

use prost::Message;
use serde::Deserialize;

use super::proto::{self, ProtoError};
use super::wire::{Decoded, Encoding, MAX_FRAME, WireError};

/// What a list says at its end: its resourceVersion and the token of its next page.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListEnd {
    /// The list's resourceVersion.
    pub resource_version: String,
    /// The token of the next page, if the server paged.
    pub continue_token: Option<String>,
}

/// A list response being read.
pub struct ListStream<K> {
    /// Bytes received and not yet consumed: the start of an unfinished token or object.
    buf: Vec<u8>,
    reader: Reader,
    end: ListEnd,
    _kind: std::marker::PhantomData<fn() -> K>,
}

enum Reader {
    Json(JsonList),
    Protobuf(ProtoList),
}

impl<K: Decoded> ListStream<K> {
    /// A list in `encoding`.
    pub fn new(encoding: Encoding) -> ListStream<K> {
        let reader = match encoding {
            Encoding::Json => Reader::Json(JsonList::default()),
            Encoding::Protobuf => Reader::Protobuf(ProtoList::default()),
        };
        ListStream { buf: Vec::new(), reader, end: ListEnd::default(), _kind: std::marker::PhantomData }
    }

    /// Takes the next chunk of the body; the objects it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<K>, WireError> {
        self.buf.extend_from_slice(chunk);
        let mut items = Vec::new();
        let consumed = match &mut self.reader {
            Reader::Json(r) => r.read(&self.buf, &mut self.end, &mut items)?,
            Reader::Protobuf(r) => r.read(&self.buf, &mut self.end, &mut items)?,
        };
        self.buf.drain(..consumed);
        if self.buf.len() > MAX_FRAME {
            return Err(WireError::TooLong);
        }
        Ok(items)
    }

    /// At the end of the body: the list's resourceVersion and continue token, or an error
    /// for a list that is not whole (or, in protobuf, of another kind than `K`'s list).
    pub fn finish(self) -> Result<ListEnd, WireError> {
        let complete = match &self.reader {
            Reader::Json(r) => matches!(r.at, JsonAt::Done) && self.buf.iter().all(u8::is_ascii_whitespace),
            Reader::Protobuf(r) => r.listed && matches!(r.stage, ProtoStage::Envelope) && self.buf.is_empty(),
        };
        if !complete {
            return Err(WireError::Truncated);
        }
        if let Reader::Protobuf(r) = &self.reader {
            let list_kind = format!("{}List", K::KIND);
            if r.kind.as_deref() != Some(list_kind.as_str()) {
                return Err(ProtoError::Kind { expected: "a list", got: r.kind.clone().unwrap_or_default() }.into());
            }
        }
        Ok(self.end)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMetaJson {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

fn list_end(resource_version: Option<String>, continue_: Option<String>) -> ListEnd {
    ListEnd {
        resource_version: resource_version.unwrap_or_default(),
        continue_token: continue_.filter(|c| !c.is_empty()),
    }
}

fn json_error(message: &str) -> WireError {
    WireError::Json(<serde_json::Error as serde::de::Error>::custom(message))
}

/// Where the JSON reader is in the list document.
#[derive(Clone, Copy, Debug, Default)]
enum JsonAt {
    #[default]
    Open,
    /// After `{` (`first`) or a `,`.
    Key {
        first: bool,
    },
    Colon(Member),
    Value(Member),
    AfterMember,
    /// After `[` (`first`) or a `,` in `items`.
    Item {
        first: bool,
    },
    AfterItem,
    Done,
}

/// A member of the list document.
#[derive(Clone, Copy, Debug)]
enum Member {
    Metadata,
    Items,
    Other,
}

#[derive(Default)]
struct JsonList {
    at: JsonAt,
    /// The value being read, from the start of the unconsumed bytes.
    value: ValueScan,
}

impl JsonList {
    /// Reads what `buf` holds; the bytes consumed.
    fn read<K: Decoded>(&mut self, buf: &[u8], end: &mut ListEnd, items: &mut Vec<K>) -> Result<usize, WireError> {
        let mut at = 0;
        loop {
            while at < buf.len() && buf[at].is_ascii_whitespace() {
                at += 1;
            }
            let Some(&next) = buf.get(at) else { return Ok(at) };
            let token = |want: u8| if next == want { Ok(()) } else { Err(json_error("not a list document")) };
            self.at = match self.at {
                JsonAt::Open => {
                    token(b'{')?;
                    at += 1;
                    JsonAt::Key { first: true }
                }
                JsonAt::Key { first: true } if next == b'}' => {
                    at += 1;
                    JsonAt::Done
                }
                JsonAt::Key { .. } => {
                    token(b'"')?;
                    let Some(len) = self.value.scan(&buf[at..]) else { return Ok(at) };
                    let key: String = serde_json::from_slice(&buf[at..at + len])?;
                    at += len;
                    self.value = ValueScan::default();
                    JsonAt::Colon(match key.as_str() {
                        "metadata" => Member::Metadata,
                        "items" => Member::Items,
                        _ => Member::Other,
                    })
                }
                JsonAt::Colon(member) => {
                    token(b':')?;
                    at += 1;
                    JsonAt::Value(member)
                }
                JsonAt::Value(Member::Items) if next == b'[' => {
                    at += 1;
                    JsonAt::Item { first: true }
                }
                JsonAt::Value(member) => {
                    let Some(len) = self.value.scan(&buf[at..]) else { return Ok(at) };
                    let value = &buf[at..at + len];
                    match member {
                        Member::Metadata => {
                            let meta: Option<ListMetaJson> = serde_json::from_slice(value)?;
                            if let Some(m) = meta {
                                *end = list_end(m.resource_version, m.continue_);
                            }
                        }
                        // `items` that is no array: only `null` (no items) is a list's.
                        Member::Items => serde_json::from_slice::<()>(value)?,
                        Member::Other => serde_json::from_slice::<serde::de::IgnoredAny>(value).map(drop)?,
                    }
                    at += len;
                    self.value = ValueScan::default();
                    JsonAt::AfterMember
                }
                JsonAt::AfterMember => {
                    at += 1;
                    match next {
                        b',' => JsonAt::Key { first: false },
                        b'}' => JsonAt::Done,
                        _ => return Err(json_error("expected `,` or `}` in a list document")),
                    }
                }
                JsonAt::Item { first: true } if next == b']' => {
                    at += 1;
                    JsonAt::AfterMember
                }
                JsonAt::Item { .. } => {
                    let Some(len) = self.value.scan(&buf[at..]) else { return Ok(at) };
                    items.push(serde_json::from_slice(&buf[at..at + len])?);
                    at += len;
                    self.value = ValueScan::default();
                    JsonAt::AfterItem
                }
                JsonAt::AfterItem => {
                    at += 1;
                    match next {
                        b',' => JsonAt::Item { first: false },
                        b']' => JsonAt::AfterMember,
                        _ => return Err(json_error("expected `,` or `]` in a list's items")),
                    }
                }
                JsonAt::Done => return Err(json_error("trailing characters after the list document")),
            };
        }
    }
}

/// Finds where one JSON value ends, resumably: the bytes scanned so far are remembered, so a
/// value that arrives in many chunks is scanned once. Strings and brackets are all it knows:
/// what it delimits is decoded (and so checked) by serde.
#[derive(Default)]
struct ValueScan {
    len: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl ValueScan {
    /// The length of the value at the start of `v`, once all of it is there.
    fn scan(&mut self, v: &[u8]) -> Option<usize> {
        while self.len < v.len() {
            let b = v[self.len];
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.depth == 0 {
                        self.len += 1;
                        return Some(self.len);
                    }
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    // A scalar (number, `true`, `null`) ends where the next token starts.
                    b'}' | b']' | b',' | b':' if self.depth == 0 => return Some(self.len),
                    b' ' | b'\t' | b'\n' | b'\r' if self.depth == 0 => return Some(self.len),
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            self.len += 1;
                            return Some(self.len);
                        }
                    }
                    _ => {}
                }
            }
            self.len += 1;
        }
        None
    }
}

/// Where the protobuf reader is in the body.
#[derive(Clone, Copy, Debug, Default)]
enum ProtoStage {
    #[default]
    Magic,
    /// In the `runtime.Unknown` envelope, between its fields.
    Envelope,
    /// In its `raw` field (the list), with this many bytes of it still to come.
    Raw { left: usize },
}

#[derive(Default)]
struct ProtoList {
    stage: ProtoStage,
    kind: Option<String>,
    /// The `raw` field (the list) was read to its end.
    listed: bool,
}

const LEN: u64 = 2;

impl ProtoList {
    /// Reads what `buf` holds; the bytes consumed.
    fn read<K: Decoded>(&mut self, buf: &[u8], end: &mut ListEnd, items: &mut Vec<K>) -> Result<usize, WireError> {
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            match self.stage {
                ProtoStage::Magic => {
                    if rest.len() < proto::MAGIC.len() {
                        return Ok(at);
                    }
                    if !rest.starts_with(proto::MAGIC) {
                        return Err(ProtoError::NoMagic.into());
                    }
                    at += proto::MAGIC.len();
                    self.stage = ProtoStage::Envelope;
                }
                ProtoStage::Envelope => {
                    let Some((field, wire, header)) = tag(rest)? else { return Ok(at) };
                    if (field, wire) == (2, LEN) {
                        let Some((len, n)) = varint(&rest[header..])? else { return Ok(at) };
                        at += header + n;
                        self.stage = ProtoStage::Raw { left: usize::try_from(len).map_err(|_| WireError::TooLong)? };
                        continue;
                    }
                    let Some((payload, size)) = whole_field(rest, wire, header)? else { return Ok(at) };
                    if (field, wire) == (1, LEN) {
                        self.kind = proto::TypeMeta::decode(payload)?.kind;
                    }
                    at += size;
                }
                ProtoStage::Raw { left: 0 } => {
                    self.listed = true;
                    self.stage = ProtoStage::Envelope;
                }
                ProtoStage::Raw { left } => {
                    let rest = &rest[..rest.len().min(left)];
                    let Some((field, wire, header)) = tag(rest)? else { return self.need(at, rest, left) };
                    let Some((payload, size)) = whole_field(rest, wire, header)? else {
                        return self.need(at, rest, left);
                    };
                    match (field, wire) {
                        (1, LEN) => {
                            let meta = proto::ListMeta::decode(payload)?;
                            *end = list_end(meta.resource_version, meta.continue_);
                        }
                        (2, LEN) => items.push(K::from_proto(payload)?),
                        _ => {}
                    }
                    at += size;
                    self.stage = ProtoStage::Raw { left: left - size };
                }
            }
        }
    }

    /// Where a field of the list is not whole in `rest` (what `buf` holds of the `left` bytes
    /// still to come): more bytes are needed, unless the list ends inside the field.
    fn need(&self, at: usize, rest: &[u8], left: usize) -> Result<usize, WireError> {
        if rest.len() == left {
            return Err(ProtoError::List("a field longer than its list".into()).into());
        }
        Ok(at)
    }
}

/// A field's number, wire type and the length of its tag, if the tag is whole.
fn tag(bytes: &[u8]) -> Result<Option<(u64, u64, usize)>, WireError> {
    Ok(varint(bytes)?.map(|(key, n)| (key >> 3, key & 7, n)))
}

/// A field's payload and whole size (tag included), once all of it is in `bytes`; a
/// length-delimited field of more than [`MAX_FRAME`] is refused before it is held.
fn whole_field(bytes: &[u8], wire: u64, header: usize) -> Result<Option<(&[u8], usize)>, WireError> {
    let body = &bytes[header..];
    let (start, len) = match wire {
        0 => match body.iter().position(|b| b & 0x80 == 0) {
            Some(last) => (0, last + 1),
            None if body.len() >= 10 => return Err(ProtoError::List("a varint longer than 10 bytes".into()).into()),
            None => return Ok(None),
        },
        1 => (0, 8),
        LEN => {
            let Some((len, n)) = varint(body)? else { return Ok(None) };
            let len = usize::try_from(len).ok().filter(|&l| l <= MAX_FRAME).ok_or(WireError::TooLong)?;
            (n, len)
        }
        5 => (0, 4),
        other => {
            return Err(ProtoError::List(format!("wire type {other}")).into());
        }
    };
    Ok((body.len() >= start + len).then(|| (&body[start..start + len], header + start + len)))
}

/// A varint and its length, if it is whole in `bytes`.
fn varint(bytes: &[u8]) -> Result<Option<(u64, usize)>, WireError> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if bytes.len() >= 10 {
        return Err(ProtoError::List("a varint longer than 10 bytes".into()).into());
    }
    Ok(None)
}
