//! The `verdict` binary: parse, validate, dispatch. Exit codes: 0 success (and SIGTERM), 1
//! failure, 64 invalid configuration (before any socket is opened or port bound).
//!
//! Invoked as `kube-proxy` (the name kubeadm's DaemonSet runs), it behaves as `verdict run`.

mod api_address;
mod api_bounds;
mod api_rate;
mod cli;
mod commands;
#[cfg(test)]
mod compat;
mod config;
mod conntrack_sysctl;
mod counters;
mod events;
mod http;
mod incluster;
mod kube;
mod memory;
mod notices;
mod open_files;
mod platform;
mod privileges;
mod process_metrics;
mod rest_metrics;
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
    if let Command::Run(args) = &cli.command
        && let Some(asked) = args.upstream.version.as_deref().filter(|v| *v != "false")
    {
        println!("{}", version_line(asked == "raw"));
        return ExitCode::SUCCESS;
    }
    // The configuration is read before logging starts: it sets the log level and format.
    let effective = match &cli.command {
        Command::Render(a) => {
            config::RulesConfig::from_args(&a.rules).map(|(r, e)| (Some(Prepared::Rules(Box::new(r))), Some(e)))
        }
        Command::Explain(a) => {
            config::RulesConfig::from_args(&a.rules).map(|(r, e)| (Some(Prepared::Rules(Box::new(r))), Some(e)))
        }
        Command::Run(a) => config::RunConfig::from_args(a).map(|(r, e)| (Some(Prepared::Run(Box::new(r))), Some(e))),
        Command::Cleanup(_) | Command::RemoveLeftovers(_) | Command::Trace(_) => Ok((None, None)),
    };
    let (prepared, effective) = match effective {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let settings = effective.as_ref().map(|e| &e.settings);
    init_logging(cli.log_format, settings);
    for warning in effective.iter().flat_map(|e| &e.warnings) {
        tracing::warn!("{warning}");
    }
    if !matches!(cli.command, Command::Run(_)) {
        memory::return_freed_memory();
    }
    let result = match (&cli.command, prepared) {
        (Command::Render(args), Some(Prepared::Rules(cfg))) => commands::render::run(args, &cfg),
        (Command::Explain(args), Some(Prepared::Rules(cfg))) => commands::explain::run(args, &cfg),
        (Command::Run(args), Some(Prepared::Run(cfg))) => match (&args.upstream.write_config_to, &effective) {
            (Some(path), Some(e)) => config::write_config(e, path)
                .map(|()| tracing::info!(file = %path.display(), "wrote the configuration"))
                .map_err(|err| anyhow::anyhow!("--write-config-to {}: {err}", path.display())),
            _ => commands::run::run(*cfg, cli.log_format),
        },
        (Command::Cleanup(args), _) => commands::cleanup::run(args),
        (Command::RemoveLeftovers(args), _) => commands::leftovers::run(args),
        (Command::Trace(args), _) => commands::trace::run(args),
        _ => unreachable!("each command is prepared above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verdict: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// A command's validated configuration.
enum Prepared {
    Rules(Box<config::RulesConfig>),
    Run(Box<config::RunConfig>),
}

/// `--version`: kube-proxy prints `Kubernetes vX.Y.Z`; verdict says what it is.
fn version_line(raw: bool) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match raw {
        true => format!(
            "verdict {version} (kube-proxy drop-in: nftables mode; {}/{})",
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
        false => format!("verdict v{version} (kube-proxy drop-in)"),
    }
}

/// `RUST_LOG` if set; else kube-proxy's `--v` (klog levels: 0-3 info, 4 debug, 5+ trace).
fn init_logging(format: LogFormat, settings: Option<&config::Settings>) {
    let level = match settings.map_or(0, |s| s.verbosity) {
        0..=3 => "info",
        4 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter);
    match format == LogFormat::Json || settings.is_some_and(|s| s.log_json) {
        true => builder.json().init(),
        false => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}

fn usage(e: config::ConfigError) -> ExitCode {
    eprintln!("verdict: invalid configuration: {e}");
    ExitCode::from(EXIT_USAGE)
}
