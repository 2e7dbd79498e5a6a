//! The gateway as an OAuth 2.1 resource server, against a real authorization server: the npm
//! `oidc-provider` (`tests/fixtures/oidc/provider.mjs`, installed by `.ci/run` into
//! `target/oidc`), and the Python `mcp` SDK's own OAuth client (`tests/fixtures/
//! oauth_client.py`), which finds the authorization server from the gateway's 401 and its
//! resource metadata, registers, signs in and calls with the JWT it got. The tests mint no
//! token themselves except to prove the refusals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::serve::{flux_bin, python, HttpGateway};

/// The authorization server; killed when dropped.
pub(crate) struct Issuer {
    child: Child,
    port: u16,
    keys: PathBuf,
    pub(crate) resource: String,
    /// Its environment beyond `OIDC_ACCOUNTS` (`OIDC_TTL`, `OIDC_CLIENTS`).
    env: Vec<(String, String)>,
}

/// Who signs in, with what claims.
const ACCOUNTS: &str = r#"{"alice": {"org_id": "acme", "roles": ["reader"]}, "bob": {"org_id": "acme", "roles": ["admin"]}, "machine": {"org_id": "acme", "roles": ["reader"]}, "gateway": {"org_id": "acme", "roles": ["reader"]}}"#;

pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    l.local_addr().expect("its address").port()
}

