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

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;


use toml::de::DeTable;

use super::{Failure, Invocation, Kind, Site, Stop, ToolContext};
use crate::error::Diagnostic;
use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::{Effect, Manifest, McpServer, Origin, Tool};

/// `kind = "mcp"`: a tool on a Model Context Protocol server.
#[derive(Debug, Clone)]
pub struct McpSpec {
    pub server: String,
    pub tool: String,
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
        McpSpec { server, tool }
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
        format!("{}:{}", self.server, self.tool)
    }

    fn backend(&self) -> Option<String> {
        Some(format!("mcp:{}", self.server))
    }

    fn settings(&self) -> Value {
        json!({"server": self.server, "tool": self.tool})
    }

    fn runner(&self, tool: &Tool, ctx: &ToolContext) -> Result<McpTool, String> {
        match &ctx.mcp {
            Some(hub) => Ok(McpTool::new(tool, &self.server, &self.tool, hub.clone())),
            None => Err("MCP sessions were not set up".into()),
        }
    }
}

super::kind::invoke_boxed!(McpTool);

/// How long a server may take to start and answer `initialize`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a server's stderr is kept for messages.
const STDERR_TAIL: usize = 2048;

type Service = RunningService<RoleClient, Upstream>;

/// Our side of a session: routes the server's progress notifications to the call that asked
/// (by the progress token rmcp gave its request).
#[derive(Clone, Default)]
pub(crate) struct Upstream {
    progress: ProgressDispatcher,
}

impl rmcp::ClientHandler for Upstream {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }
}

/// Keep the last [`STDERR_TAIL`] bytes of a server's stderr in `tail`; `eof` is dropped when
/// it ends.
fn keep_tail(
    mut err: tokio::process::ChildStderr,
    tail: Arc<Mutex<String>>,
    eof: tokio::sync::watch::Sender<()>,
) {
    tokio::spawn(async move {
                let _eof = eof;
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut t) = tail.lock() {
                        t.push_str(&String::from_utf8_lossy(&buf[..n]));
                        if t.len() > STDERR_TAIL * 2 {
                            let mut cut = t.len() - STDERR_TAIL;
                            while !t.is_char_boundary(cut) {
                                cut += 1;
                            }
                            t.drain(..cut);
                        }
                    }
                }
            });
}

/// One live session.
pub struct Session {
    service: tokio::sync::Mutex<Option<Service>>,
    peer: rmcp::service::Peer<RoleClient>,
    progress: ProgressDispatcher,
    stderr: Arc<Mutex<String>>,
    /// Its sender is dropped when the server's stderr reaches its end.
    stderr_eof: tokio::sync::watch::Receiver<()>,
    /// `tools/list`, as JSON (name, description, inputSchema, annotations).
    tools: OnceCell<Result<Vec<Value>, String>>,
    /// Set when a call saw the transport close: later calls fail at once, unsent.
    dead: std::sync::atomic::AtomicBool,
    /// A stdio server's process id: its exit is seen as soon as it happens.
    pid: Option<u32>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Its process is killed with the transport (rmcp): the watchdog may forget its group.
        if let Some(p) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            crate::tools::reaper::forget(p);
        }
    }
}

impl Session {
    /// Whether the server is gone: a call saw its transport close, the transport says so, or
    /// (a stdio server) its process has exited — seen at once, before its pipes are noticed.
    fn gone(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Acquire)
            || self.peer.is_transport_closed()
            || self.pid.is_some_and(exited)
    }

    /// End the session (a stdio server sees its stdin close and exits).
    async fn close(&self) {
        if let Some(service) = self.service.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), service.cancel()).await;
        }
    }

    /// The stderr tail of a server that went away, once its last words are read (its stderr
    /// can end a moment after its stdout; at most half a second is waited).
    async fn last_words(&self) -> String {
        let mut eof = self.stderr_eof.clone();
        let _ = tokio::time::timeout(Duration::from_millis(500), eof.wait_for(|_| false)).await;
        self.stderr_tail()
    }

    fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }
}

/// A server's session: started once on first use; replaced by [`McpHub::revive`] when it
/// died or could not start.
type Cell = Arc<OnceCell<Result<Arc<Session>, String>>>;

struct Slot {
    decl: McpServer,
    session: Mutex<Cell>,
}

