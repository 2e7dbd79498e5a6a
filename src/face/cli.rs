//! The command line (clap derive only: no I/O here).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// A closed set that lives below the Face, as the command line names it: clap reads this
/// copy, and `From` maps it onto the layer's own enum (so nothing below sees a clap type).
macro_rules! face_enum {
    ($(#[$m:meta])* $name:ident => $target:ty { $($(#[$vm:meta])* $v:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
        pub(crate) enum $name {
            $($(#[$vm])* $v,)*
        }

        impl From<$name> for $target {
            fn from(x: $name) -> $target {
                match x {
                    $($name::$v => <$target>::$v,)*
                }
            }
        }
    };
}

face_enum! {
    /// `--on-tool-error`.
    OnToolError => crate::batch::OnToolError {
        /// A failed call loses only itself.
        Surface,
        /// The first failure ends the run (`fail_run`; `fail-run` is accepted too).
        #[value(name = "fail_run", alias = "fail-run")]
        FailRun,
    }
}

face_enum! {
    /// `--input-format`.
    InputFormat => crate::model_formats::InputFormat {
        /// Detect the model shapes below; otherwise a batch.
        Auto,
        /// A batch document, a sequence of calls, or JSON.
        Batch,
        /// JSON Lines: one call object per line.
        Jsonl,
        /// OpenAI chat completions.
        Openai,
        /// The OpenAI Responses API.
        OpenaiResponses,
        /// Anthropic Messages.
        Anthropic,
        /// Google Gemini (generateContent).
        Gemini,
    }
}

face_enum! {
    /// `--emit`.
    Emit => crate::report::emit::Emit {
        /// OpenAI chat completions: tool messages.
        Openai,
        /// OpenAI Responses API: `function_call_output` items.
        OpenaiResponses,
        /// Anthropic Messages: `tool_result` blocks in a user message.
        Anthropic,
        /// Google Gemini: `functionResponse` parts in a user content.
        Gemini,
    }
}

face_enum! {
    /// `tools --emit`: the `tools` of a provider's request.
    Offer => crate::report::emit::Emit {
        /// OpenAI chat completions: `{"type": "function", "function": {name, description, parameters}}`.
        Openai,
        /// OpenAI Responses API: `{"type": "function", name, description, parameters, strict}`.
        OpenaiResponses,
        /// Anthropic Messages: `{name, description, input_schema}`.
        Anthropic,
        /// Google Gemini: one `{"function_declarations": [...]}` with `parameters_json_schema`.
        Gemini,
    }
}

face_enum! {
    /// `report --by`.
    Period => crate::history::analysis::Period {
        Hour,
        Day,
    }
}

/// Run a batch of agent tool calls concurrently inside declared lanes, with call-ordered,
/// classified results.
#[derive(Debug, Parser)]
#[command(name = "flux-tools", version, about, max_term_width = 100)]
pub(crate) struct Args {
    /// The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]
    #[arg(long, global = true, env = "FLUX_TOOLS_MANIFEST", value_name = "PATH")]
    pub manifest: Option<PathBuf>,

    /// Print no summary or warnings on stderr (errors still show)
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// When to use color (NO_COLOR is honoured)
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Execute a batch
    Run(Box<RunArgs>),
    /// Dry run: phases, dependency graph, lanes, critical path; executes nothing
    Plan(PlanArgs),
    /// Pin what the model is shown in tools.lock beside the manifest: every tool's definition
    /// (and a whole server's prompts and resource templates), hashed
    Lock {
        /// Write nothing: exit 1 and name each change when the servers differ from the lock
        #[arg(long, conflicts_with = "update")]
        check: bool,
        /// Accept every change: write the lock as the servers are now
        #[arg(long)]
        update: bool,
    },
    /// Check the manifest (and batches) and report every problem with its location
    Validate {
        /// Batches to check against the manifest
        batches: Vec<PathBuf>,
        /// Output format [default: table]
        #[arg(long, value_enum)]
        format: Option<ListFormat>,
    },
    /// List the calls a paused run waits to have approved (from its journal) — or, with no
    /// journal, the calls `mcp serve` holds for approval — and how to approve each
    Approvals {
        /// The run's journal (--journal FILE); absent: the calls `mcp serve` holds
        journal: Option<PathBuf>,
        /// Where the gateways keep their parked calls: their `--lane-store` (redis://… for
        /// replicas on one Redis) [default: this machine's]
        #[arg(long, value_name = "STORE", value_parser = LaneStoreChoice::parse)]
        lane_store: Option<LaneStoreChoice>,
        /// Output format [default: table]
        #[arg(long, value_enum)]
        format: Option<ListFormat>,
    },
    /// Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds
    /// back (tool:NAME@HASH), as `flux-tools approvals` names it
    Approve {
        /// ID@HASH: the call and the hash of the arguments you approve; or tool:NAME@HASH
        /// the definition you approve
        call: String,
        /// The gateways' `--lane-store` (redis://… for replicas on one Redis)
        #[arg(long, value_name = "STORE", value_parser = LaneStoreChoice::parse)]
        lane_store: Option<LaneStoreChoice>,
    },
    /// Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a
    /// held-back tool definition (tool:NAME@HASH: it stays held back)
    Deny {
        /// ID, or ID@HASH
        call: String,
        /// The gateways' `--lane-store` (redis://… for replicas on one Redis)
        #[arg(long, value_name = "STORE", value_parser = LaneStoreChoice::parse)]
        lane_store: Option<LaneStoreChoice>,
    },
    /// List the manifest's tools and their declarations, or (--emit) offer them to a model
    Tools {
        /// Output format [default: table]
        #[arg(long, value_enum)]
        format: Option<ListFormat>,
        /// Print the tools as PROVIDER's request takes them (a JSON Schema per tool)
        #[arg(long, value_enum, value_name = "PROVIDER")]
        emit: Option<Offer>,
        /// Only these tools (comma-separated; manifest or exported names)
        #[arg(long, value_name = "NAMES", value_delimiter = ',', requires = "emit")]
        tools: Option<Vec<String>>,
        /// OpenAI's strict mode for every tool whose schema allows it (stderr names the others)
        #[arg(long, requires = "emit")]
        strict: bool,
    },
    /// Work with Model Context Protocol servers
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Draw a results document as a timeline picture, or show a run history over time
    #[command(group(clap::ArgGroup::new("input").required(true).args(["results", "history"])))]
    Report {
        /// A results document (from --format json or --output), drawn with --svg
        #[arg(requires = "svg")]
        results: Option<PathBuf>,
        /// Write an SVG here: a Gantt chart of a results document, or width and cost over time
        /// of a history
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// A run history (run --history): turns, fan-out width, speed-up, lane peaks, 429s and
        /// cost per turn, per period, and the first period whose width moved
        #[arg(long, value_name = "FILE", conflicts_with = "results")]
        history: Option<PathBuf>,
        /// Group the history by hour or day [default: day when it spans more than three days]
        #[arg(long, value_enum, requires = "history")]
        by: Option<Period>,
        /// Runs a period (and the periods before it) needs before a width shift is judged
        #[arg(long, value_name = "N", default_value_t = 5, requires = "history")]
        min_turns: usize,
        /// Output format for a history [default: table]
        #[arg(long, value_enum, requires = "history")]
        format: Option<ListFormat>,
    },
    /// Print a shell completion script
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Print [tools.*] TOML for a server's tools (effect, idempotent, argument schema), ready to paste
    Import {
        /// The server, as named in [mcp_servers.NAME]
        server: String,
        /// Name each tool PREFIX.name (with `tool = "name"`), so two servers' tools of the same
        /// name fit in one manifest
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
        /// Import the tools whose names match GLOB (`*`, `?`; comma-separated or repeated) as
        /// reads (effect = "read", idempotent), whatever their server declares
        #[arg(long, value_name = "GLOB", value_delimiter = ',')]
        reads: Vec<String>,
    },
    /// Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser);
    /// its tokens are kept outside the project and refreshed. --status: every server's sign-in
    Login {
        /// The server, as named in [mcp_servers.NAME] (with --status: only this one)
        #[arg(required_unless_present = "status")]
        server: Option<String>,
        /// Print the URL to open instead of opening a browser
        #[arg(long)]
        no_browser: bool,
        /// Show which servers are signed in, until when and with which scopes (never a token)
        #[arg(long, conflicts_with = "no_browser")]
        status: bool,
    },
    /// Forget a server's sign-in (its kept tokens)
    Logout {
        /// The server, as named in [mcp_servers.NAME]
        server: String,
    },
    /// Serve the manifest's tools as an MCP server (stdio, or Streamable HTTP with --http):
    /// every client's calls share the lanes, the cache and the upstream servers
    Serve(ServeArgs),
}

/// `mcp serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Serve Streamable HTTP on ADDR (path /mcp), e.g. 127.0.0.1:8808, instead of stdio
    #[arg(long, value_name = "ADDR", env = "FLUX_TOOLS_HTTP")]
    pub http: Option<String>,

    /// Export each call's span over OTLP/HTTP to this collector, in the client's trace when
    /// its request carries `_meta.traceparent` [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none
    /// when unset]
    #[arg(long, value_name = "URL", env = "FLUX_TOOLS_OTLP")]
    pub otlp: Option<String>,

    /// Only these tools (comma-separated; manifest or exported names)
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        env = "FLUX_TOOLS_TOOLS"
    )]
    pub tools: Option<Vec<String>>,

    /// The tenant of every call (stdio; over HTTP a bearer token names it)
    #[arg(long, env = "FLUX_TOOLS_TENANT")]
    pub tenant: Option<String>,

    /// Narrow each client's turn lane (never widens the manifest's max_concurrent_tools)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), env = "FLUX_TOOLS_MAX_CONCURRENT_TOOLS")]
    pub max_concurrent_tools: Option<u32>,

    /// Where the tenant, tool and shared lanes and the read cache live (see `run --lane-store`)
    #[arg(long, value_name = "STORE", default_value = "local", value_parser = LaneStoreChoice::parse, env = "FLUX_TOOLS_LANE_STORE", hide_env_values = true)]
    pub lane_store: LaneStoreChoice,

    /// Answer nothing from the read cache and store nothing in it
    #[arg(long, env = "FLUX_TOOLS_NO_CACHE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_cache: bool,

    /// Also accept this Host (HTTP; loopback names are always accepted). Repeatable
    #[arg(
        long,
        value_name = "HOST",
        env = "FLUX_TOOLS_ALLOW_HOST",
        value_delimiter = ','
    )]
    pub allow_host: Vec<String>,

    /// Accept requests from this browser Origin, e.g. https://app.example.com:443 (HTTP;
    /// without one, a request that carries an Origin is refused). Repeatable
    #[arg(
        long,
        value_name = "ORIGIN",
        env = "FLUX_TOOLS_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origin: Vec<String>,

    /// On SIGTERM, how long calls in flight may take to finish before they are cancelled
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        env = "FLUX_TOOLS_GRACE"
    )]
    pub grace: String,

    /// The most calls in flight in this gateway's command tools [default: from ulimit]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), env = "FLUX_TOOLS_MAX_PROCESSES")]
    pub max_processes: Option<u32>,

    /// Reload the manifest when its file changes (it is always reloaded on SIGHUP)
    #[arg(long, env = "FLUX_TOOLS_WATCH", value_parser = clap::builder::FalseyValueParser::new())]
    pub watch: bool,

    /// Write the audit trail — every call allowed or refused, approval asked and answered,
    /// token rejected — as JSON lines to FILE (appended), or - for stderr
    #[arg(long, value_name = "FILE", env = "FLUX_TOOLS_AUDIT")]
    pub audit: Option<PathBuf>,

    /// The gateway's worker threads [default: 1 over stdio (one client; its tools and
    /// upstreams are processes of their own), a core each over HTTP]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..), env = "FLUX_TOOLS_WORKERS")]
    pub workers: Option<u16>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub common: BatchArgs,

    /// Output format [default: table on a terminal, jsonl otherwise]
    #[arg(long, value_enum)]
    pub format: Option<ResultsFormat>,

    /// What a failed call does to the run
    #[arg(long, value_enum)]
    pub on_tool_error: Option<OnToolError>,

    /// End the whole run after this long (e.g. 30s, 2m)
    #[arg(long, value_name = "DURATION")]
    pub deadline: Option<String>,

    /// Most the run may spend (sum of the tools' `cost`); overrides the batch's budget
    #[arg(long, value_name = "AMOUNT")]
    pub max_cost: Option<f64>,

    /// Most calls the run may make (replaces the manifest's [budget] max_calls; a batch may
    /// only lower it); cache hits do not count
    #[arg(long, value_name = "N")]
    pub max_calls: Option<u32>,

    /// Answer nothing from the read cache and store nothing in it
    #[arg(long)]
    pub no_cache: bool,

    /// Ignore cached results from earlier runs, but store this run's
    #[arg(long, conflicts_with = "no_cache")]
    pub refresh: bool,

    /// Append one line about this run to the history FILE [default: $FLUX_TOOLS_HISTORY, else
    /// the manifest's [history] path]
    #[arg(long, value_name = "FILE", env = "FLUX_TOOLS_HISTORY")]
    pub history: Option<PathBuf>,

    /// Export the run's spans (one per run, one per call) over OTLP/HTTP to this collector
    /// [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// Also write the results document (json) to FILE, atomically
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Live lane display on stderr (auto: only when stderr is a terminal and CI is unset)
    #[arg(long, value_enum, default_value_t = ProgressChoice::Auto)]
    pub progress: ProgressChoice,

    /// Emit each result as a JSON line as soon as it and every earlier call have resolved
    #[arg(long)]
    pub stream: bool,

    /// One turn per line of stdin (a model's reply or a batch on one line), each run as a
    /// batch and answered with one line (the --emit answer, or the results document); MCP
    /// sessions, HTTP connections, lanes and the cache are kept between turns
    #[arg(long, conflicts_with = "stream")]
    pub turns: bool,

    /// Record every dispatch and result in FILE (append-only JSON lines, fsynced) or in Redis
    /// (redis://…, shared by every machine; running the same --run-id again resumes it)
    #[arg(long, value_name = "FILE|URL")]
    pub journal: Option<PathBuf>,

    /// Continue the run journaled in FILE (or in Redis, with --run-id): completed calls keep
    /// their results, the rest run
    #[arg(long, value_name = "FILE|URL")]
    pub resume: Option<PathBuf>,

    /// Name the run: idempotency keys derive from it, so the same batch run again with the
    /// same id, on any machine, sends the same keys (with --turns, turn N is ID-N)
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Name the run after the model reply's own id (chatcmpl-…, msg_…, resp_…, responseId)
    #[arg(long, conflicts_with = "run_id")]
    pub run_id_from_reply: bool,

    /// With --resume: send non-idempotent calls that were in flight again, with the same
    /// idempotency key (by default they are reported indeterminate)
    #[arg(long, requires = "resume")]
    pub retry_indeterminate: bool,

    /// A write cut off in flight that its probe (`verify`) finds never landed is reported
    /// `not_applied` instead of being sent again once with the same idempotency key
    #[arg(long)]
    pub no_resend: bool,

    /// Write a Chrome trace-event file of the run (open it in Perfetto)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Write a cassette of every call's fingerprint and result to FILE
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub record: Option<PathBuf>,

    /// Answer calls from the cassette FILE without invoking any tool
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// Answer approvals in advance: `all`, `none`, or a comma-separated list of tools or of
    /// calls as ID@HASH (that call, only for the arguments with that hash, as `approvals`
    /// shows them); others are asked on the terminal, or refused when there is none. With
    /// --resume it answers the calls a paused run waits on
    #[arg(long, value_name = "ANSWER", value_parser = approvals)]
    pub approve: Option<Approve>,

    /// Write the results as the messages to send back to the model: openai (tool messages),
    /// openai-responses (function_call_output items), anthropic (one user message of
    /// tool_result blocks), gemini (one content of functionResponse parts); one per line with
    /// --stream
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,

    /// The most command calls in flight at once [default: derived from ulimit -n and -u]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_processes: Option<u32>,
}

