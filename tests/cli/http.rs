//! `http` tools against a real server: rate lanes, concurrency, 429/503 and Retry-After,
//! idempotency keys, broken servers, timeouts, and secrets that never leak.

use std::time::Duration;

use crate::common::{peak, results, wall_ms, Project};
use crate::http_server::TestServer;

fn manifest(base: &str, extra: &str) -> String {
    format!(
        r#"
[concurrency]
max_concurrent_tools = 64
[concurrency.per_tool]
slow = 3

[lanes.api]
rate = "20/s"
burst = 1

[tools.limited]
kind = "http"
effect = "read"
url = "{base}/echo"
lanes = ["api"]

[tools.slow]
kind = "http"
effect = "read"
url = "{base}/slow/{{ms}}"

[tools.get]
kind = "http"
effect = "read"
url = "{base}/echo/{{name}}"
query = ["limit"]

[tools.post]
kind = "http"
effect = "write"
idempotent = true
method = "POST"
url = "{base}/echo"
query = ["limit"]

[tools.once]
kind = "http"
effect = "read"
url = "{base}/once/{{code}}/{{key}}"
retries = 2

[tools.once_write_idem]
kind = "http"
effect = "write"
idempotent = true
method = "POST"
url = "{base}/once/503/{{key}}"
retries = 2

[tools.once_write]
kind = "http"
effect = "write"
method = "POST"
url = "{base}/once/503/{{key}}"
retries = 2

[tools.status]
kind = "http"
effect = "read"
url = "{base}/status/{{code}}"

[tools.text]
kind = "http"
effect = "read"
url = "{base}/text"

[tools.reset]
kind = "http"
effect = "read"
url = "{base}/reset"

[tools.garbage]
kind = "http"
effect = "read"
url = "{base}/garbage"

[tools.timing_out]
kind = "http"
effect = "read"
url = "{base}/slow/5000"
timeout = "300ms"
{extra}
"#
    )
}

#[test]
fn a_rate_lane_spaces_arrivals_at_the_partner() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let batch: String = (0..60).map(|_| "- tool: limited\n").collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let mut at: Vec<_> = server.requests_to("/echo").iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 60);
    at.sort();
    // 20/s with a burst of 1: any 21 consecutive arrivals span at least a second (minus jitter).
    for w in at.windows(21) {
        let span = w[20] - w[0];
        assert!(
            span >= Duration::from_millis(940),
            "21 requests within {span:?}"
        );
    }
    let wall = wall_ms(&doc);
    assert!(
        (2800..4500).contains(&wall),
        "60 calls at 20/s took {wall}ms"
    );
    assert!(doc["stats"]["rate_limit_waits"].as_u64().unwrap() >= 55);
}

#[test]
fn per_tool_limit_bounds_the_servers_concurrency() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let batch: String = (0..12)
        .map(|_| "- { tool: slow, args: { ms: 300 } }\n")
        .collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(server.peak_in_flight(), 3);
    assert_eq!(peak(&doc, "tool:slow"), 3);
    assert!(wall_ms(&doc) >= 1200);
}

#[test]
fn a_429_with_retry_after_is_waited_out_and_counted() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let (doc, code) = p.run_json("- { tool: once, args: { code: 429, key: k1 } }\n", &[]);
    assert_eq!(code, 0, "{doc}");
    let r = &results(&doc)[0];
    assert_eq!(r["attempts"], 2);
    assert_eq!(r["output"]["attempt"], 2);
    assert!(
        r["duration_ms"].as_u64().unwrap() >= 1000,
        "Retry-After: 1 was honoured"
    );
    assert_eq!(doc["stats"]["http_429"], 1);
    let reqs = server.requests_to("/once/429/k1");
    assert!(reqs[1].at - reqs[0].at >= Duration::from_millis(990));
}

