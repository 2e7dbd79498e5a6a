//! `flux-tools mcp serve` driven by MCP clients nobody here wrote: the Python `mcp` SDK
//! (`tests/fixtures/mcp_client.py`, in the `target/sqlite-venv` that `.ci/run` makes) over
//! stdio and Streamable HTTP, and the MCP Inspector's CLI (`target/inspector`, from npm).
//! Upstream is the project's own MCP test server, which logs each call with its own
//! request id.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::mcp::own_server;

/// The Python with the `mcp` SDK, or `None` (skipped with a notice, except in CI).
pub(crate) fn python() -> Option<PathBuf> {
    let path = repo().join("target/sqlite-venv/bin/python");
    if path.exists() {
        return Some(path);
    }
    crate::common::skip(
        &format!("the Python mcp SDK is not installed at {}", path.display()),
        "python3 -m venv target/sqlite-venv && target/sqlite-venv/bin/pip install 'mcp<2'",
    );
    None
}

/// The Python `mcp` SDK 2.x, or `None` (skipped with a notice, except in CI).
pub(crate) fn sdk2() -> Option<PathBuf> {
    let py = repo().join("target/mcp2-venv/bin/python");
    if py.exists() {
        return Some(py);
    }
    crate::common::skip(
        &format!(
            "the Python mcp SDK 2.x is not installed at {}",
            py.display()
        ),
        "python3 -m venv target/mcp2-venv && target/mcp2-venv/bin/pip install 'mcp==2.3.0'",
    );
    None
}

pub(crate) fn flux_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("flux-tools")
}

