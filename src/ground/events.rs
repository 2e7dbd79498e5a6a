//! Events from the scheduler to the reporters, and the result types they carry. This is the
//! only contact point between `run` and `report`: the scheduler emits [`Event`]s and knows
//! nothing of terminals; reporters render them and know nothing of scheduling.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// How a call ended (SPEC section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
    TimedOut,
    NeverDispatched,
    Cancelled,
    Indeterminate,
    /// A write cut off in flight that its probe (`verify`) found never landed, and that was
    /// not sent again (`--no-resend`, `resend = false`, or the run was ending).
    NotApplied,
}

impl Status {
    /// The transcript event name.
    pub fn event(self) -> &'static str {
        match self {
            Status::Ok => "TOOL_RESULT",
            Status::Indeterminate => "TOOL_INDETERMINATE",
            Status::Error
            | Status::TimedOut
            | Status::NeverDispatched
            | Status::Cancelled
            | Status::NotApplied => "TOOL_ERROR",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::TimedOut => "timed_out",
            Status::NeverDispatched => "never_dispatched",
            Status::Cancelled => "cancelled",
            Status::Indeterminate => "indeterminate",
            Status::NotApplied => "not_applied",
        }
    }
}

/// What kind of failure an `error` is (SPEC section 5), written in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A command exited with a non-zero status.
    ExitStatus,
    /// An HTTP response with a status other than 2xx (and not 429).
    HttpStatus,
    /// The request failed before a response: connection, TLS or protocol.
    HttpError,
    /// The partner said slow down (HTTP 429).
    RateLimited,
    /// The tool reported failure itself (MCP `isError`, a scripted `fail`).
    ToolError,
    /// The MCP server answered the request with a protocol error.
    McpError,
    /// The tool could not be started (program missing, bad URL, unset secret).
    SpawnFailed,
    /// The output passed `max_output`.
    OutputTooLarge,
    /// The output could not be read (not UTF-8 text, bad JSON it promised).
    InvalidOutput,
    /// The call outran its own `timeout` or the run's `tool_call_seconds`.
    Timeout,
    /// A call it references or runs `after` did not succeed.
    DependencyFailed,
    /// Its arguments failed the schema, or the `before_call` hook refused it.
    Guardrail,
    /// It needs approval and did not get it.
    ApprovalDenied,
    /// Its cost did not fit what was left of the budget.
    BudgetExhausted,
    /// The run ended before or while it ran.
    RunEnded,
    /// `--replay` found no recorded result for it.
    ReplayMiss,
    /// The lane store failed (Redis unreachable, a lock file that cannot be opened).
    LaneStore,
    /// The journal could not be written, so the call was not sent.
    Journal,
    /// What carried the call went away while it was in flight (an MCP server died).
    ConnectionLost,
    /// The MCP server had exited before the call was sent.
    ServerExited,
    /// A model asked for a call that cannot be made (unknown tool, arguments that are not a JSON object, …).
    InvalidCall,
    /// The call names a tool that is not served: none of that name, or one whose definition
    /// `tools.lock` does not pin as it is now (held back).
    UnknownTool,
    /// The run reached its `max_calls`.
    CallLimit,
    /// It needs an approval nobody can give now (journaled: `flux-tools approvals`, then
    /// `--resume … --approve ID@HASH`), or it depends on a call that does.
    AwaitingApproval,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ExitStatus => "exit_status",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::HttpError => "http_error",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::ToolError => "tool_error",
            ErrorKind::McpError => "mcp_error",
            ErrorKind::SpawnFailed => "spawn_failed",
            ErrorKind::OutputTooLarge => "output_too_large",
            ErrorKind::InvalidOutput => "invalid_output",
            ErrorKind::Timeout => "timeout",
            ErrorKind::DependencyFailed => "dependency_failed",
            ErrorKind::Guardrail => "guardrail",
            ErrorKind::ApprovalDenied => "approval_denied",
            ErrorKind::BudgetExhausted => "budget_exhausted",
            ErrorKind::RunEnded => "run_ended",
            ErrorKind::ReplayMiss => "replay_miss",
            ErrorKind::LaneStore => "lane_store",
            ErrorKind::Journal => "journal",
            ErrorKind::ConnectionLost => "connection_lost",
            ErrorKind::ServerExited => "server_exited",
            ErrorKind::InvalidCall => "invalid_call",
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::CallLimit => "call_limit",
            ErrorKind::AwaitingApproval => "awaiting_approval",
        }
    }

    /// A partner asked the run to slow down: the call's lanes back off.
    pub fn is_rate_limit(self) -> bool {
        self == ErrorKind::RateLimited
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `error` of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub message: String,
}

