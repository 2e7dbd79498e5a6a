//! The manifest reader: defaults, every problem at once with its location, each kind's own
//! fields, and secrets kept unresolved.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::error::Severity;

fn parse(text: &str) -> Result<Manifest, Vec<Diagnostic>> {
    Manifest::parse(
        SourceFile::new("tools.toml", text),
        PathBuf::from("/tmp/tools.toml"),
        crate::tools::KINDS,
    )
}

fn errors(text: &str) -> Vec<Diagnostic> {
    match parse(text) {
        Ok(_) => panic!("expected errors"),
        Err(d) => d
            .into_iter()
            .filter(|d| d.severity == Severity::Error)
            .collect(),
    }
}

/// `(line, col)` of a diagnostic.
fn at(d: &Diagnostic) -> (usize, usize) {
    let l = d.location.as_ref().expect("a location");
    (l.line, l.col)
}

#[test]
fn defaults_follow_the_spec() {
    let m = parse(
        "[tools.w]\nkind = \"scripted\"\n[tools.r]\nkind = \"scripted\"\neffect = \"read\"\n",
    )
    .unwrap();
    let (w, r) = (m.tool("w").unwrap(), m.tool("r").unwrap());
    assert_eq!(
        (w.effect, w.idempotent, w.parallel_safe),
        (Effect::Write, false, true)
    );
    assert_eq!((r.effect, r.idempotent), (Effect::Read, true));
    assert_eq!(
        (w.effect_origin, r.effect_origin),
        (Origin::Default, Origin::Manifest)
    );
    assert_eq!((w.weight, w.retries, w.cost), (1, 0, 0.0));
    // Undeclared effect and an unprotected write are warned about, not refused.
    let warned: Vec<&str> = m.warnings.iter().map(|d| d.message.as_str()).collect();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("does not declare `effect`")),
        "{warned:?}"
    );
    assert!(
        warned
            .iter()
            .any(|w| w.contains("no idempotency protection")),
        "{warned:?}"
    );
}

#[test]
fn every_problem_is_reported_at_once_with_its_location() {
    let text = "[lanes.api]\nrate = \"ten per second\"\n\n[tools.a]\nkind = \"scripted\"\nlatncy = \"1s\"\nlanes = [\"apii\"]\n\n[tools.b]\nkind = \"shell\"\n\n[tools.c]\nkind = \"scripted\"\nweight = \"heavy\"\n";
    let errs = errors(text);
    let find = |needle: &str| {
        errs.iter()
            .find(|d| d.message.contains(needle))
            .unwrap_or_else(|| panic!("no error about {needle}: {errs:?}"))
    };
    let rate = find("`rate` in [lanes.api]");
    assert_eq!(at(rate), (2, 8));
    let field = find("unknown field `latncy`");
    assert_eq!(at(field), (6, 1));
    assert_eq!(field.hint.as_deref(), Some("did you mean `latency`?"));
    let lane = find("lane `apii`, which [lanes] does not declare");
    assert_eq!(at(lane), (7, 10));
    let kind = find("unknown tool kind `shell`");
    assert_eq!(at(kind), (10, 8));
    assert_eq!(
        kind.hint.as_deref(),
        Some("kinds are command, http, mcp and scripted")
    );
    let weight = find("`weight` in [tools.c] should be an integer");
    assert_eq!(at(weight), (14, 10));
    assert_eq!(errs.len(), 5, "{errs:?}");
}

#[test]
fn a_field_of_another_kind_says_whose_it_is() {
    let errs = errors("[tools.t]\nkind = \"scripted\"\nurl = \"https://x.test/\"\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(
        errs[0].hint.as_deref(),
        Some("`url` belongs to http tools; this tool is kind = \"scripted\"")
    );
}

#[test]
fn a_tool_without_a_kind_is_told_every_kind() {
    let errs = errors("[tools.t]\neffect = \"read\"\n");
    assert_eq!(
        errs[0].hint.as_deref(),
        Some("add kind = \"command\", \"http\", \"mcp\" or \"scripted\"")
    );
}

