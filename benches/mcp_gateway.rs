//! What a gateway adds to an MCP tool call, side by side in one run: `cargo build --release
//! --bins --examples && target/release/examples/mcp_gateway [CALLS]` (the gateway is the
//! release `flux-tools` beside the examples: build it too).
//!
//! The upstream is the project's own rmcp test server (`mcp_test_server`, tool `sleep` with
//! `ms = 0`: the call's own time is nothing). A row per way of reaching it: directly over
//! stdio and over its own Streamable HTTP (rmcp's server, `mcp_test_server --http`: a
//! client's floor over HTTP), through `flux-tools mcp serve` over stdio and over Streamable
//! HTTP (and the served manifest's own inline `scripted` tool, which has no upstream at all;
//! and HTTP with `--workers 1`), and through the peer gateways whose launchers are given
//! (`SUPERGATEWAY`: supergateway's bin; `MCP_PROXY_PY`: PyPI mcp-proxy's; `MCP_PROXY_RS`: the
//! `mcp-proxy` crate's) — each serving the same upstream on Streamable HTTP; `BASELINE=PATH`
//! adds another flux-tools binary's two rows (an older commit's, to compare). The client is
//! rmcp's, in this process. Columns: p50 and p99 of a call's latency with 1 client calling in
//! sequence and with 8 at once (each its own session), the p50 added over the direct row,
//! calls per second with 1, 8 and 64 clients, and the CPU time a call took at 64 clients
//! (µs): the whole machine's (`/proc/stat`), the clients' (this process), and over HTTP the
//! serving process's threads' and its children's (the upstream, for a gateway; `schedstat`)
//! — each the median of `ROUNDS` (default 3) rounds over every row in turn. After the table,
//! each HTTP row's added p50 over `direct (HTTP)`. Then whole servers: `tools/list` of five
//! servers of 113 tools each directly (five lists) and through a gateway serving them whole
//! (one list), and `resources/read` directly and through it (`ONLY=whole`: just these).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;

type Client = RunningService<RoleClient, ()>;

/// How a client reaches the upstream.
#[derive(Clone)]
enum Target {
    Stdio(Vec<String>),
    /// The URL, the bearer token every request carries, and the serving process's id.
    Http(String, Option<String>, Option<u32>),
}

async fn connect(t: &Target) -> Client {
    match t {
        Target::Stdio(argv) => {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]).stderr(Stdio::null());
            let transport = TokioChildProcess::new(cmd).expect("spawn");
            ().serve(transport).await.expect("initialize over stdio")
        }
        Target::Http(url, token, _) => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(t) = token {
                config = config.auth_header(t.as_str());
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            ().serve(transport).await.expect("initialize over HTTP")
        }
    }
}

async fn call(c: &Client, tool: &str) {
    let args = serde_json::json!({"ms": 0}).as_object().cloned();
    let mut p = CallToolRequestParams::new(tool.to_string());
    p.arguments = args;
    let r = c.peer().call_tool(p).await.expect("call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
}

/// What `clients` sessions making calls at once gave: every latency, the wall time, and the
/// CPU time used meanwhile (µs): the machine's and this process's ([`cpu_now`]), and the
/// serving process's and its children's ([`served`]; NaN over stdio).
type Measured = (Vec<Duration>, Duration, [f64; 4]);

/// The CPU time (µs) of process `pid`'s threads, and of its children's, from `schedstat`.
fn served(t: &Target) -> (f64, f64) {
    let Target::Http(_, _, Some(pid)) = t else {
        return (f64::NAN, f64::NAN);
    };
    let threads = |pid: u32| -> f64 {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return 0.0;
        };
        dir.flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .sum::<f64>()
            / 1000.0
    };
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    (threads(*pid), children.into_iter().map(threads).sum())
}

