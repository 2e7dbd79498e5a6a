//! The stdio face's wire: newline-delimited JSON-RPC on stdin and stdout, read and written
//! here rather than by rmcp's codec so that what a careless or hostile client sends is
//! answered as JSON-RPC says: each line is classified by the entry ([`super::entry::stdio_line`]:
//! `-32700`, `-32600`, `-32602` with the id when it can be read); a line longer than
//! [`MAX_LINE`] is skipped to its end and refused `-32600`. Each `tools/call` and
//! `resources/read` (and each other read of a whole server: `prompts/get`,
//! `completion/complete`, `resources/subscribe`) is numbered as it is read ([`super::order::Arrival`]), so its session's
//! calls and reads take their places in the order they came; a call the client cancelled gets
//! no response (the specification's "SHOULD NOT"). Its [`Outbox`] tells the face when every
//! request read has been answered and every line written, so a gateway that stops on a signal
//! closes the wire only after the answers of the calls it let finish.
//!
//! A plain `tools/call` of a client that takes no tasks (and, in a `2026-07-28` session,
//! cannot be asked in its follow-up request) is answered by the wire itself ([`Shortcut`]),
//! not through rmcp's service loop and handler; everything else is rmcp's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::caller::Caller;
use super::entry::{stdio_line, Line, Short};
use super::fault::Fault;
use super::gateway::{Gateway, Session};
use super::order::{Arrival, Turnstile};

/// The longest line read (as the HTTP face's body limit).
pub(super) const MAX_LINE: usize = 4 * 1024 * 1024;

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

    /// Give a request its place in the wire's order ([`Arrival`]).
    fn stamp(&self, extensions: &mut rmcp::model::Extensions) {
        extensions.insert(Arrival(Arc::new(self.turnstile.pass())));
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
                    // A call and every read of a whole server take their places in the
                    // wire's order.
                    ClientRequest::CallToolRequest(r) => self.stamp(&mut r.extensions),
                    ClientRequest::ReadResourceRequest(r) => self.stamp(&mut r.extensions),
                    ClientRequest::GetPromptRequest(r) => self.stamp(&mut r.extensions),
                    ClientRequest::CompleteRequest(r) => self.stamp(&mut r.extensions),
                    ClientRequest::SubscribeRequest(r) => self.stamp(&mut r.extensions),
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
        tokio::spawn(on_a_wire(
            short.clone(),
            (*call, modern),
            (arrival, cancel),
            on,
        ));
        None
    }
}

/// Run a plain call read from a stdio wire and write its answer there (`modern`: to a
/// `2026-07-28` client, whose result says `resultType`). `cancel` is the
/// client's (`notifications/cancelled`); the end of the client's input (`gone`) cancels it
/// too, and it is still driven to its end.
async fn on_a_wire(
    short: Arc<Shortcut>,
    (call, modern): (super::entry::Call, bool),
    (arrival, cancel): (Option<Arc<super::order::Pass>>, CancellationToken),
    (sink, key, gone): (Sink, String, CancellationToken),
) {
    let super::entry::Call {
        id,
        name,
        args,
        progress,
        traceparent,
    } = call;
    let progress: Option<super::progress::ProgressSink> = progress.map(|token| {
        let sink = sink.clone();
        Arc::new(move |p| {
            if let Some(line) = super::answer::progress_message(&token, p) {
                let _ = sink.say(line);
            }
        }) as super::progress::ProgressSink
    });
    let cx = super::gateway::CallCx {
        traceparent: traceparent.map(Box::from),
        progress,
        arrival,
        ..super::gateway::CallCx::new(short.caller.clone(), cancel.clone())
    };
    let target = super::gateway::Target::Tool(&name);
    let mut run = Box::pin(short.gateway.call(&short.session, target, args, cx));
    let r = tokio::select! {
        biased;
        r = &mut run => r,
        () = gone.cancelled() => {
            cancel.cancel();
            run.await
        }
    };
    let _ = sink.answer(&key, || super::answer::reply_as(&id, r, modern));
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
            match stdio_line(&line) {
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
