//! `run --turns`: one process answers turn after turn, keeping its MCP sessions — one server
//! start for twenty turns, a killed server started again, a bad line answered with an error —
//! each turn its own run.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde_json::Value;

use crate::common::Project;

/// The project's MCP server, logging each start (with its pid) to `starts`.
fn manifest(log: &Path, starts: &Path) -> String {
    crate::mcp::own_manifest(log).replace(
        "env = { MCP_TEST_LOG = ",
        &format!(
            "env = {{ MCP_TEST_START_LOG = \"{}\", MCP_TEST_LOG = ",
            starts.display()
        ),
    ) + r#"
[tools.slow]
kind = "scripted"
effect = "read"
latency = "3s"
"#
}

struct Coprocess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Coprocess {
    fn start(p: &Project, extra: &[&str]) -> Coprocess {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
            .current_dir(p.path())
            .args(["run", "--turns", "-q"])
            .args(extra)
            .env("CI", "true")
            .env_remove("FLUX_TOOLS_MANIFEST")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Coprocess {
            child,
            stdin,
            stdout,
        }
    }

    /// Send one turn and read its one-line answer.
    fn turn(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }

    fn finish(self) -> i32 {
        drop(self.stdin);
        let out = self.child.wait_with_output().unwrap();
        out.status.code().unwrap_or(-1)
    }
}

fn two_sleeps(turn: usize) -> String {
    serde_json::json!([
        {"id": format!("t{turn}a"), "tool": "sleep", "args": {"ms": 5, "tag": format!("t{turn}a")}},
        {"id": format!("t{turn}b"), "tool": "sleep", "args": {"ms": 1, "tag": format!("t{turn}b")}},
    ])
    .to_string()
}

fn starts(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("started ")?.parse().ok())
        .collect()
}

#[test]
fn twenty_turns_are_answered_in_order_by_one_server_start() {
    let dir = tempfile::tempdir().unwrap();
    let (log, start_log) = (dir.path().join("server.log"), dir.path().join("starts.log"));
    let p = Project::new(&manifest(&log, &start_log));
    let mut co = Coprocess::start(&p, &["--emit", "openai"]);
    for turn in 1..=20 {
        let answer = co.turn(&two_sleeps(turn));
        let ids: Vec<&str> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["tool_call_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [format!("t{turn}a"), format!("t{turn}b")],
            "turn {turn}"
        );
        assert_eq!(
            answer[0]["content"],
            format!("{{\"slept\":5,\"tag\":\"t{turn}a\"}}")
        );
    }
    assert_eq!(co.finish(), 0);
    assert_eq!(starts(&start_log).len(), 1, "the server started once");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.lines().filter(|l| l.starts_with("end ")).count(), 40);
}

#[test]
fn a_killed_server_is_started_again_and_a_bad_line_costs_only_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (log, start_log) = (dir.path().join("server.log"), dir.path().join("starts.log"));
    let p = Project::new(&manifest(&log, &start_log));
    let mut co = Coprocess::start(&p, &[]);
    let first = co.turn(&two_sleeps(1));
    assert_eq!(first["outcome"], "completed");
    let pid = starts(&start_log)[0];
    // SAFETY: kill(2) on the test server's own process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(500));

    let bad = co.turn("{ this is not json");
    assert_eq!(bad["turn"], 2);
    assert!(bad["error"].as_str().unwrap().contains("invalid"), "{bad}");
    let unknown = co.turn(r#"[{"tool": "nope"}]"#);
    assert_eq!(unknown["turn"], 3);
    assert!(
        unknown["error"].as_str().unwrap().contains("unknown tool"),
        "{unknown}"
    );

    let again = co.turn(&two_sleeps(4));
    assert_eq!(again["outcome"], "completed", "{again}");
    assert_eq!(
        starts(&start_log).len(),
        2,
        "started again after it was killed"
    );
    // Each turn is its own run.
    assert_ne!(first["run_id"], again["run_id"]);
    let key = |doc: &Value| doc["results"][0]["id"].clone();
    assert_eq!(key(&again), "t4a");
    assert_eq!(co.finish(), 2, "the worst turn: one that could not be read");
}

#[test]
fn ctrl_c_ends_the_turn_with_its_answer_then_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let (log, start_log) = (dir.path().join("server.log"), dir.path().join("starts.log"));
    let p = Project::new(&manifest(&log, &start_log));
    let mut co = Coprocess::start(&p, &[]);
    let first = co.turn(r#"[{"id": "quick", "tool": "slow", "args": {"_latency": "200ms"}}]"#);
    assert_eq!(first["outcome"], "completed");
    writeln!(co.stdin, r#"[{{"id": "long", "tool": "slow"}}]"#).unwrap();
    co.stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(co.child.id() as i32, libc::SIGINT) };
    let mut answer = String::new();
    co.stdout.read_line(&mut answer).unwrap();
    let doc: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(doc["outcome"], "interrupted", "{doc}");
    assert_eq!(doc["results"][0]["status"], "cancelled");
    // The process ends without waiting for more turns.
    let status = co.child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
}

#[test]
fn options_of_one_whole_run_are_refused_with_turns() {
    let p = Project::new("[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n");
    for flag in [
        ["--journal", "j"],
        ["--record", "c.json"],
        ["--output", "o.json"],
    ] {
        let out = p
            .cmd()
            .args(["run", "--turns"])
            .args(flag)
            .write_stdin("[]\n")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be used with --turns"), "{err}");
    }
}

