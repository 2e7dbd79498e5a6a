//! Calls answered as tasks (MCP `2025-11-25`), on three replicas sharing one Redis: a call
//! parked for approval comes back as a task at once and reaches its tool only when approved —
//! after the replica that started it was SIGKILLed, served by another; a cancelled task
//! queued in a lane never reaches its tool; another tenant finds no such task.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, Project, Redis};
use crate::serve::{log_lines, python, raw_response, HttpGateway};
use crate::serve_keys::{post, session};

/// A project of `guarded` (a write approved out of band) and `slow` (one at a time), both
/// logging `start TAG` and `end TAG`; `slow` sleeps `TAG`'s number of tenths of a second.
fn project(p: &Project, tokens: bool) -> std::path::PathBuf {
    let log = p.path().join("calls.log");
    let script = p.write(
        "tool.sh",
        &format!(
            "#!/bin/sh\necho \"start $1\" >> '{log}'\nsleep \"$2\"\necho \"end $1\" >> '{log}'\necho \"did $1\"\n",
            log = log.display()
        ),
    );
    let tokens = if tokens {
        "[serve.tokens]\nacme = \"${env:ACME}\"\nbeta = \"${env:BETA}\"\n\n"
    } else {
        ""
    };
    p.write(
        "tools.toml",
        &format!(
            r#"{tokens}[concurrency]
per_tool = {{ slow = 1 }}

[tools.guarded]
kind = "command"
command = ["/bin/sh", "{s}", "{{tag}}", "0"]
effect = "write"
approval = "out_of_band"
[tools.guarded.args]
tag = {{ type = "string", required = true }}

[tools.slow]
kind = "command"
command = ["/bin/sh", "{s}", "{{tag}}", "{{secs}}"]
effect = "write"
[tools.slow.args]
tag = {{ type = "string", required = true }}
secs = {{ type = "string", required = true }}
"#,
            s = script.display()
        ),
    );
    log
}

