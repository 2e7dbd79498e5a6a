//! flux-tools as the OAuth client of an upstream MCP server that wants a token: the server is
//! our own gateway as a resource server (`[serve.auth]`), in front of the real authorization
//! server `oidc-provider` (`tests/fixtures/oidc/provider.mjs`, tokens living 6 s here). The
//! "browser" of `mcp login` is `tests/fixtures/browser.py`, which follows the sign-in's
//! redirects as a person who approves at once would.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::common::{repo, Project};
use crate::serve_auth::{signed_in_with, Issuer};

/// How long the authorization server's access tokens live.
const TTL: u64 = 6;

/// The client's project: `gw` (a person signs in) and `gwm` (client credentials) on the gateway
/// at `url`, and its own token folder.
fn client(url: &str) -> Project {
    Project::new(&format!(
        "[mcp_servers.gw]\nurl = \"{url}\"\nauth = \"oauth\"\nwhole = true\nprefix = \"\"\nrequires_approval = false\n\n\
         [mcp_servers.gwm]\nurl = \"{url}\"\nauth = \"client_credentials\"\nclient_id = \"machine\"\nclient_secret = \"${{env:MACHINE_SECRET}}\"\nscopes = [\"mcp:tools\"]\n\n\
         [tools.machine_echo]\nkind = \"mcp\"\nserver = \"gwm\"\ntool = \"echo\"\neffect = \"read\"\n"
    ))
}

/// `flux-tools ARGS` in the client's project (its tokens in `state/`), `stdin` fed to it.
fn flux(c: &Project, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = std::process::Command::new(crate::serve::flux_bin())
        .current_dir(c.path())
        .args(args)
        .env("XDG_STATE_HOME", c.path().join("state"))
        .env("BROWSER", repo().join("tests/fixtures/browser.py"))
        .env("MACHINE_SECRET", "m4chine-s3cret")
        .env_remove("FLUX_TOOLS_MANIFEST")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start flux-tools");
    let _ = child
        .stdin
        .take()
        .map(|mut s| s.write_all(stdin.as_bytes()));
    child.wait_with_output().expect("flux-tools")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `n` echo calls of `tool`: each call's status and output.
fn echoes(c: &Project, tool: &str, calls: usize) -> (Vec<(String, String)>, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let batch: String = (0..calls)
        .map(|i| format!("{{\"tool\":\"{tool}\",\"args\":{{\"x\":\"m{i}\"}}}}\n"))
        .collect();
    let out = flux(
        c,
        &[
            "run",
            "-",
            "--format",
            "jsonl",
            "--max-concurrent-tools",
            "64",
            // Every file a run can write, for the leak check to read.
            "--history",
            "history.jsonl",
            "--journal",
            &format!("journal-{n}.jsonl"),
            "--trace",
            &format!("trace-{n}.json"),
            "--record",
            &format!("cassette-{n}.json"),
        ],
        &batch,
    );
    let all = text(&out);
    let rows = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            let output = match &v["output"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let error = v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (
                v["status"].as_str().unwrap_or_default().to_string(),
                format!("{output}{error}"),
            )
        })
        .collect();
    (rows, all)
}

/// The one token file in the client's token folder, and its JSON.
fn token_file(c: &Project, name: &str) -> (PathBuf, Value) {
    let dir = c.path().join("state/flux-tools/oauth");
    let path = std::fs::read_dir(&dir)
        .expect("the token folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let f = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
            f.starts_with(&format!("{name}-")) && f.ends_with(".json")
        })
        .unwrap_or_else(|| panic!("no token file of {name} in {}", dir.display()));
    let v = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    (path, v)
}

/// Change the kept token file with `edit` (it stays 0600: written in place).
fn edit(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).expect("JSON")).expect("write");
}

/// The secrets a leak would show: the access and refresh tokens kept for `name`.
fn secrets(c: &Project, name: &str) -> Vec<String> {
    let (_, v) = token_file(c, name);
    let r = &v["credentials"]["token_response"];
    [&r["access_token"], &r["refresh_token"]]
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect()
}

fn setup() -> Option<(Project, Issuer, crate::serve::HttpGateway)> {
    let clients = r#"[{"client_id": "machine", "client_secret": "m4chine-s3cret", "grant_types": ["client_credentials"], "response_types": [], "redirect_uris": [], "token_endpoint_auth_method": "client_secret_basic", "scope": "mcp:tools"}]"#;
    let ttl = TTL.to_string();
    signed_in_with(&[], &[("OIDC_TTL", &ttl), ("OIDC_CLIENTS", clients)])
}

