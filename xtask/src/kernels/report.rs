//! Results read back from the VM's share, and the kernel x suite table.

use std::path::Path;
use std::time::Duration;

/// The outcome of one suite on one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The failing tests' names, or why the executable failed as a whole.
    Failed(String),
    /// Not run: not in the chosen set, or the VM ended before it.
    Skipped(String),
}

/// One cell of the table.
#[derive(Clone, Debug)]
pub struct Cell {
    pub suite: String,
    pub outcome: Outcome,
    pub seconds: Option<f64>,
    pub tests: String,
    pub log: String,
}

/// One row: a kernel and what happened to it.
#[derive(Clone, Debug)]
pub struct Row {
    pub kernel: String,
    pub release: String,
    /// Set when the kernel could not be tested at all (download, boot, hang).
    pub problem: Option<String>,
    pub cells: Vec<Cell>,
    pub wall: Duration,
}

/// Reads `<suite>.rc`, `.secs` and `.log` that the guest's plan wrote.
pub fn read_cell(share: &Path, suite: &str) -> Cell {
    let read = |ext: &str| std::fs::read_to_string(share.join(format!("{suite}.{ext}"))).ok();
    let log = read("log").unwrap_or_default();
    let seconds = read("secs").and_then(|s| s.trim().parse().ok());
    let tests = log
        .lines()
        .filter_map(|l| l.strip_prefix("test result: "))
        .map(|l| l.split(';').take(3).collect::<Vec<_>>().join(";").replace(". ", " "))
        .collect::<Vec<_>>()
        .join(" + ");
    // A program that is no test executable (`e2e@fastpath`): its last line says what passed.
    let tests = match tests.is_empty() {
        true => log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().chars().take(80).collect(),
        false => tests,
    };
    let outcome = match read("rc").map(|s| s.trim().to_string()) {
        None => Outcome::Skipped("the VM ended before this suite ran".into()),
        Some(rc) if rc == "0" => Outcome::Passed,
        Some(rc) if rc == "124" || rc == "137" => Outcome::Failed("timed out inside the VM".into()),
        Some(rc) => {
            let failing = failing_tests(&log);
            Outcome::Failed(if failing.is_empty() { format!("exit {rc}") } else { failing.join(", ") })
        }
    };
    Cell { suite: suite.to_string(), outcome, seconds, tests, log }
}

/// The names under libtest's final "failures:" list.
fn failing_tests(log: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_list = false;
    for line in log.lines() {
        if line == "failures:" {
            in_list = true;
            names.clear();
        } else if in_list && line.starts_with("    ") {
            names.push(line.trim().to_string());
        } else if in_list && !line.is_empty() {
            in_list = false;
        }
    }
    names
}

/// The table, as markdown (it is also what docs/testing.md shows).
pub fn table(rows: &[Row], suites: &[String]) -> String {
    let mut s = String::from("| suite |");
    for r in rows {
        s.push_str(&format!(" {} ({}) |", r.kernel, r.release));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(rows.len()));
    s.push('\n');
    for suite in suites {
        s.push_str(&format!("| {suite} |"));
        for r in rows {
            let text = match (&r.problem, r.cells.iter().find(|c| &c.suite == suite)) {
                (Some(p), None) => format!("not run: {p}"),
                (_, None) => "skipped: not in this run".into(),
                (_, Some(c)) => cell_text(c),
            };
            s.push_str(&format!(" {text} |"));
        }
        s.push('\n');
    }
    s.push_str("| **VM wall time** |");
    for r in rows {
        match &r.problem {
            Some(p) => s.push_str(&format!(" {:.0} s, {p} |", r.wall.as_secs_f64())),
            None => s.push_str(&format!(" {:.0} s |", r.wall.as_secs_f64())),
        }
    }
    s.push('\n');
    s
}

fn cell_text(c: &Cell) -> String {
    let secs = c.seconds.map(|s| format!(", {s:.0} s")).unwrap_or_default();
    match &c.outcome {
        Outcome::Passed => format!("passed ({}{secs})", c.tests),
        Outcome::Failed(why) => format!("**FAILED**: {why}{secs}"),
        Outcome::Skipped(why) => format!("skipped: {why}"),
    }
}

/// The tail of each failed suite's output, for the reader of the table.
pub fn failures(rows: &[Row]) -> String {
    let mut s = String::new();
    for r in rows {
        for c in r.cells.iter().filter(|c| matches!(c.outcome, Outcome::Failed(_))) {
            let lines: Vec<&str> = c.log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            s.push_str(&format!(
                "\n=== {} on {} ({}): FAILED ===\n{}\n",
                c.suite,
                r.kernel,
                r.release,
                tail.join("\n")
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes one suite's result files, as the guest does, into a fresh directory.
    fn share(name: &str, log: &str, rc: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-report-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (ext, text) in [("log", log), ("rc", rc), ("secs", "33.2")] {
            std::fs::write(dir.join(format!("suite.{ext}")), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_cell_says_what_passed_for_tests_and_for_a_program() {
        let libtest =
            share("libtest", "running 3 tests\ntest result: ok. 3 passed; 0 failed; 0 ignored; 0 measured\n", "0\n");
        let program = share("program", "[7/7] restart: ok\ne2e: all 7 scenarios passed in 33.0 s\n\n", "0\n");
        let failed = share("failed", "failures:\n    a_test\n\ntest result: FAILED. 0 passed; 1 failed\n", "101\n");
        let text = |dir: &std::path::Path| cell_text(&read_cell(dir, "suite"));
        assert_eq!(text(&libtest), "passed (ok 3 passed; 0 failed; 0 ignored, 33 s)");
        assert_eq!(text(&program), "passed (e2e: all 7 scenarios passed in 33.0 s, 33 s)");
        assert_eq!(text(&failed), "**FAILED**: a_test, 33 s");
        for dir in [libtest, program, failed] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
