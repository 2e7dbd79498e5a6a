//! Lanes across processes (the default `local` store): real `flux-tools` processes sharing a
//! manifest share its tenant, tool and shared lanes; a killed run frees its permits at once;
//! a nested run borrows its caller's permits.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{results, Project, Redis};

/// A command tool that logs `start TENANT NANOS` / `end TENANT NANOS` around a 200 ms sleep.
const LOGGING: &str = r#"
[concurrency]
max_concurrent_tools = 16
per_tenant = 2
[concurrency.per_tool]
work = 2
solo = 1

[tools.work]
kind = "command"
effect = "read"
command = ["sh", "-c", "echo \"start $FLUX_TENANT $(date +%s%N)\" >> \"$1\"; sleep 0.2; echo \"end $FLUX_TENANT $(date +%s%N)\" >> \"$1\"", "work", "{log}"]
stdin = "none"

[tools.any]
kind = "command"
effect = "read"
command = ["sh", "-c", "echo \"start $FLUX_TENANT $(date +%s%N)\" >> \"$1\"; sleep 0.2; echo \"end $FLUX_TENANT $(date +%s%N)\" >> \"$1\"", "any", "{log}"]
stdin = "none"

[tools.alone]
kind = "command"
effect = "write"
idempotent = true
parallel_safe = false
command = ["sh", "-c", "echo \"start $FLUX_TENANT $(date +%s%N)\" >> \"$1\"; sleep 0.3; echo \"end $FLUX_TENANT $(date +%s%N)\" >> \"$1\"", "alone", "{log}"]
stdin = "none"

[tools.solo]
kind = "command"
effect = "read"
command = ["sh", "-c", "touch \"$1\"; exec sleep \"$2\"", "solo", "{marker}", "{secs}"]
stdin = "none"
"#;

/// The most intervals open at once in a start/end log (optionally for one tenant).
fn peak(log: &Path, tenant: Option<&str>) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut events: Vec<(u128, i32)> = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() != 3 || tenant.is_some_and(|t| t != parts[1]) {
            continue;
        }
        let Ok(t) = parts[2].parse::<u128>() else {
            continue;
        };
        // Ends sort before starts at the same instant: touching intervals do not overlap.
        events.push((t, if parts[0] == "start" { 1 } else { -1 }));
    }
    events.sort();
    let (mut now, mut best) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        best = best.max(now);
    }
    best as usize
}

fn batch(tool: &str, tenant: &str, n: usize, log: &Path) -> String {
    let mut b = format!("tenant: {tenant}\ncalls:\n");
    for _ in 0..n {
        b.push_str(&format!(
            "  - {{ tool: {tool}, args: {{ log: \"{}\" }} }}\n",
            log.display()
        ));
    }
    b
}

