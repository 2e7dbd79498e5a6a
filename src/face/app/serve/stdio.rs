//! The stdio face's wire: newline-delimited JSON-RPC on stdin and stdout, read and written
//! here rather than by rmcp's codec so that what a careless or hostile client sends is
//! answered as JSON-RPC says. A line that is not JSON gets `-32700` (id `null`), a batch array
//! or a message of no known shape `-32600`, a `tools/call` whose params are not
//! `{name, arguments?}` `-32602` with its id; a line longer than [`MAX_LINE`] is skipped to its
//! end and refused `-32600`. Each `tools/call` is numbered as it is read ([`Arrival`]), so
//! its session's calls take their places in the order they came; a call the client cancelled
//! gets no response (the specification's "SHOULD NOT"). Its [`Outbox`] tells the face when
//! every request read has been answered and every line written, so a gateway that stops on a
//! signal closes the wire only after the answers of the calls it let finish.
//!
//! A plain `tools/call` of a client that takes no tasks (and, in a `2026-07-28` session,
//! cannot be asked in its follow-up request) is answered by the wire itself ([`Shortcut`], the short way of
//! [`super::fast`]), not through rmcp's service loop and handler; everything else is rmcp's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcRequest,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::caller::Caller;
use super::entry::Short;
use super::fault::Fault;
use super::gateway::{Gateway, Session};
use super::order::{Pass, Turnstile};

/// The longest line read (as the HTTP face's body limit).
pub(super) const MAX_LINE: usize = 4 * 1024 * 1024;

/// A `tools/call`'s place on its session's wire (a request extension).
#[derive(Clone)]
pub(super) struct Arrival(pub Arc<Pass>);

/// What one line is: a message for rmcp, or an answer the wire gives itself.
#[derive(Debug)]
pub enum Line {
    Message(Box<ClientJsonRpcMessage>),
    /// A JSON-RPC error to write back (the request never reaches rmcp).
    Refused(Vec<u8>),
    /// Nothing to do (a blank line).
    Skip,
}

/// A JSON-RPC error response, `id` as given (`null` when it could not be read).
pub(super) fn error(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let v = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Classify one line as the client sent it.
pub fn read_line(line: &[u8]) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Skip;
    }
    if let Some(call) = call_request(line) {
        return Line::Message(Box::new(call));
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Line::Refused(Fault::Parse(e.to_string()).line(&Value::Null)),
    };
    let Value::Object(msg) = &value else {
        let why = if value.is_array() {
            "batches are not supported; send one message a line"
        } else {
            "a message is a JSON object"
        };
        return Line::Refused(Fault::Request(why.into()).line(&Value::Null));
    };
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    if msg.get("method").and_then(Value::as_str) == Some("tools/call") {
        if let Err(why) = call_params(msg.get("params")) {
            return Line::Refused(Fault::Params(why).line(&id));
        }
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(ClientJsonRpcMessage::Request(r)) => match &r.request {
            // A method rmcp models whose params it could not read: rmcp would take it for a
            // method of its own (`-32601`); it is the params that are wrong.
            ClientRequest::CustomRequest(c) if MODELED.contains(&c.method.as_str()) => {
                let why = format!("`{}` takes other params (see its schema)", c.method);
                Line::Refused(Fault::Params(why).line(&id))
            }
            _ => Line::Message(Box::new(ClientJsonRpcMessage::Request(r))),
        },
        Ok(m) => Line::Message(Box::new(m)),
        Err(e) => Line::Refused(Fault::Request(e.to_string()).line(&id)),
    }
}

/// The methods a client sends that rmcp reads into types of their own.
const MODELED: &[&str] = &[
    "initialize",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/cancel",
    "tasks/update",
    "server/discover",
    "subscriptions/listen",
];

/// A `tools/call` request read as one, straight from its line: rmcp's own reading of a message
/// tries it as each kind of message and each request in turn, a formatted serde error a miss
/// (`benches/README.md`). The types hold what [`call_params`] checks (a string `name`, an
/// object or no `arguments` and `_meta`). `None`: not plainly a call (no `id`, a `result` or
/// `error` anywhere in it, params of another shape) — left to the reading that names what is
/// wrong.
fn call_request(line: &[u8]) -> Option<ClientJsonRpcMessage> {
    let has = |key: &[u8]| line.windows(key.len()).any(|w| w == key);
    if !has(b"\"tools/call\"") || has(b"\"result\"") || has(b"\"error\"") {
        return None;
    }
    let r: JsonRpcRequest<CallToolRequest> = serde_json::from_slice(line).ok()?;
    Some(ClientJsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc: r.jsonrpc,
        id: r.id,
        request: ClientRequest::CallToolRequest(r.request),
    }))
}

