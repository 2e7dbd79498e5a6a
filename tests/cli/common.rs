//! Helpers: the binary, a temporary project folder with its own `tools.toml`, JSON runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// The repository root (where the bundled `tools.toml` and `batches/` live).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `flux-tools` with a clean environment for manifest discovery.
pub fn flux() -> Command {
    let mut c = Command::cargo_bin("flux-tools").expect("binary built");
    c.env_remove("FLUX_TOOLS_MANIFEST")
        .env_remove("NO_COLOR")
        .env("CI", "true");
    c
}

/// A test that cannot run here because `missing` is not installed (`fix` installs it). Under
/// `CI` that fails the test: CI installs everything. Elsewhere a notice goes straight to the
/// terminal (cargo's capture takes only `print!`'s output, so the skip shows in `cargo test`'s
/// output without `--nocapture`) and is appended to `target/test-skips.log` (or
/// `$FLUX_TEST_SKIP_LOG`).
pub fn skip(missing: &str, fix: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {missing} — under CI every test runs ({fix})"
    );
    let line = format!("NOTICE: skipped {test}: {missing} ({fix})\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    let log = std::env::var_os("FLUX_TEST_SKIP_LOG")
        .map_or_else(|| repo().join("target/test-skips.log"), PathBuf::from);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = std::io::Write::write_all(&mut f, line.as_bytes());
    }
}

/// A temporary folder holding a manifest and batches.
pub struct Project {
    pub dir: TempDir,
}

impl Project {
    pub fn new(manifest: &str) -> Project {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("tools.toml"), manifest).expect("write manifest");
        Project { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// `flux-tools` run inside the project folder.
    pub fn cmd(&self) -> Command {
        let mut c = flux();
        c.current_dir(self.dir.path());
        c
    }

    /// Start `flux-tools ARGS` in the project folder as a child process (for signals and
    /// rusage), stdout and stderr piped.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.spawn_env(args, &[])
    }

    /// [`Project::spawn`] with extra environment variables.
    pub fn spawn_env(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
            .current_dir(self.path())
            .args(args)
            .envs(env.iter().copied())
            .env("CI", "true")
            .env_remove("FLUX_TOOLS_MANIFEST")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start flux-tools")
    }

    /// Run `batch` with `--format json`; returns the document and the exit code.
    pub fn run_json(&self, batch: &str, extra: &[&str]) -> (Value, i32) {
        let path = self.write("batch.yaml", batch);
        let out = self
            .cmd()
            .args(["run", path.to_str().unwrap_or_default(), "--format", "json"])
            .args(extra)
            .output()
            .expect("run flux-tools");
        let code = out.status.code().unwrap_or(-1);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}); exit {code}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (doc, code)
    }
}

impl Project {
    /// The hash of the first call `approvals JOURNAL` lists as waiting.
    pub fn waiting_hash(&self, journal: &str) -> String {
        let out = self
            .cmd()
            .args(["approvals", journal, "--format", "json"])
            .output()
            .expect("run flux-tools approvals");
        let waiting: Value = serde_json::from_slice(&out.stdout).expect("approvals JSON");
        waiting[0]["hash"]
            .as_str()
            .expect("a waiting call")
            .to_string()
    }

    /// `run batch.yaml --resume JOURNAL --approve ID@HASH --format json EXTRA…` (the hash of
    /// the first waiting call): the document and the exit code.
    pub fn resume_approving(&self, journal: &str, id: &str, extra: &[&str]) -> (Value, i32) {
        let approve = format!("{id}@{}", self.waiting_hash(journal));
        let b = self.path().join("batch.yaml");
        let out = self
            .cmd()
            .args(["run", b.to_str().unwrap_or_default(), "--resume", journal])
            .args(["--format", "json", "--approve", &approve])
            .args(extra)
            .output()
            .expect("run flux-tools");
        let doc = serde_json::from_slice(&out.stdout).expect("results JSON");
        (doc, out.status.code().unwrap_or(-1))
    }
}

/// The results of a run document, by position.
pub fn results(doc: &Value) -> &Vec<Value> {
    doc["results"].as_array().expect("results array")
}

