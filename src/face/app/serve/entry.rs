//! What a client's message is, decided before anything runs — the gateway's message entry on
//! both faces, pure and synchronous, so it can be fuzzed (`fuzz/fuzz_targets/gateway_entry.rs`)
//! and property-tested here. A stdio line is a message for rmcp or an error to write back
//! ([`stdio_line`]); an HTTP request's headers and body are refused as JSON-RPC says, taken
//! on the short way (a plain `tools/call`, or a cancel of one), or left to rmcp
//! ([`http_request`]), or answered from the gateway's tasks ([`tasked`]: a `tools/call` with
//! `params.task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` of a `2025-11-25`
//! client). Both faces parse a message once, into rmcp's typed `ClientJsonRpcMessage`, and
//! the short way is one `match` on it ([`short`]).

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcRequest,
    RequestMetaObject,
};
use serde_json::{Map, Value};

use super::fault::Fault;

pub use super::tasks::Asked;

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

/// What one line is: a message for rmcp, or an answer the wire gives itself.
#[derive(Debug)]
pub enum Line {
    Message(Box<ClientJsonRpcMessage>),
    /// A JSON-RPC error to write back (the request never reaches rmcp).
    Refused(Vec<u8>),
    /// Nothing to do (a blank line).
    Skip,
}

/// Classify one message as the client sent it (a stdio line, an HTTP body).
pub fn stdio_line(line: &[u8]) -> Line {
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
            let params = i64::from(rmcp::model::ErrorCode::INVALID_PARAMS.0);
            let status = if code == Some(params) { 200 } else { 400 };
            return HttpEntry::Refused {
                status,
                body: error,
            };
        }
        Line::Skip => return HttpEntry::Rmcp,
        Line::Message(m) => m,
    };
    if eligible(parts, hosts).is_none() {
        return HttpEntry::Rmcp;
    }
    if let Some(t) = tasked(&message, body) {
        return HttpEntry::Task(t);
    }
    short(&message).map_or(HttpEntry::Rmcp, HttpEntry::Short)
}

/// Protocol versions whose requests rmcp serves in session mode (older than `2026-07-28`).
const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Whether a request's headers let this path take it (else rmcp judges it). `hosts` are the
/// allowed `Host` names (`name` or `name:port`).
pub(super) fn eligible(parts: &http::request::Parts, hosts: &[String]) -> Option<String> {
    let h = &parts.headers;
    if parts.method != http::Method::POST || h.contains_key(http::header::ORIGIN) {
        return None;
    }
    let text = |name| {
        h.get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    let accept = text(http::header::ACCEPT.as_str())?;
    let json = text(http::header::CONTENT_TYPE.as_str())?;
    if !accept.contains("application/json")
        || !accept.contains("text/event-stream")
        || !json.trim_start().starts_with("application/json")
    {
        return None;
    }
    if let Some(v) = text("mcp-protocol-version") {
        if !LEGACY_VERSIONS.contains(&v) {
            return None;
        }
    }
    // SEP-2243's `Mcp-Method`/`Mcp-Name` headers are checked by rmcp only from `2026-07-28`
    // on, which this path leaves to rmcp.
    if !host_allowed(text(http::header::HOST.as_str())?, hosts) {
        return None;
    }
    text(super::sessions::SESSION_HEADER).map(str::to_string)
}

/// The `Host` header is one of `hosts` exactly (an entry without a port: any port).
pub(super) fn host_allowed(host: &str, hosts: &[String]) -> bool {
    let Ok(got) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    let name = |a: &http::uri::Authority| a.host().trim_matches(['[', ']']).to_ascii_lowercase();
    hosts.iter().any(|h| {
        h.parse::<http::uri::Authority>().is_ok_and(|want| {
            name(&want) == name(&got) && want.port_u16().is_none_or(|p| got.port_u16() == Some(p))
        })
    })
}

/// Whether a request's `Origin` is its own `Host` (a page served by this gateway's own name
/// and port, as a browser-based client on localhost sends), that `Host` being allowed: such a
/// request is no cross-origin one, and DNS rebinding comes with another `Host`.
pub(super) fn same_origin(headers: &http::HeaderMap, hosts: &[String]) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    let (Some(origin), Some(host)) = (text(http::header::ORIGIN), text(http::header::HOST)) else {
        return false;
    };
    let Some(authority) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    authority.eq_ignore_ascii_case(host) && host_allowed(host, hosts)
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
            let key = super::keys::key_in(meta_of(request).get("idempotencyKey"));
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

    fn refused(line: &str) -> Value {
        match stdio_line(line.as_bytes()) {
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
        assert!(matches!(stdio_line(b"  "), Line::Skip));
        let ok = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}}"#;
        assert!(matches!(stdio_line(ok.as_bytes()), Line::Message(_)));
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

    #[test]
    fn hosts_match_by_name_and_port_when_given() {
        let hosts = ["localhost".to_string(), "gw.internal:8080".to_string()];
        assert!(host_allowed("localhost:1234", &hosts));
        let heads = |origin: &str, host: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::ORIGIN, origin.parse().expect("a value"));
            h.insert(http::header::HOST, host.parse().expect("a value"));
            h
        };
        assert!(same_origin(
            &heads("http://localhost:1234", "localhost:1234"),
            &hosts
        ));
        assert!(same_origin(
            &heads("https://LOCALHOST:1234", "localhost:1234"),
            &hosts
        ));
        assert!(!same_origin(
            &heads("http://evil.example:1234", "localhost:1234"),
            &hosts
        ));
        assert!(!same_origin(
            &heads("http://localhost:9999", "localhost:1234"),
            &hosts
        ));
        assert!(!same_origin(
            &heads("http://evil.example", "evil.example"),
            &hosts
        ));
        assert!(!same_origin(&heads("null", "localhost:1234"), &hosts));
        assert!(host_allowed("LOCALHOST", &hosts));
        assert!(host_allowed("gw.internal:8080", &hosts));
        assert!(!host_allowed("gw.internal:9090", &hosts));
        assert!(!host_allowed("evil.example", &hosts));
        assert!(!host_allowed("", &hosts));
        let v6 = ["[::1]".to_string()];
        assert!(host_allowed("[::1]:80", &v6));
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
