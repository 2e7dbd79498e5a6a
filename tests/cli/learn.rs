//! Lanes that learn (`concurrency = "auto"`) against a real HTTP backend with a hidden
//! capacity (4 calls at once in 200 ms, queued beyond, 429 beyond 8): one process, two
//! processes on the local store, and two on one Redis — one limit for all of them.

use serde_json::Value;

use crate::common::{results, Project, Redis};
use crate::http_server::TestServer;

/// `partner` (learned, starting at 2) in front of `/capacity/4/200`.
fn manifest(base: &str) -> String {
    format!(
        "[concurrency]\nmax_concurrent_tools = 64\n\n\
         [lanes.partner]\nconcurrency = \"auto\"\nmin = 1\nmax = 32\nstart = 2\n\n\
         [tools.fetch]\nkind = \"http\"\nurl = \"{base}/capacity/4/200\"\neffect = \"read\"\nlanes = [\"partner\"]\nretries = 4\ntimeout = \"10s\"\n"
    )
}

fn batch(n: usize) -> String {
    (0..n)
        .map(|i| format!("- {{ id: c{i}, tool: fetch }}\n"))
        .collect()
}

/// The `partner` lane's figures in a run's stats.
fn partner(doc: &Value) -> Value {
    let lanes = doc["stats"]["lanes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    lanes
        .into_iter()
        .find(|l| l["lane"] == "lane:partner")
        .unwrap_or(Value::Null)
}

/// Every call answered, or refused by the backend after its retries (classified).
fn all_answered(doc: &Value) -> bool {
    results(doc)
        .iter()
        .all(|r| r["status"] == "ok" || r["error"]["kind"] == "rate_limited")
}

#[test]
fn a_learned_lane_grows_from_its_start_to_the_backends_capacity() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    let (doc, _) = p.run_json(&batch(48), &[]);
    assert!(all_answered(&doc), "{doc}");
    let lane = partner(&doc);
    let learned = &lane["learned"];
    // It began at 2 and grew to at least the capacity (4) …
    assert_eq!(learned["start"], 2, "{lane}");
    assert!(learned["highest"].as_u64() >= Some(4), "{lane}");
    // … and every move says why.
    let moves = learned["moves"].as_array().cloned().unwrap_or_default();
    assert!(moves.iter().any(|m| m[2] == "grew"), "{lane}");
    // What the lane held never passed what it had learned.
    assert!(
        lane["peak_in_flight"].as_u64() <= learned["highest"].as_u64(),
        "{lane}"
    );
    assert!(
        server.capacity_peak() >= 4,
        "peak {}",
        server.capacity_peak()
    );
    // The summary says the limit as it went, not a peak over the last limit.
    let path = p.write("batch.yaml", &batch(24));
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap_or_default()])
        .output();
    let err = String::from_utf8_lossy(&out.expect("run").stderr).to_string();
    let said = err.lines().find(|l| l.contains("lane lane:partner: peak"));
    let said = said.unwrap_or_default();
    assert!(
        said.contains(", limit learned ") && said.contains(" at most)"),
        "{err}"
    );
}

/// Two processes at once on one lane store (`extra`: its flag), each with 40 calls: each
/// one's `partner` lane figures.
fn two_at_once(p: &Project, extra: &[&str]) -> Vec<Value> {
    let path = p.write("batch.yaml", &batch(40));
    let mut args = vec!["run", path.to_str().unwrap_or_default(), "--format", "json"];
    args.extend_from_slice(extra);
    let children: Vec<_> = (0..2).map(|_| p.spawn(&args)).collect();
    let mut lanes = Vec::new();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(all_answered(&doc), "{doc}");
        lanes.push(partner(&doc));
    }
    lanes
}

/// Each lane learned, and the limit it held never passed the one limit they shared: the
/// backend never had more than twice its capacity in (two lanes learning apart would each send
/// up to about 6).
fn learned_together(lanes: &[Value], server: &TestServer) {
    let peak = server.capacity_peak();
    assert!(peak <= 8, "peak {peak}: {lanes:?}");
    for lane in lanes {
        assert!(lane["learned"]["highest"].as_u64() >= Some(4), "{lane}");
    }
    let highest = lanes
        .iter()
        .filter_map(|l| l["learned"]["highest"].as_u64())
        .max();
    let held: u64 = lanes
        .iter()
        .filter_map(|l| l["peak_in_flight"].as_u64())
        .sum();
    // Two lanes learning apart would each hold up to their own limit; sharing one, what
    // both held at their peaks stays within twice the highest limit either saw.
    assert!(Some(held) <= highest.map(|h| 2 * h), "{lanes:?}");
}

