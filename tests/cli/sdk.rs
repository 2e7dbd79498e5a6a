//! Replies made with the providers' own SDKs (`tests/fixtures/sdk/`, written by
//! `tests/sdk/make_fixtures.py` with `model_dump_json()`), piped through `flux-tools run`:
//! every call answered, bad calls answered as `unknown_tool` or `invalid_call`, arguments byte for byte, zero-call
//! replies, and every emitted message validated by the same SDK's types
//! (`tests/sdk/validate.py`, in the virtualenv `.ci/run` makes).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{repo, results, Project};

const PROVIDERS: [&str; 4] = ["openai", "openai-responses", "anthropic", "gemini"];

/// What the fixtures' `echo` argument holds: `${…}` in every form a model might write.
const TEMPLATE: &str = "Hello ${name}! use ${toolu_A.city} as placeholder; $${x}; `echo ${HOME}`";

const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8

[tools.echo]
kind = "command"
effect = "read"
command = ["cat"]

[tools.search]
kind = "scripted"
effect = "read"

[tools.lookup]
kind = "scripted"
effect = "read"
latency = "200ms"
output = { city = "{city}", weather = "sunny" }
[tools.lookup.args]
city = { type = "string", required = true }
"#;

fn fixture(provider: &str, name: &str) -> PathBuf {
    repo().join(format!("tests/fixtures/sdk/{provider}-{name}.json"))
}

/// The virtualenv's python with the SDKs, or `None` (with a visible notice) when they could
/// not be installed.
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("FLUX_TEST_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/sdk-venv/bin/python"));
    if python.exists() {
        return Some(python);
    }
    crate::common::skip(
        &format!("no SDK virtualenv at {}", python.display()),
        "python3 -m venv target/sdk-venv && target/sdk-venv/bin/pip install openai anthropic google-genai",
    );
    None
}

/// `flux-tools run FIXTURE EXTRA…` in `p`: (stdout, stderr, exit code).
fn run(p: &Project, fixture: &PathBuf, extra: &[&str]) -> (String, String, i32) {
    let out = p
        .cmd()
        .arg("run")
        .arg(fixture)
        .args(extra)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        out.status.code().unwrap_or(-1),
    )
}

/// Feed `text` to the SDK validator for `provider`; panics with its refusal.
fn validate(python: &PathBuf, provider: &str, text: &str, stream: bool) {
    validate_as(python, provider, text, if stream { "--stream" } else { "" });
}

/// The SDK validator for `provider` in `mode` (`""`, `--stream`, `--tools`).
fn validate_as(python: &PathBuf, provider: &str, text: &str, mode: &str) {
    let mut cmd = Command::new(python);
    cmd.arg(repo().join("tests/sdk/validate.py")).arg(provider);
    if !mode.is_empty() {
        cmd.arg(mode);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{provider} refused what flux-tools emitted:\n{}\n--- emitted ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The call ids of a fixture, in order, as the provider wrote them.
fn provider_ids(provider: &str) -> Vec<Value> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(provider, "mixed")).unwrap())
            .unwrap();
    match provider {
        "openai" => v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].clone())
            .collect(),
        "openai-responses" => v["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_id"].clone())
            .collect(),
        "anthropic" => v["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|c| c["id"].clone())
            .collect(),
        _ => v["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["function_call"]["id"].clone())
            .collect(),
    }
}