#[test]
fn retried_idempotent_writes_keep_their_key_and_other_writes_are_not_retried() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let (doc, code) = p.run_json("- { tool: once_write_idem, args: { key: k2 } }\n- { tool: once_write, args: { key: k3 } }\n", &[]);
    assert_eq!(code, 1, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["status"], "ok");
    assert_eq!(r[0]["attempts"], 2);
    let sent = server.requests_to("/once/503/k2");
    assert_eq!(sent.len(), 2);
    let key = r[0]["idempotency_key"].as_str().unwrap();
    assert!(sent
        .iter()
        .all(|q| q.headers.get("idempotency-key").map(String::as_str) == Some(key)));
    assert_eq!(r[1]["status"], "error");
    assert_eq!(r[1]["error"]["kind"], "http_status");
    assert!(r[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("HTTP 503"));
    assert_eq!(
        server.requests_to("/once/503/k3").len(),
        1,
        "a non-idempotent write is sent once"
    );
}

#[test]
fn placeholders_are_encoded_query_and_body_are_split() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let (doc, code) = p.run_json(
        "- { tool: get, args: { name: \"a/../b?c=d#e\", limit: 5 } }\n- { tool: post, args: { limit: 2, note: hi } }\n- { tool: text }\n",
        &[],
    );
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["output"]["path"], "/echo/a%2F..%2Fb%3Fc%3Dd%23e");
    assert_eq!(r[0]["output"]["query"], "limit=5");
    assert_eq!(r[1]["output"]["method"], "POST");
    assert_eq!(r[1]["output"]["query"], "limit=2");
    assert_eq!(r[1]["output"]["body"], serde_json::json!({"note": "hi"}));
    assert_eq!(r[1]["output"]["idempotency_key"], r[1]["idempotency_key"]);
    assert_eq!(r[2]["output"], "plain text");
}

#[test]
fn broken_servers_are_errors_and_slow_ones_time_out() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, ""));
    let started = std::time::Instant::now();
    let (doc, code) = p.run_json("- tool: reset\n- tool: garbage\n- tool: timing_out\n- { tool: status, args: { code: 404 } }\n", &[]);
    assert_eq!(code, 1);
    assert!(started.elapsed() < Duration::from_secs(10), "nothing hung");
    let r = results(&doc);
    assert_eq!(r[0]["status"], "error");
    assert_eq!(r[0]["error"]["kind"], "http_error");
    assert_eq!(r[1]["status"], "error");
    assert_eq!(r[2]["status"], "timed_out");
    assert_eq!(
        r[2]["error"]["message"],
        "tool 'timing_out' exceeded its 300ms timeout"
    );
    assert_eq!(r[3]["error"]["kind"], "http_status");
    assert!(
        r[3]["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("HTTP 404 Not Found: server says 404"),
        "{}",
        r[3]
    );
}

#[test]
fn placeholders_cannot_choose_the_host() {
    let p = Project::new(
        "[tools.evil]\nkind = \"http\"\neffect = \"read\"\nurl = \"http://{host}/x\"\n",
    );
    let out = p.cmd().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("placeholder `{host}` is in the scheme or host"));
}

#[test]
fn secrets_never_appear_in_any_output() {
    let server = TestServer::start();
    let extra = format!(
        r#"
[tools.auth]
kind = "http"
effect = "read"
url = "{base}/status/500?key=${{env:FLUX_TEST_SECRET}}"
headers = {{ Authorization = "Bearer ${{env:FLUX_TEST_SECRET}}" }}

[tools.nowhere]
kind = "http"
effect = "read"
url = "http://127.0.0.1:9/x?key=${{env:FLUX_TEST_SECRET}}"
"#,
        base = server.base
    );
    let p = Project::new(&manifest(&server.base, &extra));
    let b = p.write("b.yaml", "- tool: auth\n- tool: nowhere\n");
    let secret = "s3cr3t-t0ken-value";
    for format in ["json", "jsonl", "table"] {
        let out = p
            .cmd()
            .args([
                "run",
                b.to_str().unwrap(),
                "--format",
                format,
                "--output",
                "res.json",
                "--progress",
                "always",
            ])
            .env("FLUX_TEST_SECRET", secret)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let all = format!(
            "{}{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(p.path().join("res.json")).unwrap()
        );
        assert!(
            !all.contains(secret),
            "the secret leaked with --format {format}: {all}"
        );
        assert!(all.contains("key=***"), "{all}");
    }
    // It was really sent.
    let got = server.requests_to("/status/500");
    assert_eq!(
        got[0].headers.get("authorization").map(String::as_str),
        Some("Bearer s3cr3t-t0ken-value")
    );
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .env("FLUX_TEST_SECRET", secret)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
}
