//! Writes cut off in flight, settled by their probe (`verify`), against a real HTTP service
//! that keeps effects by idempotency key, serves them by key (404 when absent), and does not
//! dedupe — so every duplicate effect shows.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{results, Project};
use crate::http_server::TestServer;

/// `pay` (a write that times out at 600 ms, probed by `find_pay`), and `extra` tools.
fn manifest(base: &str, verify: &str, extra: &str) -> String {
    format!(
        "[concurrency]\nmax_concurrent_tools = 16\n\n\
         [tools.pay]\nkind = \"http\"\nmethod = \"POST\"\nurl = \"{base}/effects/{{mode}}\"\neffect = \"write\"\ntimeout = \"600ms\"\nverify = {verify}\n\
         [tools.pay.args.mode]\ntype = \"string\"\n[tools.pay.args.order]\ntype = \"string\"\n\n\
         [tools.find_pay]\nkind = \"http\"\nurl = \"{base}/effects\"\neffect = \"read\"\ntimeout = \"2s\"\n\n{extra}"
    )
}

/// One call of `pay` per mode, ids `m0`, `m1`, …
fn batch(modes: &[&str]) -> String {
    modes
        .iter()
        .enumerate()
        .map(|(i, m)| format!("- {{ id: m{i}, tool: pay, args: {{ mode: {m}, order: o{i} }} }}\n"))
        .collect()
}

/// Each call's (status, settled, attempts).
fn outcomes(doc: &Value) -> Vec<(String, String, u64)> {
    results(doc)
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap_or_default().to_string(),
                r["settled"].as_str().unwrap_or("-").to_string(),
                r["attempts"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Wait (at most 10 s) until the service has received a write of `mode`.
fn until_sent(server: &TestServer, mode: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.requests_to(&format!("/effects/{mode}")).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The service saw one probe of the write whose key `is_key` accepts, and one resend at most
/// (only for a write of mode `lost`, which never landed).
fn one_probe_at_most_one_resend(server: &TestServer, mode: &str, is_key: impl Fn(&str) -> bool) {
    let sent = |method: &str| {
        let keyed = |r: &&crate::http_server::Request| {
            r.method == method && r.headers.get("idempotency-key").is_some_and(|k| is_key(k))
        };
        server.requests_to("/effects").iter().filter(keyed).count()
    };
    assert_eq!(sent("GET"), 1, "{mode}: one probe");
    let resent = if mode == "lost" { 2 } else { 1 };
    assert_eq!(sent("POST"), resent, "{mode}: at most one resend");
}

/// `run BATCH --resume JOURNAL --format json` in `p`: its document.
fn resume(p: &Project, batch: &std::path::Path, journal: &std::path::Path) -> Value {
    let out = p
        .cmd()
        .args(["run", batch.to_str().unwrap_or_default(), "--resume"])
        .args([journal.to_str().unwrap_or_default(), "--format", "json"])
        .output()
        .expect("resume");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Every effect the server made, and how many times.
fn times(server: &TestServer) -> Vec<u32> {
    let mut v: Vec<u32> = server.effects().values().copied().collect();
    v.sort_unstable();
    v
}

#[test]
fn writes_cut_off_by_their_timeout_are_settled_by_their_probe_and_each_effect_is_made_once() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, "\"find_pay\"", ""));
    let modes = [
        "fast",
        "applied_late",
        "lost",
        "applied_late",
        "lost",
        "fast",
    ];
    let (doc, code) = p.run_json(&batch(&modes), &[]);
    assert_eq!(code, 0, "{doc}");
    let got = outcomes(&doc);
    let want =
        |s: &str, settled: &str, attempts: u64| (s.to_string(), settled.to_string(), attempts);
    assert_eq!(
        got,
        [
            want("ok", "-", 1),
            want("ok", "applied", 1),
            want("ok", "not_applied", 2),
            want("ok", "applied", 1),
            want("ok", "not_applied", 2),
            want("ok", "-", 1),
        ],
        "{doc}"
    );
    // An applied write's result is what its probe read.
    assert_eq!(results(&doc)[1]["output"]["applied"], true, "{doc}");
    // Six effects, each made exactly once; nothing indeterminate.
    assert_eq!(times(&server), [1; 6], "{:?}", server.effects());
    let settled = &doc["stats"]["settled"];
    assert_eq!(
        (settled["applied"].as_u64(), settled["not_applied"].as_u64()),
        (Some(2), Some(2))
    );
    // The resend and the probe carried the write's own key.
    let keys: Vec<Value> = results(&doc)
        .iter()
        .map(|r| r["idempotency_key"].clone())
        .collect();
    for r in server.requests_to("/effects") {
        assert!(
            keys.contains(&Value::from(r.headers["idempotency-key"].clone())),
            "{r:?}"
        );
    }
    // The table marks them, and the summary counts them.
    let b = p.write("again.yaml", &batch(&["applied_late"]));
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap_or_default(), "--format", "table"])
        .args(["--history", "history.jsonl"])
        .output()
        .expect("run");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("ok (settled)"), "{text}");
    assert!(
        text.contains("settled 1 of 1 cut-off write (1 applied, 0 not applied)"),
        "{text}"
    );
    // The history keeps the count, and its report says it over every run.
    let out = p
        .cmd()
        .args(["report", "--history", "history.jsonl"])
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("settled 1 of 1 cut-off write"), "{text}");
    // A write with a probe is not warned of as unprotected.
    let out = p.cmd().args(["validate"]).output().expect("validate");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !said.contains("no idempotency protection"),
        "{said}"
    );
    // `tools` says which writes have a probe.
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .expect("tools");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let pay = doc["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "pay"))
        .cloned();
    assert_eq!(
        pay.map(|t| t["verify"].clone()),
        Some(serde_json::json!({"tool": "find_pay", "resend": true}))
    );
}

