//! The stdio transport of an upstream MCP server: one JSON-RPC message a line over its stdin
//! and stdout, as rmcp's child-process transport — but an answer to a `tools/call` or
//! `resources/read` this side sent is read as that request's result. rmcp reads every
//! answer as its untagged `ServerResult`, trying each result type in turn (elicitation,
//! skills, tasks, lists, … before a tool's result), each miss a formatted serde error:
//! about a tenth of a gateway call's instructions (`benches/README.md`). Anything else, or an
//! answer the direct reading refuses, is read as rmcp reads it.
//!
//! A call can go shorter still ([`Direct`]): written to the server's stdin by the task that
//! makes it, its answer handed straight to that task by the reading loop — no hand-off to
//! rmcp's service loop and back, and the answer's `result` parsed once, as JSON. Its id is a
//! string of ours (`flux-N`), which rmcp's numeric ids never are.
//!
//! The process is rmcp's to talk to and ours to end: closing sends EOF on its stdin, waits
//! up to 3 s, then `SIGTERM`, 3 s more, then `SIGKILL`; dropped, it is killed.

use std::collections::HashMap;
use std::io;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientNotification, ClientRequest, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// The longest line read (a longer one is dropped, as rmcp drops it).
const MAX_LINE: usize = 16 * 1024 * 1024;
/// How long a closed server is given to exit, before each harder signal.
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// The most requests awaiting a directly read answer (past it, answers are read as rmcp reads
/// them until the table empties).
const EXPECTED_MAX: usize = 65_536;

/// What the answer to a request this side sent is read as.
#[derive(Clone, Copy)]
enum Expect {
    CallTool,
    ReadResource,
}

/// An upstream server's process and its stdio, as an rmcp client transport.
pub(super) struct Lines {
    child: Child,
    read: BufReader<ChildStdout>,
    line: Vec<u8>,
    /// Dropping the tail of a line too long to keep.
    discarding: bool,
    write: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    expected: Arc<Mutex<HashMap<RequestId, Expect>>>,
    direct: Arc<Direct>,
}

/// Why a direct request has no result.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The server answered with a JSON-RPC error: its code and message.
    Error(i64, String),
    /// The server's stdio closed (it exited, or is exiting) before it answered.
    Closed,
    /// Anything else rmcp says went wrong.
    Other(String),
}

/// What a direct request's waiter is given: its `result`, or why there is none.
type Answered = Result<serde_json::Value, Unanswered>;

/// Requests written by the tasks that make them: their waiters, by the number in their id.
pub(crate) struct Direct {
    write: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    waiting: Mutex<HashMap<u64, Waiter>>,
    next: std::sync::atomic::AtomicU64,
    /// Set when the server's stdout ended: no answer will come.
    closed: std::sync::atomic::AtomicBool,
    /// Who hears the server's log messages (`notifications/message`), read in the order they
    /// came — before the answer of the call they were sent during.
    pub(crate) logs: std::sync::OnceLock<LogTo>,
}

/// Where a server's log message goes: told its line.
pub(crate) type LogTo = Box<dyn Fn(&[u8]) + Send + Sync>;

/// A direct request's waiter: where its answer goes, and its progress if anyone listens.
struct Waiter {
    answer: tokio::sync::oneshot::Sender<Answered>,
    progress: Option<ProgressTo>,
}

/// Where a request's progress notifications go.
pub(crate) type ProgressTo = tokio::sync::mpsc::UnboundedSender<crate::tools::Progress>;

/// The prefix of a direct request's id (and of its progress token).
const DIRECT_ID: &str = "flux-";

