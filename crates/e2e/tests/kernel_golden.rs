//! Every golden table is valid nft that `nft list` prints back unchanged: the golden files are
//! what an operator will see.

use std::path::Path;
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

#[test]
fn golden_tables_load_with_nft_and_list_back_identically() {
    require_kernel!();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(expected) = std::fs::read_to_string(dir.join("expected.nft")) else { continue };
        let ns = Netns::new("gold").unwrap();
        ns.nft_stdin(&["-f", "-"], &expected).unwrap_or_else(|e| panic!("{}: nft -f refused it: {e}", dir.display()));
        let listed = ns.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
        assert_eq!(listed, expected, "{}: nft lists it differently", dir.display());
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} golden tables found");
}
