//! The `mcp` kind: tools on Model Context Protocol servers, through the official Rust SDK
//! (`rmcp`).
//!
//! [`McpHub`] owns one session per `[mcp_servers.NAME]` for the whole run, started on first
//! use (stdio: the server's process, its stderr kept as a tail for messages; or streamable
//! HTTP) and shared by every call to it, many in flight at once. A call that is stopped (its
//! timeout, the run ending) drops its request, and rmcp sends `notifications/cancelled` for
//! it. A server that dies loses its in-flight calls ([`Failure::Lost`]: an idempotent one
//! with retries left is made again on a server started for it, else classified cancelled or
//! indeterminate) and fails later calls of the run with its last words. `tools/list` gives the
//! annotations that default a tool's `effect` and `idempotent`.
//!
//! Layout: this file is the kind (its settings and the runner of a call); `server` the hub
//! of sessions and what the gateway asks a server besides calls; `learn` what the manifest
//! learns from a server (annotations, a whole server's tools).

mod callers;
mod http;
mod learn;
mod lines;
pub(crate) mod oauth;
mod server;

pub(crate) use learn::{annotate, discover, expand, hub_for, needs_hub, reader_for};
pub(crate) use server::{Answerer, Asked, Asker, Change, McpHub};
use lines::Unanswered;
use server::relay_progress;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequest, ClientRequest, ReadResourceRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{json, Value};
use toml::de::DeTable;

use super::{Failure, Invocation, Kind, Site, Stop, ToolContext};
use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::{Manifest, Tool};

/// `kind = "mcp"`: a tool on a Model Context Protocol server.
#[derive(Debug, Clone)]
pub struct McpSpec {
    pub server: String,
    pub tool: String,
    /// What a call asks the server (a manifest's tool: always a `tools/call`).
    pub op: Op,
}

/// Whether `tool` calls a server that answers each gateway caller as itself (`identity =
/// "caller"`): what it answers is that caller's own.
pub(crate) fn per_caller(m: &Manifest, tool: &Tool) -> bool {
    let server = tool.settings_of::<McpSpec>().and_then(|s| m.mcp_servers.get(&s.server));
    server.and_then(|s| s.auth.as_ref()).is_some_and(|a| a.on_behalf)
}

/// Whose answers a call's are — the cached reads and the idempotency keys it may be answered
/// from: its tenant's, or, for a tool whose server answers each gateway caller as itself,
/// that caller's own, so what alice's token read is never bob's answer. `None`: such a tool
/// with no gateway caller (the call is refused: nothing of it is kept).
pub(crate) fn owner<'a>(
    m: &Manifest,
    tool: &Tool,
    tenant: &'a str,
    caller: Option<&super::Behalf>,
) -> Option<std::borrow::Cow<'a, str>> {
    if !per_caller(m, tool) {
        return Some(tenant.into());
    }
    // A tenant's name never starts with NUL: no caller's is a tenant's.
    caller.map(|c| format!("\0caller\0{}", c.subject).into())
}

/// What a call of an MCP tool asks its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `tools/call` of its tool.
    CallTool,
    /// `resources/read` of the call's `uri` (the gateway's reads of a whole server).
    ReadResource,
}

impl Op {
    /// Its JSON-RPC method.
    fn method(self) -> &'static str {
        match self {
            Op::CallTool => "tools/call",
            Op::ReadResource => "resources/read",
        }
    }
}

impl Kind for McpSpec {
    const NAME: &'static str = "mcp";
    const KEYS: &'static [&'static str] = &["server", "tool"];
    const ANNOUNCES_EFFECT: bool = true;
    type Runner = McpTool;

    fn parse(r: &mut Reader<'_>, t: &DeTable<'_>, site: &Site<'_>) -> McpSpec {
        let ctx = site.ctx;
        let server = match r.string(t, "server", ctx) {
            Some((s, _)) => s,
            None => {
                r.error(
                    site.span.clone(),
                    format!("{ctx} has no `server`"),
                    Some("name one of [mcp_servers.*]".into()),
                );
                String::new()
            }
        };
        let tool = r
            .string(t, "tool", ctx)
            .map_or_else(|| site.name.to_string(), |(s, _)| s);
        McpSpec {
            server,
            tool,
            op: Op::CallTool,
        }
    }

    fn check(&self, tool: &Tool, m: &Manifest, r: &mut Reader<'_>) {
        if !self.server.is_empty() && !m.mcp_servers.contains_key(&self.server) {
            r.error(
                tool.span.clone(),
                format!(
                    "tool `{}` names MCP server `{}`, which [mcp_servers] does not declare",
                    tool.name, self.server
                ),
                crate::error::suggest(&self.server, m.mcp_servers.keys().map(String::as_str)),
            );
        }
    }

    fn target(&self) -> String {
        match self.op {
            Op::CallTool => format!("{}:{}", self.server, self.tool),
            Op::ReadResource => format!("{}:resources/read", self.server),
        }
    }

    fn backend(&self) -> Option<String> {
        Some(format!("mcp:{}", self.server))
    }

    fn settings(&self) -> Value {
        json!({"server": self.server, "tool": self.tool})
    }

    fn runner(&self, tool: &Tool, ctx: &ToolContext) -> Result<McpTool, String> {
        match &ctx.mcp {
            Some(hub) => Ok(McpTool::new(tool, self, hub.clone())),
            None => Err("MCP sessions were not set up".into()),
        }
    }
}

