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
        let mut child = Command::new(flux_bin())
            .current_dir(p.path())
            .args(["mcp", "serve", "--lane-store", "memory"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
        gw.send(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
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
    gw.call(1, "job", json!({"tag": "first", "secs": "0.6"}));
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
