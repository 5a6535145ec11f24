//! The object store: an etcd stand-in with one global resourceVersion counter, a change
//! history (for watch replay, exact lists and paginated snapshots) and the open watches.
//!
//! Everything lives behind one mutex. Writes, history and the fan-out to watchers happen
//! under the same lock, so a watch that registers while replaying history can neither miss
//! nor duplicate a concurrent write, and a bookmark queued under the lock is always behind
//! every event it vouches for.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::record::RequestRecord;
use crate::resource::{ResourceType, builtin_types};
use crate::selector::Filter;
use crate::status::ApiError;

/// Index into [`State::types`].
pub(crate) type TypeIdx = usize;

/// An object's identity within its type: (namespace or "" when cluster-scoped, name).
pub(crate) type Key = (String, String);

/// The etcd resourceVersion a fresh server starts at; "0" means "any" in the protocol, so
/// real servers never hand it out and neither do we.
const INITIAL_RV: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// A stored object state, with its JSON encoding made once, when it was written: like the API
/// server's watch cache (`cachingObject`), a state sent to many watches, or to one watch of
/// 100,000 objects, is serialized once, not per event.
#[derive(Debug)]
pub(crate) struct Obj {
    pub value: Value,
    /// Its JSON as an item of a list: without `kind` and `apiVersion`, which the API server
    /// writes only on the list itself (kubernetes#3030); a watch event adds them in front.
    pub item_json: Bytes,
    /// Its protobuf encoding (without its envelope) for the kinds served in protobuf, made
    /// when it was written, as the JSON is.
    pub protobuf: Option<Bytes>,
}

impl Obj {
    pub(crate) fn new(value: Value) -> Arc<Obj> {
        let item_json = match value.as_object() {
            Some(fields) => serde_json::to_vec(&WithoutTypeMeta(fields)),
            None => serde_json::to_vec(&value),
        };
        let item_json = Bytes::from(item_json.expect("JSON values serialize"));
        let protobuf = crate::protobuf::raw(&value).map(Bytes::from);
        Arc::new(Obj { value, item_json, protobuf })
    }
}

/// An object's fields but `kind` and `apiVersion`, serialized without copying them.
struct WithoutTypeMeta<'a>(&'a serde_json::Map<String, Value>);

impl serde::Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().filter(|(k, _)| !matches!(k.as_str(), "kind" | "apiVersion")))
    }
}

/// One write, as remembered for watch replay and snapshot reconstruction.
#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    ty: TypeIdx,
    key: Key,
    kind: ChangeKind,
    /// The object after the change; for deletions its last state stamped with the deletion's RV.
    object: Arc<Obj>,
    /// The object before the change (`None` for creations).
    prev: Option<Arc<Obj>>,
}

/// What a watch connection receives, in order.
#[derive(Debug, Clone)]
pub(crate) enum WatchItem {
    /// `ADDED`, `MODIFIED` or `DELETED` with the object.
    Event(&'static str, Arc<Obj>),
    /// A `BOOKMARK` at this RV; `initial_end` marks the end of `sendInitialEvents`.
    Bookmark { rv: u64, initial_end: bool },
    /// An `ERROR` event; the stream ends after it.
    Error(ApiError),
}

/// How open watches are ended by [`Store::end_watches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Termination {
    /// Nothing requested yet.
    #[default]
    None,
    /// Finish the HTTP response cleanly (like a server-side watch timeout).
    Close,
    /// Break the connection mid-response (like a crashed server or a network failure).
    Abort,
}

/// Which state a read is served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAt {
    /// The newest state, which must be at least this RV (0 = any).
    Latest { not_older_than: u64 },
    /// Exactly the state at this RV (`resourceVersionMatch=Exact`, continue tokens).
    Exact(u64),
}