fn run_all(p: &Project, batches: &[(&str, String)]) -> Vec<Value> {
    let children: Vec<_> = batches
        .iter()
        .map(|(name, text)| {
            let path = p.write(name, text);
            p.spawn(&["run", path.to_str().unwrap(), "--format", "json"])
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect()
}

#[test]
fn three_processes_share_a_tool_lane() {
    let p = Project::new(LOGGING);
    let log = p.path().join("work.log");
    let docs = run_all(
        &p,
        &[
            ("a.yaml", batch("work", "t1", 10, &log)),
            ("b.yaml", batch("work", "t2", 10, &log)),
            ("c.yaml", batch("work", "t3", 10, &log)),
        ],
    );
    for d in &docs {
        assert!(results(d).iter().all(|r| r["status"] == "ok"), "{d}");
    }
    assert_eq!(peak(&log, None), 2, "per_tool = 2 across three runs");
    // The stats say the lane was shared: some run waited while others held its permits.
    let elsewhere: Vec<u64> = docs
        .iter()
        .filter_map(|d| {
            d["stats"]["lanes"]
                .as_array()?
                .iter()
                .find(|l| l["lane"] == "tool:work")?["peak_held_elsewhere"]
                .as_u64()
        })
        .collect();
    assert!(
        elsewhere.iter().any(|n| *n >= 1),
        "no run saw the others' permits: {elsewhere:?}"
    );
    assert!(elsewhere.iter().all(|n| *n <= 2));
    // The memory store, by contrast, only bounds each run on its own.
    let log2 = p.path().join("mem.log");
    let children: Vec<_> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| {
            let path = p.write(&format!("{n}.yaml"), &batch("work", n, 4, &log2));
            p.spawn(&[
                "run",
                path.to_str().unwrap(),
                "--format",
                "json",
                "--lane-store",
                "memory",
            ])
        })
        .collect();
    for c in children {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    assert!(peak(&log2, None) > 2, "memory lanes are per run");
}

#[test]
fn the_tenant_lane_is_shared_by_one_tenants_runs_only() {
    let p = Project::new(LOGGING);
    let log = p.path().join("tenants.log");
    let docs = run_all(
        &p,
        &[
            ("a.yaml", batch("any", "acme", 6, &log)),
            ("b.yaml", batch("any", "acme", 6, &log)),
            ("c.yaml", batch("any", "globex", 6, &log)),
        ],
    );
    for d in &docs {
        assert!(results(d).iter().all(|r| r["status"] == "ok"), "{d}");
    }
    assert_eq!(
        peak(&log, Some("acme")),
        2,
        "per_tenant = 2 across acme's two runs"
    );
    assert_eq!(peak(&log, Some("globex")), 2);
    assert!(
        peak(&log, None) >= 3,
        "globex does not wait for acme's permits"
    );
}

#[test]
fn a_run_killed_with_sigkill_frees_its_permits_at_once() {
    let p = Project::new(LOGGING);
    let marker = p.path().join("holding");
    let a = p.write(
        "a.yaml",
        &format!(
            "- {{ tool: solo, args: {{ marker: \"{}\", secs: 60 }} }}\n",
            marker.display()
        ),
    );
    let mut holder = p.spawn(&["run", a.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(marker.exists(), "the first run never started its call");
    let b = p.write(
        "b.yaml",
        &format!(
            "- {{ tool: solo, args: {{ marker: \"{}\", secs: 0 }} }}\n",
            p.path().join("second").display()
        ),
    );
    let waiter = p.spawn(&["run", b.to_str().unwrap(), "--format", "json"]);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !p.path().join("second").exists(),
        "per_tool = 1: the second run must wait"
    );
    holder.kill().unwrap();
    let killed = Instant::now();
    let out = waiter.wait_with_output().unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "the permit came back only after {:?}",
        killed.elapsed()
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results(&doc)[0]["status"], "ok");
    assert!(results(&doc)[0]["queued_ms"].as_u64().unwrap() >= 500);
    let _ = holder.wait();
}

#[test]
fn a_nested_run_borrows_its_callers_permits() {
    let flux = assert_cmd::cargo::cargo_bin("flux-tools");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("tools.toml");
    let inner = dir.path().join("inner.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"
[concurrency]
max_concurrent_tools = 4
per_tenant = 1

[tools.step]
kind = "scripted"
effect = "read"
latency = "100ms"

[tools.nested]
kind = "command"
effect = "read"
command = ["{flux}", "--manifest", "{manifest}", "run", "{{batch}}", "--format", "json"]
stdin = "none"
timeout = "20s"
"#,
            flux = flux.display(),
            manifest = manifest.display()
        ),
    )
    .unwrap();
    std::fs::write(
        &inner,
        "tenant: acme\ncalls:\n  - tool: step\n  - tool: step\n",
    )
    .unwrap();
    let p = Project { dir };
    let started = Instant::now();
    let (doc, code) = p.run_json(
        &format!(
            "tenant: acme\ncalls:\n  - {{ tool: nested, args: {{ batch: \"{}\" }} }}\n",
            inner.display()
        ),
        &[],
    );
    assert_eq!(code, 0, "{doc}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the nested run deadlocked"
    );
    let nested = &results(&doc)[0]["output"];
    assert_eq!(nested["outcome"], "completed", "{nested}");
    let inner_results = nested["results"].as_array().unwrap();
    assert!(inner_results.iter().all(|r| r["status"] == "ok"));
    // Borrowed: the nested calls ran inside the parent's single tenant permit, one at a time.
    let tenant = nested["stats"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "tenant:acme")
        .unwrap();
    assert_eq!(tenant["peak_in_flight"], 1);
}

#[test]
fn identical_calls_to_an_order_dependent_tool_never_overlap_across_runs() {
    let p = Project::new(LOGGING);
    let log = p.path().join("alone.log");
    let docs = run_all(
        &p,
        &[
            ("a.yaml", batch("alone", "x1", 3, &log)),
            ("b.yaml", batch("alone", "x2", 3, &log)),
            ("c.yaml", batch("alone", "x3", 3, &log)),
        ],
    );
    for d in &docs {
        assert!(results(d).iter().all(|r| r["status"] == "ok"), "{d}");
    }
    assert_eq!(peak(&log, None), 1, "the same booking ran twice at once");
}

/// Three `flux-tools run`s of `n` logged `work` calls each, sharing the Redis lane store.
fn three_runs(p: &Project, log: &Path, n: usize, url: &str) -> Vec<std::process::Child> {
    ["r1", "r2", "r3"]
        .iter()
        .map(|t| {
            let path = p.write(&format!("{t}.yaml"), &batch("work", t, n, log));
            redis_run(p, &path, url)
        })
        .collect()
}

/// `flux-tools run PATH --format json --lane-store URL`, started.
fn redis_run(p: &Project, path: &Path, url: &str) -> std::process::Child {
    let path = path.to_str().unwrap();
    p.spawn(&["run", path, "--format", "json", "--lane-store", url])
}

/// Wait for every run: each must have every call `ok`.
fn all_ok(children: Vec<std::process::Child>) {
    for c in children {
        let out = c.wait_with_output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(results(&doc).iter().all(|r| r["status"] == "ok"), "{doc}");
    }
}

#[test]
fn redis_shares_a_tool_lane_across_processes() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let log = p.path().join("redis.log");
    let children = three_runs(&p, &log, 6, &redis.url);
    all_ok(children);
    assert_eq!(peak(&log, None), 2);
}