#[test]
fn without_resending_a_write_that_never_landed_is_not_applied_and_a_failure() {
    let server = TestServer::start();
    let verify = "{ tool = \"find_pay\", args = { order = \"${args.order}\" } }";
    let p = Project::new(&manifest(&server.base, verify, ""));
    let (doc, code) = p.run_json(&batch(&["lost", "applied_late"]), &["--no-resend"]);
    assert_ne!(code, 0, "{doc}");
    let got = outcomes(&doc);
    assert_eq!(
        got[0],
        ("not_applied".into(), "not_applied".into(), 1),
        "{doc}"
    );
    assert_eq!(got[1], ("ok".into(), "applied".into(), 1), "{doc}");
    let message = results(&doc)[0]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("probe `find_pay` found the write never landed"),
        "{message}"
    );
    // The lost write made nothing, the other exactly one effect.
    assert_eq!(times(&server), [1], "{:?}", server.effects());
    // The probe got only the arguments it was given: `order`, from the write's.
    let probes = server.requests_to("/effects");
    assert!(
        probes
            .iter()
            .filter(|r| r.method == "GET")
            .all(|r| r.path == "/effects"),
        "{probes:?}"
    );
}

#[test]
fn a_probe_that_hangs_or_answers_garbage_leaves_the_write_unsettled_with_its_reason() {
    let server = TestServer::start();
    let extra = format!(
        "[tools.hangs]\nkind = \"http\"\nurl = \"{0}/slow/5000\"\neffect = \"read\"\ntimeout = \"300ms\"\n\n\
         [tools.garbage]\nkind = \"http\"\nurl = \"{0}/text\"\neffect = \"read\"\n\n\
         [tools.pay2]\nkind = \"http\"\nmethod = \"POST\"\nurl = \"{0}/effects/{{mode}}\"\neffect = \"write\"\ntimeout = \"600ms\"\nverify = \"garbage\"\n",
        server.base
    );
    let p = Project::new(&manifest(&server.base, "\"hangs\"", &extra));
    let b = "- { id: a, tool: pay, args: { mode: applied_late, order: x } }\n- { id: b, tool: pay2, args: { mode: lost } }\n";
    let started = Instant::now();
    let (doc, code) = p.run_json(b, &[]);
    assert_ne!(code, 0, "{doc}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the hung probe was cut off"
    );
    let r = results(&doc);
    for (i, why) in [
        (
            0,
            "probe `hangs` could not tell: it did not answer within 300ms",
        ),
        (1, "probe `garbage` could not tell: its answer is not JSON"),
    ] {
        assert_eq!(r[i]["status"], "timed_out", "{doc}");
        assert_eq!(r[i]["settled"], "unknown", "{doc}");
        let m = r[i]["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(why), "{m}");
    }
    assert_eq!(doc["stats"]["settled"]["unknown"], 2, "{doc}");
}

#[test]
fn validate_refuses_a_probe_that_writes_or_is_missing_or_lacks_an_argument() {
    let server = TestServer::start();
    let cases = [
        ("\"pay\"", "", "`verify` of tool `pay`: `pay` is the write itself"),
        ("\"charge\"", "[tools.charge]\nkind = \"http\"\nmethod = \"POST\"\nurl = \"http://x.test/c\"\neffect = \"write\"\n", "`verify` of tool `pay`: `charge` is a write"),
        ("\"find_pya\"", "", "names `find_pya`, which is not a tool"),
        ("\"by_id\"", "[tools.by_id]\nkind = \"http\"\nurl = \"http://x.test/{id}\"\neffect = \"read\"\n[tools.by_id.args.id]\ntype = \"string\"\nrequired = true\n", "probe `by_id` requires `id`"),
        ("{ tool = \"find_pay\", args = { o = \"${orders.id}\" } }", "", "refers to `${orders.id}`"),
    ];
    for (verify, extra, want) in cases {
        let p = Project::new(&manifest(&server.base, verify, extra));
        let out = p.cmd().args(["validate"]).output().expect("validate");
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{verify}: {text}");
        assert!(text.contains(want), "{verify}: {text}");
        assert!(text.contains("tools.toml:"), "a location: {text}");
    }
}

/// Start `run` of one `pay` call (`mode`) journaled, wait until the server has it, SIGKILL
/// the run; then resume it.
fn killed_then_resumed(server: &TestServer, p: &Project, mode: &str) -> Value {
    let b = p.write("one.yaml", &batch(&[mode]));
    let journal = p.path().join(format!("{mode}.jsonl"));
    let args = [
        "run",
        b.to_str().unwrap_or_default(),
        "--journal",
        journal.to_str().unwrap_or_default(),
    ];
    let mut child = p.spawn(&args);
    until_sent(server, mode);
    let _ = child.kill();
    let _ = child.wait();
    resume(p, &b, &journal)
}

#[test]
fn a_write_in_flight_when_its_run_was_killed_is_settled_on_resume_not_left_indeterminate() {
    let server = TestServer::start();
    // The write's own timeout is long: it is the SIGKILL that cuts it off.
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    let p = Project::new(&text);
    let doc = killed_then_resumed(&server, &p, "applied_late");
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "applied".into(), 1)],
        "{doc}"
    );
    let doc = killed_then_resumed(&server, &p, "lost");
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "not_applied".into(), 1)],
        "{doc}"
    );
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
    // A second resume asks no probe again: the settlement is in the journal.
    let before = server.requests_to("/effects").len();
    let b = p.path().join("one.yaml");
    let again = resume(&p, &b, &p.path().join("lost.jsonl"));
    assert_eq!(results(&again)[0]["settled"], "not_applied", "{again}");
    assert_eq!(server.requests_to("/effects").len(), before);
}