/// A page of a list, as served.
pub(crate) struct Snapshot {
    /// The RV the list was served at.
    pub rv: u64,
    pub items: Vec<(Key, Arc<Obj>)>,
    /// How many more matching objects follow the page (with a selector: 1 when any does).
    pub remaining: usize,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchStart {
    /// After this RV: replay every later change from history.
    After(u64),
    /// From the current state; `synthetic_adds` sends it as `ADDED` events first, and
    /// `initial_end_bookmark` follows them with the `k8s.io/initial-events-end` bookmark.
    Now { synthetic_adds: bool, initial_end_bookmark: bool },
}

/// A registered watch, as seen by the connection serving it.
pub(crate) struct WatchHandle {
    pub id: u64,
    pub rx: mpsc::UnboundedReceiver<WatchItem>,
    pub termination: watch::Receiver<(u64, Termination)>,
}

struct WatcherSlot {
    id: u64,
    ty: TypeIdx,
    filter: Filter,
    tx: mpsc::UnboundedSender<WatchItem>,
}

#[derive(Debug, Clone)]
struct Stored {
    value: Arc<Obj>,
    /// RV of the creation, to list events in the order they were created.
    created_rv: u64,
}

struct State {
    rv: u64,
    /// Changes with an RV at or below this one are forgotten.
    compacted: u64,
    types: Vec<ResourceType>,
    objects: Vec<BTreeMap<Key, Stored>>,
    history: Vec<Change>,
    watchers: Vec<WatcherSlot>,
    next_watcher_id: u64,
    bookmark_interval: Duration,
}

/// The shared server state.
pub(crate) struct Store {
    state: Mutex<State>,
    requests: Mutex<Vec<RequestRecord>>,
    bytes_sent: AtomicU64,
    no_streaming_lists: AtomicBool,
    termination: watch::Sender<(u64, Termination)>,
    /// Faults the test armed (see [`crate::faults`]).
    pub faults: crate::faults::Faults,
}

impl Store {
    pub fn new() -> Store {
        let types = builtin_types();
        let objects = types.iter().map(|_| BTreeMap::new()).collect();
        Store {
            state: Mutex::new(State {
                rv: INITIAL_RV,
                compacted: INITIAL_RV,
                types,
                objects,
                history: Vec::new(),
                watchers: Vec::new(),
                next_watcher_id: 0,
                bookmark_interval: Duration::from_secs(1),
            }),
            requests: Mutex::new(Vec::new()),
            bytes_sent: AtomicU64::new(0),
            no_streaming_lists: AtomicBool::new(false),
            termination: watch::Sender::new((0, Termination::None)),
            faults: crate::faults::Faults::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not take every later request down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- types -------------------------------------------------------------------------

    /// The index of a served type, registering it if new.
    pub fn ensure_type(&self, ty: ResourceType) -> TypeIdx {
        let mut st = self.lock();
        if let Some(i) = st.types.iter().position(|t| t.same_resource(&ty.group, &ty.version, &ty.plural)) {
            return i;
        }
        st.types.push(ty);
        st.objects.push(BTreeMap::new());
        st.types.len() - 1
    }

    /// Finds a served type by group, version and plural.
    pub fn find_type(&self, group: &str, version: &str, plural: &str) -> Option<(TypeIdx, ResourceType)> {
        let st = self.lock();
        st.types.iter().position(|t| t.same_resource(group, version, plural)).map(|i| (i, st.types[i].clone()))
    }

    /// All served types, for discovery.
    pub fn types(&self) -> Vec<ResourceType> {
        self.lock().types.clone()
    }

    // ---- reads -------------------------------------------------------------------------

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, ty: TypeIdx, key: &Key) -> Option<Value> {
        self.lock().objects[ty].get(key).map(|s| s.value.value.clone())
    }

    /// Current objects of a type, in key order.
    pub fn all(&self, ty: TypeIdx) -> Vec<Value> {
        self.lock().objects[ty].values().map(|s| s.value.value.clone()).collect()
    }

    /// Current objects of several types, in creation order.
    pub fn all_by_creation(&self, types: &[TypeIdx]) -> Vec<Value> {
        let st = self.lock();
        let mut found: Vec<&Stored> = types.iter().flat_map(|&t| st.objects[t].values()).collect();
        found.sort_by_key(|s| s.created_rv);
        found.into_iter().map(|s| s.value.value.clone()).collect()
    }

    /// One page of the objects of `ty` matching `filter` at `at`, in key order: at most
    /// `limit` objects with a key after `after`.
    ///
    /// Older states are rebuilt by undoing history newest-first, which is only possible while
    /// that history has not been compacted; otherwise the caller's `expired` error is returned.
    pub fn snapshot(
        &self,
        ty: TypeIdx,
        at: ReadAt,
        filter: &Filter,
        (after, limit): (Option<&Key>, Option<usize>),
        expired: impl FnOnce(u64, u64) -> ApiError,
    ) -> Result<Snapshot, ApiError> {
        let st = self.lock();
        let at = match at {
            ReadAt::Latest { not_older_than } if not_older_than > st.rv => {
                return Err(ApiError::too_large_resource_version(not_older_than, st.rv));
            }
            ReadAt::Latest { .. } => st.rv,
            ReadAt::Exact(rv) if rv > st.rv => return Err(ApiError::too_large_resource_version(rv, st.rv)),
            ReadAt::Exact(rv) if rv < st.compacted => return Err(expired(rv, st.compacted)),
            ReadAt::Exact(rv) => rv,
        };
        let is_after = |key: &Key| after.is_none_or(|a| key > a);
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        // What changed after `at`, undone newest first so the oldest change's `prev` wins:
        // `None` = the key did not exist at `at`. Only these keys differ from the current state,
        // so a page costs O(page + newer history), not O(objects), as with etcd's range reads.
        let mut undone: BTreeMap<&Key, Option<&Arc<Obj>>> = BTreeMap::new();
        for change in st.history.iter().rev().take_while(|c| c.rv > at) {
            if change.ty != ty || !is_after(&change.key) {
                continue;
            }
            let before = match (&change.kind, &change.prev) {
                (ChangeKind::Added, _) => None,
                (_, Some(prev)) => Some(prev),
                (_, None) => unreachable!("modifications and deletions always record the previous object"),
            };
            undone.insert(&change.key, before);
        }
        let current = st.objects[ty].range((lower, Bound::Unbounded)).map(|(k, s)| (k, Some(&s.value)));
        let then = undone.iter().map(|(k, v)| (*k, *v));
        let view = merge_by_key(current, then).filter_map(|(k, v)| v.map(|v| (k, v)));
        let mut matching = view.filter(|(_, v)| filter.matches(&v.value));
        let items = matching.by_ref().take(limit.unwrap_or(usize::MAX)).map(|(k, v)| (k.clone(), v.clone())).collect();
        // With a selector the real server cannot count what is left; it only says whether
        // something is (a continue token), so neither does this.
        let remaining = if filter.has_selectors() { usize::from(matching.next().is_some()) } else { matching.count() };
        Ok(Snapshot { rv: at, items, remaining })
    }

    // ---- writes ------------------------------------------------------------------------

    /// Stores `obj` under `key`. `expect` says what must be true first: `Some(false)` = must not
    /// exist (create), `Some(true)` = must exist (update), `None` = either (upsert). When
    /// `precondition_rv` is given it must equal the stored RV (optimistic concurrency).
    pub fn write(
        &self,
        ty: TypeIdx,
        key: Key,
        obj: Value,
        expect: Option<bool>,
        precondition_rv: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let t = st.types[ty].clone();
        let old = st.objects[ty].get(&key).cloned();
        match (expect, &old) {
            (Some(false), Some(_)) => return Err(ApiError::already_exists(&t.group, &t.plural, &key.1)),
            (Some(true), None) => return Err(ApiError::not_found(&t.group, &t.plural, &key.1)),
            _ => {}
        }
        if let (Some(want), Some(old)) = (precondition_rv, &old)
            && old.value.value["metadata"]["resourceVersion"].as_str() != Some(want)
        {
            return Err(ApiError::conflict(&t.group, &t.plural, &key.1));
        }
        let rv = st.rv + 1;
        let stamped = stamp(&t, &key, obj, old.as_ref().map(|o| &o.value.value), rv);
        let created_rv = old.as_ref().map_or(rv, |o| o.created_rv);
        let kind = if old.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
        let object = Obj::new(stamped.clone());
        st.objects[ty].insert(key.clone(), Stored { value: object.clone(), created_rv });
        st.commit(Change { rv, ty, key, kind, object, prev: old.map(|o| o.value) });
        Ok(stamped)
    }

    /// Deletes an object; the returned value is its last state, stamped with the deletion's RV.
    pub fn delete(&self, ty: TypeIdx, key: &Key, precondition_rv: Option<&str>) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let t = st.types[ty].clone();
        let Some(old) = st.objects[ty].get(key) else {
            return Err(ApiError::not_found(&t.group, &t.plural, &key.1));
        };
        if let Some(want) = precondition_rv
            && old.value.value["metadata"]["resourceVersion"].as_str() != Some(want)
        {
            return Err(ApiError::conflict(&t.group, &t.plural, &key.1));
        }
        let old = st.objects[ty].remove(key).expect("checked above").value;
        let rv = st.rv + 1;
        let mut gone = old.value.clone();
        gone["metadata"]["resourceVersion"] = json!(rv.to_string());
        st.commit(Change {
            rv,
            ty,
            key: key.clone(),
            kind: ChangeKind::Deleted,
            object: Obj::new(gone.clone()),
            prev: Some(old),
        });
        Ok(gone)
    }