/// `clients` sessions, each making `calls` calls in sequence, all at once (sessions are
/// opened and warmed first, outside the figures).
async fn measure((t, tool): (&Target, &str), clients: usize, calls: usize) -> Measured {
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let c = connect(t).await;
        call(&c, tool).await; // warm up
        sessions.push(Arc::new(c));
    }
    let (start, cpu, own) = (Instant::now(), cpu_now(), served(t));
    let tasks: Vec<_> = sessions
        .iter()
        .map(|c| {
            let (c, tool) = (c.clone(), tool.to_string());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let t = Instant::now();
                    call(&c, &tool).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    let (wall, now, own_now) = (start.elapsed(), cpu_now(), served(t));
    let cpu = [
        now.0 - cpu.0,
        now.1 - cpu.1,
        own_now.0 - own.0,
        own_now.1 - own.1,
    ];
    for c in sessions {
        if let Ok(c) = Arc::try_unwrap(c) {
            let _ = c.cancel().await;
        }
    }
    (all, wall, cpu)
}

fn pct(xs: &mut [Duration], p: usize) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort();
    xs[(xs.len() * p / 100).min(xs.len() - 1)].as_secs_f64() * 1000.0
}

/// A gateway process serving the upstream on HTTP; killed at the end.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn launch(argv: &[String], url: String) -> (Gateway, Target) {
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {argv:?}: {e}"));
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < until, "{argv:?} never listened on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id();
    (Gateway(child), Target::Http(url, None, Some(pid)))
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// `flux-tools --manifest MANIFEST mcp serve --lane-store memory EXTRA…`.
fn serve_argv(flux: &str, manifest: &str, extra: &[&str]) -> Vec<String> {
    let mut v = s(&[
        flux,
        "--manifest",
        manifest,
        "mcp",
        "serve",
        "--lane-store",
        "memory",
    ]);
    v.extend(s(extra));
    v
}

/// A row: its name, how a client reaches the upstream, the gateway process (killed at the end).
type Row = (String, Target, Option<Gateway>);

/// The rows: directly, through flux-tools over stdio and HTTP, and the peers that are given.
fn rows(server: &str, flux: &str, manifest: &str, tmp: &std::path::Path) -> Vec<Row> {
    let serve_with = |flux: &str, extra: &[&str]| serve_argv(flux, manifest, extra);
    let serve = |extra: &[&str]| serve_with(flux, extra);
    let mut rows: Vec<Row> = vec![
        (
            "direct (stdio)".into(),
            Target::Stdio(vec![server.to_string()]),
            None,
        ),
        (
            "flux-tools serve, stdio".into(),
            Target::Stdio(serve(&[])),
            None,
        ),
        (
            "  its inline tool, stdio".into(),
            Target::Stdio(serve(&[])),
            None,
        ),
    ];
    // The upstream serving Streamable HTTP itself (rmcp's server): a client's floor over HTTP.
    let port = free_port();
    let (g, direct_http) = launch(
        &s(&[server, "--http", &format!("127.0.0.1:{port}")]),
        format!("http://127.0.0.1:{port}/"),
    );
    rows.insert(1, ("direct (HTTP)".into(), direct_http.clone(), Some(g)));
    rows.push(http_upstream_row(flux, manifest, tmp, &direct_http));
    let port = free_port();
    let (g, t) = launch(
        &serve(&["--http", &format!("127.0.0.1:{port}")]),
        format!("http://127.0.0.1:{port}/mcp"),
    );
    rows.push(("flux-tools serve, HTTP".into(), t.clone(), Some(g)));
    rows.push(("  its inline tool, HTTP".into(), t, None));
    let port = free_port();
    let (g, t) = launch(
        &serve(&["--http", &format!("127.0.0.1:{port}"), "--workers", "1"]),
        format!("http://127.0.0.1:{port}/mcp"),
    );
    rows.push(("  HTTP, --workers 1".into(), t, Some(g)));
    rows.push(jwt_row(flux, manifest, tmp));
    rows.extend(pool_rows(flux, manifest, tmp));
    // `BASELINE=PATH`: another flux-tools binary (an older commit's), side by side.
    if let Ok(old) = std::env::var("BASELINE") {
        let stdio = Target::Stdio(serve_with(&old, &[]));
        rows.push(("baseline serve, stdio".into(), stdio, None));
        let port = free_port();
        let (g, t) = launch(
            &serve_with(&old, &["--http", &format!("127.0.0.1:{port}")]),
            format!("http://127.0.0.1:{port}/mcp"),
        );
        rows.push(("baseline serve, HTTP".into(), t, Some(g)));
    }
    rows.extend(peer_rows(server, tmp));
    rows
}

