//! The call cap (`max_calls` from the manifest, the batch and `--max-calls`) and approval that
//! can wait (a journaled run pauses, `approvals` lists what waits, `--resume … --approve
//! ID@HASH` continues).

use std::path::Path;

use serde_json::Value;

use crate::common::{results, Project};

fn capped(max: Option<u32>) -> String {
    let budget = max.map_or(String::new(), |n| format!("[budget]\nmax_calls = {n}\n"));
    format!(
        r#"{budget}
[tools.read]
kind = "scripted"
effect = "read"
latency = "200ms"

[tools.cached]
kind = "scripted"
effect = "read"
cache = "5m"
"#
    )
}

fn five() -> String {
    (0..5)
        .map(|i| format!("- {{ id: c{i}, tool: read, args: {{ n: {i} }} }}\n"))
        .collect()
}

fn statuses(doc: &Value) -> Vec<(String, String)> {
    results(doc)
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap().to_string(),
                r["error"]["kind"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The first `n` calls ran; the rest, in call order, were refused by the cap.
fn assert_capped(doc: &Value, code: i32, n: usize) {
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["outcome"], "budget_exhausted");
    for (i, (status, kind)) in statuses(doc).into_iter().enumerate() {
        if i < n {
            assert_eq!(status, "ok", "call {i}: {doc}");
        } else {
            assert_eq!(
                (status.as_str(), kind.as_str()),
                ("never_dispatched", "call_limit"),
                "call {i}"
            );
        }
    }
}

#[test]
fn max_calls_from_the_manifest_refuses_calls_beyond_it_in_call_order() {
    let p = Project::new(&capped(Some(3)));
    let (doc, code) = p.run_json(&five(), &[]);
    assert_capped(&doc, code, 3);
    assert!(results(&doc)[4]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("call limit reached (max_calls = 3)"));
}

#[test]
fn a_batch_may_lower_the_cap_but_not_raise_it() {
    let p = Project::new(&capped(Some(3)));
    let lower = format!("budget: {{ max_calls: 2 }}\ncalls:\n{}", indent(&five()));
    let (doc, code) = p.run_json(&lower, &[]);
    assert_capped(&doc, code, 2);
    let higher = format!("budget: {{ max_calls: 10 }}\ncalls:\n{}", indent(&five()));
    let path = p.write("high.yaml", &higher);
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_capped(&doc, out.status.code().unwrap(), 3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("above the cap of 3; kept 3"), "{err}");
}

fn indent(calls: &str) -> String {
    calls.lines().map(|l| format!("  {l}\n")).collect()
}

#[test]
fn the_command_line_sets_the_cap_in_place_of_the_manifest() {
    let p = Project::new(&capped(Some(3)));
    let (doc, code) = p.run_json(&five(), &["--max-calls", "4"]);
    assert_capped(&doc, code, 4);
    let p = Project::new(&capped(None));
    let (doc, code) = p.run_json(&five(), &["--max-calls", "1"]);
    assert_capped(&doc, code, 1);
    let (doc, code) = p.run_json(&five(), &[]);
    assert_eq!((code, doc["outcome"].as_str()), (0, Some("completed")));
}

#[test]
fn cache_hits_do_not_count_against_the_cap() {
    let p = Project::new(&capped(Some(2)));
    let batch =
        "- { id: a, tool: cached, args: { q: 1 } }\n- { id: b, tool: cached, args: { q: 2 } }\n";
    let (_, code) = p.run_json(batch, &["--lane-store", "local"]);
    assert_eq!(code, 0);
    // Both are hits now; a third, new call still fits under a cap of 2... and a fourth not.
    let batch = format!(
        "{batch}- {{ id: c, tool: cached, args: {{ q: 3 }} }}\n- {{ id: d, tool: cached, args: {{ q: 4 }} }}\n- {{ id: e, tool: cached, args: {{ q: 5 }} }}\n"
    );
    let (doc, code) = p.run_json(&batch, &[]);
    assert_eq!(code, 3, "{doc}");
    let s = statuses(&doc);
    assert_eq!(results(&doc)[0]["cached"], true);
    assert_eq!(results(&doc)[1]["cached"], true);
    assert_eq!(s[2].0, "ok");
    assert_eq!(s[3].0, "ok");
    assert_eq!(s[4], ("never_dispatched".into(), "call_limit".into()));
}

/// Pay needs approval and logs each invocation; reads log theirs.
fn approval_manifest(log: &Path) -> String {
    let cmd = |effect: &str, extra: &str| {
        format!(
            r#"kind = "command"
effect = "{effect}"
{extra}command = ["sh", "-c", 'echo "$FLUX_CALL_ID" >> {log}; sleep 0.2; printf "{{\"n\": %s}}" "$1"', "t", "{{n}}"]
stdin = "none"
"#,
            log = log.display()
        )
    };
    format!(
        "[tools.read]\n{}\n[tools.pay]\n{}",
        cmd("read", ""),
        cmd("write", "idempotent = true\nrequires_approval = true\n")
    )
}

const SIX: &str = r#"- { id: r1, tool: read, args: { n: 1 } }
- { id: pay-1, tool: pay, args: { n: "${r1.n}" } }
- { id: r2, tool: read, args: { n: 2 } }
- { id: after-pay, tool: read, args: { n: "${pay-1.n}" } }
- { id: r3, tool: read, args: { n: 3 } }
- { id: r4, tool: read, args: { n: 4 } }
"#;

fn logged(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_deferred_approval_pauses_the_run_and_a_resume_with_its_hash_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let p = Project::new(&approval_manifest(&log));
    let journal = p.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let (doc, code) = p.run_json(SIX, &["--journal", j]);
    assert_eq!(code, 4, "{doc}");
    assert_eq!(doc["outcome"], "paused");
    let s = statuses(&doc);
    for i in [0, 2, 4, 5] {
        assert_eq!(s[i].0, "ok", "{doc}");
    }
    assert_eq!(
        s[1],
        ("never_dispatched".into(), "awaiting_approval".into())
    );
    assert_eq!(
        s[3],
        ("never_dispatched".into(), "awaiting_approval".into())
    );
    let mut ran = logged(&log);
    ran.sort();
    assert_eq!(ran, ["r1", "r2", "r3", "r4"]);

    // `approvals` lists what waits: the call, its tool, its resolved arguments and hash.
    let out = p
        .cmd()
        .args(["approvals", j, "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let waiting: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(waiting.as_array().unwrap().len(), 1, "{waiting}");
    assert_eq!(waiting[0]["id"], "pay-1");
    assert_eq!(waiting[0]["tool"], "pay");
    assert_eq!(waiting[0]["args"], serde_json::json!({"n": 1}));
    let hash = waiting[0]["hash"].as_str().unwrap().to_string();
    let text = p.cmd().args(["approvals", j]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("--approve pay-1@{hash}")), "{text}");

    // A wrong hash is refused before anything runs.
    let before = std::fs::read_to_string(&journal).unwrap();
    let wrong = format!("pay-1@{}", "0".repeat(16));
    let out = resume(&p, j, &wrong);
    let (code, err) = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hash to"), "{err}");
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), before);
    assert_eq!(logged(&log).len(), 4);

    // The right hash runs the approved call and what depends on it; the rest keep their results.
    let out = resume(&p, j, &format!("pay-1@{hash}"));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc}");
    assert!(statuses(&doc).iter().all(|(s, _)| s == "ok"), "{doc}");
    assert_eq!(&logged(&log)[4..], ["pay-1", "after-pay"]);
    let out = p
        .cmd()
        .args(["approvals", j, "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

/// `run batch.yaml --resume JOURNAL --approve APPROVE --format json`.
fn resume(p: &Project, journal: &str, approve: &str) -> std::process::Output {
    let b = p.path().join("batch.yaml");
    p.cmd()
        .args(["run", b.to_str().unwrap(), "--resume", journal])
        .args(["--approve", approve, "--format", "json"])
        .output()
        .unwrap()
}

#[test]
fn without_a_journal_an_unanswered_approval_is_denied_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let p = Project::new(&approval_manifest(&log));
    let (doc, code) = p.run_json(SIX, &[]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["outcome"], "completed");
    let s = statuses(&doc);
    assert_eq!(s[1], ("never_dispatched".into(), "approval_denied".into()));
    assert_eq!(
        s[3],
        ("never_dispatched".into(), "dependency_failed".into())
    );
}

#[test]
fn an_approval_for_other_arguments_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let p = Project::new(&approval_manifest(&log));
    // Approving pay-1 for arguments it does not have (no journal to check against first).
    let (doc, code) = p.run_json(SIX, &["--approve", &format!("pay-1@{}", "a".repeat(16))]);
    assert_eq!(code, 1, "{doc}");
    let r = &results(&doc)[1];
    assert_eq!(r["error"]["kind"], "approval_denied");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("now hash to"),
        "{r}"
    );
    assert!(!logged(&log).contains(&"pay-1".to_string()));
}

