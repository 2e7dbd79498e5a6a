//! What an invocation is given and gives back: the [`Invocation`], the [`Stop`] it watches,
//! the [`Failure`] it returns, and the [`ToolContext`] every tool of a run shares.
//!
//! An invocation gets the resolved arguments and a [`Stop`]: the call's own timeout, the run's
//! `tool_call_seconds` ceiling and the run ending all arrive through it, and each kind cleans
//! up its own way (a command terminates its process group) before returning
//! [`Failure::Stopped`]. Retries, lanes and classification are the scheduler's business.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::http::HttpSpec;
use super::mcp;
use crate::events::ErrorKind;
use crate::manifest::Tool;
use crate::plan::Plan;

/// How hard the run is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopLevel {
    Running,
    /// Stop gracefully: SIGTERM, then SIGKILL after the tool's grace.
    Graceful,
    /// Stop now: SIGKILL.
    Force,
}

/// Why an invocation was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The tool's own `timeout`.
    Timeout,
    /// The run's `deadline.tool_call_seconds`.
    Ceiling,
    /// The run is ending.
    RunEnded,
}

/// What an invocation watches to know it must stop.
pub struct Stop {
    timeout: Option<Instant>,
    ceiling: Option<Instant>,
    run: watch::Receiver<StopLevel>,
    /// The run's level that stops the call: `Graceful` (a call), `Force` (a probe settling a
    /// cut-off write while the run ends: only a second Ctrl-C cuts it short).
    level: StopLevel,
    cause: Option<StopCause>,
    /// What the backend said of its rate quota in its answer (HTTP headers), for the lanes.
    quota: Option<super::quota::Quota>,
}

impl Stop {
    pub fn new(
        timeout: Option<Instant>,
        ceiling: Option<Instant>,
        run: watch::Receiver<StopLevel>,
    ) -> Stop {
        Stop {
            timeout,
            ceiling,
            run,
            level: StopLevel::Graceful,
            cause: None,
            quota: None,
        }
    }

    /// The backend stated its rate quota in its answer (the call's lanes heed it).
    pub(crate) fn tell_quota(&mut self, quota: super::quota::Quota) {
        self.quota = Some(quota);
    }

    /// The quota the backend stated, if it did.
    pub(crate) fn quota(&self) -> Option<super::quota::Quota> {
        self.quota
    }

    /// A stop for a probe (`verify`): its own timeout, and the run ending only when forced.
    pub fn for_probe(timeout: Instant, run: watch::Receiver<StopLevel>) -> Stop {
        Stop {
            level: StopLevel::Force,
            ..Stop::new(Some(timeout), None, run)
        }
    }

