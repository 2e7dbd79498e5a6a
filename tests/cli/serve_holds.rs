//! The gateway under careless and hostile clients: what a raw client sends on stdio and HTTP
//! is answered as JSON-RPC says, a session's calls keep the order they came in, a signal
//! lets calls finish and a client that leaves takes its calls with it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::Project;
use crate::serve::{flux_bin, log_lines};

/// A gateway on stdio driven line by line.
pub(crate) struct StdioGateway {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl StdioGateway {
    /// Start it in `p` and initialize a session.
    pub(crate) fn start(p: &Project, extra: &[&str]) -> StdioGateway {
        StdioGateway::start_in(p.path(), &[], extra)
    }

    /// Start it in folder `dir`, with global options `global` (`--manifest`) and options
    /// of `mcp serve` `extra`.
    pub(crate) fn start_in(dir: &std::path::Path, global: &[&str], extra: &[&str]) -> StdioGateway {
        StdioGateway::start_with(dir, (global, extra), Stdio::null())
    }

    /// Start it with its stderr going to `stderr`.
    fn start_with(
        dir: &std::path::Path,
        (global, extra): (&[&str], &[&str]),
        stderr: Stdio,
    ) -> StdioGateway {
        StdioGateway::launch(dir, (global, extra), stderr, "2025-06-18")
    }

    /// Start it in `p` with a client that asks for protocol `version`.
    pub(crate) fn start_speaking(p: &Project, version: &str) -> StdioGateway {
        StdioGateway::launch(p.path(), (&[], &[]), Stdio::null(), version)
    }

    fn launch(
        dir: &std::path::Path,
        (global, extra): (&[&str], &[&str]),
        stderr: Stdio,
        version: &str,
    ) -> StdioGateway {
        let mut child = Command::new(flux_bin())
            .current_dir(dir)
            .args(global)
            .args(["mcp", "serve"])
            .args(if extra.contains(&"--lane-store") {
                &[][..]
            } else {
                &["--lane-store", "memory"][..]
            })
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start the gateway");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut gw = StdioGateway {
            stdin: child.stdin.take(),
            child,
            lines,
        };
        let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
        gw.send(&init.to_string());
        let init = gw
            .recv(Duration::from_secs(20))
            .expect("initialize answered");
        assert_eq!(init["id"], "init", "{init}");
        gw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        gw
    }

    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("write a line");
        stdin.flush().expect("flush");
    }

    /// A tools/call request.
    pub(crate) fn call(&mut self, id: impl Into<Value>, tool: &str, args: Value) {
        let msg = json!({"jsonrpc": "2.0", "id": id.into(), "method": "tools/call", "params": {"name": tool, "arguments": args}});
        self.send(&msg.to_string());
    }

    /// The next message within `wait`.
    pub(crate) fn recv(&self, wait: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(wait).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
    }

    /// Every message that comes within `span`.
    pub(crate) fn collect_for(&self, span: Duration) -> Vec<Value> {
        let until = Instant::now() + span;
        std::iter::from_fn(|| self.recv(until.saturating_duration_since(Instant::now()))).collect()
    }

    /// Every message until `wait` passes with none.
    pub(crate) fn drain(&self, wait: Duration) -> Vec<Value> {
        std::iter::from_fn(|| self.recv(wait)).collect()
    }

    /// Close stdin (the client is gone).
    pub(crate) fn hang_up(&mut self) {
        self.stdin = None;
    }
}

impl Drop for StdioGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command tool `job` that logs `start TAG` and `end TAG` (and its pid) around a sleep of
/// `ms` milliseconds; `effect` and `backend` as given.
fn job_manifest(p: &Project, effect: &str) -> std::path::PathBuf {
    let log = p.path().join("job.log");
    p.write(
        "job.sh",
        &format!(
            "#!/bin/sh\necho \"start $1 $$\" >> '{log}'\nsleep \"$2\"\necho \"end $1\" >> '{log}'\necho \"done $1\"\n",
            log = log.display()
        ),
    );
    p.write(
        "tools.toml",
        &format!(
            r#"[concurrency]
max_concurrent_tools = 8

[tools.job]
kind = "command"
command = ["/bin/sh", "job.sh", "{{tag}}", "{{secs}}"]
effect = "{effect}"
backend = "db"
idempotent = true
[tools.job.args]
tag = {{ type = "string", required = true }}
secs = {{ type = "string", required = true }}
"#
        ),
    );
    log
}

fn by_id(msgs: &[Value], id: &Value) -> Option<Value> {
    msgs.iter().find(|m| &m["id"] == id).cloned()
}

#[test]
fn stdio_answers_each_bad_line_with_its_json_rpc_error_and_serves_on() {
    let p = Project::new("");
    job_manifest(&p, "read");
    let mut gw = StdioGateway::start(&p, &[]);
    gw.send("{this is not json");
    gw.send(r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#);
    gw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{}}}"#);
    gw.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"job","arguments":"tag=a"}}"#);
    gw.call(5, "job", json!({"tag": "ok", "secs": "0"}));
    let msgs = gw.drain(Duration::from_secs(3));
    let codes: Vec<(Value, Value)> = msgs
        .iter()
        .map(|m| (m["id"].clone(), m["error"]["code"].clone()))
        .collect();
    assert_eq!(
        &codes[..4],
        &[
            (Value::Null, json!(-32700)),
            (Value::Null, json!(-32600)),
            (json!(3), json!(-32602)),
            (json!(4), json!(-32602)),
        ],
        "{msgs:?}"
    );
    let ok = by_id(&msgs, &json!(5)).expect("the good call is answered");
    assert_eq!(ok["result"]["isError"], false, "{ok}");
}

