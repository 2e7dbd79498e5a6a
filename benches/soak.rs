//! A soak of the gateway as it runs in production: `cargo build --release --bins --examples &&
//! target/release/examples/soak` (`MINUTES`, default 30; `CLIENTS`, default 50). Three
//! `flux-tools mcp serve --http` replicas (the release binary beside the examples) on one
//! `redis-server` this starts on a free port; the clients — rmcp's Streamable HTTP client, each
//! its own session, spread round-robin over the replicas — call a mix of tools without pause:
//! fast reads, writes, slow calls in a lane of 4, and failing calls. Every minute it prints
//! calls/s, the p50 and p99 latency a call adds over its tool's own time, each limited lane's
//! peak in flight summed over the replicas (from their `/metrics`, sampled every 100 ms)
//! against its limit, and each replica's resident memory and open descriptors.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;

const MANIFEST: &str = r#"[concurrency]
max_concurrent_tools = 64
per_tool = { slow = 4, write = 8 }

[tools.read]
kind = "scripted"
effect = "read"
output = { ok = true }

[tools.write]
kind = "scripted"
effect = "write"
idempotent = true
concurrent_writes = true
latency = "5ms"
output = { written = true }

[tools.slow]
kind = "scripted"
effect = "read"
latency = "200ms"
output = "slow"

[tools.fail]
kind = "scripted"
effect = "read"
fail = "boom"
"#;

/// Each tool's own latency, and how often the clients call it (of 10).
const MIX: [(&str, Duration, u32); 4] = [
    ("read", Duration::ZERO, 6),
    ("write", Duration::from_millis(5), 2),
    ("slow", Duration::from_millis(200), 1),
    ("fail", Duration::ZERO, 1),
];

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A replica: its process and URL.
struct Replica {
    child: Child,
    url: String,
}

// The child is handed back in the `Replica`, and `main` kills and waits for it.
#[allow(clippy::zombie_processes)]
fn start_replica(bin: &std::path::Path, manifest: &std::path::Path, redis: &str) -> Replica {
    let mut child = Command::new(bin)
        .arg("--manifest")
        .arg(manifest)
        .args([
            "mcp",
            "serve",
            "--http",
            "127.0.0.1:0",
            "--lane-store",
            redis,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a replica");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a replica exited before listening");
        }
        if let Some(url) = line
            .trim()
            .strip_prefix("flux-tools mcp serve: listening on ")
        {
            let url = url.to_string();
            std::thread::spawn(move || {
                let mut sink = String::new();
                while lines.read_line(&mut sink).unwrap_or(0) > 0 {
                    sink.clear();
                }
            });
            return Replica { child, url };
        }
    }
}

/// One minute's figures.
#[derive(Default)]
struct Window {
    added: Vec<Duration>,
    calls: u64,
    peaks: BTreeMap<String, (u64, u64)>,
}

async fn client(url: String, deadline: Instant, window: Arc<Mutex<Window>>, seed: usize) {
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let c = ().serve(transport).await.expect("initialize");
    let order: Vec<&(&str, Duration, u32)> = MIX
        .iter()
        .flat_map(|m| std::iter::repeat_n(m, m.2 as usize))
        .collect();
    let mut j = seed;
    while Instant::now() < deadline {
        let (tool, own, _) = order[j % order.len()];
        j += 1;
        let mut p = CallToolRequestParams::new(tool.to_string());
        p.arguments = serde_json::json!({"n": j}).as_object().cloned();
        let t = Instant::now();
        let r = c.peer().call_tool(p).await;
        let took = t.elapsed();
        let ok = r.is_ok_and(|r| (r.is_error == Some(true)) == (*tool == "fail"));
        assert!(ok, "call of {tool} was not answered as its tool answers");
        if let Ok(mut w) = window.lock() {
            w.added.push(took.saturating_sub(*own));
            w.calls += 1;
        }
    }
    let _ = c.cancel().await;
}

