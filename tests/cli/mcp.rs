//! `mcp` tools against real MCP servers: the reference `@modelcontextprotocol/server-everything`
//! (installed from npm by `.ci/run`) and the project's own rmcp server
//! (`tests/fixtures/mcp_test_server.rs`) for failures the reference cannot produce.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, results, wall_ms, Project};

/// The project's own test server, built by `cargo test` as an example.
pub fn own_server() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    bin.parent()
        .expect("target dir")
        .join("examples")
        .join("mcp_test_server")
}

/// The reference server's entry point, or `None` (then the test is skipped, except in CI).
fn everything() -> Option<PathBuf> {
    let path = std::env::var_os("FLUX_TEST_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            repo().join(
                "target/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    if path.exists() {
        return Some(path);
    }
    crate::common::skip(
        &format!("server-everything is not installed at {}", path.display()),
        "npm install --prefix target/mcp @modelcontextprotocol/server-everything",
    );
    None
}

pub fn own_manifest(log: &std::path::Path) -> String {
    format!(
        r#"
[concurrency]
max_concurrent_tools = 16

[mcp_servers.own]
command = ["{server}"]
env = {{ MCP_TEST_LOG = "{log}" }}

[tools.sleep]
kind = "mcp"
server = "own"

[tools.write]
kind = "mcp"
server = "own"

[tools.fail]
kind = "mcp"
server = "own"

[tools.rpc_error]
kind = "mcp"
server = "own"

[tools.structured]
kind = "mcp"
server = "own"

[tools.hang]
kind = "mcp"
server = "own"
timeout = "500ms"

[tools.crash]
kind = "mcp"
server = "own"
"#,
        server = own_server().display(),
        log = log.display()
    )
}

fn log_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn eight_calls_overlap_on_one_stdio_session_and_return_in_call_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let p = Project::new(&own_manifest(&log));
    // Descending sleeps: the first call finishes last.
    let batch: String = (0..8)
        .map(|i| {
            format!(
                "- {{ id: s{i}, tool: sleep, args: {{ ms: {}, tag: s{i} }} }}\n",
                800 - i * 50
            )
        })
        .collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let ids: Vec<&str> = results(&doc)
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"]);
    assert_eq!(
        results(&doc)[0]["output"],
        serde_json::json!({"slept": 800, "tag": "s0"})
    );
    // From the server's own clock: every call started before the first one ended.
    let lines = log_lines(&log);
    let times = |kind: &str| -> Vec<u128> {
        lines
            .iter()
            .filter(|l| l.starts_with(kind))
            .filter_map(|l| l.split(' ').nth(2)?.parse().ok())
            .collect()
    };
    let (starts, ends) = (times("start "), times("end "));
    assert_eq!(starts.len(), 8, "{lines:?}");
    assert!(
        starts.iter().max() < ends.iter().min(),
        "calls did not overlap: {lines:?}"
    );
    // Serially they would take 5 s; the log above already proves the overlap.
    assert!(wall_ms(&doc) < 3000);
}

#[test]
fn a_hung_tool_is_cut_off_and_the_server_receives_the_cancellation() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let p = Project::new(&own_manifest(&log));
    let (doc, code) = p.run_json(
        "- { tool: hang, args: { tag: h1 } }\n- { tool: sleep, args: { ms: 100, tag: fine } }\n",
        &[],
    );
    assert_eq!(code, 1);
    let r = results(&doc);
    assert_eq!(r[0]["status"], "timed_out");
    assert_eq!(
        r[0]["error"]["message"],
        "tool 'hang' exceeded its 500ms timeout"
    );
    assert_eq!(r[1]["status"], "ok");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !log_lines(&log)
        .iter()
        .any(|l| l.starts_with("cancelled h1 "))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        log_lines(&log)
            .iter()
            .any(|l| l.starts_with("cancelled h1 ")),
        "no notifications/cancelled: {:?}",
        log_lines(&log)
    );
}

