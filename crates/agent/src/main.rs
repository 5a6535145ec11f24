//! The `verdict` binary: parse, validate, dispatch. Exit codes: 0 success, 1 failure, 64
//! invalid configuration (before any socket is opened).

mod cli;
mod commands;
mod config;
mod source;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match &cli.command {
        Command::Render(args) => match config::RulesConfig::from_args(&args.rules) {
            Ok(cfg) => commands::render::run(args, &cfg),
            Err(e) => return usage(e),
        },
        Command::Run(args) => match config::RulesConfig::from_args(&args.rules) {
            Ok(cfg) => commands::run::run(args, &cfg),
            Err(e) => return usage(e),
        },
        Command::Cleanup(args) => commands::cleanup::run(args),
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