#[test]
fn a_call_cancelled_while_queued_over_stdio_gets_no_response() {
    let p = Project::new("");
    let log = job_manifest(&p, "read");
    let mut gw = StdioGateway::start(&p, &["--max-concurrent-tools", "1"]);
    gw.call(1, "job", json!({"tag": "first", "secs": "2"}));
    // The first holds the only slot before the second comes (two reads may start in either
    // order; on a loaded machine the second could take the slot first).
    crate::serve::wait_for_line(&log, "start first");
    gw.call(2, "job", json!({"tag": "queued", "secs": "0"}));
    std::thread::sleep(Duration::from_millis(200));
    gw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"changed my mind"}}"#);
    gw.call(3, "job", json!({"tag": "third", "secs": "0"}));
    let msgs = gw.drain(Duration::from_secs(3));
    assert!(by_id(&msgs, &json!(1)).is_some(), "{msgs:?}");
    assert!(by_id(&msgs, &json!(3)).is_some(), "{msgs:?}");
    assert_eq!(
        by_id(&msgs, &json!(2)),
        None,
        "a cancelled call is not answered"
    );
    assert!(
        !log_lines(&log).iter().any(|l| l.contains("queued")),
        "{:?}",
        log_lines(&log)
    );
}

#[test]
fn a_sessions_writes_start_in_the_order_they_came_on_the_wire() {
    let p = Project::new("");
    let log = job_manifest(&p, "write");
    let mut gw = StdioGateway::start(&p, &[]);
    let rounds = 100;
    for r in 0..rounds {
        for w in 0..3 {
            gw.call(
                r * 3 + w,
                "job",
                json!({"tag": format!("r{r}w{w}"), "secs": "0"}),
            );
        }
    }
    let mut answered = 0;
    let until = Instant::now() + Duration::from_secs(120);
    while answered < rounds * 3 && Instant::now() < until {
        if gw.recv(Duration::from_secs(10)).is_some() {
            answered += 1;
        }
    }
    assert_eq!(answered, rounds * 3);
    let starts: Vec<String> = log_lines(&log)
        .iter()
        .filter_map(|l| {
            l.strip_prefix("start ")?
                .split(' ')
                .next()
                .map(String::from)
        })
        .collect();
    let wire: Vec<String> = (0..rounds)
        .flat_map(|r| (0..3).map(move |w| format!("r{r}w{w}")))
        .collect();
    assert_eq!(starts, wire);
}

/// A plain call is answered by the stdio wire itself; one with an idempotency key goes
/// through rmcp's handler. On one wire, the two ways keep the wire's order of writes, each call
/// gets its one answer, and a call with a progress token hears it is queued before its answer.
#[test]
fn plain_and_keyed_calls_on_one_stdio_wire_keep_its_order_and_each_gets_one_answer() {
    let p = Project::new("");
    let log = job_manifest(&p, "write");
    let mut gw = StdioGateway::start(&p, &[]);
    let n = 40;
    for i in 0..n {
        let args = json!({"tag": format!("w{i}"), "secs": if i == 0 { "0.4" } else { "0" }});
        let meta = match i % 4 {
            1 => json!({"idempotencyKey": format!("key-{i}")}),
            2 => json!({"progressToken": format!("p{i}")}),
            _ => json!({}),
        };
        let msg = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "job", "arguments": args, "_meta": meta}});
        gw.send(&msg.to_string());
    }
    let mut msgs = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while msgs
        .iter()
        .filter(|m: &&Value| m.get("id").is_some())
        .count()
        < n
        && Instant::now() < until
    {
        msgs.extend(gw.recv(Duration::from_secs(10)));
    }
    msgs.extend(gw.drain(Duration::from_millis(300)));
    for i in 0..n {
        let answers: Vec<&Value> = msgs.iter().filter(|m| m["id"] == json!(i)).collect();
        assert_eq!(answers.len(), 1, "call {i}: {msgs:?}");
        let text = answers[0]["result"]["content"][0]["text"].as_str();
        assert_eq!(text, Some(format!("done w{i}").as_str()), "{}", answers[0]);
    }
    // The first write holds the backend for 0.4 s: the calls with a token hear they wait,
    // before their answers.
    let position = |pred: &dyn Fn(&Value) -> bool| msgs.iter().position(pred);
    let said = position(&|m| m["params"]["progressToken"] == "p2").expect("p2 heard");
    let answered = position(&|m| m["id"] == json!(2)).expect("2 answered");
    assert!(said < answered, "{msgs:?}");
    let starts: Vec<String> = log_lines(&log)
        .iter()
        .filter_map(|l| {
            l.strip_prefix("start ")?
                .split(' ')
                .next()
                .map(String::from)
        })
        .collect();
    let wire: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
    assert_eq!(starts, wire);
}