/// Whether `tools/call` params are `{name: string, arguments?: object, _meta?: object}`.
pub(super) fn call_params(params: Option<&Value>) -> Result<(), String> {
    let Some(Value::Object(p)) = params else {
        return Err("tools/call takes params {\"name\": …, \"arguments\": {…}}".into());
    };
    match p.get("name") {
        Some(Value::String(_)) => {}
        Some(_) => return Err("`name` is not a string".into()),
        None => return Err("`name` is missing".into()),
    }
    if !matches!(
        p.get("arguments"),
        None | Some(Value::Null | Value::Object(_))
    ) {
        return Err("`arguments` is not an object".into());
    }
    if !matches!(p.get("_meta"), None | Some(Value::Object(_))) {
        return Err("`_meta` is not an object".into());
    }
    Ok(())
}

/// The key a request id is remembered by.
fn key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// Requests in flight, those of them the client cancelled (whose responses are dropped), and
/// how to cancel those the wire answers itself.
#[derive(Default)]
struct Calls {
    inflight: HashSet<String>,
    cancelled: HashSet<String>,
    short: HashMap<String, CancellationToken>,
}

/// Where a wire's lines go: its writer, and the requests in flight they answer.
#[derive(Clone)]
pub(super) struct Sink {
    out: mpsc::UnboundedSender<Vec<u8>>,
    calls: Arc<Mutex<Calls>>,
    answered: Arc<Notify>,
}

impl Sink {
    /// Write a line that answers no request (a notification, an error of no request).
    pub(super) fn say(&self, line: Vec<u8>) -> Result<(), Closed> {
        self.out.send(line).map_err(|_| Closed)
    }

    /// Write the answer to request `key`: dropped if the client cancelled it; the face is told
    /// when it was the last in flight.
    pub(super) fn answer(&self, key: &str, line: impl FnOnce() -> Vec<u8>) -> Result<(), Closed> {
        let (mut drop_it, mut last) = (false, false);
        if let Ok(mut calls) = self.calls.lock() {
            calls.short.remove(key);
            last = calls.inflight.remove(key) && calls.inflight.is_empty();
            drop_it = calls.cancelled.remove(key);
        }
        let sent = if drop_it { Ok(()) } else { self.say(line()) };
        if last {
            self.answered.notify_waiters();
        }
        sent
    }
}

/// What a wire needs to answer a plain call itself: its gateway, session and caller.
pub(super) struct Shortcut {
    pub gateway: Arc<Gateway>,
    pub session: Arc<Session>,
    pub caller: Caller,
}

/// What the face waits on before it closes a wire: every request read answered, and every
/// line written.
pub(super) struct Outbox {
    calls: Arc<Mutex<Calls>>,
    /// Woken when the last request in flight is answered.
    answered: Arc<Notify>,
    writer: JoinHandle<()>,
}

impl Outbox {
    fn idle(&self) -> bool {
        self.calls.lock().map_or(true, |c| c.inflight.is_empty())
    }

    /// Wait until every request read has been answered, or `within` has passed.
    pub(super) async fn answered_within(&self, within: Duration) {
        let until = tokio::time::Instant::now() + within;
        loop {
            let answered = self.answered.notified();
            if self.idle() || tokio::time::timeout_at(until, answered).await.is_err() {
                return;
            }
        }
    }

    /// Wait, at most `within`, until the wire is gone and every line it was given is written.
    pub(super) async fn written_within(self, within: Duration) {
        let _ = tokio::time::timeout(within, self.writer).await;
    }
}

/// The stdio transport of one session.
pub(super) struct Wire<R> {
    lines: BufReader<R>,
    sink: Sink,
    turnstile: Arc<Turnstile>,
    /// The short way, once the client's `initialize` showed it may take it.
    short: Option<Arc<Shortcut>>,
    /// Whether the client's calls may go the short way: `Some(modern)`, `modern` a
    /// `2026-07-28` client (whose answers carry `resultType`).
    plain: Option<bool>,
    declared: Option<Declared>,
    /// Cancelled at the end of input: the client is gone.
    gone: CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin + Send> Wire<R> {
    /// Read from `input`, write through a task of its own to `output` (one message a line, in
    /// the order sent); calls take passes of `turnstile`.
    pub(super) fn new<W: AsyncWrite + Unpin + Send + 'static>(
        input: R,
        output: W,
        (turnstile, gone): (Arc<Turnstile>, CancellationToken),
    ) -> (Wire<R>, Outbox) {
        let (out, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(async move {
            let mut output = output;
            while let Some(mut line) = rx.recv().await {
                line.push(b'\n');
                if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                    return;
                }
            }
        });
        let (calls, answered) = (Arc::<Mutex<Calls>>::default(), Arc::new(Notify::new()));
        let outbox = Outbox {
            calls: calls.clone(),
            answered: answered.clone(),
            writer,
        };
        let wire = Wire {
            lines: BufReader::with_capacity(64 * 1024, input),
            sink: Sink {
                out,
                calls,
                answered,
            },
            turnstile,
            short: None,
            plain: None,
            declared: None,
            gone,
        };
        (wire, outbox)
    }

