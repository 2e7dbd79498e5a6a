//! Journal and resume: SIGKILL a run at random points, resume it, and check that nothing ran
//! twice for one intent and nothing completed was lost.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use crate::common::{results, Project};

fn manifest(dir: &std::path::Path) -> String {
    let ledger = dir.join("ledger");
    format!(
        r#"
[concurrency]
max_concurrent_tools = 8

[tools.read]
kind = "command"
effect = "read"
command = ["sh", "-c", "echo \"$FLUX_CALL_ID read\" >> {ledger}; sleep 0.02; echo \"{{\\\"n\\\": $1}}\"", "read", "{{n}}"]
stdin = "none"

[tools.write]
kind = "command"
effect = "write"
command = ["sh", "-c", "echo \"$FLUX_CALL_ID $FLUX_IDEMPOTENCY_KEY\" >> {ledger}; sleep 0.02; echo \"{{\\\"wrote\\\": $1}}\"", "write", "{{n}}"]
stdin = "none"
"#,
        ledger = ledger.display()
    )
}

fn batch() -> String {
    (0..200)
        .map(|i| {
            format!(
                "{{\"id\": \"k{i}\", \"tool\": \"{}\", \"args\": {{\"n\": {i}}}}}\n",
                if i % 4 == 0 { "write" } else { "read" }
            )
        })
        .collect()
}

/// (call id, idempotency key) per ledger line.
fn ledger(dir: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect()
}

/// Results the journal recorded before the crash, by call id.
fn journaled(path: &std::path::Path) -> HashMap<String, Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "result")
        .map(|v| {
            (
                v["id"].as_str().unwrap_or("").to_string(),
                v["result"].clone(),
            )
        })
        .collect()
}

#[test]
fn killed_runs_resume_without_duplicate_writes_or_lost_results() {
    for seed in [3u64, 11, 29] {
        let dir = tempfile::tempdir().unwrap();
        let p = Project::new(&manifest(dir.path()));
        let b = p.write("b.jsonl", &batch());
        let journal = p.path().join("journal.jsonl");
        let mut child = p.spawn(&[
            "run",
            b.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
            "--format",
            "json",
        ]);
        // A pseudo-random point somewhere in the run.
        let delay = 150 + (seed.wrapping_mul(2_654_435_761) % 700);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        let _ = child.wait();
        let before = journaled(&journal);
        let writes_before: Vec<(String, String)> = ledger(dir.path())
            .into_iter()
            .filter(|(_, k)| k != "read")
            .collect();

        let out = p
            .cmd()
            .args([
                "run",
                b.to_str().unwrap(),
                "--resume",
                journal.to_str().unwrap(),
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let r = results(&doc);
        assert_eq!(r.len(), 200, "seed {seed}");
        for (i, res) in r.iter().enumerate() {
            let status = res["status"].as_str().unwrap();
            let write = i % 4 == 0;
            assert!(
                status == "ok" || (write && status == "indeterminate"),
                "seed {seed}: call {i} is {status}"
            );
        }
        // Nothing completed was lost: every result journaled before the crash comes back as is.
        for (id, old) in &before {
            let now = r.iter().find(|x| x["id"] == id.as_str()).unwrap();
            assert_eq!(now["status"], old["status"], "seed {seed}: {id}");
            assert_eq!(now["output"], old["output"], "seed {seed}: {id}");
        }
        // No write reached the ledger twice.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (id, key) in ledger(dir.path()).into_iter().filter(|(_, k)| k != "read") {
            *seen.entry(id.clone()).or_default() += 1;
            assert!(key.contains(&format!(":{id}:")), "seed {seed}: {key}");
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "seed {seed}: a write ran twice: {seen:?}"
        );
        // Every write that succeeded reached the ledger exactly once (before or after the crash).
        for (i, x) in r.iter().enumerate().filter(|(i, _)| i % 4 == 0) {
            if x["status"] == "ok" {
                assert_eq!(seen.get(&format!("k{i}")), Some(&1), "seed {seed}: k{i}");
            }
        }
        assert!(writes_before.len() <= seen.len());

        // Resuming a finished run invokes nothing and reports the same results.
        let lines = ledger(dir.path()).len();
        let again = p
            .cmd()
            .args([
                "run",
                b.to_str().unwrap(),
                "--resume",
                journal.to_str().unwrap(),
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let doc2: Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(
            ledger(dir.path()).len(),
            lines,
            "seed {seed}: a finished journal invoked something"
        );
        assert_eq!(doc2["results"], doc["results"]);
        assert_eq!(doc2["run_id"], doc["run_id"]);
    }
}

#[test]
fn retry_indeterminate_resends_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger");
    let p = Project::new(&format!(
        "[tools.slow_write]\nkind = \"command\"\neffect = \"write\"\ncommand = [\"sh\", \"-c\", \"echo \\\"$FLUX_CALL_ID $FLUX_IDEMPOTENCY_KEY\\\" >> {}; sleep 30\"]\nstdin = \"none\"\n",
        ledger_path.display()
    ));
    let b = p.write("b.yaml", "- { id: charge, tool: slow_write }\n");
    let journal = p.path().join("j.jsonl");
    let mut child = p.spawn(&[
        "run",
        b.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ledger(dir.path()).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    let _ = child.wait();
    // Without the flag: reported indeterminate, not sent again.
    let out = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--resume",
            journal.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results(&doc)[0]["status"], "indeterminate");
    assert_eq!(ledger(dir.path()).len(), 1);
    // With it: sent again with the same idempotency key (the tool hangs; a deadline ends it).
    let out = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--resume",
            journal.to_str().unwrap(),
            "--retry-indeterminate",
            "--deadline",
            "1s",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let _: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = ledger(dir.path());
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].1, sent[1].1, "the same idempotency key both times");
}

#[test]
fn a_journal_of_another_manifest_or_batch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = Project::new(&manifest(dir.path()));
    let b = p.write("b.yaml", "- { id: one, tool: read, args: { n: 1 } }\n");
    let journal = p.path().join("j.jsonl");
    p.cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ])
        .assert()
        .success();
    let other = p.write("other.yaml", "- { id: two, tool: read, args: { n: 2 } }\n");
    let out = p
        .cmd()
        .args([
            "run",
            other.to_str().unwrap(),
            "--resume",
            journal.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to a different batch"));
    std::fs::write(
        p.path().join("tools.toml"),
        format!("{}\n# changed\n", manifest(dir.path())),
    )
    .unwrap();
    let out = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--resume",
            journal.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("different manifest"));
}