#[test]
fn each_kind_reads_its_own_fields() {
    let m = parse(
        r#"
[mcp_servers.fs]
command = ["server"]

[tools.cmd]
kind = "command"
effect = "read"
command = ["./bin/lookup", "--id", "{id}"]
stdin = "none"
kill_grace = "5s"
max_output = "1KiB"
[tools.cmd.args]
id = { type = "string", required = true }

[tools.api]
kind = "http"
effect = "read"
method = "post"
url = "https://api.test/v1/{id}"
query = ["limit"]
[tools.api.args]
id = { type = "string" }
limit = { type = "integer" }

[tools.remote]
kind = "mcp"
server = "fs"

[tools.fake]
kind = "scripted"
effect = "read"
latency = "250ms"
output = { ok = true }
"#,
    )
    .unwrap();
    let kinds: Vec<&str> = m.tools.iter().map(Tool::kind_name).collect();
    assert_eq!(kinds, ["command", "http", "mcp", "scripted"]);
    assert_eq!(
        m.tool("cmd").unwrap().kind.target(),
        "./bin/lookup --id {id}"
    );
    assert_eq!(m.tool("cmd").unwrap().kind.placeholders(), ["id"]);
    assert!(m.tool("cmd").unwrap().kind.spawns_process());
    assert_eq!(
        m.tool("api").unwrap().kind.target(),
        "POST https://api.test/v1/{id}"
    );
    assert_eq!(m.tool("api").unwrap().kind.settings()["body"], "json");
    // An MCP tool names its remote tool after itself unless told otherwise.
    assert_eq!(m.tool("remote").unwrap().kind.target(), "fs:remote");
    let fake = m.tool("fake").unwrap();
    assert_eq!(fake.estimate(), Some(Duration::from_millis(250)));
    assert!(fake.kind.reserved().contains(&"_latency"));
}

#[test]
fn an_mcp_tools_effect_waits_for_its_server() {
    // Before: `write tool has no idempotency protection` for every MCP tool, even one the
    // server annotates read-only. The server's annotations decide (see `mcp::annotate`).
    let m = parse("[mcp_servers.fs]\ncommand = [\"server\"]\n[tools.read_file]\nkind = \"mcp\"\nserver = \"fs\"\n").unwrap();
    let warned: Vec<&str> = m.warnings.iter().map(|d| d.message.as_str()).collect();
    assert!(
        !warned.iter().any(|w| w.contains("read_file")),
        "{warned:?}"
    );
    let errs = errors("[tools.t]\nkind = \"mcp\"\nserver = \"nowhere\"\n");
    assert!(
        errs[0].message.contains("names MCP server `nowhere`"),
        "{errs:?}"
    );
}

#[test]
fn secrets_stay_unresolved_and_never_show() {
    let m = parse("[tools.api]\nkind = \"http\"\neffect = \"read\"\nurl = \"https://api.test/?key=${env:API_KEY}\"\nheaders = { Authorization = \"Bearer ${env:API_KEY}\" }\n").unwrap();
    let kind = &m.tool("api").unwrap().kind;
    assert_eq!(kind.target(), "GET https://api.test/?key=***");
    assert_eq!(kind.settings()["headers"]["Authorization"], "Bearer ***");
}

#[test]
fn a_weight_above_a_lane_could_never_run() {
    let errs = errors("[concurrency]\nmax_concurrent_tools = 2\n[tools.big]\nkind = \"scripted\"\neffect = \"read\"\nweight = 3\n");
    assert!(
        errs[0]
            .message
            .contains("has weight 3, more than max_concurrent_tools allows (2)"),
        "{errs:?}"
    );
}