    /// Resolves when the call must stop, with the reason (remembered for [`Stop::cause`]).
    pub async fn stopped(&mut self) -> StopCause {
        if let Some(c) = self.cause {
            return c;
        }
        // No timer at all for a limit that is not set: registering one costs a lock on the
        // timer wheel, and this future is made afresh on every turn of a tool's I/O loop.
        let at = |t: Option<Instant>| async move {
            match t {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let timeout = at(self.timeout);
        let ceiling = at(self.ceiling);
        let level = self.level;
        let run = self.run.wait_for(|l| *l >= level);
        let cause = tokio::select! {
            biased;
            r = run => {
                // A dropped sender means the scheduler is gone: stop as well.
                let _ = r;
                StopCause::RunEnded
            }
            _ = ceiling => StopCause::Ceiling,
            _ = timeout => StopCause::Timeout,
        };
        // The earliest of a timeout and a ceiling that land together is the tool's own.
        let cause = match (cause, self.timeout, self.ceiling) {
            (StopCause::Ceiling, Some(t), Some(c)) if t <= c => StopCause::Timeout,
            (c, _, _) => c,
        };
        self.cause = Some(cause);
        cause
    }

    /// Resolves when the run asks for an immediate stop (a second Ctrl-C).
    pub async fn forced(&mut self) {
        let _ = self.run.wait_for(|l| *l >= StopLevel::Force).await;
    }

    pub fn cause(&self) -> Option<StopCause> {
        self.cause
    }
}

/// What every call of a run shares.
#[derive(Debug)]
pub struct RunInfo {
    pub run_id: String,
    pub tenant: String,
    /// The manifest's canonical path: a nested run borrows our permits only when it uses the
    /// same manifest (the same lanes).
    pub manifest: String,
    /// The trace the run belongs to, passed on to each tool (`None`: no trace).
    pub trace: Option<crate::trace_context::TraceContext>,
    /// What the caller wants back besides each call's output (`mcp serve`'s one-call runs).
    pub relay: Option<Arc<Relay>>,
}

/// What a caller outside a batch wants back from its call besides the output (the gateway
/// of `mcp serve` runs each client's call as a run of its own): an upstream MCP tool's
/// result exactly as it came, and the upstream's progress as it happens.
#[derive(Default)]
pub struct Relay {
    /// The upstream's `CallToolResult` (as JSON) of the call's last attempt.
    pub raw: std::sync::Mutex<Option<Value>>,
    /// Where the upstream's progress notifications go, if anyone listens.
    pub progress: Option<tokio::sync::mpsc::UnboundedSender<Progress>>,
    /// Who answers the upstream's questions (elicitation) during the call: the client that
    /// made it, when it can be asked.
    pub(crate) ask: Option<super::mcp::Asker>,
    /// The caller's own token, for an upstream that carries the caller's identity.
    pub(crate) behalf: Option<Arc<Behalf>>,
}

/// A gateway caller, for an upstream server with `identity = "caller"`: who it is (its
/// tenant and subject) and the access token it proved that with, which the upstream's
/// authorization server exchanges (RFC 8693) for a token of the caller's own. Never printed.
#[derive(Clone)]
pub(crate) struct Behalf {
    /// `["TENANT","SUBJECT"]` (JSON: no two callers' are alike, whatever `/` their names
    /// hold): upstream sessions, tokens and cached reads are never shared across two.
    pub subject: String,
    pub token: Arc<str>,
}

impl std::fmt::Debug for Behalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Behalf")
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("raw", &self.raw)
            .field("progress", &self.progress.is_some())
            .field("ask", &self.ask.is_some())
            .field("behalf", &self.behalf)
            .finish()
    }
}

impl Relay {
    /// Keep the upstream's answer (the last attempt's wins).
    pub fn keep(&self, raw: Value) {
        if let Ok(mut r) = self.raw.lock() {
            *r = Some(raw);
        }
    }

    /// The upstream's answer, if one came.
    pub fn take(&self) -> Option<Value> {
        self.raw.lock().ok().and_then(|mut r| r.take())
    }
}

/// One progress notification of an upstream tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What a tool is asked to do. It borrows from the plan rather than copying, so a call in
/// flight costs little more than its resolved arguments.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub plan: Arc<Plan>,
    pub pos: usize,
    pub run: Arc<RunInfo>,
    /// The arguments after references were resolved; `None`: the plan's literal arguments.
    pub resolved: Option<Map<String, Value>>,
    pub idempotency_key: Option<String>,
    /// Attempt number, from 1.
    pub attempt: u32,
}

impl Invocation {
    pub fn call_id(&self) -> &str {
        &self.plan.calls[self.pos].id
    }

    /// The W3C `traceparent` this call passes on to its tool, when the run has a trace.
    pub fn traceparent(&self) -> Option<String> {
        self.run
            .trace
            .as_ref()
            .map(|t| t.traceparent(self.call_id()))
    }

    pub fn tool(&self) -> &str {
        &self.plan.calls[self.pos].tool_name
    }

    pub fn tenant(&self) -> &str {
        &self.run.tenant
    }

    pub fn run_id(&self) -> &str {
        &self.run.run_id
    }

