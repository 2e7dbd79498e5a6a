//! The gateway's one door (issue 67): the defects that lived in the seams between its doors,
//! each tried as a client would — a 2026-07-28 SDK client reading resources and prompts, URIs
//! written to slip past a policy, a tenant's parked call beside another tenant's work, a read
//! sent right after a write on one wire, protocol faults, and a same-origin browser request.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::serve::{
    client, finish, log_lines, python, raw_post_with, raw_response, sdk2, HttpGateway,
};
use crate::serve_holds::StdioGateway;
use crate::serve_whole::{everything_whole, own_whole, when};

/// What SDK 2.x in its default mode gets of everything the gateway serves, at `how` (a URL,
/// or `--` and a command).
fn everything_as_2026_client(py: &Path, how: &[String]) -> Value {
    let mut cmd = Command::new(py);
    cmd.arg(repo().join("tests/fixtures/mcp_whole2.py"))
        .args(how)
        .args(["ev_args-prompt", r#"{"city": "Paris"}"#]);
    printed(&mut cmd)
}

/// What `cmd` (a client fixture) printed: one JSON document; it must succeed.
pub(crate) fn printed(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("the client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn gateway_cmd(p: &Project) -> Vec<String> {
    let bin = crate::serve::flux_bin().display().to_string();
    let manifest = p.path().join("tools.toml").display().to_string();
    ["--", &bin, "--manifest", &manifest, "mcp", "serve"]
        .map(String::from)
        .to_vec()
}

#[test]
fn a_2026_client_gets_resources_prompts_and_completions_over_stdio_and_http() {
    let Some(py) = sdk2() else { return };
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    for (face, how) in [("stdio", gateway_cmd(&p)), ("http", vec![gw.url.clone()])] {
        let got = everything_as_2026_client(&py, &how);
        assert_eq!(got["version"], "2026-07-28", "{face}: {got}");
        let errors = got["errors"].as_object().cloned().unwrap_or_default();
        // `ping` left the protocol at 2026-07-28 (the SDK itself says so); nothing else fails.
        let failed: Vec<&String> = errors.keys().filter(|k| *k != "ping").collect();
        assert!(failed.is_empty(), "{face}: {errors:?}");
        assert!(
            got["tools"].as_u64().is_some_and(|n| n > 5),
            "{face}: {got}"
        );
        let resources = got["resources"].as_array().cloned().unwrap_or_default();
        assert!(
            resources
                .iter()
                .all(|u| u.as_str().is_some_and(|u| u.starts_with("ev+demo://"))),
            "{face}: {got}"
        );
        assert!(
            !resources.is_empty() && got["templates"].as_array().is_some_and(|t| !t.is_empty())
        );
        assert!(
            got["read"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{face}"
        );
        assert!(
            got["prompts"].to_string().contains("ev_args-prompt"),
            "{face}"
        );
        assert!(got["prompt"].to_string().contains("Paris"), "{face}: {got}");
        assert!(got["complete"].is_array(), "{face}: {got}");
    }
}

/// One `resources/read` over a raw stdio wire: its `result` or its `error`.
fn read(gw: &mut StdioGateway, id: u64, uri: &str) -> Value {
    let msg =
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}});
    gw.send(&msg.to_string());
    answer(gw, id)
}

/// The answer to request `id` (skipping anything else said meanwhile).
fn answer(gw: &StdioGateway, id: u64) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let m = gw.recv(left).unwrap_or_else(|| panic!("no answer to {id}"));
        if m["id"] == id {
            return m;
        }
    }
}

