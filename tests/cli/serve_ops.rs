//! The gateway's operations endpoints (issue 29): `/healthz`, `/readyz` (not ready while the
//! lane store is away) and `/metrics`, parsed by Prometheus's own Python parser and checked
//! against what the tool itself logged.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{repo, Project};
use crate::serve::{
    client, finish, http, log_lines, logged_manifest, logging_tool, python, HttpGateway,
};

/// `GET path` on the gateway: (status code, body).
pub(crate) fn get(gw: &HttpGateway, path: &str, token: Option<&str>) -> (u16, String) {
    let addr = gw
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("send");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        code,
        if chunked {
            unchunk(body)
        } else {
            body.to_string()
        },
    )
}

/// A chunked body's data (hyper chunks a body of unknown length).
fn unchunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// The samples of an OpenMetrics text, as Prometheus's parser reads them: (name, labels, value).
fn parse(text: &str, py: &std::path::Path) -> Vec<(String, Value, f64)> {
    let script = "import json, sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\nprint(json.dumps([[s.name, s.labels, s.value] for f in p(sys.stdin.read()) for s in f.samples]))";
    let mut c = std::process::Command::new(py)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    c.stdin.take().map(|mut i| i.write_all(text.as_bytes()));
    let out = c.wait_with_output().expect("parse");
    assert!(
        out.status.success(),
        "the parser refused it: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<(String, Value, f64)> = serde_json::from_slice(&out.stdout).expect("samples");
    v
}

fn sample(samples: &[(String, Value, f64)], name: &str, label: (&str, &str)) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| n == name && l[label.0] == label.1)
        .map(|s| s.2)
}

/// How many calls the tool's log shows running now.
fn running(log: &std::path::Path) -> i64 {
    log_lines(log)
        .iter()
        .map(|l| {
            if l.starts_with("start ") {
                1
            } else if l.starts_with("end ") {
                -1
            } else {
                0
            }
        })
        .sum()
}