/// The short way writes what rmcp's handler writes: for a client of each protocol, a plain
/// call's answer (and an unknown tool's error) is the line a call with an idempotency key
/// (rmcp's way) gets, but for its id — `resultType` included or left out alike.
#[test]
fn over_stdio_the_short_way_answers_as_rmcps_handler_does_at_every_protocol() {
    let p = Project::new("");
    p.write(
        "tools.toml",
        "[tools.inline]\nkind = \"scripted\"\neffect = \"read\"\noutput = { n = 1 }\n",
    );
    for version in ["2024-11-05", "2025-06-18", "2025-11-25", "2026-07-28"] {
        let mut gw = StdioGateway::start_speaking(&p, version);
        for (id, name) in [(1, "inline"), (2, "nope")] {
            for (way, meta) in [
                ("short", json!({})),
                ("rmcp", json!({"idempotencyKey": format!("k{id}")})),
            ] {
                let msg = json!({"jsonrpc": "2.0", "id": format!("{way}-{id}"), "method": "tools/call",
                    "params": {"name": name, "arguments": {}, "_meta": meta}});
                gw.send(&msg.to_string());
            }
        }
        let mut msgs = gw.drain(Duration::from_millis(1500));
        assert_eq!(msgs.len(), 4, "{version}: {msgs:?}");
        for m in &mut msgs {
            m["id"] = json!(m["id"].as_str().unwrap_or_default().rsplit('-').next());
        }
        for id in ["1", "2"] {
            let both: Vec<&Value> = msgs.iter().filter(|m| m["id"] == id).collect();
            assert_eq!(both.len(), 2, "{version}: {msgs:?}");
            assert_eq!(both[0], both[1], "{version}");
        }
        let answer = msgs.iter().find(|m| m["id"] == "1").expect("answered");
        assert_eq!(answer["result"]["structuredContent"]["n"], 1, "{answer}");
        // A stdio session speaks `2025-11-25` at most (the gateway's answer to a client that
        // asks for `2026-07-28`), whose results carry no `resultType`.
        assert!(answer["result"].get("resultType").is_none(), "{answer}");
    }
}

#[test]
fn on_sigterm_over_stdio_a_call_in_flight_finishes_and_the_gateway_exits_0() {
    let p = Project::new("");
    let log = job_manifest(&p, "read");
    let mut gw = StdioGateway::start(&p, &["--grace", "10s"]);
    gw.call(1, "job", json!({"tag": "long", "secs": "2.5"}));
    let until = Instant::now() + Duration::from_secs(10);
    while !log_lines(&log).iter().any(|l| l.starts_with("start long")) {
        assert!(Instant::now() < until, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(gw.child.id() as i32, libc::SIGTERM);
    }
    let answer = gw
        .recv(Duration::from_secs(8))
        .expect("the call is answered");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "done long",
        "{answer}"
    );
    let status = gw.child.wait().expect("the gateway exits");
    assert_eq!(status.code(), Some(0));
}

/// Whether process `pid` is alive (a zombie counts as gone).
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_stdio_gateway_whose_client_leaves_is_gone_with_its_tools_within_a_second() {
    let p = Project::new("");
    let log = job_manifest(&p, "read");
    let mut gw = StdioGateway::start(&p, &[]);
    gw.call(1, "job", json!({"tag": "hung", "secs": "60"}));
    let until = Instant::now() + Duration::from_secs(10);
    let tool = loop {
        if let Some(pid) = log_lines(&log)
            .iter()
            .find_map(|l| l.strip_prefix("start hung ")?.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < until, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let gateway = gw.child.id() as i32;
    let left = Instant::now();
    gw.hang_up();
    while (alive(gateway) || alive(tool)) && left.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        let _ = gw.child.try_wait();
    }
    let took = left.elapsed();
    assert!(!alive(tool), "the tool outlived its gateway");
    assert!(
        took < Duration::from_secs(1),
        "the gateway and its tool took {took:?} to go"
    );
}

/// One raw HTTP request on a connection of its own: the status, the head (lower-cased) and
/// the body.
pub(crate) fn request(
    addr: &str,
    (method, path): (&str, &str),
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    s.write_all(format!("{req}\r\n{body}").as_bytes())
        .expect("send");
    let mut all = String::new();
    let _ = s.read_to_string(&mut all);
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_string())
}