impl Slot {
    fn cell(&self) -> Cell {
        self.session
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// The run's MCP sessions.
pub struct McpHub {
    slots: BTreeMap<String, Slot>,
}

impl McpHub {
    pub fn new(servers: &BTreeMap<String, McpServer>) -> Arc<McpHub> {
        Arc::new(McpHub {
            slots: servers
                .iter()
                .map(|(k, d)| {
                    (
                        k.clone(),
                        Slot {
                            decl: d.clone(),
                            session: Mutex::new(Arc::new(OnceCell::new())),
                        },
                    )
                })
                .collect(),
        })
    }

    /// The session for `server`, starting it on first use.
    pub async fn session(&self, server: &str) -> Result<Arc<Session>, String> {
        let slot = self
            .slots
            .get(server)
            .ok_or_else(|| format!("no MCP server `{server}` in the manifest"))?;
        slot.cell()
            .get_or_init(|| async {
                match tokio::time::timeout(START_TIMEOUT, start(&slot.decl)).await {
                    Ok(r) => r.map(Arc::new),
                    Err(_) => Err(format!(
                        "MCP server `{server}` did not finish starting within {}s",
                        START_TIMEOUT.as_secs()
                    )),
                }
            })
            .await
            .clone()
    }

    /// The server's tools (`tools/list`), fetched once.
    pub async fn tools(&self, server: &str) -> Result<Vec<Value>, String> {
        let session = self.session(server).await?;
        session
            .tools
            .get_or_init(|| async {
                let tools = session
                    .peer
                    .list_all_tools()
                    .await
                    .map_err(|e| format!("tools/list on `{server}` failed: {e}"))?;
                Ok(tools
                    .iter()
                    .filter_map(|t| serde_json::to_value(t).ok())
                    .collect())
            })
            .await
            .clone()
    }

    /// Close every session that was started (stdio servers see their stdin close and exit).
    pub async fn shutdown(&self) {
        for slot in self.slots.values() {
            if let Some(Ok(session)) = slot.cell().get() {
                session.close().await;
            }
        }
    }

    /// Between two runs of one process (`run --turns`): a server that died, or could not
    /// start, is started again on its next use. Returns the servers that will be.
    pub async fn revive(&self) -> Vec<String> {
        let mut revived = Vec::new();
        for name in self.slots.keys() {
            if self.renew(name).await {
                revived.push(name.clone());
            }
        }
        revived
    }

    /// If `server` died (or could not start), forget its session: its next use starts it
    /// again. Whether it did.
    async fn renew(&self, server: &str) -> bool {
        let Some(slot) = self.slots.get(server) else {
            return false;
        };
        let cell = slot.cell();
        let gone = match cell.get() {
            None => false,
            Some(Err(_)) => true,
            Some(Ok(s)) => s.gone(),
        };
        if !gone {
            return false;
        }
        if let Some(Ok(s)) = cell.get() {
            s.close().await;
        }
        if let Ok(mut c) = slot.session.lock() {
            // Only the session that was looked at: another caller may have renewed it already.
            if Arc::ptr_eq(&c, &cell) {
                *c = Arc::new(OnceCell::new());
            }
        }
        true
    }
}

async fn start(decl: &McpServer) -> Result<Session, String> {
    let name = &decl.name;
    let no_args = serde_json::Map::new();
    let render = |t: &crate::template::Template| {
        t.render(&no_args, &|s| s.to_string())
            .map_err(|e| format!("MCP server `{name}`: {e}"))
    };
    let stderr = Arc::new(Mutex::new(String::new()));
    // Closed when the server's stderr ends (or at once for a server without one).
    let (eof_tx, stderr_eof) = tokio::sync::watch::channel(());
    let upstream = Upstream::default();
    let mut pid = None;
    let service: Service = if let Some(argv) = &decl.command {
        let mut parts = Vec::with_capacity(argv.len());
        for t in argv {
            parts.push(render(t)?);
        }
        let Some((program, args)) = parts.split_first() else {
            return Err(format!("MCP server `{name}` has an empty command"));
        };
        // As a command tool's: `./bin/server` is the manifest's folder's, and the server runs
        // there, wherever the gateway was started (a desktop client starts it from `/`).
        let path = std::path::Path::new(program);
        let mut cmd = if path.is_relative() && path.components().count() > 1 {
            tokio::process::Command::new(decl.dir.join(path))
        } else {
            tokio::process::Command::new(program)
        };
        cmd.args(args);
        if decl.dir.is_dir() {
            cmd.current_dir(&decl.dir);
        }
        // A group of its own: it and whatever it starts die with the gateway (the reaper).
        cmd.process_group(0);
        for (k, v) in &decl.env {
            cmd.env(k, render(v)?);
        }
        let (transport, err) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start MCP server `{name}` (`{}`): {e}",
                    argv[0].redacted()
                )
            })?;
        pid = transport.id();
        if let Some(p) = pid.and_then(|p| i32::try_from(p).ok()) {
            crate::tools::reaper::watch(p);
        }
        if let Some(err) = err {
            keep_tail(err, stderr.clone(), eof_tx);
        }
        upstream.clone().serve(transport).await.map_err(|e| {
            let tail = stderr
                .lock()
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            format!(
                "MCP server `{name}` failed to initialize: {e}{}",
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its stderr: {tail}")
                }
            )
        })?
    } else if let Some(url) = &decl.url {
        let mut config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::default();
        config.uri = render(url)?.into();
        for (k, v) in &decl.headers {
            let hn = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("MCP server `{name}`: `{k}` is not a header name"))?;
            let mut hv = reqwest::header::HeaderValue::from_str(&render(v)?)
                .map_err(|_| format!("MCP server `{name}`: header `{k}` cannot be sent"))?;
            hv.set_sensitive(v.has_secret());
            config.custom_headers.insert(hn, hv);
        }
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        upstream.clone().serve(transport).await.map_err(|e| {
            format!(
                "MCP server `{name}` ({}) failed to initialize: {e}",
                url.redacted()
            )
        })?
    } else {
        return Err(format!(
            "MCP server `{name}` has neither `command` nor `url`"
        ));
    };
    let peer = service.peer().clone();
    Ok(Session {
        service: tokio::sync::Mutex::new(Some(service)),
        peer,
        progress: upstream.progress,
        stderr,
        stderr_eof,
        tools: OnceCell::new(),
        dead: std::sync::atomic::AtomicBool::new(false),
        pid,
    })
}

