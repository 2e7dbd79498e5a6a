//! The read cache: repeated reads are answered without invoking the tool — across runs and
//! processes (local files, Redis), per tenant, until the TTL passes; identical reads in flight
//! are coalesced; `--no-cache` and `--refresh`; `plan` marks what would be a hit.

use std::path::Path;

use serde_json::Value;

use crate::common::{results, Project, Redis};

/// A read that logs each start and answers with its query and how many starts the log holds.
fn manifest(log: &Path, ttl: &str) -> String {
    format!(
        r#"
[tools.lookup]
kind = "command"
effect = "read"
cache = "{ttl}"
command = ["sh", "-c", 'echo "$FLUX_CALL_ID" >> {log}; sleep 0.3; printf "{{\"q\": \"%s\", \"starts\": %s}}" "$1" "$(wc -l < {log})"', "lookup", "{{q}}"]
stdin = "none"

[tools.write]
kind = "scripted"
effect = "write"
idempotent = true
"#,
        log = log.display()
    )
}

fn starts(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |t| t.lines().count())
}

fn project(ttl: &str) -> (Project, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let log = dir.join("starts.log");
    (Project::new(&manifest(&log, ttl)), log)
}

const ONE: &str = "- { id: a, tool: lookup, args: { q: apples } }\n";

fn first(doc: &Value) -> &Value {
    &results(doc)[0]
}