/// Open a session (initialize, initialized) with `headers`; its id.
pub(crate) fn open_session(addr: &str, headers: &[(&str, &str)]) -> String {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (code, head, body) = request(addr, ("POST", "/mcp"), headers, init);
    assert_eq!(code, 200, "{head}\n{body}");
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let mut with = headers.to_vec();
    with.push(("Mcp-Session-Id", &id));
    with.push(("Mcp-Protocol-Version", "2025-06-18"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (code, _, _) = request(addr, ("POST", "/mcp"), &with, initialized);
    assert_eq!(code, 202);
    id
}

/// A scripted tool `who` and `[serve]` lines as given.
fn scripted_manifest(p: &Project, serve: &str) {
    p.write(
        "tools.toml",
        &format!(
            "[serve]\n{serve}\n\n[tools.who]\nkind = \"scripted\"\neffect = \"read\"\noutput = {{ ok = true }}\n\n[tools.peek]\nkind = \"scripted\"\neffect = \"read\"\nrequires_approval = true\noutput = {{ seen = true }}\n[tools.peek.args]\nwhat = {{ type = \"string\", required = true }}\n"
        ),
    );
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn http_answers_bad_bodies_as_json_rpc_says_deletes_with_200_and_the_page_cannot_be_framed() {
    let p = Project::new("");
    scripted_manifest(&p, "");
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let s = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let post = |body: &str| request(&addr, ("POST", "/mcp"), &s, body);
    let (code, _, body) = post("{this is not json");
    assert_eq!(
        (code, json_of(&body)["error"]["code"].clone()),
        (400, json!(-32700)),
        "{body}"
    );
    let (code, _, body) = post(r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#);
    assert_eq!(
        (code, json_of(&body)["error"]["code"].clone()),
        (400, json!(-32600)),
        "{body}"
    );
    let (code, _, body) =
        post(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":7}}"#);
    let e = json_of(&body);
    assert_eq!(
        (code, e["id"].clone(), e["error"]["code"].clone()),
        (200, json!(9), json!(-32602)),
        "{body}"
    );
    let (code, _, body) = post(
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"who","arguments":{}}}"#,
    );
    assert_eq!(
        (code, json_of(&body)["result"]["isError"].clone()),
        (200, json!(false)),
        "{body}"
    );
    let (code, head, _) = request(&addr, ("DELETE", "/mcp"), &s, "");
    assert_eq!(code, 200, "{head}");
    let (code, _, _) = post(
        r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"who","arguments":{}}}"#,
    );
    assert_eq!(code, 404, "a deleted session is gone");
    let (code, head, _) = request(&addr, ("GET", "/"), &[], "");
    assert_eq!(code, 200);
    assert!(head.contains("x-frame-options: deny"), "{head}");
    assert!(
        head.contains("content-security-policy: frame-ancestors 'none'"),
        "{head}"
    );
}

/// The first snapshot `/status/events` sends with `token`.
pub(crate) fn first_snapshot(addr: &str, token: &str) -> Value {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let req = format!(
        "GET /status/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = std::io::Read::read(&mut s, &mut buf).expect("a snapshot");
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(rest) = text.split_once("data: ").map(|x| x.1) {
            if let Some((json, _)) = rest.split_once("\n\n") {
                return json_of(json);
            }
        }
    }
}

#[test]
fn a_tenants_token_cannot_use_or_delete_another_tenants_session_nor_see_its_calls() {
    let p = Project::new("");
    scripted_manifest(
        &p,
        "admin_token = \"${env:ADMIN}\"\n[serve.tokens]\nacme = \"${env:ACME}\"\nbeta = \"${env:BETA}\"",
    );
    let env = [
        ("ADMIN", "admin-secret"),
        ("ACME", "acme-secret"),
        ("BETA", "beta-secret"),
    ];
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "memory"], &env);
    let addr = gw.addr();
    let (acme, beta) = (
        ("Authorization", "Bearer acme-secret"),
        ("Authorization", "Bearer beta-secret"),
    );
    let a = open_session(&addr, &[acme]);
    let b = open_session(&addr, &[beta]);
    let with = |auth: (&'static str, &'static str), id: &str| {
        vec![
            auth,
            ("Mcp-Session-Id", id),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<Vec<_>>()
    };
    let send = |h: &[(String, String)], method: &str, body: &str| {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        request(&addr, (method, "/mcp"), &h, body)
    };
    let call =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"who","arguments":{}}}"#;
    let (code, _, _) = send(&with(beta, &a), "POST", call);
    assert_eq!(code, 404, "beta's token does not reach acme's session");
    let (code, _, _) = send(&with(beta, &a), "DELETE", "");
    assert_eq!(code, 404, "nor delete it");
    let (code, _, body) = send(&with(acme, &a), "POST", call);
    assert_eq!(
        (code, json_of(&body)["result"]["isError"].clone()),
        (200, json!(false)),
        "{body}"
    );
    let (code, _, _) = send(&with(beta, &b), "POST", call);
    assert_eq!(code, 200);
    // acme parks a call for approval: its arguments are acme's business.
    let park = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"peek","arguments":{"what":"acme-private"}}}"#;
    let parked =
        crate::serve::raw_post_with(&addr, Some(&a), park, &[("Host", addr.as_str()), acme]);
    parked.set_read_timeout(Some(Duration::from_secs(1))).ok();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let all = first_snapshot(&addr, "admin-secret");
        if all["approvals"].as_array().is_some_and(|a| !a.is_empty()) {
            assert!(all.to_string().contains("acme-private"), "{all}");
            let tenants: Vec<&str> = all["recent"]
                .as_array()
                .expect("recent")
                .iter()
                .filter_map(|r| r["tenant"].as_str())
                .collect();
            assert!(
                tenants.contains(&"acme") && tenants.contains(&"beta"),
                "{all}"
            );
            break;
        }
        assert!(Instant::now() < until, "the call was never parked: {all}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mine = first_snapshot(&addr, "beta-secret");
    let text = mine.to_string();
    assert!(!text.contains("acme"), "beta sees acme's calls: {text}");
    assert_eq!(mine["recent"].as_array().map(Vec::len), Some(1), "{text}");
    drop(parked);
}

/// An HTTP gateway started with at most `fds` open descriptors.
fn gateway_under_fd_limit(p: &Project, fds: u64) -> crate::serve::HttpGateway {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(flux_bin());
    cmd.current_dir(p.path()).args([
        "mcp",
        "serve",
        "--lane-store",
        "memory",
        "--http",
        "127.0.0.1:0",
    ]);
    // SAFETY: setrlimit between fork and exec, on the child's own limits.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: fds,
                rlim_max: fds,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    crate::serve::HttpGateway::spawned(cmd)
}

/// `n` connections from `from` (another loopback address) to `addr` that send `first` and
/// then nothing; kept open while the returned runtime and streams live.
fn silent_connections(
    from: &str,
    addr: &str,
    n: usize,
    first: &'static [u8],
) -> (tokio::runtime::Runtime, Vec<tokio::net::TcpStream>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let from: std::net::IpAddr = from.parse().expect("an address");
    let to: std::net::SocketAddr = addr.parse().expect("an address");
    let streams = rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..n {
            let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
            socket.bind((from, 0).into()).expect("bind");
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await
            else {
                continue;
            };
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(first).await;
            out.push(s);
        }
        out
    });
    (rt, streams)
}