/// The peer gateways whose launchers are given, each serving the upstream on HTTP.
fn peer_rows(server: &str, tmp: &std::path::Path) -> Vec<Row> {
    let mut rows = Vec::new();
    if let Ok(sg) = std::env::var("SUPERGATEWAY") {
        let port = free_port().to_string();
        let argv = [
            &sg,
            "--stdio",
            server,
            "--outputTransport",
            "streamableHttp",
            "--stateful",
            "--port",
            &port,
            "--logLevel",
            "none",
        ];
        let (g, t) = launch(&s(&argv), format!("http://127.0.0.1:{port}/mcp"));
        rows.push(("supergateway (npm)".into(), t, Some(g)));
    }
    if let Ok(py) = std::env::var("MCP_PROXY_PY") {
        let port = free_port().to_string();
        let (g, t) = launch(
            &s(&[&py, "--port", &port, server]),
            format!("http://127.0.0.1:{port}/mcp"),
        );
        rows.push(("mcp-proxy (PyPI)".into(), t, Some(g)));
    }
    if let Ok(rs) = std::env::var("MCP_PROXY_RS") {
        let port = free_port();
        let config = tmp.join("proxy.toml");
        std::fs::write(
            &config,
            format!("[proxy]\nname = \"bench\"\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = {port}\n\n[[backends]]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"{server}\"\n"),
        )
        .expect("proxy config");
        let (g, t) = launch(
            &s(&[&rs, "--config", &config.display().to_string()]),
            format!("http://127.0.0.1:{port}/"),
        );
        rows.push(("mcp-proxy (crate)".into(), t, Some(g)));
    }
    rows
}

/// The gateway over HTTP in front of the upstream's own Streamable HTTP (`url =`): an HTTP
/// hop on each side, against `direct (HTTP)`'s one.
fn http_upstream_row(flux: &str, manifest: &str, tmp: &std::path::Path, up: &Target) -> Row {
    let Target::Http(url, ..) = up else {
        unreachable!("the direct HTTP row is HTTP")
    };
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    let start = text.find("command = [").expect("the server's command");
    let end = start + text[start..].find('\n').expect("its line");
    let text = format!("{}url = \"{url}\"{}", &text[..start], &text[end..]);
    let path = tmp.join("over-http.toml");
    std::fs::write(&path, text).expect("the manifest over HTTP");
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let argv = serve_argv(flux, &path.display().to_string(), &["--http", &http]);
    let (g, t) = launch(&argv, format!("http://127.0.0.1:{port}/mcp"));
    ("  HTTP, upstream over HTTP".into(), t, Some(g))
}

/// The upstream declared stateless, `processes = 4`, through the gateway over stdio and HTTP:
/// its reads spread over a pool.
fn pool_rows(flux: &str, manifest: &str, tmp: &std::path::Path) -> Vec<Row> {
    let mut rows = Vec::new();
    let pool = tmp.join("pool.toml");
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    let text = text.replace("[tools.sleep]", "[tools.sleep]\neffect = \"read\"");
    let text = text.replace("\n\n[tools.sleep]", "\nprocesses = 4\n\n[tools.sleep]");
    std::fs::write(&pool, text).expect("the pool's manifest");
    let pool = pool.display().to_string();
    let serve_pool = |extra: &[&str]| serve_argv(flux, &pool, extra);
    let stdio = Target::Stdio(serve_pool(&[]));
    rows.push(("  stdio, 4 processes".into(), stdio, None));
    let port = free_port();
    let (g, t) = launch(
        &serve_pool(&["--http", &format!("127.0.0.1:{port}")]),
        format!("http://127.0.0.1:{port}/mcp"),
    );
    rows.push(("  HTTP, 4 processes".into(), t, Some(g)));
    rows
}

/// The gateway over HTTP with `[serve.auth]`: every request carries a JWT access token (ES256)
/// that the gateway checks against the keys of an issuer served here (its metadata and JWKS,
/// from a key made with `openssl` for this run).
fn jwt_row(flux: &str, manifest: &str, tmp: &std::path::Path) -> Row {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let pem = Command::new("sh")
        .args([
            "-c",
            "openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt",
        ])
        .output()
        .expect("openssl makes the issuer's key")
        .stdout;
    let key = EncodingKey::from_ec_pem(&pem).expect("an EC key");
    let mut jwk =
        jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::ES256).expect("its JWK");
    jwk.common.key_id = Some("bench".into());
    let issuer = issuer(serde_json::json!({ "keys": [jwk] }));
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let with_auth = tmp.join("tools-auth.toml");
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    std::fs::write(
        &with_auth,
        format!("[serve.auth]\nissuer = \"{issuer}\"\nresource = \"{resource}\"\nscopes = [\"mcp:tools\"]\n\n{text}"),
    )
    .expect("the manifest with [serve.auth]");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    let claims = serde_json::json!({"iss": issuer, "aud": resource, "sub": "bench", "exp": now + 3600, "scope": "mcp:tools"});
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("bench".into());
    let token = jsonwebtoken::encode(&header, &claims, &key).expect("signed");
    let http = format!("127.0.0.1:{port}");
    let argv = serve_argv(flux, &with_auth.display().to_string(), &["--http", &http]);
    let (g, _) = launch(&argv, resource.clone());
    let pid = Some(g.0.id());
    (
        "  HTTP, [serve.auth] JWT".into(),
        Target::Http(resource, Some(token), pid),
        Some(g),
    )
}