/// One call's result, in the shape SPEC section 5 gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallResult {
    pub index: usize,
    pub id: String,
    pub tool: String,
    pub status: Status,
    pub event: &'static str,
    pub output: Value,
    pub error: Option<ErrorInfo>,
    pub attempts: u32,
    pub phase: usize,
    pub idempotency_key: Option<String>,
    /// The name the call used, when not the manifest's (a model calling `db_getOrders` for
    /// `db.getOrders`). Written only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called_as: Option<String>,
    /// Answered from the read cache (nothing was invoked). Written only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// A write cut off in flight that its probe settled (`verify`). Written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
    pub queued_ms: Option<u64>,
    pub waited_on: Option<String>,
    pub started_ms: Option<u64>,
    pub duration_ms: Option<u64>,
}

/// What a write's probe (`verify = "TOOL"`) said of it once it was cut off in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// It landed: the probe's output is its result.
    Applied,
    /// It never landed (sent again once with the same key, unless that was not allowed).
    NotApplied,
    /// The probe could not tell (it failed, timed out, or answered nothing readable).
    Unknown,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Applied => "applied",
            Settled::NotApplied => "not_applied",
            Settled::Unknown => "unknown",
        }
    }
}

impl CallResult {
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }
}

/// How the run as a whole ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    DeadlineExceeded,
    BudgetExhausted,
    Interrupted,
    /// Nobody read the results any more (stdout closed, `| head -1`): nothing more was
    /// dispatched and the calls in flight finished (exit 0, as a closed pipe is no failure).
    Drained,
    /// Every call ran that could; some wait for an approval (exit 4; resume the journal).
    Paused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::DeadlineExceeded => "deadline_exceeded",
            Outcome::BudgetExhausted => "budget_exhausted",
            Outcome::Interrupted => "interrupted",
            Outcome::Drained => "drained",
            Outcome::Paused => "paused",
        }
    }
}

/// Per-lane figures for the stats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneStats {
    pub lane: String,
    /// Its limit (a learned lane's at the end of the run).
    pub limit: Option<u32>,
    /// A learned lane (`concurrency = "auto"`): where it started, and how it moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<Learned>,
    pub rate: Option<String>,
    pub peak_in_flight: u64,
    /// Total time calls spent waiting for this lane (permits and tokens).
    pub wait_ms: u64,
    /// How many calls had to wait for it.
    pub waits: u64,
    /// How many calls waited for a rate token.
    pub rate_limit_waits: u64,
    /// How many times a partner rejected a call in this lane (HTTP 429/503 with a wait).
    pub rejections: u64,
    /// For a lane shared with other runs: the most permits other runs held while one of ours
    /// waited for it (`None`: not shared, or nobody waited).
    pub peak_held_elsewhere: Option<u64>,
}

/// How a learned lane's limit went over a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Learned {
    pub start: u32,
    pub last: u32,
    pub lowest: u32,
    pub highest: u32,
    /// Its moves: (ms since the lane began learning, the new limit, why), the newest last.
    pub moves: Vec<(u64, u32, String)>,
}

/// Run statistics (SPEC section 5).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub calls: usize,
    pub ok: usize,
    pub failed: usize,
    pub wall_ms: u64,
    /// Sum of every call's duration.
    pub tool_time_ms: u64,
    /// The longest chain of edges and phase barriers, measured.
    pub critical_path_ms: u64,
    pub critical_path: Vec<String>,
    /// Summed tool time over wall time.
    pub speedup: f64,
    pub retries: u64,
    pub rate_limit_waits: u64,
    pub http_429: u64,
    pub cost: f64,
    pub cost_by_tool: BTreeMap<String, f64>,
    /// Calls answered from the read cache, and per tool.
    pub cache_hits: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cache_hits_by_tool: BTreeMap<String, usize>,
    /// Writes cut off in flight that their probe settled (`verify`), by what it found.
    /// Written only when there were any.
    #[serde(skip_serializing_if = "Settlements::is_empty")]
    pub settled: Settlements,
    pub lanes: Vec<LaneStats>,
}

