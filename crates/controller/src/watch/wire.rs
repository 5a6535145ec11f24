//! What the API server sends for a list or a watch, in either encoding it answers with:
//! JSON (a list document; a watch as one event per line) or protobuf (a list in its envelope;
//! a watch as frames of a 4-byte big-endian length and a `metav1.WatchEvent`, whose object is
//! in its own envelope, as apimachinery's `LengthDelimitedFramer` frames it).

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

use super::proto::{self, ProtoError};

/// The longest watch event (line or frame), as client-go's streaming decoder: 16 MiB.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The media type of Kubernetes' protobuf encoding.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// How a response is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json` (what the API server answers when it has no protobuf for a kind).
    Json,
    /// `application/vnd.kubernetes.protobuf` (`;stream=watch` for watches).
    Protobuf,
}

impl Encoding {
    /// The encoding a `Content-Type` header names: protobuf, or JSON for anything else.
    pub fn of(content_type: Option<&str>) -> Encoding {
        match content_type {
            Some(t) if t.trim_start().starts_with(PROTOBUF) => Encoding::Protobuf,
            _ => Encoding::Json,
        }
    }
}

/// Why a response could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Bad JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Bad protobuf.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// A watch event beyond [`MAX_FRAME`].
    #[error("a watch event longer than {MAX_FRAME} bytes (client-go's limit)")]
    TooLong,
    /// The body ended inside an event.
    #[error("the watch ended inside an event")]
    Truncated,
}

impl From<prost::DecodeError> for WireError {
    fn from(e: prost::DecodeError) -> WireError {
        WireError::Proto(e.into())
    }
}

/// A kind the reflector decodes, in both encodings.
pub trait Decoded: Sized + DeserializeOwned {
    /// The protobuf message of one object.
    type Proto: Message + Default + Into<Self>;
    /// The kind's name (`Service`); its list is `ServiceList`.
    const KIND: &'static str;

    /// An object from its protobuf encoding (no envelope).
    fn from_proto(bytes: &[u8]) -> Result<Self, WireError> {
        Ok(Self::Proto::decode(bytes)?.into())
    }
}