#[test]
fn redis_frees_a_killed_holders_permits_after_the_lease() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let marker = p.path().join("holding");
    let a = p.write(
        "a.yaml",
        &format!(
            "- {{ tool: solo, args: {{ marker: \"{}\", secs: 60 }} }}\n",
            marker.display()
        ),
    );
    let env = [("FLUX_TOOLS_LEASE_MS", "1500")];
    let mut holder = p.spawn_env(
        &["run", a.to_str().unwrap(), "--lane-store", &redis.url],
        &env,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(marker.exists(), "the first run never started its call");
    holder.kill().unwrap();
    let _ = holder.wait();
    let killed = Instant::now();
    let b = p.write(
        "b.yaml",
        &format!(
            "- {{ tool: solo, args: {{ marker: \"{}\", secs: 0 }} }}\n",
            p.path().join("second").display()
        ),
    );
    let out = p
        .spawn_env(
            &[
                "run",
                b.to_str().unwrap(),
                "--format",
                "json",
                "--lane-store",
                &redis.url,
            ],
            &env,
        )
        .wait_with_output()
        .unwrap();
    let waited = killed.elapsed();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results(&doc)[0]["status"], "ok");
    assert!(
        waited >= Duration::from_millis(700),
        "the dead holder's lease was honoured ({waited:?})"
    );
    assert!(
        waited < Duration::from_secs(6),
        "the permit came back only after {waited:?}"
    );
}