#[test]
fn a_whole_server_reads_its_defaults_and_refuses_what_makes_no_sense() {
    let m = parse(
        "[lanes.db]\nconcurrency = 2\n[mcp_servers.ev]\ncommand = [\"x\"]\nwhole = true\nlanes = [\"db\"]\ntimeout = \"5s\"\ncost = 0.5\nrequires_approval = [\"delete_*\"]\ncache = { \"file:///*\" = \"1m\" }\n",
    )
    .unwrap();
    let w = m.mcp_servers["ev"].whole.as_ref().unwrap();
    assert_eq!(w.prefix, "ev");
    assert_eq!(w.lanes, ["db"]);
    assert_eq!(
        w.timeout.as_ref().map(|t| t.0),
        Some(Duration::from_secs(5))
    );
    assert!(w.needs_approval("delete_all", false) && !w.needs_approval("get", true));
    assert_eq!(w.cache_for("file:///a"), Some(Duration::from_secs(60)));
    // Its keys without `whole = true`, a prefix a name cannot carry, an undeclared lane.
    let e = errors("[mcp_servers.ev]\ncommand = [\"x\"]\nprefix = \"p\"\n");
    assert!(e[0].message.contains("applies to a whole server"), "{e:?}");
    assert_eq!(at(&e[0]), (3, 1));
    let e = errors("[mcp_servers.ev]\ncommand = [\"x\"]\nwhole = true\nprefix = \"a.b\"\n");
    assert!(e[0].message.contains("`prefix`"), "{e:?}");
    let e = errors("[mcp_servers.ev]\ncommand = [\"x\"]\nwhole = true\nlanes = [\"nope\"]\n");
    assert!(e[0].message.contains("lane `nope`"), "{e:?}");
    let e = errors("[mcp_servers.ev]\ncommand = [\"x\"]\nwhole = true\nrequires_approval = 3\n");
    assert!(e[0].message.contains("requires_approval"), "{e:?}");
}

#[test]
fn discovered_tools_that_a_model_would_confuse_are_left_out_naming_both() {
    let mut m = parse(
        "[mcp_servers.a]\ncommand = [\"x\"]\nwhole = true\nprefix = \"\"\n[tools.echo]\nkind = \"scripted\"\n",
    )
    .unwrap();
    let mut found = m.tools[0].clone();
    found.name = "echo".into();
    found.discovered_from = Some("a".into());
    let mut other = found.clone();
    other.name = "fine".into();
    let clashes = m.set_discovered("a", vec![found, other]);
    assert_eq!(clashes.len(), 1, "{clashes:?}");
    assert!(
        clashes[0].contains("`echo`") && clashes[0].contains("[tools.echo]"),
        "{clashes:?}"
    );
    assert!(m.tool("fine").is_some());
    // Learnt again: the server's tools are replaced, the manifest's kept.
    assert!(m.set_discovered("a", Vec::new()).is_empty());
    assert!(m.tool("fine").is_none() && m.tool("echo").is_some());
}

#[test]
fn auth_roles_and_token_roles_are_read_and_every_mistake_is_located() {
    let m = parse(
        r#"[serve.auth]
issuer = ["https://auth.example.com", "http://127.0.0.1:9000"]
resource = "https://gw.example.com/mcp"
scopes = ["mcp:tools"]
tenant_claim = "org_id"
leeway = "30s"

[serve.tokens]
ops = { token = "${env:OPS}", roles = ["admin"] }
plain = "${env:PLAIN}"

[roles.admin]
tools = ["*"]
ops = ["status", "metrics"]
sessions = 3

[roles.reader]
tools = { allow = ["get_*"], deny = ["get_secret"] }
resources = ["file:///docs/*"]
"#,
    )
    .unwrap();
    let auth = m.serve.auth.as_ref().expect("[serve.auth]");
    assert_eq!(auth.issuers.len(), 2);
    assert_eq!(auth.tenant_claim.as_deref(), Some("org_id"));
    assert_eq!(
        (auth.roles_claim.as_str(), auth.subject_claim.as_str()),
        ("roles", "sub")
    );
    assert_eq!(auth.leeway, Duration::from_secs(30));
    assert_eq!(m.serve.token_roles["ops"], ["admin"]);
    assert!(m.serve.tokens.contains_key("ops") && m.serve.tokens.contains_key("plain"));
    assert_eq!(m.roles.0["admin"].ops, [Op::Status, Op::Metrics]);
    assert_eq!(m.roles.0["admin"].sessions, Some(3));
    assert!(m.roles.0["reader"].tools.admits("get_user"));
    assert!(!m.roles.0["reader"].tools.admits("get_secret"));
    // `plain` has no roles while [roles] is declared: said, with where.
    let said: Vec<&str> = m.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        said.iter()
            .any(|w| w.contains("tenant `plain`'s token has no roles")),
        "{said:?}"
    );

    let e = errors(
        "[serve.auth]\nissuer = \"http://auth.example.com\"\n\n[serve.tokens]\nops = { token = \"${env:OPS}\", roles = [\"admni\"] }\n\n[roles.admin]\nops = [\"stats\"]\n",
    );
    let text: Vec<String> = e
        .iter()
        .map(|d| format!("{}:{} {}", at(d).0, at(d).1, d.message))
        .collect();
    let has = |s: &str| text.iter().any(|t| t.contains(s));
    assert!(has("1:8 [serve.auth] names no `resource`"), "{text:?}");
    assert!(
        has("2:10 `issuer` `http://auth.example.com` in [serve.auth] uses http"),
        "{text:?}"
    );
    assert!(
        has("5:40 [serve.tokens.ops] names role `admni`"),
        "{text:?}"
    );
    assert!(has("8:8 unknown op `stats`"), "{text:?}");
    let typo = e
        .iter()
        .find(|d| d.message.contains("admni"))
        .and_then(|d| d.hint.clone());
    assert!(typo.is_some_and(|h| h.contains("admin")), "a suggestion");
}