/// What each connection got within `wait`: `Some(text)` (it was answered or closed), `None`
/// (still open and silent).
fn outcomes(
    rt: &tokio::runtime::Runtime,
    streams: &mut [tokio::net::TcpStream],
    wait: Duration,
) -> Vec<Option<String>> {
    rt.block_on(async {
        let reads = streams.iter_mut().map(|s| async move {
            use tokio::io::AsyncReadExt;
            let mut buf = Vec::new();
            match tokio::time::timeout(wait, s.read_to_end(&mut buf)).await {
                Ok(_) => Some(String::from_utf8_lossy(&buf).to_string()),
                Err(_) => None,
            }
        });
        futures_util::future::join_all(reads).await
    })
}

/// The gateway's CPU time so far (user + system, in clock ticks).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

#[test]
fn held_connections_are_closed_within_the_header_timeout_and_do_not_take_the_gateway_down() {
    let p = Project::new("");
    scripted_manifest(
        &p,
        "[serve.limits]\nheader_timeout = \"2s\"\nconnections_per_client = 40",
    );
    let gw = gateway_under_fd_limit(&p, 120);
    let addr = gw.addr();
    let before = cpu_ticks(gw.child.id());
    // 300 connections from another address that never finish their headers: past 40 they are
    // told 429 at once; the 40 held are closed by the header timeout.
    let (rt, mut held) =
        silent_connections("127.0.0.2", &addr, 300, b"GET /healthz HTTP/1.1\r\nHost: x");
    let (code, _, body) = request(&addr, ("GET", "/healthz"), &[], "");
    assert_eq!((code, body.trim()), (200, "ok"), "healthz while held");
    let id = open_session(&addr, &[]);
    let s = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let call =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"who","arguments":{}}}"#;
    let (code, _, body) = request(&addr, ("POST", "/mcp"), &s, call);
    assert_eq!(
        (code, json_of(&body)["result"]["isError"].clone()),
        (200, json!(false)),
        "{body}"
    );
    let got = outcomes(&rt, &mut held, Duration::from_millis(1000));
    let refused = got
        .iter()
        .filter(|g| g.as_deref().is_some_and(|t| t.contains(" 429 ")))
        .count();
    // Held: still silent, or — on a machine slow enough that the header timeout has passed
    // by now — closed without a word.
    let held_n = (got.iter())
        .filter(|g| g.as_deref().is_none_or(str::is_empty))
        .count();
    assert!(
        refused + held_n == got.len() && held_n <= 40,
        "refused {refused}, held {held_n} of {}",
        got.len()
    );
    assert!(refused >= 200, "refused {refused}");
    // Within the header timeout (and a margin) every held connection is closed.
    let got = outcomes(&rt, &mut held, Duration::from_secs(4));
    assert!(
        got.iter().all(Option::is_some),
        "{} still open",
        got.iter().filter(|g| g.is_none()).count()
    );
    let ticks = cpu_ticks(gw.child.id()) - before;
    assert!(ticks < 100, "the gateway burned {ticks} ticks of CPU");
}

#[test]
fn at_the_descriptor_limit_the_oldest_silent_connection_makes_room() {
    let p = Project::new("");
    scripted_manifest(&p, "[serve.limits]\nheader_timeout = \"60s\"");
    let gw = gateway_under_fd_limit(&p, 64);
    let addr = gw.addr();
    let before = cpu_ticks(gw.child.id());
    // More silent connections than the gateway has descriptors for.
    let (_rt, _held) = silent_connections("127.0.0.3", &addr, 150, b"GET /");
    for _ in 0..5 {
        let (code, _, body) = request(&addr, ("GET", "/healthz"), &[], "");
        assert_eq!((code, body.trim()), (200, "ok"));
    }
    std::thread::sleep(Duration::from_secs(1));
    let ticks = cpu_ticks(gw.child.id()) - before;
    assert!(ticks < 100, "the gateway burned {ticks} ticks of CPU");
}

/// How many calls `flux-tools approvals` lists as waiting.
fn parked_count(p: &Project) -> usize {
    let out = p
        .cmd()
        .args(["approvals", "--format", "json"])
        .output()
        .expect("approvals");
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

/// The gateway's thread count.
fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_flood_of_calls_parked_for_approval_holds_no_threads_and_freezes_nothing() {
    let p = Project::new("");
    scripted_manifest(&p, "[serve.limits]\nparked_per_session = 1000");
    let mut gw = StdioGateway::start(&p, &[]);
    for i in 0..600 {
        gw.call(i, "peek", json!({"what": format!("w{i}")}));
    }
    // Every one of them is parked before the plain call is sent.
    let until = Instant::now() + Duration::from_secs(30);
    while parked_count(&p) < 600 {
        assert!(Instant::now() < until, "{} parked", parked_count(&p));
        std::thread::sleep(Duration::from_millis(200));
    }
    let asked = Instant::now();
    gw.call("plain", "who", json!({}));
    let answer = loop {
        let m = gw
            .recv(Duration::from_secs(30))
            .expect("the plain call is answered");
        if m["id"] == "plain" {
            break m;
        }
    };
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "answered after {:?}",
        asked.elapsed()
    );
    let n = threads(gw.child.id());
    assert!(n < 64, "the gateway has {n} threads with 600 calls parked");
}