#[test]
fn a_person_signs_in_once_and_every_face_calls_with_a_token_renewed_once_per_expiry() {
    let Some((_gw_project, issuer, gw)) = setup() else {
        return;
    };
    let c = client(&gw.url);
    let mut said = String::new();
    // Before a sign-in: the status says so, and a call says what to run.
    let status = flux(&c, &["mcp", "login", "--status"], "");
    assert!(
        text(&status).contains("gw\tnot signed in: run `flux-tools mcp login gw`"),
        "{}",
        text(&status)
    );
    let (rows, all) = echoes(&c, "echo", 1);
    assert!(
        all.contains("is not signed in: run `flux-tools mcp login gw`"),
        "{rows:?} {all}"
    );
    // The sign-in: the browser follows the printed URL through the authorization server.
    let login = flux(&c, &["mcp", "login", "gw"], "");
    said.push_str(&text(&login));
    assert!(
        login.status.success() && text(&login).contains("Signed in to `gw` (scopes: "),
        "{}",
        text(&login)
    );
    let (path, kept) = token_file(&c, "gw");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        kept["credentials"]["token_response"]["refresh_token"].is_string(),
        "{kept}"
    );
    assert_eq!(issuer.granted("authorization_code"), 1);
    // Every face: a run, the tools offered to a model, an import.
    let (rows, all) = echoes(&c, "echo", 3);
    said.push_str(&all);
    assert!(
        rows.iter()
            .all(|(s, o)| s == "ok" && o.starts_with("echo m")),
        "{rows:?} {all}"
    );
    let offered = flux(&c, &["tools", "--emit", "openai"], "");
    said.push_str(&text(&offered));
    assert!(
        String::from_utf8_lossy(&offered.stdout).contains("\"echo\""),
        "{}",
        text(&offered)
    );
    let import = flux(&c, &["mcp", "import", "gw"], "");
    said.push_str(&text(&import));
    assert!(
        String::from_utf8_lossy(&import.stdout).contains("[tools.\"echo\"]"),
        "{}",
        text(&import)
    );
    said.push_str(&python_face(&c));
    let status = flux(&c, &["mcp", "login", "--status"], "");
    assert!(
        text(&status).contains("gw\tsigned in; expires in ")
            && text(&status).contains("refreshable"),
        "{}",
        text(&status)
    );
    let mut leaks = secrets(&c, "gw");
    renewals(&c, &issuer, &path, &mut said, &mut leaks);
    // No token is ever shown: not in anything said, nor in any file of the project.
    let files: Vec<String> = crate::common::files_under(c.path())
        .iter()
        .filter(|p| !p.starts_with(c.path().join("state")))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let written: Vec<String> = crate::common::files_under(c.path())
        .iter()
        .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().to_string()))
        .collect();
    for kind in ["history.jsonl", "journal-", "trace-", "cassette-"] {
        assert!(
            written.iter().any(|f| f.starts_with(kind)),
            "no {kind} file written: {written:?}"
        );
    }
    for t in &leaks {
        assert!(
            t.len() > 8 && !said.contains(t.as_str()),
            "a token was shown"
        );
        assert!(
            files.iter().all(|f| !f.contains(t.as_str())),
            "a token is in a file of the project"
        );
    }
    revoked(&c, &path, issuer);
}

