//! A client's `_meta.idempotencyKey` through three replicas on one Redis: a retry through any
//! replica makes no second call — it waits for the first, gets its recorded answer, or (its
//! replica killed mid-call) `indeterminate` for a write that is not idempotent.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Project, Redis};
use crate::serve::{log_lines, raw_post_with, raw_response, wait_for_line, HttpGateway};

/// A write (not idempotent) that logs `start TAG KEY`, takes 1 s, and answers with the time
/// it ended (so two runs of it never answer alike).
fn keyed_project() -> (Project, std::path::PathBuf) {
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = p.write(
        "keyed.sh",
        &format!(
            "#!/bin/sh\necho \"start $1 $FLUX_IDEMPOTENCY_KEY\" >> '{log}'\nsleep 1\necho \"{{\\\"tag\\\": \\\"$1\\\", \\\"at\\\": $(date +%s%N)}}\"\n",
            log = log.display()
        ),
    );
    p.write(
        "tools.toml",
        &format!("[concurrency]\nmax_concurrent_tools = 64\n\n[tools.keyed]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"{}\", \"{{tag}}\"]\neffect = \"write\"\nconcurrent_writes = true\n[tools.keyed.args]\ntag = {{ type = \"string\", required = true }}\n", script.display()),
    );
    (p, log)
}

/// A session of the gateway at `addr` (initialized), as the bearer of `token` if any.
pub(crate) fn session(addr: &str, token: Option<&str>) -> String {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (head, _) = raw_response(post(addr, token, None, init));
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let _ = raw_response(post(addr, token, Some(&id), initialized));
    id
}

/// One POST to `/mcp`, with the bearer `token` if any.
pub(crate) fn post(
    addr: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> std::net::TcpStream {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Host", addr)];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    raw_post_with(addr, session, body, &headers)
}

/// Call `keyed` with `tag` and idempotency key `key` on a new session of `addr`: the JSON
/// text of its `result` (as the gateway wrote it), or the whole body when there is none.
fn call(addr: &str, key: &str, tag: &str) -> String {
    call_as(addr, None, key, tag)
}

/// [`call`] as the bearer of `token`.
fn call_as(addr: &str, token: Option<&str>, key: &str, tag: &str) -> String {
    let s = session(addr, token);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"keyed","arguments":{{"tag":"{tag}"}},"_meta":{{"idempotencyKey":"{key}"}}}}}}"#
    );
    let (_, body) = raw_response(post(addr, token, Some(&s), &body));
    let answer = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|l| l.contains("\"id\":5"))
        .unwrap_or(&body)
        .to_string();
    let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
    match v.get("result") {
        Some(r) => r.to_string(),
        None => answer,
    }
}

fn starts(log: &std::path::Path, tag: &str) -> Vec<String> {
    log_lines(log)
        .into_iter()
        .filter(|l| l.starts_with(&format!("start {tag} ")))
        .collect()
}