#[test]
fn is_error_rpc_errors_and_structured_content_are_shaped() {
    let dir = tempfile::tempdir().unwrap();
    let p = Project::new(&own_manifest(&dir.path().join("log")));
    let (doc, code) = p.run_json("- tool: fail\n- tool: rpc_error\n- tool: structured\n", &[]);
    assert_eq!(code, 1);
    let r = results(&doc);
    assert_eq!(r[0]["error"]["kind"], "tool_error");
    assert!(r[0]["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("reported an error: the widget is broken"));
    assert_eq!(r[1]["error"]["kind"], "mcp_error");
    assert!(r[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("JSON-RPC error -32602: these parameters will never do"));
    assert_eq!(r[2]["output"], serde_json::json!({"answer": 42}));
}

#[test]
fn a_server_that_dies_mid_run_loses_its_calls_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    // The crashing write must run while the sleep (a read of the same server) is in flight:
    // only writes are ordered here, not reads against writes.
    let manifest = own_manifest(&dir.path().join("log")).replace(
        "max_concurrent_tools = 16",
        "max_concurrent_tools = 16\nhazards = \"writes\"",
    );
    let p = Project::new(&manifest);
    let started = Instant::now();
    let (doc, code) = p.run_json(
        "- { id: inflight, tool: sleep, args: { ms: 5000, tag: s } }\n- { id: boom, tool: crash }\n- { id: after, tool: write, args: { ms: 10, tag: w } }\n",
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a dead server must not hold the run"
    );
    let r = results(&doc);
    assert_eq!(r[0]["status"], "cancelled", "{}", r[0]);
    assert!(
        r[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("simulated crash"),
        "stderr is shown: {}",
        r[0]
    );
    assert_eq!(
        r[1]["status"], "indeterminate",
        "the crashing call is a destructive write"
    );
    assert_eq!(r[2]["status"], "error");
    assert_eq!(r[2]["error"]["kind"], "server_exited");
}

#[test]
fn annotations_default_effect_and_idempotent_and_plan_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = Project::new(&own_manifest(&dir.path().join("log")));
    let b = p.write("b.yaml", "- tool: sleep\n- tool: write\n");
    let out = p
        .cmd()
        .args(["plan", b.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["calls"][0]["effect"], "read");
    assert_eq!(plan["calls"][0]["effect_from"], "annotation");
    assert_eq!(plan["calls"][0]["idempotent"], true);
    assert_eq!(plan["calls"][1]["effect"], "write");
    assert_eq!(plan["calls"][1]["idempotent"], false);
    assert_eq!(plan["calls"][1]["idempotent_from"], "annotation");
    let missing = p.write(
        "m.toml",
        &format!(
            "{}\n[tools.nope]\nkind = \"mcp\"\nserver = \"own\"\ntool = \"slep\"\n",
            own_manifest(&dir.path().join("log"))
        ),
    );
    let b2 = p.write("b2.yaml", "- tool: nope\n");
    let out = p
        .cmd()
        .args([
            "--manifest",
            missing.to_str().unwrap(),
            "plan",
            b2.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no tool `slep`") && err.contains("did you mean `sleep`?"),
        "{err}"
    );
}

#[test]
fn the_reference_server_answers_and_its_import_validates_and_runs() {
    let Some(server) = everything() else { return };
    let manifest = format!(
        "[mcp_servers.everything]\ncommand = [\"node\", \"{}\", \"stdio\"]\n",
        server.display()
    );
    let p = Project::new(&manifest);
    let out = p
        .cmd()
        .args(["mcp", "import", "everything"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let imported = String::from_utf8(out.stdout).unwrap();
    assert!(
        imported.contains("[tools.\"echo\"]") && imported.contains("effect = \"read\""),
        "{imported}"
    );
    // Pasted into the manifest, it validates and runs.
    std::fs::write(
        p.path().join("tools.toml"),
        format!("[concurrency]\nmax_concurrent_tools = 8\n{manifest}\n{imported}"),
    )
    .unwrap();
    p.cmd().arg("validate").assert().success();
    let batch = "- { id: e, tool: echo, args: { message: hello } }\n- { id: s, tool: get-sum, args: { a: 2, b: 3 } }\n- { id: w, tool: get-structured-content, args: { location: \"New York\" } }\n- { tool: trigger-long-running-operation, args: { duration: 1, steps: 1 } }\n- { tool: trigger-long-running-operation, args: { duration: 1, steps: 1 } }\n- { tool: trigger-long-running-operation, args: { duration: 1, steps: 1 } }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["output"], "Echo: hello");
    assert!(r[1]["output"].as_str().unwrap().contains('5'));
    assert!(
        r[2]["output"].is_object(),
        "structuredContent is the output: {}",
        r[2]
    );
    // Three one-second operations on one session overlap.
    assert!(wall_ms(&doc) < 2500, "took {}ms", wall_ms(&doc));
    // A literal argument the imported schema rejects never reaches the server.
    let bad = p.write("bad.yaml", "- { tool: get-sum, args: { a: two } }\n");
    let out = p
        .cmd()
        .args(["run", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn concurrent_calls_leave_whole_lines_in_the_servers_log() {
    // The test server's log once wrote a line and its newline as two writes, so concurrent
    // handlers interleaved ("start s6 …start s2 …" on one line, then an empty one) and the
    // overlap test above failed now and then. Many calls at once make that show every time.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let p = Project::new(&own_manifest(&log));
    let batch: String = (0..200)
        .map(|i| format!("- {{ tool: sleep, args: {{ ms: 1, tag: t{i} }} }}\n"))
        .collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 400, "{lines:?}");
    for l in &lines {
        let words: Vec<&str> = l.split(' ').collect();
        assert!(
            words.len() == 3 && matches!(words[0], "start" | "end"),
            "a torn log line: {l:?}"
        );
    }
}

#[test]
fn two_servers_with_the_same_tool_names_fit_in_one_manifest_with_prefixes() {
    // Before: importing two servers gave `[tools."sleep"]` twice: a duplicate-key TOML.
    let servers = format!(
        "[concurrency]\nmax_concurrent_tools = 4\n[mcp_servers.a]\ncommand = [\"{s}\"]\n[mcp_servers.b]\ncommand = [\"{s}\"]\n",
        s = own_server().display()
    );
    let p = Project::new(&servers);
    let import = |server: &str| {
        let out = p
            .cmd()
            .args(["mcp", "import", server, "--prefix", server])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let (a, b) = (import("a"), import("b"));
    assert!(
        a.contains("[tools.\"a.sleep\"]") && a.contains("tool = \"sleep\""),
        "{a}"
    );
    std::fs::write(p.path().join("tools.toml"), format!("{servers}\n{a}\n{b}")).unwrap();
    let (doc, code) = p.run_json(
        "- { tool: a.sleep, args: { ms: 10, tag: x } }\n- { tool: b.sleep, args: { ms: 10, tag: y } }\n",
        &[],
    );
    assert_eq!(code, 0, "{doc}");
    assert_eq!(results(&doc)[1]["output"]["tag"], "y");
    // A server the manifest does not declare: the declared ones are listed.
    let out = p.cmd().args(["mcp", "import", "zzz"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("declared servers: a, b"), "{err}");
}

#[test]
fn validate_and_tools_make_no_claim_an_mcp_server_has_not_made() {
    // Before: `validate` warned "write tool `read_file` has no idempotency protection" and
    // `tools` showed `write (default)` for a tool its server annotates read-only.
    let dir = tempfile::tempdir().unwrap();
    let p = Project::new(&own_manifest(&dir.path().join("log")));
    let out = p.cmd().args(["validate"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no idempotency protection"), "{err}");
    let out = p.cmd().args(["tools"]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("write (default)"), "{table}");
    assert!(table.contains("from server"), "{table}");
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sleep = &doc["tools"][0];
    assert_eq!(sleep["effect"], Value::Null, "{sleep}");
    assert_eq!(sleep["effect_from"], "server");
}

#[test]
fn a_cached_mcp_read_is_asked_of_the_server_once_and_a_cached_destructive_tool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let manifest = own_manifest(&log).replace(
        "[tools.sleep]\nkind = \"mcp\"\nserver = \"own\"\n",
        "[tools.sleep]\nkind = \"mcp\"\nserver = \"own\"\ncache = \"1m\"\n",
    );
    let p = Project::new(&manifest);
    let batch = "- { id: a, tool: sleep, args: { ms: 200, tag: x } }\n- { id: b, tool: sleep, args: { ms: 200, tag: x } }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let (doc2, _) = p.run_json(batch, &[]);
    let starts = log_lines(&log)
        .iter()
        .filter(|l| l.starts_with("start "))
        .count();
    assert_eq!(starts, 1, "{:?}", log_lines(&log));
    assert_eq!(results(&doc)[1]["cached"], true);
    assert!(results(&doc2).iter().all(|r| r["cached"] == true));
    assert_eq!(
        results(&doc2)[0]["output"],
        json!({"slept": 200, "tag": "x"})
    );

    // `write` is annotated destructive: a cache on it is refused once the server says so.
    let manifest = own_manifest(&log).replace(
        "[tools.write]\nkind = \"mcp\"\nserver = \"own\"\n",
        "[tools.write]\nkind = \"mcp\"\nserver = \"own\"\ncache = \"1m\"\n",
    );
    let p = Project::new(&manifest);
    let b = p.write("w.yaml", "- { tool: write, args: { ms: 1, tag: w } }\n");
    let out = p.cmd().args(["run", b.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`cache` on tool `write`"), "{err}");
    assert!(err.contains("annotations"), "{err}");
}

#[test]
fn reads_spread_over_a_stateless_servers_processes_and_writes_keep_to_its_first() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, starts) = (dir.path().join("pids.log"), dir.path().join("starts.log"));
    let manifest = format!(
        r#"
[concurrency]
max_concurrent_tools = 16

[mcp_servers.own]
command = ["{server}"]
env = {{ MCP_TEST_PID_LOG = "{pids}", MCP_TEST_START_LOG = "{starts}" }}
processes = 3

[tools.nap]
kind = "mcp"
server = "own"
tool = "sleep"
effect = "read"

[tools.write]
kind = "mcp"
server = "own"
effect = "write"
concurrent_writes = true
"#,
        server = own_server().display(),
        pids = pids.display(),
        starts = starts.display(),
    );
    let p = Project::new(&manifest);
    // Six reads at once: the pool grows to its three processes, and each serves some.
    let batch: String = (0..6)
        .map(|i| format!("- {{ id: r{i}, tool: nap, args: {{ ms: 400, tag: r{i} }} }}\n"))
        .collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    let by_tag = |prefix: &str| -> std::collections::BTreeSet<String> {
        log_lines(&pids)
            .iter()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.split(' ').nth(1).map(str::to_string))
            .collect()
    };
    assert_eq!(by_tag("r").len(), 3, "{:?}", log_lines(&pids));
    assert_eq!(log_lines(&starts).len(), 3, "{:?}", log_lines(&starts));
    // Writes, even at once, all go to the first process.
    let batch: String = (0..4)
        .map(|i| format!("- {{ id: w{i}, tool: write, args: {{ ms: 200, tag: w{i} }} }}\n"))
        .collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(by_tag("w").len(), 1, "{:?}", log_lines(&pids));
    // A server with more processes than it may have, or an HTTP server with any, is refused.
    let too_many = manifest.replace("processes = 3", "processes = 65");
    let out = Project::new(&too_many)
        .cmd()
        .arg("validate")
        .output()
        .expect("validate");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("at most 64 processes"), "{text}");
}

/// The project's own server on Streamable HTTP (`--http`), killed when dropped.
struct OwnOverHttp(std::process::Child, String);

impl OwnOverHttp {
    fn start(log: &std::path::Path) -> OwnOverHttp {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = std::process::Command::new(own_server())
            .args(["--http", &addr])
            .env("MCP_TEST_LOG", log)
            .spawn()
            .expect("the own server starts");
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < until, "the own server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        OwnOverHttp(child, format!("http://{addr}/"))
    }
}

impl Drop for OwnOverHttp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_server_over_streamable_http_takes_overlapping_calls_and_its_failures_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = OwnOverHttp::start(&log);
    let manifest = own_manifest(&log).replace(
        &format!("command = [\"{}\"]", own_server().display()),
        &format!("url = \"{}\"", server.1),
    );
    assert!(manifest.contains("url = \"http://127.0.0.1:"), "{manifest}");
    let p = Project::new(&manifest);
    let batch = "- { id: a, tool: sleep, args: { ms: 600, tag: a } }\n- { id: b, tool: sleep, args: { ms: 300, tag: b } }\n- { id: f, tool: fail }\n- { id: r, tool: rpc_error }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 1, "{doc}");
    let r = results(&doc);
    let ids: Vec<&str> = r.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b", "f", "r"], "call order");
    assert_eq!(r[0]["output"], json!({"slept": 600, "tag": "a"}));
    assert_eq!(r[1]["output"], json!({"slept": 300, "tag": "b"}));
    assert_eq!(r[2]["error"]["kind"], "tool_error", "{doc}");
    assert_eq!(r[3]["error"]["kind"], "mcp_error", "{doc}");
    // From the server's own clock: `b` started before `a` ended (one session, two calls).
    let lines = log_lines(&log);
    let at = |prefix: &str| -> u128 {
        let line = lines.iter().find(|l| l.starts_with(prefix));
        let ms = line.and_then(|l| l.split(' ').nth(2)?.parse().ok());
        ms.unwrap_or_else(|| panic!("no `{prefix}` in {lines:?}"))
    };
    assert!(
        at("start b") < at("end a"),
        "the calls did not overlap: {lines:?}"
    );
}