#[test]
fn one_bad_call_costs_only_itself_in_every_providers_reply() {
    let p = Project::new(MANIFEST);
    let python = sdk_python();
    for provider in PROVIDERS {
        let f = fixture(provider, "mixed");
        let (stdout, stderr, code) = run(&p, &f, &["--format", "json"]);
        assert_eq!(code, 1, "{provider}: {stderr}");
        let doc: Value = serde_json::from_str(&stdout).unwrap();
        let r = results(&doc);
        let statuses: Vec<&str> = r.iter().map(|x| x["status"].as_str().unwrap()).collect();
        assert_eq!(
            statuses,
            ["ok", "never_dispatched", "never_dispatched", "ok"],
            "{provider}: {doc}"
        );
        // A tool the manifest does not serve, and arguments that are not JSON.
        assert_eq!(
            r[1]["error"]["kind"], "unknown_tool",
            "{provider}: {}",
            r[1]
        );
        assert_eq!(
            r[2]["error"]["kind"], "invalid_call",
            "{provider}: {}",
            r[2]
        );
        assert!(r[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `serch` (did you mean `search`?)"));
        // Ids are the provider's, byte for byte (a Gemini call without one gets `cN`).
        for (res, id) in r.iter().zip(provider_ids(provider)) {
            if id.is_string() {
                assert_eq!(res["id"], id, "{provider}");
            }
        }
        assert_eq!(r[3]["output"]["city"], "Paris");
        if let Some(python) = &python {
            let (emitted, _, code) = run(&p, &f, &["--emit", provider]);
            assert_eq!(code, 1);
            validate(python, provider, &emitted, false);
            let (streamed, _, _) = run(&p, &f, &["--emit", provider, "--stream"]);
            assert_eq!(streamed.lines().count(), 4, "{provider}: {streamed}");
            validate(python, provider, &streamed, true);
        }
    }
}

#[test]
fn a_models_arguments_reach_the_tool_byte_for_byte() {
    // Before: `${HOME}` was a reference to an unknown call (exit 2, nothing ran), and
    // `${toolu_A.city}` was silently rewritten when a call had that id.
    let p = Project::new(MANIFEST);
    for provider in PROVIDERS {
        let (stdout, stderr, code) = run(&p, &fixture(provider, "literal"), &["--format", "json"]);
        assert_eq!(code, 0, "{provider}: {stderr}");
        let doc: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            results(&doc)[0]["output"],
            serde_json::json!({"text": TEMPLATE}),
            "{provider}"
        );
    }
}

#[test]
fn a_reply_with_no_tool_calls_runs_nothing_and_answers_what_the_loop_expects() {
    let p = Project::new(MANIFEST);
    let python = sdk_python();
    for provider in PROVIDERS {
        let f = fixture(provider, "none");
        let (stdout, stderr, code) = run(&p, &f, &["--emit", provider]);
        assert_eq!(code, 0, "{provider}: {stderr}");
        assert!(stderr.contains("no tool calls"), "{provider}: {stderr}");
        let expected = match provider {
            "openai" | "openai-responses" => "[]\n",
            _ => "",
        };
        assert_eq!(stdout, expected, "{provider}");
        if let Some(python) = &python {
            validate(python, provider, &stdout, false);
        }
        let (stdout, _, code) = run(&p, &f, &["--format", "json"]);
        assert_eq!(code, 0);
        let doc: Value = serde_json::from_str(&stdout).unwrap();
        assert!(results(&doc).is_empty(), "{provider}");
    }
}

#[test]
fn a_one_line_reply_piped_to_stream_is_read_whole() {
    // Before: the single line `model_dump_json()` writes was read as one JSON Lines call
    // ("unknown field `usage`").
    let p = Project::new(MANIFEST);
    for provider in PROVIDERS {
        let text = std::fs::read_to_string(fixture(provider, "literal")).unwrap();
        let out = p
            .cmd()
            .args(["run", "--stream", "--emit", provider])
            .write_stdin(text)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{provider}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    }
}

/// `tools --emit` for the bundled manifest plus nested schemas, strict and not.
const OFFERED: &str = r#"
[tools."db.getOrders"]
kind = "scripted"
effect = "read"
description = "A customer's orders"
output = { customer = "{customer}" }
[tools."db.getOrders".args]
customer = { type = "integer", required = true, min = 1, description = "The customer id" }
status = { type = "string", enum = ["open", "shipped"] }

[tools.order]
kind = "scripted"
effect = "write"
idempotent = true
[tools.order.args]
lines = { type = "array", required = true, max_length = 10, items = { type = "object", properties = { sku = { type = "string", required = true, max_length = 20 }, qty = { type = "integer", min = 1, max = 99 } } } }
note = { type = "string", max_length = 200 }

[tools.free]
kind = "scripted"
effect = "read"
"#;

#[test]
fn tool_definitions_are_what_each_providers_sdk_types_take() {
    let p = Project::new(OFFERED);
    let python = sdk_python();
    for provider in ["openai", "openai-responses", "anthropic", "gemini"] {
        for strict in [false, true] {
            if strict && !provider.starts_with("openai") {
                continue;
            }
            let mut cmd = p.cmd();
            cmd.args(["tools", "--emit", provider]);
            if strict {
                cmd.arg("--strict");
            }
            let out = cmd.output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let doc: Value = serde_json::from_str(&text).unwrap();
            // Typed bounds, nested shapes, the exported name.
            assert!(
                text.contains("\"minimum\": 1,") || text.contains("\"minimum\": 1\n"),
                "{text}"
            );
            assert!(
                text.contains("db_getOrders") && !text.contains("\"db.getOrders\""),
                "{text}"
            );
            assert!(
                text.contains("\"items\"") && text.contains("\"sku\""),
                "{text}"
            );
            if strict {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("tool `free` cannot be strict"), "{err}");
                let strict_count = text.matches("\"strict\": true").count();
                assert_eq!(strict_count, 2, "{text}");
            }
            if provider == "anthropic" {
                assert_eq!(
                    doc[0]["input_schema"]["properties"]["customer"]["type"],
                    "integer"
                );
            }
            if let Some(py) = &python {
                validate_as(py, provider, &text, "--tools");
            }
        }
    }
    // A subset; an unknown name is refused with a hint.
    let out = p
        .cmd()
        .args(["tools", "--emit", "anthropic", "--tools", "db_getOrders"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc.as_array().unwrap().len(), 1);
    let out = p
        .cmd()
        .args(["tools", "--emit", "anthropic", "--tools", "ordr"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `order`"));
}

#[test]
fn a_dotted_tool_offered_under_its_safe_name_runs_when_the_model_calls_it() {
    let p = Project::new(OFFERED);
    let reply = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "db_getOrders", "arguments": "{\"customer\": 42}"}}]}}]
    });
    let path = p.write("reply.json", &reply.to_string());
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--emit", "openai"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc[0]["tool_call_id"], "call_1");
    assert_eq!(doc[0]["content"], "{\"customer\":42}");
    // Gemini matches a functionResponse to its functionCall by name: the name the model used.
    let gemini = serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "db_getOrders", "args": {"customer": 7}}}]}}]});
    let path = p.write("gemini.json", &gemini.to_string());
    let out = p
        .cmd()
        .args([
            "run",
            path.to_str().unwrap(),
            "--emit",
            "gemini",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["parts"][0]["functionResponse"]["name"], "db_getOrders",
        "{doc}"
    );
    let (doc, _) = p.run_json("- { tool: db_getOrders, args: { customer: 1 } }\n", &[]);
    assert_eq!(doc["results"][0]["tool"], "db.getOrders");
    assert_eq!(doc["results"][0]["called_as"], "db_getOrders");
}
