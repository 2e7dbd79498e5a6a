//! A client's `_meta.idempotencyKey` through three replicas on one Redis: a retry through any
//! replica makes no second call — it waits for the first, gets its recorded answer, or (its
//! replica killed mid-call) `indeterminate` for a write that is not idempotent.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Project, Redis};
use crate::serve::{log_lines, raw_post, raw_response, wait_for_line, HttpGateway};

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

/// A session of the gateway at `addr` (initialized).
fn session(addr: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (head, _) = raw_response(raw_post(addr, None, init));
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let _ = raw_response(raw_post(addr, Some(&id), initialized));
    id
}

/// Call `keyed` with `tag` and idempotency key `key` on a new session of `addr`: the JSON
/// text of its `result` (as the gateway wrote it), or the whole body when there is none.
fn call(addr: &str, key: &str, tag: &str) -> String {
    let s = session(addr);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"keyed","arguments":{{"tag":"{tag}"}},"_meta":{{"idempotencyKey":"{key}"}}}}}}"#
    );
    let (_, body) = raw_response(raw_post(addr, Some(&s), &body));
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
    assert!(refused.contains("must be 1 to 256 bytes long"), "{refused}");
    assert!(starts(&log, "long").is_empty());
}