#[test]
fn redis_going_away_mid_run_is_a_classified_failure_not_a_hang() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let p = Project::new(LOGGING);
    let b = p.write(
        "b.yaml",
        &(0..4)
            .map(|i| {
                format!(
                    "- {{ tool: solo, args: {{ marker: \"{}\", secs: 1 }} }}\n",
                    p.path().join(format!("m{i}")).display()
                )
            })
            .collect::<String>(),
    );
    let child = p.spawn(&[
        "run",
        b.to_str().unwrap(),
        "--format",
        "json",
        "--lane-store",
        &redis.url,
    ]);
    // Wait until the first call holds its permit and runs, then take Redis away.
    let first = p.path().join("m0");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !first.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(first.exists(), "the first call never started");
    redis.child.kill().unwrap();
    let _ = redis.child.wait();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the run hung without Redis"
    );
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = results(&doc);
    assert_eq!(r[0]["status"], "ok", "the call in flight finished");
    let failed: Vec<&Value> = r
        .iter()
        .filter(|x| x["status"] == "never_dispatched")
        .collect();
    assert!(!failed.is_empty(), "{doc}");
    for f in failed {
        assert_eq!(f["error"]["kind"], "lane_store");
        assert!(
            f["error"]["message"].as_str().unwrap().contains(&redis.url),
            "{f}"
        );
    }
}

#[test]
fn redis_with_a_password_works_and_the_password_is_never_shown() {
    let Some(redis) = Redis::start_with(&["--requirepass", "s3cret-pw"]) else {
        return;
    };
    let p = Project::new(
        "[concurrency.per_tool]\nz = 1\n[tools.z]\nkind = \"scripted\"\neffect = \"read\"\n",
    );
    let port = redis.url.rsplit(':').next().unwrap();
    let good = format!("redis://:s3cret-pw@127.0.0.1:{port}");
    let (doc, code) = p.run_json("- tool: z\n- tool: z\n", &["--lane-store", &good]);
    assert_eq!(code, 0, "{doc}");
    assert!(!doc.to_string().contains("s3cret-pw"));
    // A wrong password: a clear error that names the store without its password.
    let bad = format!("redis://user:wrong-pw@127.0.0.1:{port}");
    let b = p.write("b.yaml", "- tool: z\n");
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--lane-store", &bad])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("redis://user:***@127.0.0.1"), "{stderr}");
    assert!(
        !stderr.contains("wrong-pw") && !String::from_utf8_lossy(&out.stdout).contains("wrong-pw")
    );
}

/// A CA and a server certificate for 127.0.0.1, made with `openssl` in `dir`.
fn make_certs(dir: &Path) -> bool {
    let run = |args: &[&str]| {
        std::process::Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=flux-tools test CA",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ])
}

/// A folder with a test CA and a server certificate it signed, or `None` (skipped: no openssl).
fn certs() -> Option<tempfile::TempDir> {
    let certs = tempfile::tempdir().unwrap();
    if make_certs(certs.path()) {
        return Some(certs);
    }
    crate::common::skip(
        "openssl could not make a certificate",
        "apt-get install openssl",
    );
    None
}

/// A redis-server with a TLS port serving `cert`/`key`, password `tls-pw`: it and the port.
fn tls_redis(cert: &str, key: &str, ca: &str) -> Option<(Redis, u16)> {
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let port = tls_port.to_string();
    let redis = Redis::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        ca,
        "--tls-auth-clients",
        "no",
        "--requirepass",
        "tls-pw",
    ])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not open its TLS port"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((redis, tls_port))
}

