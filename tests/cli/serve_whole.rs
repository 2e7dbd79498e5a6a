//! Whole MCP servers behind `mcp serve` (`whole = true`, no `[tools.*]` table): what the
//! Python `mcp` SDK sees through the gateway against what it sees directly, two servers under
//! prefixes side by side, an upstream's changing tool list, resource reads ordered after
//! writes (in one gateway and across two), and an upstream's questions passed to the client.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::mcp::own_server;
use crate::serve::{client, finish, http, log_lines, python, run_client, stdio, HttpGateway};

/// server-everything's entry point, or `None` (skipped with a notice, except in CI).
fn everything() -> Option<PathBuf> {
    let path = repo()
        .join("target/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if path.exists() {
        return Some(path);
    }
    crate::common::skip(
        &format!("server-everything is not installed at {}", path.display()),
        "npm install --prefix target/mcp @modelcontextprotocol/server-everything",
    );
    None
}

/// `[mcp_servers.NAME]` serving server-everything whole, with `extra` lines.
pub(crate) fn everything_whole(name: &str, extra: &str) -> Option<String> {
    let ev = everything()?;
    Some(format!(
        "[mcp_servers.{name}]\ncommand = [\"node\", \"{}\", \"stdio\"]\nwhole = true\n{extra}\n",
        ev.display()
    ))
}

/// `v` without the keys rmcp's types drop (`execution`: tasks, issue 51) and with `key`'s
/// value mapped by `f` (a served name or URI back to the server's own).
fn own(mut v: Value, key: &str, f: impl Fn(&str) -> String) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("execution");
        if let Some(s) = o.get(key).and_then(Value::as_str).map(&f) {
            o.insert(key.into(), json!(s));
        }
    }
    v
}

fn strip<'a>(prefix: &'a str) -> impl Fn(&str) -> String + 'a {
    move |s: &str| s.strip_prefix(prefix).unwrap_or(s).to_string()
}

fn list(v: &Value, key: &str, name: &str, f: &dyn Fn(&str) -> String) -> Vec<Value> {
    let mut out: Vec<Value> = (v[key].as_array().into_iter().flatten())
        // A tool that must run as a task is not served (the gateway does not relay tasks).
        .filter(|x| x["execution"]["taskSupport"] != "required")
        .map(|x| own(x.clone(), name, f))
        .collect();
    out.sort_by_key(|x| x[name].as_str().unwrap_or_default().to_string());
    out
}

