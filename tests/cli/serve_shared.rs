//! 2025-era HTTP sessions on a shared lane store (Redis): three replicas, and any of them
//! serves any request of a session — behind a round-robin proxy with no stickiness (Debian's
//! nginx), after the replica that opened it is SIGKILLed, and never to another tenant; its
//! limits are one budget over the replicas.

use std::io::Write;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{repo, skip, Nginx, Project, Redis};
use crate::serve::{
    client, finish, http, log_lines, logged_manifest, logging_tool, peak_in_flight, python,
    raw_response, HttpGateway,
};
use crate::serve_keys::{post, session};

/// Three replicas of one project on one Redis (`env` for each), and the tools' log.
fn replicas(p: &Project, redis: &Redis, env: &[(&str, &str)]) -> Vec<HttpGateway> {
    let store = ["--lane-store", redis.url.as_str()];
    (0..3).map(|_| HttpGateway::start(p, &store, env)).collect()
}

/// The SDK 2.x client making `n` calls of `logged` through `url`, or `None` (skipped).
fn modern_client(url: &str, n: usize) -> Option<std::process::Child> {
    let py = repo().join("target/mcp2-venv/bin/python");
    if !py.exists() {
        skip(
            "the Python mcp SDK 2.x is not installed at target/mcp2-venv",
            "python3 -m venv target/mcp2-venv && target/mcp2-venv/bin/pip install 'mcp==2.3.0'",
        );
        return None;
    }
    let child = Command::new(py)
        .arg(repo().join("tests/fixtures/mcp_modern.py"))
        .args([
            url,
            "accept",
            "logged",
            r#"{"tag": "m{i}"}"#,
            &n.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the SDK 2.x client");
    Some(child)
}

/// Every call of a client's `many` answer succeeded, and it listed `logged`.
fn all_made(out: &Value, n: usize) {
    assert!(
        out["tools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("logged"))),
        "{out}"
    );
    let results = out["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), n, "{out}");
    for r in &results {
        assert_eq!(r["isError"], false, "{r}");
    }
}

#[test]
fn two_sdk_generations_through_round_robin_over_three_replicas_make_every_call_in_their_lanes() {
    let (Some(py), Some(redis)) = (python(), Redis::start()) else {
        return;
    };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    logged_manifest(&p, &script, "per_tool = { logged = 3 }", "");
    let gws = replicas(&p, &redis, &[]);
    let addrs: Vec<String> = gws.iter().map(HttpGateway::addr).collect();
    let Some(proxy) = Nginx::start(&addrs) else {
        return;
    };
    let Some(new) = modern_client(&proxy.url, 50) else {
        return;
    };
    let old = client(
        &py,
        &http(&proxy.url),
        &["many", "logged", "50", r#"{"tag": "o{i}"}"#],
    );
    let old = finish(old);
    let out = new.wait_with_output().expect("the SDK 2.x client ends");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    all_made(&old, 50);
    all_made(&new, 50);
    assert_eq!(new["version"], "2026-07-28", "{new}");

    // The proxy spread the requests over all three (round robin: each its third).
    let ups = proxy.upstreams();
    for a in &addrs {
        let n = ups.iter().filter(|u| *u == a).count();
        assert!(
            n * 4 >= ups.len(),
            "{a} served {n} of {}: {ups:?}",
            ups.len()
        );
    }
    // The lane held across the replicas: at most 3 calls at once, and it was used.
    let (peak, starts) = peak_in_flight(&log_lines(&log));
    assert_eq!(starts, 100);
    assert_eq!(peak, 3, "{:?}", log_lines(&log));
}

/// A DELETE of session `id` at `addr`, as the bearer of `token`: the status line.
fn delete(addr: &str, token: &str, id: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let req = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nMcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let (head, _) = raw_response(s);
    head.lines().next().unwrap_or_default().to_string()
}

/// A call of `logged` on session `id` at `addr` as the bearer of `token`: the status line
/// and the body.
fn call(addr: &str, token: &str, id: &str, tag: &str) -> (String, String) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"logged","arguments":{{"tag":"{tag}"}}}}}}"#
    );
    let (head, body) = raw_response(post(addr, Some(token), Some(id), &body));
    (head.lines().next().unwrap_or_default().to_string(), body)
}

