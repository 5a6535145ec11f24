//! Golden tests: `verdict render` of each scenario in `tests/golden/<name>/` must print
//! exactly `expected.nft`. Each scenario holds `manifests/`, `flags` (extra arguments) and,
//! for bad input, `problems` (lines that must each appear among the reported problems).
//!
//! `UPDATE_GOLDEN=1 cargo test -p verdict-agent --test golden` rewrites `expected.nft`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scenarios() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(&root).expect("tests/golden").map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    assert!(!dirs.is_empty());
    dirs
}

#[test]
fn every_scenario_renders_its_expected_table() {
    let update = std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1");
    let mut failures = Vec::new();
    for dir in scenarios() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let flags = std::fs::read_to_string(dir.join("flags")).unwrap_or_default();
        let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .arg("render")
            .arg("--manifests")
            .arg(dir.join("manifests"))
            .args(flags.split_whitespace())
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{name}: verdict render failed: {stderr}");
        let expected_path = dir.join("expected.nft");
        if update {
            std::fs::write(&expected_path, &stdout).unwrap();
        } else {
            let expected = std::fs::read_to_string(&expected_path)
                .unwrap_or_else(|_| panic!("{name}: no expected.nft (run with UPDATE_GOLDEN=1 to create it)"));
            if stdout != expected {
                failures.push(format!(
                    "{name}: render differs from expected.nft:\n{}",
                    first_difference(&expected, &stdout)
                ));
            }
        }
        let problems = std::fs::read_to_string(dir.join("problems")).unwrap_or_default();
        let warnings = stderr.lines().filter(|l| l.contains("left out")).count();
        for line in problems.lines().filter(|l| !l.trim().is_empty()) {
            if !stderr.contains(line) {
                failures.push(format!("{name}: problem not reported: {line}\nstderr:\n{stderr}"));
            }
        }
        if warnings != problems.lines().filter(|l| !l.trim().is_empty()).count() {
            failures.push(format!("{name}: {warnings} problems reported, expected those in `problems`:\n{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn first_difference(expected: &str, got: &str) -> String {
    for (i, (e, g)) in expected.lines().zip(got.lines()).enumerate() {
        if e != g {
            return format!("line {}:\n  expected: {e}\n  rendered: {g}", i + 1);
        }
    }
    format!("lengths differ: expected {} lines, rendered {}", expected.lines().count(), got.lines().count())
}