/// How many cut-off writes their probes found applied, not applied, or could not tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Settlements {
    pub applied: usize,
    pub not_applied: usize,
    pub unknown: usize,
}

impl Settlements {
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    pub fn total(&self) -> usize {
        self.applied + self.not_applied + self.unknown
    }

    /// Count one settlement.
    pub fn add(&mut self, s: Settled) {
        match s {
            Settled::Applied => self.applied += 1,
            Settled::NotApplied => self.not_applied += 1,
            Settled::Unknown => self.unknown += 1,
        }
    }

    /// Fold in another batch's counts.
    pub fn merge(&mut self, other: Settlements) {
        self.applied += other.applied;
        self.not_applied += other.not_applied;
        self.unknown += other.unknown;
    }
}

/// A lane as the run starts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneInfo {
    pub name: String,
    /// Its limit (a learned lane's start).
    pub limit: Option<u32>,
    /// Whether it learns its limit (`concurrency = "auto"`).
    pub auto: bool,
    pub rate: Option<String>,
}

/// What the scheduler tells the reporters.
#[derive(Debug, Clone)]
pub enum Event {
    /// The run began.
    RunStarted {
        run_id: String,
        /// Number of calls.
        total: usize,
        /// Every lane the run uses, indexed by the `lane` fields below.
        lanes: Vec<LaneInfo>,
    },
    /// Call `call` began waiting for `weight` permits of `lane`.
    LaneWaiting {
        call: usize,
        lane: usize,
        weight: u32,
    },
    /// Call `call` now holds `weight` permits of `lane`.
    LaneAcquired {
        call: usize,
        lane: usize,
        weight: u32,
    },
    /// Call `call` gave back its permits of `lane` (also sent when it stopped waiting).
    LaneReleased {
        call: usize,
        lane: usize,
        weight: u32,
        held: bool,
    },
    /// Other runs hold `held` permits of the shared `lane` (seen when one of our calls waited).
    LaneShared { lane: usize, held: u64 },
    /// A learned lane's limit moved (`concurrency = "auto"`), and why: `grew`, `queueing`
    /// (its latency rose well above the unloaded one), `overloaded` (429, 503, a refusal…),
    /// `adopted` (learned by another process sharing the lane, or an earlier run).
    LaneLimit {
        lane: usize,
        from: u32,
        to: u32,
        why: &'static str,
    },
    /// Call `call` began (`waiting`) or stopped waiting for a rate token of `lane`.
    RateWaiting {
        call: usize,
        lane: usize,
        waiting: bool,
    },
    /// Call `call` was invoked (attempt 1) or re-invoked after a retryable failure.
    CallStarted { call: usize, attempt: u32 },
    /// Call `call` has its final result.
    CallFinished { result: Box<CallResult> },
    /// A stream's run grew: it now has `total` calls (sent for each new segment).
    RunExtended { total: usize },
    /// The run ended; no event follows.
    RunFinished { outcome: Outcome, stats: Box<Stats> },
}

impl Event {
    /// Renumber the calls this event names by `base` (a stream segment's place in the run).
    pub fn shift_calls(&mut self, base: usize) {
        match self {
            Event::LaneWaiting { call, .. }
            | Event::LaneAcquired { call, .. }
            | Event::LaneReleased { call, .. }
            | Event::RateWaiting { call, .. }
            | Event::CallStarted { call, .. } => *call += base,
            Event::CallFinished { result } => result.index += base,
            Event::RunStarted { .. }
            | Event::LaneShared { .. }
            | Event::LaneLimit { .. }
            | Event::RunExtended { .. }
            | Event::RunFinished { .. } => {}
        }
    }
}

/// A cost or other amount without trailing zeros (`0.25`, `3`).
pub(crate) fn trim_float(v: f64) -> String {
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A call deferred for an approval nobody could give.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Awaiting {
    pub index: usize,
    pub id: String,
    pub tool: String,
    /// Its resolved arguments, and their approval hash (`run::gate::approval_hash`).
    pub args: Value,
    pub hash: String,
}