#[test]
fn a_session_is_served_by_any_replica_outlives_the_one_that_opened_it_and_is_its_tenants_alone() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    logged_manifest(&p, &script, "", "");
    let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve.tokens]\nacme = \"${{env:ACME}}\"\nbeta = \"${{env:BETA}}\"\n\n[serve.session]\nmax_calls = 5\n\n{text}"),
    );
    let mut gws = replicas(&p, &redis, &[("ACME", "tok-a"), ("BETA", "tok-b")]);
    let addrs: Vec<String> = gws.iter().map(HttpGateway::addr).collect();

    // Opened on replica 0, called on 1 and 2.
    let id = session(&addrs[0], Some("tok-a"));
    for (i, addr) in addrs.iter().enumerate() {
        let (status, body) = call(addr, "tok-a", &id, &format!("r{i}"));
        assert!(status.contains(" 200"), "replica {i}: {status} {body}");
        assert!(body.contains(r#""isError":false"#), "replica {i}: {body}");
    }
    // Another tenant's token finds no such session, on any replica, and calls nothing.
    for addr in &addrs {
        let (status, body) = call(addr, "tok-b", &id, "beta");
        assert!(status.contains(" 404"), "{status} {body}");
    }
    // The replica that opened it is SIGKILLed: the session carries on elsewhere.
    let _ = gws[0].child.kill();
    let _ = gws[0].child.wait();
    let (status, body) = call(&addrs[1], "tok-a", &id, "after");
    assert!(
        status.contains(" 200") && body.contains(r#""isError":false"#),
        "{status} {body}"
    );
    // Its `max_calls = 5` is one budget over the replicas: the fifth call is made, the sixth
    // refused.
    let (_, body) = call(&addrs[2], "tok-a", &id, "five");
    assert!(body.contains(r#""isError":false"#), "{body}");
    let (_, body) = call(&addrs[1], "tok-a", &id, "six");
    assert!(
        body.contains(r#""isError":true"#) && body.contains("made its 5 calls"),
        "{body}"
    );
    // Ended on replica 2, it is ended on replica 1 too (which serves it now).
    assert!(delete(&addrs[2], "tok-a", &id).contains(" 200"));
    let (status, body) = call(&addrs[1], "tok-a", &id, "ended");
    assert!(status.contains(" 404"), "{status} {body}");
    let tags: Vec<String> = log_lines(&log)
        .iter()
        .filter_map(|l| l.strip_prefix("start ").and_then(|l| l.split(' ').next()))
        .map(str::to_string)
        .collect();
    assert_eq!(tags, ["r0", "r1", "r2", "after", "five"]);
}

/// A JSON-RPC request `method` with `params` on session `id` at `addr`: the status line and
/// the body.
fn request(addr: &str, id: &str, method: &str, params: Value) -> (String, String) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (head, body) = raw_response(post(addr, None, Some(id), &body.to_string()));
    (head.lines().next().unwrap_or_default().to_string(), body)
}

/// Session `id`'s event stream at `addr` (a GET), read until it carries `needle` or `wait`
/// passes: whether it did, and what it said.
fn stream_says(addr: &str, id: &str, needle: &str, wait: std::time::Duration) -> (bool, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let req = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let until = std::time::Instant::now() + wait;
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < until && !seen.contains(needle) {
        let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(500)));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
    }
    (seen.contains(needle), seen)
}

#[test]
fn a_resource_subscribed_through_a_replica_that_died_is_still_told_through_another() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let Some(manifest) = crate::serve_whole::everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let mut gws = replicas(&p, &redis, &[]);
    let (a0, a1) = (gws[0].addr(), gws[1].addr());
    let id = session(&a0, None);
    let uri = "ev+demo://resource/dynamic/text/1";
    let (status, body) = request(&a0, &id, "resources/subscribe", json!({"uri": uri}));
    assert!(
        status.contains(" 200") && !body.contains("\"error\""),
        "{status} {body}"
    );

    // The replica it subscribed through dies; its server starts telling of updates on another.
    let _ = gws[0].child.kill();
    let _ = gws[0].child.wait();
    let toggle = json!({"name": "ev_toggle-subscriber-updates", "arguments": {}});
    let (status, body) = request(&a1, &id, "tools/call", toggle);
    assert!(status.contains(" 200"), "{status} {body}");
    let (told, said) = stream_says(&a1, &id, uri, std::time::Duration::from_secs(20));
    assert!(told, "no update of {uri} on the session's stream: {said}");
}