impl Issuer {
    /// Start it for `resource` (or `None`: `oidc-provider` is not installed; skipped), with
    /// `env` too.
    pub(crate) fn start_with(dir: &Path, resource: &str, env: &[(&str, &str)]) -> Option<Issuer> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let home = repo().join("target/oidc");
        if !home.join("node_modules/oidc-provider").exists() {
            crate::common::skip(
                "the npm oidc-provider is not installed in target/oidc",
                "npm install --prefix target/oidc oidc-provider@9.13.3",
            );
            return None;
        }
        // Node resolves the package from the script's own folder; each test has its own copy.
        // A port another test took between `free_port` and node's listen is tried again.
        let keys = dir.join("issuer-keys.json");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let script = home.join(format!("provider-{port}.mjs"));
            std::fs::copy(repo().join("tests/fixtures/oidc/provider.mjs"), &script)
                .expect("copy the provider");
            match Issuer::spawn(port, &keys, resource, &env) {
                Ok(child) => {
                    return Some(Issuer {
                        child,
                        port,
                        keys,
                        resource: resource.to_string(),
                        env,
                    })
                }
                Err(why) => {
                    let _ = std::fs::remove_file(&script);
                    last = why;
                }
            }
        }
        panic!("the authorization server did not start: {last}");
    }

    /// Start node on `port`; `Err` with its log when it never says "ready".
    fn spawn(
        port: u16,
        keys: &Path,
        resource: &str,
        env: &[(String, String)],
    ) -> Result<Child, String> {
        let log = keys.with_extension("log");
        let mut child = Command::new("node")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(repo().join("target/oidc"))
            .args([&format!("provider-{port}.mjs"), &port.to_string()])
            .arg(keys)
            .arg(resource)
            .env("OIDC_ACCOUNTS", ACCOUNTS)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).map_or(Stdio::null(), Stdio::from))
            .spawn()
            .expect("start the authorization server");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        if line.starts_with("ready") {
            return Ok(child);
        }
        let _ = child.kill();
        let _ = child.wait();
        let err = std::fs::read_to_string(&log).unwrap_or_default();
        Err(format!("port {port}: {line}{err}"))
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The tokens it granted so far, by grant type (`granted authorization_code` lines of its
    /// log; a restart starts a new log).
    pub(crate) fn granted(&self, grant: &str) -> usize {
        let log = std::fs::read_to_string(self.keys.with_extension("log")).unwrap_or_default();
        log.lines()
            .filter(|l| *l == format!("granted {grant}"))
            .count()
    }

    /// A new signing key (and kid): the old one is no longer published; what it issued
    /// (refresh tokens too) is forgotten.
    pub(crate) fn rotate(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::remove_file(&self.keys).expect("drop the old key");
        // Its own port, just let go of: a few tries while the kernel frees it.
        let mut tries = 0;
        self.child = loop {
            match Issuer::spawn(self.port, &self.keys, &self.resource, &self.env) {
                Ok(child) => break child,
                Err(why) if tries == 10 => panic!("the authorization server: {why}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
            tries += 1;
        };
    }

    /// The kid its key is published under.
    fn kid(&self) -> String {
        let keys: Value =
            serde_json::from_str(&std::fs::read_to_string(&self.keys).expect("the key file"))
                .expect("its JSON");
        keys["keys"][0]["kid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let script = format!("target/oidc/provider-{}.mjs", self.port);
        let _ = std::fs::remove_file(repo().join(script));
    }
}

/// A gateway on `port` for `manifest`, writing its audit trail to `audit.jsonl`.
/// The gateway of `p` on `port`; `Err`: what it said when it exited before listening.
pub(crate) fn try_gateway(
    p: &Project,
    port: u16,
    env: &[(&str, &str)],
) -> Result<HttpGateway, String> {
    let mut cmd = Command::new(flux_bin());
    cmd.current_dir(p.path())
        .args(["mcp", "serve", "--http", &format!("127.0.0.1:{port}")])
        .args(["--audit", "audit.jsonl"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    HttpGateway::try_spawned(cmd)
}

/// The manifest: two tools and one that needs approval, `reader` and `admin` roles.
pub(crate) fn manifest(p: &Project, issuer: &str, resource: &str, log: &Path) -> String {
    let script = p.write(
        "tool.sh",
        &format!(
            "#!/bin/sh\necho \"$1 $2\" >> {}\necho \"$1 $2\"\n",
            log.display()
        ),
    );
    let mut perm = std::fs::metadata(&script).expect("script").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    let tool = |name: &str, effect: &str, extra: &str| {
        format!(
            "[tools.{name}]\nkind = \"command\"\ncommand = [\"{}\", \"{name}\", \"{{x}}\"]\neffect = \"{effect}\"\n{extra}[tools.{name}.args.x]\ntype = \"string\"\n\n",
            script.display()
        )
    };
    let text = format!(
        "[history]\npath = \"history.jsonl\"\n\n[serve]\nadmin_token = \"${{env:ADMIN}}\"\n\n[serve.auth]\nissuer = \"{issuer}\"\nresource = \"{resource}\"\nscopes = [\"mcp:tools\"]\ntenant_claim = \"org_id\"\njwks_refresh = \"1s\"\n\n\
         [roles.reader]\ntools = [\"echo\", \"publish\"]\n\n[roles.admin]\ntools = [\"*\"]\nops = [\"status\", \"metrics\", \"approve\"]\n\n{}{}{}",
        tool("echo", "read", ""),
        tool("delete_repo", "write", ""),
        tool("publish", "write", "requires_approval = true\n"),
    );
    p.write("tools.toml", &text);
    text
}

/// A project with [`manifest`], its authorization server, and its gateway (with `ADMIN` and
/// `env`); `None`: `oidc-provider` is not installed (skipped).
fn signed_in(env: &[(&str, &str)]) -> Option<(Project, Issuer, HttpGateway)> {
    signed_in_with(env, &[])
}

/// An upstream gateway (its project, authorization server and gateway) whose authorization
/// server also serves `other` (a front gateway's resource), with `clients` pre-registered;
/// `None`: skipped.
pub(crate) fn signed_in_resources(
    other: &str,
    clients: &str,
) -> Option<(Project, Issuer, HttpGateway)> {
    for _ in 0..3 {
        let p = Project::new("");
        let port = free_port();
        let resource = format!("http://127.0.0.1:{port}/mcp");
        let both = format!("{resource},{other}");
        let mut issuer = Issuer::start_with(p.path(), &both, &[("OIDC_CLIENTS", clients)])?;
        issuer.resource = resource.clone();
        manifest(&p, &issuer.url(), &resource, &p.path().join("calls.log"));
        match try_gateway(&p, port, &[("ADMIN", "adm1n")]) {
            Ok(gw) => return Some((p, issuer, gw)),
            Err(said) if said.contains("in use") => continue,
            Err(said) => panic!("the gateway exited before listening: {said}"),
        }
    }
    panic!("three free ports were taken before the gateway could bind them")
}

/// [`signed_in`] with the authorization server's environment `issuer_env`.
pub(crate) fn signed_in_with(
    env: &[(&str, &str)],
    issuer_env: &[(&str, &str)],
) -> Option<(Project, Issuer, HttpGateway)> {
    // The port is named in the manifest before the gateway binds it: another test may take
    // it meanwhile, and then the whole setup is made again on another.
    for _ in 0..3 {
        let p = Project::new("");
        let port = free_port();
        let resource = format!("http://127.0.0.1:{port}/mcp");
        let issuer = Issuer::start_with(p.path(), &resource, issuer_env)?;
        manifest(&p, &issuer.url(), &resource, &p.path().join("calls.log"));
        let mut all = vec![("ADMIN", "adm1n")];
        all.extend_from_slice(env);
        match try_gateway(&p, port, &all) {
            Ok(gw) => return Some((p, issuer, gw)),
            Err(said) if said.contains("in use") => continue,
            Err(said) => panic!("the gateway exited before listening: {said}"),
        }
    }
    panic!("three free ports were taken before the gateway could bind them")
}

/// The OAuth client's run: signs in as `login` and does `action`.
pub(crate) fn oauth(py: &Path, url: &str, login: &str, action: &[&str]) -> Child {
    Command::new(py)
        .arg(repo().join("tests/fixtures/oauth_client.py"))
        .args([url, login])
        .args(action)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the OAuth client")
}

/// Its JSON, or its error text.
pub(crate) fn outcome(c: Child) -> Result<Value, String> {
    let out = c.wait_with_output().expect("the OAuth client");
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        return serde_json::from_str(text.trim()).map_err(|e| format!("{e}: {text}"));
    }
    Err(String::from_utf8_lossy(&out.stderr).to_string())
}

/// The audit trail's lines so far.
pub(crate) fn audit(p: &Project) -> Vec<Value> {
    let text = std::fs::read_to_string(p.path().join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Wait until the audit trail has a line that `want` accepts.
fn audited(p: &Project, want: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = audit(p).into_iter().find(|l| want(l)) {
            return l;
        }
        assert!(
            Instant::now() < until,
            "not in the audit trail: {:?}",
            audit(p)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_oauth_client_signs_in_and_each_role_sees_and_calls_only_what_it_is_allowed() {
    let Some(py) = python() else { return };
    let collector = crate::http_server::TestServer::start();
    let Some((p, issuer, gw)) = signed_in(&[("FLUX_TOOLS_OTLP", &collector.base)]) else {
        return;
    };
    let (log, resource) = (p.path().join("calls.log"), issuer.resource.clone());
    let reader = outcome(oauth(&py, &gw.url, "alice", &["list"]));
    let reader = reader.unwrap_or_else(|e| {
        panic!(
            "alice signs in: {e}\n{}",
            gw.stderr.lock().map(|s| s.clone()).unwrap_or_default()
        )
    });
    assert_eq!(reader["tools"], json!(["echo", "publish"]), "{reader}");
    assert_eq!(reader["token_claims"]["aud"], json!(resource), "{reader}");
    let admin = outcome(oauth(&py, &gw.url, "bob", &["list"])).expect("bob signs in");
    assert_eq!(admin["tools"], json!(["delete_repo", "echo", "publish"]));
    // The reader's call of an admin tool is refused as an unknown tool and reaches nothing.
    let refused = outcome(oauth(
        &py,
        &gw.url,
        "alice",
        &["call", "delete_repo", r#"{"x": "r"}"#],
    ));
    let why = refused.expect_err("alice may not delete");
    assert!(why.contains("unknown tool `delete_repo`"), "{why}");
    let done = outcome(oauth(
        &py,
        &gw.url,
        "bob",
        &["call", "delete_repo", r#"{"x": "b"}"#],
    ))
    .expect("bob may");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(calls, "delete_repo b\n", "only bob's call ran");
    let no = audited(&p, |l| {
        l["event"] == "call.refused" && l["subject"] == "alice"
    });
    assert_eq!(
        (no["tenant"].clone(), no["via"].clone()),
        (json!("acme"), json!("jwt"))
    );
    assert!(
        no["reason"]
            .as_str()
            .unwrap_or("")
            .contains("roles do not allow"),
        "{no}"
    );
    audited(&p, |l| {
        l["event"] == "call.allowed" && l["subject"] == "bob" && l["tool"] == "delete_repo"
    });

    an_approval_names_who_asked(&p, &py, &gw);
    // The same trail as OpenTelemetry log records, and the subject on the call's span.
    let records = otel_logs(&collector, |r| {
        r.get("flux_tools.event")
            .is_some_and(|e| e == "approval.answered")
    });
    assert!(
        records
            .iter()
            .any(|r| r.get("flux_tools.subject").is_some_and(|s| s == "alice")),
        "{records:?}"
    );
    let refused = otel_logs(&collector, |r| {
        r.get("flux_tools.event")
            .is_some_and(|e| e == "call.refused")
    });
    assert!(
        refused
            .iter()
            .any(|r| r.get("flux_tools.tool").is_some_and(|t| t == "delete_repo")),
        "{refused:?}"
    );
    // Each session's history record names who made its calls.
    wait_history(&p, "bob");
    let span = bobs_span(&collector);
    assert_eq!(
        span.get("enduser.id").map(String::as_str),
        Some("bob"),
        "{span:?}"
    );
    assert_eq!(
        span.get("flux_tools.tenant").map(String::as_str),
        Some("acme"),
        "{span:?}"
    );
}

/// The reader's approval request names the reader, in `approvals`, on the status page and in
/// the audit trail with who answered.
fn an_approval_names_who_asked(p: &Project, py: &Path, gw: &HttpGateway) {
    // The reader's approval request names the reader, in `approvals` and on the status page.
    let waiting = oauth(py, &gw.url, "alice", &["call", "publish", r#"{"x": "p"}"#]);
    let parked = crate::serve_policies::wait_parked(p);
    assert_eq!(parked["subject"], "alice", "{parked}");
    let table = p.cmd().arg("approvals").output().expect("approvals");
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(table.contains("asked by:  alice (tenant acme)"), "{table}");
    let page = crate::serve_holds::first_snapshot(&gw.addr(), "adm1n");
    assert_eq!(page["approvals"][0]["subject"], "alice", "{page}");
    audited(p, |l| {
        l["event"] == "approval.asked" && l["subject"] == "alice"
    });
    let id = parked["id"].as_str().unwrap_or_default();
    let hash = parked["hash"].as_str().unwrap_or_default();
    crate::serve_policies::approve(p, id, hash);
    let published = outcome(waiting).expect("the approved call");
    assert_eq!(published["result"]["isError"], false, "{published}");
    let answered = audited(p, |l| l["event"] == "approval.answered");
    assert_eq!(answered["subject"], "alice");
    assert_eq!(answered["decision"], "approved");
    assert!(
        answered["by"]
            .as_str()
            .unwrap_or("")
            .starts_with("flux-tools approve"),
        "{answered}"
    );
}

/// Wait until the history has a record of a session of `subject`.
fn wait_history(p: &Project, subject: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    let want = format!(r#""subject":"{subject}""#);
    while !std::fs::read_to_string(p.path().join("history.jsonl"))
        .unwrap_or_default()
        .contains(&want)
    {
        assert!(Instant::now() < until, "no history record names {subject}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

type Attrs = std::collections::HashMap<String, String>;

fn attrs(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Attrs {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

/// The log records the collector got that `want` accepts (waiting up to 10 s for one).
fn otel_logs(c: &crate::http_server::TestServer, want: impl Fn(&Attrs) -> bool) -> Vec<Attrs> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use prost::Message;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<Attrs> = (c.requests_to("/v1/logs").iter())
            .filter_map(|r| ExportLogsServiceRequest::decode(r.raw.as_slice()).ok())
            .flat_map(|r| r.resource_logs)
            .flat_map(|r| r.scope_logs)
            .flat_map(|s| s.log_records)
            .map(|r| attrs(&r.attributes))
            .filter(|a| want(a))
            .collect();
        if !found.is_empty() {
            return found;
        }
        assert!(
            Instant::now() < until,
            "no such log record reached the collector"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The attributes of the span of bob's call of `delete_repo`.
fn bobs_span(c: &crate::http_server::TestServer) -> Attrs {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let found = (c.requests_to("/v1/traces").iter())
            .filter_map(|r| ExportTraceServiceRequest::decode(r.raw.as_slice()).ok())
            .flat_map(|r| r.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .find(|s| s.name == "execute_tool delete_repo");
        if let Some(s) = found {
            return attrs(&s.attributes);
        }
        assert!(
            Instant::now() < until,
            "no span of delete_repo reached the collector"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A token signed with `pem` (ES256 under `kid`), with `claims`.
fn mint(pem: &Path, kid: &str, claims: &Value) -> String {
    let key = std::fs::read(pem).expect("the key");
    let key = jsonwebtoken::EncodingKey::from_ec_pem(&key).expect("an EC key");
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, &key).expect("signed")
}

/// An unsigned token, and one signed with HMAC whose secret is the issuer's public key.
fn forged(claims: &Value, public: &[u8]) -> (String, String) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let none = format!(
        "{}.{}.",
        b64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(claims.to_string())
    );
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let hmac = jsonwebtoken::encode(
        &header,
        claims,
        &jsonwebtoken::EncodingKey::from_secret(public),
    )
    .expect("signed");
    (none, hmac)
}

/// One `initialize` with `token`: the status line and the `WWW-Authenticate` header.
fn knock(addr: &str, token: Option<&str>) -> (String, String) {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Host", addr)];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    let s = crate::serve::raw_post_with(addr, None, body, &headers);
    let (head, _) = crate::serve::raw_response(s);
    let status = head.lines().next().unwrap_or_default().to_string();
    let challenge = (head.lines())
        .find_map(|l| l.strip_prefix("www-authenticate: "))
        .unwrap_or_default()
        .to_string();
    (status, challenge)
}

/// Tokens the gateway must refuse — what each is, the token, its status and the reason the
/// audit trail gives — and a token that is valid in every way (minted with the issuer's key).
#[allow(clippy::type_complexity)]
fn refusals(
    issuer: &Issuer,
    resource: &str,
) -> (
    Vec<(&'static str, String, &'static str, &'static str)>,
    String,
) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    let claims = |aud: &str, exp: u64, scope: &str| json!({"iss": issuer.url(), "sub": "mallory", "aud": aud, "exp": exp, "iat": now, "scope": scope, "org_id": "acme", "roles": ["admin"]});
    let good = claims(resource, now + 600, "mcp:tools");
    let as_key = issuer.keys.with_extension("json.pem");
    let other_key = issuer.keys.with_extension("json.other.pem");
    let kid = issuer.kid();
    let public = std::process::Command::new("openssl")
        .args(["ec", "-pubout", "-in"])
        .arg(&as_key)
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    let (none, hmac) = forged(&good, &public);
    let cases = vec![
        (
            "a wrong audience",
            mint(
                &as_key,
                &kid,
                &claims("https://elsewhere.example/mcp", now + 600, "mcp:tools"),
            ),
            "401",
            "audience",
        ),
        (
            "an expired token",
            mint(&as_key, &kid, &claims(resource, now - 600, "mcp:tools")),
            "401",
            "expired",
        ),
        (
            "another key",
            mint(&other_key, &kid, &good),
            "401",
            "signature does not verify",
        ),
        ("alg none", none, "401", "unsigned (alg none)"),
        ("HMAC with the public key", hmac, "401", "HS256"),
        (
            "a token without the scope",
            mint(&as_key, &kid, &claims(resource, now + 600, "other")),
            "403",
            "lacks scope mcp:tools",
        ),
    ];
    let valid = mint(&as_key, &kid, &good);
    (cases, valid)
}

#[test]
fn tokens_the_gateway_must_refuse_get_401_or_403_and_each_is_named_in_the_audit_trail() {
    let Some((p, issuer, gw)) = signed_in(&[]) else {
        return;
    };
    let resource = issuer.resource.clone();
    let addr = gw.addr();
    let (cases, good) = refusals(&issuer, &resource);
    for (what, token, status, reason) in &cases {
        let (line, challenge) = knock(&addr, Some(token));
        assert!(line.contains(status), "{what}: {line}");
        assert!(
            challenge.contains("resource_metadata=\"http://127.0.0.1:"),
            "{what}: {challenge}"
        );
        let code = if *status == "403" {
            "insufficient_scope"
        } else {
            "invalid_token"
        };
        assert!(
            challenge.contains(&format!("error=\"{code}\"")),
            "{what}: {challenge}"
        );
        audited(&p, |l| {
            l["event"] == "token.rejected"
                && l["reason"].as_str().is_some_and(|r| r.contains(reason))
        });
    }
    // A refusal closes its connection, and says so: a client must not send its retry (with the
    // token it then got) on a connection the gateway is closing.
    let keep = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let req = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{keep}", keep.len());
    std::io::Write::write_all(&mut s, req.as_bytes()).expect("send");
    let mut head = String::new();
    let mut lines = BufReader::new(s);
    while lines.read_line(&mut head).is_ok_and(|n| n > 2) {}
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains(" 401 ") && head.contains("connection: close"),
        "{head}"
    );
    // No token at all: the challenge that sends a client to the metadata, and no audit line.
    let (line, challenge) = knock(&addr, None);
    assert!(
        line.contains("401") && !challenge.contains("error="),
        "{line} {challenge}"
    );
    let meta = std::process::Command::new("curl")
        .args([
            "-s",
            &format!("http://{addr}/.well-known/oauth-protected-resource/mcp"),
        ])
        .output()
        .expect("curl");
    let meta: Value = serde_json::from_slice(&meta.stdout).expect("the metadata");
    assert_eq!(meta["resource"], json!(resource));
    assert_eq!(meta["authorization_servers"], json!([issuer.url()]));
    // A minted token that is valid in every way is let in (the refusals above are the checks').
    let (line, _) = knock(&addr, Some(&good));
    assert!(line.contains("200"), "{line}");
    let trail = std::fs::read_to_string(p.path().join("audit.jsonl")).unwrap_or_default();
    assert_eq!(
        audit(&p)
            .iter()
            .filter(|l| l["event"] == "token.rejected")
            .count(),
        cases.len()
    );
    for (what, token, _, _) in &cases {
        let sig = token.rsplit('.').next().unwrap_or_default();
        assert!(
            sig.is_empty() || !trail.contains(sig),
            "{what}: the token is in the trail"
        );
    }
}

#[test]
fn a_key_rotation_at_the_issuer_is_followed_without_a_restart() {
    let Some(py) = python() else { return };
    let Some((p, mut issuer, gw)) = signed_in(&[]) else {
        return;
    };
    let before = issuer.kid();
    let first = outcome(oauth(
        &py,
        &gw.url,
        "bob",
        &["call", "echo", r#"{"x": "1"}"#],
    ))
    .expect("before");
    assert_eq!(first["result"]["isError"], false);
    issuer.rotate();
    assert_ne!(issuer.kid(), before, "a new key");
    // Past `jwks_refresh` (1 s), a token of the new key makes the gateway fetch the keys again.
    std::thread::sleep(Duration::from_millis(1200));
    let after = outcome(oauth(
        &py,
        &gw.url,
        "bob",
        &["call", "echo", r#"{"x": "2"}"#],
    ))
    .expect("after the rotation");
    assert_eq!(after["result"]["isError"], false, "{after}");
    assert!(
        audit(&p).iter().all(|l| l["event"] != "token.rejected"),
        "{:?}",
        audit(&p)
    );
}

/// One GET of `path` with `token`: the status line and the body.
fn get(addr: &str, path: &str, token: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut all = String::new();
    let _ = s.read_to_string(&mut all);
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

#[test]
fn a_gateway_configured_only_by_its_environment_gives_static_tokens_their_roles() {
    let Some(py) = python() else { return };
    let p = Project::new(
        r#"
[serve.tokens]
team = { token = "${env:READER}", roles = ["reader"] }
ops = { token = "${env:OPS}", roles = ["admin"] }

[roles.reader]
tools = ["who"]

[roles.admin]
tools = ["*"]
ops = ["status", "metrics"]

[tools.who]
kind = "scripted"
effect = "read"
output = { ok = true }

[tools.drop_table]
kind = "scripted"
output = { dropped = true }
"#,
    );
    // No flag at all: the address and the audit trail come from the environment, as a
    // container or a service manager gives them.
    let mut cmd = Command::new(flux_bin());
    cmd.current_dir(p.path()).args(["mcp", "serve"]).envs([
        ("FLUX_TOOLS_HTTP", "127.0.0.1:0"),
        ("FLUX_TOOLS_AUDIT", "audit.jsonl"),
        ("FLUX_TOOLS_TENANT", "ignored-by-tokens"),
        ("READER", "r-token"),
        ("OPS", "o-token"),
    ]);
    let gw = HttpGateway::spawned(cmd);
    let as_token = |t: &str| vec!["--http".to_string(), gw.url.clone(), "-".into(), t.into()];
    let listed = |t: &str| {
        let l = crate::serve::run_client(&py, &as_token(t), &["list"]);
        let mut names: Vec<String> = (l.as_array().cloned().unwrap_or_default().iter())
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    };
    assert_eq!(listed("r-token"), ["who"]);
    assert_eq!(listed("o-token"), ["drop_table", "who"]);
    crate::serve::run_client(&py, &as_token("r-token"), &["call", "who", "{}"]);
    crate::serve::run_client(&py, &as_token("o-token"), &["call", "who", "{}"]);
    let addr = gw.addr();
    // `/metrics` and the whole status stream need a role that grants them.
    let (line, _) = get(&addr, "/metrics", "r-token");
    assert!(line.contains("403"), "{line}");
    let (line, body) = get(&addr, "/metrics", "o-token");
    assert!(
        line.contains("200") && body.contains("flux_tools"),
        "{line}"
    );
    audited(&p, |l| {
        l["event"] == "ops.refused" && l["tenant"] == "team" && l["path"] == "/metrics"
    });
    let mine = crate::serve_holds::first_snapshot(&addr, "r-token");
    let all = crate::serve_holds::first_snapshot(&addr, "o-token");
    let tenants = |s: &Value| {
        let mut t: Vec<String> = (s["recent"].as_array().cloned().unwrap_or_default().iter())
            .filter_map(|c| c["tenant"].as_str().map(str::to_string))
            .collect();
        t.sort();
        t.dedup();
        t
    };
    assert_eq!(tenants(&mine), ["team"], "{mine}");
    assert_eq!(tenants(&all), ["ops", "team"], "{all}");
}

#[test]
fn both_python_sdks_oauth_clients_sign_in_from_the_gateways_metadata() {
    // The project's folder and the issuer live as long as the test.
    let Some((_p, _issuer, gw)) = signed_in(&[]) else {
        return;
    };
    for (version, venv) in [("1.x", "target/sqlite-venv"), ("2.x", "target/mcp2-venv")] {
        let py = repo().join(venv).join("bin/python");
        if !py.exists() {
            crate::common::skip(
                &format!(
                    "the Python mcp SDK {version} is not installed at {}",
                    py.display()
                ),
                "bash .ci/run installs both",
            );
            continue;
        }
        let listed = outcome(oauth(&py, &gw.url, "alice", &["list"]))
            .unwrap_or_else(|e| panic!("SDK {version}: {e}"));
        assert_eq!(listed["tools"], json!(["echo", "publish"]), "SDK {version}");
        let called = outcome(oauth(
            &py,
            &gw.url,
            "bob",
            &["call", "echo", r#"{"x": "hi"}"#],
        ))
        .unwrap_or_else(|e| panic!("SDK {version}: {e}"));
        assert_eq!(
            called["result"]["isError"], false,
            "SDK {version}: {called}"
        );
    }
}
