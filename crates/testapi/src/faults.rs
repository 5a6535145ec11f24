//! Faults a test injects to play a broken or hostile API server: a list that stops half-way
//! and holds its connection open, and a watch line longer than any client should hold.
//! Each fault is armed for the next request of one resource type, and taken by it.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Mutex;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::store::TypeIdx;

/// The armed faults.
#[derive(Default)]
pub(crate) struct Faults {
    stalled_lists: Mutex<HashSet<TypeIdx>>,
    oversized_lines: Mutex<HashMap<TypeIdx, u64>>,
}

impl Faults {
    /// The next list of `ty` (a LIST, or a streaming list's initial events) stops half-way.
    pub fn stall_next_list(&self, ty: TypeIdx) {
        self.stalled_lists.lock().unwrap_or_else(|e| e.into_inner()).insert(ty);
    }

    /// Whether this list of `ty` stalls (the fault is then spent).
    pub fn take_stall(&self, ty: TypeIdx) -> bool {
        self.stalled_lists.lock().unwrap_or_else(|e| e.into_inner()).remove(&ty)
    }

    /// The next watch response of `ty` starts with a line of `bytes` bytes.
    pub fn oversize_next_watch(&self, ty: TypeIdx, bytes: u64) {
        self.oversized_lines.lock().unwrap_or_else(|e| e.into_inner()).insert(ty, bytes);
    }

    /// The length of the line this watch of `ty` starts with, if one was armed.
    pub fn take_oversized(&self, ty: TypeIdx) -> Option<u64> {
        self.oversized_lines.lock().unwrap_or_else(|e| e.into_inner()).remove(&ty)
    }
}

/// A body that sends the first half of `body`, then nothing, holding the connection until the
/// client gives up (or the server stops).
pub(crate) fn stalled(body: Vec<u8>) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let half = body.len() / 2;
    let first = Bytes::from(body).slice(..half);
    futures::stream::once(async move { Ok(first) }).chain(futures::stream::pending())
}

/// How much of the filler is sent per chunk.
const FILLER_CHUNK: usize = 1 << 20;

/// One chunk of filler: spaces, which JSON would skip, so only a bound on the line length
/// stops a client from buffering the whole line.
static FILLER: [u8; FILLER_CHUNK] = [b' '; FILLER_CHUNK];

/// A line of `len` bytes (filler, then a newline), sent in 1 MiB chunks of one static buffer:
/// the server holds none of it.
pub(crate) fn oversized_line(len: u64) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let filler = len.saturating_sub(1);
    let chunk = FILLER_CHUNK as u64;
    let full = filler / chunk;
    let rest = usize::try_from(filler % chunk).unwrap_or(0);
    futures::stream::iter((0..full).map(|_| Ok(Bytes::from_static(&FILLER))))
        .chain(futures::stream::once(async move { Ok(Bytes::from_static(&FILLER[..rest])) }))
        .chain(futures::stream::once(async { Ok(Bytes::from_static(b"\n")) }))
}
