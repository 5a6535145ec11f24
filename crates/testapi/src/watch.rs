//! WATCH: a chunked HTTP response carrying one JSON watch event per line.
//!
//! The stream replays history after the requested resourceVersion (or sends the current
//! state as synthetic `ADDED` events), then forwards live changes, interleaved with periodic
//! `BOOKMARK`s when the client allows them. It ends after `timeoutSeconds`, after an `ERROR`
//! event (410 for a compacted resourceVersion, as the real server does mid-stream rather than
//! as an HTTP error), or when the test ends all watches.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::json;
use tokio::time::Instant;

use crate::output::Output;
use crate::query::Query;
use crate::resource::ResourceType;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::{Store, Termination, TypeIdx, WatchHandle, WatchItem, WatchStart};

/// The real server's default when `timeoutSeconds` is absent is a random 30-60 minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The validated parameters of a watch request.
#[derive(Debug, Clone, PartialEq)]
struct WatchRequest {
    start: WatchStart,
    bookmarks: bool,
    timeout: Duration,
}

fn parse(query: &Query) -> Result<WatchRequest, ApiError> {
    let bookmarks = query.flag("allowWatchBookmarks")?.unwrap_or(false);
    let send_initial_events = query.flag("sendInitialEvents")?;
    let rv = query.resource_version()?.filter(|&rv| rv != 0);
    let timeout = match query.number("timeoutSeconds")? {
        Some(0) | None => DEFAULT_TIMEOUT,
        Some(secs) => Duration::from_secs(secs),
    };

    // The API server's validation of streaming-list parameters (ValidateListOptions).
    let rv_match = query.get("resourceVersionMatch");
    match (send_initial_events, rv_match) {
        (None, Some(_)) => {
            return Err(ApiError::invalid(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        (Some(_), m) if m != Some("NotOlderThan") => {
            return Err(ApiError::invalid(
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            ));
        }
        (Some(true), _) if !bookmarks => {
            return Err(ApiError::invalid("sendInitialEvents requires setting allowWatchBookmarks to true"));
        }
        _ => {}
    }

    let start = match (send_initial_events, rv) {
        // Streaming list: the state (at least as new as `rv`) as ADDED events, then the
        // bookmark annotated `k8s.io/initial-events-end`.
        (Some(true), _) => WatchStart::Now { synthetic_adds: true, initial_end_bookmark: true },
        (Some(false), None) => WatchStart::Now { synthetic_adds: false, initial_end_bookmark: false },
        // Legacy "0"/unset: "Get State and Start at Any/Most Recent", i.e. synthetic ADDEDs.
        (None, None) => WatchStart::Now { synthetic_adds: true, initial_end_bookmark: false },
        (_, Some(rv)) => WatchStart::After(rv),
    };
    Ok(WatchRequest { start, bookmarks, timeout })
}

/// Validates a watch request and returns the stream of response chunks.
pub(crate) fn watch(
    store: Arc<Store>,
    (ty_idx, ty): (TypeIdx, &ResourceType),
    filter: Filter,
    query: &Query,
    (output, protobuf): (Output, bool),
) -> Result<impl Stream<Item = io::Result<Bytes>> + Send + 'static, ApiError> {
    // Before Kubernetes 1.27 (or with the WatchList feature off) the server refuses the
    // streaming-list parameters outright.
    if !store.streaming_lists() && query.get("sendInitialEvents").is_some() {
        return Err(ApiError::invalid("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch"));
    }
    let request = parse(query)?;
    // A streaming list "not older than" a future RV cannot be served yet.
    if let (WatchStart::Now { .. }, Some(rv)) = (request.start, query.resource_version()?) {
        let current = store.current_rv();
        if rv > current {
            return Err(ApiError::too_large_resource_version(rv, current));
        }
    }
    let streaming_list = matches!(request.start, WatchStart::Now { synthetic_adds: true, .. });
    let stall_in = (streaming_list && store.faults.take_stall(ty_idx)).then_some(());
    let oversized = store.faults.take_oversized(ty_idx);
    let (handle, initial) = store.watch(ty_idx, filter, request.start);
    let ends_with_error = matches!(initial.last(), Some(WatchItem::Error(_)));
    // A stalled streaming list sends half its objects, then nothing.
    let stall_in = stall_in.map(|()| initial.len() / 2);
    let now = Instant::now();
    let session = Session {
        next_bookmark: now + store.bookmark_interval(),
        store,
        handle,
        pending: initial.into(),
        finish_after_pending: ends_with_error,
        deadline: now + request.timeout,
        bookmarks: request.bookmarks,
        type_meta: type_meta_head(ty),
        ty: ty.clone(),
        output,
        protobuf,
        done: false,
        stall_in,
    };
    let events = futures::stream::unfold(session, |mut s| async move { s.next_chunk().await.map(|chunk| (chunk, s)) });
    // In protobuf, the same fault is a frame whose length says it is that long.
    let header = oversized
        .filter(|_| protobuf)
        .map(|len| Ok(Bytes::copy_from_slice(&(len.min(u64::from(u32::MAX)) as u32).to_be_bytes())));
    let first = futures::stream::iter(header)
        .chain(futures::stream::iter(oversized.map(crate::faults::oversized_line)).flatten());
    Ok(first.chain(events))
}

/// How many bytes of already-decided events one chunk of a watch response carries at most.
const PENDING_CHUNK: usize = 256 * 1024;

/// The state of one open watch response.
struct Session {
    store: Arc<Store>,
    handle: WatchHandle,
    /// Events decided at registration time (replay, synthetic ADDEDs, an ERROR).
    pending: VecDeque<WatchItem>,
    finish_after_pending: bool,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    ty: ResourceType,
    /// `{"apiVersion":"…","kind":"…"` for the objects of JSON events.
    type_meta: Vec<u8>,
    output: Output,
    /// Frames of protobuf events instead of JSON lines.
    protobuf: bool,
    done: bool,
    /// With a stalled streaming list: how many more initial events are sent before the stall.
    stall_in: Option<usize>,
}

/// An object's JSON opening with the type's `apiVersion` and `kind`, not closed.
fn type_meta_head(ty: &ResourceType) -> Vec<u8> {
    let mut head =
        serde_json::to_vec(&json!({"apiVersion": ty.api_version(), "kind": ty.kind})).expect("JSON serializes");
    head.pop(); // the closing brace
    head
}

impl Session {
    /// The next line to send; `None` ends the response cleanly, an error breaks the connection.
    async fn next_chunk(&mut self) -> Option<io::Result<Bytes>> {
        if self.done {
            return None;
        }
        loop {
            if self.handle.termination.has_changed().unwrap_or(true) {
                return self.terminate();
            }
            if self.stall_in == Some(0) {
                // Stalled: nothing more until the test ends the watch (or the client leaves).
                let _ = self.handle.termination.changed().await;
                return self.terminate();
            }
            if !self.pending.is_empty() {
                // Lines decided up front go out in large chunks, as the real server's buffered
                // writer sends them: one HTTP chunk per event would make a streamed list of
                // 100k objects cost the server (and the machine it shares) far more than it does.
                let mut chunk = Vec::new();
                while chunk.len() < PENDING_CHUNK
                    && self.stall_in != Some(0)
                    && let Some(item) = self.pending.pop_front()
                {
                    self.encode_into(item, &mut chunk);
                    if let Some(left) = &mut self.stall_in {
                        *left -= 1;
                    }
                }
                return Some(Ok(Bytes::from(chunk)));
            }
            if self.finish_after_pending {
                return None;
            }
            let next_bookmark = self.next_bookmark;
            tokio::select! {
                biased;
                _ = self.handle.termination.changed() => return self.terminate(),
                _ = tokio::time::sleep_until(self.deadline) => return None,
                item = self.handle.rx.recv() => return item.map(|item| {
                    let mut line = Vec::new();
                    self.encode_into(item, &mut line);
                    Ok(Bytes::from(line))
                }),
                _ = tokio::time::sleep_until(next_bookmark), if self.bookmarks => {
                    // Queued through the store so it lands behind every event it covers.
                    self.store.bookmark(self.handle.id);
                    self.next_bookmark = Instant::now() + self.store.bookmark_interval();
                }
            }
        }
    }

    fn terminate(&mut self) -> Option<io::Result<Bytes>> {
        self.done = true;
        match self.handle.termination.borrow_and_update().1 {
            Termination::Abort => {
                Some(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "watch connection broken by the test")))
            }
            Termination::Close | Termination::None => None,
        }
    }

    /// Appends the event's line (or frame) to `out`.
    fn encode_into(&self, item: WatchItem, out: &mut Vec<u8>) {
        if self.protobuf {
            return self.frame_into(item, out);
        }
        let event = match item {
            WatchItem::Event(kind, object) if self.output == Output::Full => {
                // The object's JSON was made when it was written (the watch cache's way); an
                // event's object, unlike a list's item, starts with its kind and apiVersion.
                out.extend_from_slice(b"{\"type\":\"");
                out.extend_from_slice(kind.as_bytes());
                out.extend_from_slice(b"\",\"object\":");
                out.extend_from_slice(&self.type_meta);
                match object.item_json.strip_prefix(b"{") {
                    Some(rest) if rest != b"}" => {
                        out.push(b',');
                        out.extend_from_slice(rest);
                    }
                    _ => out.push(b'}'),
                }
                out.extend_from_slice(b"}\n");
                return;
            }
            WatchItem::Event(kind, object) => json!({"type": kind, "object": self.output.object(object.value.clone())}),
            WatchItem::Bookmark { rv, initial_end } => {
                let (api_version, kind) = self.output.bookmark_type(&self.ty);
                let mut metadata = json!({"resourceVersion": rv.to_string()});
                if initial_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind, "metadata": metadata}})
            }
            WatchItem::Error(err) => json!({"type": "ERROR", "object": err.to_status()}),
        };
        serde_json::to_writer(&mut *out, &event).expect("JSON values serialize");
        out.push(b'\n');
    }

    /// Appends the event's protobuf frame to `out`.
    fn frame_into(&self, item: WatchItem, out: &mut Vec<u8>) {
        use crate::protobuf;
        match item {
            WatchItem::Event(kind, object) => {
                // Encoded once per object state, when it was written, as the JSON is.
                let raw = object.protobuf.clone().unwrap_or_default().to_vec();
                protobuf::frame(kind, protobuf::envelope(&self.ty.api_version(), &self.ty.kind, raw), out);
            }
            WatchItem::Bookmark { rv, initial_end } => {
                protobuf::frame("BOOKMARK", protobuf::bookmark(&self.ty, rv, initial_end), out);
            }
            WatchItem::Error(err) => protobuf::frame("ERROR", protobuf::status(&err), out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(q: &str) -> Result<WatchRequest, ApiError> {
        parse(&Query::parse(q))
    }

    #[test]
    fn watch_parameters() {
        let r = parse_str("watch=true&timeoutSeconds=5&allowWatchBookmarks=true&resourceVersion=12").unwrap();
        assert_eq!(r.start, WatchStart::After(12));
        assert!(r.bookmarks);
        assert_eq!(r.timeout, Duration::from_secs(5));

        let r = parse_str("watch=1&resourceVersion=0").unwrap();
        assert_eq!(r.start, WatchStart::Now { synthetic_adds: true, initial_end_bookmark: false });

        let r = parse_str(
            "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
        )
        .unwrap();
        assert_eq!(r.start, WatchStart::Now { synthetic_adds: true, initial_end_bookmark: true });

        assert_eq!(
            parse_str("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan").unwrap_err().code,
            422
        );
        assert_eq!(parse_str("watch=true&resourceVersionMatch=NotOlderThan").unwrap_err().code, 422);
        assert_eq!(parse_str("watch=true&resourceVersion=abc").unwrap_err().code, 400);
    }
}
