//! The Warning Events verdict publishes about objects it cannot program, written once per
//! cluster rather than once per node.
//!
//! Every node's agent sees the same Services and EndpointSlices and finds the same problems
//! in them, so a tenant's bad Service would be N Event writes on a cluster of N nodes. Instead
//! each Event is named after what it says: the object, the reason, the message and a
//! ten-minute window ([`event_name`]). Every node creates the same name; the API server
//! stores the first and answers the others 409 AlreadyExists without writing anything. A
//! problem whose message names the node (a health check port this node cannot open) or is
//! about the node itself has a name of its own per node, and is written by that node.
//!
//! The Events go through a client of their own (run.rs), with its own `--kube-api-qps`
//! budget as upstream's event client has, so a burst of them never delays a relist.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use verdict_controller::metrics as m;
use verdict_controller::sync::ProblemNotice;
use verdict_model::{ObjectKind, ObjectRef};

/// The reporting controller of every Event.
const CONTROLLER: &str = "verdict";

/// The longest Event note the API server accepts, in bytes.
const MAX_NOTE: usize = 1000;

/// How long one name stands for a problem: the same problem again within it (fixed and
/// broken again, an agent restarted) adds nothing, and after it is a new Event. Nodes that
/// see one change on both sides of a window's end write it twice, never N times.
const WINDOW: Duration = Duration::from_secs(600);

/// The part of an Event name taken from the object's name, at most (the rest: a dot and 16
/// hex digits; names are DNS subdomains of at most 253 bytes).
const MAX_NAME_PREFIX: usize = 200;

/// Cuts `note` to [`MAX_NOTE`] bytes on a character boundary (messages quote names and
/// annotations, which may hold any UTF-8; `String::truncate` panics inside a character).
fn truncate_note(mut note: String) -> String {
    note.truncate(note.floor_char_boundary(MAX_NOTE));
    note
}

/// FNV-1a: the same on every node and in every version of verdict, unlike std's hasher.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        for b in part.iter().chain(&[0xff]) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The Event's name: the object's name (cut, in the characters a name may hold), then a hash
/// of the object, reason, note and the window `at` falls in. Every node names the same
/// problem alike at the same time, so all but the first create collide.
fn event_name(object: &ObjectRef, reason: &str, note: &str, at: SystemTime) -> String {
    let window = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / WINDOW.as_secs();
    let hash = fnv1a(&[
        object.kind.to_string().as_bytes(),
        object.namespace.as_bytes(),
        object.name.as_bytes(),
        reason.as_bytes(),
        note.as_bytes(),
        &window.to_le_bytes(),
    ]);
    let mut prefix: String = object
        .name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(MAX_NAME_PREFIX)
        .collect();
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    let prefix = prefix.trim_start_matches(['-', '.']);
    if prefix.is_empty() { format!("verdict.{hash:016x}") } else { format!("{prefix}.{hash:016x}") }
}

/// The Event announcing `notice` from `node` at `at`; `None` for a notice that says nothing
/// (problems resolved) or is about a kind Events cannot name.
fn problem_event(notice: &ProblemNotice, node: &str, at: SystemTime) -> Option<Event> {
    let first = notice.problems.first()?;
    let (api_version, kind) = match notice.object.kind {
        ObjectKind::Service => ("v1", "Service"),
        ObjectKind::EndpointSlice => ("discovery.k8s.io/v1", "EndpointSlice"),
        ObjectKind::Node => ("v1", "Node"),
        ObjectKind::Manifest => return None,
    };
    let namespaced = notice.object.kind != ObjectKind::Node;
    let note: Vec<&str> = notice.problems.iter().map(|p| p.message.as_str()).collect();
    let note = truncate_note(note.join("; "));
    let name = event_name(&notice.object, first.reason, &note, at);
    Some(Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(if namespaced { notice.object.namespace.clone() } else { "default".into() }),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(Timestamp::try_from(at).unwrap_or_else(|_| Timestamp::now()))),
        type_: Some("Warning".into()),
        reason: Some(first.reason.to_string()),
        note: Some(note),
        action: Some("Programming".into()),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(node.to_string()),
        regarding: Some(ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: namespaced.then(|| notice.object.namespace.clone()),
            name: Some(notice.object.name.clone()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    })
}