#[test]
fn calls_parked_past_a_sessions_limit_are_refused_and_a_parked_call_tells_its_progress() {
    let p = Project::new("");
    scripted_manifest(&p, "[serve.limits]\nparked_per_session = 2");
    let mut gw = StdioGateway::start(&p, &[]);
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "peek", "arguments": {"what": "a"}, "_meta": {"progressToken": "t1"}}});
    gw.send(&msg.to_string());
    let msgs = gw.collect_for(Duration::from_millis(2500));
    let told: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == "t1")
        .collect();
    assert!(told.len() >= 2, "told {told:?}");
    let said = told[0]["params"]["message"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("waiting for approval: flux-tools approve "),
        "{said}"
    );
    // One more may wait; the next is refused at once.
    gw.call(2, "peek", json!({"what": "b"}));
    gw.call(3, "peek", json!({"what": "c"}));
    let answers: Vec<Value> = gw
        .collect_for(Duration::from_millis(1500))
        .into_iter()
        .filter(|m| m.get("id").is_some())
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    let text = answers[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("approval_denied:") && text.contains("parked_per_session = 2"),
        "{answers:?}"
    );
    assert_eq!(by_id(&msgs, &json!(1)), None, "the first still waits");
}

#[test]
fn two_tools_a_model_would_know_by_one_name_are_an_error_naming_both() {
    let p = Project::new(
        "[tools.\"db.getOrders\"]\nkind = \"scripted\"\neffect = \"read\"\noutput = {}\n\n[tools.db_getOrders]\nkind = \"scripted\"\neffect = \"read\"\noutput = {}\n",
    );
    let out = p.cmd().arg("validate").output().expect("validate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("tool `db.getOrders` is offered to models as `db_getOrders`, as tool `db_getOrders` (line 6, column 8)")
            && err.contains("tools.toml:1:8"),
        "{err}"
    );
    let out = p
        .cmd()
        .args(["mcp", "serve"])
        .write_stdin("")
        .output()
        .expect("serve");
    assert!(!out.status.success(), "the gateway does not start");
    assert!(String::from_utf8_lossy(&out.stderr).contains("offered to models as `db_getOrders`"));
}

#[test]
fn an_upstream_servers_relative_command_runs_from_the_manifests_folder_wherever_the_gateway_starts()
{
    let p = Project::new("");
    p.write(
        "server.sh",
        &format!(
            "#!/bin/sh\nexec '{}' \"$@\"\n",
            crate::mcp::own_server().display()
        ),
    );
    std::fs::set_permissions(
        p.path().join("server.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    p.write(
        "tools.toml",
        "[mcp_servers.t]\ncommand = [\"./server.sh\"]\nenv = { MCP_TEST_LOG = \"upstream.log\" }\n\n[tools.sleep]\nkind = \"mcp\"\nserver = \"t\"\n",
    );
    let manifest = p.path().join("tools.toml");
    let manifest = manifest.to_str().expect("a path");
    // As a desktop client starts it: from `/`.
    let mut gw = StdioGateway::start_in(std::path::Path::new("/"), &["--manifest", manifest], &[]);
    gw.call(1, "sleep", json!({"ms": 0, "tag": "rooted"}));
    let answer = gw.recv(Duration::from_secs(20)).expect("an answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let log = p.path().join("upstream.log");
    assert!(
        log_lines(&log).iter().any(|l| l.contains("rooted")),
        "the server ran in the manifest's folder: {:?}",
        log_lines(&log)
    );
}

#[test]
fn a_calls_argument_errors_are_named_all_at_once() {
    let p = Project::new("");
    job_manifest(&p, "read");
    let mut gw = StdioGateway::start(&p, &[]);
    gw.call(1, "job", json!({"secs": 5, "extra": true}));
    let answer = gw.recv(Duration::from_secs(10)).expect("an answer");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("invalid_call:"), "{answer}");
    for problem in [
        "required argument `tag` is missing",
        "argument `secs` should be a string",
        "unknown argument `extra`",
    ] {
        assert!(text.contains(problem), "{problem}: {text}");
    }
    assert!(!text.contains("gives no argument"), "said twice: {text}");
}

/// Every live process whose process group is `pgid`.
fn members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // state, ppid, pgrp
        if f.first() != Some(&"Z") && f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            out.push(pid);
        }
    }
    out
}

/// A command tool in a lane of two that starts a child of its own (in its group) and logs,
/// as it starts, how many of its kind are running (itself included).
fn lane_of_two(p: &Project) -> std::path::PathBuf {
    let log = p.path().join("lane.log");
    let marker = format!("lane-job-{}", std::process::id());
    p.write(
        "lane.sh",
        &format!(
            "#!/bin/sh\n# {marker}\nsleep 600 &\nn=$(pgrep -f '{marker}' | wc -l)\necho \"start $1 $$ $n\" >> '{log}'\nsleep \"$2\"\necho \"end $1\" >> '{log}'\necho ok\n",
            log = log.display()
        ),
    );
    p.write(
        "tools.toml",
        "[concurrency]\nper_tool = { lane = 2 }\n\n[tools.lane]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"lane.sh\", \"{tag}\", \"{secs}\"]\neffect = \"read\"\n[tools.lane.args]\ntag = { type = \"string\", required = true }\nsecs = { type = \"string\", required = true }\n",
    );
    log
}

/// The (pid, how many were running) of each start in the lane's log.
fn lane_starts(log: &std::path::Path) -> Vec<(String, i32, usize)> {
    log_lines(log)
        .iter()
        .filter_map(|l| {
            let mut w = l.strip_prefix("start ")?.split_whitespace();
            Some((
                w.next()?.to_string(),
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
            ))
        })
        .collect()
}