super::kind::invoke_boxed!(McpTool);

/// Why rmcp has no answer, as a direct request says it.
fn unanswered(e: ServiceError) -> Unanswered {
    match e {
        ServiceError::McpError(e) => Unanswered::Error(i64::from(e.code.0), e.message.to_string()),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => Unanswered::Closed,
        e => Unanswered::Other(e.to_string()),
    }
}

pub struct McpTool {
    name: String,
    server: String,
    remote: String,
    op: Op,
    hub: Arc<McpHub>,
}

impl McpTool {
    pub fn new(tool: &Tool, spec: &McpSpec, hub: Arc<McpHub>) -> McpTool {
        McpTool {
            name: tool.name.clone(),
            server: spec.server.clone(),
            remote: spec.tool.clone(),
            op: spec.op,
            hub,
        }
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let params = match self.op {
            Op::CallTool => {
                let mut params = json!({"name": self.remote, "arguments": inv.args()});
                if let Some(key) = &inv.idempotency_key {
                    params["_meta"]["idempotencyKey"] = json!(key);
                }
                if let Some(tp) = inv.traceparent() {
                    params["_meta"]["traceparent"] = json!(tp);
                }
                params
            }
            Op::ReadResource => json!({"uri": inv.args()["uri"]}),
        };
        let raw = self.send(params, inv, stop).await?;
        if !self.is_answer(&raw) {
            return Err(Failure::failed(
                ErrorKind::McpError,
                format!(
                    "tool `{}` on MCP server `{}`: unexpected answer: {raw}",
                    self.name, self.server
                ),
            ));
        }
        match self.op {
            Op::CallTool => {
                if let Some(relay) = &inv.run.relay {
                    relay.keep(raw.clone());
                }
                self.shape(raw)
            }
            // A resource's contents are the output, as they came (so a cached read is too).
            Op::ReadResource => Ok(raw),
        }
    }

    /// Whether `raw` is a whole answer to this tool's request: a tool's result (`content`,
    /// `structuredContent` or `isError`, and no `resultType` but `complete`), or a read's
    /// `contents` — as rmcp reads them.
    fn is_answer(&self, raw: &Value) -> bool {
        let Some(o) = raw.as_object() else {
            return false;
        };
        match self.op {
            Op::CallTool => {
                let complete = o.get("resultType").is_none_or(|t| t == "complete");
                let any = ["content", "structuredContent", "isError"];
                complete && any.iter().any(|k| o.contains_key(*k))
            }
            Op::ReadResource => o.get("contents").is_some_and(Value::is_array),
        }
    }

    /// Send the request (`params`) on the server's session (started, or started again for a
    /// retry after it went away) and wait for its answer's `result`, relaying progress; a
    /// stop cancels it there. A stdio server's call is written by this task itself
    /// ([`lines::Direct`]), its progress read by the reading loop; else it goes through rmcp.
    async fn send(&self, params: Value, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        if inv.attempt > 1 {
            // A retry after the server went away mid-call: it is started again for it.
            self.hub.renew(&self.server).await;
        }
        let session = tokio::select! {
            s = self.session(inv) => s.map_err(|e| Failure::failed(ErrorKind::SpawnFailed, e))?,
            _ = stop.stopped() => return Err(Failure::Stopped),
        };
        if session.gone() {
            let tail = session.last_words().await;
            let mut why = format!("MCP server `{}` has exited", self.server);
            if !tail.is_empty() {
                why.push_str(&format!(" (its stderr: {tail})"));
            }
            return Err(Failure::failed(ErrorKind::ServerExited, why));
        }
        let asker = inv.run.relay.as_ref().and_then(|r| r.ask.clone());
        let _asking = session.asking.enter(asker);
        let answered = match session.direct() {
            Some(direct) => tokio::select! {
                a = direct.request(self.op.method(), params, inv.run.relay.as_ref().and_then(|r| r.progress.clone())) => a,
                _ = stop.stopped() => return Err(Failure::Stopped),
            },
            _ => Box::pin(self.through_rmcp(&session, params, inv, stop)).await?,
        };
        self.answered(&session, answered).await
    }