    /// Forgets all history: older RVs can no longer be watched from or listed exactly.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.compacted = st.rv;
        st.history.clear();
    }

    // ---- watches -----------------------------------------------------------------------

    /// Registers a watch on `ty` and returns its handle plus the events to send before any
    /// live ones (history replay, synthetic `ADDED`s, or a single `ERROR`). When the initial
    /// events end in an `ERROR`, nothing is registered and the stream must end after them.
    pub fn watch(&self, ty: TypeIdx, filter: Filter, start: WatchStart) -> (WatchHandle, Vec<WatchItem>) {
        let mut st = self.lock();
        st.watchers.retain(|w| !w.tx.is_closed());
        let (tx, rx) = mpsc::unbounded_channel();
        let id = st.next_watcher_id;
        st.next_watcher_id += 1;
        let handle = WatchHandle { id, rx, termination: self.termination.subscribe() };

        let initial = match start {
            WatchStart::After(from) if from < st.compacted => {
                // What the real server sends: HTTP 200, then an ERROR event with 410 Expired.
                let msg = format!("too old resource version: {from} ({})", st.compacted);
                return (handle, vec![WatchItem::Error(ApiError::expired(msg))]);
            }
            WatchStart::After(from) if from > st.rv => {
                return (handle, vec![WatchItem::Error(ApiError::too_large_resource_version(from, st.rv))]);
            }
            WatchStart::After(from) => {
                st.history.iter().filter(|c| c.rv > from && c.ty == ty).filter_map(|c| event_for(c, &filter)).collect()
            }
            WatchStart::Now { synthetic_adds, initial_end_bookmark } => {
                let mut items: Vec<WatchItem> = Vec::new();
                if synthetic_adds {
                    items.extend(
                        st.objects[ty]
                            .values()
                            .filter(|s| filter.matches(&s.value.value))
                            .map(|s| WatchItem::Event("ADDED", s.value.clone())),
                    );
                }
                if initial_end_bookmark {
                    items.push(WatchItem::Bookmark { rv: st.rv, initial_end: true });
                }
                items
            }
        };
        st.watchers.push(WatcherSlot { id, ty, filter, tx });
        (handle, initial)
    }

