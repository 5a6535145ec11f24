//! The fast reader against serde_norway, the reference: whatever it reads must be what serde_norway
//! reads, and it must read the common Kubernetes output rather than give everything up.

use super::writer::*;
use super::{Value, read, split};
use crate::manifests::{Manifests, parse_into, parse_into_split, parse_into_with_serde_norway};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Whatever the fast reader reads is what serde_norway reads (and it reads nothing serde_norway
    /// rejects), in serde_norway's output and in block style written every way.
    #[test]
    fn what_is_read_fast_is_what_serde_norway_reads(doc in document(leaf(true).boxed(), any_key().boxed()), style in style()) {
        for text in [serde_norway::to_string(&doc).unwrap(), write(&doc, &style)] {
            if let Some(fast) = read(&text) {
                prop_assert_eq!(Some(fast), serde_norway::from_str::<Value>(&text).ok(), "{}", text);
            }
        }
    }

    /// The same for documents of a few scalars, where one tricky scalar does not hide among
    /// others that make the reader give the document up anyway.
    #[test]
    fn each_scalar_is_read_as_serde_norway_reads_it(doc in small_document(), style in style()) {
        for text in [serde_norway::to_string(&doc).unwrap(), write(&doc, &style)] {
            if let Some(fast) = read(&text) {
                prop_assert_eq!(Some(fast), serde_norway::from_str::<Value>(&text).ok(), "{}", text);
            }
        }
    }

    /// Documents split where libyaml splits them, fast or slow.
    #[test]
    fn documents_are_split_as_libyaml_splits_them(parts in vec((0usize..9, 0usize..7), 0..6), last in 0usize..9) {
        const DOCS: &[&str] = &["a: 1\n", "", "# c\n", "kind: Service\n", "- 1\n", "  \n", "{a: 1}\n", "'x'\n", "!\n"];
        const SEPARATORS: &[&str] = &["---\n", "--- # c\n", "...\n", "...\n---\n", "--- \n", "\n", "--- a: 2\n"];
        let mut text: String = parts.iter().map(|&(d, s)| format!("{}{}", DOCS[d], SEPARATORS[s])).collect();
        text.push_str(DOCS[last]);
        // Documents without a kind are problems that name them by their index.
        prop_assert_eq!(parsed(&text, true), parsed(&text, false), "{:?}", text);
        let reference: Result<Vec<(usize, Value)>, _> = serde_norway::Deserializer::from_str(&text)
            .map(Value::deserialize)
            .enumerate()
            .map(|(i, v)| v.map(|v| (i, v)))
            .filter(|r| !matches!(r, Ok((_, Value::Null))))
            .collect();
        let (Ok(reference), Some(spans)) = (reference, split(&text)) else { return Ok(()) };
        let mut split_docs = Vec::new();
        for (i, span) in spans.iter().enumerate() {
            let value = match span.body.clone().and_then(|b| read(&text[b])) {
                Some(v) => v,
                None => serde_norway::from_str::<Value>(&text[span.whole.clone()]).unwrap(),
            };
            if value != Value::Null {
                split_docs.push((i, value));
            }
        }
        prop_assert_eq!(split_docs, reference, "{:?}", text);
    }
}

use serde::Deserialize;

/// Strings as Kubernetes objects hold them.
fn k8s_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,20}",
        "(10|172|192)\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}",
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z",
        "[a-z]+\\.k8s\\.io/[a-z-]+",
        prop::sample::select(vec![
            "TCP",
            "UDP",
            "IPv4",
            "ClusterIP",
            "None",
            "Cluster",
            "v1",
            "true",
            "80",
            "",
            "null"
        ])
        .prop_map(String::from),
    ]
}

fn k8s_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => k8s_string().prop_map(Value::String),
        2 => (0u64..70000).prop_map(|u| Value::Number(u.into())),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
    ]
    .boxed()
}

/// kubectl-like output (serde_norway's emitter, and block style quoting as kubectl does) is read
/// fast: a reader that gave everything up would pass the property above.
#[test]
fn kubectl_like_documents_are_read_fast() {
    let mut runner = TestRunner::deterministic();
    let strategy = (document(k8s_leaf(), "[a-zA-Z][a-zA-Z0-9./-]{0,15}".boxed()), style());
    let (mut texts, mut fast) = (0, 0);
    for _ in 0..500 {
        let (doc, mut style) = strategy.new_tree(&mut runner).unwrap().current();
        style.kubectl = true;
        for text in [serde_norway::to_string(&doc).unwrap(), write(&doc, &style)] {
            texts += 1;
            if let Some(value) = read(&text) {
                assert_eq!(value, doc, "{text}");
                fast += 1;
            }
        }
    }
    assert!(fast * 100 >= texts * 98, "only {fast} of {texts} kubectl-like documents were read fast");
}