/// Past the renewal point, two runs at once make one refresh; a token the server refuses is
/// renewed once; client credentials take a token of their own. What they said and the tokens
/// they used are added to `said` and `leaks`.
fn renewals(c: &Project, issuer: &Issuer, path: &Path, said: &mut String, leaks: &mut Vec<String>) {
    // Past the renewal point: two runs at once, 25 calls each, make one refresh between them.
    std::thread::sleep(Duration::from_secs(TTL / 2 + 1));
    let runs: Vec<_> = std::thread::scope(|s| {
        let started: Vec<_> = (0..2).map(|_| s.spawn(|| echoes(c, "echo", 25))).collect();
        started
            .into_iter()
            .map(|r| r.join().expect("a run"))
            .collect()
    });
    for (rows, all) in &runs {
        said.push_str(all);
        assert!(
            rows.len() == 25 && rows.iter().all(|(s, _)| s == "ok"),
            "{rows:?} {all}"
        );
    }
    assert_eq!(
        issuer.granted("refresh_token"),
        1,
        "one refresh for 50 calls in two processes"
    );
    leaks.extend(secrets(c, "gw"));
    // A token the server refuses (401): renewed once, the call made.
    edit(path, |v| {
        v["credentials"]["token_response"]["access_token"] = "not-a-token".into()
    });
    let (rows, all) = echoes(c, "echo", 2);
    said.push_str(&all);
    assert!(rows.iter().all(|(s, _)| s == "ok"), "{rows:?} {all}");
    assert_eq!(issuer.granted("refresh_token"), 2);
    leaks.extend(secrets(c, "gw"));
    // Client credentials: no person, a token of its own (`tools --emit` took one already,
    // expired by now), one for the run's calls.
    let before = issuer.granted("client_credentials");
    let (rows, all) = echoes(c, "machine_echo", 8);
    said.push_str(&all);
    assert!(
        rows.iter()
            .all(|(s, o)| s == "ok" && o.starts_with("echo m")),
        "{rows:?} {all}"
    );
    assert_eq!(issuer.granted("client_credentials"), before + 1);
    leaks.extend(secrets(c, "gwm"));
}

/// The authorization server forgets what it issued (restarted with a new key): an expired
/// token's refresh is refused, and the call says to sign in again.
fn revoked(c: &Project, path: &Path, mut issuer: Issuer) {
    issuer.rotate();
    edit(path, |v| v["credentials"]["token_received_at"] = 0.into());
    let (rows, all) = echoes(c, "echo", 1);
    assert!(rows.iter().all(|(s, _)| s != "ok"), "{rows:?}");
    // It registered itself at sign-in, and the restarted server knows neither the client nor
    // the refresh token.
    assert!(
        all.contains("(the sign-in has ended): run `flux-tools mcp login gw`"),
        "{all}"
    );
    let out = flux(c, &["mcp", "logout", "gw"], "");
    assert!(
        text(&out).contains("Signed out of `gw`") && !path.exists(),
        "{}",
        text(&out)
    );
}

/// The Python package's face (`flux_tools.tools`, `flux_tools.run`) with the same sign-in:
/// what it printed.
fn python_face(c: &Project) -> String {
    let bin = crate::serve::flux_bin();
    let dir = bin
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let path = format!("{dir}:{}", std::env::var("PATH").unwrap_or_default());
    let script = "import flux_tools, json\n\
        offered = [t['function']['name'] for t in flux_tools.tools('openai')]\n\
        doc = flux_tools.run({'calls': [{'tool': 'echo', 'args': {'x': 'py'}}]})\n\
        print(json.dumps({'offered': offered, 'output': doc['results'][0]['output']}))\n";
    let out = std::process::Command::new("python3")
        .current_dir(c.path())
        .args(["-c", script])
        .env("PYTHONPATH", repo().join("python/src"))
        .env("PATH", path)
        .env("XDG_STATE_HOME", c.path().join("state"))
        .env_remove("FLUX_TOOLS_MANIFEST")
        .output()
        .expect("python3");
    let said = text(&out);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    let offered = doc["offered"].as_array();
    assert!(
        offered.is_some_and(|o| o.iter().any(|t| t == "echo")),
        "{doc}"
    );
    assert_eq!(doc["output"], "echo py", "{doc}");
    said
}

/// The front gateway's manifest: `[serve.auth]` for its own callers, and the upstream gateway
/// at `upstream` served whole, each caller's calls carrying the caller's identity, its reads
/// cached.
fn front(issuer: &str, resource: &str, upstream: &str) -> String {
    format!(
        "[serve.auth]\nissuer = \"{issuer}\"\nresource = \"{resource}\"\nscopes = [\"mcp:tools\"]\ntenant_claim = \"org_id\"\n\n\
         [mcp_servers.up]\nurl = \"{upstream}\"\nauth = \"client_credentials\"\nidentity = \"caller\"\nclient_id = \"gateway\"\nclient_secret = \"${{env:GATEWAY_SECRET}}\"\nscopes = [\"mcp:tools\"]\nwhole = true\nprefix = \"\"\nrequires_approval = false\ncache = \"5m\"\n"
    )
}