#[test]
fn a_self_signed_server_certificate_is_named_as_such_with_the_fix() {
    let Some(certs) = certs() else { return };
    // The server presents the CA's own certificate: self-signed, trusted, and still refused.
    let file = |n: &str| certs.path().join(n).display().to_string();
    let ca = file("ca.pem");
    let Some((_redis, tls_port)) = tls_redis(&ca, &file("ca.key"), &ca) else {
        return;
    };
    let p = Project::new("[tools.z]\nkind = \"scripted\"\neffect = \"read\"\n");
    let b = p.write("b.yaml", "- tool: z\n");
    let url = format!("rediss://:tls-pw@127.0.0.1:{tls_port}");
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--lane-store", &url])
        .env("SSL_CERT_FILE", &ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("self-signed certificate"), "{stderr}");
    assert!(
        stderr.contains("hint: make a CA, sign the server's certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains("tls-pw"), "{stderr}");
}

#[test]
fn rediss_with_tls_and_a_password_shares_a_lane() {
    let Some(certs) = certs() else { return };
    let file = |n: &str| certs.path().join(n).display().to_string();
    let ca = file("ca.pem");
    let Some((_redis, tls_port)) = tls_redis(&file("server.pem"), &file("server.key"), &ca) else {
        return;
    };
    let p = Project::new(
        "[concurrency.per_tool]\nz = 1\n[tools.z]\nkind = \"scripted\"\neffect = \"read\"\nlatency = \"200ms\"\n",
    );
    let url = format!("rediss://:tls-pw@127.0.0.1:{tls_port}");
    let b = p.write("b.yaml", "- tool: z\n- tool: z\n");
    // The test's CA is trusted through SSL_CERT_FILE, as for any system store.
    let out = p
        .cmd()
        .args([
            "run",
            b.to_str().unwrap(),
            "--format",
            "json",
            "--lane-store",
            &url,
        ])
        .env("SSL_CERT_FILE", &ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(crate::common::peak(&doc, "tool:z"), 1);
    // Without the CA the certificate is refused: a clear error, the password not in it.
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap(), "--lane-store", &url])
        .env("SSL_CERT_FILE", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("tls-pw"), "{stderr}");
}

#[test]
fn redis_restarted_mid_run_is_reconnected_and_the_limit_holds() {
    // Before: a connection that did not reconnect; every dispatch after the restart failed
    // with `lane_store` until the run gave up.
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().display().to_string();
    let Some(mut redis) = Redis::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        &dir,
    ]) else {
        return;
    };
    let p = Project::new(LOGGING);
    let log = p.path().join("restart.log");
    let children = three_runs(&p, &log, 15, &redis.url);
    // Once calls are running, kill Redis and bring it back on the same port and data file.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 4 {
        assert!(Instant::now() < deadline, "no call started");
        std::thread::sleep(Duration::from_millis(20));
    }
    redis.restart(Duration::from_millis(800));
    all_ok(children);
    assert_eq!(peak(&log, None), 2, "the tool lane's limit was exceeded");
}

/// Every doorbell file under the local store's folder for this project's manifest.
fn doorbells(p: &Project) -> Vec<std::path::PathBuf> {
    let manifest = p.path().join("tools.toml").canonicalize().unwrap();
    let hash = format!(
        "{:016x}",
        flux_tools::fnv(manifest.as_os_str().as_encoded_bytes())
    );
    let root = flux_tools::runtime_dir().unwrap().join(hash);
    std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("doorbell"))
        .filter(|d| d.exists())
        .collect()
}

#[test]
fn a_freed_slot_rings_the_doorbell_and_a_removed_doorbell_only_slows_the_handoff() {
    let p = Project::new(LOGGING);
    let log = p.path().join("bell.log");
    let children = three_runs(&p, &log, 6, "local");
    // Remove the doorbell while the runs wait on it: rings are lost until a waiter makes a
    // new one; each lost ring costs a fallback period, and every call still runs.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut removed = 0;
    while removed < 3 && Instant::now() < deadline {
        for d in doorbells(&p) {
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::metadata(&d).unwrap().file_type().is_fifo());
            if std::fs::remove_file(&d).is_ok() {
                removed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(removed > 0, "the lane had a doorbell to remove");
    all_ok(children);
    assert_eq!(peak(&log, None), 2, "per_tool = 2 held throughout");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 36);
}

#[test]
fn redis_waiters_without_their_freed_messages_still_finish() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-bell.log");
    let children = three_runs(&p, &log, 6, &redis.url);
    // Cut every pub/sub connection mid-run: waiters fall back to trying every 400 ms until
    // their listener is back.
    std::thread::sleep(Duration::from_millis(500));
    let cli = std::process::Command::new("redis-cli")
        .args(["-u", &redis.url, "CLIENT", "KILL", "TYPE", "pubsub"])
        .output();
    all_ok(children);
    if let Ok(out) = cli {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(peak(&log, None), 2);
}

/// A release hands the freed permits to the head of the queue itself and says so on the
/// waiter's channel (`g PAUSED_MS`), so the waiter runs no script before its call; the limit
/// still holds. (Before, every message was `1`, "try again", and each handoff took the waiter
/// one more round trip.)
#[test]
fn redis_a_release_grants_the_next_waiter_its_permits_itself() {
    let Some(redis) = Redis::start() else { return };
    let grants = Grants::listen(&redis.url);
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-grant.log");
    all_ok(three_runs(&p, &log, 6, &redis.url));
    assert_eq!(peak(&log, None), 2);
    let said = grants.stop();
    let granted: Vec<&String> = said.iter().filter(|m| m.starts_with("g ")).collect();
    assert!(
        granted.len() >= 6,
        "the releases granted {} waiters: {said:?}",
        granted.len()
    );
    // Each grant brought the call's backend read along (`g PAUSED_MS 1`): nobody writes.
    assert!(
        granted.iter().all(|m| m.ends_with(" 1")),
        "a grant without the read: {said:?}"
    );
}

/// A read through a Redis lane asks for its backend with its tool lane, in one script, and
/// gives it back with that lane, in one script: each call runs four in all — its tenant lane,
/// its tool lane with the read, and giving back the tenant lane and the tool lane with the
/// read. (Before, the read was a script of its own both ways: 36 scripts for these six calls;
/// then taken along but given back alone: 30.)
#[test]
fn redis_a_read_asks_for_its_backend_with_its_lane() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-along.log");
    let path = p.write("solo.yaml", &batch("work", "solo", 6, &log));
    let before = scripts_run(&redis.url);
    all_ok(vec![redis_run(&p, &path, &redis.url)]);
    assert_eq!(peak(&log, None), 2);
    assert_eq!(scripts_run(&redis.url) - before, 4 * 6);
}