    /// Queues a bookmark at the current RV for one watch. Queued under the store lock, it
    /// lands behind every event up to that RV, so the client may safely resume from it.
    pub fn bookmark(&self, watcher: u64) {
        let st = self.lock();
        if let Some(w) = st.watchers.iter().find(|w| w.id == watcher) {
            let _ = w.tx.send(WatchItem::Bookmark { rv: st.rv, initial_end: false });
        }
    }

    /// Ends every open watch the given way.
    pub fn end_watches(&self, how: Termination) {
        let mut st = self.lock();
        st.watchers.clear();
        self.termination.send_modify(|(epoch, mode)| {
            *epoch += 1;
            *mode = how;
        });
    }

    /// Number of watch connections still open.
    pub fn open_watches(&self) -> usize {
        self.lock().watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }

    pub fn bookmark_interval(&self) -> Duration {
        self.lock().bookmark_interval
    }

    pub fn set_bookmark_interval(&self, interval: Duration) {
        // A zero interval would make every watch spin sending bookmarks.
        self.lock().bookmark_interval = interval.max(Duration::from_millis(1));
    }

    // ---- request log -------------------------------------------------------------------

    pub fn record(&self, request: RequestRecord) {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).push(request);
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether watches may ask for a streaming list (`sendInitialEvents`).
    pub fn streaming_lists(&self) -> bool {
        !self.no_streaming_lists.load(Ordering::Relaxed)
    }