    /// Answer plain calls on this wire itself.
    pub(super) fn answering(mut self, short: Shortcut) -> Wire<R> {
        self.short = Some(Arc::new(short));
        self
    }

    /// The next line, at most [`MAX_LINE`] bytes (`Err(())`: it was longer and was skipped to
    /// its end); `None` at the end of input.
    async fn next_line(&mut self) -> Option<Result<Vec<u8>, ()>> {
        let mut line = Vec::new();
        let mut too_long = false;
        loop {
            let buf = match self.lines.fill_buf().await {
                Ok(b) => b,
                Err(_) => return None,
            };
            if buf.is_empty() {
                return (!line.is_empty() || too_long).then_some(if too_long {
                    Err(())
                } else {
                    Ok(line)
                });
            }
            let (chunk, end) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !too_long && line.len() + chunk.len() <= MAX_LINE {
                line.extend_from_slice(chunk);
            } else {
                too_long = true;
                line = Vec::new();
            }
            let used = end.unwrap_or(buf.len());
            self.lines.consume(used);
            if end.is_some() {
                return Some(if too_long { Err(()) } else { Ok(line) });
            }
        }
    }

    /// Number a call, remember a request, note a cancellation (and cancel a call of the short
    /// way), learn from `initialize` whether the short way may be taken.
    fn note(&mut self, msg: &mut ClientJsonRpcMessage) {
        let Ok(mut calls) = self.sink.calls.lock() else {
            return;
        };
        match msg {
            ClientJsonRpcMessage::Request(r) => {
                calls.inflight.insert(key(&r.id));
                match &mut r.request {
                    // A call and a resource read take their places in the wire's order.
                    ClientRequest::CallToolRequest(call) => {
                        let pass = Arc::new(self.turnstile.pass());
                        call.extensions.insert(Arrival(pass));
                    }
                    ClientRequest::ReadResourceRequest(read) => {
                        let pass = Arc::new(self.turnstile.pass());
                        read.extensions.insert(Arrival(pass));
                    }
                    ClientRequest::InitializeRequest(init) => {
                        let caps = &init.params.capabilities;
                        self.declared = Some(Declared {
                            tasks: caps.supports_tasks(),
                            elicits: caps.elicitation.is_some(),
                        });
                    }
                    _ => {}
                }
            }
            ClientJsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        let k = key(id);
                        if calls.inflight.contains(&k) {
                            if let Some(token) = calls.short.get(&k) {
                                token.cancel();
                            }
                            calls.cancelled.insert(k);
                        }
                    }
                }
            }
            ClientJsonRpcMessage::Response(_) | ClientJsonRpcMessage::Error(_) => {}
        }
    }

    /// Take `msg` the short way if it is a plain call the wire may answer itself (`None`:
    /// taken), else give it back for rmcp.
    fn short_way(&self, msg: Box<ClientJsonRpcMessage>) -> Option<Box<ClientJsonRpcMessage>> {
        let (Some(short), Some(modern)) = (self.short.as_ref(), self.plain) else {
            return Some(msg);
        };
        let Some(Short::Call(call)) = super::entry::short(&msg) else {
            return Some(msg);
        };
        if short.gateway.may_ask_client(&short.session, &call.name) {
            return Some(msg);
        }
        let arrival = match &*msg {
            ClientJsonRpcMessage::Request(r) => match &r.request {
                ClientRequest::CallToolRequest(c) => {
                    c.extensions.get::<Arrival>().map(|a| a.0.clone())
                }
                _ => None,
            },
            _ => None,
        };
        let key = serde_json::to_string(&call.id).unwrap_or_default();
        let cancel = CancellationToken::new();
        if let Ok(mut calls) = self.sink.calls.lock() {
            calls.short.insert(key.clone(), cancel.clone());
        }
        let on = (self.sink.clone(), key, self.gone.clone());
        tokio::spawn(super::fast::on_a_wire(
            short.clone(),
            (*call, modern),
            (arrival, cancel),
            on,
        ));
        None
    }
}

/// What a client's `initialize` said of it that the short way needs: whether it takes tasks
/// (a call that parks would become one) and whether it declared elicitation (at
/// `2026-07-28` it could be asked to approve in its follow-up request).
#[derive(Clone, Copy)]
struct Declared {
    tasks: bool,
    elicits: bool,
}