/// A waiter in a Redis queue hears of its grant by a message and tries on its own only as a
/// fallback, a few times a second: two calls of 1.2 s through a lane of one run eight scripts
/// between them (four each), the waiter's three or four tries and the renewal of what it was
/// handed (its lane and its read, at 1 s). (Before, every waiter tried every 100 ms: 21
/// waiters of eight processes ran a third of Redis's scripts that way, and took the CPU a
/// handoff needed; here that was 21 scripts.)
#[test]
fn redis_a_waiter_does_not_ask_redis_again_and_again() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let before = scripts_run(&redis.url);
    let runs: Vec<_> = (0..2)
        .map(|i| {
            let marker = p.path().join(format!("m{i}"));
            let text = format!(
                "tenant: t{i}\ncalls:\n  - {{ tool: solo, args: {{ marker: \"{}\", secs: \"1.2\" }} }}\n",
                marker.display()
            );
            let path = p.write(&format!("w{i}.yaml"), &text);
            redis_run(&p, &path, &redis.url)
        })
        .collect();
    all_ok(runs);
    let scripts = scripts_run(&redis.url) - before;
    assert!(
        (8..=14).contains(&scripts),
        "two calls, one waiting 1.2 s for the other, ran {scripts} scripts"
    );
}

/// How many scripts the Redis at `url` has run (`EVALSHA` and `EVAL`).
fn scripts_run(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("a client");
    let mut conn = client.get_connection().expect("a connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .expect("INFO");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A process's own next call asks Redis after its last call's permits are back there: the
/// scripts are loaded when the store connects and a release is on the connection before the
/// waiter it wakes asks, so with one process every acquisition is granted at once and no
/// release has a waiter to hand on to. (Before, each lane's first release met `NOSCRIPT` and
/// went again after the woken waiter had asked: the waiter was queued behind its own
/// process's permits and granted by the release — `["g 0", "g 0"]` here, in every run.)
#[test]
fn redis_a_process_gives_permits_back_before_its_next_call_asks_for_them() {
    let Some(redis) = Redis::start() else { return };
    let grants = Grants::listen(&redis.url);
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-own-next.log");
    let path = p.write("solo.yaml", &batch("work", "solo", 6, &log));
    all_ok(vec![redis_run(&p, &path, &redis.url)]);
    assert_eq!(peak(&log, None), 2);
    let said = grants.stop();
    assert!(
        said.is_empty(),
        "a lone process waited on its own releases: {said:?}"
    );
}

/// Every "freed" message Redis publishes while this listens.
struct Grants {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    listener: std::thread::JoinHandle<()>,
    said: std::sync::mpsc::Receiver<String>,
}

impl Grants {
    fn listen(url: &str) -> Grants {
        let client = redis::Client::open(url).expect("a client");
        let mut conn = client.get_connection().expect("a connection");
        let (tx, said) = std::sync::mpsc::channel::<String>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let listener = std::thread::spawn(move || {
            let mut pubsub = conn.as_pubsub();
            pubsub
                .psubscribe("flux-tools:*:freed:*")
                .expect("psubscribe");
            let _ = pubsub.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = ready_tx.send(());
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                match pubsub.get_message() {
                    Ok(msg) => {
                        let _ = tx.send(msg.get_payload().unwrap_or_default());
                    }
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return,
                }
            }
        });
        ready_rx.recv().expect("the listener subscribed");
        Grants {
            stop,
            listener,
            said,
        }
    }

    /// What was said, once the last messages have had time to arrive.
    fn stop(self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(300));
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.listener.join();
        self.said.try_iter().collect()
    }
}