    pub fn set_streaming_lists(&self, offered: bool) {
        self.no_streaming_lists.store(!offered, Ordering::Relaxed);
    }

    pub fn count_sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Response body bytes sent so far (lists, watch streams, everything).
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    pub fn clear_requests(&self) {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Merges two key-ordered iterators; on equal keys the entry of `overrides` wins.
fn merge_by_key<'a, V: Copy>(
    base: impl Iterator<Item = (&'a Key, V)>,
    overrides: impl Iterator<Item = (&'a Key, V)>,
) -> impl Iterator<Item = (&'a Key, V)> {
    let mut base = base.peekable();
    let mut overrides = overrides.peekable();
    std::iter::from_fn(move || match (base.peek(), overrides.peek()) {
        (Some((b, _)), Some((o, _))) if b < o => base.next(),
        (Some((b, _)), Some((o, _))) if b == o => {
            base.next();
            overrides.next()
        }
        (_, Some(_)) => overrides.next(),
        (Some(_), None) => base.next(),
        (None, None) => None,
    })
}

impl State {
    /// Advances the global RV, remembers the change and fans it out to matching watches.
    fn commit(&mut self, change: Change) {
        debug_assert_eq!(change.rv, self.rv + 1);
        self.rv = change.rv;
        self.watchers.retain(|w| {
            if w.ty != change.ty {
                return !w.tx.is_closed();
            }
            match event_for(&change, &w.filter) {
                Some(item) => w.tx.send(item).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
        self.history.push(change);
    }
}

/// How one change looks to one watch, as the API server's watch cache decides it: an object
/// that starts matching the selector is `ADDED`, one that stops matching is `DELETED` (its
/// previous state at the change's RV), and changes invisible before and after are skipped.
fn event_for(change: &Change, filter: &Filter) -> Option<WatchItem> {
    let now = change.kind != ChangeKind::Deleted && filter.matches(&change.object.value);
    let before = change.prev.as_ref().is_some_and(|p| filter.matches(&p.value));
    match (now, before) {
        (true, false) => Some(WatchItem::Event("ADDED", change.object.clone())),
        (true, true) => Some(WatchItem::Event("MODIFIED", change.object.clone())),
        (false, true) => {
            let mut last = change.prev.as_ref().expect("matched before").value.clone();
            last["metadata"]["resourceVersion"] = json!(change.rv.to_string());
            Some(WatchItem::Event("DELETED", Obj::new(last)))
        }
        (false, false) => None,
    }
}

/// Fills in what the API server owns on every write: type, namespace, resourceVersion, and
/// on creation uid, creationTimestamp and generation (bumped when anything but metadata or
/// status changes, like for resources with a spec).
fn stamp(ty: &ResourceType, key: &Key, mut obj: Value, old: Option<&Value>, rv: u64) -> Value {
    if !obj.is_object() {
        obj = json!({});
    }
    obj["apiVersion"] = json!(ty.api_version());
    obj["kind"] = json!(ty.kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let meta = obj["metadata"].as_object_mut().expect("made an object above");
    meta.insert("name".into(), json!(key.1));
    if ty.namespaced {
        meta.insert("namespace".into(), json!(key.0));
    } else {
        meta.remove("namespace");
    }
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    match old {
        Some(old) => {
            for field in ["uid", "creationTimestamp"] {
                meta.insert(field.into(), old["metadata"][field].clone());
            }
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            let bump = i64::from(spec_of(&obj) != spec_of(old));
            obj["metadata"]["generation"] = json!(generation + bump);
        }
        None => {
            // Deterministic but unique: derived from the creating RV, shaped like a v4 UUID.
            meta.insert("uid".into(), json!(format!("7e57a91d-0000-4000-8000-{rv:012x}")));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("generation".into(), json!(1));
        }
    }
    obj
}

/// Everything except metadata and status, to decide whether `generation` moves.
fn spec_of(obj: &Value) -> Value {
    let mut spec = obj.clone();
    if let Some(map) = spec.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    spec
}

/// The current time with second precision, as `metav1.Time` is serialized.
pub(crate) fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}