/// Run one journaled `pay` call (`mode`), Ctrl-C it once the server has it: the run's
/// document.
fn interrupted(server: &TestServer, p: &Project, mode: &str) -> Value {
    let b = p.write("one.yaml", &batch(&[mode]));
    let journal = p.path().join(format!("int-{mode}.jsonl"));
    let args = [
        "run",
        b.to_str().unwrap_or_default(),
        "--journal",
        journal.to_str().unwrap_or_default(),
        "--format",
        "json",
    ];
    let child = p.spawn(&args);
    until_sent(server, mode);
    // SAFETY: sending SIGINT to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().expect("the run");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_write_cut_off_by_ctrl_c_is_settled_as_the_run_ends_and_a_lost_one_is_sent_on_resume() {
    let server = TestServer::start();
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    let p = Project::new(&text);
    // The probe runs as the run ends: the write landed.
    let doc = interrupted(&server, &p, "applied_late");
    assert_eq!(doc["outcome"], "interrupted", "{doc}");
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "applied".into(), 1)],
        "{doc}"
    );
    // It did not land, and is not sent again as the run ends: `not_applied`, a failure.
    let doc = interrupted(&server, &p, "lost");
    assert_eq!(
        outcomes(&doc),
        [("not_applied".into(), "not_applied".into(), 1)],
        "{doc}"
    );
    assert_eq!(times(&server), [1], "{:?}", server.effects());
    // Resumed, it is asked about again and sent, once.
    let b = p.path().join("one.yaml");
    let journal = p.path().join("int-lost.jsonl");
    let doc = resume(&p, &b, &journal);
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "not_applied".into(), 1)],
        "{doc}"
    );
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
}