fn parsed(text: &str, fast: bool) -> String {
    let mut m = Manifests::default();
    if fast {
        parse_into(&mut m, "f.yaml", text)
    } else {
        parse_into_with_serde_norway(&mut m, "f.yaml", text)
    }
    format!("{:#?}", (m.services, m.slices, m.nodes, m.service_cidrs, m.problems))
}

/// Read fast on two threads whatever the file's size (each half numbering its documents from
/// where it starts in the file).
fn parsed_in_halves(text: &str) -> String {
    let mut m = Manifests::default();
    parse_into_split(&mut m, "f.yaml", text, 2);
    format!("{:#?}", (m.services, m.slices, m.nodes, m.service_cidrs, m.problems))
}

const GOOD: &str = "apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  clusterIP: 10.96.0.10
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - addresses: [10.244.1.10]
    conditions: {ready: true, serving: true}
    nodeName: node1
    hints: {forZones: [{name: zone-a}]}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node1, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.0.2}]}
";

/// Documents each of which is wrong some way, read fast or not.
const BAD: &[&str] = &[
    "kind: Service\nmetadata: {name: label-number, labels: {app: 1}}\nspec: {clusterIP: 10.96.0.2}\n",
    "kind: Service\nmetadata: {name: ports}\nspec: {ports: notalist}\n",
    "kind: Service\nmetadata: {name: null-spec}\nspec:\n",
    "kind: Service\nmetadata: {name: seq-spec}\nspec: []\n",
    "kind: Service\nmetadata: [a, b]\n",
    "metadata: {name: no-kind}\n",
    "kind: Service\nmetadata: &m {name: anchored}\nspec: {clusterIP: 10.96.0.3}\n",
    "kind: Service\nmetadata: {name: float}\nspec: {ports: [{port: 80.0}]}\n",
    "kind: Service\nmetadata: {name: \"quoted\\x41\"}\nspec: {clusterIP: '10.96.0.4'}\n",
    "kind: Deployment\nmetadata: {name: ignored}\n",
    "# only a comment\n",
    "",
    "!\n",
    "kind: Service\nmetadata: {name: tagged}\nspec: !!map {clusterIP: 10.96.0.5}\n",
];

#[test]
fn fast_and_serde_norway_files_give_the_same_manifests() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus");
    let mut texts = vec![GOOD.to_string(), BAD.join("---\n"), format!("{}---\n{}...\n{GOOD}", BAD.join("---\n"), GOOD)];
    // A duplicate key is an error serde_norway ends the file at, too.
    texts.push(format!("{GOOD}---\nkind: Service\nmetadata: {{name: dup, name: again}}\n---\n{GOOD}"));
    // A syntax error ends the file where serde_norway meets it, after documents already read fast.
    texts.push(format!("{GOOD}---\nkind: Service\nmetadata: {{name: x\n---\n{GOOD}"));
    texts.push(format!("{GOOD}---\nkind: Service\n  bad: indent\n"));
    for entry in std::fs::read_dir(corpus).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            texts.push(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned());
        }
    }
    for text in &texts {
        let reference = parsed(text, false);
        assert_eq!(parsed(text, true), reference, "{text}");
        assert_eq!(parsed_in_halves(text), reference, "in halves: {text}");
    }
    // The bad documents are reported, with the same messages as before.
    assert!(parsed(&BAD.join("---\n"), true).contains("label-number"));
}

/// Every tricky string written plain, single- and double-quoted, as a value, a flow item and a
/// key: whatever the fast reader reads is serde_norway's reading (deterministic, beside the
/// properties above, which draw these among others).
#[test]
fn each_tricky_scalar_is_read_as_serde_norway_reads_it() {
    let mut read_fast = 0;
    for s in TRICKY {
        let quoted = [s.to_string(), format!("'{}'", s.replace('\'', "''")), format!("{s:?}")];
        for q in &quoted {
            for text in [format!("k: {q}\n"), format!("k: [{q}]\n"), format!("{q}: v\n"), format!("- {q}\n")] {
                if let Some(fast) = read(&text) {
                    read_fast += 1;
                    assert_eq!(Some(fast), serde_norway::from_str::<Value>(&text).ok(), "{text:?}");
                }
            }
        }
    }
    assert!(read_fast > TRICKY.len() * 4, "the reader gave up on nearly all ({read_fast})");
}