/// Each limited lane's (in flight, limit) on one replica's `/metrics`.
async fn lanes(http: &reqwest::Client, url: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(r) = http.get(url.replace("/mcp", "/metrics")).send().await else {
        return out;
    };
    let text = r.text().await.unwrap_or_default();
    for line in text.lines() {
        let (metric, value) = line.rsplit_once(' ').unwrap_or(("", ""));
        let lane = metric
            .split("lane=\"")
            .nth(1)
            .and_then(|r| r.split('"').next());
        let (Some(lane), Ok(v)) = (lane, value.parse::<f64>()) else {
            continue;
        };
        let e = out.entry(lane.to_string()).or_insert((0, 0));
        if metric.starts_with("flux_tools_lane_in_flight") {
            e.0 = v as u64;
        } else if metric.starts_with("flux_tools_lane_limit") {
            e.1 = v as u64;
        }
    }
    out
}

/// Resident memory (MiB) and open descriptors of `pid`.
fn footprint(pid: u32) -> (f64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (kb / 1024.0, fds)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn report(minute: u64, w: &mut Window, replicas: &[Replica]) {
    w.added.sort();
    let feet: Vec<String> = replicas
        .iter()
        .map(|r| {
            let (mib, fds) = footprint(r.child.id());
            format!("{mib:.1} MiB/{fds} fd")
        })
        .collect();
    let peaks: Vec<String> = w
        .peaks
        .iter()
        .filter(|(_, (_, limit))| *limit > 0)
        .map(|(lane, (peak, limit))| format!("{lane} {peak}/{limit}"))
        .collect();
    println!(
        "| {minute} | {:.0} | {:.2} | {:.2} | {} | {} |",
        w.calls as f64 / 60.0,
        percentile(&w.added, 0.5),
        percentile(&w.added, 0.99),
        peaks.join(", "),
        feet.join("; ")
    );
}

fn main() {
    let minutes = env_num("MINUTES", 30);
    let clients = env_num("CLIENTS", 50) as usize;
    let exe = std::env::current_exe().expect("this program");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/release")
        .join("flux-tools");
    let dir = std::env::temp_dir().join(format!("flux-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let manifest = dir.join("tools.toml");
    std::fs::write(&manifest, MANIFEST).expect("the manifest");
    let port = free_port();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    std::thread::sleep(Duration::from_millis(500));
    let store = format!("redis://127.0.0.1:{port}");
    let mut replicas: Vec<Replica> = (0..3)
        .map(|_| start_replica(&bin, &manifest, &store))
        .collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let deadline = Instant::now() + Duration::from_secs(minutes * 60);
    let window = Arc::new(Mutex::new(Window::default()));
    println!("{clients} clients over 3 replicas on one Redis, {minutes} min\n");
    println!("| minute | calls/s | added p50 ms | added p99 ms | peak/limit per lane | RSS/fds per replica |");
    println!("| --- | --- | --- | --- | --- | --- |");
    rt.block_on(async {
        let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                tokio::spawn(client(
                    urls[i % urls.len()].clone(),
                    deadline,
                    window.clone(),
                    i,
                ))
            })
            .collect();
        let http = reqwest::Client::new();
        let mut minute_ends = Instant::now() + Duration::from_secs(60);
        let mut minute = 1;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut sum: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            for u in &urls {
                for (lane, (held, limit)) in lanes(&http, u).await {
                    let e = sum.entry(lane).or_insert((0, 0));
                    e.0 += held;
                    e.1 = limit;
                }
            }
            if let Ok(mut w) = window.lock() {
                for (lane, (held, limit)) in sum {
                    let e = w.peaks.entry(lane).or_insert((0, limit));
                    e.0 = e.0.max(held);
                }
                if Instant::now() >= minute_ends {
                    report(minute, &mut w, &replicas);
                    *w = Window::default();
                    minute += 1;
                    minute_ends += Duration::from_secs(60);
                }
            }
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    for r in &mut replicas {
        let _ = r.child.kill();
        let _ = r.child.wait();
    }
    let _ = redis.kill();
    let _ = redis.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
