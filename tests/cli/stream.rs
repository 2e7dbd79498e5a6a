//! Streaming JSON Lines on stdin: calls start as they arrive, results stream in call order,
//! ids and indices continue across chunks, references reach earlier chunks' named calls.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Project;

const MANIFEST: &str = "[tools.z]\nkind = \"scripted\"\neffect = \"read\"\n[tools.slow]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\n";

#[test]
fn the_first_result_comes_out_before_the_input_ends() {
    let p = Project::new(MANIFEST);
    let mut child = stream_child(&p);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(
        stdin,
        "{{\"id\": \"first\", \"tool\": \"z\", \"args\": {{\"v\": 7}}}}"
    )
    .unwrap();
    stdin.flush().unwrap();
    // A slow writer: the rest has not been written, yet the first result arrives.
    let started = Instant::now();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let first: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(first["id"], "first");
    assert_eq!(first["status"], "ok");
    // Later chunks: default ids and indices continue; a reference reaches the earlier named call.
    writeln!(stdin, "{{\"tool\": \"slow\"}}").unwrap();
    writeln!(
        stdin,
        "{{\"tool\": \"z\", \"args\": {{\"x\": \"${{first.v}}\"}}}}"
    )
    .unwrap();
    drop(stdin);
    let rest: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest.len(), 2);
    assert_eq!(rest[0]["index"], 1);
    assert_eq!(rest[0]["id"], "c2");
    assert_eq!(rest[1]["index"], 2);
    assert_eq!(rest[1]["output"], serde_json::json!({"x": 7}));
}

#[test]
fn a_whole_batch_on_stdin_still_works_with_stream() {
    let p = Project::new(MANIFEST);
    let out = p
        .cmd()
        .args(["run", "--stream"])
        .write_stdin("calls:\n  - tool: z\n  - tool: slow\n")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["tool"], "slow");
}

#[test]
fn many_calls_stream_in_order() {
    let p = Project::new(MANIFEST);
    let input: String = (0..20_000)
        .map(|i| format!("{{\"tool\": \"z\", \"args\": {{\"i\": {i}}}}}\n"))
        .collect();
    let out = p
        .cmd()
        .args(["run", "--stream", "--lane-store", "memory"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = 0;
    for (i, l) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["index"], i);
        assert_eq!(v["output"]["i"], i);
        n += 1;
    }
    assert_eq!(n, 20_000);
}

/// `(id, status, output, error kind)` of each result, in call order.
type Digest = Vec<(Value, Value, Value, Value)>;

/// [`Digest`] of `results`.
fn digest(results: &[Value]) -> Digest {
    results
        .iter()
        .map(|r| {
            (
                r["id"].clone(),
                r["status"].clone(),
                r["output"].clone(),
                r["error"]["kind"].clone(),
            )
        })
        .collect()
}