#[test]
fn a_resource_policy_sees_the_uri_the_server_reads() {
    let Some(manifest) = everything_whole(
        "ev",
        "deny = [\"demo://resource/dynamic/text/1\", \"demo://resource/static/document/s*\"]",
    ) else {
        return;
    };
    let p = Project::new(&manifest);
    let mut gw = StdioGateway::start_speaking(&p, "2025-11-25");
    // What is served reads as the server gives it.
    let ok = read(&mut gw, 1, "ev+demo://resource/dynamic/text/2");
    let text = ok["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("Resource 2:"), "{ok}");
    assert_eq!(
        ok["result"]["contents"][0]["uri"],
        "ev+demo://resource/dynamic/text/2"
    );
    // The denied resource, however it is written, is not read.
    let attacks = [
        "ev+demo://resource/dynamic/text/01",
        "ev+demo://resource/dynamic/text/+1",
        "ev+demo://resource/dynamic/text/1.0",
        "ev+demo://resource/dynamic/text/%31",
        "ev+DEMO://resource/dynamic/text/1",
        "ev+demo://RESOURCE/dynamic/text/1",
        "ev+demo://resource/static/../dynamic/text/1",
        "ev+demo://resource/static/%2e%2e/dynamic/text/1",
        "ev+demo://resource/static/document/../../dynamic/text/./1",
        "ev+demo://resource/static/document/%73tartup.md",
        // Not listed, nor under a template: never forwarded.
        "ev+http://169.254.169.254/latest/meta-data/",
        "ev+demo://resource/static/document/not-there.md",
        "ev+file:///etc/passwd",
    ];
    for (i, uri) in attacks.iter().enumerate() {
        let r = read(&mut gw, 10 + i as u64, uri);
        assert!(r.get("result").is_none(), "{uri} was read: {r}");
        let code = r["error"]["code"].as_i64();
        assert!(matches!(code, Some(-32602 | -32002)), "{uri}: {r}");
        let said = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            said.starts_with("no resource `") || said.contains("is not taken"),
            "{uri}: the gateway's own refusal, not the server's: {r}"
        );
    }
}

#[test]
fn protocol_faults_get_their_own_codes_and_a_long_name_is_not_echoed_whole() {
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let mut gw = StdioGateway::start_speaking(&p, "2025-11-25");
    let huge = "p".repeat(100_000);
    let asks = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": 5}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "ev_no-such-prompt"}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": format!("ev_{huge}")}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": format!("ev+demo://resource/{huge}")}}),
    ];
    for ask in asks {
        gw.send(&ask.to_string());
        let id = ask["id"].as_u64().unwrap_or_default();
        let r = answer(&gw, id);
        assert_eq!(r["error"]["code"], -32602, "{id}: {}", cut(&r));
        let said = r["error"]["message"].as_str().unwrap_or_default();
        assert!(said.len() < 1000, "{id}: {} bytes echoed", said.len());
    }
    // Tasks' own list is served over stdio as over HTTP.
    gw.send(r#"{"jsonrpc":"2.0","id":6,"method":"tasks/list","params":{}}"#);
    let r = answer(&gw, 6);
    assert!(r["result"]["tasks"].is_array(), "{r}");
}

fn cut(v: &Value) -> String {
    v.to_string().chars().take(400).collect()
}

/// Over one stdio wire, a write of 600 ms and then `method` with `params` (a read of the same
/// server), three times: the read's answer has `field`, and the server logged `started`
/// (`read-start`, `prompt-start`) only once the write before it had ended.
fn a_read_after_a_write_waits_for_it(method: &str, params: Value, (field, started): (&str, &str)) {
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let mut gw = StdioGateway::start(&p, &[]);
    for round in 0..3 {
        let tag = format!("w{round}");
        gw.call(100 + round, "own_write", json!({"ms": 600, "tag": tag}));
        let msg = json!({"jsonrpc": "2.0", "id": 200 + round, "method": method, "params": params});
        gw.send(&msg.to_string());
        let answers: Vec<Value> = (0..2).map(|_| next_answer(&gw)).collect();
        let read = answers.iter().find(|a| a["id"] == 200 + round);
        assert!(
            read.is_some_and(|r| r["result"][field].is_array()),
            "{answers:?}"
        );
        let lines = log_lines(&log);
        let reads: Vec<u128> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(started))
            .filter_map(|r| r.trim().parse().ok())
            .collect();
        let read_at = reads.last().copied().unwrap_or_default();
        assert!(
            read_at >= when(&lines, &format!("end {tag}")),
            "round {round}: {lines:?}"
        );
    }
}