/// A "freed" message wakes the one process it is for. Each process listens for its own
/// tickets' channels (one pattern each): before, every process subscribed to one pattern for
/// the whole lane, so every handoff woke all of them (`PUBSUB NUMPAT` read 1 here, with three
/// processes waiting; with 8 processes on 2 cores the one it was for waited behind the rest).
#[test]
fn redis_a_freed_message_wakes_only_the_process_it_is_for() {
    let Some(redis) = Redis::start() else { return };
    let client = redis::Client::open(redis.url.as_str()).expect("a client");
    let mut conn = client.get_connection().expect("a connection");
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-own.log");
    let runs = three_runs(&p, &log, 6, &redis.url);
    let mut most = 0i64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while most < 3 && Instant::now() < deadline {
        let patterns: i64 = redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query(&mut conn)
            .expect("PUBSUB NUMPAT");
        most = most.max(patterns);
        std::thread::sleep(Duration::from_millis(20));
    }
    all_ok(runs);
    assert_eq!(peak(&log, None), 2);
    assert_eq!(
        most, 3,
        "three waiting processes listened on {most} pattern(s), not one each"
    );
}

/// A process that ends gives its last permits back before it exits: nothing of it is left in
/// Redis for the lease to lapse (other processes would wait for that, 10 s by default). Before
/// the fix the last calls' releases were dropped with the runtime: three tries here took
/// 20.4 s, 11.1 s (with a tool, a tenant and a backend permit left in Redis) and 20.4 s.
#[test]
fn redis_a_run_that_ends_leaves_no_permits_behind() {
    let Some(redis) = Redis::start() else { return };
    let p = Project::new(LOGGING);
    let log = p.path().join("redis-end.log");
    // One call a run, its result streamed: the run ends the moment its call does.
    let started = Instant::now();
    let runs: Vec<_> = (0..6)
        .map(|i| {
            let path = p.write(&format!("e{i}.yaml"), &batch("work", "e", 1, &log));
            let path = path.to_str().unwrap_or_default().to_string();
            let args = ["run", &path, "--format", "jsonl", "-q"];
            p.spawn(&[&args[..], &["--lane-store", &redis.url]].concat())
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().expect("the run ends");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("\"ok\""), "{text}");
    }
    // Six calls of 0.2 s through a lane of 2; a permit left behind holds it for 10 s.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "a run waited {took:?} for another's leftovers"
    );
    let client = redis::Client::open(redis.url.as_str()).expect("a client");
    let mut conn = client.get_connection().expect("a connection");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("flux-tools:*")
        .query(&mut conn)
        .expect("KEYS");
    let mut held = Vec::new();
    for k in keys.iter().filter(|k| !k.contains(":spend:")) {
        let kind: String = redis::cmd("TYPE").arg(k).query(&mut conn).expect("TYPE");
        let parts = [":queue", ":qlease"];
        if kind == "zset" && !parts.iter().any(|s| k.ends_with(s)) {
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(k)
                .arg(0)
                .arg(-1)
                .query(&mut conn)
                .expect("ZRANGE");
            held.extend(members.into_iter().map(|m| format!("{k} {m}")));
        }
    }
    assert!(held.is_empty(), "permits left behind: {held:?}");
}