#[test]
fn a_tenants_window_is_counted_by_every_run_of_the_machine() {
    let p = Project::new(
        "[budget]\nper_tenant = { max_cost = 1.00, window = \"1h\" }\n\n[tools.read]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\ncost = 0.30\n",
    );
    // Two calls fit in the first run; one more in the next run, another process.
    let two = "- { id: a, tool: read, args: { n: 1 } }\n- { id: b, tool: read, args: { n: 2 } }\n";
    let (doc, code) = p.run_json(two, &["--lane-store", "local"]);
    assert_eq!(
        (code, doc["outcome"].as_str()),
        (0, Some("completed")),
        "{doc}"
    );
    let (doc, _) = p.run_json(two, &["--lane-store", "local"]);
    assert_eq!(
        statuses(&doc),
        vec![
            ("ok".to_string(), String::new()),
            (
                "never_dispatched".to_string(),
                "budget_exhausted".to_string()
            )
        ],
        "{doc}"
    );
    let msg = results(&doc)[1]["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("tenant `default` has spent 0.90 of its 1.00 per 1h"),
        "{msg}"
    );
    assert!(
        msg.contains("the window frees enough for it in 59m"),
        "{msg}"
    );
}

#[test]
fn a_tenants_window_admits_calls_ready_together_in_call_order() {
    let p = Project::new(
        "[concurrency]\nmax_concurrent_tools = 16\n[budget]\nper_tenant = { max_cost = 1.00, window = \"1h\" }\n\n[tools.read]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\ncost = 0.10\n",
    );
    // Twelve calls ready at once, ten fit: the first ten in call order, whichever of them
    // reaches the store first.
    let calls: String = (0..12)
        .map(|i| format!("- {{ id: c{i}, tool: read, args: {{ n: {i} }} }}\n"))
        .collect();
    for store in ["local", "memory"] {
        let (doc, _) = p.run_json(&calls, &["--lane-store", store, "--tenant", store]);
        let got = statuses(&doc);
        let mut want = vec![("ok".to_string(), String::new()); 10];
        let refused = (
            "never_dispatched".to_string(),
            "budget_exhausted".to_string(),
        );
        want.extend(vec![refused; 2]);
        assert_eq!(got, want, "{store}: {doc}");
    }
}

#[test]
fn a_tenants_window_needs_both_its_limit_and_its_length() {
    let p = Project::new(
        "[budget]\nper_tenant = { max_cost = 1.00 }\n\n[tools.read]\nkind = \"scripted\"\n",
    );
    let out = p.cmd().args(["validate"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        err.contains("`per_tenant` in [budget] needs `window`"),
        "{err}"
    );
    assert!(err.contains("tools.toml:2:"), "{err}");
}
