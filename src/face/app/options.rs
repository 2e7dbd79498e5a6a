//! The run's options, resolved once (ripgrep's `hiargs` is the model): the command line, the
//! environment and the terminal become one typed [`RunOptions`] here, with every default
//! applied, and nothing after this names a clap type or asks whether a stream is a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::batch::Reading;
use crate::cli::{Args, LaneStoreChoice, ProgressChoice, ResultsFormat, RunArgs, ServeArgs};
use crate::error::Error;
use crate::plan::PlanOptions;
use crate::report::emit::Emit;
use crate::run::Approvals;

/// Which standard streams are terminals, and whether this is CI: asked once, in [`Terminal::detect`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Terminal {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub ci: bool,
}

impl Terminal {
    pub(super) fn detect() -> Terminal {
        Terminal {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
            ci: std::env::var_os("CI").is_some(),
        }
    }
}

/// How results reach stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stdout {
    /// A table at the end (`color`: ANSI colors in it).
    Table { color: bool },
    /// One results document at the end.
    Json,
    /// One result per line, in call order, as they resolve.
    Jsonl,
    /// The answers to send back to the model (one per line as they resolve with `--stream`).
    Emit(Emit),
}

/// The live display on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Live {
    Off,
    /// Shown because stderr is a terminal (and this is not CI).
    Auto,
    /// Asked for: shown even when stderr is not a terminal.
    Always,
}

/// The read cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheUse {
    On,
    /// `--no-cache`: nothing answered or stored (writes still mark their backends).
    Off,
    /// `--refresh`: other runs' entries are ignored.
    Refresh,
}

/// The files a run reads and writes besides stdin and stdout.
#[derive(Debug, Clone, Default)]
pub(super) struct Files {
    pub output: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub record: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub journal: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub retry_indeterminate: bool,
    pub no_resend: bool,
}

