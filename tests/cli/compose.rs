//! Features that are right alone and must stay right together: the read cache after a write,
//! a read after a write paused for approval, the call cap with deferred and resumed calls, and
//! numbers a tool printed passed on byte for byte.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{results, Project, Redis};

/// A tiny database (one line per row, in `db`): `count` reads it (cached when `cache` is
/// set), `insert` appends a row; both name the backend `db`. `audit` is a read on another
/// backend. Every invocation is logged.
fn db_manifest(dir: &Path, cache: &str, insert_extra: &str) -> String {
    let db = dir.join("db");
    let log = dir.join("calls.log");
    format!(
        r#"
[tools.count]
kind = "command"
effect = "read"
backend = "db"
{cache}
command = ["sh", "-c", 'echo "$FLUX_CALL_ID" >> {log}; sleep 0.2; touch {db}; printf "{{\"rows\": %s}}" "$(wc -l < {db})"']
stdin = "none"

[tools.insert]
kind = "command"
effect = "write"
backend = "db"
{insert_extra}
command = ["sh", "-c", 'echo "$FLUX_CALL_ID" >> {log}; sleep 0.2; echo "row $1" >> {db}; echo inserted', "insert", "{{v}}"]
stdin = "none"

[tools.audit]
kind = "command"
effect = "read"
backend = "audit-log"
command = ["sh", "-c", 'echo "$FLUX_CALL_ID" >> {log}; sleep 0.2; echo "$1"', "audit", "{{n}}"]
stdin = "none"
"#,
        log = log.display(),
        db = db.display(),
    )
}

fn project(cache: &str, insert_extra: &str) -> (Project, PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    (Project::new(&db_manifest(&dir, cache, insert_extra)), dir)
}

fn logged(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn statuses(doc: &Value) -> Vec<(String, String)> {
    results(doc)
        .iter()
        .map(|r| {
            let kind = r["error"]["kind"].as_str().unwrap_or("").to_string();
            (r["status"].as_str().unwrap_or("").to_string(), kind)
        })
        .collect()
}

const COUNT_INSERT_COUNT: &str = r#"- { id: before, tool: count }
- { id: add, tool: insert, args: { v: 1 } }
- { id: after, tool: count }
"#;

#[test]
fn a_cached_read_after_a_write_on_its_backend_is_not_stale() {
    let (p, dir) = project(r#"cache = "5m""#, "");
    let (doc, code) = p.run_json(COUNT_INSERT_COUNT, &[]);
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["output"]["rows"], 0, "{doc}");
    assert!(
        r[2].get("cached").is_none(),
        "read after the write was cached: {doc}"
    );
    assert_eq!(r[2]["output"]["rows"], 1, "{doc}");
    // A second run: its first read may not be answered by an entry stored before the first
    // run's write; it finds the entry stored after it (1 row), and its own insert makes its
    // last read look again.
    let (doc, code) = p.run_json(COUNT_INSERT_COUNT, &[]);
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["output"]["rows"], 1, "{doc}");
    assert_eq!(r[0]["cached"], true, "{doc}");
    assert_eq!(r[2]["output"]["rows"], 2, "{doc}");
    assert!(r[2].get("cached").is_none(), "{doc}");
    assert_eq!(logged(&dir).len(), 5, "{:?}", logged(&dir));
}

