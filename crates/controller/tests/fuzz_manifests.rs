//! Fuzzing the manifests reader (issue 10): YAML and JSON documents made from generated
//! Kubernetes objects with hostile values, whole or cut, with bytes changed, and the
//! hand-written hostile files of `tests/fuzz_corpus/`. JSON goes through `manifests::load` (its
//! reader is private to the crate), from a temporary directory.
//!
//! Properties: nothing panics; an untouched document becomes exactly the object it was made
//! from; whatever cannot be read is reported as a manifest problem that names the file, in one
//! line; the fast YAML reader changes nothing serde_norway alone would read. `PROPTEST_CASES` sets the number of cases (256 by default).

mod fuzz;

use fuzz::*;
use proptest::collection::vec;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use verdict_controller::manifests::{self, Manifests};
use verdict_controller::translate;
use verdict_model::{ObjectKind, ProxyConfig, build_model};

/// One object of any kind verdict reads, as a JSON value (YAML is written from it).
fn object() -> impl Strategy<Value = serde_json::Value> {
    let ns = || prop_oneof![Just("ns".to_string()), hostile_string()];
    prop_oneof![
        hostile_service(ns()).prop_map(|o| with_kind(serde_json::to_value(o), "v1", "Service")),
        hostile_slice(ns()).prop_map(|o| with_kind(serde_json::to_value(o), "discovery.k8s.io/v1", "EndpointSlice")),
        hostile_node().prop_map(|o| with_kind(serde_json::to_value(o), "v1", "Node")),
        hostile_service_cidr().prop_map(|o| with_kind(serde_json::to_value(o), "networking.k8s.io/v1", "ServiceCIDR")),
    ]
}

/// k8s-openapi leaves `apiVersion` and `kind` out of a plain `to_value`.
fn with_kind(value: serde_json::Result<serde_json::Value>, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = value.expect("k8s-openapi objects serialize");
    value["apiVersion"] = api_version.into();
    value["kind"] = kind.into();
    value
}

/// How the text of a file is damaged before it is read.
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// Cut after this fraction (in thousandths) of the text.
    Truncate(usize),
    /// Bytes (as chars) written over at fractions of the text.
    Overwrite(Vec<(usize, char)>),
}

fn damage() -> impl Strategy<Value = Damage> {
    let hostile_char = prop_oneof![
        prop::sample::select(vec!['{', '}', '[', ']', ':', '"', '\'', '-', '\n', '\t', '&', '*', '!', '#', '\0', '☃']),
        any::<char>(),
    ];
    prop_oneof![
        2 => Just(Damage::None),
        1 => (0usize..1000).prop_map(Damage::Truncate),
        2 => vec((0usize..1000, hostile_char), 1..4).prop_map(Damage::Overwrite),
    ]
}