    /// The session the call goes to: its caller's own, when the server carries each caller's
    /// identity (`identity = "caller"`), else the server's.
    async fn session(&self, inv: &Invocation) -> Result<Arc<server::Session>, String> {
        if !self.hub.for_callers(&self.server) {
            return self.hub.session_for(&self.server, self.reads(inv)).await;
        }
        match inv.run.relay.as_ref().and_then(|r| r.behalf.as_ref()) {
            Some(caller) => self.hub.session_of(&self.server, caller).await,
            None => Err(format!(
                "MCP server `{}` carries each caller's identity (`identity = \"caller\"`): only a gateway caller with an access token ([serve.auth]) can call it",
                self.server
            )),
        }
    }

    /// The request sent through rmcp's service (progress relayed): its answer as JSON.
    async fn through_rmcp(
        &self,
        session: &server::Session,
        params: Value,
        inv: &Invocation,
        stop: &mut Stop,
    ) -> Result<Result<Value, Unanswered>, Failure> {
        let request = match self.op {
            Op::CallTool => serde_json::from_value(params)
                .map(|p| ClientRequest::CallToolRequest(CallToolRequest::new(p))),
            Op::ReadResource => serde_json::from_value(params)
                .map(|p| ClientRequest::ReadResourceRequest(ReadResourceRequest::new(p))),
        };
        let request = request.map_err(|e| {
            let why = format!("cannot build the request to MCP server `{}`: {e}", self.server);
            Failure::failed(ErrorKind::SpawnFailed, why)
        })?;
        let sent = session
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await;
        let mut handle = match sent {
            Ok(handle) => handle,
            Err(e) => return Ok(Err(unanswered(e))),
        };
        let relay = inv.run.relay.as_ref().and_then(|r| r.progress.clone());
        let progress = match relay {
            Some(to) => Some(relay_progress(session, handle.progress_token.clone(), to).await),
            None => None,
        };
        let answer = tokio::select! {
            r = &mut handle.rx => r.unwrap_or(Err(ServiceError::TransportClosed)),
            _ = stop.stopped() => {
                // Tell the server, and wait until the notification is written, so a run
                // that ends right after still delivers it.
                let why = format!("{:?}", stop.cause());
                let _ = tokio::time::timeout(Duration::from_secs(2), handle.cancel(Some(why))).await;
                return Err(Failure::Stopped);
            }
        };
        if let Some(p) = progress {
            p.abort();
        }
        Ok(answer.map_err(unanswered).map(|r| match r {
            ServerResult::CallToolResult(r) => serde_json::to_value(&r).unwrap_or(Value::Null),
            ServerResult::ReadResourceResult(r) => serde_json::to_value(&r).unwrap_or(Value::Null),
            other => json!({"unexpected": other}),
        }))
    }

    /// An answer, or why there is none, as the call's outcome.
    async fn answered(
        &self,
        session: &server::Session,
        answered: Result<Value, Unanswered>,
    ) -> Result<Value, Failure> {
        match answered {
            Ok(r) => Ok(r),
            Err(Unanswered::Error(code, message)) => Err(Failure::failed(
                ErrorKind::McpError,
                format!(
                    "tool `{}` on MCP server `{}`: JSON-RPC error {code}: {message}",
                    self.name, self.server
                ),
            )),
            Err(Unanswered::Closed) => {
                session
                    .dead
                    .store(true, std::sync::atomic::Ordering::Release);
                // Refused for its token (401, 403): the server did not take the call.
                if let Some(why) = session.auth.as_ref().and_then(|a| a.refusal()) {
                    return Err(Failure::failed(ErrorKind::HttpStatus, why));
                }
                let tail = session.last_words().await;
                let mut why = format!("MCP server `{}` went away mid-call", self.server);
                if !tail.is_empty() {
                    why.push_str(&format!(" (its stderr: {tail})"));
                }
                Err(Failure::Lost(why))
            }
            Err(Unanswered::Other(e)) => Err(Failure::failed(
                ErrorKind::McpError,
                format!("tool `{}` on MCP server `{}`: {e}", self.name, self.server),
            )),
        }
    }

    /// Whether the call only reads (a read may go to any process of a server's pool).
    fn reads(&self, inv: &Invocation) -> bool {
        self.op == Op::ReadResource || !inv.plan.calls[inv.pos].write
    }

    /// SPEC section 2: `structuredContent` when present, else the text blocks joined (JSON
    /// when they parse), else the content array. `isError: true` is a tool error.
    fn shape(&self, r: Value) -> Result<Value, Failure> {
        let content = r
            .get("content")
            .cloned()
            .unwrap_or(Value::Array(Vec::new()));
        let texts: Vec<&str> = content
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if r.get("isError").and_then(Value::as_bool) == Some(true) {
            let msg = if texts.is_empty() {
                content.to_string()
            } else {
                texts.join("\n")
            };
            return Err(Failure::failed(
                ErrorKind::ToolError,
                format!(
                    "tool `{}` on MCP server `{}` reported an error: {msg}",
                    self.name, self.server
                ),
            ));
        }
        if let Some(s) = r.get("structuredContent") {
            return Ok(s.clone());
        }
        if !texts.is_empty() {
            return Ok(super::parse_output(&texts.join("\n")));
        }
        Ok(content)
    }
}