#[test]
fn plan_marks_a_read_cached_only_when_no_write_precedes_it_on_its_backend() {
    let (p, _dir) = project(r#"cache = "5m""#, "");
    let (doc, _) = p.run_json("- { id: warm, tool: count }\n", &[]);
    assert_eq!(results(&doc)[0]["status"], "ok");
    let b = p.write("plan.yaml", COUNT_INSERT_COUNT);
    let out = p
        .cmd()
        .args(["plan", b.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = plan["calls"].as_array().expect("calls");
    assert_eq!(calls[0]["cached"], true, "{plan}");
    assert!(calls[2].get("cached").is_none_or(|c| c != true), "{plan}");
}

#[test]
fn a_write_in_another_run_makes_the_cached_read_look_again() {
    let (p, dir) = project(r#"cache = "5m""#, "");
    let one = "- { id: c, tool: count }\n";
    let (doc, _) = p.run_json(one, &[]);
    assert_eq!(results(&doc)[0]["output"]["rows"], 0);
    let (doc, _) = p.run_json("- { id: w, tool: insert, args: { v: 1 } }\n", &[]);
    assert_eq!(results(&doc)[0]["status"], "ok");
    let (doc, _) = p.run_json(one, &[]);
    assert_eq!(results(&doc)[0]["output"]["rows"], 1, "{doc}");
    assert!(results(&doc)[0].get("cached").is_none(), "{doc}");
    let (doc, _) = p.run_json(one, &[]);
    assert_eq!(results(&doc)[0]["cached"], true, "{doc}");
    assert_eq!(logged(&dir), ["c", "w", "c"]);
}

#[test]
fn a_write_under_no_cache_still_makes_other_runs_entries_stale() {
    let (p, _dir) = project(r#"cache = "5m""#, "");
    let one = "- { id: c, tool: count }\n";
    let (doc, _) = p.run_json(one, &[]);
    assert_eq!(results(&doc)[0]["output"]["rows"], 0);
    let write = "- { id: w, tool: insert, args: { v: 1 } }\n";
    let (doc, _) = p.run_json(write, &["--no-cache"]);
    assert_eq!(results(&doc)[0]["status"], "ok");
    let (doc, _) = p.run_json(one, &[]);
    assert_eq!(results(&doc)[0]["output"]["rows"], 1, "{doc}");
}

#[test]
fn a_write_through_redis_makes_every_process_look_again() {
    let Some(redis) = Redis::start() else { return };
    let (p, dir) = project(r#"cache = "5m""#, "");
    let store = ["--lane-store", redis.url.as_str()];
    let one = "- { id: c, tool: count }\n";
    let (doc, code) = p.run_json(one, &store);
    assert_eq!(code, 0, "{doc}");
    let (doc, _) = p.run_json(one, &store);
    assert_eq!(results(&doc)[0]["cached"], true, "{doc}");
    let (doc, _) = p.run_json(COUNT_INSERT_COUNT, &store);
    let r = results(&doc);
    assert_eq!(r[0]["cached"], true, "{doc}");
    assert_eq!(r[2]["output"]["rows"], 1, "{doc}");
    assert!(r[2].get("cached").is_none(), "{doc}");
    let (doc, _) = p.run_json(one, &store);
    assert_eq!(results(&doc)[0]["output"]["rows"], 1, "{doc}");
    assert_eq!(results(&doc)[0]["cached"], true, "{doc}");
    assert_eq!(logged(&dir), ["c", "add", "after"]);
}

#[test]
fn turns_read_their_own_insert_through_the_cache() {
    use std::io::{BufRead, BufReader, Write};
    let (p, _dir) = project(r#"cache = "5m""#, "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", "--turns"])
        .env("CI", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for turn in 1..=20 {
        let line = format!(
            r#"[{{"id": "add", "tool": "insert", "args": {{"v": {turn}}}}}, {{"id": "n", "tool": "count"}}]"#
        );
        writeln!(stdin, "{line}").unwrap();
        let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(
            answer["results"][1]["output"]["rows"], turn,
            "turn {turn}: {answer}"
        );
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_read_after_a_paused_write_waits_with_it_and_runs_after_it_on_resume() {
    let (p, dir) = project("", "requires_approval = true\nidempotent = true");
    let journal = p.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let batch = "- { id: before, tool: count }\n- { id: add, tool: insert, args: { v: 1 } }\n- { id: after, tool: count }\n- { id: other, tool: audit, args: { n: 7 } }\n";
    let (doc, code) = p.run_json(batch, &["--journal", j]);
    assert_eq!(code, 4, "{doc}");
    let s = statuses(&doc);
    assert_eq!(s[0].0, "ok");
    assert_eq!(
        s[1],
        ("never_dispatched".into(), "awaiting_approval".into())
    );
    assert_eq!(
        s[2],
        ("never_dispatched".into(), "awaiting_approval".into()),
        "{doc}"
    );
    assert_eq!(s[3].0, "ok", "another backend goes on: {doc}");
    let (doc, code) = p.resume_approving(j, "add", &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(results(&doc)[2]["output"]["rows"], 1, "{doc}");
    assert_eq!(&logged(&dir)[2..], ["add", "after"]);
}

const PAUSED_WRITE_THREE_READS: &str = r#"- { id: add, tool: insert, args: { v: 1 } }
- { id: a1, tool: audit, args: { n: 1 } }
- { id: a2, tool: audit, args: { n: 2 } }
- { id: a3, tool: audit, args: { n: 3 } }
"#;

#[test]
fn a_deferred_call_gives_its_cap_slot_back() {
    let (p, _dir) = project("", "requires_approval = true\nidempotent = true");
    let j = p.path().join("j.jsonl");
    let args = ["--journal", j.to_str().unwrap(), "--max-calls", "3"];
    let (doc, code) = p.run_json(PAUSED_WRITE_THREE_READS, &args);
    assert_eq!(code, 4, "{doc}");
    assert_eq!(doc["outcome"], "paused", "{doc}");
    let s = statuses(&doc);
    assert_eq!(s[0].1, "awaiting_approval");
    for r in &s[1..] {
        assert_eq!(r.0, "ok", "{doc}");
    }
}

#[test]
fn a_resumed_run_counts_every_call_its_journal_dispatched() {
    let (p, dir) = project("", "requires_approval = true\nidempotent = true");
    let journal = p.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let first = "- { id: add, tool: insert, args: { v: 1 } }\n- { id: a1, tool: audit, args: { n: 1 } }\n- { id: a2, tool: audit, args: { n: 2 } }\n";
    let (doc, code) = p.run_json(first, &["--journal", j]);
    assert_eq!(code, 4, "{doc}");
    let (doc, code) = p.resume_approving(j, "add", &["--max-calls", "2"]);
    assert_eq!(code, 3, "{doc}");
    let s = statuses(&doc);
    assert_eq!(
        s[0],
        ("never_dispatched".into(), "call_limit".into()),
        "{doc}"
    );
    let mut ran = logged(&dir);
    ran.sort();
    assert_eq!(ran, ["a1", "a2"], "the resumed call may not run");
}

/// Numbers a tool printed reach results, references, answers and journals as written.
#[test]
fn numbers_a_tool_printed_are_passed_on_as_written() {
    let p = Project::new(
        r#"
[tools.big]
kind = "command"
effect = "read"
command = ["sh", "-c", 'printf "%s" "$1"', "big", "{text}"]
stdin = "none"

[tools.echo]
kind = "command"
effect = "read"
command = ["sh", "-c", 'cat']
"#,
    );
    let batch = r#"- { id: huge, tool: big, args: { text: "12345678901234567890123" } }
- { id: money, tool: big, args: { text: "1.10" } }
- { id: order, tool: big, args: { text: '{"id": 98765432109876543210, "total": 19.90}' } }
- { id: ref, tool: echo, args: { id: "${order.id}", total: "${order.total}" } }
"#;
    let path = p.write("batch.yaml", batch);
    let journal = p.path().join("j.jsonl");
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--format", "json"])
        .args(["--journal", journal.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("12345678901234567890123"), "{text}");
    assert!(text.contains(r#""output": 1.10"#), "{text}");
    assert!(text.contains("98765432109876543210"), "{text}");
    assert!(text.contains("19.90"), "{text}");
    // The reference handed the tool the number exactly (the echo tool printed its stdin).
    let doc: Value = serde_json::from_str(&text).unwrap();
    let echoed = serde_json::to_string(&results(&doc)[3]["output"]).unwrap();
    assert_eq!(echoed, r#"{"id":98765432109876543210,"total":19.90}"#);
    let journal = std::fs::read_to_string(&journal).unwrap();
    assert!(journal.contains("98765432109876543210"), "{journal}");
    assert!(journal.contains("19.90"), "{journal}");
    // A cassette keeps them, and a replay answers with them.
    let cassette = p.path().join("c.json");
    let c = cassette.to_str().unwrap();
    let out = p
        .cmd()
        .args([
            "run",
            path.to_str().unwrap(),
            "--format",
            "json",
            "--record",
            c,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let recorded = std::fs::read_to_string(&cassette).unwrap();
    assert!(recorded.contains("12345678901234567890123"), "{recorded}");
    let out = p
        .cmd()
        .args([
            "run",
            path.to_str().unwrap(),
            "--format",
            "jsonl",
            "--replay",
            c,
        ])
        .output()
        .unwrap();
    let replayed = String::from_utf8_lossy(&out.stdout);
    assert!(replayed.contains(r#""output":1.10"#), "{replayed}");
    assert!(replayed.contains("98765432109876543210"), "{replayed}");
    // --emit: what the model reads.
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--emit", "openai"])
        .output()
        .unwrap();
    let emitted = String::from_utf8_lossy(&out.stdout);
    assert!(emitted.contains("12345678901234567890123"), "{emitted}");
    assert!(emitted.contains("98765432109876543210"), "{emitted}");
    assert!(emitted.contains("1.10"), "{emitted}");
}