/// An issuer's metadata and `jwks` on a free port (a thread answering each GET): its URL.
fn issuer(jwks: serde_json::Value) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let meta = serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
    let keys = jwks.to_string();
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            let mut r = std::io::BufReader::new(&conn);
            let _ = r.read_line(&mut line);
            while r.read_line(&mut String::new()).is_ok_and(|n| n > 2) {}
            let body = if line.contains("/jwks") { &keys } else { &meta };
            let _ = (&conn).write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
            );
        }
    });
    url
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let bin = std::env::current_exe().expect("exe");
    let dir = bin.parent().expect("examples dir");
    let server = dir.join("mcp_test_server").display().to_string();
    let flux = dir.join("../flux-tools").display().to_string();
    let tmp = tempfile::tempdir().expect("temp dir");
    let manifest = tmp.path().join("tools.toml");
    std::fs::write(
        &manifest,
        format!("[concurrency]\nmax_concurrent_tools = 64\n\n[mcp_servers.t]\ncommand = [\"{server}\"]\n\n[tools.sleep]\nkind = \"mcp\"\nserver = \"t\"\n\n[tools.inline]\nkind = \"scripted\"\neffect = \"read\"\noutput = {{ slept = 0 }}\n[tools.inline.args]\nms = {{ type = \"integer\" }}\n"),
    )
    .expect("manifest");
    // `ONLY=whole`: just the whole servers' figures; `ONLY=many`: just the many sessions.
    if std::env::var("ONLY").is_ok_and(|o| o == "whole") {
        return whole_servers(&server, &flux, tmp.path(), calls).await;
    }
    if std::env::var("ONLY").is_ok_and(|o| o == "many") {
        return many_sessions(&flux, &manifest, tmp.path()).await;
    }
    let mut rows = rows(&server, &flux, &manifest.display().to_string(), tmp.path());
    // `ONLY=TEXT`: just the two direct rows and the rows whose name has TEXT (to profile one;
    // `direct (HTTP)`'s process is also the upstream of `upstream over HTTP`).
    if let Ok(only) = std::env::var("ONLY") {
        let mut i = 0;
        rows.retain(|(name, _, _)| {
            i += 1;
            i == 1 || name == "direct (HTTP)" || name.contains(&only)
        });
    }
    println!("{calls} calls a row; latencies in ms");
    println!(
        "{:26}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>9}{:>9}{:>9}{:>9}",
        "",
        "p50 1c",
        "p99 1c",
        "p50 8c",
        "p99 8c",
        "+p50 1c",
        "+p50 8c",
        "calls/s 1",
        "8",
        "64",
        "cpu µs",
        "client",
        "server",
        "its kids"
    );
    // Rounds over every row in turn; each figure is its row's median over the rounds, so a
    // moment of load on the machine moves one round of every row, not one row.
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut figures = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        for (i, (name, t, _g)) in rows.iter().enumerate() {
            figures[i].push(cells(name, t, calls).await);
        }
    }
    let base = median(&figures[0]);
    for ((name, _, _), f) in rows.iter().zip(&figures) {
        let m = median(f);
        println!(
            "{name:26}{:9.3}{:9.3}{:9.3}{:9.3}{:10.3}{:10.3}{:10.0}{:10.0}{:10.0}{:9.0}{:9.0}{:9.0}{:9.0}",
            m[0],
            m[1],
            m[2],
            m[3],
            m[0] - base[0],
            m[2] - base[2],
            m[4],
            m[5],
            m[6],
            m[7],
            m[8],
            m[9],
            m[10]
        );
    }
    same_transport(&rows, &figures);
    if std::env::var("ONLY").is_err() {
        whole_servers(&server, &flux, tmp.path(), calls).await;
        many_sessions(&flux, &manifest, tmp.path()).await;
    }
}