fn wait_starts(log: &std::path::Path, n: usize) -> Vec<(String, i32, usize)> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let s = lane_starts(log);
        if s.len() >= n {
            return s;
        }
        assert!(Instant::now() < until, "{s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill -9 `gateway`, then: within a second no process of the tools' groups is left.
fn killed_leaves_nothing(gateway: &mut Child, tools: &[i32]) {
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(gateway.id() as i32, libc::SIGKILL);
    }
    let _ = gateway.wait();
    let until = Instant::now() + Duration::from_secs(1);
    let left = loop {
        let left: Vec<i32> = tools.iter().flat_map(|&g| members(g)).collect();
        if left.is_empty() || Instant::now() > until {
            break left;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(left.is_empty(), "left running after kill -9: {left:?}");
}

#[test]
fn a_gateway_killed_with_calls_in_flight_leaves_no_process_and_its_lane_is_never_oversubscribed() {
    let p = Project::new("");
    let log = lane_of_two(&p);
    // Over stdio.
    let mut gw = StdioGateway::start(&p, &["--lane-store", "local"]);
    gw.call(1, "lane", json!({"tag": "s1", "secs": "60"}));
    gw.call(2, "lane", json!({"tag": "s2", "secs": "60"}));
    let started: Vec<i32> = wait_starts(&log, 2).iter().map(|s| s.1).collect();
    killed_leaves_nothing(&mut gw.child, &started);
    // Over HTTP, restarted on the same lane store: never more than two at once.
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "local"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let calls: Vec<_> = (0..2)
        .map(|i| {
            let (addr, id) = (addr.clone(), id.clone());
            std::thread::spawn(move || {
                let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"lane","arguments":{{"tag":"h{i}","secs":"60"}}}}}}"#);
                let h = [("Mcp-Session-Id", id.as_str()), ("Mcp-Protocol-Version", "2025-06-18")];
                request(&addr, ("POST", "/mcp"), &h, &body)
            })
        })
        .collect();
    let started: Vec<i32> = wait_starts(&log, 4)[2..].iter().map(|s| s.1).collect();
    let mut gw = gw;
    killed_leaves_nothing(&mut gw.child, &started);
    for c in calls {
        let _ = c.join();
    }
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "local"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let h = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (addr, id) = (addr.clone(), id.clone());
            std::thread::spawn(move || {
                let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"lane","arguments":{{"tag":"r{i}","secs":"0.3"}}}}}}"#);
                let h = [("Mcp-Session-Id", id.as_str()), ("Mcp-Protocol-Version", "2025-06-18")];
                request(&addr, ("POST", "/mcp"), &h, &body)
            })
        })
        .collect();
    for t in threads {
        let (code, _, _) = t.join().expect("a call");
        assert_eq!(code, 200);
    }
    let _ = h;
    let starts = lane_starts(&log);
    assert_eq!(starts.len(), 7, "{starts:?}");
    assert!(
        starts.iter().all(|s| s.2 <= 2),
        "more than two at once: {starts:?}"
    );
}