/// Whether a client's calls may go the short way (`Some(modern)`), by what it declared and
/// the protocol its session speaks (the gateway's answer to its `initialize`).
fn plain(declared: Declared, version: &rmcp::model::ProtocolVersion) -> Option<bool> {
    use rmcp::model::ProtocolVersion as V;
    let legacy = [
        V::V_2024_11_05,
        V::V_2025_03_26,
        V::V_2025_06_18,
        V::V_2025_11_25,
    ];
    if declared.tasks {
        return None;
    }
    if legacy.contains(version) {
        return Some(false);
    }
    (*version == V::V_2026_07_28 && !declared.elicits).then_some(true)
}

/// Why the wire failed (its writer is gone).
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub(super) struct Closed;

impl<R: tokio::io::AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for Wire<R> {
    type Error = Closed;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Closed>> + Send + 'static {
        let answered = match &item {
            ServerJsonRpcMessage::Response(r) => {
                if let (ServerResult::InitializeResult(init), Some(declared)) =
                    (&r.result, self.declared)
                {
                    self.plain = plain(declared, &init.protocol_version);
                }
                Some(key(&r.id))
            }
            ServerJsonRpcMessage::Error(e) => e.id.as_ref().map(key),
            _ => None,
        };
        let line = || serde_json::to_vec(&item).unwrap_or_default();
        let sent = match answered {
            Some(k) => self.sink.answer(&k, line),
            None => self.sink.say(line()),
        };
        std::future::ready(sent)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let Some(line) = self.next_line().await else {
                self.gone.cancel();
                return None;
            };
            let line = match line {
                Ok(l) => l,
                Err(()) => {
                    let why = format!("a message longer than {MAX_LINE} bytes");
                    let _ = self.sink.say(Fault::Request(why).line(&Value::Null));
                    continue;
                }
            };
            match read_line(&line) {
                Line::Skip => {}
                Line::Refused(answer) => {
                    let _ = self.sink.say(answer);
                }
                Line::Message(mut m) => {
                    self.note(&mut m);
                    if let Some(m) = self.short_way(m) {
                        return Some(*m);
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Closed> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &str) -> Value {
        match read_line(line.as_bytes()) {
            Line::Refused(b) => serde_json::from_slice(&b).expect("an error is JSON"),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn each_kind_of_bad_line_gets_its_json_rpc_code() {
        let e = refused("{not json");
        assert_eq!(
            (e["id"].clone(), e["error"]["code"].clone()),
            (Value::Null, (-32700).into())
        );
        assert_eq!(refused("[1, 2]")["error"]["code"], -32600);
        assert_eq!(refused("17")["error"]["code"], -32600);
        let e =
            refused(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":{}}}"#);
        assert_eq!(
            (e["id"].clone(), e["error"]["code"].clone()),
            (4.into(), (-32602).into())
        );
        let e = refused(
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"a","arguments":[1]}}"#,
        );
        assert_eq!(e["error"]["code"], -32602);
        assert!(matches!(read_line(b"  "), Line::Skip));
        let ok = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}}"#;
        assert!(matches!(read_line(ok.as_bytes()), Line::Message(_)));
    }

    #[test]
    fn a_call_read_as_one_is_what_rmcps_reading_makes_of_it() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}}"#,
            r#"{"id":"s-1","jsonrpc":"2.0","params":{"arguments":{"x":[1,{"y":null}]},"name":"b"},"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"c","_meta":{"progressToken":"p","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","idempotencyKey":"k"}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"d","task":{"ttl":1000},"extra":true},"other":1}"#,
        ];
        for line in lines {
            let fast = call_request(line.as_bytes()).expect("read as a call");
            let slow: ClientJsonRpcMessage = serde_json::from_str(line).expect("rmcp reads it");
            assert_eq!(
                serde_json::to_value(&fast).expect("it serializes"),
                serde_json::to_value(&slow).expect("it serializes"),
                "{line}"
            );
        }
        // Not a request's shape, or not JSON-RPC 2.0: left to rmcp's reading (which refuses).
        for line in [
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"tools/call"}}"#,
        ] {
            assert!(call_request(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_skipped_and_the_next_is_read() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(
            b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
        );
        let (out, _keep) = tokio::io::duplex(1 << 20);
        let (mut wire, _outbox) = Wire::new(std::io::Cursor::new(input), out, Default::default());
        assert!(matches!(wire.next_line().await, Some(Err(()))));
        let next = wire
            .next_line()
            .await
            .expect("a line")
            .expect("within the limit");
        assert!(next.starts_with(b"{\"jsonrpc\""));
        assert!(wire.next_line().await.is_none());
    }
}