/// Call `pay` (`mode`) through the gateway at `addr` with idempotency key `key`, on a new
/// session: the JSON text of its `result`, or the whole body when there is none.
fn through(addr: &str, key: &str, mode: &str) -> String {
    use crate::serve_keys::{post, session};
    let s = session(addr, None);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"pay","arguments":{{"mode":"{mode}","order":"o"}},"_meta":{{"idempotencyKey":"{key}"}}}}}}"#
    );
    let (_, body) = crate::serve::raw_response(post(addr, None, Some(&s), &body));
    let answer = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|l| l.contains("\"id\":5"))
        .unwrap_or(&body)
        .to_string();
    let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
    v.get("result").map_or(answer, Value::to_string)
}

#[test]
fn a_write_cut_off_by_a_killed_gateway_replica_is_settled_for_the_retry_through_another() {
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let server = TestServer::start();
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    let p = Project::new(&text);
    let store = ["--lane-store", redis.url.as_str()];
    let lease = [("FLUX_TOOLS_LEASE_MS", "1000")];
    let audited = ["--lane-store", redis.url.as_str(), "--audit", "audit.jsonl"];
    let survivor = crate::serve::HttpGateway::start(&p, &audited, &lease);
    // Killed once after the service applied the write, once before it ever would.
    for (mode, key) in [("applied_late", "k-applied"), ("lost", "k-lost")] {
        let mut victim = crate::serve::HttpGateway::start(&p, &store, &lease);
        let addr = victim.addr();
        let inflight = std::thread::spawn(move || through(&addr, key, mode));
        until_sent(&server, mode);
        let _ = victim.child.kill();
        let _ = victim.child.wait();
        let _ = inflight.join();
        // 20 retries at once through the other replica: one settlement, one answer.
        let addr = survivor.addr();
        let answers: Vec<String> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..20)
                .map(|_| s.spawn(|| through(&addr, key, mode)))
                .collect();
            calls
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        assert!(
            answers[0].contains("\"isError\":false"),
            "{mode}: {}",
            answers[0]
        );
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "{mode}: {answers:?}"
        );
        one_probe_at_most_one_resend(&server, mode, |k| k == key);
    }
    // Each effect made exactly once.
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
    // Counted where an operator looks: `/metrics`, and the audit trail.
    let (_, metrics) = crate::serve_ops::get(&survivor, "/metrics", None);
    for outcome in ["applied", "not_applied"] {
        let line = format!("flux_tools_settled_total{{tool=\"pay\",outcome=\"{outcome}\"}} 1");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    let audit = std::fs::read_to_string(p.path().join("audit.jsonl")).unwrap_or_default();
    assert_eq!(
        audit.matches("\"event\":\"call.settled\"").count(),
        2,
        "{audit}"
    );
}

