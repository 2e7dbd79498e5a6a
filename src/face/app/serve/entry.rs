//! What a client's message is, decided before anything runs — the gateway's message entry on
//! both faces, pure and synchronous, so it can be fuzzed (`fuzz/fuzz_targets/gateway_entry.rs`)
//! and property-tested here. A stdio line is a message for rmcp or an error to write back
//! ([`stdio_line`]); an HTTP request's headers and body are refused as JSON-RPC says, taken
//! on the short way (a plain `tools/call`, or a cancel of one), or left to rmcp
//! ([`http_request`]), or answered from the gateway's tasks ([`tasked`]: a `tools/call` with
//! `params.task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` of a `2025-11-25`
//! client). Both faces parse a message once, into rmcp's typed `ClientJsonRpcMessage`, and
//! the short way is one `match` on it ([`short`]).

use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, RequestMetaObject};
use serde_json::{Map, Value};

pub use super::stdio::{read_line as stdio_line, Line};

/// A plain `tools/call` or a cancel, as the short way takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Short {
    /// `notifications/cancelled` of request `key` (its id as JSON text).
    Cancel {
        key: String,
    },
    Call(Box<Call>),
}

/// A plain `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: Value,
    pub name: String,
    pub args: Map<String, Value>,
    /// `_meta.progressToken`, `_meta.traceparent`.
    pub progress: Option<Value>,
    pub traceparent: Option<String>,
}

/// What a client asks of its tasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    Get(String),
    Result(String),
    List,
    Cancel(String),
}

/// A request the gateway's tasks answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Tasked {
    /// A `tools/call` with `params.task`: started as a task, kept `ttl` ms (when it says),
    /// made once for its `_meta.idempotencyKey` (when it has one).
    Call {
        call: Box<Call>,
        ttl: Option<u64>,
        key: Option<String>,
    },
    /// A task request (its JSON-RPC `id`).
    Ask { id: Value, asked: Asked },
}

/// What an HTTP request to `/mcp` is.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpEntry {
    /// Answered at once: this status and JSON-RPC error body.
    Refused { status: u16, body: Vec<u8> },
    /// The short way's.
    Short(Short),
    /// The tasks'.
    Task(Tasked),
    /// rmcp's.
    Rmcp,
}

/// Decide an HTTP request: `parts` its head, `hosts` the allowed `Host` names, `body` what it
/// sent (empty for a GET or DELETE). The body is parsed once, into rmcp's typed message, as
/// the stdio face reads a line ([`stdio_line`]); the short way is chosen by one `match` on it.
pub fn http_request(parts: &http::request::Parts, hosts: &[String], body: &[u8]) -> HttpEntry {
    if parts.method != http::Method::POST {
        return HttpEntry::Rmcp;
    }
    let message = match stdio_line(body) {
        Line::Refused(error) => {
            let code = serde_json::from_slice::<Value>(&error)
                .ok()
                .and_then(|e| e["error"]["code"].as_i64());
            // A call's malformed params are the call's answer; the rest is a bad request.
            let status = if code == Some(-32602) { 200 } else { 400 };
            return HttpEntry::Refused {
                status,
                body: error,
            };
        }
        Line::Skip => return HttpEntry::Rmcp,
        Line::Message(m) => m,
    };
    if super::fast::eligible(parts, hosts).is_none() {
        return HttpEntry::Rmcp;
    }
    if let Some(t) = tasked(&message, body) {
        return HttpEntry::Task(t);
    }
    short(&message).map_or(HttpEntry::Rmcp, HttpEntry::Short)
}

/// A task request, or a `tools/call` asking to be a task (`params.task`, read from the
/// `body` rmcp's typed message drops it from); `None`: anything else.
fn tasked(message: &ClientJsonRpcMessage, body: &[u8]) -> Option<Tasked> {
    let ClientJsonRpcMessage::Request(r) = message else {
        return None;
    };
    let id = serde_json::to_value(&r.id).ok()?;
    let task_id = |p: &Option<Value>| p.as_ref()?["taskId"].as_str().map(str::to_string);
    let asked = match &r.request {
        ClientRequest::GetTaskRequest(g) => Asked::Get(g.params.task_id.clone()),
        ClientRequest::CancelTaskRequest(c) => Asked::Cancel(c.params.task_id.clone()),
        ClientRequest::CustomRequest(c) if c.method == "tasks/result" => {
            Asked::Result(task_id(&c.params)?)
        }
        ClientRequest::CustomRequest(c) if c.method == "tasks/list" => Asked::List,
        ClientRequest::CallToolRequest(call) => {
            let p = &call.params;
            if p.input_responses.is_some() || p.request_state.is_some() {
                return None;
            }
            let task = task_param(body)?;
            let request = call;
            let call = Call {
                id,
                name: p.name.to_string(),
                args: p.arguments.clone().unwrap_or_default(),
                progress: None,
                traceparent: None,
            };
            let ttl = task["ttl"].as_u64();
            let key = meta_of(request)
                .remove("idempotencyKey")
                .and_then(|k| k.as_str().map(str::to_string));
            return Some(Tasked::Call {
                call: Box::new(call),
                ttl,
                key,
            });
        }
        _ => return None,
    };
    Some(Tasked::Ask { id, asked })
}

