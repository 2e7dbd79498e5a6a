//! OpenTelemetry: a run's spans reach an OTLP/HTTP receiver (the test server, decoding the
//! protobuf with the official `opentelemetry-proto` types) as children of the agent's
//! `TRACEPARENT`, and each tool is handed its call's span: a command in `TRACEPARENT`, an HTTP
//! tool in the `traceparent` header.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;

use crate::common::{results, Project};
use crate::http_server::TestServer;

const AGENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attrs(s: &Span) -> HashMap<String, String> {
    s.attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn manifest(base: &str) -> String {
    format!(
        r#"
[tools.cmd]
kind = "command"
effect = "read"
command = ["sh", "-c", 'printf "{{\"tp\": \"%s\"}}" "$TRACEPARENT"']
stdin = "none"

[tools.web]
kind = "http"
effect = "read"
url = "{base}/echo"

[tools.broken]
kind = "scripted"
effect = "read"
fail = "the partner is down"
"#
    )
}

/// `run B --format json --otlp BASE` as a child of the agent's span.
fn run_traced(p: &Project, b: &std::path::Path, base: &str) -> std::process::Output {
    p.cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--format",
            "json",
            "--otlp",
            base,
        ])
        .env("TRACEPARENT", format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01"))
        .output()
        .unwrap()
}

#[test]
fn spans_reach_the_collector_under_the_agents_trace_and_tools_join_it() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    let b = p.write(
        "b.yaml",
        "- { id: call_cmd, tool: cmd }\n- { id: call_web, tool: web, args: { q: 1 } }\n- { id: call_bad, tool: broken }\n",
    );
    let out = run_traced(&p, &b, &server.base);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let exports = server.requests_to("/v1/traces");
    assert_eq!(exports.len(), 1, "one export");
    assert_eq!(
        exports[0].headers.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );
    let req = ExportTraceServiceRequest::decode(exports[0].raw.as_slice()).expect("OTLP protobuf");
    let resource = req.resource_spans[0].resource.as_ref().unwrap();
    assert!(resource
        .attributes
        .iter()
        .any(|kv| kv.key == "service.name"
            && matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()), Some(Any::StringValue(s)) if s == "flux-tools")));
    let spans: Vec<Span> = req
        .resource_spans
        .iter()
        .flat_map(|r| r.scope_spans.iter().flat_map(|s| s.spans.clone()))
        .collect();
    assert_eq!(spans.len(), 4, "the run and one per call");
    assert!(spans.iter().all(|s| hex(&s.trace_id) == AGENT_TRACE));
    let run = spans.iter().find(|s| s.name == "flux-tools run").unwrap();
    assert_eq!(
        hex(&run.parent_span_id),
        AGENT_SPAN,
        "the run is the agent's child"
    );
    let by_call: HashMap<String, &Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .map(|s| (attrs(s)["gen_ai.tool.call.id"].clone(), s))
        .collect();
    assert_eq!(by_call.len(), 3);
    for (id, tool) in [
        ("call_cmd", "cmd"),
        ("call_web", "web"),
        ("call_bad", "broken"),
    ] {
        let s = by_call[id];
        let a = attrs(s);
        assert_eq!(s.name, format!("execute_tool {tool}"));
        assert_eq!(a["gen_ai.operation.name"], "execute_tool");
        assert_eq!(a["gen_ai.tool.name"], tool);
        assert_eq!(a["flux_tools.attempts"], "1");
        assert_eq!(s.parent_span_id, run.span_id, "{id} is the run's child");
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
    }
    let bad = attrs(by_call["call_bad"]);
    assert_eq!(bad["flux_tools.status"], "error");
    assert_eq!(bad["error.type"], "tool_error");
    assert_eq!(
        by_call["call_bad"].status.as_ref().unwrap().code,
        2,
        "ERROR"
    );
    assert_eq!(attrs(by_call["call_cmd"])["flux_tools.status"], "ok");

    // Each tool was handed its own call's span, in the agent's trace.
    let r = results(&doc);
    let expect = |id: &str| format!("00-{AGENT_TRACE}-{}-01", hex(&by_call[id].span_id));
    assert_eq!(r[0]["output"]["tp"], expect("call_cmd"));
    assert_eq!(r[1]["output"]["traceparent"], expect("call_web"));
}

#[test]
fn no_collector_means_no_export_and_a_dead_one_costs_only_a_warning() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    let b = p.write("b.yaml", "- { id: c, tool: cmd }\n");
    // No --otlp, no OTEL_EXPORTER_OTLP_ENDPOINT: the agent's context is passed on as it came.
    let tp = format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01");
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--format", "json"])
        .env("TRACEPARENT", &tp)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results(&doc)[0]["output"]["tp"], tp);
    assert!(server.requests_to("/v1/traces").is_empty());

    // A collector nobody listens on: the run succeeds, with a warning.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--format", "json"])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: the run's spans could not be exported"),
        "{stderr}"
    );
}

#[test]
fn an_mcp_tool_is_handed_its_calls_span_in_meta() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let meta_log = dir.path().join("meta.log");
    let manifest = crate::mcp::own_manifest(&log).replace(
        "env = { MCP_TEST_LOG = ",
        &format!(
            "env = {{ MCP_TEST_META_LOG = \"{}\", MCP_TEST_LOG = ",
            meta_log.display()
        ),
    );
    assert!(manifest.contains("MCP_TEST_META_LOG"));
    let p = Project::new(&manifest);
    let b = p.write(
        "b.yaml",
        "- { id: m1, tool: sleep, args: { ms: 1, tag: t1 } }\n",
    );
    let out = run_traced(&p, &b, &server.base);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req = ExportTraceServiceRequest::decode(server.requests_to("/v1/traces")[0].raw.as_slice())
        .unwrap();
    let call = req.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .find(|s| s.name == "execute_tool sleep")
        .cloned()
        .unwrap();
    let expect = format!("00-{AGENT_TRACE}-{}-01", hex(&call.span_id));
    let logged = std::fs::read_to_string(&meta_log).unwrap();
    let meta = logged
        .lines()
        .find(|l| l.starts_with("meta t1 "))
        .expect("meta logged");
    assert!(
        meta.contains(&format!("\"traceparent\":\"{expect}\"")),
        "{meta}"
    );
}