#[test]
fn a_write_in_flight_when_its_worker_was_killed_is_settled_by_the_next_worker_on_a_redis_journal() {
    let state = tempfile::tempdir().expect("temp dir");
    let dir = state.path().to_str().unwrap_or_default();
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        dir,
    ];
    let Some(redis) = crate::common::Redis::start_with(&aof) else {
        return;
    };
    let server = TestServer::start();
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    for (mode, run_id) in [("applied_late", "wf-1"), ("lost", "wf-2")] {
        let first = Project::new(&text);
        first.write("b.yaml", &batch(&[mode]));
        let args = [
            "run",
            "b.yaml",
            "--run-id",
            run_id,
            "--journal",
            redis.url.as_str(),
            "--format",
            "json",
        ];
        let lease = [("FLUX_TOOLS_LEASE_MS", "1000")];
        let mut child = first.spawn_env(&args, &lease);
        until_sent(&server, mode);
        let _ = child.kill();
        let _ = child.wait();
        // Two more workers at once, each in a folder of its own: one settles, once.
        let others: Vec<Project> = (0..2).map(|_| Project::new(&text)).collect();
        let docs: Vec<Value> = others
            .iter()
            .map(|p| {
                p.write("b.yaml", &batch(&[mode]));
                p.spawn_env(&args, &lease)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().expect("worker");
                serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
                    Value::from(String::from_utf8_lossy(&out.stderr).to_string())
                })
            })
            .collect();
        let settled = if mode == "lost" {
            "not_applied"
        } else {
            "applied"
        };
        assert!(
            docs.iter()
                .all(|d| d["results"].is_array()
                    && outcomes(d) == [("ok".into(), settled.into(), 1)]),
            "{mode}: {docs:?}"
        );
        one_probe_at_most_one_resend(&server, mode, |k| k.starts_with(run_id));
    }
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
}

/// A whole MCP server's write, overridden by a `[tools.*]` table with a probe that is one of
/// the server's own tools (learnt when it starts, its annotations read then).
#[test]
fn a_whole_mcp_servers_write_is_settled_by_another_of_its_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("mcp.log");
    let server = crate::mcp::own_server();
    let text = |probe: &str| {
        format!(
            "[mcp_servers.own]\ncommand = [\"{}\"]\nenv = {{ MCP_TEST_LOG = \"{}\" }}\nwhole = true\nrequires_approval = false\n\n\
             [tools.slow_write]\nkind = \"mcp\"\nserver = \"own\"\ntool = \"write\"\ntimeout = \"300ms\"\nverify = \"{probe}\"\n",
            server.display(),
            log.display()
        )
    };
    let p = Project::new(&text("own.structured"));
    let b = "- { id: w, tool: slow_write, args: { ms: 3000, tag: w } }\n";
    let (doc, code) = p.run_json(b, &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "applied".into(), 1)],
        "{doc}"
    );
    // A probe the server marks as a read that says it cannot tell: unknown.
    let p = Project::new(&text("own.fail"));
    let (doc, _) = p.run_json(b, &[]);
    assert_eq!(
        outcomes(&doc),
        [("timed_out".into(), "unknown".into(), 1)],
        "{doc}"
    );
    let m = results(&doc)[0]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(m.contains("the widget is broken"), "{m}");
    // A probe its server says writes, or that it does not offer: refused before anything runs.
    for (probe, why) in [
        ("own.crash", "`own.crash` is a write"),
        ("own.nothing", "`own.nothing` is not a tool"),
    ] {
        let p = Project::new(&text(probe));
        let path = p.write("b.yaml", b);
        let out = p
            .cmd()
            .args(["run", path.to_str().unwrap_or_default()])
            .output()
            .expect("run");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains(why),
            "{probe}: {said}"
        );
        assert!(said.contains("tools.toml:"), "{said}");
    }
}