/// One watch event.
#[derive(Debug)]
pub enum WatchEvent<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`.
    Deleted(K),
    /// `BOOKMARK`: the resourceVersion the watch has reached; `initial_events_end` on the one
    /// that ends a streaming list's initial events.
    Bookmark {
        /// Its resourceVersion.
        resource_version: String,
        /// It carries [`INITIAL_EVENTS_END`].
        initial_events_end: bool,
    },
    /// `ERROR`: a Status.
    Error(Status),
}

/// An error as the API server reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The HTTP code (410 for an expired resourceVersion).
    pub code: u16,
    /// The reason (`Expired`, `Invalid`...).
    pub reason: String,
    /// The message.
    pub message: String,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

#[derive(Deserialize, Default)]
struct StatusJson {
    code: Option<u16>,
    reason: Option<String>,
    message: Option<String>,
}

/// A Status body, in either encoding (`code` when the body says nothing).
pub fn status(encoding: Encoding, body: &[u8], code: u16) -> Status {
    let (c, reason, message) = match encoding {
        Encoding::Json => {
            let s: StatusJson = serde_json::from_slice(body).unwrap_or_default();
            (s.code, s.reason, s.message)
        }
        Encoding::Protobuf => match proto::open::<proto::Status>(body, "Status") {
            Ok(s) => (s.code.and_then(|c| u16::try_from(c).ok()), s.reason, s.message),
            Err(_) => (None, None, None),
        },
    };
    let message = message.unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned());
    Status { code: c.filter(|&c| c != 0).unwrap_or(code), reason: reason.unwrap_or_default(), message }
}

#[derive(Deserialize)]
struct LineJson<'a> {
    #[serde(rename = "type")]
    type_: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct BookmarkJson {
    metadata: BookmarkMetaJson,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMetaJson {
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// Only the metadata of any object (every kind has it as field 1).
#[derive(Clone, PartialEq, Message)]
struct MetaOnly {
    #[prost(message, optional, tag = "1")]
    metadata: Option<proto::ObjectMeta>,
}

fn bookmark<K>(resource_version: Option<String>, annotations: Option<&BTreeMap<String, String>>) -> WatchEvent<K> {
    WatchEvent::Bookmark {
        resource_version: resource_version.unwrap_or_default(),
        initial_events_end: annotations.and_then(|a| a.get(INITIAL_EVENTS_END)).is_some_and(|v| v == "true"),
    }
}

/// One watch event: a JSON line, or a protobuf frame (without its length).
pub fn event<K: Decoded>(encoding: Encoding, bytes: &[u8]) -> Result<WatchEvent<K>, WireError> {
    match encoding {
        Encoding::Json => {
            let line: LineJson = serde_json::from_slice(bytes)?;
            let object = line.object.get();
            Ok(match line.type_.as_str() {
                "BOOKMARK" => {
                    let b: BookmarkJson = serde_json::from_str(object)?;
                    bookmark(b.metadata.resource_version, b.metadata.annotations.as_ref())
                }
                "ERROR" => WatchEvent::Error(status(Encoding::Json, object.as_bytes(), 500)),
                other => typed(other, serde_json::from_str(object)?),
            })
        }
        Encoding::Protobuf => {
            let frame = proto::WatchEvent::decode(bytes)?;
            let raw = frame.object.and_then(|o| o.raw).unwrap_or_default();
            let type_ = frame.type_.unwrap_or_default();
            Ok(match type_.as_str() {
                "BOOKMARK" => {
                    let (_, raw) = proto::unwrap_envelope(&raw)?;
                    let meta = MetaOnly::decode(raw)?.metadata.unwrap_or_default();
                    bookmark(meta.resource_version, Some(&meta.annotations))
                }
                "ERROR" => WatchEvent::Error(status(Encoding::Protobuf, &raw, 500)),
                other => typed(other, K::from_proto(&proto::unwrap_envelope(&raw)?.1)?),
            })
        }
    }
}

fn typed<K>(type_: &str, object: K) -> WatchEvent<K> {
    match type_ {
        "DELETED" => WatchEvent::Deleted(object),
        "MODIFIED" => WatchEvent::Modified(object),
        _ => WatchEvent::Added(object),
    }
}

/// Cuts a watch body into events as it arrives: lines (JSON) or length-prefixed frames
/// (protobuf), each at most [`MAX_FRAME`] bytes, never holding more.
#[derive(Debug)]
pub struct Framer {
    encoding: Encoding,
    buf: BytesMut,
}

impl Framer {
    /// A framer for a body in `encoding`.
    pub fn new(encoding: Encoding) -> Framer {
        Framer { encoding, buf: BytesMut::new() }
    }

    /// Takes the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole event, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, WireError> {
        match self.encoding {
            Encoding::Json => loop {
                let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
                    return if self.buf.len() > MAX_FRAME { Err(WireError::TooLong) } else { Ok(None) };
                };
                let line = self.buf.split_to(end + 1).freeze();
                if line.iter().any(|b| !b.is_ascii_whitespace()) {
                    return Ok(Some(line.slice(..end)));
                }
            },
            Encoding::Protobuf => {
                if self.buf.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if len > MAX_FRAME {
                    return Err(WireError::TooLong);
                }
                if self.buf.len() < 4 + len {
                    return Ok(None);
                }
                self.buf.advance(4);
                Ok(Some(self.buf.split_to(len).freeze()))
            }
        }
    }

    /// At the end of the body: a last JSON line without its newline, or an error for half
    /// an event.
    pub fn finish(&mut self) -> Result<Option<Bytes>, WireError> {
        let rest = std::mem::take(&mut self.buf);
        match self.encoding {
            _ if rest.iter().all(u8::is_ascii_whitespace) => Ok(None),
            Encoding::Json => Ok(Some(rest.freeze())),
            Encoding::Protobuf => Err(WireError::Truncated),
        }
    }
}

/// A protobuf watch frame: the length, then the event (what the API server writes).
pub fn frame(event: &proto::WatchEvent) -> Vec<u8> {
    let body = event.encode_to_vec();
    let mut out = u32::try_from(body.len()).expect("an event under 4 GiB").to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}