/// The SDK 1.x tasks client: `action` on `url`, its JSON line.
fn sdk(py: &std::path::Path, action: &[&str]) -> Value {
    let out = Command::new(py)
        .arg(repo().join("tests/fixtures/mcp_tasks.py"))
        .args(action)
        .output()
        .expect("the SDK client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{action:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// One JSON-RPC request on session `id` at `addr` as the bearer of `token`: its answer.
pub(crate) fn rpc(addr: &str, token: Option<&str>, id: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let (_, body) = raw_response(post(addr, token, Some(id), &body.to_string()));
    let line = body
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .find(|l| l.starts_with('{'))
        .unwrap_or_default()
        .to_string();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Start `tool` with `args` as a task (raw): its id.
pub(crate) fn start(addr: &str, token: Option<&str>, id: &str, tool: &str, args: Value) -> String {
    let params = json!({"name": tool, "arguments": args, "task": {"ttl": 600000}});
    let r = rpc(addr, token, id, "tools/call", params);
    r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {r}"))
        .to_string()
}

fn status(addr: &str, token: Option<&str>, id: &str, task: &str) -> Value {
    rpc(addr, token, id, "tasks/get", json!({"taskId": task}))
}

fn starts(log: &std::path::Path) -> Vec<String> {
    log_lines(log)
        .into_iter()
        .filter_map(|l| l.strip_prefix("start ").map(str::to_string))
        .collect()
}

#[test]
fn a_parked_task_is_answered_at_once_and_approved_after_its_replica_died_is_served_by_another() {
    let (Some(py), Some(redis)) = (python(), Redis::start()) else {
        return;
    };
    let p = Project::new("");
    let log = project(&p, false);
    let store = ["--lane-store", redis.url.as_str()];
    let mut gws: Vec<HttpGateway> = (0..2)
        .map(|_| HttpGateway::start(&p, &store, &[]))
        .collect();

    // Started through replica 0: a task at once, parked, nothing called.
    let made = sdk(&py, &["start", &gws[0].url, "guarded", r#"{"tag": "g1"}"#]);
    let task = made["taskId"].as_str().unwrap_or_default().to_string();
    assert!(made["ms"].as_f64().is_some_and(|ms| ms < 200.0), "{made}");
    assert_eq!(made["status"], "working", "{made}");
    let message = made["message"].as_str().unwrap_or_default();
    let call = message
        .strip_prefix("waiting for approval: flux-tools approve ")
        .unwrap_or_else(|| panic!("{made}"))
        .to_string();
    assert!(starts(&log).is_empty(), "{:?}", log_lines(&log));

    // Its replica dies before the approval; the approval is given meanwhile.
    let _ = gws[0].child.kill();
    let _ = gws[0].child.wait();
    let addr = gws[1].addr();
    let id = session(&addr, None);
    let seen = status(&addr, None, &id, &task);
    assert_eq!(seen["result"]["status"], "working", "{seen}");
    crate::serve_policies::approve_in(&p, &redis.url, &call);
    // Replica 1 takes the task over (once the dead replica's lease lapsed) and makes the
    // call once: its result, through a new session of the SDK.
    let done = sdk(&py, &["result", &gws[1].url, &task]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "did g1", "{done}");
    assert_eq!(starts(&log), ["g1"]);
    let said = gws[1].stderr.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(said.contains("is taken over here"), "{said}");
}

#[test]
fn a_task_cancelled_in_its_lane_never_reaches_its_tool_and_another_tenant_finds_none() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = project(&p, true);
    let store = ["--lane-store", redis.url.as_str()];
    let env = [("ACME", "tok-a"), ("BETA", "tok-b")];
    let gws: Vec<HttpGateway> = (0..2)
        .map(|_| HttpGateway::start(&p, &store, &env))
        .collect();
    let (a0, a1) = (gws[0].addr(), gws[1].addr());
    let (acme, beta) = (Some("tok-a"), Some("tok-b"));
    let s0 = session(&a0, acme);
    let s1 = session(&a1, acme);

    // `hold` has the lane for 2 s; `queued` waits behind it, and is cancelled through the
    // other replica.
    let hold = start(&a0, acme, &s0, "slow", json!({"tag": "hold", "secs": "2"}));
    let until = Instant::now() + Duration::from_secs(10);
    while starts(&log).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let queued = start(
        &a0,
        acme,
        &s0,
        "slow",
        json!({"tag": "queued", "secs": "0"}),
    );
    let seen = status(&a1, acme, &s1, &queued);
    assert_eq!(seen["result"]["status"], "working", "{seen}");
    let cancelled = rpc(&a1, acme, &s1, "tasks/cancel", json!({"taskId": queued}));
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");

    // Another tenant: not found, whatever it asks, on either replica; its list is empty.
    let sb = session(&a1, beta);
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = rpc(&a1, beta, &sb, method, json!({"taskId": hold}));
        let text = r["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains("task not found"), "{method}: {r}");
    }
    let list = rpc(&a1, beta, &sb, "tasks/list", json!({}));
    assert_eq!(list["result"]["tasks"], json!([]), "{list}");
    let list = rpc(&a1, acme, &s1, "tasks/list", json!({}));
    assert_eq!(
        list["result"]["tasks"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );

    // `hold` ends (its result through the other replica); `queued` never started.
    let r = rpc(&a1, acme, &s1, "tasks/result", json!({"taskId": hold}));
    assert_eq!(r["result"]["content"][0]["text"], "did hold", "{r}");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(starts(&log), ["hold"]);
    let seen = status(&a0, acme, &s0, &queued);
    assert_eq!(seen["result"]["status"], "cancelled", "{seen}");
    let r = rpc(&a0, acme, &s0, "tasks/result", json!({"taskId": queued}));
    assert!(r["error"]["message"].is_string(), "{r}");

    // Two tasks of one idempotency key, through two replicas: one call, one answer.
    let keyed = json!({
        "name": "slow",
        "arguments": {"tag": "once", "secs": "0.5"},
        "task": {},
        "_meta": {"idempotencyKey": "k-task"},
    });
    let made: Vec<String> = [(&a0, &s0), (&a1, &s1)]
        .iter()
        .map(|(addr, s)| {
            let r = rpc(addr, acme, s, "tools/call", keyed.clone());
            r["result"]["task"]["taskId"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_string()
        })
        .collect();
    for task in &made {
        let r = rpc(&a1, acme, &s1, "tasks/result", json!({"taskId": task}));
        assert_eq!(r["result"]["content"][0]["text"], "did once", "{r}");
    }
    assert_eq!(starts(&log), ["hold", "once"]);
}

/// One stateless (2026-07-28) request of a client that takes tasks (the tasks extension),
/// as the bearer of `token`: its JSON-RPC message.
fn modern(addr: &str, token: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bearer = format!("Bearer {token}");
    // SEP-2243: a call names its tool, a task request its task.
    let name = (params["name"].as_str())
        .or(params["taskId"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut headers = vec![
        ("Host", addr),
        ("Authorization", bearer.as_str()),
        ("Mcp-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if !name.is_empty() {
        headers.push(("Mcp-Name", name.as_str()));
    }
    let s = crate::serve::raw_post_with(addr, None, &body.to_string(), &headers);
    let (_, text) = raw_response(s);
    crate::serve::message_of(&text)
}

/// The id of the task `made` says the call goes on as.
fn task_made(made: &Value) -> String {
    assert_eq!(made["result"]["resultType"], "task", "{made}");
    made["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `tasks/get` (the extension's) until the task ends: its last state.
fn settled(addr: &str, token: &str, task: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = modern(addr, token, "tasks/get", json!({"taskId": task}));
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status != "working" || Instant::now() > until {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_modern_client_that_takes_tasks_gets_one_for_a_parked_or_queued_call_and_a_quick_call_whole() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = project(&p, true);
    let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve]\ntask_after = \"1500ms\"\n\n{text}"),
    );
    let store = ["--lane-store", redis.url.as_str()];
    let env = [("ACME", "tok-a"), ("BETA", "tok-b")];
    let gws: Vec<HttpGateway> = (0..2)
        .map(|_| HttpGateway::start(&p, &store, &env))
        .collect();
    let (a0, a1) = (gws[0].addr(), gws[1].addr());

    // Parked for approval: a task at once (long before `task_after`), nothing called.
    let t = Instant::now();
    let made = modern(
        &a0,
        "tok-a",
        "tools/call",
        json!({"name": "guarded", "arguments": {"tag": "g2"}}),
    );
    assert!(
        t.elapsed() < Duration::from_millis(1200),
        "{:?}",
        t.elapsed()
    );
    let parked = task_made(&made);
    let message = made["result"]["statusMessage"].as_str().unwrap_or_default();
    let call = message
        .strip_prefix("waiting for approval: flux-tools approve ")
        .unwrap_or_else(|| panic!("{made}"))
        .to_string();

    // Holding its lane past `task_after`: a task; the call queued behind it too, cancelled
    // through the other replica, never reaches its tool.
    let hold = modern(
        &a0,
        "tok-a",
        "tools/call",
        json!({"name": "slow", "arguments": {"tag": "hold", "secs": "4"}}),
    );
    let hold = task_made(&hold);
    let queued = modern(
        &a1,
        "tok-a",
        "tools/call",
        json!({"name": "slow", "arguments": {"tag": "queued", "secs": "0"}}),
    );
    let queued = task_made(&queued);
    let cancelled = modern(&a0, "tok-a", "tasks/cancel", json!({"taskId": queued}));
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    // Another tenant: no such task.
    let other = modern(&a1, "tok-b", "tasks/get", json!({"taskId": hold}));
    let text = other["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("task not found"), "{other}");

    // Approved from a terminal: the parked task completes, its result in `tasks/get`.
    crate::serve_policies::approve_in(&p, &redis.url, &call);
    let done = settled(&a1, "tok-a", &parked);
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "did g2",
        "{done}"
    );
    let done = settled(&a1, "tok-a", &hold);
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "did hold",
        "{done}"
    );
    let gone = settled(&a1, "tok-a", &queued);
    assert_eq!(gone["result"]["status"], "cancelled", "{gone}");

    // A call that ends within `task_after` is answered whole.
    let quick = modern(
        &a1,
        "tok-a",
        "tools/call",
        json!({"name": "slow", "arguments": {"tag": "quick", "secs": "0"}}),
    );
    assert_eq!(quick["result"]["resultType"], "complete", "{quick}");
    assert_eq!(
        quick["result"]["content"][0]["text"], "did quick",
        "{quick}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut made = starts(&log);
    made.sort();
    assert_eq!(made, ["g2", "hold", "quick"]);
}

#[test]
fn with_one_process_tasks_are_bounded_per_tenant_denied_as_failed_and_forgotten_after_tasks_kept() {
    let p = Project::new("");
    let log = project(&p, false);
    let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve.limits]\ntasks_per_tenant = 2\ntasks_kept = \"3s\"\n\n{text}"),
    );
    let gw = HttpGateway::start(&p, &[], &[]);
    let addr = gw.addr();
    let s = session(&addr, None);
    let first = start(&addr, None, &s, "guarded", json!({"tag": "a"}));
    let _second = start(&addr, None, &s, "guarded", json!({"tag": "b"}));
    // A third unfinished task of the tenant is refused, naming the bound; nothing called.
    let params = json!({"name": "guarded", "arguments": {"tag": "c"}, "task": {}});
    let third = rpc(&addr, None, &s, "tools/call", params);
    let text = third["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("tasks_per_tenant = 2"), "{third}");
    // Denied from a terminal: a failed task whose result says why.
    let until = Instant::now() + Duration::from_secs(10);
    let message = loop {
        let seen = status(&addr, None, &s, &first);
        let m = seen["result"]["statusMessage"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if m.starts_with("waiting for approval") || Instant::now() > until {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let id = message
        .trim_start_matches("waiting for approval: flux-tools approve ")
        .split('@')
        .next()
        .unwrap_or_default()
        .to_string();
    let denied = p.cmd().args(["deny", &id]).output().expect("deny");
    assert!(
        denied.status.success(),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    let r = rpc(&addr, None, &s, "tasks/result", json!({"taskId": first}));
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("approval_denied"), "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    let seen = status(&addr, None, &s, &first);
    assert_eq!(seen["result"]["status"], "failed", "{seen}");
    // Kept `tasks_kept` after it last changed, then forgotten.
    std::thread::sleep(Duration::from_millis(3500));
    let gone = status(&addr, None, &s, &first);
    let text = gone["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("task not found"), "{gone}");
    assert!(starts(&log).is_empty(), "{:?}", log_lines(&log));
}