/// Each HTTP row's p50 over the upstream's own Streamable HTTP (`direct (HTTP)`): what a
/// gateway adds where its client would otherwise speak HTTP to the server itself.
fn same_transport(rows: &[Row], figures: &[Vec<[f64; 11]>]) {
    let Some(at) = rows.iter().position(|(n, _, _)| n == "direct (HTTP)") else {
        return;
    };
    let base = median(&figures[at]);
    println!(
        "\nover HTTP, against direct (HTTP){:>10}{:>10}",
        "+p50 1c", "+p50 8c"
    );
    for ((name, t, _), f) in rows.iter().zip(figures).skip(at + 1) {
        if matches!(t, Target::Http(..)) {
            let m = median(f);
            println!("{name:32}{:10.3}{:10.3}", m[0] - base[0], m[2] - base[2]);
        }
    }
}

/// Every session making `rounds` calls, one each `gap` ms from moments staggered over the
/// first gap, or back to back: the latencies of those answered, the errors, the wall time.
async fn each_calls(
    sessions: &[Arc<Client>],
    gap: Option<u64>,
    rounds: usize,
) -> (Vec<Duration>, usize, Duration) {
    let n = sessions.len() as u64;
    let tasks: Vec<_> = (sessions.iter().enumerate())
        .map(|(i, c)| {
            let c = c.clone();
            let start = tokio::time::Instant::now()
                + Duration::from_millis(gap.unwrap_or(0) * i as u64 / n);
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::with_capacity(rounds), 0);
                for r in 0..rounds as u32 {
                    if let Some(gap) = gap {
                        tokio::time::sleep_until(start + Duration::from_millis(gap) * r).await;
                    }
                    let t = Instant::now();
                    let mut p = CallToolRequestParams::new("sleep");
                    p.arguments = serde_json::json!({"ms": 0}).as_object().cloned();
                    match c.peer().call_tool(p).await {
                        Ok(r) if r.is_error != Some(true) => lat.push(t.elapsed()),
                        _ => errors += 1,
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let start = Instant::now();
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (lat, e) = t.await.expect("a session's task");
        all.extend(lat);
        errors += e;
    }
    (all, errors, start.elapsed())
}

/// The gateway's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:"));
    let kib = line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kib.unwrap_or(0)
}

/// `SESSIONS` (default 1,000) HTTP sessions open at once on one gateway, each calling in a loop
/// at an agent's pace (a call every `PACE_MS`, default 500, started at staggered moments), then
/// back to back: errors, p50/p99/max of a call, the gateway's memory per open session.
async fn many_sessions(flux: &str, manifest: &std::path::Path, tmp: &std::path::Path) {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (n, pace, rounds) = (env("SESSIONS", 1000) as usize, env("PACE_MS", 500), 10);
    let many = tmp.join("many.toml");
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    let limits = format!(
        "[serve.limits]\nsessions = {0}\nsessions_per_tenant = {0}\nconnections_per_client = {1}\n\n",
        n + 24,
        4 * n + 64
    );
    std::fs::write(&many, limits + &text).expect("the manifest of many sessions");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = format!("127.0.0.1:{port}");
    let argv = serve_argv(flux, &many.display().to_string(), &["--http", &http]);
    let (g, target) = launch(&argv, url.clone());
    let pid = g.0.id();
    let before = rss_kib(pid);
    let http = reqwest::Client::new();
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
        let c = ().serve(transport).await.expect("initialize");
        sessions.push(Arc::new(c));
    }
    let opened = rss_kib(pid);
    println!("\n{n} HTTP sessions open at once, {rounds} calls each (ms)");
    println!(
        "{:40}{:>9}{:>9}{:>9}{:>9}{:>9}",
        "", "calls/s", "p50", "p99", "max", "errors"
    );
    let mut rss = Vec::new();
    for (name, gap) in [
        (format!("a call every {pace} ms"), Some(pace)),
        ("back to back".to_string(), None),
    ] {
        let (mut lat, errs, wall) = each_calls(&sessions, gap, rounds).await;
        let rate = lat.len() as f64 / wall.as_secs_f64();
        let max = lat.iter().max().copied().unwrap_or_default().as_secs_f64() * 1000.0;
        println!(
            "{name:40}{rate:9.0}{:9.3}{:9.3}{max:9.3}{errs:9}",
            pct(&mut lat, 50),
            pct(&mut lat, 99)
        );
        rss.push(rss_kib(pid));
    }
    println!(
        "gateway RSS: {before} KiB before, {opened} KiB with {n} sessions open ({:.1} KiB a session), {} KiB after the paced calls, {} KiB after the back-to-back ones",
        (opened.saturating_sub(before)) as f64 / n as f64, rss[0], rss[1]
    );
    drop(target);
    for c in sessions {
        if let Ok(c) = Arc::try_unwrap(c) {
            let _ = c.cancel().await;
        }
    }
}