#[test]
fn two_processes_on_the_local_store_learn_one_limit() {
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    learned_together(&two_at_once(&p, &[]), &server);
    // The limit lives in the lane's folder, for every process (and the next run).
    starts_from_the_stores_limit(&p, &[], set_local_limit);
}

/// A run after them starts from the limit the store holds (set to 7 by `set`), told within
/// its first exchange — long before it could have learned it itself (two windows of 400 ms or
/// more).
fn starts_from_the_stores_limit(p: &Project, extra: &[&str], set: impl FnOnce()) {
    set();
    let (doc, _) = p.run_json(&batch(8), extra);
    let lane = partner(&doc);
    let first = lane["learned"]["moves"][0].clone();
    assert!(first[0].as_u64() < Some(600), "{lane}");
    assert_eq!(first[1], 7, "{lane}");
    assert_eq!(first[2], "adopted", "{lane}");
}

/// The local store's learned state of `partner` (in its lane folder), set to limit 7.
fn set_local_limit() {
    let files = crate::common::files_under(&runtime_dir());
    let mine = files.iter().filter(|f| f.ends_with("learn"));
    let mut set = false;
    for f in mine.filter(|f| f.to_string_lossy().contains("lane_partner")) {
        let Ok(mut state) =
            serde_json::from_str::<Value>(&std::fs::read_to_string(f).unwrap_or_default())
        else {
            continue;
        };
        state["law"]["limit"] = 7.into();
        std::fs::write(f, state.to_string()).expect("write");
        set = true;
    }
    assert!(set, "no learned state in the lane folders");
}

/// Where the local store keeps its lane folders.
fn runtime_dir() -> std::path::PathBuf {
    flux_tools::runtime_dir().expect("the lane folder")
}

#[test]
fn two_processes_on_one_redis_learn_one_limit_kept_in_redis() {
    let Some(redis) = Redis::start() else { return };
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    let store = ["--lane-store", redis.url.as_str()];
    learned_together(&two_at_once(&p, &store), &server);
    // The limit and its moves live in Redis.
    let cli = |args: &[&str]| redis_cli(&redis, args);
    let keys = cli(&["--scan", "--pattern", "*partner:learn*"]);
    let hash = keys
        .lines()
        .find(|k| k.ends_with(":learn"))
        .unwrap_or_default()
        .to_string();
    assert!(keys.contains(":learn:moves"), "{keys}");
    starts_from_the_stores_limit(&p, &store, || {
        cli(&["HSET", &hash, "limit", "7"]);
    });
}

#[test]
fn plan_shows_a_learned_lane_and_its_last_limit_and_the_history_draws_it() {
    let server = TestServer::start();
    let p = Project::new(&format!(
        "{}\n[history]\npath = \"runs.jsonl\"\n",
        manifest(&server.base)
    ));
    p.write("plan.yaml", &batch(4));
    let plan = |format: &str| {
        let out = p
            .cmd()
            .args(["plan", "plan.yaml", "--format", format])
            .output();
        String::from_utf8_lossy(&out.expect("plan").stdout).to_string()
    };
    // Before any run: auto, from its start.
    let table = plan("table");
    assert!(table.contains("lane:partner (auto, from 2)"), "{table}");
    let (doc, _) = p.run_json(&batch(24), &[]);
    let last = partner(&doc)["learned"]["last"].as_u64().unwrap_or(0);
    assert!(last >= 2, "{doc}");
    // After it: the last learned limit, in the table and the JSON.
    let table = plan("table");
    let said = format!("lane:partner (auto, learned {last})");
    assert!(table.contains(&said), "{table}");
    let json: Value = serde_json::from_str(&plan("json")).expect("plan json");
    let lanes = json["lanes"].as_array().cloned().unwrap_or_default();
    let lane = lanes.into_iter().find(|l| l["name"] == "lane:partner");
    let lane = lane.unwrap_or(Value::Null);
    let seen = (lane["learned"].as_u64(), lane["auto"]["start"].as_u64());
    assert_eq!(seen, (Some(last), Some(2)), "{lane}");
    // The history draws it.
    let out = p.cmd().args(["report", "--history", "runs.jsonl"]).output();
    let text = String::from_utf8_lossy(&out.expect("report").stdout).to_string();
    assert!(text.contains("learned limit of lane:partner:"), "{text}");
    let drawn = format!(" {last} (");
    let bar = text.lines().any(|l| l.contains('█') && l.contains(&drawn));
    assert!(bar, "{text}");
}

