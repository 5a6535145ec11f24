//! The command line against what the documentation tells people to type: every `cargo xtask ...`
//! in README.md, .ci/run and docs/*.md must parse, so the two cannot drift apart.

use super::{Cli, Command};
use clap::{CommandFactory, Parser, error::ErrorKind};
use std::path::{Path, PathBuf};

const SUBCOMMANDS: &[&str] = &["test", "deny", "demo", "bench", "e2e", "image", "kernels"];

fn parse(line: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("xtask").chain(line.iter().copied()))
}

fn kind(line: &[&str]) -> ErrorKind {
    parse(line).map(|c| panic!("{line:?} parsed: {c:?}")).unwrap_err().kind()
}

#[test]
fn the_declaration_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_command_answers_help_instead_of_running() {
    assert_eq!(kind(&["--help"]), ErrorKind::DisplayHelp);
    assert_eq!(kind(&["help"]), ErrorKind::DisplayHelp);
    for sub in SUBCOMMANDS {
        assert_eq!(kind(&[sub, "--help"]), ErrorKind::DisplayHelp, "{sub} --help");
        assert_eq!(kind(&[sub, "-h"]), ErrorKind::DisplayHelp, "{sub} -h");
        assert_eq!(kind(&["help", sub]), ErrorKind::DisplayHelp, "help {sub}");
    }
    // After other flags too: the kernel matrix must not start.
    assert_eq!(kind(&["kernels", "--kernel", "6.1", "--help"]), ErrorKind::DisplayHelp);
    assert_eq!(kind(&["e2e", "--containers", "--help"]), ErrorKind::DisplayHelp);
}

#[test]
fn every_flag_has_help_text() {
    let cli = Cli::command();
    for sub in cli.get_subcommands() {
        assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
        for arg in sub.get_arguments().filter(|a| a.get_id() != "help") {
            assert!(arg.get_help().is_some(), "{} {} has no help", sub.get_name(), arg.get_id());
        }
    }
}