#[test]
fn an_upstream_server_dies_with_its_killed_gateway() {
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    // A server that starts a helper of its own, as many do.
    let server = crate::mcp::own_server().display().to_string();
    p.write(
        "server.sh",
        &format!("#!/bin/sh\nsleep 600 &\necho $! > helper.pid\nexec '{server}'\n"),
    );
    let manifest = crate::serve::upstream(&log, &starts, "")
        .replace(&format!("[\"{server}\"]"), "[\"/bin/sh\", \"server.sh\"]");
    p.write("tools.toml", &manifest);
    let mut gw = StdioGateway::start(&p, &[]);
    gw.call(1, "sleep", json!({"ms": 0, "tag": "up"}));
    let answer = gw.recv(Duration::from_secs(20)).expect("an answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let server: Vec<i32> = log_lines(&starts)
        .iter()
        .filter_map(|l| l.strip_prefix("started ")?.trim().parse().ok())
        .collect();
    assert_eq!(server.len(), 1, "{server:?}");
    let helper: i32 = std::fs::read_to_string(p.path().join("helper.pid"))
        .expect("the helper's pid")
        .trim()
        .parse()
        .expect("a pid");
    killed_leaves_nothing(&mut gw.child, &server);
    assert!(!alive(helper), "the server's helper outlived the gateway");
}

#[test]
fn a_read_whose_upstream_dies_mid_call_is_retried_on_a_new_server() {
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let once = p.path().join("crashed-once");
    let m = crate::serve::upstream(&log, &starts, "")
        .replace(
            "MCP_TEST_START_LOG",
            &format!("MCP_TEST_CRASH_ONCE = \"{}\", MCP_TEST_START_LOG", once.display()),
        )
        .replace(
            "[tools.write]",
            "[tools.crash]\nkind = \"mcp\"\nserver = \"t\"\neffect = \"read\"\nidempotent = true\nretries = 2\napproval = \"none\"\n\n[tools.write]",
        );
    p.write("tools.toml", &m);
    let mut gw = StdioGateway::start(&p, &[]);
    gw.call(1, "crash", json!({}));
    let answer = gw.recv(Duration::from_secs(30)).expect("an answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("survived")),
        "{answer}"
    );
    assert_eq!(
        log_lines(&starts).len(),
        2,
        "started again: {:?}",
        log_lines(&starts)
    );
}

/// The Python of each `mcp` SDK version the tests run (1.x, 2.x), or a skip notice.
fn sdk_pythons() -> Vec<(&'static str, std::path::PathBuf)> {
    let mut out = Vec::new();
    for (version, venv) in [("1.x", "target/sqlite-venv"), ("2.x", "target/mcp2-venv")] {
        let py = crate::common::repo().join(venv).join("bin/python");
        if py.exists() {
            out.push((version, py));
        } else {
            crate::common::skip(
                &format!(
                    "the Python mcp SDK {version} is not installed at {}",
                    py.display()
                ),
                &format!(
                    "python3 -m venv {venv} && {venv}/bin/pip install 'mcp{}'",
                    if version == "1.x" { "<2" } else { "==2.3.0" }
                ),
            );
        }
    }
    out
}

#[test]
fn an_idle_session_is_let_go_and_both_sdk_versions_carry_on_after_it() {
    let p = Project::new("");
    scripted_manifest(&p, "[serve.limits]\nsession_idle = \"1s\"");
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let pythons = sdk_pythons();
    for (version, py) in &pythons {
        let out = Command::new(py)
            .arg(crate::common::repo().join("tests/fixtures/mcp_idle.py"))
            .args([gw.url.as_str(), "who", "2.5"])
            .output()
            .expect("the SDK client");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = json_of(text.trim());
        assert_eq!(
            r,
            json!({"first": false, "after_idle": false, "tools": ["who", "peek"]}),
            "{version}"
        );
    }
    let (_, metrics) = crate::serve_ops::get(&gw, "/metrics", None);
    let reopened = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flux_tools_sessions_reopened_total "))
        .and_then(|n| n.trim().parse::<usize>().ok());
    assert_eq!(reopened, Some(pythons.len()), "{metrics}");
}

#[test]
fn sessions_past_the_limits_are_refused_with_a_clear_status_until_one_ends() {
    let p = Project::new("");
    scripted_manifest(
        &p,
        "[serve.tokens]\nacme = \"${env:ACME}\"\nbeta = \"${env:BETA}\"\n[serve.limits]\nsessions = 10\nsessions_per_tenant = 6",
    );
    let env = [("ACME", "acme-secret"), ("BETA", "beta-secret")];
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "memory"], &env);
    let addr = gw.addr();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let open = |token: &str| {
        let auth = format!("Bearer {token}");
        let (code, head, body) =
            request(&addr, ("POST", "/mcp"), &[("Authorization", &auth)], init);
        let id = head
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id:"))
            .map(|v| v.trim().to_string());
        (code, head, body, id)
    };
    let acme: Vec<String> = (0..6)
        .map(|_| open("acme-secret").3.expect("a session"))
        .collect();
    let (code, head, body, _) = open("acme-secret");
    assert_eq!(code, 429, "{head}");
    assert!(head.contains("retry-after: 5"), "{head}");
    assert!(body.contains("sessions_per_tenant"), "{body}");
    for _ in 0..4 {
        assert_eq!(open("beta-secret").0, 200);
    }
    let (code, _, body, _) = open("beta-secret");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("limit of 10 sessions"), "{body}");
    let h = [
        ("Authorization", "Bearer acme-secret"),
        ("Mcp-Session-Id", acme[0].as_str()),
    ];
    let (code, _, _) = request(&addr, ("DELETE", "/mcp"), &h, "");
    assert_eq!(code, 200);
    assert_eq!(
        open("beta-secret").0,
        200,
        "a place freed by a session that ended"
    );
}

#[test]
fn a_call_cancelled_over_http_gets_no_response() {
    let p = Project::new("");
    let log = job_manifest(&p, "read");
    let gw = crate::serve::HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let h = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let (a, i) = (addr.clone(), id.clone());
    let call = std::thread::spawn(move || {
        let h = [
            ("Mcp-Session-Id", i.as_str()),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ];
        let body = r#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"job","arguments":{"tag":"long","secs":"30"}}}"#;
        request(&a, ("POST", "/mcp"), &h, body)
    });
    let until = Instant::now() + Duration::from_secs(10);
    while !log_lines(&log).iter().any(|l| l.starts_with("start long")) {
        assert!(Instant::now() < until, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}}"#;
    let (code, _, _) = request(&addr, ("POST", "/mcp"), &h, cancel);
    assert_eq!(code, 202);
    let (code, head, body) = call.join().expect("the call's request");
    assert_eq!(code, 200, "{head}");
    assert!(
        !body.contains("\"id\":41"),
        "a cancelled call is not answered: {body}"
    );
}

/// A launcher that never reads the gateway's stderr slows nothing: 2,000 calls parked, each
/// said on stderr (far more than a pipe holds), and a plain call is still answered at once.
#[test]
fn a_stderr_nobody_reads_blocks_nothing() {
    let p = Project::new("");
    scripted_manifest(
        &p,
        "approval_timeout = \"1h\"\n\n[serve.limits]\nparked_per_session = 5000",
    );
    // A pipe whose reading end is held open and never read.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut gw = StdioGateway::start_with(p.path(), (&[], &[]), Stdio::from(writer));
    for i in 0..2000 {
        gw.call(i, "peek", json!({"what": format!("w{i}")}));
    }
    std::thread::sleep(Duration::from_millis(1500));
    gw.call("plain", "who", json!({}));
    let answered =
        std::iter::from_fn(|| gw.recv(Duration::from_secs(20))).find(|m| m["id"] == "plain");
    assert!(answered.is_some(), "the plain call was not answered");
    drop(reader);
}
