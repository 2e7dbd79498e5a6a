//! The gateway's policies across clients (issue 28), driven by the Python `mcp` SDK: fair lanes
//! between sessions and gateway processes, read/write order on a backend across gateway
//! processes, a tenant's spend over a sliding window shared by processes, and approvals a
//! client cannot give itself.

use serde_json::{json, Value};

use crate::common::Project;
use crate::serve::{
    at, client, db_manifest, finish, http, log_lines, logged_manifest, logging_tool, python, spans,
    HttpGateway,
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
        assert!(t.contains("the window frees enough for it in 59m"), "{t}");
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