#[test]
fn an_unknown_flag_or_command_is_an_error_with_exit_status_2() {
    // `test` forwards what it does not know to `cargo test`, which rejects what it does not know.
    for sub in SUBCOMMANDS.iter().filter(|s| **s != "test") {
        let e = parse(&[sub, "--no-such-flag"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{sub}");
        assert_eq!(e.exit_code(), 2);
    }
    assert_eq!(kind(&["kernels", "--kernel", "6.1", "--cii"]), ErrorKind::UnknownArgument);
    assert_eq!(kind(&["no-such-command"]), ErrorKind::InvalidSubcommand);
    assert_eq!(kind(&["kernels", "--kernel", "7.0"]), ErrorKind::InvalidValue);
    assert_eq!(kind(&["kernels", "--accel", "hvf"]), ErrorKind::InvalidValue);
    assert_eq!(kind(&["kernels", "--cpus", "two"]), ErrorKind::ValueValidation);
}

#[test]
fn a_flag_of_another_mode_is_an_error_not_ignored() {
    assert_eq!(kind(&["bench", "--points", "1000x10"]), ErrorKind::MissingRequiredArgument);
    assert_eq!(kind(&["bench", "--e2e", "--sizes", "1000"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["bench", "--e2e", "--counters"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["bench", "--dataplane", "--counters"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["bench", "--dataplane", "--runs", "3"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["bench", "--dataplane", "--changes", "3"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["bench", "--seconds", "2"]), ErrorKind::MissingRequiredArgument);
    let Some(Command::Bench(b)) =
        parse(&["bench", "--dataplane", "--sizes", "100,10000", "--seconds", "1.5"]).unwrap().command
    else {
        panic!()
    };
    assert!(b.dataplane && b.sizes == [100, 10000] && b.seconds == Some(1.5) && b.workers.is_none());
    assert_eq!(kind(&["e2e", "--kind", "--containers"]), ErrorKind::ArgumentConflict);
    assert_eq!(kind(&["e2e", "--base-from-debootstrap"]), ErrorKind::MissingRequiredArgument);
    assert_eq!(kind(&["e2e", "--engine", "podman"]), ErrorKind::MissingRequiredArgument);
    assert_eq!(kind(&["kernels", "--label", "x"]), ErrorKind::MissingRequiredArgument);
}

#[test]
fn defaults_are_those_of_the_hand_written_parser() {
    let Some(Command::Kernels(k)) = parse(&["kernels"]).unwrap().command else { panic!() };
    assert!(k.kernel.is_empty() && k.suites.is_empty() && !k.ci && k.command.is_none());
    assert!(matches!(k.accel, super::Accel::Tcg));
    assert_eq!((k.cpus, k.memory, k.suite_timeout), (1, 4096, 900));
    let Some(Command::Image(i)) = parse(&["image"]).unwrap().command else { panic!() };
    let d = super::Image::default();
    assert_eq!((i.tag.as_str(), i.mirror.as_str()), (d.tag.as_str(), d.mirror.as_str()));
    assert_eq!(i.tag, "verdict:dev");
    for line in [&["test", "some_filter", "--", "--nocapture"][..], &["test", "--", "--nocapture"], &["test", "-q"]] {
        let Some(Command::Test(t)) = parse(line).unwrap().command else { panic!() };
        assert_eq!(t.forwarded(), line[1..], "{line:?}");
    }
    let Some(Command::Kernels(k)) = parse(&["kernels", "--kernel", "6.1,5.10", "--suites", "a,b"]).unwrap().command
    else {
        panic!()
    };
    assert_eq!((k.kernel, k.suites), (vec!["6.1".to_string(), "5.10".into()], vec!["a".to_string(), "b".into()]));
    assert!(parse(&[]).unwrap().command.is_none());
}

#[test]
fn every_command_line_in_the_documentation_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files: Vec<PathBuf> = vec![root.join("README.md"), root.join(".ci/run")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    docs.retain(|p| p.extension().is_some_and(|e| e == "md"));
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines = if file.extension().is_some_and(|e| e == "md") { markdown(&text) } else { shell(&text) };
        for line in lines {
            let words = words(&line);
            if words == ["..."] {
                continue; // `sudo -E cargo xtask ...`: any command
            }
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            if let Err(e) = parse(&words) {
                panic!("{}: `cargo xtask {line}` does not parse:\n{e}", file.display());
            }
            checked += 1;
        }
    }
    // The extraction itself must work: there are dozens.
    assert!(checked >= 40, "only {checked} command lines found");
}

/// The text after each `cargo xtask` in a shell script, up to the end of its command.
fn shell(text: &str) -> Vec<String> {
    text.lines().flat_map(|l| after_cargo_xtask(l, &[';', ')', '"', '#', '&', '|'])).collect()
}

/// The text after each `cargo xtask` in Markdown: in code blocks up to a comment (a line
/// ending in `\` goes on with the next), in inline code up to its closing backtick (the span
/// may wrap onto the next line).
fn markdown(text: &str) -> Vec<String> {
    let (mut found, mut in_fence, mut paragraph) = (Vec::new(), false, String::new());
    let mut continued = String::new();
    let inline = |p: &str, found: &mut Vec<String>| {
        for span in p.split('`').skip(1).step_by(2) {
            found.extend(after_cargo_xtask(span, &[]));
        }
    };
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            inline(&std::mem::take(&mut paragraph), &mut found);
        } else if in_fence {
            if let Some(head) = line.strip_suffix('\\') {
                continued.push_str(head);
                continue;
            }
            let whole = std::mem::take(&mut continued) + line;
            found.extend(after_cargo_xtask(whole.split(" #").next().unwrap(), &[]));
        } else if line.trim().is_empty() {
            inline(&std::mem::take(&mut paragraph), &mut found);
        } else {
            paragraph.push_str(line);
            paragraph.push(' ');
        }
    }
    inline(&paragraph, &mut found);
    found
}

fn after_cargo_xtask(text: &str, ends: &[char]) -> Vec<String> {
    text.split("cargo xtask")
        .skip(1)
        .map(|rest| rest.split(ends).next().unwrap().trim().to_string())
        .filter(|rest| !rest.is_empty())
        .collect()
}

/// Shell words, with quotes; a synopsis's optional parts (`[--kernel 6.1]`) are taken as given.
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => (quote, started) = (Some(c), true),
            (None, '[' | ']') => {}
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
}