/// Whole servers: `tools/list` of 5 servers of 100 tools each, asked of each server directly
/// (five lists) against one list through the gateway serving them whole; and `resources/read`
/// of one resource directly against through the gateway (a read call on the server's backend).
async fn whole_servers(server: &str, flux: &str, tmp: &std::path::Path, calls: usize) {
    let manifest = tmp.join("whole.toml");
    let mut m = String::from("[concurrency]\nmax_concurrent_tools = 64\n");
    for i in 0..5 {
        m.push_str(&format!(
            "\n[mcp_servers.s{i}]\ncommand = [\"{server}\"]\nenv = {{ MCP_TEST_TOOLS = \"100\" }}\nwhole = true\nrequires_approval = false\n"
        ));
    }
    std::fs::write(&manifest, m).expect("manifest");
    let direct: Vec<Client> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            let mut cmd = tokio::process::Command::new(server);
            cmd.env("MCP_TEST_TOOLS", "100").stderr(Stdio::null());
            let transport = TokioChildProcess::new(cmd).expect("spawn");
            v.push(().serve(transport).await.expect("initialize"));
        }
        v
    };
    let argv = serve_argv(flux, &manifest.display().to_string(), &[]);
    let n = (calls / 20).max(50);
    let raw_direct = vec![s(&[server]); 5];
    let (mut rd, mut rg) = (raw_lists(raw_direct, n), raw_lists(vec![argv.clone()], n));
    let gw = connect(&Target::Stdio(argv)).await;
    let (mut d, mut g) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let mut listed = 0;
        for c in &direct {
            listed += c.peer().list_all_tools().await.expect("list").len();
        }
        d.push(t.elapsed());
        assert_eq!(listed, 5 * 113);
        let t = Instant::now();
        let tools = gw.peer().list_all_tools().await.expect("list");
        g.push(t.elapsed());
        assert_eq!(tools.len(), 5 * 113);
    }
    println!("\nwhole servers, {n} times each (ms)");
    println!("{:40}{:>9}{:>9}", "", "p50", "p99");
    print_row("tools/list, 5 × 113 tools, directly (5 lists)", &mut d);
    print_row("tools/list, 5 × 113 tools, gateway (1 list)", &mut g);
    print_row(
        "  the same, a client that only reads lines, directly",
        &mut rd,
    );
    print_row(
        "  the same, a client that only reads lines, gateway",
        &mut rg,
    );
    let (mut d, mut g) = (Vec::new(), Vec::new());
    for _ in 0..calls.min(2000) {
        let t = Instant::now();
        let p = rmcp::model::ReadResourceRequestParams::new("note://board");
        direct[0].peer().read_resource(p).await.expect("read");
        d.push(t.elapsed());
        let t = Instant::now();
        let p = rmcp::model::ReadResourceRequestParams::new("s0+note://board");
        gw.peer().read_resource(p).await.expect("read");
        g.push(t.elapsed());
    }
    print_row("resources/read, directly", &mut d);
    print_row("resources/read, gateway", &mut g);
    let (mut d, mut g) = (Vec::new(), Vec::new());
    for _ in 0..calls.min(2000) {
        let t = Instant::now();
        call(&direct[0], "sleep").await;
        d.push(t.elapsed());
        let t = Instant::now();
        call(&gw, "s0_sleep").await;
        g.push(t.elapsed());
    }
    print_row("tools/call, directly", &mut d);
    print_row("tools/call, gateway (565 tools)", &mut g);
    for c in direct {
        let _ = c.cancel().await;
    }
    let _ = gw.cancel().await;
}