#[test]
fn a_quota_the_backend_states_is_heeded_before_it_refuses() {
    let server = TestServer::start();
    let p = Project::new(&format!(
        "[lanes.partner]\nconcurrency = 1\n\n\
         [tools.fetch]\nkind = \"http\"\nurl = \"{}/quota/3/1\"\neffect = \"read\"\nlanes = [\"partner\"]\nretries = 3\n",
        server.base
    ));
    let (doc, code) = p.run_json(&batch(6), &[]);
    assert_eq!(code, 0, "{doc}");
    // The third answer said none remain until the window resets: the fourth call waited for
    // it instead of drawing a 429.
    assert_eq!(doc["stats"]["http_429"], 0, "{doc}");
    let started = |i: usize| results(&doc)[i]["started_ms"].as_u64().unwrap_or(0);
    assert!(started(3) >= started(2) + 500, "{doc}");
    let attempts: Vec<u64> = results(&doc)
        .iter()
        .filter_map(|r| r["attempts"].as_u64())
        .collect();
    assert_eq!(attempts, [1; 6], "{doc}");
}

#[test]
fn a_learned_limit_is_checked_where_it_is_written() {
    for (text, said) in [
        (
            "[lanes.a]\nconcurrency = \"atuo\"\n",
            "error: `concurrency` in [lanes.a] is \"atuo\"; it is a number or \"auto\"\n  ——▶ tools.toml:2:15",
        ),
        (
            "[lanes.a]\nconcurrency = 4\nmax = 9\n",
            "error: `max` in [lanes.a] bounds a learned limit\n  ——▶ tools.toml:3:1",
        ),
        (
            "[lanes.a]\nconcurrency = \"auto\"\nmin = 8\nmax = 4\n",
            "error: the bounds in [lanes.a] are min 8, start 8, max 4; they must be min ≤ start ≤ max",
        ),
        (
            "[concurrency.per_tool]\nt = { min = 2, mx = 9 }\n[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n",
            "error: unknown field `mx` in `per_tool.t`",
        ),
    ] {
        let p = Project::new(text);
        let out = p.cmd().args(["validate"]).output().expect("validate");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(err.contains(said), "{text}\n{err}");
        assert_eq!(err.matches("error:").count(), 1, "{err}");
    }
    // A tool's weight above an auto lane's floor could wait forever there.
    let p = Project::new(
        "[concurrency.per_tool]\nt = { min = 1, max = 8 }\n[tools.t]\nkind = \"scripted\"\neffect = \"read\"\nweight = 2\n",
    );
    p.write("b.yaml", "- { id: c, tool: t }\n");
    let out = p.cmd().args(["plan", "b.yaml"]).output().expect("plan");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("allows (1, the floor of its learned limit)"),
        "{err}"
    );
}

/// `redis-cli` on `redis`: what it printed.
fn redis_cli(redis: &Redis, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &redis.url])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The lane's `flux_tools_lane_limit` in a gateway's `/metrics`.
fn metric_limit(gw: &crate::serve::HttpGateway) -> Option<u64> {
    let (_, text) = crate::serve_ops::get(gw, "/metrics", None);
    let line = text
        .lines()
        .find(|l| l.starts_with("flux_tools_lane_limit{") && l.contains("partner"))?;
    line.rsplit(' ').next()?.parse().ok()
}