/// A `tools/call`'s `params.task` (an object), when its body has one.
fn task_param(body: &[u8]) -> Option<Value> {
    const NEEDLE: &[u8] = b"\"task\"";
    if !body.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    v["params"]["task"]
        .as_object()
        .map(|t| Value::Object(t.clone()))
}

/// A plain `tools/call` (its `_meta` at most a progress token and a `traceparent`, no input
/// responses or request state) or a cancel; `None`: anything else, rmcp's.
pub(super) fn short(message: &ClientJsonRpcMessage) -> Option<Short> {
    match message {
        ClientJsonRpcMessage::Notification(n) => match &n.notification {
            ClientNotification::CancelledNotification(c) => {
                let id = c.params.request_id.as_ref()?;
                let key = serde_json::to_string(id).ok()?;
                Some(Short::Cancel { key })
            }
            _ => None,
        },
        ClientJsonRpcMessage::Request(r) => {
            let ClientRequest::CallToolRequest(call) = &r.request else {
                return None;
            };
            let p = &call.params;
            if p.input_responses.is_some() || p.request_state.is_some() {
                return None;
            }
            let (progress, traceparent) = known_meta(meta_of(call))?;
            Some(Short::Call(Box::new(Call {
                id: serde_json::to_value(&r.id).ok()?,
                name: p.name.to_string(),
                args: p.arguments.clone().unwrap_or_default(),
                progress,
                traceparent,
            })))
        }
        _ => None,
    }
}

/// A `tools/call`'s `_meta`: rmcp keeps a request's in its extensions (and a newer one in
/// `params`).
fn meta_of(call: &rmcp::model::CallToolRequest) -> Map<String, Value> {
    let mut meta = call
        .extensions
        .get::<RequestMetaObject>()
        .map(|m| (m.0).0.clone())
        .unwrap_or_default();
    if let Some(m) = &call.params.meta {
        meta.extend((m.0).0.clone());
    }
    meta
}