#[test]
fn a_second_run_is_answered_from_the_cache_without_invoking() {
    let (p, log) = project("5m");
    let (doc, code) = p.run_json(ONE, &[]);
    assert_eq!(code, 0, "{doc}");
    assert!(first(&doc).get("cached").is_none(), "{doc}");
    assert_eq!(starts(&log), 1);
    // plan marks it: the cache holds its result now.
    let b = p.write("batch.yaml", ONE);
    let plan = p
        .cmd()
        .args(["plan", b.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["calls"][0]["cached"], true, "{plan}");

    let (doc, code) = p.run_json(ONE, &[]);
    assert_eq!(code, 0, "{doc}");
    let r = first(&doc);
    assert_eq!(r["status"], "ok");
    assert_eq!(r["cached"], true);
    assert_eq!(r["attempts"], 0);
    assert_eq!(r["output"]["q"], "apples");
    assert_eq!(r["output"]["starts"], 1, "the first run's output");
    assert!(r["duration_ms"].as_u64().unwrap() < 200, "{r}");
    assert_eq!(doc["stats"]["cache_hits"], 1);
    assert_eq!(doc["stats"]["cache_hits_by_tool"]["lookup"], 1);
    assert_eq!(starts(&log), 1, "nothing was invoked");
}

#[test]
fn an_entry_expires_after_its_ttl() {
    let (p, log) = project("1s");
    p.run_json(ONE, &[]);
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let (doc, _) = p.run_json(ONE, &[]);
    assert!(first(&doc).get("cached").is_none(), "{doc}");
    assert_eq!(starts(&log), 2);
}

#[test]
fn one_tenant_never_sees_anothers_result() {
    let (p, log) = project("5m");
    p.run_json(ONE, &["--tenant", "acme"]);
    let (doc, _) = p.run_json(ONE, &["--tenant", "globex"]);
    assert!(first(&doc).get("cached").is_none(), "{doc}");
    assert_eq!(starts(&log), 2);
    let (doc, _) = p.run_json(ONE, &["--tenant", "acme"]);
    assert_eq!(first(&doc)["cached"], true);
    assert_eq!(starts(&log), 2);
}

#[test]
fn ten_identical_reads_in_one_batch_invoke_the_tool_once() {
    for store in ["local", "memory"] {
        let (p, log) = project("5m");
        let batch: String = (0..10)
            .map(|i| format!("- {{ id: r{i}, tool: lookup, args: {{ q: same }} }}\n"))
            .collect();
        let (doc, code) = p.run_json(&batch, &["--lane-store", store]);
        assert_eq!(code, 0, "{doc}");
        assert_eq!(starts(&log), 1, "{store}: {doc}");
        assert_eq!(doc["stats"]["cache_hits"], 9, "{store}");
        let cached = results(&doc).iter().filter(|r| r["cached"] == true).count();
        assert_eq!(cached, 9, "{store}");
        assert!(results(&doc).iter().all(|r| r["output"]["starts"] == 1));
    }
}

#[test]
fn no_cache_bypasses_it_and_refresh_replaces_entries() {
    let (p, log) = project("5m");
    p.run_json(ONE, &[]);
    // --no-cache: invoked, and what it got is not stored.
    let (doc, _) = p.run_json(ONE, &["--no-cache"]);
    assert!(first(&doc).get("cached").is_none());
    assert_eq!(first(&doc)["output"]["starts"], 2);
    let (doc, _) = p.run_json(ONE, &[]);
    assert_eq!(first(&doc)["output"]["starts"], 1, "the first entry still");
    // --refresh: invoked, and the new output replaces the entry.
    let (doc, _) = p.run_json(ONE, &["--refresh"]);
    assert!(first(&doc).get("cached").is_none());
    assert_eq!(first(&doc)["output"]["starts"], 3);
    let (doc, _) = p.run_json(ONE, &[]);
    assert_eq!(first(&doc)["cached"], true);
    assert_eq!(first(&doc)["output"]["starts"], 3);
    assert_eq!(starts(&log), 3);
}

/// Two processes asking the same read at once: one invokes, the other shares its result.
fn two_processes_share_one_call(p: &Project, log: &Path, extra: &[&str]) {
    let b = p.write("batch.yaml", ONE);
    let mut args = vec!["run", b.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let children: Vec<_> = (0..2).map(|_| p.spawn(&args)).collect();
    let docs: Vec<Value> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    assert_eq!(starts(log), 1, "{docs:?}");
    let hits = docs.iter().filter(|d| first(d)["cached"] == true).count();
    assert_eq!(hits, 1, "{docs:?}");
    assert!(docs.iter().all(|d| first(d)["output"]["starts"] == 1));
    // And a third run later is a plain hit.
    let (doc, _) = p.run_json(ONE, extra);
    assert_eq!(first(&doc)["cached"], true);
}

#[test]
fn the_local_store_shares_entries_and_reads_in_flight_across_processes() {
    let (p, log) = project("5m");
    two_processes_share_one_call(&p, &log, &[]);
    // Entries are private files.
    let dir = flux_tools::runtime_dir().unwrap();
    let mut found = 0;
    for e in crate::common::files_under(&dir) {
        if e.extension().is_some_and(|x| x == "json") && e.to_string_lossy().contains("/cache/") {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&e).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", e.display());
            found += 1;
        }
    }
    assert!(found >= 1);
}

#[test]
fn redis_shares_entries_and_reads_in_flight_across_processes() {
    let Some(redis) = Redis::start() else { return };
    let (p, log) = project("5m");
    two_processes_share_one_call(&p, &log, &["--lane-store", &redis.url]);
    // The entry is a key with a TTL.
    let out = std::process::Command::new("redis-cli")
        .args([
            "-u",
            &redis.url,
            "--scan",
            "--pattern",
            "flux-tools:*:cache:*",
        ])
        .output();
    if let Ok(out) = out {
        let keys = String::from_utf8_lossy(&out.stdout);
        let mut names: Vec<&str> = keys.lines().collect();
        // The entry, and no lead key left behind.
        assert_eq!(names.len(), 1, "{names:?}");
        let key = names.pop().expect("a cache key").to_string();
        assert!(!key.ends_with(":lead"), "{key}");
        let ttl = std::process::Command::new("redis-cli")
            .args(["-u", &redis.url, "PTTL", &key])
            .output()
            .unwrap();
        let ttl: i64 = String::from_utf8_lossy(&ttl.stdout).trim().parse().unwrap();
        assert!(ttl > 250_000 && ttl <= 300_000, "{ttl}");
    }
}

#[test]
fn cache_on_a_write_tool_is_a_validation_error() {
    let p = Project::new(
        r#"
[tools.pay]
kind = "scripted"
effect = "write"
idempotent = true
cache = "5m"
"#,
    );
    let out = p.cmd().args(["validate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`cache` in [tools.pay]"), "{err}");
    assert!(err.contains("write"), "{err}");
    assert!(err.contains(":6:"), "line and column: {err}");
}

/// A cached read of `db` and a slow write that changes it, each a real command; and the file
/// the write touches once it has started.
fn read_after_write_project() -> (Project, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let state = dir.join("state");
    std::fs::write(&state, "old\n").unwrap();
    let p = Project::new(&format!(
        r#"
[tools.get]
kind = "command"
effect = "read"
cache = "5m"
backend = "db"
stdin = "none"
command = ["cat", "{state}"]

[tools.put]
kind = "command"
effect = "write"
idempotent = true
backend = "db"
stdin = "none"
command = ["sh", "-c", 'touch "$1.started"; sleep 1; echo new > "$1"', "put", "{state}"]
"#,
        state = state.display()
    ));
    (p, dir.join("state.started"))
}

/// A read that arrives while another process's write on its backend is in flight is ordered
/// after that write — so the cache must not answer it with what was read before the write.
/// (Before the fix, the read was a hit at once: `cached: true`, "old".)
fn a_read_during_anothers_write_sees_the_write(extra: &[&str]) {
    let (p, started) = read_after_write_project();
    let get = "- { id: g, tool: get }\n";
    let (doc, _) = p.run_json(get, extra);
    assert_eq!(first(&doc)["output"], "old", "{doc}");
    let (doc, _) = p.run_json(get, extra);
    assert_eq!(first(&doc)["cached"], true, "the entry is there: {doc}");
    let w = p.write("w.yaml", "- { id: w, tool: put }\n");
    let mut args = vec!["run", w.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let writer = p.spawn(&args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !started.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(started.exists(), "the write started");
    let (doc, _) = p.run_json(get, extra);
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = first(&doc);
    assert_eq!(r["output"], "new", "answered from before the write: {r}");
    assert_ne!(r["cached"], true, "{r}");
    // It says what held it back: the other process's write on `db`.
    assert_eq!(r["waited_on"], "backend:db", "{r}");
    assert!(r["queued_ms"].as_u64().unwrap_or(0) >= 300, "{r}");
    // What it read is the entry now.
    let (doc, _) = p.run_json(get, extra);
    assert_eq!(first(&doc)["output"], "new");
    assert_eq!(first(&doc)["cached"], true, "{doc}");
}

#[test]
fn a_read_during_another_processs_write_sees_the_write_local() {
    a_read_during_anothers_write_sees_the_write(&[]);
}

#[test]
fn a_read_during_another_processs_write_sees_the_write_redis() {
    let Some(redis) = Redis::start() else { return };
    a_read_during_anothers_write_sees_the_write(&["--lane-store", &redis.url]);
}
