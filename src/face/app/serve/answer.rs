//! A call's result as the client's model should get it: the output as text, plus
//! `structuredContent` when it is a JSON object; an upstream MCP tool's result exactly as it
//! came (content blocks, `structuredContent`, `isError`); every other failure as
//! `isError: true` with one text naming its kind and message, as in a results document.
//!
//! The one room where a call's answer becomes MCP: its `CallToolResult`, its progress
//! notifications and, for the short HTTP path that writes its own bodies, the JSON-RPC
//! messages around them — all as rmcp's types, so both faces say the same thing.

use rmcp::model::{
    CallToolResult, ErrorData, Notification, ProgressNotificationParam, ProgressToken, RequestId,
    ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use serde_json::{json, Map, Value};

use crate::events::{CallResult, ErrorKind, Status};
use crate::tools::Progress;

/// What a served call came to, before it is put into words.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Its run's result, and its upstream's own answer when it had one.
    Ran(Box<CallResult>, Option<Value>),
    Refused(Refusal),
    /// An answer recorded for the client's idempotency key (by this attempt or an earlier).
    Recorded(Value),
    /// A 2026-07-28 client is to approve the call in its follow-up request: the question,
    /// and the state it echoes (`input_required`; see `approve::Mrtr`).
    Ask(String, String),
}

impl Outcome {
    /// The `CallToolResult` (as JSON).
    pub(super) fn answer(self) -> Value {
        match self {
            Outcome::Ran(r, raw) => of(&r, raw),
            Outcome::Refused(r) => r.answer(),
            Outcome::Recorded(v) => v,
            // Only a face that can send `input_required` is given one; said if one came.
            Outcome::Ask(question, _) => error(&format!(
                "{}: {question} (the client could not be asked)",
                ErrorKind::ApprovalDenied
            )),
        }
    }

    /// The `CallToolResult`. An upstream's answer that is not one becomes a failure saying so.
    pub(super) fn result(self) -> CallToolResult {
        serde_json::from_value(self.answer()).unwrap_or_else(|e| {
            let text = format!("{}: cannot answer the call: {e}", ErrorKind::InvalidOutput);
            serde_json::from_value(error(&text)).unwrap_or_default()
        })
    }
}

/// The JSON-RPC answer to request `id`: the call's `CallToolResult`, or (a protocol fault,
/// as rmcp's handler answers it) invalid params.
pub(super) fn reply(id: &Value, r: Result<Outcome, super::fault::Fault>) -> Vec<u8> {
    reply_as(id, r, false)
}

/// [`reply`], to a `2026-07-28` client (`modern`) with the result's `resultType` (rmcp's
/// handler path sets it, and strips it for older clients).
pub(super) fn reply_as(
    id: &Value,
    r: Result<Outcome, super::fault::Fault>,
    modern: bool,
) -> Vec<u8> {
    let id = serde_json::from_value::<RequestId>(id.clone()).ok();
    let message = match (r, id) {
        (Ok(o), Some(id)) => {
            let mut result = o.result();
            if modern {
                result.result_type = Some(rmcp::model::ResultType::COMPLETE);
            }
            ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), id)
        }
        (Ok(_), None) => {
            ServerJsonRpcMessage::error(ErrorData::invalid_request("no request id", None), None)
        }
        (Err(f), id) => ServerJsonRpcMessage::error(f.error(), id),
    };
    serde_json::to_vec(&message).unwrap_or_default()
}

/// A progress notification's parameters on the client's `token`.
pub(super) fn progress(token: ProgressToken, p: Progress) -> ProgressNotificationParam {
    let mut n = ProgressNotificationParam::new(token, p.progress);
    if let Some(t) = p.total {
        n = n.with_total(t);
    }
    if let Some(m) = p.message {
        n = n.with_message(m);
    }
    n
}

/// A progress notification on `token` as JSON-RPC (`None`: not a progress token).
pub(super) fn progress_message(token: &Value, p: Progress) -> Option<Vec<u8>> {
    let token = serde_json::from_value::<ProgressToken>(token.clone()).ok()?;
    let n = ServerNotification::ProgressNotification(Notification::new(progress(token, p)));
    serde_json::to_vec(&ServerJsonRpcMessage::notification(n)).ok()
}