/// Run the JSON Lines `calls` twice — as a batch file, and piped to `run --stream` with each
/// line written `gap` after the one before (so later lines land in later chunks) — with
/// `extra` options. Returns both runs' digests and exit codes, and the stream's stderr.
fn both_ways(
    p: &Project,
    calls: &[&str],
    extra: &[&str],
    gap: Duration,
) -> ((Digest, i32), (Digest, i32, String)) {
    let text = calls.join("\n") + "\n";
    let (doc, code) = p.run_json(&text, extra);
    let whole = (digest(crate::common::results(&doc)), code);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", "--stream"])
        .args(extra)
        .env("CI", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for c in calls {
        writeln!(stdin, "{c}").unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(gap);
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let streamed = (digest(&lines), out.status.code().unwrap_or(-1), stderr);
    (whole, streamed)
}

#[test]
fn a_stream_uses_the_redis_lane_store_it_is_given() {
    // Before the single pipeline, --stream silently used the local store whatever was asked:
    // a dead Redis still "worked". Now the stream fails like a whole batch does.
    let p = Project::new(MANIFEST);
    let out = p
        .cmd()
        .args(["run", "--stream", "--lane-store", "redis://127.0.0.1:1"])
        .write_stdin("{\"tool\": \"z\"}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"));
    assert!(out.stdout.is_empty());

    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let manifest = "[concurrency.per_tool]\nslow = 1\n[tools.z]\nkind = \"scripted\"\neffect = \"read\"\n[tools.slow]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\n";
    let p = Project::new(manifest);
    let calls = [
        r#"{"id": "a", "tool": "slow", "args": {"n": 1}}"#,
        r#"{"id": "b", "tool": "slow", "args": {"n": 2}}"#,
        r#"{"tool": "z", "args": {"from": "${a.n}"}}"#,
    ];
    let ((whole, wcode), (streamed, scode, stderr)) = both_ways(
        &p,
        &calls,
        &["--lane-store", &redis.url],
        Duration::from_millis(300),
    );
    assert_eq!(whole, streamed, "{stderr}");
    assert_eq!((wcode, scode), (0, 0), "{stderr}");
}

#[test]
fn a_stream_calls_mcp_tools_with_their_annotations() {
    let p = Project::new("");
    let log = p.path().join("mcp.log");
    std::fs::write(p.path().join("tools.toml"), crate::mcp::own_manifest(&log)).unwrap();
    let calls = [
        r#"{"id": "s", "tool": "sleep", "args": {"ms": 10}}"#,
        r#"{"id": "f", "tool": "fail", "args": {}}"#,
        r#"{"tool": "structured", "args": {}}"#,
    ];
    let ((whole, wcode), (streamed, scode, stderr)) =
        both_ways(&p, &calls, &[], Duration::from_millis(300));
    assert_eq!(whole, streamed, "{stderr}");
    assert_eq!((wcode, scode), (1, 1), "{stderr}");
    assert_eq!(streamed[0].1, "ok", "{stderr}");
    assert!(!stderr.contains("were not set up"), "{stderr}");
}

#[test]
fn a_stream_runs_hooks_and_keeps_one_budget_across_chunks() {
    let manifest = r#"
[hooks]
before_call = ["sh", "-c", "case \"$(cat)\" in *forbidden*) exit 3;; esac"]

[tools.paid]
kind = "scripted"
effect = "read"
cost = 1.0

[tools.free]
kind = "scripted"
effect = "read"
"#;
    let p = Project::new(manifest);
    let calls = [
        r#"{"id": "one", "tool": "paid", "args": {"n": 1}}"#,
        r#"{"id": "two", "tool": "free", "args": {"n": "forbidden"}}"#,
        r#"{"id": "three", "tool": "paid", "args": {"n": 3}}"#,
        r#"{"id": "four", "tool": "paid", "args": {"n": 4}}"#,
    ];
    let ((whole, wcode), (streamed, scode, stderr)) =
        both_ways(&p, &calls, &["--max-cost", "2"], Duration::from_millis(250));
    assert_eq!(whole, streamed, "{stderr}");
    let kinds: Vec<&Value> = streamed.iter().map(|d| &d.3).collect();
    assert_eq!(
        kinds,
        [
            &Value::Null,
            &Value::from("guardrail"),
            &Value::Null,
            &Value::from("budget_exhausted")
        ],
        "{stderr}"
    );
    assert_eq!((wcode, scode), (3, 3), "{stderr}");
}

#[test]
fn a_bad_line_in_a_stream_is_located_at_its_own_line() {
    // Before: `<stdin> calls 2-2:1:10`, relative to the chunk.
    let p = Project::new(MANIFEST);
    let mut child = stream_child(&p);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{{\"tool\": \"z\"}}").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    writeln!(stdin).unwrap();
    writeln!(stdin, "{{\"tool\": \"zz\"}}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("<stdin>:3:"), "{stderr}");
    assert!(stderr.contains("did you mean"), "{stderr}");
}

/// `flux-tools run --stream` in `p`, stdin and stdout piped.
fn stream_child(p: &Project) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", "--stream"])
        .env("CI", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Stream `first`, then `second` after `gap`: the result lines, and whether the run exited 0.
fn two_calls_apart(p: &Project, first: &str, gap: Duration, second: &str) -> (Vec<Value>, bool) {
    let mut child = stream_child(p);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{first}").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(gap);
    writeln!(stdin, "{second}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, out.status.success())
}

#[test]
fn a_fast_call_streams_out_before_its_slow_sibling_ends() {
    // Before: x (0.2 s) came out at 2.01 s, when its chunk (with y, 2 s) had finished.
    let p = Project::new(MANIFEST);
    let mut child = stream_child(&p);
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"id\": \"x\", \"tool\": \"slow\"}\n{\"id\": \"y\", \"tool\": \"slow\", \"args\": {\"_latency\": \"2s\"}}\n")
        .unwrap();
    let started = Instant::now();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let first_at = started.elapsed();
    drop(stdin);
    let x: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(x["id"], "x");
    assert!(
        first_at < Duration::from_millis(1500),
        "x came out after {first_at:?}"
    );
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_call_arriving_mid_run_starts_before_the_earlier_slow_call_ends() {
    // Before: a call arriving while a chunk ran waited for the whole chunk (a barrier).
    let p = Project::new(MANIFEST);
    let (lines, ok) = two_calls_apart(
        &p,
        r#"{"id": "y", "tool": "slow", "args": {"_latency": "3s"}}"#,
        Duration::from_millis(500),
        r#"{"id": "z", "tool": "slow"}"#,
    );
    assert!(ok);
    assert_eq!(lines[1]["id"], "z");
    // Times count from the run's start: z went out while y (3 s) still ran.
    let z_started = lines[1]["started_ms"].as_u64().unwrap();
    assert!(
        (400..2500).contains(&z_started),
        "z started at {z_started} ms"
    );
    let y_ended =
        lines[0]["started_ms"].as_u64().unwrap() + lines[0]["duration_ms"].as_u64().unwrap();
    assert!(z_started < y_ended);
}

#[test]
fn a_lone_call_in_a_stream_still_waits_for_everything_before_it() {
    let manifest = format!("{MANIFEST}[tools.alone]\nkind = \"scripted\"\neffect = \"read\"\nparallel_safe = false\nlatency = \"200ms\"\n");
    let p = Project::new(&manifest);
    let (lines, _) = two_calls_apart(
        &p,
        r#"{"id": "y", "tool": "slow", "args": {"_latency": "1s"}}"#,
        Duration::from_millis(300),
        r#"{"id": "a", "tool": "alone"}"#,
    );
    let y_end =
        lines[0]["started_ms"].as_u64().unwrap() + lines[0]["duration_ms"].as_u64().unwrap();
    assert!(
        lines[1]["started_ms"].as_u64().unwrap() >= y_end,
        "{lines:?}"
    );
}

#[test]
fn a_reader_that_goes_away_stops_new_calls_and_the_run_ends_with_its_calls_in_flight() {
    let manifest = format!("{MANIFEST}[tools.mark]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"touch\", \"marked\"]\nstdin = \"none\"\n");
    let p = Project::new(&manifest);
    let mut child = stream_child(&p);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{{\"id\": \"a\", \"tool\": \"slow\"}}").unwrap();
    writeln!(
        stdin,
        "{{\"id\": \"b\", \"tool\": \"slow\", \"args\": {{\"_latency\": \"1s\"}}}}"
    )
    .unwrap();
    stdin.flush().unwrap();
    // `| head -1`: read one line and close the pipe.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(stdout);
    let closed = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    // A call arriving after the reader left is never dispatched.
    let _ = writeln!(stdin, "{{\"id\": \"c\", \"tool\": \"mark\"}}");
    let _ = stdin.flush();
    let status = child.wait().unwrap();
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "it did not end promptly"
    );
    assert_eq!(status.code(), Some(0));
    assert!(
        !p.path().join("marked").exists(),
        "c ran after the reader left"
    );
    drop(stdin);
    // The summary says what happened: drained, not interrupted (nobody pressed Ctrl-C).
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("outcome drained"), "{err}");
    assert!(!err.contains("interrupted"), "{err}");
}