impl Files {
    /// The first option that needs a whole batch, if any is set (`--output`, `--journal`,
    /// `--resume`, `--record`, `--replay`, `--trace`).
    pub(super) fn whole_batch_option(&self) -> Option<&'static str> {
        [
            (
                self.journal.is_some() || self.resume.is_some(),
                "--journal/--resume",
            ),
            (
                self.record.is_some() || self.replay.is_some(),
                "--record/--replay",
            ),
            (self.output.is_some(), "--output"),
            (self.trace.is_some(), "--trace"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// Everything a run is told, resolved.
#[derive(Debug, Clone)]
pub(super) struct RunOptions {
    /// The manifest's path (`--manifest`, else found from the current folder).
    pub manifest: PathBuf,
    /// `$FLUX_TOOLS_LEASE`: the lanes a parent run lends this one (see `plan::lease`).
    pub lease: Option<String>,
    /// The batch: a path, `-`, or `None` (stdin when it is piped).
    pub batch: Option<String>,
    pub reading: Reading,
    pub plan: PlanOptions,
    pub stdout: Stdout,
    /// Results go out as they resolve (`--stream`, or JSON Lines without `--emit`).
    pub streaming: bool,
    /// `--stream`: read stdin as a stream of JSON Lines.
    pub stream: bool,
    /// `--turns`: one turn per line of stdin.
    pub turns: bool,
    pub live: Live,
    pub quiet: bool,
    pub lane_store: LaneStoreChoice,
    pub approvals: Approvals,
    pub cache: CacheUse,
    /// `--history` or `$FLUX_TOOLS_HISTORY` (the manifest's `[history] path` is the default).
    pub history: Option<PathBuf>,
    /// Where spans go: `Some(Some(url))` for `--otlp URL`, `Some(None)` for
    /// `OTEL_EXPORTER_OTLP_*`, `None`: nowhere.
    pub otlp: Option<Option<String>>,
    /// `$TRACEPARENT`: the agent's span this run belongs to.
    pub traceparent: Option<String>,
    pub files: Files,
    /// `--run-id`, and `--run-id-from-reply`: who names the run (see `run::named_run_id`).
    pub run_id: Option<String>,
    pub run_id_from_reply: bool,
    pub terminal: Terminal,
}

impl RunOptions {
    /// Resolve `run`'s command line.
    pub(super) fn resolve(
        args: &Args,
        r: &RunArgs,
        terminal: Terminal,
    ) -> Result<RunOptions, Error> {
        let format = r.format.unwrap_or(if terminal.stdout {
            ResultsFormat::Table
        } else {
            ResultsFormat::Jsonl
        });
        let emit: Option<Emit> = r.emit.map(Into::into);
        let stdout = match (emit, format) {
            (Some(e), _) => Stdout::Emit(e),
            (None, ResultsFormat::Table) => Stdout::Table {
                color: crate::app::config::use_color(args.color, terminal.stdout),
            },
            (None, ResultsFormat::Json) => Stdout::Json,
            (None, ResultsFormat::Jsonl) => Stdout::Jsonl,
        };
        let files = Files {
            output: r.output.clone(),
            trace: r.trace.clone(),
            record: r.record.clone(),
            replay: r.replay.clone(),
            journal: r.journal.clone(),
            resume: r.resume.clone(),
            retry_indeterminate: r.retry_indeterminate,
            no_resend: r.no_resend,
        };
        for path in [&files.output, &files.record, &files.trace]
            .into_iter()
            .flatten()
        {
            crate::app::config::check_output_path(path)?;
        }
        if let Some(id) = &r.run_id {
            crate::ids::check_id("run id", id)
                .map_err(|why| Error::Usage(format!("--run-id: {why}")))?;
        }
        Ok(RunOptions {
            run_id: r.run_id.clone(),
            run_id_from_reply: r.run_id_from_reply,
            manifest: crate::app::config::manifest_path(args.manifest.as_deref())?,
            lease: std::env::var(crate::plan::lease::LEASE_ENV).ok(),
            batch: r.common.batch.clone(),
            reading: Reading {
                format: r.common.input_format.into(),
                literal: r.common.literal,
                id_offset: 0,
            },
            plan: plan_options(r)?,
            streaming: r.stream || stdout == Stdout::Jsonl,
            stdout,
            stream: r.stream,
            turns: r.turns,
            live: match r.progress {
                ProgressChoice::Always => Live::Always,
                ProgressChoice::Never => Live::Off,
                ProgressChoice::Auto if terminal.stderr && !terminal.ci => Live::Auto,
                ProgressChoice::Auto => Live::Off,
            },
            quiet: args.quiet,
            lane_store: r.common.lane_store.clone(),
            approvals: r.approve.clone().map(approvals).unwrap_or_default(),
            cache: match (r.no_cache, r.refresh) {
                (true, _) => CacheUse::Off,
                (false, true) => CacheUse::Refresh,
                (false, false) => CacheUse::On,
            },
            history: r.history.clone(),
            otlp: otlp_target(r.otlp.as_ref()),
            traceparent: std::env::var("TRACEPARENT").ok(),
            files,
            terminal,
        })
    }
}

/// `mcp serve`'s command line, resolved: the engine's options and the gateway's own.
pub(super) struct ServeOptions {
    pub run: RunOptions,
    /// How long calls may finish after SIGTERM before they are cancelled.
    pub grace: std::time::Duration,
    /// `--tools NAMES`: the tools served (`None`: all).
    pub tools: Option<Vec<String>>,
    /// `--http ADDR`: serve Streamable HTTP there (`None`: stdio).
    pub http: Option<String>,
    /// `--watch`: reload the manifest when its file changes.
    pub watch: bool,
    pub allow_host: Vec<String>,
    pub allow_origin: Vec<String>,
    /// The tenant of calls that name none (`--tenant`, else `default`).
    pub tenant: String,
    /// `--audit`: where the audit trail's lines go.
    pub audit: Option<std::path::PathBuf>,
    /// `--workers`: the runtime's worker threads (`None`: 1 over stdio, a core each over
    /// HTTP).
    pub workers: Option<usize>,
}

impl ServeOptions {
    /// Resolve `mcp serve`'s command line: nothing is ever written to stdout (over stdio it
    /// is the MCP channel), no live display, no history; the tenant and the turn lane are
    /// each session's.
    pub(super) fn resolve(
        args: &Args,
        s: &ServeArgs,
        terminal: Terminal,
    ) -> Result<ServeOptions, Error> {
        if let Some(t) = &s.tenant {
            crate::ids::check_id("tenant", t)
                .map_err(|e| Error::Usage(format!("--tenant: {e}")))?;
        }
        let grace =
            crate::duration::parse(&s.grace).map_err(|e| Error::Usage(format!("--grace: {e}")))?;
        Ok(ServeOptions {
            run: serve_run(args, s, terminal)?,
            grace,
            tools: s.tools.clone(),
            http: s.http.clone(),
            watch: s.watch,
            allow_host: s.allow_host.clone(),
            allow_origin: s.allow_origin.clone(),
            tenant: s.tenant.clone().unwrap_or_else(|| "default".into()),
            audit: s.audit.clone(),
            workers: s.workers.map(usize::from),
        })
    }
}

/// The engine's options under `mcp serve`.
fn serve_run(args: &Args, s: &ServeArgs, terminal: Terminal) -> Result<RunOptions, Error> {
    Ok(RunOptions {
        manifest: crate::app::config::manifest_path(args.manifest.as_deref())?,
        lease: None,
        batch: None,
        reading: Reading::default(),
        plan: PlanOptions {
            tenant: s.tenant.clone(),
            max_concurrent_tools: s.max_concurrent_tools,
            max_processes: Some(crate::app::config::process_cap(s.max_processes)),
            ..PlanOptions::default()
        },
        stdout: Stdout::Json,
        streaming: false,
        stream: false,
        turns: false,
        live: Live::Off,
        quiet: args.quiet,
        lane_store: s.lane_store.clone(),
        approvals: Approvals::default(),
        cache: if s.no_cache {
            CacheUse::Off
        } else {
            CacheUse::On
        },
        history: None,
        otlp: otlp_target(s.otlp.as_ref()),
        traceparent: None,
        files: Files::default(),
        run_id: None,
        run_id_from_reply: false,
        terminal,
    })
}

/// The command line's settings for planning.
fn plan_options(r: &RunArgs) -> Result<PlanOptions, Error> {
    let deadline = match &r.deadline {
        Some(d) => {
            Some(crate::duration::parse(d).map_err(|e| Error::Usage(format!("--deadline: {e}")))?)
        }
        None => None,
    };
    if r.max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
        return Err(Error::Usage(
            "--max-cost must be a non-negative number".into(),
        ));
    }
    if let Some(t) = &r.common.tenant {
        crate::ids::check_id("tenant", t).map_err(|e| Error::Usage(format!("--tenant: {e}")))?;
    }
    Ok(PlanOptions {
        tenant: r.common.tenant.clone(),
        max_concurrent_tools: r.common.max_concurrent_tools,
        on_tool_error: r.on_tool_error.map(Into::into),
        deadline,
        max_cost: r.max_cost,
        max_calls: r.max_calls,
        external: None,
        max_processes: Some(crate::app::config::process_cap(r.max_processes)),
        lanes: None,
    })
}

/// Where the run's spans go: `--otlp URL`, else the collector `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (or `…_TRACES_ENDPOINT`) names, else nowhere.
fn otlp_target(url: Option<&String>) -> Option<Option<String>> {
    if let Some(url) = url {
        return Some(Some(url.clone()));
    }
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .then_some(None)
}

/// `--approve` as the gate takes it.
fn approvals(a: crate::cli::Approve) -> crate::run::Approvals {
    use crate::cli::{Approve, Granted};
    use crate::run::gate::Grant;
    match a {
        Approve::All => crate::run::Approvals::All,
        Approve::None => crate::run::Approvals::None,
        Approve::Some(items) => crate::run::Approvals::Some(
            items
                .into_iter()
                .map(|g| match g {
                    Granted::Tool(t) => Grant::Tool(t),
                    Granted::Call { id, hash } => Grant::Call { id, hash },
                })
                .collect(),
        ),
    }
}