#[test]
fn a_gateway_calls_upstream_as_each_caller_by_token_exchange_and_never_with_anothers_token() {
    let Some(py) = crate::serve::python() else {
        return;
    };
    let front_port = crate::serve_auth::free_port();
    let front_resource = format!("http://127.0.0.1:{front_port}/mcp");
    let clients = r#"[{"client_id": "gateway", "client_secret": "g4teway-s3cret", "grant_types": ["client_credentials", "urn:ietf:params:oauth:grant-type:token-exchange"], "response_types": [], "redirect_uris": [], "token_endpoint_auth_method": "client_secret_basic", "scope": "mcp:tools"}]"#;
    // The upstream gateway's resource and the front's, both of one authorization server.
    let Some((up, issuer, upstream)) =
        crate::serve_auth::signed_in_resources(&front_resource, clients)
    else {
        return;
    };
    let f = Project::new(&front(&issuer.url(), &front_resource, &upstream.url));
    let gw =
        crate::serve_auth::try_gateway(&f, front_port, &[("GATEWAY_SECRET", "g4teway-s3cret")])
            .unwrap_or_else(|e| panic!("the front gateway: {e}"));
    let call = |who: &str, x: &str| {
        crate::serve_auth::outcome(crate::serve_auth::oauth(
            &py,
            &gw.url,
            who,
            &["call", "echo", &format!("{{\"x\": \"{x}\"}}")],
        ))
        .unwrap_or_else(|e| panic!("{who} calls: {e}"))
    };
    for (who, x) in [
        ("alice", "a1"),
        ("bob", "b1"),
        ("alice", "a2"),
        ("bob", "b2"),
    ] {
        let r = call(who, x);
        assert_eq!(r["result"]["isError"], false, "{who}: {r}");
        assert_eq!(r["token_claims"]["sub"], who, "{r}");
    }
    // The upstream saw each call (made one after another) as its caller's.
    let subjects: Vec<String> = crate::serve_auth::audit(&up)
        .iter()
        .filter(|l| l["event"] == "call.allowed" && l["tool"] == "echo")
        .map(|l| l["subject"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(subjects, ["alice", "bob", "alice", "bob"]);
    let log = std::fs::read_to_string(up.path().join("calls.log")).unwrap_or_default();
    assert_eq!(log, "echo a1\necho b1\necho a2\necho b2\n");
    // A cached read is its caller's own: alice's second read of `s` is her entry, bob's
    // first is fetched with his token, never answered from what alice's token read.
    for who in ["alice", "alice", "bob", "bob"] {
        assert_eq!(call(who, "s")["result"]["isError"], false, "{who}");
    }
    let log = std::fs::read_to_string(up.path().join("calls.log")).unwrap_or_default();
    assert_eq!(log.matches("echo s\n").count(), 2, "one read each: {log}");
    let subjects: Vec<String> = crate::serve_auth::audit(&up)
        .iter()
        .filter(|l| l["event"] == "call.allowed" && l["tool"] == "echo")
        .map(|l| l["subject"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(subjects[4..], ["alice", "bob"]);
    // So is an idempotency key: bob's `k` is not alice's, and his call is made for him.
    for who in ["alice", "bob"] {
        let args = ["call", "echo", r#"{"x": "k"}"#, "k"];
        let r = crate::serve_auth::outcome(crate::serve_auth::oauth(&py, &gw.url, who, &args));
        let r = r.unwrap_or_else(|e| panic!("{who} calls: {e}"));
        assert_eq!(r["result"]["isError"], false, "{who}: {r}");
    }
    let log = std::fs::read_to_string(up.path().join("calls.log")).unwrap_or_default();
    assert_eq!(log.matches("echo k\n").count(), 2, "one call each: {log}");
    // One exchange per caller: each caller's token is kept for its own calls.
    assert_eq!(issuer.granted("exchange for alice"), 1);
    assert_eq!(issuer.granted("exchange for bob"), 1);
    // A run is no gateway caller: it cannot call as one.
    let r = f
        .cmd()
        .env("GATEWAY_SECRET", "g4teway-s3cret")
        .args(["run", "-", "--format", "jsonl"])
        .write_stdin("{\"tool\":\"echo\",\"args\":{\"x\":\"r\"}}\n")
        .output()
        .expect("run");
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("only a gateway caller with an access token"),
        "{out}"
    );
}
