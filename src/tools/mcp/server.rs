//! The run's MCP sessions: one per `[mcp_servers.NAME]`, started on first use and shared by
//! every call to it — or, for a server declared `processes = N`, a pool of up to N, each
//! started when a read finds the others busy ([`McpHub::session_for`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::manifest::McpServer;

/// How long a server may take to start and answer `initialize`.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a server's stderr is kept for messages.
const STDERR_TAIL: usize = 2048;

pub(super) type Service = RunningService<RoleClient, Upstream>;

/// What a server said changed (its notifications), for whoever follows the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Tools(String),
    Resources(String),
    Prompts(String),
    /// A resource someone subscribed to changed: its server and its own URI.
    ResourceUpdated(String, String),
}

/// Why a server did not answer what it was asked.
#[derive(Debug, Clone)]
pub(crate) enum Asked {
    /// It answered with a JSON-RPC error of its own.
    Refused(rmcp::model::ErrorData),
    /// It could not be asked (not started, gone, the answer lost).
    Failed(String),
}

/// How many changes a slow follower may fall behind before it misses some (it then learns
/// everything again).
const CHANGES: usize = 256;

/// Our side of a session: routes the server's progress notifications to the call that asked
/// (by the progress token rmcp gave its request), and its changes to the hub's followers.
#[derive(Clone)]
pub(crate) struct Upstream {
    server: String,
    progress: ProgressDispatcher,
    changes: tokio::sync::broadcast::Sender<Change>,
    /// The calls in flight on the session, with who may answer a question about each.
    pub(super) asking: Askers,
    /// The MCP revision offered in `initialize` (`protocol_version`), else rmcp's newest.
    version: Option<String>,
}

/// Answers one kind of an upstream's request (a question, a sampling request) during a call.
pub(crate) type Answerer<P, R> = Arc<
    dyn Fn(P) -> futures_util::future::BoxFuture<'static, Result<R, String>> + Send + Sync,
>;

/// The client of a call in flight on an upstream session: what of the server's requests it
/// answers (each `None` when it declared it cannot), and where the server's log messages go.
/// (Sampling and logging are deprecated from `2026-07-28` on, SEP-2577; a client of an earlier
/// version still uses them.)
#[derive(Clone)]
#[allow(deprecated)]
pub(crate) struct Asker {
    /// The client's session: the calls of one client are one client to ask.
    pub client: u64,
    pub elicit: Option<Answerer<rmcp::model::ElicitRequestParams, rmcp::model::ElicitResult>>,
    pub sample:
        Option<Answerer<rmcp::model::CreateMessageRequestParams, rmcp::model::CreateMessageResult>>,
    pub log: Option<Arc<dyn Fn(rmcp::model::LoggingMessageNotificationParam) + Send + Sync>>,
}

/// The calls in flight on a session (by a number of their own), each with its asker.
#[derive(Clone, Default)]
pub(super) struct Askers(Arc<Mutex<InFlight>>);

/// The last number given, and each call in flight by its number.
type InFlight = (u64, Vec<(u64, Option<Asker>)>);

impl Askers {
    /// A call is in flight until the guard drops.
    pub(super) fn enter(&self, asker: Option<Asker>) -> AskerGuard {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        let id = g.0;
        g.1.push((id, asker));
        AskerGuard(self.clone(), id)
    }

    /// Pass a server's log message (its line) to the client of the calls in flight.
    #[allow(deprecated)]
    pub(super) fn log(&self, line: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Note {
            params: rmcp::model::LoggingMessageNotificationParam,
        }
        let Ok(note) = serde_json::from_slice::<Note>(line) else {
            return;
        };
        if let Some(log) = self.one().ok().and_then(|c| c.log) {
            log(note.params);
        }
    }

    /// How many calls are in flight.
    pub(super) fn len(&self) -> usize {
        self.0.lock().map_or(0, |g| g.1.len())
    }

    /// Who to ask: the client of the calls in flight, when they are all one client's (a
    /// server's request does not say which call it is about). With none, or calls of several
    /// clients, nobody.
    fn one(&self) -> Result<Asker, String> {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut clients = g.1.iter().map(|(_, a)| a.as_ref());
        let Some(first) = clients.next() else {
            return Err("no call is in flight to ask about".into());
        };
        let Some(first) = first else {
            return Err("the client that made this call cannot be asked (it declared no elicitation or sampling capability)".into());
        };
        if clients.any(|a| a.is_none_or(|a| a.client != first.client)) {
            let n = g.1.len();
            return Err(format!("{n} calls of different clients are in flight on this server: the gateway cannot tell which client to ask"));
        }
        Ok(first.clone())
    }
}

/// Takes its call off [`Askers`] when dropped.
pub(super) struct AskerGuard(Askers, u64);

