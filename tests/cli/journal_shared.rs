//! One intent, many machines: run ids the caller names, and the journal in Redis that a
//! second worker (another working directory, no local state) resumes from.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{results, Project, Redis};

/// Three writes that log `CALL_ID KEY` to `log` (shared by every "machine", as the tool's
/// own state is) and take 400 ms each; writes run one after another.
fn manifest(log: &Path) -> String {
    format!(
        r#"
[tools.write]
kind = "command"
effect = "write"
command = ["sh", "-c", "echo \"$FLUX_CALL_ID $FLUX_IDEMPOTENCY_KEY\" >> {log}; sleep 0.4; echo \"{{\\\"wrote\\\": $1}}\"", "write", "{{n}}"]
stdin = "none"
"#,
        log = log.display()
    )
}

const BATCH: &str = "calls:\n  - {id: w1, tool: write, args: {n: 1}}\n  - {id: w2, tool: write, args: {n: 2}}\n  - {id: w3, tool: write, args: {n: 3}}\n";

/// A Redis that keeps an append-only file, fsynced at every write.
fn durable_redis(dir: &Path) -> Option<Redis> {
    let dir = dir.to_str().unwrap();
    Redis::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        dir,
    ])
}

/// (call id, key) per log line.
fn log_lines(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A worker: `flux-tools run batch.yaml --run-id ID --journal URL` in its own folder.
fn worker(p: &Project, run_id: &str, url: &str) -> std::process::Child {
    p.write("batch.yaml", BATCH);
    p.spawn_env(
        &[
            "run",
            "batch.yaml",
            "--run-id",
            run_id,
            "--journal",
            url,
            "--format",
            "json",
        ],
        &[("FLUX_TOOLS_LEASE_MS", "1000")],
    )
}

fn finish(child: std::process::Child) -> (Value, String) {
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (doc, err)
}

#[test]
fn a_turn_killed_after_its_first_dispatch_resumes_on_another_machine_without_a_write_twice() {
    let state = tempfile::tempdir().unwrap();
    let Some(redis) = durable_redis(state.path()) else {
        return;
    };
    let log = state.path().join("log");
    let first = Project::new(&manifest(&log));
    let mut child = worker(&first, "wf-42:turn-1", &redis.url);
    // SIGKILL once w1's dispatch record is written and its tool started.
    let deadline = Instant::now() + Duration::from_secs(20);
    while log_lines(&log).is_empty() {
        assert!(Instant::now() < deadline, "w1 never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = log_lines(&log);
    assert_eq!(before.len(), 1, "{before:?}");
    // A second machine: another folder, no local state, the same Redis and run id.
    let second = Project::new(&manifest(&log));
    let (doc, err) = finish(worker(&second, "wf-42:turn-1", &redis.url));
    assert_eq!(doc["run_id"], "wf-42:turn-1", "{err}");
    let r = results(&doc);
    // w1 was in flight when the first worker died: it may have landed, so it is not sent
    // again; w2 and w3 never dispatched, so they run now.
    assert_eq!(r[0]["status"], "indeterminate", "{err}");
    assert_eq!(r[1]["status"], "ok", "{err}");
    assert_eq!(r[2]["status"], "ok", "{err}");
    let after = log_lines(&log);
    let ids: Vec<&str> = after.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2", "w3"], "each intent once: {after:?}");
    // The keys are the first attempt's: what a tool dedupes by does not change with the machine.
    assert_eq!(r[0]["idempotency_key"].as_str(), Some(before[0].1.as_str()));
    for (res, (_, key)) in r.iter().zip(&after) {
        assert_eq!(res["idempotency_key"].as_str(), Some(key.as_str()));
        assert!(key.starts_with("wf-42:turn-1:"), "{key}");
    }
    // Run once more, anywhere: everything is recorded, nothing is invoked.
    let (again, err) = finish(worker(&first, "wf-42:turn-1", &redis.url));
    assert_eq!(log_lines(&log).len(), 3, "{err}");
    assert_eq!(results(&again)[2]["output"], r[2]["output"]);
}

#[test]
fn two_workers_started_at_once_with_one_run_id_send_each_write_once() {
    let state = tempfile::tempdir().unwrap();
    let Some(redis) = durable_redis(state.path()) else {
        return;
    };
    let log = state.path().join("log");
    let (a, b) = (Project::new(&manifest(&log)), Project::new(&manifest(&log)));
    let first = worker(&a, "wf-7", &redis.url);
    let second = worker(&b, "wf-7", &redis.url);
    let (doc_a, err_a) = finish(first);
    let (doc_b, err_b) = finish(second);
    let lines = log_lines(&log);
    let ids: Vec<&str> = lines.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2", "w3"], "{lines:?}\n{err_a}\n{err_b}");
    // One waited for the other, then found every result recorded.
    assert!(
        err_a.contains("is running in another process")
            || err_b.contains("is running in another process"),
        "{err_a}\n{err_b}"
    );
    for doc in [&doc_a, &doc_b] {
        let statuses: Vec<&str> = results(doc)
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["ok", "ok", "ok"]);
    }
    assert_eq!(results(&doc_a)[1]["output"], results(&doc_b)[1]["output"]);
}

#[test]
fn a_redis_that_keeps_no_append_only_file_is_refused_before_anything_runs() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("log");
    let p = Project::new(&manifest(&log));
    let (_, err) = {
        let out = worker(&p, "wf-1", &redis.url).wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        (out.stdout, String::from_utf8_lossy(&out.stderr).to_string())
    };
    assert!(err.contains("appendonly no"), "{err}");
    assert!(
        err.contains("--appendonly yes --appendfsync always"),
        "{err}"
    );
    assert!(log_lines(&log).is_empty());
    // Resuming from Redis needs the run named: a Redis holds many runs.
    let out = p
        .cmd()
        .args(["run", "batch.yaml", "--resume", &redis.url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("name the one to resume with --run-id"),
        "{err}"
    );
}

#[test]
fn the_caller_names_the_run_and_an_edited_call_under_a_reused_id_gets_another_key() {
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("log");
    let p = Project::new(&manifest(&log));
    let key = |doc: &Value, i: usize| {
        results(doc)[i]["idempotency_key"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let one = "calls:\n  - {id: w1, tool: write, args: {n: 1}}\n";
    let (a, _) = p.run_json(one, &["--run-id", "turn-3"]);
    let (b, _) = p.run_json(one, &["--run-id", "turn-3"]);
    assert_eq!(a["run_id"], "turn-3");
    assert_eq!(
        key(&a, 0),
        key(&b, 0),
        "the same call of the same run: the same key"
    );
    assert!(key(&a, 0).starts_with("turn-3:w1:"));
    let edited = "calls:\n  - {id: w1, tool: write, args: {n: 2}}\n";
    let (c, _) = p.run_json(edited, &["--run-id", "turn-3"]);
    assert_ne!(
        key(&a, 0),
        key(&c, 0),
        "another intent under the same run id"
    );
    // The batch may name its run; --run-id wins over it.
    let named = format!("run_id: from-batch\n{one}");
    let (d, _) = p.run_json(&named, &[]);
    assert_eq!(d["run_id"], "from-batch");
    let (e, _) = p.run_json(&named, &["--run-id", "flag"]);
    assert_eq!(e["run_id"], "flag");
    // A model reply's own id, when asked for.
    let reply = r#"{"id": "chatcmpl-B9x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "write", "arguments": "{\"n\": 5}"}}]}}]}"#;
    let (f, _) = p.run_json(reply, &["--run-id-from-reply"]);
    assert_eq!(f["run_id"], "chatcmpl-B9x");
    let (g, _) = p.run_json(reply, &[]);
    assert_ne!(g["run_id"], "chatcmpl-B9x", "only when asked");
    // A run id is an id: no spaces, no slashes.
    let out = p
        .cmd()
        .args(["run", "batch.yaml", "--run-id", "a/b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--run-id: run id `a/b` contains `/`"));
    let path = p.write("numbered.yaml", &format!("run_id: 7\n{one}"));
    let out = p
        .cmd()
        .args(["plan", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`run_id` should be a string, found an integer"),
        "{err}"
    );
    assert!(err.contains("numbered.yaml:1:1"), "{err}");
}

/// `redis-cli -u URL ARGS…`'s output.
fn redis_cli(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-u", url])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn with_a_replica_each_dispatch_record_waits_for_it_and_a_silent_replica_stops_the_writes() {
    let state = tempfile::tempdir().unwrap();
    let Some(master) = durable_redis(state.path()) else {
        return;
    };
    let port = master.url.rsplit(':').next().unwrap().to_string();
    let replica_dir = tempfile::tempdir().unwrap();
    let dir = replica_dir.path().to_str().unwrap();
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &port, "--dir", dir])
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !redis_cli(&master.url, &["INFO", "replication"]).contains("state=online") {
        assert!(Instant::now() < deadline, "the replica never connected");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = state.path().join("log");
    let p = Project::new(&manifest(&log));
    let (doc, err) = finish(worker(&p, "wf-r", &master.url));
    assert!(results(&doc).iter().all(|r| r["status"] == "ok"), "{err}");
    // Every record the master took, the replica holds (WAIT returned before each call ran).
    let keys = redis_cli(&replica.url, &["KEYS", "flux-tools:journal:*"]);
    assert!(keys.contains("wf-r"), "{keys}");
    let len = |url: &str| redis_cli(url, &["LLEN", keys.lines().next().unwrap_or("")]);
    assert_eq!(len(&replica.url), len(&master.url));

    // A replica that stops answering: no record is acknowledged within 1 s, so no write is
    // made — each is reported never dispatched, a journal failure, instead of running
    // unrecorded.
    let pid = replica.child.id().to_string();
    let stop = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
    };
    stop("-STOP");
    let (doc, err) = finish(worker(&p, "wf-s", &master.url));
    stop("-CONT");
    let r = results(&doc);
    for r in r {
        assert_eq!(r["status"], "never_dispatched", "{err}");
        assert_eq!(r["error"]["kind"], "journal", "{r}");
    }
    let msg = r[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("no replica acknowledged"), "{msg}");
    assert_eq!(log_lines(&log).len(), 3, "only the first run's writes");
}