/// A call the gateway answers itself, not its tool: refused before it ran (a session's limit,
/// a bad argument, the lane store away) or ended around its run. Made into an answer here only.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refusal {
    /// `KIND: why`, as a results document names a failure.
    Failed(ErrorKind, String),
    /// The client cancelled the call (an answer it never sees, on either face).
    Cancelled,
}

impl Refusal {
    pub(super) fn new(kind: ErrorKind, why: impl Into<String>) -> Refusal {
        Refusal::Failed(kind, why.into())
    }

    /// The answer's one text.
    pub(super) fn text(&self) -> String {
        match self {
            Refusal::Failed(kind, why) => format!("{kind}: {why}"),
            Refusal::Cancelled => {
                format!(
                    "{}: the client cancelled the call",
                    Status::Cancelled.as_str()
                )
            }
        }
    }

    /// The `CallToolResult` (as JSON).
    pub(super) fn answer(&self) -> Value {
        error(&self.text())
    }
}

/// The `CallToolResult` (as JSON) for `result`; `raw`: the upstream's own answer, if the
/// tool was an upstream MCP tool that answered.
pub(super) fn of(result: &CallResult, raw: Option<Value>) -> Value {
    // An upstream's answer stands as it came — success or its own `isError` — unless the
    // call failed for a reason of ours after it (its output failed a check, say).
    if let Some(raw) = raw {
        let tool_error =
            result.error.as_ref().map(|e| e.kind) == Some(crate::events::ErrorKind::ToolError);
        if result.status == Status::Ok || tool_error {
            return raw;
        }
    }
    match (&result.status, &result.error) {
        (Status::Ok, _) => ok(&result.output),
        (_, Some(e)) => error(&format!("{}: {}", e.kind, e.message)),
        (status, None) => error(&format!("{}", json!(status)).replace('"', "")),
    }
}

/// A successful output.
fn ok(output: &Value) -> Value {
    let text = match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut r = Map::new();
    r.insert("content".into(), json!([{"type": "text", "text": text}]));
    if output.is_object() {
        r.insert("structuredContent".into(), output.clone());
    }
    r.insert("isError".into(), json!(false));
    Value::Object(r)
}

/// A failure the model can read and act on.
pub(super) fn error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ErrorInfo, ErrorKind};

    fn result(status: Status, output: Value, error: Option<ErrorInfo>) -> CallResult {
        CallResult {
            index: 0,
            id: "c1".into(),
            tool: "t".into(),
            status,
            event: "call_finished",
            output,
            error,
            attempts: 1,
            phase: 0,
            idempotency_key: None,
            called_as: None,
            cached: false,
            settled: None,
            queued_ms: None,
            waited_on: None,
            started_ms: None,
            duration_ms: None,
        }
    }

    #[test]
    fn an_object_is_text_and_structured_content_and_a_string_is_text() {
        let r = of(&result(Status::Ok, json!({"n": 1}), None), None);
        assert_eq!(r["content"][0]["text"], "{\"n\":1}");
        assert_eq!(r["structuredContent"], json!({"n": 1}));
        assert_eq!(r["isError"], false);
        let r = of(&result(Status::Ok, json!("hello"), None), None);
        assert_eq!(r["content"][0]["text"], "hello");
        assert!(r.get("structuredContent").is_none());
    }

    #[test]
    fn a_failure_names_its_kind_and_an_upstream_answer_passes_through() {
        let e = ErrorInfo {
            kind: ErrorKind::Timeout,
            message: "no answer within 1s".into(),
        };
        let r = of(&result(Status::TimedOut, Value::Null, Some(e)), None);
        assert_eq!(r["isError"], true);
        assert_eq!(
            r["content"][0]["text"],
            format!("{}: no answer within 1s", ErrorKind::Timeout)
        );
        let raw = json!({"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}], "isError": false});
        assert_eq!(
            of(&result(Status::Ok, json!([]), None), Some(raw.clone())),
            raw
        );
        let e = ErrorInfo {
            kind: ErrorKind::ToolError,
            message: "boom".into(),
        };
        let raw = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(
            of(
                &result(Status::Error, Value::Null, Some(e)),
                Some(raw.clone())
            ),
            raw
        );
    }
}
