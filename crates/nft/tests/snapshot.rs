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
    Stamp { netns: 4026531840, genid: 77, table: "kube-proxy".into() }
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