/// What `run` and `plan` both take: the batch, how to read it, the tenant, the turn lane and
/// the lane store.
#[derive(Debug, clap::Args)]
pub(crate) struct BatchArgs {
    /// The batch file ("-" or absent with piped stdin: read stdin)
    pub batch: Option<String>,

    /// Tenant for the tenant lane (overrides the batch's)
    #[arg(long)]
    pub tenant: Option<String>,

    /// What the input is: a batch, JSON Lines, or a model's reply (openai, openai-responses, anthropic, gemini)
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    pub input_format: InputFormat,

    /// Arguments are data: no `${…}` references or `$${` escapes in the batch (a model's
    /// reply is always read so)
    #[arg(long)]
    pub literal: bool,

    /// Narrow the turn lane (never widens the manifest's)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_tools: Option<u32>,

    /// Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every
    /// process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]`
    /// (shared by every machine using that Redis; `rediss://…` over TLS, checked against the
    /// system's CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only);
    /// `plan` looks there for the calls the cache would answer now
    #[arg(long, value_name = "STORE", default_value = "local", value_parser = LaneStoreChoice::parse)]
    pub lane_store: LaneStoreChoice,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub common: BatchArgs,

    /// Output format [default: table on a terminal, json otherwise]
    #[arg(long, value_enum)]
    pub format: Option<PlanFormat>,
}