#[test]
fn upstream_auth_is_read_with_its_fields_and_every_misuse_is_named_where_it_is() {
    let m = parse(
        "[mcp_servers.gh]\nurl = \"https://mcp.example.com/mcp\"\nauth = \"oauth\"\nclient_id = \"abc\"\nclient_secret = \"${env:GH_SECRET}\"\nscopes = [\"repo\", \"read:org\"]\nredirect_port = 8976\nauthorization_server = \"https://login.example.com\"\nprotocol_version = \"2025-11-25\"\n",
    )
    .unwrap();
    let s = &m.mcp_servers["gh"];
    let a = s.auth.as_ref().expect("auth");
    assert_eq!(a.grant, Grant::Code);
    assert_eq!(
        (a.client_id.as_deref(), a.redirect_port),
        (Some("abc"), 8976)
    );
    assert_eq!(a.scopes, ["repo", "read:org"]);
    assert!(a.client_secret.as_ref().is_some_and(|t| t.has_secret()));
    assert_eq!(s.protocol_version.as_deref(), Some("2025-11-25"));
    let cases: &[(&str, &str, (usize, usize))] = &[
        // A secret written in the manifest.
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nclient_id = \"a\"\nclient_secret = \"hunter2\"\n", "is written in the manifest", (5, 17)),
        // `auth` on a stdio server.
        ("command = [\"srv\"]\nauth = \"oauth\"\n", "reached by `url`", (3, 8)),
        ("url = \"https://x.example/mcp\"\nauth = \"kerberos\"\n", "`kerberos`", (3, 8)),
        // Machine credentials without a client.
        ("url = \"https://x.example/mcp\"\nauth = \"client_credentials\"\n", "needs `client_id`", (1, 14)),
        // A field of `auth` without it.
        ("url = \"https://x.example/mcp\"\nscopes = [\"a\"]\n", "is for a server with `auth`", (3, 1)),
        // Both `auth` and a hand-written Authorization header.
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nheaders = { Authorization = \"Bearer ${env:T}\" }\n", "`Authorization` header", (1, 14)),
        // An authorization server a token would reach in the clear.
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nauthorization_server = \"http://login.example.com\"\n", "https://", (4, 24)),
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nscopes = [\"a b\"]\n", "not one scope", (4, 11)),
        ("url = \"https://x.example/mcp\"\nprotocol_version = \"2099-01-01\"\n", "2099-01-01", (3, 20)),
        // The caller's identity needs the gateway's client to exchange tokens with.
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nidentity = \"caller\"\n", "needs the `client_id` and `client_secret`", (1, 14)),
        ("url = \"https://x.example/mcp\"\nauth = \"oauth\"\nidentity = \"everyone\"\n", "`everyone`", (4, 12)),
        ("url = \"https://x.example/mcp\"\nauth = \"client_credentials\"\nclient_id = \"a\"\nprivate_key = \"${env:K}\"\nsigning_alg = \"HS256\"\n", "HS256", (6, 15)),
    ];
    for (body, want, loc) in cases {
        let e = errors(&format!("[mcp_servers.s]\n{body}"));
        assert!(
            e.iter()
                .any(|d| d.message.contains(want)
                    || d.hint.as_deref().is_some_and(|h| h.contains(want))),
            "{body}: {e:?}"
        );
        assert_eq!(at(&e[0]), *loc, "{body}: {e:?}");
    }
}