#[test]
fn a_clients_idempotency_key_makes_one_call_through_any_of_three_replicas() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let (p, log) = keyed_project();
    let store = ["--lane-store", redis.url.as_str()];
    let lease = [("FLUX_TOOLS_LEASE_MS", "1000")];
    let mut gws: Vec<HttpGateway> = (0..3)
        .map(|_| HttpGateway::start(&p, &store, &lease))
        .collect();
    let addrs: Vec<String> = gws.iter().map(HttpGateway::addr).collect();

    // A retry after completion, through another replica: the recorded answer, byte for byte,
    // and no second call. The upstream saw the client's key.
    let first = call(&addrs[0], "k-done", "done");
    assert!(first.contains("\"isError\":false"), "{first}");
    let again = call(&addrs[2], "k-done", "done");
    assert_eq!(again, first, "the recorded answer");
    assert_eq!(starts(&log, "done"), ["start done k-done"]);

    // 20 concurrent attempts of one key, spread over the replicas: one call.
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let addr = addrs[i % 3].clone();
                s.spawn(move || call(&addr, "k-twenty", "twenty"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(starts(&log, "twenty").len(), 1, "{:?}", log_lines(&log));
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    assert!(answers[0].contains("\"isError\":false"), "{}", answers[0]);

    // The same key for other arguments is refused, and nothing runs.
    let other = call(&addrs[1], "k-done", "other");
    assert!(
        other.contains("was used for a call with other arguments"),
        "{other}"
    );
    assert!(starts(&log, "other").is_empty());

    // Replica 1 is SIGKILLed mid-call: the retry through replica 2 makes no second call
    // (the write is not idempotent and may have landed) and says so.
    let addr0 = addrs[0].clone();
    let inflight = std::thread::spawn(move || call(&addr0, "k-killed", "killed"));
    wait_for_line(&log, "start killed ");
    let _ = gws[0].child.kill();
    let _ = gws[0].child.wait();
    let _ = inflight.join();
    let t = Instant::now();
    let retry = call(&addrs[1], "k-killed", "killed");
    assert!(retry.contains("indeterminate"), "{retry}");
    assert!(retry.contains("\"isError\":true"), "{retry}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // ... and every later retry hears the same.
    assert_eq!(call(&addrs[2], "k-killed", "killed"), retry);
    assert_eq!(starts(&log, "killed").len(), 1, "{:?}", log_lines(&log));
    drop(gws);
}

#[test]
fn with_the_local_store_a_key_is_remembered_by_its_process_and_a_call_without_one_is_new() {
    let (p, log) = keyed_project();
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    let first = call(&addr, "k1", "one");
    assert_eq!(call(&addr, "k1", "one"), first);
    assert_eq!(starts(&log, "one").len(), 1);
    // A key too long to keep is refused before anything runs.
    let long = "x".repeat(300);
    let refused = call(&addr, &long, "long");
    assert!(
        refused.contains("must be a string of 1 to 256 bytes"),
        "{refused}"
    );
    assert!(starts(&log, "long").is_empty());
    // A key that is not a string is refused too, never ignored (the call would run unkeyed).
    let s = session(&addr, None);
    let body = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"keyed","arguments":{"tag":"num"},"_meta":{"idempotencyKey":5}}}"#;
    let (_, text) = raw_response(post(&addr, None, Some(&s), body));
    assert!(
        text.contains("must be a string of 1 to 256 bytes"),
        "{text}"
    );
    assert!(starts(&log, "num").is_empty(), "{:?}", log_lines(&log));
}

#[test]
fn one_key_from_two_tenants_is_two_intents_and_neither_sees_the_others_answer() {
    let (p, log) = keyed_project();
    let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve.tokens]\nacme = \"${{env:ACME}}\"\nbeta = \"${{env:BETA}}\"\n\n{text}"),
    );
    let env = [("ACME", "tok-a"), ("BETA", "tok-b")];
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &env);
    let addr = gw.addr();
    let acme = call_as(&addr, Some("tok-a"), "shared-key", "t");
    assert!(acme.contains("\"isError\":false"), "{acme}");
    assert_eq!(call_as(&addr, Some("tok-a"), "shared-key", "t"), acme);
    assert_eq!(starts(&log, "t").len(), 1, "acme's retry is acme's answer");
    // beta's same key is beta's own intent: a call of its own, with its own answer.
    let beta = call_as(&addr, Some("tok-b"), "shared-key", "t");
    assert!(beta.contains("\"isError\":false"), "{beta}");
    assert_ne!(beta, acme, "beta never gets acme's recorded answer");
    // Each tool call saw its tenant's key: a tool that dedupes by key keeps them apart.
    assert_eq!(
        starts(&log, "t"),
        ["start t acme:shared-key", "start t beta:shared-key"]
    );
    // Nor is beta refused for "other arguments" when acme used the key for something else.
    let beta_other = call_as(&addr, Some("tok-b"), "acme-only", "u");
    let acme_first = call_as(&addr, Some("tok-a"), "acme-only", "v");
    assert!(!beta_other.contains("other arguments"), "{beta_other}");
    assert!(!acme_first.contains("other arguments"), "{acme_first}");
}
