//! The `verdict` binary: parse, validate, dispatch. Exit codes: 0 success (and SIGTERM), 1
//! failure, 64 invalid configuration (before any socket is opened or port bound).
//!
//! Invoked as `kube-proxy` (the name kubeadm's DaemonSet runs), it behaves as `verdict run`.

mod cli;
mod commands;
mod config;
mod counters;
mod http;
mod kube;
mod memory;
mod platform;
mod privileges;
mod process_metrics;
mod source;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc: the agent allocates on the watchers' threads (decoding)
/// and on the sync thread (model, table), and glibc's per-thread arenas made the same 100k
/// Service start 1.4x slower (docs/benchmarks.md, "The allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 64;

/// The arguments, with `run` inserted when invoked as `kube-proxy`.
fn arguments() -> Vec<String> {
    let mut args: Vec<String> = std::env::args().collect();
    let invoked_as =
        args.first().and_then(|a| std::path::Path::new(a).file_name()).map(|n| n.to_string_lossy().into_owned());
    if invoked_as.as_deref() == Some("kube-proxy") {
        args.insert(1, "run".into());
    }
    args
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(arguments()) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            eprintln!("verdict: {}", first.trim_start_matches("error: "));
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
    memory::return_freed_memory();
    let result = match &cli.command {
        Command::Render(args) => match config::RulesConfig::from_args(&args.rules) {
            Ok(cfg) => commands::render::run(args, &cfg),
            Err(e) => return usage(e),
        },
        Command::Run(args) => match config::RunConfig::from_args(args) {
            Ok(cfg) => commands::run::run(cfg),
            Err(e) => return usage(e),
        },
        Command::Cleanup(args) => commands::cleanup::run(args),
        Command::Explain(args) => match config::RulesConfig::from_args(&args.rules) {
            Ok(cfg) => commands::explain::run(args, &cfg),
            Err(e) => return usage(e),
        },
        Command::Trace(args) => commands::trace::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verdict: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn usage(e: config::ConfigError) -> ExitCode {
    eprintln!("verdict: invalid configuration: {e}");
    ExitCode::from(EXIT_USAGE)
}