#[test]
fn a_whole_server_offers_through_the_gateway_what_it_offers_directly() {
    let Some(py) = python() else { return };
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let ev = everything().unwrap_or_default().display().to_string();
    let direct_how = ["--stdio", "node", &ev, "stdio"].map(String::from).to_vec();
    let args = |prefix: &str| json!({ format!("{prefix}args-prompt"): {"city": "Paris"} });
    let direct = run_client(&py, &direct_how, &["whole", &args("").to_string()]);
    let served = run_client(&py, &stdio(&p, &[]), &["whole", &args("ev_").to_string()]);
    let none = |s: &str| s.to_string();
    for (key, name, pre) in [
        ("tools", "name", "ev_"),
        ("resources", "uri", "ev+"),
        ("templates", "uriTemplate", "ev+"),
        ("prompts", "name", "ev_"),
    ] {
        let (d, s) = (
            list(&direct, key, name, &none),
            list(&served, key, name, &strip(pre)),
        );
        assert!(!d.is_empty(), "server-everything offers {key}: {direct}");
        assert_eq!(d, s, "{key}, names aside");
    }
    // Every resource reads byte for byte the same, under its served URI.
    let reads = direct["reads"].as_object().cloned().unwrap_or_default();
    assert!(reads.len() >= 5, "{direct}");
    for (uri, d) in reads {
        let s = &served["reads"][format!("ev+{uri}")];
        let contents = |v: &Value, f: &dyn Fn(&str) -> String| -> Vec<Value> {
            let l = v["contents"].as_array().cloned().unwrap_or_default();
            l.into_iter().map(|c| own(c, "uri", f)).collect()
        };
        assert_eq!(contents(&d, &none), contents(s, &strip("ev+")), "{uri}");
    }
    let complete = |how: &[String], prompt: &str| {
        run_client(&py, how, &["complete", prompt, "department", "E"])
    };
    let (d, s) = (
        complete(&direct_how, "completable-prompt"),
        complete(&stdio(&p, &[]), "ev_completable-prompt"),
    );
    assert!(
        d["completion"]["values"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "{d}"
    );
    assert_eq!(d, s, "completion/complete");
    for name in ["simple-prompt", "args-prompt"] {
        assert_eq!(
            direct["got"][name],
            served["got"][format!("ev_{name}")],
            "prompt {name}"
        );
        assert!(direct["got"][name]["messages"]
            .as_array()
            .is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn the_inspector_cli_lists_resources_and_prompts_and_reads_through_the_gateway() {
    let inspector = repo().join("target/inspector/node_modules/.bin/mcp-inspector");
    if !inspector.exists() {
        crate::common::skip(
            &format!(
                "the MCP Inspector is not installed at {}",
                inspector.display()
            ),
            "npm install --prefix target/inspector @modelcontextprotocol/inspector",
        );
        return;
    }
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let run = |args: &[&str]| -> Value {
        let out = std::process::Command::new(&inspector)
            .args(["--cli", &gw.url, "--transport", "http"])
            .args(args)
            .output()
            .expect("run the inspector");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("inspector JSON")
    };
    let resources = run(&["--method", "resources/list"]);
    let uris: Vec<&str> = (resources["resources"].as_array().into_iter().flatten())
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(
        uris.len() >= 5 && uris.iter().all(|u| u.starts_with("ev+")),
        "{resources}"
    );
    let read = run(&["--method", "resources/read", "--uri", uris[0]]);
    assert_eq!(read["contents"][0]["uri"], uris[0], "{read}");
    assert!(
        read["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{read}"
    );
    let prompts = run(&["--method", "prompts/list"]);
    assert!(
        prompts.to_string().contains("ev_simple-prompt"),
        "{prompts}"
    );
    let got = run(&[
        "--method",
        "prompts/get",
        "--prompt-name",
        "ev_simple-prompt",
    ]);
    assert!(got["messages"][0]["content"]["text"].is_string(), "{got}");
}

#[test]
fn two_whole_servers_under_prefixes_serve_side_by_side() {
    let Some(py) = python() else { return };
    let (Some(a), Some(b)) = (
        everything_whole("one", ""),
        everything_whole("two", "deny = [\"get-*\", \"*architecture*\"]"),
    ) else {
        return;
    };
    let p = Project::new(&format!("{a}\n{b}"));
    let served = run_client(&py, &stdio(&p, &[]), &["whole", "{}"]);
    let names = |key: &str, field: &str| -> Vec<String> {
        (served[key].as_array().into_iter().flatten())
            .filter_map(|t| t[field].as_str().map(str::to_string))
            .collect()
    };
    let tools = names("tools", "name");
    assert!(
        tools.contains(&"one_echo".into()) && tools.contains(&"two_echo".into()),
        "{tools:?}"
    );
    assert!(tools.contains(&"one_get-sum".into()), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t.starts_with("two_get-")),
        "two's deny: {tools:?}"
    );
    let uris = names("resources", "uri");
    assert!(
        uris.iter().any(|u| u.starts_with("one+demo://")),
        "{uris:?}"
    );
    assert!(
        uris.iter().any(|u| u.starts_with("two+demo://")),
        "{uris:?}"
    );
    assert!(
        !uris
            .iter()
            .any(|u| u.starts_with("two+") && u.contains("architecture")),
        "{uris:?}"
    );
    // Each read went to its own server.
    let reads = served["reads"].as_object().cloned().unwrap_or_default();
    assert_eq!(reads.len(), uris.len(), "{served}");
    for (uri, r) in reads {
        assert_eq!(r["contents"][0]["uri"], json!(uri), "{r}");
    }
    let r = run_client(
        &py,
        &stdio(&p, &[]),
        &["call", "two_echo", r#"{"message": "hi"}"#],
    );
    assert_eq!(r["content"][0]["text"], "Echo: hi", "{r}");
}

#[test]
fn a_subscribed_resource_s_update_reaches_the_session() {
    let Some(py) = python() else { return };
    let Some(manifest) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&manifest);
    let uri = "ev+demo://resource/dynamic/text/1";
    let r = run_client(
        &py,
        &stdio(&p, &[]),
        &["subscribe", uri, "ev_toggle-subscriber-updates", "{}", "15"],
    );
    let updated = r["updated"].as_array().cloned().unwrap_or_default();
    assert!(updated.contains(&json!(uri)), "{r}");
    // A session's subscriptions are bounded (256), with a refusal that says so.
    let template = "ev+demo://resource/dynamic/text/{i}";
    let r = run_client(&py, &stdio(&p, &[]), &["subscribe_many", template, "300"]);
    assert_eq!(r["taken"], 256, "{r}");
    assert!(
        r["refused"]
            .as_str()
            .is_some_and(|e| e.contains("256 resources")),
        "{r}"
    );
}

/// The project's own test server served whole, logging to `log`.
pub(crate) fn own_whole(p: &Project, log: &std::path::Path, extra: &str) {
    p.write(
        "tools.toml",
        &format!(
            "[mcp_servers.own]\ncommand = [\"{}\"]\nenv = {{ MCP_TEST_LOG = \"{}\", MCP_TEST_READ_MS = \"50\" }}\nwhole = true\nrequires_approval = false\n{extra}\n",
            own_server().display(),
            log.display()
        ),
    );
}

#[test]
fn a_tool_an_upstream_adds_is_listed_to_every_session_and_runs() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    // Another session that listed hears of the change too.
    let other = client(
        &py,
        &http(&gw.url),
        &[
            "await_change",
            "10",
            &p.path().join("x").display().to_string(),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let r = run_client(
        &py,
        &http(&gw.url),
        &["grow", "own_grow", "own_grown", "10"],
    );
    assert_eq!(r["changed"], true, "{r}");
    assert!(r["waited_ms"].as_u64().is_some_and(|ms| ms < 2000), "{r}");
    assert!(!r["first"].to_string().contains("own_grown"), "{r}");
    assert!(r["second"].to_string().contains("own_grown"), "{r}");
    assert_eq!(r["new"]["content"][0]["text"], r#"{"grown": "yes"}"#, "{r}");
    let o = finish(other);
    assert_eq!(o["changed"], true, "{o}");
    // Its resources' and prompts' lists changing reach a session that listed them.
    let r = run_client(&py, &http(&gw.url), &["touch", "own_touch", "10"]);
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["prompts_changed"], true, "{r}");
}

/// The board is written (`own_write`, 400 ms) and read 50 ms later through `gws[1]`: the read
/// starts at the server once the write has ended.
fn a_read_waits_for_the_write_before_it(gws: &[&HttpGateway]) {
    let Some(py) = python() else { return };
    let plan = json!([
        {"url": gws[0].url, "tool": "own_write", "args": {"ms": 400, "tag": "w"}, "at_ms": 0},
        {"url": gws[1].url, "uri": "own+note://board", "at_ms": 50},
    ]);
    let out = finish(client(&py, &http("-"), &["plan", &plan.to_string()]));
    assert_eq!(out[1]["text"], "the board", "{out}");
}

pub(crate) fn when(lines: &[String], what: &str) -> u128 {
    lines
        .iter()
        .find_map(|l| {
            l.strip_prefix(what)
                .and_then(|r| r.trim().split(' ').next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no `{what}` in {lines:?}"))
}

#[test]
fn a_resource_read_after_a_write_on_its_server_waits_for_the_write() {
    if python().is_none() {
        return;
    }
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    a_read_waits_for_the_write_before_it(&[&gw, &gw]);
    let lines = log_lines(&log);
    assert!(
        when(&lines, "read-start") >= when(&lines, "end w"),
        "{lines:?}"
    );
}

#[test]
fn a_resource_read_waits_for_a_write_through_another_gateway_process() {
    if python().is_none() {
        return;
    }
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let a = HttpGateway::start(&p, &[], &[]);
    let b = HttpGateway::start(&p, &[], &[]);
    a_read_waits_for_the_write_before_it(&[&a, &b]);
    let lines = log_lines(&log);
    assert!(
        when(&lines, "read-start") >= when(&lines, "end w"),
        "{lines:?}"
    );
}

#[test]
fn an_upstream_s_question_reaches_the_client_that_can_answer_and_is_refused_for_one_that_cannot() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let args = r#"{"message": "may I?"}"#;
    let r = run_client(&py, &http(&gw.url), &["elicit", "accept", "own_ask", args]);
    assert_eq!(r["asked"], json!(["may I?"]), "{r}");
    assert_eq!(
        r["result"]["content"][0]["text"], r#"{"action": "accept"}"#,
        "{r}"
    );
    let r = run_client(&py, &http(&gw.url), &["elicit", "decline", "own_ask", args]);
    assert_eq!(
        r["result"]["content"][0]["text"], r#"{"action": "decline"}"#,
        "{r}"
    );
    // Over stdio too.
    let r = run_client(&py, &stdio(&p, &[]), &["elicit", "accept", "own_ask", args]);
    assert_eq!(
        r["result"]["content"][0]["text"], r#"{"action": "accept"}"#,
        "{r}"
    );
    // A client with no elicitation: the upstream is told why, and says so.
    let r = run_client(&py, &http(&gw.url), &["call", "own_ask", args]);
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("not asked") && text.contains("elicitation"),
        "{r}"
    );
}

#[test]
fn an_mcp_app_s_ui_resource_is_named_under_the_prefix_and_reads_byte_for_byte() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let direct_how = vec!["--stdio".to_string(), own_server().display().to_string()];
    let direct = run_client(&py, &direct_how, &["read", "ui://app/index.html"]);
    let tools = run_client(&py, &stdio(&p, &[]), &["list"]);
    let app = (tools.as_array().into_iter().flatten())
        .find(|t| t["name"] == "own_app")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        app["_meta"]["ui"]["resourceUri"], "own+ui://app/index.html",
        "{tools}"
    );
    let served = run_client(&py, &stdio(&p, &[]), &["read", "own+ui://app/index.html"]);
    assert_eq!(
        served["contents"][0]["text"], direct["contents"][0]["text"],
        "{served}"
    );
    assert_eq!(
        served["contents"][0]["mimeType"], "text/html;profile=mcp-app",
        "{served}"
    );
    assert_eq!(
        served["contents"][0]["uri"], "own+ui://app/index.html",
        "{served}"
    );
    // A URI no served server owns, or one its server's `deny` hides, is not found.
    let r = run_client(&py, &stdio(&p, &[]), &["read", "other+ui://app/index.html"]);
    assert!(
        r["jsonrpc_error"]
            .as_str()
            .is_some_and(|e| e.contains("no resource")),
        "{r}"
    );
    own_whole(&p, &log, "deny = [\"ui://*\"]");
    let r = run_client(&py, &stdio(&p, &[]), &["read", "own+ui://app/index.html"]);
    assert!(
        r["jsonrpc_error"]
            .as_str()
            .is_some_and(|e| e.contains("no resource")),
        "{r}"
    );
}

#[test]
fn a_whole_server_s_cache_glob_serves_a_second_read_without_its_server() {
    let Some(py) = python() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "cache = { \"note://*\" = \"1m\" }");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    for _ in 0..3 {
        let r = run_client(&py, &http(&gw.url), &["read", "own+note://board"]);
        assert_eq!(r["contents"][0]["text"], "the board", "{r}");
    }
    let reads = log_lines(&log)
        .iter()
        .filter(|l| l.starts_with("read-start"))
        .count();
    assert_eq!(reads, 1, "{:?}", log_lines(&log));
}

#[test]
fn a_tools_table_for_one_of_a_whole_server_s_tools_takes_its_place() {
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(
        &p,
        &log,
        "[tools.nap]\nkind = \"mcp\"\nserver = \"own\"\ntool = \"sleep\"\ntimeout = \"250ms\"",
    );
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let names: Vec<&str> = (listed["tools"].as_array().into_iter().flatten())
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"nap") && names.contains(&"own.write"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"own.sleep"),
        "the table takes its place: {names:?}"
    );
    // Its own settings hold: a call past its timeout is one.
    let batch = p.write(
        "b.yaml",
        "calls:\n  - {id: a, tool: nap, args: {ms: 2000, tag: a}}\n",
    );
    let out = p
        .cmd()
        .args(["run", batch.to_str().unwrap_or_default()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"kind\":\"timeout\""), "{text}");
}

#[test]
fn tools_plan_and_run_see_a_whole_server_s_tools_as_the_gateway_does() {
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "prefix = \"db\"\ndeny = [\"crash\", \"hang\"]");
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let names: Vec<&str> = (listed["tools"].as_array().into_iter().flatten())
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"db.sleep") && names.contains(&"db.write"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("crash") || n.contains("resources/read")),
        "{names:?}"
    );
    let sleep =
        (listed["tools"].as_array().into_iter().flatten()).find(|t| t["name"] == "db.sleep");
    assert_eq!(
        sleep.map(|t| t["effect"].clone()),
        Some(json!("read")),
        "{listed}"
    );
    let emitted = p
        .cmd()
        .args(["tools", "--emit", "openai", "--tools", "db_sleep"])
        .output()
        .unwrap();
    let offer: Value = serde_json::from_slice(&emitted.stdout).unwrap_or_default();
    assert_eq!(offer[0]["function"]["name"], "db_sleep", "{offer}");
    assert!(
        offer[0]["function"]["parameters"]["properties"]["ms"].is_object(),
        "{offer}"
    );
    let batch = p.write(
        "b.yaml",
        "calls:\n  - {id: a, tool: db.sleep, args: {ms: 1, tag: a}}\n  - {id: b, tool: db_write, args: {ms: 1, tag: b}}\n",
    );
    let out = p
        .cmd()
        .args(["run", batch.to_str().unwrap_or_default()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("\"status\":\"ok\"").count(), 2, "{text}");
    let plan = p
        .cmd()
        .args([
            "plan",
            batch.to_str().unwrap_or_default(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
}

/// `flux-tools` in `p` with `dir` first on `PATH`.
fn on_path(p: &Project, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    p.cmd()
        .env("PATH", path)
        .args(args)
        .output()
        .expect("flux-tools")
}

#[test]
fn the_serving_quick_starts_manifest_is_offered_to_a_model_and_its_reader_runs_in_a_batch() {
    if everything().is_none() {
        return;
    }
    let quick = repo().join("docs/src/serving-mcp.in/tools.toml");
    let p = Project::new(&std::fs::read_to_string(quick).expect("the quick start's manifest"));
    // It names `mcp-server-everything` on PATH, as a user who installed it has it.
    let bin = p.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let installed = repo().join("target/mcp/node_modules/.bin/mcp-server-everything");
    std::os::unix::fs::symlink(installed, bin.join("mcp-server-everything")).expect("link");
    let out = on_path(&p, &bin, &["tools", "--emit", "openai"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = (doc.as_array().expect("a list").iter())
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(names.contains(&"ev_echo"), "{names:?}");
    // Its readers are no tools of a model's, and a tool that must run as a task is left out.
    assert!(
        !names
            .iter()
            .any(|n| n.contains("resources") || n.contains("research")),
        "{names:?}"
    );
    assert!(
        !err.contains("warning"),
        "the quick start denies what it cannot serve: {err}"
    );
    // A batch may read a resource through the server's reader.
    let batch = p.write(
        "read.yaml",
        "- { tool: \"ev:resources/read\", args: { uri: \"demo://resource/static/document/architecture.md\" } }\n",
    );
    let out = on_path(
        &p,
        &bin,
        &["run", batch.to_str().unwrap(), "--format", "json"],
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let r = &doc["results"][0];
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(
        r["output"]["contents"][0]["uri"],
        "demo://resource/static/document/architecture.md"
    );
    // Without the server on PATH, its tools cannot be listed: an error, not an empty table.
    let nowhere = p.path().join("empty");
    std::fs::create_dir(&nowhere).expect("empty");
    let out = p
        .cmd()
        .env("PATH", &nowhere)
        .args(["tools"])
        .output()
        .expect("flux-tools");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`ev` is served whole, and its tools cannot be listed"),
        "{err}"
    );
}

#[test]
fn a_tool_that_must_run_as_a_task_is_left_out_with_a_warning() {
    let Some(m) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&m);
    let out = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .expect("tools");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("`simulate-research-query` is not served: it must be called as a task"),
        "{err}"
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("ev.echo") && !listed.contains("research"),
        "{listed}"
    );
}

#[test]
fn a_reload_counts_a_whole_servers_tools() {
    let Some(m) = everything_whole("ev", "") else {
        return;
    };
    let p = Project::new(&m);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    // SAFETY: a signal to the gateway this test started.
    unsafe {
        libc::kill(gw.child.id() as i32, libc::SIGHUP);
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let said = loop {
        let said = gw.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        if said.contains("reloaded") || std::time::Instant::now() > until {
            break said;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let n: usize = said
        .split("(SIGHUP): ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(n >= 10, "a whole server's tools are counted: {said}");
}
