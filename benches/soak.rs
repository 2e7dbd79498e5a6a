//! A soak of the gateway as it runs in production: `cargo build --release --bins --examples &&
//! target/release/examples/soak` (`MINUTES`, default 30; `CLIENTS`, default 50). Three
//! `flux-tools mcp serve --http` replicas (the release binary beside the examples) on one
//! `redis-server` this starts on a free port; the clients — rmcp's Streamable HTTP client, each
//! its own session, spread round-robin over the replicas — call a mix of tools without pause:
//! zero-latency reads, writes in a lane of 8, slow calls in a lane of 4, and failing calls.
//! Every minute it prints calls/s, the p50 and p99 latency the gateway adds to the calls that
//! wait for no lane (reads and failures: their tool takes no time), the slow lane's p50/p99
//! answer time, each limited lane's peak in flight as its tool logged it (every call appends
//! `+` when it starts and `-` when it ends to its lane's log, the whole run's count carried
//! from minute to minute) against its limit, and each replica's resident memory and open
//! descriptors.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;

/// The manifest, with `LOG` the folder of the lanes' logs.
fn manifest(log: &std::path::Path) -> String {
    let logged = |lane: &str, secs: &str| {
        let file = log.join(lane);
        format!(
            "kind = \"command\"\nstdin = \"none\"\ncommand = [\"/bin/sh\", \"-c\", \"echo + >> \\\"$0\\\"; sleep {secs}; echo - >> \\\"$0\\\"\", \"{}\"]\n",
            file.display()
        )
    };
    format!(
        r#"[concurrency]
max_concurrent_tools = 64
per_tool = {{ slow = 4, write = 8 }}

[tools.read]
kind = "scripted"
effect = "read"
output = {{ ok = true }}

[tools.write]
effect = "write"
idempotent = true
concurrent_writes = true
{write}
[tools.slow]
effect = "read"
{slow}
[tools.fail]
kind = "scripted"
effect = "read"
fail = "boom"
"#,
        write = logged("write", "0"),
        slow = logged("slow", "0.2"),
    )
}

/// The tools the clients call, and how often (of 10).
const MIX: [(&str, u32); 4] = [("read", 6), ("write", 2), ("slow", 1), ("fail", 1)];

/// The limited lanes (their tool's log) and their limits.
const LIMITED: [(&str, u64); 2] = [("slow", 4), ("write", 8)];

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
    /// What the gateway added to calls that wait for no lane (their tool takes no time).
    added: Vec<Duration>,
    /// The slow lane's answer times (200 ms of tool, the rest is the lane's queue).
    slow: Vec<Duration>,
    calls: u64,
}

async fn client(url: String, deadline: Instant, window: Arc<Mutex<Window>>, seed: usize) {
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let c = ().serve(transport).await.expect("initialize");
    let order: Vec<&str> = MIX
        .iter()
        .flat_map(|(tool, n)| std::iter::repeat_n(*tool, *n as usize))
        .collect();
    let mut j = seed;
    while Instant::now() < deadline {
        let tool = order[j % order.len()];
        j += 1;
        let mut p = CallToolRequestParams::new(tool.to_string());
        if tool != "slow" && tool != "write" {
            p.arguments = serde_json::json!({"n": j}).as_object().cloned();
        }
        let t = Instant::now();
        let r = c.peer().call_tool(p).await;
        let took = t.elapsed();
        let ok = r.is_ok_and(|r| (r.is_error == Some(true)) == (tool == "fail"));
        assert!(ok, "call of {tool} was not answered as its tool answers");
        if let Ok(mut w) = window.lock() {
            match tool {
                "read" | "fail" => w.added.push(took),
                "slow" => w.slow.push(took),
                _ => {}
            }
            w.calls += 1;
        }
    }
    let _ = c.cancel().await;
}

/// A limited lane's log as its tool writes it: `+` when a call starts, `-` when it ends.
struct LaneLog {
    path: std::path::PathBuf,
    read: usize,
    running: i64,
}

impl LaneLog {
    /// The most calls in flight at once in what was logged since the last look.
    fn peak(&mut self) -> i64 {
        let text = std::fs::read(&self.path).unwrap_or_default();
        let mut peak = self.running;
        for b in text.get(self.read..).unwrap_or_default() {
            match b {
                b'+' => self.running += 1,
                b'-' => self.running -= 1,
                _ => {}
            }
            peak = peak.max(self.running);
        }
        self.read = text.len();
        peak
    }
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

fn report(minute: u64, w: &mut Window, logs: &mut [LaneLog], replicas: &[Replica]) {
    w.added.sort();
    w.slow.sort();
    let feet: Vec<String> = replicas
        .iter()
        .map(|r| {
            let (mib, fds) = footprint(r.child.id());
            format!("{mib:.1} MiB/{fds} fd")
        })
        .collect();
    let peaks: Vec<String> = logs
        .iter_mut()
        .zip(LIMITED)
        .map(|(log, (lane, limit))| format!("{lane} {}/{limit}", log.peak()))
        .collect();
    println!(
        "| {minute} | {:.0} | {:.2} | {:.2} | {:.0} / {:.0} | {} | {} |",
        w.calls as f64 / 60.0,
        percentile(&w.added, 0.5),
        percentile(&w.added, 0.99),
        percentile(&w.slow, 0.5),
        percentile(&w.slow, 0.99),
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
    std::fs::write(&manifest, self::manifest(&dir)).expect("the manifest");
    let mut logs: Vec<LaneLog> = LIMITED
        .iter()
        .map(|(lane, _)| LaneLog {
            path: dir.join(lane),
            read: 0,
            running: 0,
        })
        .collect();
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
    println!("| minute | calls/s | added p50 ms | added p99 ms | slow lane p50 / p99 ms | peak/limit per lane (tool log) | RSS/fds per replica |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
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
        for minute in 1..=minutes {
            tokio::time::sleep(Duration::from_secs(60)).await;
            if let Ok(mut w) = window.lock() {
                report(minute, &mut w, &mut logs, &replicas);
                *w = Window::default();
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