/// How a client reaches the gateway: launch it over stdio, or an HTTP URL (and a token).
pub(crate) fn stdio(p: &Project, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        "--stdio".to_string(),
        flux_bin().display().to_string(),
        "--manifest".into(),
        p.path().join("tools.toml").display().to_string(),
        "mcp".into(),
        "serve".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn http(url: &str) -> Vec<String> {
    vec!["--http".into(), url.into(), "-".into()]
}

/// Start the Python client; its JSON is read by [`finish`].
pub(crate) fn client(py: &Path, how: &[String], action: &[&str]) -> Child {
    Command::new(py)
        .arg(repo().join("tests/fixtures/mcp_client.py"))
        .args(how)
        .arg("--")
        .args(action)
        .env("CI", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python client")
}

pub(crate) fn finish(mut c: Child) -> Value {
    let mut out = String::new();
    let mut err = String::new();
    c.stdout.take().map(|mut s| s.read_to_string(&mut out));
    c.stderr.take().map(|mut s| s.read_to_string(&mut err));
    let status = c.wait().expect("client ends");
    assert!(status.success(), "the client failed: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("client JSON: {e}: {out}\n{err}"))
}

pub(crate) fn run_client(py: &Path, how: &[String], action: &[&str]) -> Value {
    finish(client(py, how, action))
}

/// A gateway on Streamable HTTP (a free loopback port); killed when dropped.
pub(crate) struct HttpGateway {
    pub(crate) child: Child,
    pub(crate) url: String,
    /// What it has said on stderr, before it listened and since.
    pub(crate) stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpGateway {
    pub(crate) fn start(p: &Project, extra: &[&str], env: &[(&str, &str)]) -> HttpGateway {
        let mut cmd = Command::new(flux_bin());
        cmd.current_dir(p.path())
            .args(["mcp", "serve", "--http", "127.0.0.1:0"])
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        HttpGateway::spawned(cmd)
    }

    /// Start `cmd` (an `mcp serve --http` command line) and wait until it listens.
    pub(crate) fn spawned(cmd: Command) -> HttpGateway {
        HttpGateway::try_spawned(cmd)
            .unwrap_or_else(|said| panic!("the gateway exited before listening: {said}"))
    }

    /// [`HttpGateway::spawned`]; `Err`: what the gateway said when it exited before listening.
    pub(crate) fn try_spawned(mut cmd: Command) -> Result<HttpGateway, String> {
        cmd.env("CI", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut gw = HttpGateway {
            child: cmd.spawn().expect("start the gateway"),
            url: String::new(),
            stderr: Default::default(),
        };
        let mut lines = BufReader::new(gw.child.stderr.take().expect("stderr"));
        let mut line = String::new();
        let mut said = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line).unwrap_or(0) == 0 {
                return Err(said);
            }
            said.push_str(&line);
            if let Some(rest) = line
                .trim()
                .strip_prefix("flux-tools mcp serve: listening on ")
            {
                gw.url = rest.to_string();
                // What it said before it listened is kept too (a lock's judgement at start).
                if let Ok(mut kept) = gw.stderr.lock() {
                    kept.push_str(&said);
                }
                // Keep draining stderr so the gateway never blocks on it.
                let said = gw.stderr.clone();
                std::thread::spawn(move || {
                    let mut line = String::new();
                    while lines.read_line(&mut line).unwrap_or(0) > 0 {
                        if let Ok(mut s) = said.lock() {
                            s.push_str(&line);
                        }
                        line.clear();
                    }
                });
                return Ok(gw);
            }
        }
    }

    pub(crate) fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The upstream test server's declaration and tools (`lanes` for every tool on it).
pub(crate) fn upstream(log: &Path, starts: &Path, lanes: &str) -> String {
    let mut m = format!(
        "[mcp_servers.t]\ncommand = [\"{}\"]\nenv = {{ MCP_TEST_LOG = \"{}\", MCP_TEST_START_LOG = \"{}\" }}\n",
        own_server().display(),
        log.display(),
        starts.display()
    );
    for t in ["sleep", "hang", "structured", "fail", "progress", "write"] {
        // `write` is destructive upstream: these tests run it without asking.
        let approval = if t == "write" {
            "approval = \"none\"\n"
        } else {
            ""
        };
        m.push_str(&format!(
            "\n[tools.{t}]\nkind = \"mcp\"\nserver = \"t\"\n{approval}{lanes}\n"
        ));
    }
    m
}

pub(crate) fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

pub(crate) fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn stdio_lists_tools_as_a_model_sees_them_and_answers_every_call() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let manifest = format!(
        r#"
[tools."text.echo"]
kind = "command"
command = ["echo", "{{text}}"]
effect = "read"
description = "Echo the text back"
[tools."text.echo".args]
text = {{ type = "string", required = true }}

[tools.count]
kind = "scripted"
effect = "write"
output = {{ rows = 3 }}
{}"#,
        upstream(&log, &starts, "")
    );
    p.write("tools.toml", &manifest);
    let how = stdio(&p, &["--lane-store", "memory"]);
    let tools = run_client(&py, &how, &["list"]);
    let by_name = |n: &str| -> Value {
        tools
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == n).cloned())
            .unwrap_or_else(|| panic!("no tool {n} in {tools}"))
    };
    let echo = by_name("text_echo");
    assert_eq!(echo["description"], "Echo the text back");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    let count = by_name("count");
    assert_eq!(count["annotations"]["readOnlyHint"], false);
    assert_eq!(count["annotations"]["destructiveHint"], true);
    // An upstream tool's own schema and annotations, verbatim.
    let sleep = by_name("sleep");
    assert_eq!(sleep["inputSchema"]["properties"]["ms"]["minimum"], 0);
    assert_eq!(sleep["annotations"]["idempotentHint"], true);
    assert_eq!(by_name("write")["annotations"]["destructiveHint"], true);

    let r = run_client(
        &py,
        &how,
        &["call", "text_echo", r#"{"text": "hi; rm -rf /"}"#],
    );
    assert_eq!(text(&r), "hi; rm -rf /", "{r}");
    assert_eq!(r["isError"], false);
    let r = run_client(&py, &how, &["call", "count", "{}"]);
    assert_eq!(r["structuredContent"], json!({"rows": 3}), "{r}");
    let r = run_client(&py, &how, &["call", "structured", "{}"]);
    assert_eq!(
        r["structuredContent"],
        json!({"answer": 42}),
        "passed through: {r}"
    );
    let r = run_client(&py, &how, &["call", "fail", "{}"]);
    assert_eq!(r["isError"], true);
    assert_eq!(
        text(&r),
        "the widget is broken",
        "the upstream's own answer: {r}"
    );
    let r = run_client(&py, &how, &["call", "text_echo", r#"{"text": 5}"#]);
    assert_eq!(r["isError"], true);
    assert!(text(&r).starts_with("invalid_call: "), "{r}");
    assert!(text(&r).contains("should be a string"), "{r}");
    let r = run_client(&py, &how, &["call", "text_ecko", "{}"]);
    let err = r["jsonrpc_error"].as_str().unwrap_or_default();
    assert!(
        err.contains("unknown tool `text_ecko`") && err.contains("text_echo"),
        "{r}"
    );
    // Seven gateways ran (each client lists first, which starts the upstream): one upstream
    // process each.
    assert_eq!(log_lines(&starts).len(), 7, "{:?}", log_lines(&starts));
}

/// The peak of calls in flight in a log of `start TAG NS` / `end TAG NS` lines written in
/// order under a lock.
pub(crate) fn peak_in_flight(lines: &[String]) -> (usize, usize) {
    let (mut now, mut peak, mut starts) = (0usize, 0usize, 0usize);
    for l in lines {
        if l.starts_with("start ") {
            now += 1;
            starts += 1;
            peak = peak.max(now);
        } else if l.starts_with("end ") {
            now = now.saturating_sub(1);
        }
    }
    (peak, starts)
}

/// A command tool that logs its start and end under a lock, sleeping 300 ms between.
pub(crate) fn logging_tool(p: &Project, log: &Path) -> PathBuf {
    p.write(
        "logged.sh",
        &format!(
            "#!/bin/sh\nexec 9>>'{log}.lock'\nflock 9; echo \"start $1 $(date +%s%N)\" >> '{log}'; flock -u 9\nsleep 0.3\nflock 9; echo \"end $1 $(date +%s%N)\" >> '{log}'; flock -u 9\necho done\n",
            log = log.display()
        ),
    )
}

/// A manifest whose one tool, `logged`, runs `script` (`concurrency` goes under
/// `[concurrency]`, `tool` into the tool's table).
pub(crate) fn logged_manifest(p: &Project, script: &Path, concurrency: &str, tool: &str) {
    p.write(
        "tools.toml",
        &format!(
            "[concurrency]\nmax_concurrent_tools = 32\n{concurrency}\n\n[tools.logged]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"{}\", \"{{tag}}\"]\neffect = \"read\"\n{tool}\n[tools.logged.args]\ntag = {{ type = \"string\", required = true }}\n",
            script.display()
        ),
    );
}

#[test]
fn two_stdio_gateways_and_an_http_client_share_one_tool_lane() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    logged_manifest(&p, &script, "per_tool = { logged = 3 }", "");
    let gw = HttpGateway::start(&p, &[], &[]);
    let how = stdio(&p, &[]);
    let clients = vec![
        client(&py, &how, &["burst", "logged", "20", r#"{"tag": "a{i}"}"#]),
        client(&py, &how, &["burst", "logged", "20", r#"{"tag": "b{i}"}"#]),
        client(
            &py,
            &http(&gw.url),
            &["burst", "logged", "20", r#"{"tag": "c{i}"}"#],
        ),
    ];
    let mut ok = 0;
    for c in clients {
        for r in finish(c).as_array().cloned().unwrap_or_default() {
            assert_eq!(r["isError"], false, "{r}");
            ok += 1;
        }
    }
    assert_eq!(ok, 60);
    let (peak, starts) = peak_in_flight(&log_lines(&log));
    assert_eq!(starts, 60);
    assert_eq!(
        peak, 3,
        "per_tool = 3 across three clients and two processes"
    );
}

#[test]
fn a_rate_lane_holds_across_gateway_processes() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    logged_manifest(
        &p,
        &script,
        "\n[lanes.api]\nrate = \"5/s\"\nburst = 1",
        "lanes = [\"api\"]",
    );
    let how = stdio(&p, &[]);
    let started = Instant::now();
    let clients: Vec<Child> = ["a", "b", "c"]
        .iter()
        .map(|t| {
            client(
                &py,
                &how,
                &["burst", "logged", "6", &format!(r#"{{"tag": "{t}{{i}}"}}"#)],
            )
        })
        .collect();
    for c in clients {
        for r in finish(c).as_array().cloned().unwrap_or_default() {
            assert_eq!(r["isError"], false, "{r}");
        }
    }
    let starts: Vec<u128> = log_lines(&log)
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u128>().ok())
        .map(|ns| ns / 1_000_000)
        .collect();
    assert_eq!(starts.len(), 18);
    // 18 calls at 5/s with a burst of 1: at least 17 intervals of 200 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(3200),
        "{:?}",
        started.elapsed()
    );
    for &s in &starts {
        // A 900 ms window (a margin for process start-up jitter) holds at most 5 starts.
        let n = starts.iter().filter(|&&t| t >= s && t < s + 900).count();
        assert!(n <= 5, "{n} starts within 900 ms of {s}: {starts:?}");
    }
}

fn one_lane_manifest(p: &Project) -> (PathBuf, PathBuf) {
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let m = format!(
        "[lanes.one]\nconcurrency = 1\n{}",
        upstream(&log, &starts, "lanes = [\"one\"]")
    );
    p.write("tools.toml", &m);
    (log, starts)
}

/// A cancel test's client, over stdio and over HTTP: what it printed and the server's log.
fn cancel_both_ways(action: &[&str], check: impl Fn(&str, &Value, &[String])) {
    let Some(py) = python() else { return };
    for way in ["stdio", "http"] {
        let p = Project::new("");
        let (log, _) = one_lane_manifest(&p);
        let gw = (way == "http").then(|| HttpGateway::start(&p, &["--lane-store", "memory"], &[]));
        let how = match &gw {
            Some(gw) => http(&gw.url),
            None => stdio(&p, &["--lane-store", "memory"]),
        };
        let mut args = vec!["cancel"];
        args.extend(action);
        let out = run_client(&py, &how, &args);
        check(way, &out, &log_lines(&log));
    }
}

#[test]
fn a_call_cancelled_while_queued_never_reaches_its_tool() {
    let action = [
        "sleep",
        r#"{"ms": 1200, "tag": "a"}"#,
        "sleep",
        r#"{"ms": 10, "tag": "b"}"#,
        "300",
        "second",
    ];
    cancel_both_ways(&action, |way, out, lines| {
        assert_eq!(out["other"]["isError"], false, "{way}: {out}");
        assert!(
            lines.iter().any(|l| l.starts_with("start a ")),
            "{way}: {lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains(" b ")),
            "{way}: b never reached the server: {lines:?}"
        );
    });
}

#[test]
fn an_in_flight_call_is_cancelled_upstream_under_its_own_id_and_the_next_starts() {
    let action = [
        "hang",
        r#"{"tag": "h"}"#,
        "sleep",
        r#"{"ms": 10, "tag": "q"}"#,
        "400",
        "first",
    ];
    cancel_both_ways(&action, |way, out, lines| {
        assert_eq!(
            out["other"]["isError"], false,
            "{way}: the queued call ran: {out}"
        );
        let field = |prefix: &str| -> Vec<String> {
            lines
                .iter()
                .find(|l| l.starts_with(prefix))
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .unwrap_or_else(|| panic!("{way}: no `{prefix}` line in {lines:?}"))
        };
        let started = field("start h ");
        let own_id = started[3].trim_start_matches("id=").to_string();
        let notified = field("cancel-notified ");
        assert_eq!(
            notified[1], own_id,
            "{way}: cancelled under the upstream request's own id: {lines:?}"
        );
        let cancelled = field("cancelled h ");
        assert_eq!(cancelled[2], format!("id={own_id}"));
        let at: u128 = cancelled[3].parse().expect("ms");
        let asked = out["cancelled_at_ms"].as_u64().expect("ms") as u128;
        assert!(
            at.saturating_sub(asked) < 200,
            "{way}: upstream cancelled {} ms after the client",
            at - asked
        );
        // The queued call went ahead once the lane was free (the server logs the
        // cancellation and the next start from two tasks of its own, in either order).
        assert!(
            lines.iter().any(|l| l.starts_with("start q ")),
            "{way}: the queued call started: {lines:?}"
        );
    });
}

#[test]
fn a_queued_call_gets_progress_and_an_upstreams_progress_is_relayed() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (log, _) = one_lane_manifest(&p);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let holder = client(
        &py,
        &http(&gw.url),
        &["call", "sleep", r#"{"ms": 5000, "tag": "hold"}"#],
    );
    let until = Instant::now() + Duration::from_secs(20);
    while !log_lines(&log).iter().any(|l| l.starts_with("start hold ")) {
        assert!(Instant::now() < until, "the holding call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_client(
        &py,
        &http(&gw.url),
        &["progress", "progress", r#"{"steps": 3}"#],
    );
    let _ = finish(holder);
    let seen = out["progress"].as_array().cloned().unwrap_or_default();
    let queued: Vec<&Value> = seen
        .iter()
        .filter(|n| {
            n["message"]
                .as_str()
                .unwrap_or_default()
                .contains("waiting for lane `lane:one`")
        })
        .collect();
    assert!(!queued.is_empty(), "{out}");
    assert!(
        queued[0]["at_ms"].as_u64().unwrap_or(u64::MAX) < 1000,
        "{out}"
    );
    assert!(queued.len() >= 2, "repeated while it waits: {out}");
    let steps: Vec<&str> = seen
        .iter()
        .filter_map(|n| n["message"].as_str())
        .filter(|m| m.starts_with("step "))
        .collect();
    assert_eq!(steps, ["step 1", "step 2", "step 3"], "{out}");
    assert_eq!(out["result"]["isError"], false);
}

#[test]
fn three_clients_of_one_gateway_share_one_upstream_process() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (_, starts) = one_lane_manifest(&p);
    p.write(
        "tools.toml",
        &std::fs::read_to_string(p.path().join("tools.toml"))
            .unwrap_or_default()
            .replace("lanes = [\"one\"]", ""),
    );
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let clients: Vec<Child> = (0..3)
        .map(|_| {
            client(
                &py,
                &http(&gw.url),
                &["burst", "sleep", "20", r#"{"ms": 20, "tag": "t{i}"}"#],
            )
        })
        .collect();
    for c in clients {
        let rs = finish(c);
        assert_eq!(rs.as_array().map(Vec::len), Some(20));
        assert!(
            rs.as_array()
                .into_iter()
                .flatten()
                .all(|r| r["isError"] == false),
            "{rs}"
        );
    }
    assert_eq!(log_lines(&starts).len(), 1, "{:?}", log_lines(&starts));
}

/// One raw HTTP request; the status line.
fn raw_status(addr: &str, headers: &[(&str, &str)]) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let mut req = format!("POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    if !headers.iter().any(|(k, _)| *k == "Host") {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = BufReader::new(s).read_line(&mut out);
    out.trim().to_string()
}

/// One raw HTTP POST to `/mcp` on a connection of its own (left open: the caller reads).
pub(crate) fn raw_post(addr: &str, session: Option<&str>, body: &str) -> std::net::TcpStream {
    raw_post_with(addr, session, body, &[("Host", addr)])
}

/// [`raw_post`] with headers of the caller's (`Host` among them).
pub(crate) fn raw_post_with(
    addr: &str,
    session: Option<&str>,
    body: &str,
    headers: &[(&str, &str)],
) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut req = format!("POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    if let Some(id) = session {
        req.push_str(&format!(
            "Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    s.write_all(format!("{req}\r\n{body}").as_bytes())
        .expect("send");
    s
}

/// A whole HTTP response: the head (lower-cased) and the body.
/// The JSON-RPC message of an HTTP answer's body (plain JSON, or an SSE `data:` line).
pub(crate) fn message_of(text: &str) -> Value {
    let line = text
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .find(|l| l.contains("\"jsonrpc\""))
        .unwrap_or(text);
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

pub(crate) fn raw_response(s: std::net::TcpStream) -> (String, String) {
    let mut all = String::new();
    let _ = BufReader::new(s).read_to_string(&mut all);
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (head.to_ascii_lowercase(), body.to_string())
}

#[test]
fn a_plain_http_call_is_answered_as_json_and_a_client_that_leaves_cancels_it_upstream() {
    let p = Project::new("");
    let (log, _) = one_lane_manifest(&p);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (head, _) = raw_response(raw_post(&addr, None, init));
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (head, _) = raw_response(raw_post(&addr, Some(&session), initialized));
    assert!(head.starts_with("http/1.1 202"), "{head}");
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":0,"tag":"j"}}}"#;
    let (head, body) = raw_response(raw_post(&addr, Some(&session), call));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // With a progress token and nothing to say before the answer: JSON too; with other
    // `_meta`, rmcp's way (an event stream).
    for (meta, kind) in [
        (r#"{"progressToken":"p1"}"#, "application/json"),
        (r#"{"progressToken":"p2","other":"x"}"#, "text/event-stream"),
    ] {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":0,"tag":"m"}},"_meta":{meta}}}}}"#
        );
        let (head, body) = raw_response(raw_post(&addr, Some(&session), &call));
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{meta}: {head}"
        );
        assert!(body.contains("\"isError\":false"), "{meta}: {body}");
    }
    // An unknown tool is a JSON-RPC error, as on rmcp's way.
    let typo =
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"slep","arguments":{}}}"#;
    let (_, body) = raw_response(raw_post(&addr, Some(&session), typo));
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // A known session's call is still refused from a foreign Host or Origin.
    let evil = r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":0,"tag":"evil"}}}"#;
    for headers in [
        vec![("Host", "evil.example")],
        vec![("Host", addr.as_str()), ("Origin", "http://evil.example")],
    ] {
        let (head, _) = raw_response(raw_post_with(&addr, Some(&session), evil, &headers));
        assert!(head.starts_with("http/1.1 403"), "{headers:?}: {head}");
    }
    assert!(
        !log_lines(&log).iter().any(|l| l.contains(" evil ")),
        "{:?}",
        log_lines(&log)
    );
    // A call whose client hangs up is cancelled upstream.
    let hang = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"hang","arguments":{"tag":"gone"}}}"#;
    let conn = raw_post(&addr, Some(&session), hang);
    wait_for_line(&log, "start gone ");
    drop(conn);
    wait_for_line(&log, "cancelled gone ");
    // The session goes on: its next call is answered.
    let (_, body) = raw_response(raw_post(&addr, Some(&session), call));
    assert!(body.contains("\"isError\":false"), "{body}");
}

#[test]
fn http_needs_a_valid_token_and_checks_host_and_origin_and_never_prints_the_token() {
    let Some(py) = python() else { return };
    let p = Project::new(
        r#"
[serve.tokens]
acme = "${env:ACME_TOKEN}"

[tools.who]
kind = "scripted"
effect = "read"
output = { ok = true }
"#,
    );
    let secret = "s3cr3t-token-value";
    let gw = HttpGateway::start(&p, &[], &[("ACME_TOKEN", secret)]);
    let addr = gw.addr();
    assert!(raw_status(&addr, &[]).contains(" 401 "), "no token");
    let wrong = "Bearer nope".to_string();
    assert!(raw_status(&addr, &[("Authorization", &wrong)]).contains(" 401 "));
    let good = format!("Bearer {secret}");
    assert!(raw_status(&addr, &[("Authorization", &good)]).contains(" 200 "));
    let evil_host = raw_status(
        &addr,
        &[("Authorization", &good), ("Host", "evil.example:80")],
    );
    assert!(
        !evil_host.contains(" 200 "),
        "a rebound Host is refused: {evil_host}"
    );
    let origin = raw_status(
        &addr,
        &[("Authorization", &good), ("Origin", "http://evil.example")],
    );
    assert!(
        !origin.contains(" 200 "),
        "a web page's Origin is refused: {origin}"
    );
    let how = vec![
        "--http".to_string(),
        gw.url.clone(),
        "-".into(),
        secret.into(),
    ];
    let r = run_client(&py, &how, &["call", "who", "{}"]);
    assert_eq!(r["structuredContent"], json!({"ok": true}), "{r}");
}

#[test]
fn the_inspector_cli_lists_and_calls_over_stdio_and_http() {
    let inspector = repo().join("target/inspector/node_modules/.bin/mcp-inspector");
    if !inspector.exists() {
        crate::common::skip(
            &format!(
                "the MCP Inspector is not installed at {}",
                inspector.display()
            ),
            "npm install --prefix target/inspector @modelcontextprotocol/inspector",
        );
        return;
    }
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    p.write("tools.toml", &upstream(&log, &starts, ""));
    let manifest = p.path().join("tools.toml").display().to_string();
    let flux = flux_bin().display().to_string();
    let run = |args: &[&str]| -> Value {
        let out = Command::new(&inspector)
            .arg("--cli")
            .args(args)
            .output()
            .expect("run the inspector");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("inspector JSON")
    };
    let listed = run(&[
        &flux,
        "--manifest",
        &manifest,
        "mcp",
        "serve",
        "--lane-store",
        "memory",
        "--method",
        "tools/list",
    ]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"structured") && names.contains(&"sleep"),
        "{listed}"
    );
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let called = run(&[
        &gw.url,
        "--transport",
        "http",
        "--method",
        "tools/call",
        "--tool-name",
        "structured",
    ]);
    assert_eq!(
        called["structuredContent"],
        json!({"answer": 42}),
        "{called}"
    );
}

#[test]
fn an_upstream_that_dies_is_started_again_by_the_next_call() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let m = upstream(&log, &starts, "").replace(
        "[tools.write]",
        "[tools.crash]\nkind = \"mcp\"\nserver = \"t\"\napproval = \"none\"\n\n[tools.write]",
    );
    p.write("tools.toml", &m);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let r = run_client(&py, &http(&gw.url), &["call", "crash", "{}"]);
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("went away mid-call"), "{r}");
    let r = run_client(&py, &http(&gw.url), &["call", "structured", "{}"]);
    assert_eq!(r["structuredContent"], json!({"answer": 42}), "{r}");
    assert_eq!(log_lines(&starts).len(), 2, "{:?}", log_lines(&starts));
}

#[test]
fn a_server_that_fails_to_start_is_left_out_then_listed_when_it_comes_up() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let marker = p.path().join("ready");
    let launcher = p.write(
        "late.sh",
        &format!(
            "#!/bin/sh\nif [ -e '{}' ]; then exec '{}'; fi\necho 'not ready yet' >&2\nexit 1\n",
            marker.display(),
            own_server().display()
        ),
    );
    p.write(
        "tools.toml",
        &format!(
            "[mcp_servers.late]\ncommand = [\"/bin/sh\", \"{}\"]\n\n[tools.structured]\nkind = \"mcp\"\nserver = \"late\"\n\n[tools.here]\nkind = \"scripted\"\neffect = \"read\"\noutput = {{ ok = true }}\n",
            launcher.display()
        ),
    );
    let how = stdio(&p, &["--lane-store", "memory"]);
    let out = run_client(&py, &how, &["relist", &marker.display().to_string(), "20"]);
    assert_eq!(out["first"], json!(["here"]), "{out}");
    assert_eq!(out["changed"], true, "tools/list_changed was sent: {out}");
    assert_eq!(out["second"], json!(["structured", "here"]), "{out}");
}

/// Wait until a line starting with `prefix` is in the log.
pub(crate) fn wait_for_line(log: &Path, prefix: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while !log_lines(log).iter().any(|l| l.starts_with(prefix)) {
        assert!(
            Instant::now() < until,
            "no `{prefix}` in {:?}",
            log_lines(log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM the HTTP gateway; its exit status, and how long it took to exit.
fn terminate(gw: &mut HttpGateway) -> (Option<i32>, Duration) {
    let asked = Instant::now();
    // SAFETY: a signal to the child process this test started.
    unsafe {
        libc::kill(gw.child.id() as i32, libc::SIGTERM);
    }
    let status = gw.child.wait().expect("the gateway exits");
    (status.code(), asked.elapsed())
}

#[test]
fn on_sigterm_the_http_gateway_lets_calls_finish_within_the_grace_then_cancels_the_rest() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    p.write("tools.toml", &upstream(&log, &starts, ""));
    // A call shorter than the grace finishes, and the gateway exits 0.
    let mut gw = HttpGateway::start(&p, &["--lane-store", "memory", "--grace", "10s"], &[]);
    let c = client(
        &py,
        &http(&gw.url),
        &["call", "sleep", r#"{"ms": 1500, "tag": "fin"}"#],
    );
    wait_for_line(&log, "start fin ");
    let (code, _) = terminate(&mut gw);
    assert_eq!(code, Some(0));
    let r = finish(c);
    assert_eq!(r["isError"], false, "finished within the grace: {r}");
    assert!(log_lines(&log).iter().any(|l| l.starts_with("end fin ")));
    // A call that outlasts the grace is cancelled upstream; the gateway still exits 0, soon.
    let mut gw = HttpGateway::start(&p, &["--lane-store", "memory", "--grace", "500ms"], &[]);
    let c = client(&py, &http(&gw.url), &["call", "hang", r#"{"tag": "long"}"#]);
    wait_for_line(&log, "start long ");
    let (code, took) = terminate(&mut gw);
    assert_eq!(code, Some(0));
    assert!(
        took < Duration::from_secs(8),
        "exited {took:?} after SIGTERM"
    );
    wait_for_line(&log, "cancelled long ");
    let mut c = c;
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn tools_subset_and_a_typo_in_it() {
    let Some(py) = python() else { return };
    let p = Project::new(
        "[tools.alpha]\nkind = \"scripted\"\neffect = \"read\"\n\n[tools.beta]\nkind = \"scripted\"\neffect = \"read\"\n",
    );
    let listed = run_client(&py, &stdio(&p, &["--tools", "beta"]), &["list"]);
    let names: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["beta"]);
    let r = run_client(
        &py,
        &stdio(&p, &["--tools", "beta"]),
        &["call", "alpha", "{}"],
    );
    assert!(
        r["jsonrpc_error"]
            .as_str()
            .unwrap_or_default()
            .contains("unknown tool `alpha`"),
        "{r}"
    );
    let out = p
        .cmd()
        .args(["mcp", "serve", "--tools", "bata"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no tool `bata`") && err.contains("beta"),
        "{err}"
    );
}

#[test]
fn a_write_through_the_gateway_carries_its_idempotency_key_upstream() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let meta = p.path().join("meta.log");
    let m = upstream(&log, &starts, "").replace(
        "env = { MCP_TEST_LOG",
        &format!(
            "env = {{ MCP_TEST_META_LOG = \"{}\", MCP_TEST_LOG",
            meta.display()
        ),
    );
    p.write("tools.toml", &m);
    let r = run_client(
        &py,
        &stdio(&p, &["--lane-store", "memory"]),
        &["call", "write", r#"{"ms": 1, "tag": "w"}"#],
    );
    assert_eq!(r["isError"], false, "{r}");
    let seen = std::fs::read_to_string(&meta).unwrap_or_default();
    assert!(seen.contains("\"idempotencyKey\":\"mcp-"), "{seen}");
}

/// A command tool on backend `db` that logs `start`/`end` with `TAG` under a lock.
pub(crate) fn db_manifest(p: &Project, script: &Path, cached: bool) {
    let cache = if cached { "cache = \"5m\"" } else { "" };
    p.write(
        "tools.toml",
        &format!(
            r#"[concurrency]
max_concurrent_tools = 8

[tools.put]
kind = "command"
command = ["/bin/sh", "{s}", "put-{{tag}}"]
effect = "write"
idempotent = true
backend = "db"
[tools.put.args]
tag = {{ type = "string", required = true }}

[tools.get]
kind = "command"
command = ["/bin/sh", "{s}", "get-{{tag}}"]
effect = "read"
backend = "db"
{cache}
[tools.get.args]
tag = {{ type = "string", required = true }}

[tools.other]
kind = "command"
command = ["/bin/sh", "{s}", "other-{{tag}}"]
effect = "read"
backend = "elsewhere"
[tools.other.args]
tag = {{ type = "string", required = true }}
"#,
            s = script.display()
        ),
    );
}

/// Each `start`/`end` line's tag and time (ns).
pub(crate) fn spans(log: &Path) -> Vec<(String, String, u128)> {
    log_lines(log)
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                w.next()?.to_string(),
                w.next()?.to_string(),
                w.next()?.parse().ok()?,
            ))
        })
        .collect()
}

pub(crate) fn at(spans: &[(String, String, u128)], what: &str, tag: &str) -> u128 {
    spans
        .iter()
        .find(|(w, t, _)| w == what && t == tag)
        .map(|s| s.2)
        .unwrap_or_else(|| panic!("no `{what} {tag}` in {spans:?}"))
}

#[test]
fn a_read_from_another_session_waits_for_the_write_before_it_on_its_backend() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    // The write takes 8 s: long enough for the other clients (a Python start-up each) to
    // arrive while it runs.
    let script = logging_tool(&p, &log);
    let text = std::fs::read_to_string(&script).unwrap_or_default();
    let script = p.write(
        "slow-put.sh",
        &text.replace(
            "sleep 0.3",
            "case \"$1\" in put-*) sleep 8;; *) sleep 0.3;; esac",
        ),
    );
    db_manifest(&p, &script, false);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let w = client(&py, &http(&gw.url), &["call", "put", r#"{"tag": "w1"}"#]);
    wait_for_line(&log, "start put-w1 ");
    let r = client(&py, &http(&gw.url), &["call", "get", r#"{"tag": "r1"}"#]);
    let o = client(&py, &http(&gw.url), &["call", "other", r#"{"tag": "o1"}"#]);
    for c in [w, r, o] {
        assert_eq!(finish(c)["isError"], false);
    }
    let s = spans(&log);
    assert!(
        at(&s, "start", "get-r1") >= at(&s, "end", "put-w1"),
        "no read under the write: {s:?}"
    );
    // The other backend's read did not wait for the write.
    assert!(
        at(&s, "start", "other-o1") < at(&s, "end", "put-w1"),
        "{s:?}"
    );
}

#[test]
fn the_read_cache_is_shared_by_a_tenants_sessions_and_a_write_invalidates_it() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    db_manifest(&p, &script, true);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let get = |tag: &str| {
        run_client(
            &py,
            &http(&gw.url),
            &["call", "get", &format!(r#"{{"tag": "{tag}"}}"#)],
        )
    };
    let first = get("k");
    let second = get("k");
    assert_eq!(first, second);
    let starts = |tag: &str| {
        spans(&log)
            .iter()
            .filter(|(w, t, _)| w == "start" && t == tag)
            .count()
    };
    assert_eq!(
        starts("get-k"),
        1,
        "the second session was answered from the cache"
    );
    let r = run_client(&py, &http(&gw.url), &["call", "put", r#"{"tag": "x"}"#]);
    assert_eq!(r["isError"], false);
    get("k");
    assert_eq!(
        starts("get-k"),
        2,
        "a write on the backend made the entry stale"
    );
}

#[test]
fn two_http_gateways_on_one_redis_share_a_tool_lane() {
    let Some(py) = python() else { return };
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    logged_manifest(&p, &script, "per_tool = { logged = 2 }", "");
    let store = ["--lane-store", redis.url.as_str()];
    let (a, b) = (
        HttpGateway::start(&p, &store, &[]),
        HttpGateway::start(&p, &store, &[]),
    );
    let clients = [
        client(
            &py,
            &http(&a.url),
            &["burst", "logged", "8", r#"{"tag": "a{i}"}"#],
        ),
        client(
            &py,
            &http(&b.url),
            &["burst", "logged", "8", r#"{"tag": "b{i}"}"#],
        ),
    ];
    for c in clients {
        let rs = finish(c);
        assert!(
            rs.as_array()
                .into_iter()
                .flatten()
                .all(|r| r["isError"] == false),
            "{rs}"
        );
    }
    let (peak, starts) = peak_in_flight(&log_lines(&log));
    assert_eq!(
        (peak, starts),
        (2, 16),
        "per_tool = 2 across two gateways on one Redis"
    );
}

#[test]
fn a_bearer_token_names_the_tenant_and_tenants_do_not_share_the_cache() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    db_manifest(&p, &script, true);
    let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve.tokens]\nacme = \"${{env:ACME}}\"\nbeta = \"${{env:BETA}}\"\n\n{text}"),
    );
    let gw = HttpGateway::start(
        &p,
        &["--lane-store", "memory"],
        &[("ACME", "tok-a"), ("BETA", "tok-b")],
    );
    let as_tenant = |token: &str| {
        vec![
            "--http".to_string(),
            gw.url.clone(),
            "-".into(),
            token.into(),
        ]
    };
    let call =
        |token: &str| run_client(&py, &as_tenant(token), &["call", "get", r#"{"tag": "k"}"#]);
    let starts = || {
        spans(&log)
            .iter()
            .filter(|(w, t, _)| w == "start" && t == "get-k")
            .count()
    };
    call("tok-a");
    call("tok-a");
    assert_eq!(
        starts(),
        1,
        "acme's second session was answered from acme's cache"
    );
    call("tok-b");
    assert_eq!(starts(), 2, "beta never gets acme's entry");
}

#[test]
fn a_session_budget_admits_exactly_what_it_can_pay_for_and_each_session_has_its_own() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("log");
    let starts = p.path().join("starts");
    let m = format!(
        "[serve.session]\nmax_cost = 1.00\n\n{}",
        upstream(&log, &starts, "cost = 0.30")
    );
    p.write("tools.toml", &m);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let burst = ["burst", "sleep", "10", r#"{"ms": 300, "tag": "b{i}"}"#];
    for (session, how) in [
        ("stdio", stdio(&p, &["--lane-store", "memory"])),
        ("http", http(&gw.url)),
    ] {
        let before = log_lines(&log)
            .iter()
            .filter(|l| l.starts_with("start b"))
            .count();
        let out = run_client(&py, &how, &burst);
        let results = out.as_array().cloned().unwrap_or_default();
        assert_eq!(results.len(), 10, "{out}");
        let refused: Vec<&str> = results
            .iter()
            .filter(|r| r["isError"] == true)
            .map(text)
            .collect();
        assert_eq!(refused.len(), 7, "{session}: {out}");
        assert!(
            refused.iter().all(|t| t.starts_with("budget_exhausted: ")),
            "{session}: {refused:?}"
        );
        let reached = log_lines(&log)
            .iter()
            .filter(|l| l.starts_with("start b"))
            .count();
        assert_eq!(reached - before, 3, "{session}: {:?}", log_lines(&log));
    }
}

#[test]
fn a_per_tool_session_limit_names_a_tool_or_the_manifest_is_refused() {
    let p = Project::new("");
    p.write(
        "tools.toml",
        "[serve.session]\nper_tool = { delet = 1 }\n\n[tools.delete]\nkind = \"scripted\"\neffect = \"write\"\noutput = { ok = true }\n",
    );
    let out = Command::new(flux_bin())
        .current_dir(p.path())
        .args(["mcp", "serve"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[serve.session.per_tool] limits `delet`"),
        "{err}"
    );
    assert!(err.contains("tools.toml:2:"), "file and line: {err}");
    assert!(err.contains("delete"), "did you mean: {err}");
}

#[test]
fn a_served_call_is_a_span_in_the_clients_trace_and_passes_it_upstream() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let Some(py) = python() else { return };
    let collector = crate::http_server::TestServer::start();
    let p = Project::new("");
    let (log, starts) = (p.path().join("server.log"), p.path().join("starts.log"));
    let meta = p.path().join("meta.log");
    let m = format!(
        "[lanes.one]\nconcurrency = 1\n{}",
        upstream(&log, &starts, "lanes = [\"one\"]")
    )
    .replace(
        "env = { MCP_TEST_LOG",
        &format!(
            "env = {{ MCP_TEST_META_LOG = \"{}\", MCP_TEST_LOG",
            meta.display()
        ),
    );
    p.write("tools.toml", &m);
    let gw = HttpGateway::start(
        &p,
        &["--lane-store", "memory", "--otlp", &collector.base],
        &[],
    );
    // The traced call queues behind a 5 s holder (the client starts well within it).
    let holder = client(
        &py,
        &http(&gw.url),
        &["call", "sleep", r#"{"ms": 5000, "tag": "hold"}"#],
    );
    wait_for_line(&log, "start hold ");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let traced = client(
        &py,
        &http(&gw.url),
        &[
            "traced",
            "sleep",
            r#"{"ms": 10, "tag": "t"}"#,
            &format!("00-{trace}-{parent}-01"),
        ],
    );
    let out = finish(traced);
    let _ = finish(holder);
    assert_eq!(out["isError"], false, "{out}");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let until = Instant::now() + Duration::from_secs(20);
    let span = loop {
        let spans: Vec<_> = collector
            .requests_to("/v1/traces")
            .iter()
            .filter_map(|r| ExportTraceServiceRequest::decode(r.raw.as_slice()).ok())
            .flat_map(|r| r.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect();
        if let Some(s) = spans.into_iter().find(|s| hex(&s.trace_id) == trace) {
            break s;
        }
        assert!(Instant::now() < until, "no span in the client's trace");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(span.name, "execute_tool sleep");
    assert_eq!(
        hex(&span.parent_span_id),
        parent,
        "a child of the client's span"
    );
    let attr = |k: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == k)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    match attr("flux_tools.queued_ms") {
        Some(Any::IntValue(q)) => assert!(q > 0, "queued {q} ms"),
        other => panic!("no queued_ms: {other:?}"),
    }
    assert!(
        matches!(attr("flux_tools.waited_on"), Some(Any::StringValue(l)) if l.contains("one")),
        "{:?}",
        attr("flux_tools.waited_on")
    );
    let seen = std::fs::read_to_string(&meta).unwrap_or_default();
    let passed = format!("00-{trace}-{}-01", hex(&span.span_id));
    assert!(
        seen.contains(&passed),
        "the upstream got the call's own span: {seen}"
    );
}

#[test]
fn a_read_answered_from_the_cache_costs_the_session_nothing() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    p.write(
        "tools.toml",
        "[serve.session]\nmax_cost = 1.00\n\n[tools.price]\nkind = \"scripted\"\neffect = \"read\"\ncost = 0.50\ncache = \"5m\"\noutput = { ok = true }\n[tools.price.args]\nq = { type = \"integer\" }\n",
    );
    let calls = r#"[{"q": 1}, {"q": 1}, {"q": 1}, {"q": 2}, {"q": 3}]"#;
    let out = run_client(
        &py,
        &stdio(&p, &["--lane-store", "memory"]),
        &["sequence", "price", calls],
    );
    let errors: Vec<bool> = out
        .as_array()
        .map(|a| a.iter().map(|r| r["isError"] == true).collect())
        .unwrap_or_default();
    assert_eq!(errors, [false, false, false, false, true], "{out}");
    assert!(text(&out[4]).starts_with("budget_exhausted: "), "{out}");
    assert!(text(&out[4]).contains("spent 1.00"), "q=1 paid once: {out}");
}