#[test]
fn each_turn_appends_its_own_history_line() {
    let p = Project::new("[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n");
    let history = p.path().join("turns.jsonl");
    let h = history.to_str().unwrap().to_string();
    let mut co = Coprocess::start(&p, &["--history", &h]);
    let ids: Vec<Value> = (0..3)
        .map(|i| {
            co.turn(&format!("[{{\"tool\": \"t\", \"args\": {{\"n\": {i}}}}}]"))["run_id"].clone()
        })
        .collect();
    assert_eq!(co.finish(), 0);
    let lines: Vec<Value> = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (line, id) in lines.iter().zip(&ids) {
        assert_eq!(&line["run_id"], id);
        assert_eq!(line["calls"], 1);
    }
}

/// Whether `pid` has exited: a zombie not yet reaped by its parent, or gone. A process's
/// first thread is a zombie while its other threads are still dying: wait for them too.
fn has_exited(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
    zombie && threads <= 1
}

#[test]
fn a_server_killed_between_turns_is_restarted_for_a_turn_that_comes_at_once() {
    // Before: the death went unnoticed until a call was sent to it, and that call was
    // `cancelled` (`connection_lost`) instead of going to a restarted server.
    let dir = tempfile::tempdir().unwrap();
    let (log, start_log) = (dir.path().join("server.log"), dir.path().join("starts.log"));
    let p = Project::new(&manifest(&log, &start_log));
    let mut co = Coprocess::start(&p, &[]);
    for round in 0..3 {
        let before = co.turn(&two_sleeps(2 * round + 1));
        assert_eq!(before["outcome"], "completed", "{before}");
        let pid = *starts(&start_log).last().unwrap();
        // SAFETY: kill(2) on the test server's own process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !has_exited(pid) {
            assert!(std::time::Instant::now() < until, "the server did not die");
            std::thread::yield_now();
        }
        let after = co.turn(&two_sleeps(2 * round + 2));
        assert_eq!(after["outcome"], "completed", "round {round}: {after}");
        assert_eq!(starts(&start_log).len(), round + 2, "restarted: {after}");
    }
    assert_eq!(co.finish(), 0);
}

/// Whether `pid` is gone: reaped, not even a zombie.
fn is_gone(pid: i32) -> bool {
    std::fs::metadata(format!("/proc/{pid}")).is_err()
}

#[test]
fn a_hook_cut_off_by_a_turn_s_deadline_is_reaped_while_the_process_lives_on() {
    // Before: the hook's process was left to tokio's orphan queue, which is reaped on a
    // SIGCHLD that flux-tools never takes (the signal is blocked in every thread): each such
    // hook stayed a zombie for the life of the process.
    let p = Project::new(concat!(
        "[hooks]\n",
        "before_call = [\"sh\", \"-c\", \"echo $$ >> hooks.pid; exec sleep 60\"]\n",
        "hook_timeout = \"120s\"\n\n",
        "[deadline]\nrun_seconds = 1\n\n",
        "[tools.read]\nkind = \"scripted\"\neffect = \"read\"\n",
    ));
    let mut co = Coprocess::start(&p, &[]);
    for turn in 0..3 {
        let doc = co.turn(&format!(r#"[{{"id": "c{turn}", "tool": "read"}}]"#));
        assert_eq!(doc["outcome"], "deadline_exceeded", "{doc}");
    }
    let pids: Vec<i32> = std::fs::read_to_string(p.path().join("hooks.pid"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "one hook a turn: {pids:?}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pids.iter().all(|&pid| is_gone(pid)) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| !is_gone(pid)).collect();
    assert!(
        left.is_empty(),
        "hooks not reaped while flux-tools runs: {left:?}"
    );
    assert_eq!(co.finish(), 3);
}

#[test]
fn a_learned_lane_keeps_its_limit_from_turn_to_turn() {
    let p = Project::new(
        "[concurrency]\nmax_concurrent_tools = 64\n\n\
         [lanes.partner]\nconcurrency = \"auto\"\nmin = 1\nmax = 32\nstart = 2\n\n\
         [tools.slow]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\nlanes = [\"partner\"]\n",
    );
    let mut co = Coprocess::start(&p, &["--format", "json"]);
    let calls = |turn: usize| {
        let calls: Vec<Value> = (0..24)
            .map(|i| serde_json::json!({"id": format!("t{turn}c{i}"), "tool": "slow"}))
            .collect();
        Value::Array(calls).to_string()
    };
    let learned = |doc: &Value| {
        let lanes = doc["stats"]["lanes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let lane = lanes.into_iter().find(|l| l["lane"] == "lane:partner");
        lane.map(|l| l["learned"].clone()).unwrap_or(Value::Null)
    };
    let first = learned(&co.turn(&calls(1)));
    let grown = first["last"].as_u64().unwrap_or(0);
    assert!(grown > 2, "{first}");
    // The second turn goes on from the limit the first learned (a turn never starts over).
    let second = learned(&co.turn(&calls(2)));
    assert!(second["last"].as_u64() >= Some(grown), "{second}");
    assert_eq!(co.finish(), 0);
}
