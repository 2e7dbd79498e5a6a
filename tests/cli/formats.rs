//! Model formats in and out: OpenAI and Anthropic responses as input (ids kept), `--emit openai`
//! and `--emit anthropic` as output, in call order, failures included.

use serde_json::Value;

use crate::common::{flux, repo, results};

fn fixture(name: &str) -> String {
    repo()
        .join("tests/fixtures")
        .join(name)
        .to_string_lossy()
        .to_string()
}

fn run(args: &[&str]) -> (Value, i32) {
    let out = flux().current_dir(repo()).args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (v, out.status.code().unwrap_or(-1))
}

#[test]
fn an_openai_response_runs_with_its_call_ids_and_answers_as_tool_messages() {
    let (doc, code) = run(&["run", &fixture("openai_response.json"), "--format", "json"]);
    assert_eq!(code, 1);
    let ids: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_Tokyo01", "call_Broken2", "call_Paris03"]);
    let (msgs, _) = run(&["run", &fixture("openai_response.json"), "--emit", "openai"]);
    let msgs = msgs.as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    for (m, id) in msgs
        .iter()
        .zip(["call_Tokyo01", "call_Broken2", "call_Paris03"])
    {
        assert_eq!(m["role"], "tool");
        assert_eq!(m["tool_call_id"], id);
        assert!(m["content"].is_string());
    }
    assert_eq!(
        serde_json::from_str::<Value>(msgs[0]["content"].as_str().unwrap()).unwrap()["city"],
        "Tokyo"
    );
    assert!(msgs[1]["content"]
        .as_str()
        .unwrap()
        .starts_with("ERROR (error, tool_error): upstream returned 502"));
}

#[test]
fn an_anthropic_response_answers_as_one_user_message_of_tool_results() {
    let (msg, code) = run(&[
        "run",
        &fixture("anthropic_response.json"),
        "--emit",
        "anthropic",
    ]);
    assert_eq!(code, 1);
    assert_eq!(msg["role"], "user");
    let blocks = msg["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], "toolu_01A09q90qw90lq917835lq9");
    assert!(blocks[0].get("is_error").is_none());
    assert_eq!(blocks[1]["tool_use_id"], "toolu_01B19q90qw90lq917835lq8");
    assert_eq!(blocks[1]["is_error"], true);
}

#[test]
fn streamed_emits_are_json_lines_in_call_order() {
    let out = flux()
        .current_dir(repo())
        .args([
            "run",
            &fixture("openai_response.json"),
            "--emit",
            "openai",
            "--stream",
        ])
        .output()
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines
        .iter()
        .map(|l| l["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_Tokyo01", "call_Broken2", "call_Paris03"]);
}

#[test]
fn invalid_argument_json_from_the_model_costs_only_that_call() {
    // Before: exit 2 and an empty stdout, so no call of the reply got an answer.
    let out = flux()
        .current_dir(repo())
        .args([
            "run",
            &fixture("openai_invalid_arguments.json"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bad = results(&doc)
        .iter()
        .find(|r| r["id"] == "call_bad")
        .expect("the bad call is answered");
    assert_eq!(bad["status"], "never_dispatched");
    assert_eq!(bad["error"]["kind"], "invalid_call");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the model's arguments are not valid JSON"),
        "{bad}"
    );
}

#[test]
fn input_format_can_be_forced() {
    let out = flux()
        .current_dir(repo())
        .args([
            "plan",
            &fixture("anthropic_response.json"),
            "--input-format",
            "openai",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("the input is an Anthropic Messages reply, not an OpenAI chat completion"));
}

#[test]
fn trace_and_svg_timeline_draw_every_dispatched_call() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let res = dir.path().join("results.json");
    let svg = dir.path().join("timeline.svg");
    let out = flux()
        .current_dir(repo())
        .args([
            "run",
            "batches/one-failure.yaml",
            "-q",
            "--trace",
            trace.to_str().unwrap(),
            "--output",
            res.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let spans: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "queue")
        .collect();
    assert_eq!(spans.len(), 4, "one complete span per dispatched call");
    assert!(spans
        .iter()
        .all(|s| s["dur"].as_u64().unwrap() >= 300_000 && s["ts"].is_u64() && s["tid"].is_u64()));
    assert!(spans.iter().any(|s| s["args"]["status"] == "error"));

    flux()
        .current_dir(repo())
        .args([
            "report",
            res.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ])
        .assert()
        .success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert_eq!(text.matches("class=\"call ").count(), 4);
    assert!(
        text.contains("class=\"call error\""),
        "failures are coloured apart"
    );
    // It renders: rsvg-convert (librsvg, installed by .ci/run) turns it into a non-empty PNG.
    let png = dir.path().join("timeline.png");
    match std::process::Command::new("rsvg-convert")
        .args(["-o", png.to_str().unwrap(), svg.to_str().unwrap()])
        .status()
    {
        Ok(s) => {
            assert!(s.success());
            let bytes = std::fs::read(&png).unwrap();
            assert!(
                bytes.len() > 1000 && bytes.starts_with(b"\x89PNG"),
                "{} bytes",
                bytes.len()
            );
        }
        Err(_) => crate::common::skip(
            "rsvg-convert is not installed",
            "apt-get install librsvg2-bin",
        ),
    }
}

#[test]
fn the_bundled_replies_of_every_provider_run_and_answer_each_call() {
    for provider in ["openai", "openai-responses", "anthropic", "gemini"] {
        let out = flux()
            .current_dir(repo())
            .args([
                "run",
                &format!("batches/replies/{provider}.json"),
                "--emit",
                provider,
                "--stream",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{provider}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 3, "{provider}: {text}");
        // The model's `${name}` is text for the tool, not a reference.
        assert!(text.contains("Hello ${name}!"), "{provider}: {text}");
    }
}

#[test]
fn literal_makes_a_batch_files_arguments_data() {
    let p = crate::common::Project::new(
        "[tools.echo]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"cat\"]\n",
    );
    let batch = "- { tool: echo, args: { text: 'Hello ${name}! $${x}' } }\n";
    let (doc, code) = p.run_json(batch, &["--literal"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(
        results(&doc)[0]["output"],
        serde_json::json!({"text": "Hello ${name}! $${x}"})
    );
    // Without it, a batch file's `${name}` is a reference: checked before anything runs.
    let b = p.write("b.yaml", batch);
    let out = p.cmd().args(["run", b.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("references unknown call `name`"));
}