/// Whether our child `pid` has exited: `waitid` with `WNOWAIT` looks without reaping it (the
/// transport still waits for it); a child already reaped is gone too.
fn exited(pid: u32) -> bool {
    let id: libc::id_t = pid;
    // SAFETY: waitid fills the siginfo we own; WNOHANG never blocks, WNOWAIT reaps nothing.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        match libc::waitid(libc::P_PID, id, &mut info, flags) {
            0 => info.si_pid() != 0,
            _ => std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD),
        }
    }
}

/// Pass the server's progress on this request's token to `to`, until the task is aborted.
async fn relay_progress(
    session: &Session,
    token: rmcp::model::ProgressToken,
    to: tokio::sync::mpsc::UnboundedSender<super::Progress>,
) -> tokio::task::JoinHandle<()> {
    use futures_util::StreamExt;
    let mut sub = session.progress.subscribe(token).await;
    tokio::spawn(async move {
        while let Some(p) = sub.next().await {
            let sent = to.send(super::Progress {
                progress: p.progress,
                total: p.total,
                message: p.message,
            });
            if sent.is_err() {
                return;
            }
        }
    })
}

pub struct McpTool {
    name: String,
    server: String,
    remote: String,
    hub: Arc<McpHub>,
}

impl McpTool {
    pub fn new(tool: &Tool, server: &str, remote: &str, hub: Arc<McpHub>) -> McpTool {
        McpTool {
            name: tool.name.clone(),
            server: server.to_string(),
            remote: remote.to_string(),
            hub,
        }
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        if inv.attempt > 1 {
            // A retry after the server went away mid-call: it is started again for it.
            self.hub.renew(&self.server).await;
        }
        let session = tokio::select! {
            s = self.hub.session(&self.server) => s.map_err(|e| Failure::failed(ErrorKind::SpawnFailed, e))?,
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
        let mut params = json!({"name": self.remote, "arguments": inv.args()});
        if let Some(key) = &inv.idempotency_key {
            params["_meta"]["idempotencyKey"] = json!(key);
        }
        if let Some(tp) = inv.traceparent() {
            params["_meta"]["traceparent"] = json!(tp);
        }
        let params: CallToolRequestParams = serde_json::from_value(params).map_err(|e| {
            Failure::failed(
                ErrorKind::SpawnFailed,
                format!("cannot build tools/call: {e}"),
            )
        })?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = session
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await;
        let result = match sent {
            Ok(mut handle) => {
                let relay = inv.run.relay.as_ref().and_then(|r| r.progress.clone());
                let progress = match relay {
                    Some(to) => Some(relay_progress(&session, handle.progress_token.clone(), to).await),
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
                answer
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(ServerResult::CallToolResult(r)) => {
                let raw = serde_json::to_value(&r).unwrap_or(Value::Null);
                if let Some(relay) = &inv.run.relay {
                    relay.keep(raw.clone());
                }
                self.shape(raw)
            }
            Ok(other) => Err(Failure::failed(
                ErrorKind::McpError,
                format!(
                    "tool `{}` on MCP server `{}`: unexpected answer to tools/call: {}",
                    self.name,
                    self.server,
                    serde_json::to_string(&other).unwrap_or_default()
                ),
            )),
            Err(ServiceError::McpError(e)) => Err(Failure::failed(
                ErrorKind::McpError,
                format!(
                    "tool `{}` on MCP server `{}`: JSON-RPC error {}: {}",
                    self.name, self.server, e.code.0, e.message
                ),
            )),
            Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
                session
                    .dead
                    .store(true, std::sync::atomic::Ordering::Release);
                let tail = session.last_words().await;
                let mut why = format!("MCP server `{}` went away mid-call", self.server);
                if !tail.is_empty() {
                    why.push_str(&format!(" (its stderr: {tail})"));
                }
                Err(Failure::Lost(why))
            }
            Err(e) => Err(Failure::failed(
                ErrorKind::McpError,
                format!("tool `{}` on MCP server `{}`: {e}", self.name, self.server),
            )),
        }
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

/// Fill in the `effect` and `idempotent` of MCP tools (those the batch uses, and only where the
/// manifest is silent) from their servers' annotations, and check that each remote tool exists.
pub(crate) async fn annotate(manifest: &mut Manifest, hub: &McpHub, used: &[String]) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let file = manifest.file.clone();
    for tool in manifest.tools.iter_mut() {
        let Some(spec) = tool.kind.as_any().downcast_ref::<McpSpec>() else {
            continue;
        };
        if !used.iter().any(|u| u == &tool.name) {
            continue;
        }
        let loc = Some(file.location(tool.span.start, tool.span.end));
        let tools = match hub.tools(&spec.server).await {
            Ok(t) => t,
            Err(e) => {
                diags.push(
                    Diagnostic::error(e)
                        .at(loc)
                        .hint("check [mcp_servers] and that the server runs by hand"),
                );
                continue;
            }
        };
        let Some(remote) = tools.iter().find(|t| t["name"] == spec.tool.as_str()) else {
            let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
            diags.push(
                Diagnostic::error(format!(
                    "tool `{}`: MCP server `{}` has no tool `{}`",
                    tool.name, spec.server, spec.tool
                ))
                .at(loc)
                .maybe_hint(
                    crate::error::suggest(&spec.tool, names.iter().copied())
                        .or_else(|| Some(format!("it has: {}", names.join(", ")))),
                ),
            );
            continue;
        };
        let hints = &remote["annotations"];
        let read_only = hints["readOnlyHint"].as_bool();
        if tool.effect_origin == Origin::Default {
            if let Some(ro) = read_only {
                tool.effect = if ro { Effect::Read } else { Effect::Write };
                tool.effect_origin = Origin::Annotation;
            }
        }
        if tool.idempotent_origin == Origin::Default {
            let idem = hints["idempotentHint"]
                .as_bool()
                .or(read_only.filter(|ro| *ro));
            tool.idempotent = idem.unwrap_or(tool.effect == Effect::Read);
            if idem.is_some() {
                tool.idempotent_origin = Origin::Annotation;
            }
        }
        if tool.effect_origin == Origin::Default {
            diags.push(
                Diagnostic::warning(format!("MCP tool `{}` declares no effect (no readOnlyHint, none in the manifest); it is treated as a write", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end))),
            );
        }
        // The manifest's reader leaves these to the server's answer (see `announces_effect`).
        if let Some(why) = tool
            .cache
            .and_then(|_| crate::manifest::cache_refusal(tool.effect, tool.idempotent, false))
        {
            diags.push(
                Diagnostic::error(format!("`cache` on tool `{}`: {why} (its server's annotations say so)", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end)))
                    .hint("only a read, idempotent tool's results can be reused; remove `cache`, or declare effect = \"read\" if the server is wrong"),
            );
        }
        if tool.effect == Effect::Write
            && !tool.idempotent
            && tool.effect_origin != Origin::Manifest
        {
            diags.push(
                Diagnostic::warning(format!("write tool `{}` has no idempotency protection", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end)))
                    .hint("a call cut off in flight is reported indeterminate and never retried; declare idempotent = true if the server dedupes by the _meta idempotency key"),
            );
        }
    }
    diags
}