/// `tools/list` asked `n` times of each of the stdio servers `argvs` in turn, by a client that
/// writes the request line and reads the answer's line without parsing it (the time is then
/// the servers', not a client's reading 565 tools): each round's time.
fn raw_lists(argvs: Vec<Vec<String>>, n: usize) -> Vec<Duration> {
    let env = [("MCP_TEST_TOOLS", "100")];
    let mut procs: Vec<Lines> = (argvs.iter())
        .map(|argv| {
            let mut child = Command::new(&argv[0])
                .args(&argv[1..])
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("a server starts");
            let stdin = child.stdin.take().expect("its stdin");
            let stdout = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
            (child, stdin, stdout)
        })
        .collect();
    for p in procs.iter_mut() {
        ask_line(p, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n", true);
        ask_line(
            p,
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            false,
        );
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/list\"}}\n",
            i + 1
        );
        let t = Instant::now();
        for p in procs.iter_mut() {
            ask_line(p, &line, true);
        }
        out.push(t.elapsed());
    }
    for (mut child, stdin, _) in procs {
        drop(stdin);
        let _ = child.wait();
    }
    out
}

/// A server's process, its stdin and its stdout.
type Lines = (
    Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
);

/// Write `line` to `p`; with `answer`, read lines until one with an `"id"` (its answer).
fn ask_line(p: &mut Lines, line: &str, answer: bool) {
    use std::io::{BufRead, Write};
    p.1.write_all(line.as_bytes()).expect("a request written");
    let mut got = Vec::new();
    if !answer {
        return;
    }
    loop {
        got.clear();
        p.2.read_until(b'\n', &mut got).expect("an answer read");
        assert!(!got.is_empty(), "the server closed its stdout");
        if got.windows(5).any(|w| w == b"\"id\":") {
            break;
        }
    }
}

/// A row of p50 and p99.
fn print_row(name: &str, xs: &mut [Duration]) {
    println!("{name:40}{:9.3}{:9.3}", pct(xs, 50), pct(xs, 99));
}

/// One round of a row: p50 and p99 at 1 and 8 clients, calls/s at 1, 8 and 64.
/// CPU time used so far: the whole machine's (every process, from `/proc/stat`) and this
/// process's (the clients'), in µs.
fn cpu_now() -> (f64, f64) {
    let machine = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let cpu = s.lines().next()?.split_whitespace().skip(1);
            // user nice system idle iowait irq softirq steal: all but idle and iowait.
            let ticks: Vec<f64> = cpu.take(8).filter_map(|x| x.parse().ok()).collect();
            let busy: f64 = ticks.iter().sum::<f64>() - ticks.get(3)? - ticks.get(4)?;
            Some(busy * 1e6 / 100.0) // USER_HZ
        })
        .unwrap_or(f64::NAN);
    // SAFETY: getrusage fills the struct we own.
    let own = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        us(u.ru_utime) + us(u.ru_stime)
    };
    (machine, own)
}

async fn cells(name: &str, t: &Target, calls: usize) -> [f64; 11] {
    // The mcp-proxy crate names a backend's tools `BACKEND/TOOL`.
    let tool = match name {
        n if n.contains("crate") => "t/sleep",
        n if n.contains("inline") => "inline",
        _ => "sleep",
    };
    let (mut one, ..) = measure((t, tool), 1, calls).await;
    let (mut eight, ..) = measure((t, tool), 8, calls / 8).await;
    let mut out = [
        pct(&mut one, 50),
        pct(&mut one, 99),
        pct(&mut eight, 50),
        pct(&mut eight, 99),
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    for (i, clients) in [1usize, 8, 64].into_iter().enumerate() {
        let per = (calls / clients).max(20);
        let (_, wall, cpu) = measure((t, tool), clients, per).await;
        out[4 + i] = (clients * per) as f64 / wall.as_secs_f64();
        if clients == 64 {
            let n = (clients * per) as f64;
            for (i, c) in cpu.iter().enumerate() {
                out[7 + i] = c / n;
            }
        }
    }
    out
}

/// Each cell's median over the rounds.
fn median(rounds: &[[f64; 11]]) -> [f64; 11] {
    let mut out = [0.0; 11];
    for (i, cell) in out.iter_mut().enumerate() {
        let mut xs: Vec<f64> = rounds.iter().map(|r| r[i]).collect();
        xs.sort_by(f64::total_cmp);
        *cell = xs[xs.len() / 2];
    }
    out
}