impl Drop for AskerGuard {
    fn drop(&mut self) {
        let mut g = (self.0).0.lock().unwrap_or_else(|e| e.into_inner());
        g.1.retain(|(id, _)| *id != self.1);
    }
}

impl Upstream {
    fn tell(&self, change: fn(String) -> Change) {
        let _ = self.changes.send(change(self.server.clone()));
    }

    /// Pass a request of the server's on to the client of the call in flight, by what
    /// `answers` takes of it (`cannot`: why, when the client cannot answer it).
    async fn relay<P, R>(
        &self,
        answers: fn(Asker) -> Option<Answerer<P, R>>,
        cannot: &str,
        request: P,
    ) -> Result<R, rmcp::ErrorData> {
        let refused = |why: String| {
            rmcp::ErrorData::invalid_request(format!("flux-tools gateway: {why}"), None)
        };
        let client = self.asking.one().map_err(refused)?;
        let answer = answers(client).ok_or_else(|| refused(cannot.into()))?;
        answer(request).await.map_err(refused)
    }
}

impl rmcp::ClientHandler for Upstream {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        self.tell(Change::Tools);
    }

    async fn on_resource_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        self.tell(Change::Resources);
    }

    async fn on_prompt_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        self.tell(Change::Prompts);
    }

    /// A question from the server during a call goes to that call's client.
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let why = "the client that made this call cannot be asked (it declared no elicitation capability)";
        self.relay(|c| c.elicit, why, request).await
    }

    /// A sampling request from the server during a call goes to that call's client.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let why = "the client that made this call cannot sample (it declared no sampling capability)";
        self.relay(|c| c.sample, why, request).await
    }

    /// A log message from the server during a call goes to that call's client, when it asked
    /// for log messages (`logging/setLevel`) at that level or below.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Some(log) = self.asking.one().ok().and_then(|c| c.log) {
            log(params);
        }
    }

    /// It may ask questions (elicitation, both modes) and sample: a call's client answers.
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps = serde_json::json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}});
        let mut info = rmcp::model::ClientConfig::default();
        if let Ok(c) = serde_json::from_value(caps) {
            info.capabilities = c;
        }
        info.client_info = rmcp::model::Implementation::new("flux-tools", env!("CARGO_PKG_VERSION"));
        if let Some(Ok(v)) = self.version.as_ref().map(|v| serde_json::from_value(Value::from(v.as_str()))) {
            info.protocol_version = v;
        }
        info
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let change = Change::ResourceUpdated(self.server.clone(), params.uri.clone());
        let _ = self.changes.send(change);
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
    pub(super) peer: rmcp::service::Peer<RoleClient>,
    progress: ProgressDispatcher,
    stderr: Arc<Mutex<String>>,
    /// Its sender is dropped when the server's stderr reaches its end.
    stderr_eof: tokio::sync::watch::Receiver<()>,
    /// `tools/list`, as JSON (name, description, inputSchema, annotations).
    /// Forgotten when the server says its list changed.
    tools: Mutex<Option<Vec<Value>>>,
    /// Set when a call saw the transport close: later calls fail at once, unsent.
    pub(super) dead: std::sync::atomic::AtomicBool,
    /// Its calls in flight, for a question the server asks.
    pub(super) asking: Askers,
    /// A stdio server's process id: its exit is seen as soon as it happens.
    pid: Option<u32>,
    /// A stdio server's requests that skip rmcp's service loop.
    direct: Option<Arc<super::lines::Direct>>,
    /// The tokens of a server with `auth`: why it refused a request, when it did.
    pub(super) auth: Option<Arc<super::oauth::Tokens>>,
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
    pub(super) fn gone(&self) -> bool {
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
    /// Its requests that skip rmcp's service loop (a stdio server's).
    pub(super) fn direct(&self) -> Option<&super::lines::Direct> {
        self.direct.as_deref()
    }

    pub(super) async fn last_words(&self) -> String {
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
pub(super) type Cell = Arc<OnceCell<Result<Arc<Session>, String>>>;

pub(super) struct Slot {
    pub(super) decl: McpServer,
    /// Its processes' sessions (one unless `processes = N`); the first answers all but reads.
    sessions: Vec<Mutex<Cell>>,
    /// The process the next read goes to when none is idle.
    next: std::sync::atomic::AtomicUsize,
}

impl Slot {
    fn cell(&self, i: usize) -> Cell {
        let Some(m) = self.sessions.get(i) else {
            return Arc::new(OnceCell::new());
        };
        m.lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// The run's MCP sessions.
pub struct McpHub {
    pub(super) slots: BTreeMap<String, Slot>,
    /// The sessions of each caller of a server with `identity = "caller"` (a gateway's).
    pub(super) callers: Mutex<std::collections::HashMap<(String, String), Cell>>,
    /// What the servers say changed.
    pub(super) changes: tokio::sync::broadcast::Sender<Change>,
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
                            sessions: (0..d.processes.max(1))
                                .map(|_| Mutex::new(Arc::new(OnceCell::new())))
                                .collect(),
                            next: Default::default(),
                        },
                    )
                })
                .collect(),
            callers: Mutex::default(),
            changes: tokio::sync::broadcast::Sender::new(CHANGES),
        })
    }

    /// What the servers say changed, from now on.
    pub(crate) fn changes(&self) -> tokio::sync::broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Send `request` to `server` (started on first use) and wait for its answer.
    pub(crate) async fn ask(
        &self,
        server: &str,
        request: rmcp::model::ClientRequest,
    ) -> Result<rmcp::model::ServerResult, Asked> {
        let session = self.session(server).await.map_err(Asked::Failed)?;
        session
            .peer
            .send_request(request)
            .await
            .map_err(|e| match e {
                rmcp::ServiceError::McpError(e) => Asked::Refused(e),
                e => Asked::Failed(format!("MCP server `{server}`: {e}")),
            })
    }

    /// What `server` said it can do when it started (`None`: it has not started).
    pub(crate) async fn capabilities(
        &self,
        server: &str,
    ) -> Option<rmcp::model::ServerCapabilities> {
        let session = self.session(server).await.ok()?;
        session.peer.peer_info().map(|i| i.capabilities.clone())
    }

    /// Forget `server`'s tools (it said its list changed): the next look asks it again.
    pub(crate) fn forget_tools(&self, server: &str) {
        if let Some(Ok(session)) = self.slots.get(server).and_then(|s| s.cell(0).get().cloned()) {
            if let Ok(mut t) = session.tools.lock() {
                *t = None;
            }
        }
    }

    /// The session for `server` (its first process), starting it on first use.
    pub async fn session(&self, server: &str) -> Result<Arc<Session>, String> {
        self.session_at(server, 0).await
    }

    /// The session a call goes to: a read of a server with `processes = N` goes to a started
    /// process with nothing in flight, else to one not started yet (started for it: the pool
    /// grows under load), else to the next of the N in turn; everything else to the first.
    pub(crate) async fn session_for(&self, server: &str, read: bool) -> Result<Arc<Session>, String> {
        let slot = self.slots.get(server);
        let n = slot.map_or(1, |s| s.sessions.len());
        let (Some(slot), true, true) = (slot, read, n > 1) else {
            return self.session_at(server, 0).await;
        };
        for i in 0..n {
            if let Some(Ok(s)) = slot.cell(i).get() {
                if !s.gone() && s.asking.len() == 0 {
                    return Ok(s.clone());
                }
            }
        }
        // In turn from the next, the first not started (or starting); else the next.
        let first = slot.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % n;
        let unstarted = (0..n)
            .map(|k| (first + k) % n)
            .find(|i| slot.cell(*i).get().is_none());
        self.session_at(server, unstarted.unwrap_or(first)).await
    }

    /// The session of `server`'s process `i`, starting it on first use.
    async fn session_at(&self, server: &str, i: usize) -> Result<Arc<Session>, String> {
        let slot = self
            .slots
            .get(server)
            .ok_or_else(|| format!("no MCP server `{server}` in the manifest"))?;
        slot.cell(i)
            .get_or_init(|| async {
                match tokio::time::timeout(START_TIMEOUT, start(&slot.decl, self.changes.clone(), None)).await {
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

    /// The server's tools (`tools/list`), fetched once (and again after it says they
    /// changed).
    pub async fn tools(&self, server: &str) -> Result<Vec<Value>, String> {
        let session = self.session(server).await?;
        if let Some(t) = session.tools.lock().ok().and_then(|t| t.clone()) {
            return Ok(t);
        }
        let tools = match session.direct() {
            // Over stdio the list as the server wrote it: rmcp's `Tool` drops what it does not
            // know (a 2025-11-25 tool's `execution`).
            Some(direct) => raw_tools(direct, server).await?,
            None => {
                let tools = (session.peer.list_all_tools().await)
                    .map_err(|e| format!("tools/list on `{server}` failed: {e}"))?;
                (tools.iter())
                    .filter_map(|t| serde_json::to_value(t).ok())
                    .collect()
            }
        };
        if let Ok(mut t) = session.tools.lock() {
            *t = Some(tools.clone());
        }
        Ok(tools)
    }

    /// Close every session that was started (stdio servers see their stdin close and exit).
    pub async fn shutdown(&self) {
        let callers: Vec<Cell> = self.callers.lock().map(|mut c| c.drain().map(|(_, c)| c).collect()).unwrap_or_default();
        for cell in callers {
            if let Some(Ok(session)) = cell.get() {
                session.close().await;
            }
        }
        for slot in self.slots.values() {
            for i in 0..slot.sessions.len() {
                if let Some(Ok(session)) = slot.cell(i).get() {
                    session.close().await;
                }
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

    /// If `server`'s processes died (or could not start), forget their sessions: the next
    /// use starts them again. Whether any was.
    pub(crate) async fn renew(&self, server: &str) -> bool {
        let n = self.slots.get(server).map_or(0, |s| s.sessions.len());
        let mut any = false;
        for i in 0..n {
            any |= self.renew_at(server, i).await;
        }
        any
    }

    async fn renew_at(&self, server: &str, i: usize) -> bool {
        let Some(slot) = self.slots.get(server) else {
            return false;
        };
        let cell = slot.cell(i);
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
        if let Some(Ok(mut c)) = slot.sessions.get(i).map(Mutex::lock) {
            // Only the session that was looked at: another caller may have renewed it already.
            if Arc::ptr_eq(&c, &cell) {
                *c = Arc::new(OnceCell::new());
            }
        }
        true
    }
}

pub(super) async fn start(
    decl: &McpServer,
    changes: tokio::sync::broadcast::Sender<Change>,
    caller: Option<&crate::tools::Behalf>,
) -> Result<Session, String> {
    let name = &decl.name;
    let no_args = serde_json::Map::new();
    let render = |t: &crate::template::Template| {
        t.render(&no_args, &|s| s.to_string())
            .map_err(|e| format!("MCP server `{name}`: {e}"))
    };
    let stderr = Arc::new(Mutex::new(String::new()));
    // Closed when the server's stderr ends (or at once for a server without one).
    let (eof_tx, stderr_eof) = tokio::sync::watch::channel(());
    let upstream = Upstream {
        server: name.clone(),
        progress: ProgressDispatcher::default(),
        changes,
        asking: Askers::default(),
        version: decl.protocol_version.clone(),
    };
    let (mut pid, mut direct, mut auth) = (None, None, None);
    let service: Service = if let Some(argv) = &decl.command {
        let cmd = command(decl, argv, &render)?;
        let (transport, id, err) = super::lines::Lines::spawn(cmd).map_err(|e| {
            format!(
                "cannot start MCP server `{name}` (`{}`): {e}",
                argv[0].redacted()
            )
        })?;
        pid = id;
        let d = transport.direct();
        // Its log messages are read in wire order, while the call they came during is in flight.
        let asking = upstream.asking.clone();
        let _ = d.logs.set(Box::new(move |line| asking.log(line)));
        direct = Some(d);
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
        let (service, tokens) = super::http::serve(decl, url, &upstream, &render, caller).await?;
        auth = tokens;
        service
    } else {
        return Err(format!(
            "MCP server `{name}` has neither `command` nor `url`"
        ));
    };
    let peer = service.peer().clone();
    // The lists are kept here (`Session::tools`, forgotten on `list_changed`); rmcp's own cache
    // would answer a failed re-list with the stale list, in silence.
    peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    Ok(Session {
        service: tokio::sync::Mutex::new(Some(service)),
        peer,
        progress: upstream.progress,
        asking: upstream.asking,
        stderr,
        stderr_eof,
        tools: Mutex::new(None),
        dead: std::sync::atomic::AtomicBool::new(false),
        pid,
        direct,
        auth,
    })
}

/// The command that starts stdio server `decl` (`argv` its `command`).
fn command(
    decl: &McpServer,
    argv: &[crate::template::Template],
    render: &dyn Fn(&crate::template::Template) -> Result<String, String>,
) -> Result<tokio::process::Command, String> {
    let name = &decl.name;
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
    Ok(cmd)
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
pub(super) async fn relay_progress(
    session: &Session,
    token: rmcp::model::ProgressToken,
    to: tokio::sync::mpsc::UnboundedSender<crate::tools::Progress>,
) -> tokio::task::JoinHandle<()> {
    use futures_util::StreamExt;
    let mut sub = session.progress.subscribe(token).await;
    tokio::spawn(async move {
        while let Some(p) = sub.next().await {
            let sent = to.send(crate::tools::Progress {
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

/// Every page of a stdio server's `tools/list`, each tool as the server wrote it (at most
/// 1,000 pages).
async fn raw_tools(direct: &super::lines::Direct, server: &str) -> Result<Vec<Value>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..1000 {
        let params = match cursor.take() {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let page = (direct.request("tools/list", params, None).await)
            .map_err(|e| format!("tools/list on `{server}` failed: {e:?}"))?;
        if let Some(list) = page["tools"].as_array() {
            tools.extend(list.iter().cloned());
        }
        match &page["nextCursor"] {
            Value::String(c) if !c.is_empty() => cursor = Some(c.clone().into()),
            _ => break,
        }
    }
    Ok(tools)
}