#[test]
fn a_resource_read_sent_after_a_write_on_one_wire_waits_for_it() {
    let read = json!({"uri": "own+note://board"});
    a_read_after_a_write_waits_for_it("resources/read", read, ("contents", "read-start "));
}

#[test]
fn a_prompt_get_sent_after_a_write_on_one_wire_waits_for_it() {
    let get = json!({"name": "own_greet"});
    a_read_after_a_write_waits_for_it("prompts/get", get, ("messages", "prompt-start "));
}

/// The next answer to a request (notifications skipped).
fn next_answer(gw: &StdioGateway) -> Value {
    loop {
        let m = gw
            .recv(Duration::from_secs(30))
            .expect("an answer within 30 s");
        if m.get("id").is_some() {
            return m;
        }
    }
}

#[test]
fn one_tenants_parked_write_holds_nothing_of_another_tenant() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("calls.log");
    let tool = |name: &str, effect: &str, approval: bool| {
        format!(
            "[tools.{name}]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"-c\", \"echo \\\"{name} $1\\\" >> '{log}'; echo '{{\\\"ok\\\": true}}'\", \"w\", \"{{tag}}\"]\neffect = \"{effect}\"\nbackend = \"orders-db\"\nrequires_approval = {approval}\n[tools.{name}.args]\ntag = {{ type = \"string\", required = true }}\n\n",
            log = log.display()
        )
    };
    p.write(
        "tools.toml",
        &format!(
            "[serve]\napproval_timeout = \"8s\"\n[serve.tokens]\nacme = \"${{env:ACME}}\"\nbeta = \"${{env:BETA}}\"\n[concurrency]\nhazards = \"backend\"\n\n{}{}{}",
            tool("refund", "write", true),
            tool("note", "write", false),
            tool("lookup", "read", false),
        ),
    );
    let gw = HttpGateway::start(
        &p,
        &["--lane-store", "memory"],
        &[("ACME", "tok-a"), ("BETA", "tok-b")],
    );
    let as_tenant = |token: &str| {
        vec![
            "--http".to_string(),
            gw.url.clone(),
            "-".into(),
            token.into(),
        ]
    };
    // Beta's write waits for an approval nobody gives (8 s).
    let parked = client(
        &py,
        &as_tenant("tok-b"),
        &["call", "refund", r#"{"tag": "b1"}"#],
    );
    let until = Instant::now() + Duration::from_secs(20);
    while parked_now(&p) == 0 {
        assert!(Instant::now() < until, "beta's call never parked");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Acme reads and writes the same backend meanwhile, at once.
    let t = Instant::now();
    let read = crate::serve::run_client(
        &py,
        &as_tenant("tok-a"),
        &["call", "lookup", r#"{"tag": "a1"}"#],
    );
    let write = crate::serve::run_client(
        &py,
        &as_tenant("tok-a"),
        &["call", "note", r#"{"tag": "a2"}"#],
    );
    let took = t.elapsed();
    assert_eq!(read["isError"], false, "{read}");
    assert_eq!(write["isError"], false, "{write}");
    assert!(
        took < Duration::from_secs(6),
        "acme waited {took:?} behind beta's approval"
    );
    assert_eq!(log_lines(&log), ["lookup a1", "note a2"]);
    let b = finish(parked);
    let text = b["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("nobody approved it"), "{b}");
}

/// How many calls `flux-tools approvals` lists for the gateway in `p`.
fn parked_now(p: &Project) -> usize {
    let out = p
        .cmd()
        .args(["approvals", "--format", "json"])
        .output()
        .expect("approvals");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array().map_or(0, Vec::len)
}

#[test]
fn a_same_origin_request_on_an_allowed_host_is_served_and_another_origin_is_not() {
    let p = Project::new("[tools.who]\nkind = \"scripted\"\neffect = \"read\"\n");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let port = gw.addr().rsplit(':').next().unwrap_or_default().to_string();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}"#;
    let host = format!("localhost:{port}");
    let same = format!("http://localhost:{port}");
    let (head, body) = raw_response(raw_post_with(
        &gw.addr(),
        None,
        init,
        &[("Host", &host), ("Origin", &same)],
    ));
    assert!(head.starts_with("http/1.1 200"), "{head}\n{body}");
    for (host, origin) in [
        (host.as_str(), "http://evil.example"),
        (host.as_str(), "http://localhost:1"),
        ("evil.example", "http://evil.example"),
    ] {
        let (head, _) = raw_response(raw_post_with(
            &gw.addr(),
            None,
            init,
            &[("Host", host), ("Origin", origin)],
        ));
        assert!(head.starts_with("http/1.1 403"), "{host} {origin}: {head}");
    }
}

#[test]
fn resources_a_tool_names_are_named_as_served_and_read_here() {
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let mut gw = StdioGateway::start_speaking(&p, "2025-11-25");
    gw.call(1, "ev_get-resource-links", json!({"count": 2}));
    let links = answer(&gw, 1);
    let blocks = links["result"]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let uris: Vec<String> = blocks
        .iter()
        .filter(|b| b["type"] == "resource_link")
        .filter_map(|b| b["uri"].as_str().map(str::to_string))
        .collect();
    assert_eq!(uris.len(), 2, "{links}");
    for (i, uri) in uris.iter().enumerate() {
        assert!(uri.starts_with("ev+demo://"), "{uri}");
        let r = read(&mut gw, 10 + i as u64, uri);
        assert!(r["result"]["contents"].is_array(), "{uri}: {r}");
    }
    gw.call(2, "ev_get-resource-reference", json!({"resourceId": 2}));
    let embedded = answer(&gw, 2);
    let uri = (embedded["result"]["content"]
        .as_array()
        .into_iter()
        .flatten())
    .find(|b| b["type"] == "resource")
    .and_then(|b| b["resource"]["uri"].as_str())
    .unwrap_or_default()
    .to_string();
    assert_eq!(uri, "ev+demo://resource/dynamic/text/2", "{embedded}");
}

/// The audit trail's lines.
fn trail(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn every_route_to_an_upstream_is_in_the_audit_trail_under_the_name_the_client_used() {
    let Some(manifest) = everything_whole(
        "ev",
        "deny = [\"get-env\", \"args-prompt\", \"demo://resource/dynamic/text/1\"]",
    ) else {
        return;
    };
    let p = Project::new(&manifest);
    let audit = p.path().join("audit.jsonl");
    let path = audit.display().to_string();
    let mut gw = StdioGateway::start_in(p.path(), &[], &["--audit", &path]);
    gw.call(1, "ev_get-sum", json!({"a": 1, "b": 2}));
    gw.call(2, "ev_get-env", json!({}));
    let _ = (next_answer(&gw), next_answer(&gw));
    let _ = read(&mut gw, 3, "ev+demo://resource/dynamic/text/2");
    let _ = read(&mut gw, 4, "ev+demo://resource/static/../dynamic/text/1");
    gw.send(r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"ev_args-prompt","arguments":{"city":"x"}}}"#);
    gw.send(
        r#"{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"ev_simple-prompt"}}"#,
    );
    gw.send(r#"{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{"uri":"ev+demo://resource/dynamic/text/01"}}"#);
    for _ in 5..=7 {
        let _ = next_answer(&gw);
    }
    drop(gw);
    let lines = trail(&audit);
    let has = |event: &str, key: &str, value: &str| {
        lines.iter().any(|l| l["event"] == event && l[key] == value)
    };
    for (event, key, value) in [
        ("call.allowed", "tool", "ev_get-sum"),
        ("call.refused", "tool", "ev_get-env"),
        (
            "call.allowed",
            "resource",
            "ev+demo://resource/dynamic/text/2",
        ),
        (
            "call.refused",
            "resource",
            "ev+demo://resource/static/../dynamic/text/1",
        ),
        ("call.refused", "prompt", "ev_args-prompt"),
        ("call.allowed", "prompt", "ev_simple-prompt"),
        (
            "call.refused",
            "resource",
            "ev+demo://resource/dynamic/text/01",
        ),
    ] {
        assert!(
            has(event, key, value),
            "no {event} {key}={value} in {lines:#?}"
        );
    }
    // No line names a tool by its name in the manifest (`ev.get-sum`).
    assert!(
        !lines
            .iter()
            .any(|l| l["tool"].as_str().is_some_and(|t| t.contains('.'))),
        "{lines:#?}"
    );
}

#[test]
fn validate_says_when_a_roles_tool_glob_is_written_for_manifest_names_or_matches_nothing() {
    let p = Project::new(
        "[tools.search]\nkind = \"scripted\"\neffect = \"read\"\n\n[serve.tokens]\nacme = { token = \"${env:ACME}\", roles = [\"reader\"] }\n\n[roles.reader]\ntools = [\"search\", \"serch_*\", \"email.send\"]\n",
    );
    let out = p.cmd().arg("validate").output().expect("validate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tool glob `serch_*` matches no tool of the manifest"),
        "{err}"
    );
    assert!(err.contains("write `email_send`"), "{err}");
    assert!(!err.contains("`search` matches no tool"), "{err}");
}

#[test]
fn a_2026_client_follows_a_resource_with_subscriptions_listen_over_stdio_and_http() {
    let Some(py) = sdk2() else { return };
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let uri = "ev+demo://resource/dynamic/text/1";
    for (face, how) in [("stdio", gateway_cmd(&p)), ("http", vec![gw.url.clone()])] {
        let mut cmd = Command::new(&py);
        cmd.arg(repo().join("tests/fixtures/mcp_listen2.py"))
            .args(&how)
            .args([uri, "ev_toggle-subscriber-updates", "20"]);
        let got = printed(&mut cmd);
        assert_eq!(got["version"], "2026-07-28", "{face}: {got}");
        assert_eq!(
            got["honored"]["resourceSubscriptions"][0], uri,
            "{face}: {got}"
        );
        let updated = (got["events"].as_array().into_iter().flatten())
            .any(|e| e["kind"] == "ResourceUpdated" && e["uri"] == uri);
        assert!(updated, "{face}: {got}");
    }
}

#[test]
fn an_upstream_s_log_messages_and_sampling_reach_the_client_of_the_call() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let how = crate::serve::stdio(&p, &[]);
    // Asked from `info` on: info and error are heard, debug is not.
    let r = crate::serve::run_client(
        &py,
        &how,
        &["logs", "info", "own_log", r#"{"message": "m"}"#],
    );
    assert_eq!(r["result"]["content"][0]["text"], "logged", "{r}");
    let heard: Vec<String> = (r["logs"].as_array().into_iter().flatten())
        .filter_map(|l| l["data"].as_str().map(str::to_string))
        .collect();
    assert_eq!(heard, ["m at Info", "m at Error"], "{r}");
    // A client that asked for none hears none.
    let r = crate::serve::run_client(&py, &how, &["logs", "-", "own_log", r#"{"message": "m"}"#]);
    assert_eq!(r["logs"], json!([]), "{r}");
    // server-everything asks its client to sample during a call: the client of the call does.
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let how = crate::serve::stdio(&p, &[]);
    let args = r#"{"prompt": "say hi", "maxTokens": 20}"#;
    let r = crate::serve::run_client(&py, &how, &["sample", "ev_trigger-sampling-request", args]);
    assert!(
        r["result"].to_string().contains("sampled by the client"),
        "{r}"
    );
    assert!(
        r["asked"][0]
            .as_str()
            .is_some_and(|a| a.ends_with("say hi")),
        "{r}"
    );
}

#[test]
fn a_listed_resource_is_asked_for_as_its_server_spells_it() {
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let mut gw = StdioGateway::start(&p, &[]);
    // Named in normal form by the client; the server listed `note://Shelf/%7Ea` and reads that.
    let r = read(&mut gw, 1, "own+note://shelf/~a");
    assert_eq!(
        r["result"]["contents"][0]["uri"], "own+note://Shelf/%7Ea",
        "{r}"
    );
}
