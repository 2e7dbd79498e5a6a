//! `run`: the worked examples, lanes that bind, call order, classification, outputs.

use serde_json::Value;

use crate::common::{flux, peak, repo, results, wall_ms, Project, SCRIPTED};

fn run_bundled(batch: &str) -> (Value, i32) {
    let out = flux()
        .current_dir(repo())
        .args(["run", batch, "--format", "json"])
        .output()
        .unwrap();
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

fn statuses(doc: &Value) -> Vec<String> {
    results(doc)
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn four_lookups_at_once_cost_about_one() {
    let (doc, code) = run_bundled("batches/four-lookups.yaml");
    assert_eq!(code, 0);
    assert_eq!(statuses(&doc), ["ok"; 4]);
    let wall = wall_ms(&doc);
    // One second, not four: the margin absorbs a loaded 2-core machine, never a serial run.
    assert!((1000..2500).contains(&wall), "4 × 1s lookups took {wall}ms");
    assert_eq!(peak(&doc, "turn"), 4);
}

#[test]
fn the_same_four_two_at_a_time_take_about_two() {
    let (doc, code) = run_bundled("batches/two-at-a-time.yaml");
    assert_eq!(code, 0);
    let wall = wall_ms(&doc);
    assert!((2000..3600).contains(&wall), "took {wall}ms");
    assert_eq!(peak(&doc, "turn"), 2);
    let waited: Vec<&Value> = results(&doc)
        .iter()
        .filter(|r| r["waited_on"] == "turn")
        .collect();
    assert_eq!(waited.len(), 2, "two calls waited on the turn lane");
    assert!(waited
        .iter()
        .all(|r| r["queued_ms"].as_u64().unwrap_or(0) >= 900));
}

#[test]
fn one_failure_is_reported_against_its_own_call() {
    let (doc, code) = run_bundled("batches/one-failure.yaml");
    assert_eq!(code, 1);
    assert_eq!(statuses(&doc), ["ok", "error", "ok", "ok"]);
    let r = &results(&doc)[1];
    assert_eq!(r["id"], "london");
    assert_eq!(r["event"], "TOOL_ERROR");
    assert_eq!(r["error"]["kind"], "tool_error");
    assert_eq!(r["error"]["message"], "upstream returned 502 Bad Gateway");
    assert_eq!(doc["outcome"], "completed");
}

#[test]
fn a_hanging_tool_is_cut_off_by_its_own_ceiling() {
    let (doc, code) = run_bundled("batches/hanging-tool.yaml");
    assert_eq!(code, 1);
    assert_eq!(statuses(&doc), ["ok", "timed_out", "ok"]);
    assert_eq!(
        results(&doc)[1]["error"]["message"],
        "tool 'stuck_lookup' exceeded its 1500ms timeout"
    );
    let wall = wall_ms(&doc);
    assert!((1500..2900).contains(&wall), "took {wall}ms");
}

#[test]
fn an_order_dependent_tool_runs_alone() {
    let (doc, code) = run_bundled("batches/order-dependent.yaml");
    assert_eq!(code, 0);
    let r = results(&doc);
    let start = |i: usize| r[i]["started_ms"].as_u64().unwrap();
    let end = |i: usize| start(i) + r[i]["duration_ms"].as_u64().unwrap();
    // Everything before the booking ended before it started; everything after started after it ended.
    assert!(end(0) <= start(2) && end(1) <= start(2));
    assert!(end(2) <= start(3) && end(2) <= start(4));
    assert_eq!(r[2]["phase"], 1);
    assert_eq!(r[3]["phase"], 2);
}

#[test]
fn refund_turn_runs_the_write_chain_in_order() {
    let (doc, code) = run_bundled("batches/refund.yaml");
    assert_eq!(code, 0);
    let r = results(&doc);
    assert_eq!(
        r[3]["output"]["order_id"], "o-17",
        "the reference was resolved from getOrders' output"
    );
    let end =
        |i: usize| r[i]["started_ms"].as_u64().unwrap() + r[i]["duration_ms"].as_u64().unwrap();
    assert!(end(2) <= r[3]["started_ms"].as_u64().unwrap());
    assert!(end(3) <= r[4]["started_ms"].as_u64().unwrap());
    assert_eq!(
        doc["stats"]["critical_path"],
        serde_json::json!(["orders", "refund", "email"])
    );
    assert!(r[3]["idempotency_key"]
        .as_str()
        .is_some_and(|k| k.contains(":refund:")));
    assert!(r[0]["idempotency_key"].is_null());
    assert_eq!(doc["stats"]["cost"], 0.01);
}

#[test]
fn per_tool_limit_binds_and_is_visible_in_stats() {
    let p = Project::new(SCRIPTED);
    let batch: String = (0..6).map(|_| "- tool: pair\n").collect();
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 0);
    assert_eq!(peak(&doc, "tool:pair"), 2);
    assert!(
        wall_ms(&doc) >= 900,
        "6 calls of 300ms, 2 at a time, cannot take under 900ms"
    );
    let waited = results(&doc)
        .iter()
        .filter(|r| r["waited_on"] == "tool:pair")
        .count();
    assert_eq!(waited, 4);
}

#[test]
fn results_come_back_in_call_order_whatever_order_they_finish() {
    let p = Project::new(SCRIPTED);
    let batch = "- { id: slow, tool: read, args: { _latency: 900ms } }\n- { id: mid, tool: read, args: { _latency: 600ms } }\n- { id: fast, tool: read, args: { _latency: 300ms } }\n";
    let out = p
        .cmd()
        .args(["run", "-"])
        .write_stdin(batch)
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["slow", "mid", "fast"]);
    let (doc, _) = p.run_json(batch, &[]);
    let ids: Vec<&str> = results(&doc)
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["slow", "mid", "fast"]);
}