impl Direct {
    /// Send `method` with `params` and wait for its answer, its progress notifications (if
    /// `progress`: the request carries a progress token, its id) passed on as they come; if
    /// the future is dropped first (the call was stopped), the server is told the request is
    /// cancelled.
    pub(crate) async fn request(
        &self,
        method: &str,
        mut params: serde_json::Value,
        progress: Option<ProgressTo>,
    ) -> Answered {
        use std::sync::atomic::Ordering;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{DIRECT_ID}{n}");
        if progress.is_some() {
            if let Some(p) = params.as_object_mut() {
                let meta = p.entry("_meta").or_insert_with(|| serde_json::json!({}));
                if let Some(m) = meta.as_object_mut() {
                    m.insert("progressToken".into(), id.clone().into());
                }
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(n, Waiter { answer: tx, progress });
        }
        let mut pending = Pending { direct: self, n };
        if self.closed.load(Ordering::Acquire) {
            return Err(Unanswered::Closed);
        }
        let line = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params,
        });
        write_line(&self.write, &line).await.map_err(|_| Unanswered::Closed)?;
        let answered = rx.await.unwrap_or(Err(Unanswered::Closed));
        pending.n = u64::MAX;
        answered
    }

    /// Hand `line` to its direct request's waiter, if it is the answer to one or a progress
    /// notification on one's token.
    fn answer(&self, line: &[u8]) -> bool {
        if !has_key(line, b"\"flux-") {
            return self.log(line);
        }
        if has_key(line, b"\"notifications/progress\"") {
            return self.progress(line);
        }
        self.result(line)
    }

    /// A log message, passed on to who hears them (`true`: taken).
    fn log(&self, line: &[u8]) -> bool {
        let Some(to) = self.logs.get() else {
            return false;
        };
        if !has_key(line, b"\"notifications/message\"") {
            return false;
        }
        to(line);
        true
    }

    /// A progress notification on a direct request's token, passed on to its listener.
    fn progress(&self, line: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct Note<'a> {
            method: &'a str,
            #[serde(borrow)]
            params: Params<'a>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(rename = "progressToken")]
            token: &'a str,
            progress: f64,
            total: Option<f64>,
            message: Option<String>,
        }
        let Ok(note) = serde_json::from_slice::<Note>(line) else {
            return false;
        };
        let n = note.params.token.strip_prefix(DIRECT_ID).and_then(|n| n.parse::<u64>().ok());
        let Some(n) = n.filter(|_| note.method == "notifications/progress") else {
            return false;
        };
        let p = note.params;
        let to = self.waiting.lock().ok().and_then(|w| w.get(&n)?.progress.clone());
        if let Some(to) = to {
            let (progress, total, message) = (p.progress, p.total, p.message);
            let _ = to.send(crate::tools::Progress { progress, total, message });
        }
        true
    }

    /// The answer to a direct request, handed to its waiter.
    fn result(&self, line: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct Answer<'a> {
            id: &'a str,
            result: Option<serde_json::Value>,
            error: Option<RpcError>,
        }
        #[derive(Deserialize)]
        struct RpcError {
            code: i64,
            message: String,
        }
        let Ok(a) = serde_json::from_slice::<Answer>(line) else {
            return false;
        };
        let Some(n) = a.id.strip_prefix(DIRECT_ID).and_then(|n| n.parse().ok()) else {
            return false;
        };
        let Some(waiter) = self.waiting.lock().ok().and_then(|mut w| w.remove(&n)) else {
            return true; // a request given up on: its late answer is dropped
        };
        let answered = match (a.result, a.error) {
            (_, Some(e)) => Err(Unanswered::Error(e.code, e.message)),
            (Some(r), None) => Ok(r),
            (None, None) => Err(Unanswered::Error(-32603, "an answer with neither result nor error".into())),
        };
        let _ = waiter.answer.send(answered);
        true
    }

    /// The server's stdout ended: every waiter is told.
    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        if let Ok(mut w) = self.waiting.lock() {
            w.clear();
        }
    }
}

/// A direct request not yet answered: dropped, it is forgotten and the server told.
struct Pending<'a> {
    direct: &'a Direct,
    n: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.n == u64::MAX {
            return;
        }
        let gone = self.direct.waiting.lock().ok().and_then(|mut w| w.remove(&self.n));
        if gone.is_none() {
            return;
        }
        let cancel = serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": format!("{DIRECT_ID}{}", self.n), "reason": "the call was stopped"},
        });
        // Written now when the pipe takes it at once — so a session closed right after (the
        // gateway ending) cannot take the server's stdin away first — else in the background:
        // a drop cannot wait.
        if write_now(&self.direct.write, &cancel) {
            return;
        }
        let write = self.direct.write.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(EXIT_WAIT, write_line(&write, &cancel)).await;
        });
    }
}