/// `run --format`: how results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ResultsFormat {
    Table,
    Json,
    Jsonl,
}

/// `plan --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlanFormat {
    Table,
    /// Pretty JSON.
    Json,
    /// The same JSON on one line.
    Jsonl,
    /// Graphviz.
    Dot,
    Mermaid,
}

/// `tools --format` and `validate --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ListFormat {
    Table,
    Json,
    /// The same JSON (one line).
    Jsonl,
}

/// `--lane-store`: where the shared lanes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LaneStoreChoice {
    /// Advisory file locks beside the manifest's canonical path: every process on this machine.
    Local,
    /// This run only.
    Memory,
    /// `redis://HOST:PORT[/DB]` or `rediss://…`: every machine using that Redis.
    Redis(String),
}

impl LaneStoreChoice {
    pub(crate) fn parse(s: &str) -> Result<LaneStoreChoice, String> {
        match s {
            "local" => Ok(LaneStoreChoice::Local),
            "memory" => Ok(LaneStoreChoice::Memory),
            url if url.starts_with("redis://") || url.starts_with("rediss://") => {
                Ok(LaneStoreChoice::Redis(url.to_string()))
            }
            _ => Err("use local, memory or redis://HOST:PORT[/DB]".into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProgressChoice {
    Auto,
    Always,
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn verify_cli() {
        Args::command().debug_assert();
    }
}

/// `--approve`, as the command line says it (the face maps it onto the gate's `Approvals`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Approve {
    All,
    None,
    Some(Vec<Granted>),
}

/// One item of an `--approve` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Granted {
    Tool(String),
    Call { id: String, hash: String },
}

/// Sixteen lower-case hex digits: an approval hash as `flux-tools approvals` shows it.
fn is_hash(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `--approve`: `all`, `none` or a comma-separated list of tools and `ID@HASH` calls (clap's
/// value parser).
pub(crate) fn approvals(s: &str) -> Result<Approve, String> {
    Ok(match s {
        "all" => Approve::All,
        "none" => Approve::None,
        list => {
            let mut grants = Vec::new();
            for item in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                grants.push(match item.split_once('@') {
                    Some((id, hash)) if !id.is_empty() && is_hash(hash) => Granted::Call {
                        id: id.to_string(),
                        hash: hash.to_string(),
                    },
                    Some(_) => {
                        return Err(format!(
                            "`{item}`: a call is approved as ID@HASH, the hash as `flux-tools approvals JOURNAL` shows it"
                        ))
                    }
                    None => Granted::Tool(item.to_string()),
                });
            }
            if grants.is_empty() {
                return Err("use all, none or a comma-separated list of tools or ID@HASH".into());
            }
            Approve::Some(grants)
        }
    })
}