#[test]
fn fail_run_classifies_every_call_and_exits_3() {
    let p = Project::new(SCRIPTED);
    let batch = "concurrency: { max_concurrent_tools: 3 }\non_tool_error: fail_run\ncalls:\n  - { id: inflight-read, tool: read, args: { _latency: 5s } }\n  - { id: inflight-write, tool: write, args: { _latency: 5s } }\n  - { id: boom, tool: fails }\n  - { id: queued, tool: read }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 3);
    assert_eq!(doc["outcome"], "failed");
    assert_eq!(
        statuses(&doc),
        ["cancelled", "indeterminate", "error", "never_dispatched"]
    );
    let r = results(&doc);
    assert_eq!(
        r[0]["error"]["message"],
        "cancelled in flight: safe to call again"
    );
    assert_eq!(r[1]["event"], "TOOL_INDETERMINATE");
    assert_eq!(
        r[1]["error"]["message"],
        "cancelled in flight: the side effect may have landed"
    );
    assert!(r[3]["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("never dispatched: "));
    assert!(r[3]["started_ms"].is_null() && r[3]["duration_ms"].is_null());
    assert!(
        wall_ms(&doc) < 3000,
        "in-flight siblings were stopped, not awaited"
    );
}

#[test]
fn surface_keeps_siblings_and_dependants_of_failures_never_run() {
    let p = Project::new(SCRIPTED);
    let batch = "- { id: a, tool: fails }\n- { id: b, tool: read, args: { x: \"${a.y}\" } }\n- { id: c, tool: read, after: [b] }\n- { id: d, tool: read }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 1);
    assert_eq!(
        statuses(&doc),
        ["error", "never_dispatched", "never_dispatched", "ok"]
    );
    let r = results(&doc);
    assert_eq!(r[1]["error"]["kind"], "dependency_failed");
    assert_eq!(
        r[1]["error"]["message"],
        "never dispatched: dependency a failed"
    );
    assert_eq!(
        r[2]["error"]["message"],
        "never dispatched: dependency b failed"
    );
}

#[test]
fn a_missing_path_fails_the_dependant_naming_the_path() {
    let p = Project::new(SCRIPTED);
    let batch = "- { id: a, tool: read, args: { _output: { items: [] } } }\n- { id: b, tool: read, args: { x: \"${a.items[0].id}\" } }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 1);
    let r = &results(&doc)[1];
    assert_eq!(r["status"], "never_dispatched");
    assert_eq!(r["error"]["kind"], "dependency_failed");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("argument `x`") && msg.contains("a.items[0]") && msg.contains("past the end"),
        "{msg}"
    );
}

#[test]
fn writes_are_chained_and_reads_overlap() {
    let p = Project::new(SCRIPTED);
    let batch = "- { id: w1, tool: write }\n- { id: r1, tool: read }\n- { id: w2, tool: write }\n- { id: r2, tool: read }\n";
    let (doc, code) = p.run_json(batch, &[]);
    assert_eq!(code, 0);
    let r = results(&doc);
    let start = |i: usize| r[i]["started_ms"].as_u64().unwrap();
    let end = |i: usize| start(i) + r[i]["duration_ms"].as_u64().unwrap();
    assert!(end(0) <= start(2), "the second write waited for the first");
    assert!(
        start(1) < end(0) && start(3) < end(0),
        "reads did not wait for writes"
    );
}

#[test]
fn transient_failures_of_idempotent_tools_are_retried() {
    let p = Project::new(SCRIPTED);
    let (doc, code) = p.run_json("- { tool: retry, args: { _fail_attempts: 2 } }\n- { tool: retry, args: { _fail_attempts: 9 } }\n", &[]);
    assert_eq!(code, 1);
    let r = results(&doc);
    assert_eq!(r[0]["status"], "ok");
    assert_eq!(r[0]["attempts"], 3);
    assert_eq!(r[1]["status"], "error");
    assert_eq!(r[1]["attempts"], 4, "1 attempt + retries = 3");
    assert_eq!(doc["stats"]["retries"], 5);
}

#[test]
fn run_deadline_ends_the_run_with_exit_3() {
    let p = Project::new(SCRIPTED);
    let (doc, code) = p.run_json(
        "- { tool: read, args: { _latency: 10s } }\n- { tool: write, args: { _latency: 10s } }\n",
        &["--deadline", "500ms"],
    );
    assert_eq!(code, 3);
    assert_eq!(doc["outcome"], "deadline_exceeded");
    assert_eq!(statuses(&doc), ["cancelled", "indeterminate"]);
    assert!(wall_ms(&doc) < 3000);
}

#[test]
fn tool_call_ceiling_times_out_the_call_and_ends_the_run() {
    let p = Project::new(&format!(
        "{SCRIPTED}\n[deadline]\ntool_call_seconds = 0.4\n"
    ));
    let (doc, code) = p.run_json("- { tool: read, args: { _latency: 10s } }\n- { tool: read, args: { _latency: 50ms } }\n- { tool: read, args: { x: \"${c2}\", _latency: 5s } }\n", &[]);
    assert_eq!(code, 3);
    assert_eq!(doc["outcome"], "deadline_exceeded");
    let r = results(&doc);
    assert_eq!(r[0]["status"], "timed_out");
    assert!(r[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tool_call_seconds"));
    assert_eq!(r[1]["status"], "ok");
    assert_ne!(r[2]["status"], "ok");
}

#[test]
fn budget_never_dispatches_what_it_cannot_pay_for() {
    let p = Project::new(
        "[tools.paid]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\ncost = 0.01\n",
    );
    let batch: String = (0..10).map(|_| "- tool: paid\n").collect();
    let (doc, code) = p.run_json(&batch, &["--max-cost", "0.05"]);
    assert_eq!(code, 3);
    assert_eq!(doc["outcome"], "budget_exhausted");
    let s = statuses(&doc);
    assert_eq!(s.iter().filter(|x| *x == "ok").count(), 5);
    assert_eq!(s.iter().filter(|x| *x == "never_dispatched").count(), 5);
    assert!(results(&doc)
        .iter()
        .filter(|r| r["status"] == "never_dispatched")
        .all(|r| r["error"]["kind"] == "budget_exhausted"));
    assert_eq!(doc["stats"]["cost"], 0.05);
}

#[test]
fn output_file_is_written_and_stdout_keeps_results_only() {
    let p = Project::new(SCRIPTED);
    let b = p.write("b.yaml", "- tool: pair\n");
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--output", "res.json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["status"], "ok");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(p.path().join("res.json")).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "completed");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 call: 1 ok"));
    // A missing folder is refused before anything runs.
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--output", "nope/res.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn table_format_shows_each_call() {
    let out = flux()
        .current_dir(repo())
        .args(["run", "batches/one-failure.yaml", "--format", "table"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("london") && text.contains("upstream returned 502 Bad Gateway"),
        "{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "no color when stdout is not a terminal"
    );
}

#[test]
fn a_terminal_of_zero_columns_gets_the_tables_natural_width() {
    // Before: a terminal that reports 0 columns (`script` without a size) squeezed every
    // column of the results table to one character.
    let p = Project::new(SCRIPTED);
    let b = p.write("b.yaml", "- { tool: read, args: { _latency: 200ms } }\n");
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let inner = format!(
        "stty cols 0 rows 0; {} run {} --progress never --color always",
        bin.display(),
        b.display()
    );
    let out = std::process::Command::new("script")
        .current_dir(p.path())
        .args(["-qfec", &inner, "/dev/null"])
        .env_remove("CI")
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("output / error"), "{screen}");
}