#[test]
fn metrics_parse_as_prometheus_text_and_the_in_flight_gauge_matches_the_tools_log() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    let text = std::fs::read_to_string(&script).unwrap_or_default();
    let script = p.write("slow.sh", &text.replace("sleep 0.3", "sleep 1.5"));
    logged_manifest(&p, &script, "per_tool = { logged = 4 }", "cost = 0.5");
    let gw = HttpGateway::start(&p, &[], &[]);
    assert_eq!(get(&gw, "/healthz", None), (200, "ok\n".to_string()));
    assert_eq!(get(&gw, "/readyz", None).0, 200);
    let c = client(
        &py,
        &http(&gw.url),
        &["burst", "logged", "8", r#"{"tag": "c{i}"}"#],
    );
    // Look while four calls run and four wait: the log and the gauge agree when the log is steady.
    let until = Instant::now() + Duration::from_secs(20);
    let (gauge, waiting) = loop {
        assert!(
            Instant::now() < until,
            "never saw four calls running: {:?}",
            log_lines(&log)
        );
        let before = running(&log);
        let (code, body) = get(&gw, "/metrics", None);
        assert_eq!(code, 200, "{body}");
        if before == 4 && running(&log) == 4 {
            let s = parse(&body, &py);
            let gauge = sample(&s, "flux_tools_lane_in_flight", ("lane", "tool:logged"));
            let waiting = sample(&s, "flux_tools_lane_waiting", ("lane", "tool:logged"));
            assert_eq!(
                sample(&s, "flux_tools_lane_limit", ("lane", "tool:logged")),
                Some(4.0)
            );
            break (gauge, waiting);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((gauge, waiting), (Some(4.0), Some(4.0)));
    let results = finish(c);
    assert!(
        results
            .as_array()
            .into_iter()
            .flatten()
            .all(|r| r["isError"] == false),
        "{results}"
    );
    let s = parse(&get(&gw, "/metrics", None).1, &py);
    let ok = s.iter().find(|(n, l, _)| {
        n == "flux_tools_calls_total" && l["tool"] == "logged" && l["status"] == "ok"
    });
    assert_eq!(ok.map(|x| x.2), Some(8.0), "{s:?}");
    assert_eq!(
        sample(&s, "flux_tools_tenant_spent_total", ("tenant", "default")),
        Some(4.0)
    );
    let count = sample(
        &s,
        "flux_tools_call_duration_seconds_count",
        ("tool", "logged"),
    );
    assert_eq!(count, Some(8.0));
    assert_eq!(
        sample(&s, "flux_tools_lane_in_flight", ("lane", "tool:logged")),
        Some(0.0)
    );
}

#[test]
fn metrics_take_the_token_and_the_probes_do_not() {
    let p = Project::new("[serve.tokens]\nops = \"${env:OPS_TOKEN}\"\n\n[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n");
    let gw = HttpGateway::start(&p, &[], &[("OPS_TOKEN", "s3cret")]);
    assert_eq!(get(&gw, "/healthz", None).0, 200);
    assert_eq!(get(&gw, "/readyz", None).0, 200);
    assert_eq!(get(&gw, "/metrics", None).0, 401);
    let (code, body) = get(&gw, "/metrics", Some("s3cret"));
    assert_eq!(code, 200);
    assert!(body.contains("# EOF") && !body.contains("s3cret"), "{body}");
    let _ = repo();
}

#[test]
fn not_ready_while_redis_is_away_and_ready_again_after() {
    let Some(mut redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("[concurrency]\nper_tool = { t = 2 }\n\n[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n");
    let gw = HttpGateway::start(&p, &["--lane-store", redis.url.as_str()], &[]);
    assert_eq!(get(&gw, "/readyz", None).0, 200);
    redis.stop();
    let (code, body) = get(&gw, "/readyz", None);
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("not ready: redis://"), "{body}");
    assert_eq!(get(&gw, "/healthz", None).0, 200, "alive all the same");
    redis.start_again();
    let until = Instant::now() + Duration::from_secs(15);
    while get(&gw, "/readyz", None).0 != 200 {
        assert!(
            Instant::now() < until,
            "not ready again after Redis came back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The manifest of the reload test: the logging tool in a lane of `limit`, and `extra`.
fn reloadable(p: &Project, script: &std::path::Path, limit: u32, extra: bool) {
    logged_manifest(p, script, &format!("per_tool = {{ logged = {limit} }}"), "");
    if extra {
        let text = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
        p.write(
            "tools.toml",
            &format!(
                "{text}\n[tools.extra]\nkind = \"scripted\"\neffect = \"read\"\noutput = \"new\"\n"
            ),
        );
    }
}

fn hup(gw: &HttpGateway) {
    let pid = gw.child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
}

fn wait_said(gw: &HttpGateway, what: &str, n: usize) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let said = gw.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        if said.matches(what).count() >= n {
            return said;
        }
        assert!(
            Instant::now() < until,
            "the gateway never said `{what}`: {said}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The spans of the calls whose tag starts with `prefix`: (start, end) in ns.
fn spans_of(log: &std::path::Path, prefix: &str) -> Vec<(u128, u128)> {
    let s = crate::serve::spans(log);
    let starts = s
        .iter()
        .filter(|(w, t, _)| w == "start" && t.starts_with(prefix));
    starts
        .map(|(_, tag, at)| (*at, crate::serve::at(&s, "end", tag)))
        .collect()
}

#[test]
fn a_reload_takes_effect_for_new_calls_drops_none_and_a_broken_manifest_changes_nothing() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    let text = std::fs::read_to_string(&script).unwrap_or_default();
    let script = p.write("slow.sh", &text.replace("sleep 0.3", "sleep 1"));
    reloadable(&p, &script, 4, false);
    let gw = HttpGateway::start(&p, &[], &[]);
    let listed = p.path().join("listed");
    let watcher = client(
        &py,
        &http(&gw.url),
        &["await_change", "40", listed.to_str().unwrap_or("")],
    );
    let old = client(
        &py,
        &http(&gw.url),
        &["burst", "logged", "20", r#"{"tag": "old{i}"}"#],
    );
    let until = Instant::now() + Duration::from_secs(20);
    while running(&log) < 4 || !listed.exists() {
        assert!(Instant::now() < until, "the old calls never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A lane of one and a new tool, while 20 calls are in flight or queued.
    reloadable(&p, &script, 1, true);
    hup(&gw);
    wait_said(&gw, "reloaded", 1);
    // Two new sessions: the new lane of one is shared by both.
    let news = [
        client(
            &py,
            &http(&gw.url),
            &["burst", "logged", "2", r#"{"tag": "newa{i}"}"#],
        ),
        client(
            &py,
            &http(&gw.url),
            &["burst", "logged", "2", r#"{"tag": "newb{i}"}"#],
        ),
    ];
    for c in news {
        let rs = finish(c);
        assert!(
            rs.as_array()
                .into_iter()
                .flatten()
                .all(|r| r["isError"] == false),
            "{rs}"
        );
    }
    let olds = finish(old);
    let olds = olds.as_array().cloned().unwrap_or_default();
    assert_eq!(olds.len(), 20);
    assert!(
        olds.iter().all(|r| r["isError"] == false),
        "no call is dropped: {olds:?}"
    );
    // The new calls ran one at a time (the new limit); the old ones four at a time.
    let mut new_spans = spans_of(&log, "new");
    new_spans.sort();
    assert_eq!(new_spans.len(), 4);
    assert!(
        new_spans.windows(2).all(|w| w[0].1 <= w[1].0),
        "the new limit of 1 holds: {new_spans:?}"
    );
    let seen = finish(watcher);
    assert_eq!(seen["changed"], true, "{seen}");
    let names = |k: &str| seen[k].as_array().cloned().unwrap_or_default();
    assert!(
        !names("first").contains(&Value::from("extra"))
            && names("second").contains(&Value::from("extra")),
        "{seen}"
    );
    // A broken manifest is refused with its diagnostics; the one in force stays.
    p.write("tools.toml", "[tools.broken\nkind = ");
    hup(&gw);
    let said = wait_said(&gw, "was not reloaded", 1);
    assert!(
        said.contains("tools.toml:1:"),
        "its diagnostics, located: {said}"
    );
    let r = finish(client(&py, &http(&gw.url), &["call", "extra", "{}"]));
    assert_eq!(r["isError"], false, "{r}");
}

#[test]
fn the_status_page_in_a_real_browser_shows_lanes_live_and_approves_once_with_the_admin_token() {
    let Some(py) = python() else { return };
    if !std::path::Path::new("/usr/bin/chromedriver").exists() {
        crate::common::skip(
            "chromium-driver is not installed",
            "apt-get install chromium chromium-driver",
        );
        return;
    }
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let script = logging_tool(&p, &log);
    let text = std::fs::read_to_string(&script).unwrap_or_default();
    let script = p.write("slow.sh", &text.replace("sleep 0.3", "sleep 1"));
    logged_manifest(&p, &script, "per_tool = { logged = 2 }", "");
    let up_log = p.path().join("upstream.log");
    let upstream = crate::serve::upstream(&up_log, &p.path().join("starts"), "")
        .replace("approval = \"none\"\n", "");
    let m = std::fs::read_to_string(p.path().join("tools.toml")).unwrap_or_default();
    p.write(
        "tools.toml",
        &format!("[serve]\nadmin_token = \"${{env:ADMIN}}\"\n\n{m}\n{upstream}"),
    );
    let gw = HttpGateway::start(&p, &[], &[("ADMIN", "adm1n")]);
    // 24 calls of 1 s, 2 at a time: 12 s of lane activity, so a browser that is slow to
    // start on a loaded machine still sees the count change.
    let burst = client(
        &py,
        &http(&gw.url),
        &["burst", "logged", "24", r#"{"tag": "c{i}"}"#],
    );
    let write = client(
        &py,
        &http(&gw.url),
        &["call", "write", r#"{"ms": 100, "tag": "w1"}"#],
    );
    let shot = repo().join("target/status-page.png");
    let page = format!("{}/", gw.url.trim_end_matches("/mcp"));
    let out = std::process::Command::new(&py)
        .arg(repo().join("tests/fixtures/status_page.py"))
        .args([
            page.as_str(),
            "adm1n",
            shot.to_str().unwrap_or(""),
            "tool:logged",
        ])
        .output()
        .expect("the browser driver");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    assert!(
        seen["in_flight_seen"]
            .as_array()
            .is_some_and(|v| v.len() >= 2),
        "the lanes updated live: {seen}"
    );
    assert_eq!(seen["without_token"], 403, "{seen}");
    assert!(
        seen["answer"]
            .as_str()
            .unwrap_or("")
            .starts_with("approved: call"),
        "{seen}"
    );
    let r = finish(write);
    assert_eq!(r["isError"], false, "{r}");
    let writes = log_lines(&up_log)
        .iter()
        .filter(|l| l.starts_with("start w1"))
        .count();
    assert_eq!(writes, 1, "the approved call ran exactly once");
    finish(burst);
    assert!(
        shot.exists(),
        "the screenshot is kept at {}",
        shot.display()
    );
}

#[test]
fn three_replicas_on_one_redis_hold_one_lane_and_one_killed_loses_nothing_the_others_need() {
    let Some(py) = python() else { return };
    let Some(redis) = crate::common::Redis::start() else {
        return;
    };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    // A write that logs its idempotency key, under a lock.
    let script = p.write(
        "keyed.sh",
        &format!(
            "#!/bin/sh\nexec 9>>'{log}.lock'\nflock 9; echo \"start $1 $FLUX_IDEMPOTENCY_KEY $(date +%s%N)\" >> '{log}'; flock -u 9\nsleep 0.3\nflock 9; echo \"end $1 x $(date +%s%N)\" >> '{log}'; flock -u 9\necho done\n",
            log = log.display()
        ),
    );
    p.write(
        "tools.toml",
        &format!("[concurrency]\nmax_concurrent_tools = 64\nper_tool = {{ keyed = 4 }}\n\n[tools.keyed]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"{}\", \"{{tag}}\"]\neffect = \"write\"\nidempotent = true\nconcurrent_writes = true\n[tools.keyed.args]\ntag = {{ type = \"string\", required = true }}\n", script.display()),
    );
    let store = ["--lane-store", redis.url.as_str()];
    let lease = [("FLUX_TOOLS_LEASE_MS", "1500")];
    let mut gws: Vec<HttpGateway> = (0..3)
        .map(|_| HttpGateway::start(&p, &store, &lease))
        .collect();
    let urls: Vec<String> = gws.iter().map(|g| g.url.clone()).collect();
    let spec = serde_json::json!({"urls": urls, "tool": "keyed", "args": {"tag": "c{i}"}, "n": 300, "per_replica": 4});
    let c = client(&py, &http("-"), &["spread", &spec.to_string()]);
    // Kill one replica a third of the way through.
    let until = Instant::now() + Duration::from_secs(60);
    while log_lines(&log)
        .iter()
        .filter(|l| l.starts_with("start "))
        .count()
        < 100
    {
        assert!(Instant::now() < until, "the calls never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = gws[1].child.kill();
    let _ = gws[1].child.wait();
    // Its calls in flight die with it (they log no end): they ended now.
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let out = finish(c);
    let calls = out.as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 300);
    let answered: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            c["answers"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.get("isError").is_some()))
        })
        .collect();
    for c in &calls {
        let n = c["answers"].as_array().map_or(0, Vec::len);
        assert!(n <= 1, "a call has one answer at most: {c}");
    }
    let ok = answered
        .iter()
        .filter(|c| c["answers"][0]["isError"] == false)
        .count();
    let lost = calls.len() - answered.len();
    eprintln!("{ok} calls answered ok, {lost} lost with the killed replica");
    assert!(
        lost <= 4 + 4,
        "only the killed replica's calls in flight are lost: {lost}"
    );
    assert!(
        ok >= 300 - lost,
        "the others answered every other call: {ok}"
    );
    let lines = log_lines(&log);
    assert_eq!(
        peak_with_killed(&lines, killed_at),
        4,
        "one lane of four across three replicas"
    );
    let mut keys: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("start "))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all, "no idempotency key ran twice");
    drop(gws);
}

/// The most calls in flight at once, by the log's times (`start TAG KEY NS`, `end TAG x NS`);
/// a call with no end was killed (with its replica) at `killed_at`.
fn peak_with_killed(lines: &[String], killed_at: u128) -> usize {
    let mut events: Vec<(u128, i32)> = Vec::new();
    let mut open: std::collections::HashMap<String, usize> = Default::default();
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (Some(kind), Some(tag), Some(ns)) = (w.first(), w.get(1), w.get(3)) else {
            continue;
        };
        let Ok(ns) = ns.parse::<u128>() else { continue };
        match *kind {
            "start" => {
                *open.entry(tag.to_string()).or_default() += 1;
                events.push((ns, 1));
            }
            "end" => {
                if let Some(n) = open.get_mut(*tag) {
                    *n -= 1;
                }
                events.push((ns, -1));
            }
            _ => {}
        }
    }
    for n in open.values() {
        events.extend(std::iter::repeat_n((killed_at, -1), *n));
    }
    // An end before a start at the same instant.
    events.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}