#[test]
fn each_turn_of_a_long_lived_run_settles_its_cut_off_writes() {
    use std::io::{BufRead, Write};
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base, "\"find_pay\"", ""));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", "--turns", "-q"])
        .env_remove("FLUX_TOOLS_MANIFEST")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run --turns");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    for (turn, mode, settled) in [(1, "applied_late", "applied"), (2, "lost", "not_applied")] {
        let line = format!("[{{\"id\": \"t{turn}\", \"tool\": \"pay\", \"args\": {{\"mode\": \"{mode}\", \"order\": \"o{turn}\"}}}}]");
        writeln!(stdin, "{line}").expect("a turn");
        stdin.flush().expect("flush");
        let mut answer = String::new();
        stdout.read_line(&mut answer).expect("its answer");
        let doc: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
        assert_eq!(
            outcomes(&doc),
            [("ok".into(), settled.into(), if turn == 2 { 2 } else { 1 })],
            "{doc}"
        );
    }
    drop(stdin);
    let _ = child.wait();
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
}

#[test]
fn a_task_whose_replica_died_mid_write_is_settled_by_the_replica_that_takes_it_over() {
    use crate::serve_tasks::{rpc, start};
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let server = TestServer::start();
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    let p = Project::new(&text);
    let store = ["--lane-store", redis.url.as_str()];
    let lease = [("FLUX_TOOLS_LEASE_MS", "1000")];
    let other = crate::serve::HttpGateway::start(&p, &store, &lease);
    let addr = other.addr();
    let s = crate::serve_keys::session(&addr, None);
    for mode in ["applied_late", "lost"] {
        let mut victim = crate::serve::HttpGateway::start(&p, &store, &lease);
        let (va, vs) = (
            victim.addr(),
            crate::serve_keys::session(&victim.addr(), None),
        );
        let task = start(
            &va,
            None,
            &vs,
            "pay",
            serde_json::json!({"mode": mode, "order": "o"}),
        );
        until_sent(&server, mode);
        let _ = victim.child.kill();
        let _ = victim.child.wait();
        // Asked through the other replica, the task is taken over once the lease lapsed, and
        // its write settled by its probe: completed, not `indeterminate`.
        let r = rpc(
            &addr,
            None,
            &s,
            "tasks/result",
            serde_json::json!({"taskId": task}),
        );
        assert_eq!(r["result"]["isError"], false, "{mode}: {r}");
        let task_key = format!("task:{task}");
        one_probe_at_most_one_resend(&server, mode, |k| k == task_key);
    }
    assert_eq!(times(&server), [1, 1], "{:?}", server.effects());
}

#[test]
fn a_write_cut_off_by_the_runs_deadline_is_settled_as_the_run_ends() {
    let server = TestServer::start();
    let text = manifest(&server.base, "\"find_pay\"", "")
        .replace("timeout = \"600ms\"", "timeout = \"20s\"");
    let p = Project::new(&text);
    let (doc, _) = p.run_json(&batch(&["applied_late"]), &["--deadline", "1s"]);
    assert_eq!(doc["outcome"], "deadline_exceeded", "{doc}");
    assert_eq!(
        outcomes(&doc),
        [("ok".into(), "applied".into(), 1)],
        "{doc}"
    );
    let (doc, _) = p.run_json(&batch(&["lost"]), &["--deadline", "1s"]);
    // It never landed, and a run that is ending sends nothing again.
    assert_eq!(
        outcomes(&doc),
        [("not_applied".into(), "not_applied".into(), 1)],
        "{doc}"
    );
    assert_eq!(times(&server), [1], "{:?}", server.effects());
}
