//! The saved table state: what is written reads back as the same elements, and a damaged or
//! foreign file is refused, never half-read.

use std::sync::Arc;
use verdict_nft::ruleset::{Blob, DataSpec, Datatype, Elem, KeySpec, Ruleset, Set, SetDecl, Table, Verdict};
use verdict_nft::snapshot::{Stamp, decode, encode};

fn ruleset() -> Ruleset {
    let mut rs = Ruleset::new(Table::default());
    let key = KeySpec::Type(vec![Datatype::Ipv4Addr, Datatype::InetProto, Datatype::InetService]);
    let mut vmap = Set::new(SetDecl::map("service-ips", key.clone(), DataSpec::Verdict));
    let comment: Arc<str> = Arc::from("ns/web:http");
    vmap.elements = Arc::new(verdict_nft::ruleset::ElementMap::from([
        (
            Blob::new(&[172, 30, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]),
            Elem::verdict(Verdict::Goto(Arc::from("endpoints-2")), Some(comment.clone())),
        ),
        (Blob::new(&[172, 30, 0, 2, 17, 0, 0, 0, 0, 53, 0, 0]), Elem::verdict(Verdict::Drop, None)),
        (
            Blob::new(&[172, 30, 0, 3, 6, 0, 0, 0, 0, 80, 0, 0]),
            Elem::verdict(Verdict::Jump(Arc::from("x")), Some(comment.clone())),
        ),
    ]));
    let mut data = Set::new(SetDecl::map("endpoints-2", key.clone(), DataSpec::Verdict));
    data.elements = Arc::new(verdict_nft::ruleset::ElementMap::from([(
        Blob::new(&[172, 30, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0, 1, 0, 0, 0]),
        Elem::value(Blob::new(&[10, 0, 1, 1, 0x1f, 0x90, 0, 0]), Some(comment)),
    )]));
    let mut plain = Set::new(SetDecl::set("cluster-ips", KeySpec::Type(vec![Datatype::Ipv4Addr])));
    plain.elements = Arc::new(verdict_nft::ruleset::ElementMap::from([(Blob::new(&[172, 30, 0, 1]), Elem::plain())]));
    rs.sets.insert("service-ips".into(), vmap);
    rs.sets.insert("endpoints-2".into(), data);
    rs.sets.insert("cluster-ips".into(), plain);
    rs.sets.insert("empty".into(), Set::new(SetDecl::set("empty", key)));
    rs
}

fn stamp() -> Stamp {
    Stamp {
        netns: 4026531840,
        genid: 77,
        boot_id: "8d5c4b4e-5a0b-4c59-9d7e-2b1c3f7e9a10".into(),
        structure: 0x1234_5678_9abc_def0,
        table: "kube-proxy".into(),
    }
}

#[test]
fn elements_round_trip() {
    let rs = ruleset();
    let (read_stamp, snapshot) = decode(&encode(&stamp(), &rs)).expect("a snapshot we wrote reads back");
    assert_eq!(read_stamp, stamp());
    assert_eq!(snapshot.sets.len(), rs.sets.len());
    for (name, set) in &rs.sets {
        assert_eq!(*snapshot.sets[name], *set.elements, "elements of {name}");
    }
}

#[test]
fn comments_and_chain_names_are_stored_once() {
    let bytes = encode(&stamp(), &ruleset());
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(text.matches("ns/web:http").count(), 1, "a comment shared by three elements is written once");
}

#[test]
fn damaged_files_are_refused() {
    let bytes = encode(&stamp(), &ruleset());
    assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "truncated");
    for i in [0, 9, 20, bytes.len() / 2, bytes.len() - 9] {
        let mut flipped = bytes.clone();
        flipped[i] ^= 0x40;
        assert!(decode(&flipped).is_err(), "a flipped byte at {i} must be noticed");
    }
    assert!(decode(b"").is_err());
    assert!(decode(b"not a state file at all").is_err());
}

#[test]
fn the_structure_digest_follows_chains_rule_counts_and_set_names_not_elements_or_traces() {
    use verdict_nft::ruleset::Chain;
    use verdict_nft::snapshot::structure_digest;
    let mut rs = ruleset();
    rs.chains.insert("services".into(), Chain::regular("services", Vec::new()));
    let digest = structure_digest(&rs);
    let mut fewer_elements = rs.clone();
    fewer_elements.sets.get_mut("cluster-ips").unwrap().elements = Arc::default();
    assert_eq!(structure_digest(&fewer_elements), digest, "elements are not read at a warm start");
    let mut traced = rs.clone();
    traced.chains.insert("trace-1-output-until-9".into(), Chain::regular("trace-1-output-until-9", Vec::new()));
    assert_eq!(structure_digest(&traced), digest, "a running trace is not the table's structure");
    let mut other_chain = rs.clone();
    other_chain.chains.insert("service-x".into(), Chain::regular("service-x", Vec::new()));
    assert_ne!(structure_digest(&other_chain), digest);
    let mut other_set = rs.clone();
    other_set.sets.remove("empty");
    assert_ne!(structure_digest(&other_set), digest);
}

/// A private directory for the state (mode 0700, as `check_dir` wants it).
fn state_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn links_planted_in_the_state_dir_are_not_written_or_read_through() {
    use std::os::unix::fs::symlink;
    let dir = state_dir();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let file = verdict_nft::snapshot::path(dir.path(), "kube-proxy", stamp().netns);
    // The temporary name earlier versions wrote first, and the state file itself.
    symlink(&victim, file.with_extension("tmp")).unwrap();
    symlink(&victim, &file).unwrap();
    verdict_nft::snapshot::save(dir.path(), &stamp(), &ruleset()).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "written through a link");
    let (read, _) = verdict_nft::snapshot::take(dir.path(), "kube-proxy", stamp().netns).unwrap().unwrap();
    assert_eq!(read, stamp());

    // A link at the state file is not read through (and is left for the operator to see).
    symlink(&victim, &file).unwrap();
    let err = verdict_nft::snapshot::take(dir.path(), "kube-proxy", stamp().netns).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[test]
fn a_state_dir_that_is_a_link_or_writable_by_others_is_refused() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = state_dir();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    symlink(&real, &link).unwrap();
    let err = verdict_nft::snapshot::save(&link, &stamp(), &ruleset()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let err = verdict_nft::snapshot::save(&real, &stamp(), &ruleset()).unwrap_err();
    assert!(err.to_string().contains("writable by group or others"), "{err}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "nothing written");
    let err = verdict_nft::snapshot::take(&real, "kube-proxy", stamp().netns).unwrap_err();
    assert!(err.to_string().contains("writable by group or others"), "{err}");
}