/// Write `message` as a line to the server's stdin without waiting: whether it was written
/// whole. A line shorter than `PIPE_BUF` goes into a pipe whole or not at all.
fn write_now(write: &tokio::sync::Mutex<Option<ChildStdin>>, message: &serde_json::Value) -> bool {
    use tokio::io::AsyncWrite;
    let Ok(mut line) = serde_json::to_vec(message) else {
        return false;
    };
    line.push(b'\n');
    let Ok(mut stdin) = write.try_lock() else {
        return false;
    };
    let Some(stdin) = stdin.as_mut() else {
        return false;
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let wrote = std::pin::Pin::new(stdin).poll_write(&mut cx, &line);
    matches!(wrote, std::task::Poll::Ready(Ok(n)) if n == line.len())
}

/// Write `message` as a line to the server's stdin.
async fn write_line(
    write: &tokio::sync::Mutex<Option<ChildStdin>>,
    message: &serde_json::Value,
) -> io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
    line.push(b'\n');
    let mut stdin = write.lock().await;
    let stdin = stdin
        .as_mut()
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
    stdin.write_all(&line).await?;
    stdin.flush().await
}

impl Lines {
    /// Start `cmd` with its stdio piped: the transport, its pid and its stderr.
    pub(super) fn spawn(
        mut cmd: tokio::process::Command,
    ) -> io::Result<(Lines, Option<u32>, Option<ChildStderr>)> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("the server's stdio was not piped"));
        };
        let (pid, stderr) = (child.id(), child.stderr.take());
        let write = Arc::new(tokio::sync::Mutex::new(Some(stdin)));
        let direct = Arc::new(Direct {
            write: write.clone(),
            waiting: Mutex::default(),
            next: Default::default(),
            closed: Default::default(),
            logs: Default::default(),
        });
        let lines = Lines {
            child,
            read: BufReader::with_capacity(64 * 1024, stdout),
            line: Vec::new(),
            discarding: false,
            write,
            expected: Arc::default(),
            direct,
        };
        Ok((lines, pid, stderr))
    }

    /// Its requests that skip rmcp's service loop.
    pub(super) fn direct(&self) -> Arc<Direct> {
        self.direct.clone()
    }

    /// Remember how the answer to `item` is to be read (a cancel forgets it).
    fn note(&self, item: &TxJsonRpcMessage<RoleClient>) {
        let Ok(mut expected) = self.expected.lock() else {
            return;
        };
        match item {
            JsonRpcMessage::Request(r) => {
                let expect = match &r.request {
                    ClientRequest::CallToolRequest(_) => Expect::CallTool,
                    ClientRequest::ReadResourceRequest(_) => Expect::ReadResource,
                    _ => return,
                };
                if expected.len() < EXPECTED_MAX {
                    expected.insert(r.id.clone(), expect);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        expected.remove(id);
                    }
                }
            }
            _ => {}
        }
    }

    /// Read one line into `self.line` (kept across a cancelled read); `None` at EOF or on
    /// an error, `Some(false)` for a line too long (dropped).
    async fn read_line(&mut self) -> Option<bool> {
        loop {
            let available = self.read.fill_buf().await.ok()?;
            if available.is_empty() {
                return None;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let too_long = self.line.len() + take > MAX_LINE;
            if !self.discarding && !too_long {
                self.line.extend_from_slice(&available[..take]);
            }
            self.read.consume(take);
            if too_long || self.discarding {
                self.line.clear();
                self.discarding = newline.is_none();
                if !self.discarding || too_long {
                    return Some(false);
                }
                continue;
            }
            if newline.is_some() {
                return Some(true);
            }
        }
    }

    /// The message on `self.line`, if it is one.
    fn parse(&self) -> Option<ServerJsonRpcMessage> {
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) || self.direct.answer(line) {
            return None;
        }
        self.typed(line)
            .or_else(|| serde_json::from_slice(line).ok())
    }

    /// `line` read as the answer to a request whose result type is known.
    fn typed(&self, line: &[u8]) -> Option<ServerJsonRpcMessage> {
        #[derive(Deserialize)]
        struct Answer<'a> {
            jsonrpc: JsonRpcVersion2_0,
            id: RequestId,
            #[serde(borrow)]
            result: &'a serde_json::value::RawValue,
        }
        // Only a line that can be an answer is tried (a notification or request never is).
        if !has_key(line, b"\"result\"") {
            return None;
        }
        let answer: Answer = serde_json::from_slice(line).ok()?;
        let expect = self.expected.lock().ok()?.remove(&answer.id)?;
        let raw = answer.result.get();
        let result = match expect {
            Expect::CallTool => ServerResult::CallToolResult(serde_json::from_str(raw).ok()?),
            Expect::ReadResource => {
                ServerResult::ReadResourceResult(serde_json::from_str(raw).ok()?)
            }
        };
        Some(JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: answer.jsonrpc,
            id: answer.id,
            result,
        }))
    }

    /// Close stdin, then wait, `SIGTERM`, wait, `SIGKILL`.
    async fn shutdown(&mut self) -> io::Result<()> {
        drop(self.write.lock().await.take());
        if tokio::time::timeout(EXIT_WAIT, self.child.wait()).await.is_ok() {
            return Ok(());
        }
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: a signal to our own child, not yet reaped (its pid is still ours).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if tokio::time::timeout(EXIT_WAIT, self.child.wait()).await.is_ok() {
            return Ok(());
        }
        self.child.kill().await
    }
}