fn apply(text: &str, damage: &Damage) -> String {
    let at = |thousandths: usize| {
        let mut i = text.len() * thousandths / 1000;
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match damage {
        Damage::None => text.to_string(),
        Damage::Truncate(t) => text[..at(*t)].to_string(),
        Damage::Overwrite(changes) => {
            let mut out: Vec<char> = text.chars().collect();
            for (t, c) in changes {
                if !out.is_empty() {
                    let i = (out.len() * t / 1000).min(out.len() - 1);
                    out[i] = *c;
                }
            }
            out.into_iter().collect()
        }
    }
}

/// The objects a Manifests holds, as (kind, translated record) debug strings, for comparison.
fn objects(m: &Manifests) -> Vec<String> {
    let mut out: Vec<String> = m.services.iter().map(|o| format!("{o:?}")).collect();
    out.extend(m.slices.iter().map(|o| format!("{o:?}")));
    out.extend(m.nodes.iter().map(|o| format!("{o:?}")));
    out.extend(m.service_cidrs.iter().map(|o| format!("{o:?}")));
    out.sort();
    out
}

/// What reading `value` must give: the controller's translation of the typed object.
fn expected(values: &[serde_json::Value]) -> Vec<String> {
    let mut m = Manifests::default();
    for v in values {
        let kind = v["kind"].as_str().unwrap_or_default();
        let v = v.clone();
        match kind {
            "Service" => m.services.push(translate::service(&serde_json::from_value(v).unwrap())),
            "EndpointSlice" => m.slices.push(translate::endpoint_slice(&serde_json::from_value(v).unwrap())),
            "Node" => m.nodes.push(translate::node(&serde_json::from_value(v).unwrap())),
            _ => m.service_cidrs.push(translate::service_cidr(&serde_json::from_value(v).unwrap())),
        }
    }
    objects(&m)
}

/// Every problem is about a manifest, names the file, and is one line; the objects read still
/// build a model and render without a panic.
fn check_problems_and_use(m: &Manifests, origin: &str) -> Result<(), TestCaseError> {
    for p in &m.problems {
        prop_assert_eq!(p.object.kind, ObjectKind::Manifest, "{}", p);
        prop_assert!(p.object.name.starts_with(origin), "{} does not name {}", p, origin);
        prop_assert!(!p.to_string().contains('\n'), "not one line: {:?}", p.to_string());
    }
    let built = build_model(ProxyConfig::default(), NODE, m.node(NODE), &[], &m.services, &m.slices);
    let rs = verdict_layout::render(&built.model, &Default::default());
    let _ = verdict_nft::text::listing(&rs);
    Ok(())
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn yaml_documents_are_read_or_reported(values in vec(object(), 0..4), damage in damage()) {
        let docs: Vec<String> = values.iter().map(|v| serde_norway::to_string(v).unwrap()).collect();
        let text = apply(&docs.join("---\n"), &damage);
        let mut m = Manifests::default();
        manifests::parse_into(&mut m, "fuzz.yaml", &text);
        if matches!(damage, Damage::None) {
            prop_assert!(m.problems.is_empty(), "{:?}", m.problems);
            prop_assert_eq!(objects(&m), expected(&values));
        }
        check_problems_and_use(&m, "fuzz.yaml")?;
    }

    /// The fast YAML reader, with serde_norway where it gives a document up, reads every file
    /// (damaged or not) exactly as serde_norway alone does: objects, problems and their order.
    #[test]
    fn yaml_is_read_as_serde_norway_alone_reads_it(
        values in vec(object(), 0..4),
        file in prop::sample::select(corpus()),
        damage in damage(),
    ) {
        let docs: Vec<String> = values.iter().map(|v| serde_norway::to_string(v).unwrap()).collect();
        let corpus = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        for text in [apply(&docs.join("---\n"), &damage), apply(&corpus, &damage)] {
            let (mut fast, mut reference) = (Manifests::default(), Manifests::default());
            manifests::parse_into(&mut fast, "f.yaml", &text);
            manifests::parse_into_with_serde_norway(&mut reference, "f.yaml", &text);
            prop_assert_eq!(format!("{:?}", fast), format!("{:?}", reference), "{:?}", text);
        }
    }

    #[test]
    fn json_lists_and_objects_are_read_or_reported(
        values in vec(object(), 0..4),
        as_list in any::<bool>(),
        damage in damage(),
    ) {
        let whole = if as_list || values.len() != 1 {
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values})
        } else {
            values[0].clone()
        };
        let text = apply(&serde_json::to_string_pretty(&whole).unwrap(), &damage);
        let m = load_json(&text);
        if matches!(damage, Damage::None) {
            prop_assert!(m.problems.is_empty(), "{:?}", m.problems);
            prop_assert_eq!(objects(&m), expected(&values));
        }
        check_problems_and_use(&m, &json_dir().display().to_string())?;
    }

    #[test]
    fn damaged_corpus_files_are_read_or_reported(file in prop::sample::select(corpus()), damage in damage()) {
        let bytes = std::fs::read(&file).unwrap();
        let text = apply(&String::from_utf8_lossy(&bytes), &damage);
        if file.extension().is_some_and(|e| e == "json") {
            check_problems_and_use(&load_json(&text), &json_dir().display().to_string())?;
        } else {
            let mut m = Manifests::default();
            manifests::parse_into(&mut m, "corpus.yaml", &text);
            check_problems_and_use(&m, "corpus.yaml")?;
        }
    }
}

/// What the directories JSON cases are written to start with (the JSON reader is reached
/// through `manifests::load`, the only public way to it), as problems name them.
fn json_dir() -> PathBuf {
    std::env::temp_dir().join(format!("verdict-fuzz-json-{}", std::process::id()))
}

/// Loads `text` as a JSON file in a directory of this thread's, removed again afterwards.
fn load_json(text: &str) -> Manifests {
    let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_alphanumeric(), "");
    let dir = PathBuf::from(format!("{}-{thread}", json_dir().display()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fuzz.json"), text).unwrap();
    let loaded = manifests::load(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    loaded.unwrap()
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus")
}

fn corpus() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

/// The whole corpus directory through `manifests::load`: every file is read or reported (the
/// file that is not UTF-8 too), and each problem names its file.
#[test]
fn the_corpus_directory_loads_with_every_bad_file_reported() {
    let m = manifests::load(&corpus_dir()).unwrap();
    assert_eq!(m.files.len(), corpus().len());
    for bad in ["not-utf8.yaml", "wrong-types.yaml", "deep-nesting.json", "alias-bomb.yaml"] {
        assert!(m.problems.iter().any(|p| p.object.name.contains(bad)), "{bad} not reported: {:#?}", m.problems);
    }
    for p in &m.problems {
        assert!(!p.to_string().contains('\n'), "not one line: {p}");
    }
    // The good objects of hostile-values.json are still read.
    assert!(m.services.iter().any(|s| s.name == "svc"), "{:?}", m.services);
}