    pub fn args(&self) -> &Map<String, Value> {
        self.resolved
            .as_ref()
            .unwrap_or(&self.plan.calls[self.pos].args.value)
    }

    /// `FLUX_TOOLS_LEASE`: the permits this call holds, for nested runs.
    pub fn lease(&self) -> String {
        use crate::plan::lease::{HeldLane, Lease};
        let call = &self.plan.calls[self.pos];
        let lanes = call.lanes.iter().map(|&l| HeldLane {
            lane: &self.plan.lanes[l].name,
            weight: call.weight,
        });
        let lease = Lease {
            run_id: &self.run.run_id,
            manifest: &self.run.manifest,
            call: &call.id,
            lanes: lanes.collect(),
        };
        serde_json::to_string(&lease).unwrap_or_default()
    }
}

/// A failed invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The tool failed; `transient` failures of idempotent tools are retried.
    Failed {
        kind: ErrorKind,
        message: String,
        transient: bool,
        retry_after: Option<Duration>,
    },
    /// The call was stopped through its [`Stop`] and has been cleaned up.
    Stopped,
    /// The call was in flight when what carried it went away (an MCP server died): it is
    /// classified like a call cut off by the run ending, with this explanation.
    Lost(String),
    /// What the call asked for does not exist (HTTP 404): a failure like any other
    /// (`http_status`), and to a probe (`verify`), proof that a write never landed.
    Absent(String),
}

impl Failure {
    pub fn failed(kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure::Failed {
            kind,
            message: message.into(),
            transient: false,
            retry_after: None,
        }
    }
}

/// What tools of a run share: the one HTTP connection pool.
#[derive(Default)]
pub struct ToolContext {
    /// `Err` holds why the client could not be built; each http call then fails with it.
    pub http: Option<Result<reqwest::Client, String>>,
    /// The run's MCP sessions.
    pub mcp: Option<Arc<mcp::McpHub>>,
    /// The key-value store `scripted` tools with `kv` read and write: one per set of tools
    /// (a run, a stream, every turn of `run --turns`).
    pub kv: KvStore,
}

/// A small in-memory key-value store (see [`ToolContext::kv`]).
pub(super) type KvStore = Arc<std::sync::Mutex<std::collections::HashMap<String, Value>>>;

impl ToolContext {
    /// Build what the manifest's tools need. `max_idle_per_host`: the pool never keeps more
    /// connections to one host than the lanes let calls use at once.
    pub fn for_tools(
        tools: &[Tool],
        max_idle_per_host: Option<usize>,
        mcp: Option<Arc<mcp::McpHub>>,
    ) -> ToolContext {
        let http = tools
            .iter()
            .any(|t| t.settings_of::<HttpSpec>().is_some())
            .then(|| {
                let mut b = reqwest::Client::builder();
                if let Some(n) = max_idle_per_host {
                    b = b.pool_max_idle_per_host(n);
                }
                b.build()
                    .map_err(|e| format!("cannot set up the HTTP client: {e}"))
            });
        ToolContext {
            http,
            mcp,
            kv: KvStore::default(),
        }
    }
}

/// Parse tool output text: JSON when it is JSON, else the text with one trailing newline trimmed.
pub(crate) fn parse_output(text: &str) -> Value {
    let trimmed = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(text);
    let probe = trimmed.trim_start();
    if probe.starts_with(['{', '[', '"'])
        || probe == "true"
        || probe == "false"
        || probe == "null"
        || probe.parse::<f64>().is_ok()
    {
        if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
            return v;
        }
    }
    Value::String(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_json_when_json_else_text() {
        assert_eq!(parse_output("{\"a\":1}\n"), serde_json::json!({"a": 1}));
        assert_eq!(parse_output("42\n"), serde_json::json!(42));
        assert_eq!(parse_output("hello\n"), serde_json::json!("hello"));
        assert_eq!(parse_output("hello\n\n"), serde_json::json!("hello\n"));
        assert_eq!(parse_output("{not json"), serde_json::json!("{not json"));
    }
}