/// Whether `key` (with its quotes) is in `line` (a cheap look before a parse).
fn has_key(line: &[u8], key: &[u8]) -> bool {
    line.windows(key.len()).any(|w| w == key)
}

impl rmcp::transport::Transport<RoleClient> for Lines {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), io::Error>> + Send + 'static {
        self.note(&item);
        let write = self.write.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(io::Error::other)?;
            line.push(b'\n');
            let mut stdin = write.lock().await;
            let stdin = stdin.as_mut().ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotConnected, "the server's stdin is closed")
            })?;
            stdin.write_all(&line).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            // Cancel-safe: a read cut short leaves its part of the line in `self.line`.
            let Some(whole) = self.read_line().await else {
                self.direct.close();
                return None;
            };
            let message = whole.then(|| self.parse()).flatten();
            self.line.clear();
            if let Some(m) = message {
                return Some(m);
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        self.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::Transport;

    /// A transport over `sh -c SCRIPT` (what the "server" prints is the script's).
    fn over(script: &str) -> Lines {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", script]);
        Lines::spawn(cmd).expect("sh starts").0
    }

    fn call(id: i64) -> TxJsonRpcMessage<RoleClient> {
        let params = rmcp::model::CallToolRequestParams::new("t");
        let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        JsonRpcMessage::request(request, RequestId::Number(id))
    }

    #[tokio::test]
    async fn an_answer_to_a_call_is_read_as_its_result_and_others_as_rmcp_reads_them() {
        let mut t = over(
            "read _; printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}' '' '{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}' '{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}'",
        );
        t.send(call(7)).await.expect("sent");
        let first = t.receive().await.expect("a notification");
        assert!(matches!(first, JsonRpcMessage::Notification(_)), "{first:?}");
        match t.receive().await.expect("an answer") {
            JsonRpcMessage::Response(r) => match r.result {
                ServerResult::CallToolResult(c) => assert_eq!(c.content.len(), 1),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        // Not a request of ours that is known: read as rmcp reads it (`{}` is empty).
        match t.receive().await.expect("an answer") {
            JsonRpcMessage::Response(r) => {
                assert!(matches!(r.result, ServerResult::EmptyResult(_)), "{r:?}")
            }
            other => panic!("{other:?}"),
        }
        assert!(t.receive().await.is_none(), "EOF ends the stream");
        t.close().await.expect("closed");
    }

    #[tokio::test]
    async fn garbage_and_a_call_answered_otherwise_fall_back_to_rmcp() {
        let mut t = over(
            "read _; printf '%s\\n' 'not json' '{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"resultType\":\"input_required\",\"inputRequests\":{}}}'",
        );
        t.send(call(3)).await.expect("sent");
        let answer = t.receive().await.expect("the answer, past the garbage");
        match answer {
            JsonRpcMessage::Response(r) => assert!(
                !matches!(r.result, ServerResult::CallToolResult(_)),
                "an input_required answer is not a tool's result: {r:?}"
            ),
            other => panic!("{other:?}"),
        }
        t.close().await.expect("closed");
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_dropped_and_the_next_read() {
        let mut t = over(&format!(
            "head -c {} /dev/zero | tr '\\0' 'x'; printf '\\n%s\\n' '{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}}'",
            MAX_LINE + 10
        ));
        let m = t.receive().await.expect("the line after the long one");
        assert!(matches!(m, JsonRpcMessage::Notification(_)), "{m:?}");
        t.close().await.expect("closed");
    }

    #[tokio::test]
    async fn a_direct_request_gets_its_result_or_its_error_and_a_closed_server_ends_it() {
        let mut t = over(
            "read a; printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":\"flux-0\",\"result\":{\"content\":[]}}'; read b; printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":\"flux-1\",\"error\":{\"code\":-32602,\"message\":\"no such tool\"}}'; read c",
        );
        let direct = t.direct();
        // The reading loop is rmcp's in a session; here a task drives it.
        let reader = tokio::spawn(async move { while t.receive().await.is_some() {} });
        let first = direct.request("tools/call", serde_json::json!({}), None).await;
        assert_eq!(first.ok(), Some(serde_json::json!({"content": []})));
        match direct.request("tools/call", serde_json::json!({}), None).await {
            Err(Unanswered::Error(-32602, m)) => assert_eq!(m, "no such tool"),
            other => panic!("{other:?}"),
        }
        // The server reads the third request and exits without an answer.
        let third = direct.request("tools/call", serde_json::json!({}), None).await;
        assert!(matches!(third, Err(Unanswered::Closed)), "{third:?}");
        reader.await.expect("the reader ends at EOF");
        let after = direct.request("tools/call", serde_json::json!({}), None).await;
        assert!(matches!(after, Err(Unanswered::Closed)), "{after:?}");
    }

    #[tokio::test]
    async fn a_direct_request_with_a_listener_carries_a_token_and_hears_its_progress() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let seen = dir.path().join("seen");
        // The server echoes the request it read, says progress on the token it was given
        // (and on another's, and a malformed one, which are not heard), answers.
        let progress = |token: &str, extra: &str| {
            format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"{token}\",\"progress\":1{extra}}}}}")
        };
        let script = format!(
            "read a; printf '%s' \"$a\" > '{}'; printf '%s\\n' '{}' '{}' '{}' '{{\"jsonrpc\":\"2.0\",\"id\":\"flux-0\",\"result\":{{\"content\":[]}}}}'",
            seen.display(),
            progress("flux-7", ""),
            progress("flux-0", ",\"total\":2,\"message\":\"half\""),
            progress("flux-0", ",\"total\":\"x\""),
        );
        let mut t = over(&script);
        let direct = t.direct();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut others = 0;
            while let Some(m) = t.receive().await {
                assert!(matches!(m, JsonRpcMessage::Notification(_)), "{m:?}");
                others += 1;
            }
            others
        });
        let params = serde_json::json!({"name": "t", "_meta": {"traceparent": "x"}});
        let answer = direct.request("tools/call", params, Some(tx)).await;
        assert_eq!(answer.ok(), Some(serde_json::json!({"content": []})));
        let heard = rx.recv().await.expect("the progress on its token");
        assert_eq!((heard.progress, heard.total), (1.0, Some(2.0)));
        assert_eq!(heard.message.as_deref(), Some("half"));
        assert!(rx.try_recv().is_err(), "nothing else is heard");
        let sent: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&seen).expect("seen")).expect("json");
        let meta = &sent["params"]["_meta"];
        assert_eq!(meta["progressToken"], "flux-0");
        assert_eq!(meta["traceparent"], "x", "the request's own _meta is kept");
        drop(direct);
        // The malformed one is left to rmcp's reading (which takes it for a notification of
        // another kind): the call does not hear it.
        assert_eq!(reader.await.expect("reader"), 1);
    }

    #[tokio::test]
    async fn a_cancel_is_written_before_a_close_that_comes_right_after() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let seen = dir.path().join("seen");
        let script = format!("read a; read b; printf '%s' \"$b\" > '{}'", seen.display());
        let mut t = over(&script);
        let direct = t.direct();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(200),
            direct.request("tools/call", serde_json::json!({"name": "slow"}), None),
        )
        .await;
        assert!(gave_up.is_err(), "no answer came");
        // The gateway ending: the session is closed at once, before anything else runs.
        t.close().await.expect("closed");
        let line = std::fs::read_to_string(&seen).unwrap_or_default();
        let cancel: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the server saw no cancel before its stdin closed ({e}): {line:?}"));
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], "flux-0");
    }

    #[tokio::test]
    async fn a_direct_request_given_up_on_is_cancelled_at_the_server() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let seen = dir.path().join("seen");
        let mut t = over(&format!("read a; read b; printf '%s' \"$b\" > '{}'; cat > /dev/null", seen.display()));
        let direct = t.direct();
        let reader = tokio::spawn(async move {
            while t.receive().await.is_some() {}
        });
        let gave_up = tokio::time::timeout(
            Duration::from_millis(200),
            direct.request("tools/call", serde_json::json!({"name": "slow"}), None),
        )
        .await;
        assert!(gave_up.is_err(), "no answer came");
        let mut line = String::new();
        for _ in 0..100 {
            line = std::fs::read_to_string(&seen).unwrap_or_default();
            if !line.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let cancel: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], "flux-0");
        reader.abort();
    }
}