/// What became of one Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// This node wrote it.
    Written,
    /// Another node (or this one, earlier in the window) had: nothing was written.
    AlreadyWritten,
    /// The API server refused it or could not be reached.
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::AlreadyWritten => "already_written",
            Outcome::Failed => "failed",
        }
    }
}

async fn create(client: &kube::Client, event: &Event) -> Outcome {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let name = event.metadata.name.as_deref().unwrap_or_default();
    match api.create(&PostParams::default(), event).await {
        Ok(_) => Outcome::Written,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(event = name, "the Event was written already (by another node)");
            Outcome::AlreadyWritten
        }
        Err(e) => {
            tracing::warn!(event = name, "could not publish an Event: {e}");
            Outcome::Failed
        }
    }
}

/// Publishes a Warning Event on each object whose problems change (once per change, and once
/// per cluster: see the module's doc).
pub async fn publish_events(client: kube::Client, node: String, mut rx: tokio::sync::mpsc::Receiver<ProblemNotice>) {
    while let Some(notice) = rx.recv().await {
        let Some(event) = problem_event(&notice, &node, SystemTime::now()) else { continue };
        let outcome = create(&client, &event).await;
        metrics::counter!(m::EVENTS, "result" => outcome.label()).increment(1);
        if outcome == Outcome::Failed {
            tracing::warn!("the Event on {} was not published (its problems are still logged)", notice.object);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_model::Problem;
    use verdict_testapi::{TestApiServer, Verb};

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        // 999 ASCII bytes, then a 3-byte character across the 1000-byte limit.
        let note = format!("{}€ and more", "a".repeat(999));
        let cut = truncate_note(note);
        assert_eq!(cut, "a".repeat(999));
        // Multi-byte characters all the way: the cut is at most MAX_NOTE and whole.
        let cut = truncate_note("ü".repeat(800));
        assert_eq!(cut.len(), 1000);
        assert_eq!(cut, "ü".repeat(500));
        assert_eq!(truncate_note("short".into()), "short");
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn names_are_valid_and_depend_on_what_is_said_and_when() {
        let web = ObjectRef::new(ObjectKind::Service, "ns1", "web");
        let name = event_name(&web, "InvalidPort", "port 70000", at(1_800_000_000));
        assert!(name.starts_with("web.") && name.len() == "web.".len() + 16, "{name}");
        assert_eq!(name, event_name(&web, "InvalidPort", "port 70000", at(1_800_000_000 + 1)), "same window");
        for other in [
            event_name(&web, "InvalidPort", "port 70001", at(1_800_000_000)),
            event_name(&web, "OtherReason", "port 70000", at(1_800_000_000)),
            event_name(
                &ObjectRef::new(ObjectKind::Service, "ns2", "web"),
                "InvalidPort",
                "port 70000",
                at(1_800_000_000),
            ),
            event_name(
                &ObjectRef::new(ObjectKind::EndpointSlice, "ns1", "web"),
                "InvalidPort",
                "port 70000",
                at(1_800_000_000),
            ),
            event_name(&web, "InvalidPort", "port 70000", at(1_800_000_000 + WINDOW.as_secs())),
        ] {
            assert_ne!(name, other);
        }
        // A name of 253 bytes (an EndpointSlice's may be that long) still makes a valid one.
        let long = ObjectRef::new(ObjectKind::EndpointSlice, "ns1", &format!("{}-x", "a".repeat(250)));
        let name = event_name(&long, "R", "n", at(0));
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'));
        assert!(name.starts_with('a'));
    }

    fn problem(kind: ObjectKind, namespace: &str, name: &str, reason: &'static str, message: &str) -> ProblemNotice {
        let object = ObjectRef::new(kind, namespace, name);
        ProblemNotice { problems: vec![Problem::new(object.clone(), reason, message)], object }
    }

    /// Runs one publisher per node, each with its own client, each given `notices(node)`, as
    /// every node's agent would; returns when all have published.
    async fn publish_from_nodes(server: &TestApiServer, nodes: &[&str], notices: impl Fn(&str) -> Vec<ProblemNotice>) {
        let mut publishers = Vec::new();
        for node in nodes {
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            for n in notices(node) {
                tx.send(n).await.unwrap();
            }
            drop(tx);
            publishers.push(tokio::spawn(publish_events(server.client(), node.to_string(), rx)));
        }
        for p in publishers {
            p.await.unwrap();
        }
    }

    fn about(server: &TestApiServer, kind: &str, name: &str) -> Vec<serde_json::Value> {
        server
            .events()
            .into_iter()
            .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
            .collect()
    }

    const NODES: [&str; 5] = ["n1", "n2", "n3", "n4", "n5"];

    #[tokio::test]
    async fn a_problem_every_node_sees_is_one_event_write_not_one_per_node() {
        let server = TestApiServer::start().await.unwrap();
        publish_from_nodes(&server, &NODES, |_| {
            vec![
                problem(ObjectKind::Service, "ns1", "bad", "InvalidPort", "port 70000 is out of range"),
                problem(ObjectKind::EndpointSlice, "ns1", "bad-1", "InvalidEndpointAddress", "127.0.0.1 is loopback"),
            ]
        })
        .await;
        let creates = server.requests().into_iter().filter(|r| r.verb == Verb::Create && r.path.ends_with("/events"));
        assert_eq!(creates.count(), 10, "every node tried each Event");
        for (kind, name, reason) in
            [("Service", "bad", "InvalidPort"), ("EndpointSlice", "bad-1", "InvalidEndpointAddress")]
        {
            let events = about(&server, kind, name);
            assert_eq!(events.len(), 1, "one Event for five nodes: {events:#?}");
            assert_eq!(events[0]["reason"], reason);
            assert_eq!(events[0]["type"], "Warning");
            assert_eq!(events[0]["metadata"]["namespace"], "ns1");
            assert_eq!(events[0]["reportingController"], "verdict");
        }
        assert_eq!(server.events().len(), 2, "and nothing else was written");
        let writes = server.requests().into_iter().filter(|r| matches!(r.verb, Verb::Update | Verb::Patch)).count();
        assert_eq!(writes, 0);
    }

    #[tokio::test]
    async fn node_problems_and_node_specific_messages_are_written_by_each_node() {
        let server = TestApiServer::start().await.unwrap();
        publish_from_nodes(&server, &NODES[..3], |node| {
            vec![
                problem(ObjectKind::Node, "", node, "NodePortAddressesUnmatched", "no address matches"),
                problem(
                    ObjectKind::Service,
                    "ns1",
                    "lb",
                    "FailedToStartServiceHealthcheck",
                    &format!("node {node} failed to start healthcheck \"ns1/lb\" on port 30124: address in use"),
                ),
            ]
        })
        .await;
        for node in &NODES[..3] {
            let events = about(&server, "Node", node);
            assert_eq!(events.len(), 1, "{node}: {events:#?}");
            assert_eq!(events[0]["reportingInstance"], *node);
            assert_eq!(events[0]["metadata"]["namespace"], "default");
        }
        assert_eq!(about(&server, "Service", "lb").len(), 3, "one per node: each says its own node");
    }

    #[tokio::test]
    async fn a_changed_problem_is_a_new_event_and_a_repeat_is_none() {
        let server = TestApiServer::start().await.unwrap();
        let bad = |port: u32| problem(ObjectKind::Service, "ns1", "bad", "InvalidPort", &format!("port {port}"));
        publish_from_nodes(&server, &NODES[..2], |_| vec![bad(70000), bad(70001), bad(70000)]).await;
        let notes: Vec<String> =
            about(&server, "Service", "bad").iter().map(|e| e["note"].as_str().unwrap().to_string()).collect();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.contains(&"port 70000".to_string()) && notes.contains(&"port 70001".to_string()));
    }
}