/// `stats.lanes[name].peak_in_flight`.
pub fn peak(doc: &Value, lane: &str) -> u64 {
    doc["stats"]["lanes"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["lane"] == lane))
        .and_then(|l| l["peak_in_flight"].as_u64())
        .unwrap_or_else(|| panic!("no lane {lane} in {}", doc["stats"]))
}

pub fn wall_ms(doc: &Value) -> u64 {
    doc["stats"]["wall_ms"].as_u64().expect("wall_ms")
}

/// A manifest of scripted tools used by many tests.
pub const SCRIPTED: &str = r#"
[concurrency]
max_concurrent_tools = 16
[concurrency.per_tool]
pair = 2

[tools.read]
kind = "scripted"
effect = "read"
latency = "400ms"

[tools.pair]
kind = "scripted"
effect = "read"
latency = "300ms"

[tools.write]
kind = "scripted"
effect = "write"
latency = "300ms"

[tools.idem_write]
kind = "scripted"
effect = "write"
idempotent = true
latency = "300ms"

[tools.fails]
kind = "scripted"
effect = "read"
latency = "200ms"
fail = "backend said no"

[tools.hangs]
kind = "scripted"
effect = "read"
hang = true
timeout = "500ms"

[tools.alone]
kind = "scripted"
effect = "write"
idempotent = true
parallel_safe = false
latency = "300ms"

[tools.retry]
kind = "scripted"
effect = "read"
latency = "10ms"
retries = 3
"#;

/// A throwaway `redis-server` on a free loopback port, stopped on drop.
pub struct Redis {
    pub child: std::process::Child,
    pub url: String,
    port: u16,
    extra: Vec<String>,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        Redis::start_with(&[])
    }

    /// A server started with `extra` arguments (`--requirepass`, TLS settings, …).
    pub fn start_with(extra: &[&str]) -> Option<Redis> {
        if std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            skip(
                "redis-server is not installed",
                "apt-get install redis-server",
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = Redis::spawn(port, &extra);
        Some(Redis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
            port,
            extra,
        })
    }

    fn spawn(port: u16, extra: &[String]) -> std::process::Child {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// SIGKILL the server (until [`Redis::start_again`]).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start a stopped server again on the same port with the same arguments.
    pub fn start_again(&mut self) {
        self.child = Redis::spawn(self.port, &self.extra);
    }

    /// SIGKILL the server, then start it again on the same port with the same arguments
    /// (and so the same data file, when it has one).
    pub fn restart(&mut self, down_for: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down_for);
        self.child = Redis::spawn(self.port, &self.extra);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A throwaway nginx (Debian's) on a free loopback port, proxying `/` round robin over
/// `upstreams` (`HOST:PORT`) with no stickiness and no retry on another upstream, logging
/// each request's upstream; stopped on drop.
pub struct Nginx {
    child: std::process::Child,
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Nginx {
    pub fn start(upstreams: &[String]) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|b| Path::new(b).exists());
        let Some(bin) = bin else {
            skip("nginx is not installed", "apt-get install nginx");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let servers: String = upstreams
            .iter()
            .map(|u| format!("    server {u} max_fails=0;\n"))
            .collect();
        // `user` is ignored (with a warning) unless nginx starts as root, as in CI.
        let conf = format!(
            "user root;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
               log_format up '$upstream_addr $request_method $status';\n\
               access_log {d}/access.log up;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               upstream replicas {{\n{servers}  }}\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 location / {{\n\
                   proxy_pass http://replicas;\n\
                   proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\";\n\
                   proxy_set_header Host $http_host;\n\
                   proxy_buffering off;\n\
                   proxy_read_timeout 120s;\n\
                   proxy_next_upstream off;\n\
                 }}\n\
               }}\n\
             }}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = std::process::Command::new(bin)
            .args(["-p", &d.to_string(), "-c"])
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "nginx did not start: {log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Nginx {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            log: dir.path().join("access.log"),
            _dir: dir,
        })
    }

    /// The upstream (`HOST:PORT`) of each request, in the order nginx logged them.
    pub fn upstreams(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    }
}

impl Drop for Nginx {
    /// A fast shutdown (`SIGTERM`): the master ends its workers (a `SIGKILL` would orphan
    /// them).
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Every file under `dir`, in its subfolders too.
pub fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}