#[test]
fn a_recorded_batch_replays_to_identical_results_without_invoking_anything() {
    let dir = tempfile::tempdir().unwrap();
    let p = Project::new(&format!(
        "{}\n[tools.slow]\nkind = \"scripted\"\neffect = \"read\"\n",
        manifest(dir.path())
    ));
    // Descending latencies: the calls finish in reverse order when recorded.
    let batch = "- { id: a, tool: slow, args: { _latency: 600ms, v: 1 } }\n- { id: b, tool: slow, args: { _latency: 300ms, v: 2 } }\n- { id: c, tool: read, args: { n: 3 } }\n- { id: d, tool: write, args: { n: 4 } }\n";
    let b = p.write("b.yaml", batch);
    let cassette = p.path().join("cassette.json");
    let rec = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--record",
            cassette.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(rec.status.success());
    let recorded: Value = serde_json::from_slice(&rec.stdout).unwrap();
    let ledger_lines = ledger(dir.path()).len();
    assert_eq!(ledger_lines, 2);

    let rep = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--replay",
            cassette.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let replayed: Value = serde_json::from_slice(&rep.stdout).unwrap();
    assert_eq!(
        serde_json::to_string(&replayed["results"]).unwrap(),
        serde_json::to_string(&recorded["results"]).unwrap(),
        "byte-identical results"
    );
    assert_eq!(replayed["run_id"], recorded["run_id"]);
    assert_eq!(
        ledger(dir.path()).len(),
        ledger_lines,
        "replay invoked a tool"
    );
    assert!(
        !std::fs::read_to_string(&cassette)
            .unwrap()
            .contains("${env"),
        "no secrets or templates leak"
    );

    // A changed argument matches nothing: that call fails, naming it.
    let changed = p.write("c.yaml", &batch.replace("v: 2", "v: 20"));
    let out = p
        .cmd()
        .args([
            "run",
            changed.to_str().unwrap(),
            "--replay",
            cassette.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &results(&doc)[1];
    assert_eq!(r["status"], "never_dispatched");
    assert_eq!(r["error"]["kind"], "replay_miss");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("call `b`") && msg.contains("was recorded with fingerprint"),
        "{msg}"
    );
    assert_eq!(results(&doc)[0]["status"], "ok");
}
