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
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", "--stream"])
        .env("CI", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
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
