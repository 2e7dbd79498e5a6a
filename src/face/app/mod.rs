//! The Face: each command turns the command line into work and an exit code. This is the edge
//! where typed errors become messages on stderr, and the only layer that touches the terminal.
//!
//! One module per command: [`tools`], [`report`], [`mcp`] (`mcp import`), [`validate`],
//! [`plan`], [`approvals`] (what a paused run waits for) and `run`, whose three faces —
//! [`run`] (a whole batch), [`stream`] (JSON Lines as they arrive) and [`turns`] (turn after
//! turn) — drive one [`engine`]. Before them: [`options`] (the command line, environment and
//! terminal resolved once), [`prepare`] (manifest, batch, plan, MCP sessions, lane store);
//! beside them: [`reporters`] (what renders a run, chosen in one place) and [`terminal`] (the
//! approver that asks on `/dev/tty`).

mod approvals;
pub(crate) mod config;
mod controls;
mod engine;
mod finish;
mod lock;
mod login;
mod mcp;
mod options;
mod parked;
mod plan;
mod prepare;
mod report;
mod reporters;
mod review;
mod run;
mod serve;
mod signals;
mod stream;
mod terminal;
mod tools;
mod turns;
mod validate;

/// The gateway's message entry (for the fuzz target).
pub use serve::entry as gateway_entry;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Args, Command, McpCommand};
use crate::error::{self, render_all, Diagnostic, Error};
use crate::events::Outcome;
use crate::manifest::Manifest;

/// Entry point used by `main`.
pub fn main() -> ExitCode {
    crate::ids::reseed_thread();
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == crate::tools::reaper::ARG)
    {
        return ExitCode::from(crate::tools::reaper::watchdog());
    }
    // Before any thread is started: every thread inherits the mask.
    crate::tools::command::quiet_child_exits();
    let args = Args::parse();
    // Every program this process starts dies with it, `kill -9` included.
    crate::tools::reaper::arm();
    let done = dispatch(args);
    if let Some(e) = crate::tools::reaper::failure() {
        eprintln!("warning: the watchdog that ends this run's programs with it could not start ({e}): they may outlive a kill -9 of flux-tools");
    }
    match done {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            if matches!(e, Error::Invalid(_)) {
                eprint!("{text}");
            } else {
                eprintln!("error: {text}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

fn dispatch(args: Args) -> Result<u8, Error> {
    let terminal = options::Terminal::detect();
    match &args.command {
        Command::Completions { shell } => {
            let mut cmd = Args::command();
            clap_complete::generate(*shell, &mut cmd, "flux-tools", &mut std::io::stdout());
            Ok(error::EXIT_OK)
        }
        Command::Tools {
            format, emit: None, ..
        } => tools::tools(&args, *format),
        Command::Tools {
            emit: Some(e),
            tools: select,
            strict,
            ..
        } => tools::offer(&args, (*e).into(), select.as_deref(), *strict),
        Command::Report {
            results,
            svg,
            history,
            by,
            min_turns,
            format,
        } => match (results, history) {
            (Some(results), _) => report::report(results, svg.as_deref()),
            (None, Some(h)) => {
                report::history(h, svg.as_deref(), by.map(Into::into), *min_turns, *format)
            }
            (None, None) => Err(Error::Usage(
                "name a results document or --history FILE".into(),
            )),
        },
        Command::Mcp {
            command:
                McpCommand::Import {
                    server,
                    prefix,
                    reads,
                },
        } => mcp::import(&args, server, prefix.as_deref(), reads),
        Command::Mcp {
            command:
                McpCommand::Login {
                    server,
                    no_browser,
                    status,
                },
        } => match status {
            true => login::status(&args, server.as_deref()),
            false => login::login(&args, server.as_deref().unwrap_or_default(), *no_browser),
        },
        Command::Mcp {
            command: McpCommand::Logout { server },
        } => login::logout(&args, server),
        Command::Mcp {
            command: McpCommand::Serve(s),
        } => serve::serve(&options::ServeOptions::resolve(&args, s, terminal)?),
        Command::Lock { check, update } => lock::lock(&args, *check, *update),
        Command::Validate { batches, format } => validate::validate(&args, batches, *format),
        Command::Plan(p) => plan::plan(&args, p, terminal),
        Command::Approvals {
            journal: Some(journal),
            format,
            ..
        } => approvals::approvals(journal, *format),
        Command::Approvals {
            journal: None,
            format,
            lane_store,
        } => approvals::parked(&args, lane_store.as_ref(), *format),
        Command::Approve { call, lane_store } => {
            approvals::answer(&args, lane_store.as_ref(), call, parked::Decision::Approve)
        }
        Command::Deny { call, lane_store } => {
            approvals::answer(&args, lane_store.as_ref(), call, parked::Decision::Deny)
        }
        Command::Run(r) => run::run(&args, r, terminal),
    }
}

/// The exit code of a run that ended with `outcome`, `failed` calls not ok.
pub(crate) fn exit_code(outcome: Outcome, failed: usize) -> u8 {
    match outcome {
        Outcome::Completed if failed == 0 => error::EXIT_OK,
        Outcome::Completed => error::EXIT_CALLS_FAILED,
        Outcome::Drained => error::EXIT_OK,
        Outcome::Interrupted => error::EXIT_INTERRUPTED,
        Outcome::Paused => error::EXIT_PAUSED,
        Outcome::Failed | Outcome::DeadlineExceeded | Outcome::BudgetExhausted => {
            error::EXIT_ENDED_EARLY
        }
    }
}

fn stdout_write(bytes: &[u8]) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("cannot write to stdout", e))
}

fn load_manifest(args: &Args) -> Result<Manifest, Error> {
    let path = config::manifest_path(args.manifest.as_deref())?;
    Manifest::load(&path, crate::tools::KINDS).map_err(Error::Invalid)
}

/// Warnings on stderr, unless `--quiet`.
fn print_warnings(quiet: bool, warnings: &[Diagnostic]) {
    if !quiet && !warnings.is_empty() {
        eprint!("{}", render_all(warnings));
    }
}

/// The one async runtime a command uses: a worker a core.
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    runtime_with(None)
}

/// The runtime with `workers` worker threads (`None`: a worker a core).
fn runtime_with(workers: Option<usize>) -> Result<tokio::runtime::Runtime, Error> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    builder
        .enable_all()
        .on_thread_start(crate::ids::reseed_thread)
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}