/// A `_meta` of a progress token and a `traceparent` at most (anything else: `None`, rmcp's).
fn known_meta(mut meta: Map<String, Value>) -> Option<(Option<Value>, Option<String>)> {
    let token = meta.remove("progressToken");
    if token
        .as_ref()
        .is_some_and(|t| !(t.is_string() || t.is_i64()))
    {
        return None;
    }
    let traceparent = match meta.remove("traceparent") {
        None => None,
        Some(Value::String(t)) => Some(t),
        Some(_) => return None,
    };
    meta.is_empty().then_some((token, traceparent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(method: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri("/mcp");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("a request").into_parts().0
    }

    const PLAIN: [(&str, &str); 4] = [
        ("host", "127.0.0.1:8808"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", "s1"),
    ];

    fn hosts() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    #[test]
    fn a_plain_call_goes_the_short_way_and_the_rest_is_refused_or_rmcps() {
        let call = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"_meta":{"progressToken":"p"}}}"#;
        let HttpEntry::Short(Short::Call(c)) = http_request(&head("POST", &PLAIN), &hosts(), call)
        else {
            panic!("the short way");
        };
        assert_eq!(
            (c.id, c.name, c.progress),
            (3.into(), "t".to_string(), Some("p".into()))
        );
        let origin = [&PLAIN[..], &[("origin", "http://x")]].concat();
        assert_eq!(
            http_request(&head("POST", &origin), &hosts(), call),
            HttpEntry::Rmcp
        );
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(
            http_request(&head("POST", &PLAIN), &hosts(), list),
            HttpEntry::Rmcp
        );
        let bad = http_request(&head("POST", &PLAIN), &hosts(), b"{oops");
        assert!(
            matches!(bad, HttpEntry::Refused { status: 400, .. }),
            "{bad:?}"
        );
        assert_eq!(
            http_request(&head("DELETE", &PLAIN), &hosts(), b""),
            HttpEntry::Rmcp
        );
    }

    #[test]
    fn only_a_plain_call_or_a_cancel_is_taken_from_the_typed_message() {
        let p = head("POST", &PLAIN);
        let decide = |body: &[u8]| http_request(&p, &hosts(), body);
        let traced = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","_meta":{"traceparent":"00-x"}}}"#;
        let HttpEntry::Short(Short::Call(c)) = decide(traced) else {
            panic!("the short way");
        };
        assert_eq!(
            (c.id, c.traceparent),
            ("a".into(), Some("00-x".to_string()))
        );
        assert!(c.args.is_empty());
        let other_meta = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"x":1}}}"#;
        assert_eq!(decide(other_meta), HttpEntry::Rmcp);
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}"#;
        assert_eq!(
            decide(cancel),
            HttpEntry::Short(Short::Cancel {
                key: "\"a\"".into()
            })
        );
        let no_id = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#;
        assert_eq!(decide(no_id), HttpEntry::Rmcp);
    }

    #[test]
    fn task_requests_and_a_call_asking_to_be_a_task_go_to_the_tasks() {
        let p = head("POST", &PLAIN);
        let decide = |body: &[u8]| http_request(&p, &hosts(), body);
        let call = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"task":{"ttl":60000}}}"#;
        let HttpEntry::Task(Tasked::Call { call, ttl, key }) = decide(call) else {
            panic!("a task");
        };
        assert_eq!((call.name.as_str(), ttl, key), ("t", Some(60000), None));
        let keyed = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","task":{},"_meta":{"idempotencyKey":"k1"}}}"#;
        let HttpEntry::Task(Tasked::Call { key, ttl, .. }) = decide(keyed) else {
            panic!("a task");
        };
        assert_eq!((key.as_deref(), ttl), (Some("k1"), None));
        let in_args = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"task":{}}}}"#;
        assert!(matches!(decide(in_args), HttpEntry::Short(_)));
        for (body, asked) in [
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"x"}}"#,
                Asked::Get("x".into()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"x"}}"#,
                Asked::Result("x".into()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tasks/list"}"#,
                Asked::List,
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tasks/cancel","params":{"taskId":"x"}}"#,
                Asked::Cancel("x".into()),
            ),
        ] {
            let want = HttpEntry::Task(Tasked::Ask {
                id: 5.into(),
                asked,
            });
            assert_eq!(decide(body.as_bytes()), want, "{body}");
        }
        let no_id = br#"{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{}}"#;
        assert_eq!(decide(no_id), HttpEntry::Rmcp);
    }

    /// What the fuzz target holds, on every run of `cargo test`: any head and body is decided
    /// without a panic; a refusal is a JSON-RPC error (400, or 200 for a call's params); the
    /// short way takes only a `tools/call` or a cancel.
    fn holds(method: &str, headers: &[(String, String)], body: &[u8]) {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let Ok(parts) = std::panic::catch_unwind(|| head(method, &headers)) else {
            return;
        };
        match http_request(&parts, &hosts(), body) {
            HttpEntry::Refused { status, body } => {
                assert!(status == 400 || status == 200);
                let e: Value = serde_json::from_slice(&body).expect("a JSON-RPC error");
                assert!(e["error"]["code"].is_i64());
            }
            HttpEntry::Short(_) => {
                let text = String::from_utf8_lossy(body);
                assert!(text.contains("tools/call") || text.contains("notifications/cancelled"));
            }
            HttpEntry::Task(_) => {
                let text = String::from_utf8_lossy(body);
                assert!(text.contains("tools/call") || text.contains("tasks/"));
            }
            HttpEntry::Rmcp => {}
        }
        let _ = stdio_line(body);
    }

    #[test]
    fn the_committed_corpus_is_decided_without_a_panic() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gateway_entry");
        let plain: Vec<(String, String)> = PLAIN
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut n = 0;
        for e in std::fs::read_dir(&dir).expect("the corpus").flatten() {
            let data = std::fs::read(e.path()).expect("a case");
            holds("POST", &plain, &data);
            n += 1;
        }
        assert!(n >= 8, "{n} cases in {}", dir.display());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn any_request_is_decided_without_a_panic(
            method in prop::sample::select(vec!["POST", "GET", "DELETE", "PUT"]),
            extra in prop::collection::vec(("[a-z-]{1,12}", "[ -~]{0,20}"), 0..3),
            body in prop::collection::vec(any::<u8>(), 0..200),
            framed in "\\{\"jsonrpc\":\"2.0\",\"id\":[0-9a\"]{1,3},\"method\":\"(tools/call|notifications/cancelled|tools/list)\",\"params\":[ -~]{0,60}\\}",
        ) {
            let mut headers: Vec<(String, String)> = PLAIN.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            headers.extend(extra);
            holds(method, &headers, &body);
            holds(method, &headers, framed.as_bytes());
        }
    }
}