#[test]
fn two_gateway_replicas_on_one_redis_hold_one_learned_limit_between_them() {
    let (Some(py), Some(redis)) = (crate::serve::python(), Redis::start()) else {
        return;
    };
    let server = TestServer::start();
    let p = Project::new(&manifest(&server.base));
    let store = ["--lane-store", redis.url.as_str()];
    let gws: Vec<_> = (0..2)
        .map(|_| crate::serve::HttpGateway::start(&p, &store, &[]))
        .collect();
    // A real client on each replica, 40 calls at once each.
    let clients: Vec<_> = gws
        .iter()
        .map(|gw| {
            let how = crate::serve::http(&gw.url);
            crate::serve::client(&py, &how, &["many", "fetch", "40", "{}"])
        })
        .collect();
    for c in clients {
        let out = crate::serve::finish(c);
        let results = out["results"].as_array().cloned().unwrap_or_default();
        assert_eq!(results.len(), 40, "{out}");
        for r in &results {
            let refused = r.to_string().contains("rate_limited");
            assert!(r["isError"] == false || refused, "{r}");
        }
    }
    // One limit, in Redis: it grew from its start, and every move is kept there.
    let keys = redis_cli(&redis, &["--scan", "--pattern", "*partner:learn:moves"]);
    let moves = redis_cli(&redis, &["LRANGE", keys.trim(), "0", "-1"]);
    assert!(moves.contains("grew"), "{keys}: {moves}");
    let highest = moves
        .lines()
        .filter_map(|m| m.split(' ').nth(1)?.parse::<usize>().ok())
        .chain([2])
        .max()
        .unwrap_or(2);
    // The sum of what both replicas had in at the backend never passed that one limit (two
    // replicas learning apart would each send up to their own).
    let peak = server.capacity_peak();
    assert!((4..=highest).contains(&peak), "peak {peak}, limits {moves}");
    // Both replicas show a limit the lane learned (one of its moves).
    for gw in &gws {
        let limit = metric_limit(gw).unwrap_or(0);
        let known = moves
            .lines()
            .any(|m| m.split(' ').nth(1) == Some(&limit.to_string()));
        assert!(known, "a replica shows {limit}; the lane's moves: {moves}");
    }
}

#[test]
fn a_lowered_limit_holds_for_permits_handed_on_by_calls_taken_under_the_old_one() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(
        "[concurrency]\nmax_concurrent_tools = 64\n\n\
         [lanes.partner]\nconcurrency = \"auto\"\nmin = 1\nmax = 8\nstart = 8\n\n\
         [tools.slow]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"600ms\"\nlanes = [\"partner\"]\n",
    );
    let store = ["--lane-store", redis.url.as_str()];
    let calls = (0..12)
        .map(|i| format!("- {{ id: c{i}, tool: slow }}\n"))
        .collect::<String>();
    // A first run makes the lane's learning hash; an operator then lowers its limit to 2.
    p.run_json(&calls, &store);
    let keys = redis_cli(&redis, &["--scan", "--pattern", "*partner:learn"]);
    let hash = keys.lines().next().unwrap_or_default().to_string();
    assert!(!hash.is_empty(), "no learning hash: {keys}");
    redis_cli(&redis, &["HSET", &hash, "limit", "2"]);
    // Two runs at once (started within a few ms of each other) take 8 between them before their first exchange tells them the limit
    // is 2. When those 8 end (at 600 ms), they hand their permits on to the lane's queue at
    // the limit in force (2), not at the one they were taken under (8: each run's next two
    // would start). Nothing moves the limit before its first window is judged (two answers'
    // time and two exchanges: 1.4 s).
    let path = p.write("batch.yaml", &calls);
    let mut args = vec!["run", path.to_str().unwrap_or_default(), "--format", "json"];
    args.extend_from_slice(&store);
    let children: Vec<_> = (0..2).map(|_| p.spawn(&args)).collect();
    let mut started = Vec::new();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        started.extend(
            results(&doc)
                .iter()
                .filter_map(|r| r["started_ms"].as_u64()),
        );
    }
    let first = started.iter().filter(|s| **s < 400).count();
    let next = started.iter().filter(|s| (400..1100).contains(*s)).count();
    assert_eq!((first, next), (8, 2), "{started:?}");
}
