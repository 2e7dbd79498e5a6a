//! The gateway's policies across clients (issue 28), driven by the Python `mcp` SDK: fair lanes
//! between sessions and gateway processes, read/write order on a backend across gateway
//! processes, a tenant's spend over a sliding window shared by processes, and approvals a
//! client cannot give itself.

use serde_json::{json, Value};

use crate::common::Project;
use crate::serve::{
    at, client, db_manifest, finish, http, log_lines, logged_manifest, logging_tool, python, spans,
    text, upstream, HttpGateway,
};

/// A lane of two and a one-second tool.
fn slow_lane(p: &Project) {
    p.write(
        "tools.toml",
        "[concurrency]\nmax_concurrent_tools = 64\nper_tool = { slow = 2 }\n\n[tools.slow]\nkind = \"scripted\"\nlatency = \"1s\"\neffect = \"read\"\noutput = \"ok\"\n",
    );
}

/// The calls of a `timed` client: (sent, answered) in Unix ms, each checked to be a success.
fn timed(v: &Value) -> Vec<(u64, u64)> {
    let calls = v.as_array().cloned().unwrap_or_default();
    calls
        .iter()
        .map(|c| {
            assert_eq!(c["isError"], false, "{c}");
            (
                c["sent_ms"].as_u64().unwrap_or(0),
                c["done_ms"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Client A floods `flood` one-second calls into the lane of two; client B sends five a
/// second later. Fair: B gets every other permit, so its fifth call starts about 4 s after it
/// was sent and is answered by about 5 s (served in arrival order it would wait for all of
/// A's: `flood / 2` seconds).
fn b_is_not_starved(a_url: &str, b_url: &str, flood: usize) {
    let Some(py) = python() else { return };
    let n = flood.to_string();
    let a = client(&py, &http(a_url), &["timed", "slow", &n, "{}", "0"]);
    let b = client(&py, &http(b_url), &["timed", "slow", "5", "{}", "1000"]);
    let b_calls = timed(&finish(b));
    let a_calls = timed(&finish(a));
    assert_eq!((a_calls.len(), b_calls.len()), (flood, 5));
    let worst = b_calls.iter().map(|(s, d)| d - s).max().unwrap_or(0);
    eprintln!("B's slowest call was answered {worst} ms after it was sent ({flood} of A's queued)");
    assert!(
        worst < 7_000,
        "B waited {worst} ms behind A's flood: a session must not starve another"
    );
    // A's calls all finished, after B's.
    let a_last = a_calls.iter().map(|c| c.1).max().unwrap_or(0);
    let b_last = b_calls.iter().map(|c| c.1).max().unwrap_or(0);
    assert!(a_last > b_last);
}

#[test]
fn a_session_flooding_a_lane_does_not_starve_another_session() {
    if python().is_none() {
        return;
    }
    let p = Project::new("");
    slow_lane(&p);
    let gw = HttpGateway::start(&p, &[], &[]);
    b_is_not_starved(&gw.url, &gw.url, 40);
}

#[test]
fn sessions_in_two_gateways_on_one_redis_take_turns_in_a_lane() {
    if python().is_none() {
        return;
    }
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("");
    slow_lane(&p);
    let store = ["--lane-store", redis.url.as_str()];
    let a = HttpGateway::start(&p, &store, &[]);
    let b = HttpGateway::start(&p, &store, &[]);
    b_is_not_starved(&a.url, &b.url, 40);
}

/// W1 (gateway 1), R1 200 ms later (gateway 2), W2 200 ms after that (gateway 3), all on
/// backend `db`, and a read of another backend meanwhile (gateway 2): the tool sees W1, R1,
/// W2 one after another in that order, and the other read under W1.
fn writes_and_reads_keep_arrival_order_across_gateways(store: &[&str]) {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    let text = std::fs::read_to_string(&script).unwrap_or_default();
    let script = p.write("slow.sh", &text.replace("sleep 0.3", "sleep 0.8"));
    db_manifest(&p, &script, false);
    let gws: Vec<HttpGateway> = (0..3).map(|_| HttpGateway::start(&p, store, &[])).collect();
    let plan = json!([
        {"url": gws[0].url, "tool": "put", "args": {"tag": "w1"}, "at_ms": 0},
        {"url": gws[1].url, "tool": "get", "args": {"tag": "r1"}, "at_ms": 200},
        {"url": gws[2].url, "tool": "put", "args": {"tag": "w2"}, "at_ms": 400},
        {"url": gws[1].url, "tool": "other", "args": {"tag": "o1"}, "at_ms": 300},
    ]);
    let out = finish(client(&py, &http("-"), &["plan", &plan.to_string()]));
    for c in out.as_array().into_iter().flatten() {
        assert_eq!(c["isError"], false, "{c}");
    }
    let s = spans(&log);
    let (w1, r1, w2) = (
        (at(&s, "start", "put-w1"), at(&s, "end", "put-w1")),
        (at(&s, "start", "get-r1"), at(&s, "end", "get-r1")),
        (at(&s, "start", "put-w2"), at(&s, "end", "put-w2")),
    );
    assert!(
        w1.1 <= r1.0 && r1.1 <= w2.0,
        "W1, R1, W2 in order, none overlapping: {s:?}"
    );
    let o1 = at(&s, "start", "other-o1");
    assert!(o1 < w1.1, "a read of another backend does not wait: {s:?}");
}

#[test]
fn a_backends_reads_and_writes_keep_arrival_order_across_gateway_processes() {
    writes_and_reads_keep_arrival_order_across_gateways(&[]);
}

#[test]
fn a_backends_order_holds_across_gateways_on_one_redis() {
    if python().is_none() {
        return;
    }
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    writes_and_reads_keep_arrival_order_across_gateways(&["--lane-store", redis.url.as_str()]);
}

/// A tenant's window of 1.00 per hour and a tool costing 0.30: ten concurrent calls, five
/// through each of two gateway processes, and exactly three reach the tool; the other seven
/// are `budget_exhausted` answers that say when the window frees up.
fn a_tenants_window_holds_across_gateways(store: &[&str]) {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    let budget = "\n[budget]\nper_tenant = { max_cost = 1.00, window = \"1h\" }\n";
    logged_manifest(&p, &script, budget, "cost = 0.30");
    let gws: Vec<HttpGateway> = (0..2).map(|_| HttpGateway::start(&p, store, &[])).collect();
    let plan: Vec<Value> = (0..10)
        .map(|i| json!({"url": gws[i % 2].url, "tool": "logged", "args": {"tag": format!("c{i}")}, "at_ms": 0}))
        .collect();
    let out = finish(client(
        &py,
        &http("-"),
        &["plan", &Value::from(plan).to_string()],
    ));
    let calls = out.as_array().cloned().unwrap_or_default();
    let refused: Vec<&str> = calls
        .iter()
        .filter(|c| c["isError"] == true)
        .filter_map(|c| c["text"].as_str())
        .collect();
    assert_eq!((calls.len(), refused.len()), (10, 7), "{out}");
    for t in &refused {
        assert!(t.starts_with("budget_exhausted: "), "{t}");
        let frees = [
            "the window frees enough for it in 59m",
            "the window frees enough for it in 60m00s",
        ];
        assert!(frees.iter().any(|f| t.contains(f)), "{t}");
    }
    eprintln!("a refusal: {}", refused[0]);
    let starts = log_lines(&log)
        .iter()
        .filter(|l| l.starts_with("start "))
        .count();
    assert_eq!(starts, 3, "{:?}", log_lines(&log));
}

#[test]
fn a_tenants_window_is_shared_by_gateway_processes() {
    a_tenants_window_holds_across_gateways(&[]);
}

#[test]
fn a_tenants_window_is_shared_by_gateways_on_one_redis() {
    if python().is_none() {
        return;
    }
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    a_tenants_window_holds_across_gateways(&["--lane-store", redis.url.as_str()]);
}

/// A manifest whose `write` is the test server's destructive tool, with nothing in the
/// manifest about approval (`serve`: lines for `[serve]`; `tool`: for `[tools.write]`).
fn destructive(p: &Project, serve: &str, tool: &str) -> std::path::PathBuf {
    let log = p.path().join("log");
    let starts = p.path().join("starts");
    let m = upstream(&log, &starts, "").replace("approval = \"none\"\n", tool);
    p.write("tools.toml", &format!("[serve]\n{serve}\n\n{m}"));
    log
}

fn upstream_writes(log: &std::path::Path) -> usize {
    log_lines(log)
        .iter()
        .filter(|l| l.starts_with("start w"))
        .count()
}

/// `flux-tools approvals --format json` in the project: the calls parked for approval.
pub(crate) fn parked(p: &Project) -> Vec<Value> {
    let out = p
        .cmd()
        .args(["approvals", "--format", "json"])
        .output()
        .expect("approvals");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// `flux-tools approve ID@HASH` in the project, which must succeed.
pub(crate) fn approve(p: &Project, id: &str, hash: &str) {
    let ok = p
        .cmd()
        .args(["approve", &format!("{id}@{hash}")])
        .output()
        .expect("approve");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// `flux-tools approve --lane-store STORE ID@HASH` in the project, which must succeed.
pub(crate) fn approve_in(p: &Project, store: &str, call: &str) {
    let ok = p
        .cmd()
        .args(["approve", "--lane-store", store, call])
        .output()
        .expect("approve");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

pub(crate) fn wait_parked(p: &Project) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(w) = parked(p).into_iter().next() {
            return w;
        }
        assert!(
            std::time::Instant::now() < until,
            "no call was parked for approval"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_destructive_call_waits_out_of_band_until_approved_with_its_arguments_hash() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = destructive(&p, "", "");
    let gw = HttpGateway::start(&p, &[], &[]);
    let c = client(
        &py,
        &http(&gw.url),
        &["call", "write", r#"{"ms": 200, "tag": "w1"}"#],
    );
    let w = wait_parked(&p);
    assert_eq!(
        (w["tool"].as_str(), upstream_writes(&log)),
        (Some("write"), 0),
        "{w}"
    );
    let (id, hash) = (
        w["id"].as_str().unwrap_or(""),
        w["hash"].as_str().unwrap_or(""),
    );
    // The listing says how to approve it.
    let table = p.cmd().arg("approvals").output().expect("approvals");
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains(&format!("flux-tools approve {id}@{hash}")),
        "{table}"
    );
    // A wrong hash is refused, and the call still waits.
    let wrong = p
        .cmd()
        .args(["approve", &format!("{id}@0000000000000000")])
        .output()
        .expect("approve");
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(err.contains("not 0000000000000000: refused"), "{err}");
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(upstream_writes(&log), 0);
    approve(&p, id, hash);
    let r = finish(c);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(upstream_writes(&log), 1);
    assert!(
        parked(&p).is_empty(),
        "an answered call is no longer listed"
    );
}

#[test]
fn a_call_nobody_approves_is_refused_at_its_deadline_and_a_denied_one_at_once() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = destructive(&p, "approval_timeout = \"1s\"", "");
    let gw = HttpGateway::start(&p, &[], &[]);
    let r = finish(client(
        &py,
        &http(&gw.url),
        &["call", "write", r#"{"ms": 200, "tag": "w1"}"#],
    ));
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).starts_with("approval_denied: "), "{r}");
    assert!(text(&r).contains("nobody approved it within 1s"), "{r}");
    // Denied out of band: refused without waiting for the deadline.
    let p2 = Project::new("");
    let log2 = destructive(&p2, "approval_timeout = \"60s\"", "");
    let gw2 = HttpGateway::start(&p2, &[], &[]);
    let c = client(
        &py,
        &http(&gw2.url),
        &["call", "write", r#"{"ms": 200, "tag": "w2"}"#],
    );
    let w = wait_parked(&p2);
    let deny = p2
        .cmd()
        .args(["deny", w["id"].as_str().unwrap_or("")])
        .output()
        .expect("deny");
    assert!(
        deny.status.success(),
        "{}",
        String::from_utf8_lossy(&deny.stderr)
    );
    let r = finish(c);
    assert!(text(&r).contains("approval denied out of band"), "{r}");
    assert_eq!((upstream_writes(&log), upstream_writes(&log2)), (0, 0));
}

#[test]
fn in_band_a_clients_decline_refuses_the_call_and_its_accept_runs_it() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = destructive(&p, "approval_in_band = true", "");
    let gw = HttpGateway::start(&p, &[], &[]);
    let no = finish(client(
        &py,
        &http(&gw.url),
        &["elicit", "decline", "write", r#"{"ms": 200, "tag": "w1"}"#],
    ));
    assert_eq!(no["result"]["isError"], true, "{no}");
    assert!(text(&no["result"]).starts_with("approval_denied: "), "{no}");
    let asked = no["asked"][0].as_str().unwrap_or("");
    assert!(
        asked.contains("approve the call of `write`") && asked.contains(r#""tag":"w1""#),
        "{no}"
    );
    assert_eq!(
        upstream_writes(&log),
        0,
        "a declined call never reaches its tool"
    );
    let yes = finish(client(
        &py,
        &http(&gw.url),
        &["elicit", "accept", "write", r#"{"ms": 200, "tag": "w2"}"#],
    ));
    assert_eq!(yes["result"]["isError"], false, "{yes}");
    assert_eq!(upstream_writes(&log), 1);
}

#[test]
fn an_out_of_band_tool_ignores_a_clients_accept() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = destructive(
        &p,
        "approval_in_band = true\napproval_timeout = \"1s\"",
        "approval = \"out_of_band\"\n",
    );
    let gw = HttpGateway::start(&p, &[], &[]);
    let r = finish(client(
        &py,
        &http(&gw.url),
        &["elicit", "accept", "write", r#"{"ms": 200, "tag": "w1"}"#],
    ));
    assert_eq!(
        r["asked"],
        serde_json::json!([]),
        "the client is never asked: {r}"
    );
    assert!(
        text(&r["result"]).contains("nobody approved it within 1s"),
        "{r}"
    );
    assert_eq!(upstream_writes(&log), 0);
}

#[test]
fn each_session_leaves_one_history_record_and_report_shows_the_lanes_peaks() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    p.write(
        "tools.toml",
        "[history]\npath = \"runs.jsonl\"\n\n[concurrency]\nper_tool = { slow = 2 }\n\n[tools.slow]\nkind = \"scripted\"\nlatency = \"300ms\"\neffect = \"read\"\ncost = 0.25\noutput = \"ok\"\n",
    );
    let gw = HttpGateway::start(&p, &[], &[]);
    let a = client(
        &py,
        &http(&gw.url),
        &["burst", "slow", "4", r#"{"n": {i}}"#],
    );
    let b = client(
        &py,
        &http(&gw.url),
        &["burst", "slow", "2", r#"{"m": {i}}"#],
    );
    finish(a);
    finish(b);
    // A session's record is written when it ends (the client closes it).
    let path = p.path().join("runs.jsonl");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let records = loop {
        let lines = log_lines(&path);
        if lines.len() >= 2 || std::time::Instant::now() > until {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let recs: Vec<Value> = records
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(recs.len(), 2, "{records:?}");
    let mut calls: Vec<u64> = recs
        .iter()
        .map(|r| r["calls"].as_u64().unwrap_or(0))
        .collect();
    calls.sort();
    assert_eq!(calls, vec![2, 4], "{recs:?}");
    for r in &recs {
        assert_eq!(r["input_format"], "mcp", "{r}");
        let lane = r["lanes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["lane"] == "tool:slow");
        let lane = lane.unwrap_or_else(|| panic!("no tool:slow lane in {r}"));
        assert!(
            lane["peak"].as_u64().unwrap_or(0) >= 1 && lane["peak"].as_u64().unwrap_or(9) <= 2,
            "{lane}"
        );
    }
    let total: f64 = recs.iter().map(|r| r["cost"].as_f64().unwrap_or(0.0)).sum();
    assert!((total - 1.5).abs() < 1e-9, "{recs:?}");
    let report = p
        .cmd()
        .args(["report", "--history", path.to_str().unwrap_or("")])
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success() && text.contains("tool:slow"),
        "{text}"
    );
}

#[test]
fn replicas_on_one_redis_list_and_release_each_others_waiting_approvals() {
    let Some(py) = python() else { return };
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = destructive(&p, "", "");
    let store = ["--lane-store", redis.url.as_str()];
    let (one, two) = (
        HttpGateway::start(&p, &store, &[]),
        HttpGateway::start(&p, &store, &[]),
    );
    let c = client(
        &py,
        &http(&one.url),
        &["call", "write", r#"{"ms": 200, "tag": "w1"}"#],
    );
    let w = wait_listed(&p, &redis.url, 1, |_| true).remove(0);
    // The other replica sees it too (its metrics count it).
    let metrics = crate::serve_ops::get(&two, "/metrics", None).1;
    assert!(
        metrics.contains("flux_tools_approvals_waiting 1"),
        "{metrics}"
    );
    // Not on this machine's files: the board is Redis's.
    assert!(parked(&p).is_empty());
    let call = format!(
        "{}@{}",
        w["id"].as_str().unwrap_or(""),
        w["hash"].as_str().unwrap_or("")
    );
    approve_in(&p, &redis.url, &call);
    let r = finish(c);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(upstream_writes(&log), 1, "the call ran once");
    assert!(listed_on(&p, &redis.url).is_empty());
}

/// `approvals --lane-store URL --format json`: the calls waiting on the Redis board.
fn listed_on(p: &Project, url: &str) -> Vec<Value> {
    let out = p
        .cmd()
        .args(["approvals", "--lane-store", url, "--format", "json"])
        .output()
        .expect("approvals");
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Wait until `n` calls are listed and every one satisfies `ok`.
fn wait_listed(p: &Project, url: &str, n: usize, ok: impl Fn(&Value) -> bool) -> Vec<Value> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        let l = listed_on(p, url);
        if l.len() == n && l.iter().all(&ok) {
            return l;
        }
        assert!(std::time::Instant::now() < until, "listed: {l:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Park `write` with `tag` through `gw`, SIGKILL `gw` and its client, and wait until the call
/// is listed orphaned: its `ID@HASH`.
fn orphan(p: &Project, py: &std::path::Path, gw: &mut HttpGateway, url: &str, tag: &str) -> String {
    let mut c = client(
        py,
        &http(&gw.url),
        &["keyed", "write", &write_args(tag), tag],
    );
    wait_listed(p, url, 1, |_| true);
    for child in [&mut gw.child, &mut c] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let w = wait_listed(p, url, 1, |w| w["orphaned"] == true).remove(0);
    let table = p
        .cmd()
        .args(["approvals", "--lane-store", url])
        .output()
        .expect("approvals");
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(table.contains("its gateway stopped"), "{table}");
    let (id, hash) = (w["id"].as_str(), w["hash"].as_str());
    format!("{}@{}", id.unwrap_or(""), hash.unwrap_or(""))
}

fn write_args(tag: &str) -> String {
    format!(r#"{{"ms": 200, "tag": "{tag}"}}"#)
}

#[test]
fn a_dead_replicas_waiting_approvals_are_answered_on_the_clients_retry() {
    let Some(py) = python() else { return };
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = destructive(&p, "", "");
    let store = ["--lane-store", redis.url.as_str()];
    let mut gws: Vec<HttpGateway> = (0..3)
        .map(|_| HttpGateway::start(&p, &store, &[]))
        .collect();
    let answer = |verb: &str, call: &str| {
        let out = p
            .cmd()
            .args([verb, "--lane-store", redis.url.as_str(), call])
            .output()
            .expect("answer");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Approved while its gateway is gone: the retry (with the call's idempotency key) through
    // another replica runs it at once.
    let a = orphan(&p, &py, &mut gws[0], &redis.url, "wa");
    answer("approve", &a);
    assert_eq!(upstream_writes(&log), 0);
    let r = finish(client(
        &py,
        &http(&gws[1].url),
        &["keyed", "write", &write_args("wa"), "wa"],
    ));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(upstream_writes(&log), 1, "a ran once: {r}");
    // Retried before anyone answered: the retry waits on the same entry, and a deny reaches it.
    let b = orphan(&p, &py, &mut gws[1], &redis.url, "wb");
    let c = client(
        &py,
        &http(&gws[2].url),
        &["keyed", "write", &write_args("wb"), "wb"],
    );
    wait_listed(&p, &redis.url, 1, |w| w["orphaned"].is_null());
    answer("deny", &b);
    let r = finish(c);
    assert_eq!(r["isError"], true, "{r}");
    assert!(r.to_string().contains("approval denied out of band"), "{r}");
    assert_eq!(upstream_writes(&log), 1, "b never ran");
    assert!(listed_on(&p, &redis.url).is_empty());
    for (i, gw) in gws.iter().enumerate().skip(1) {
        let said = gw.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        assert!(said.contains("is taken over here"), "replica {i}: {said}");
    }
}
