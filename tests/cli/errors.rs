//! Bad input: every problem reported with file, line, column and a hint; exit 2; nothing on
//! stdout.

use crate::common::{flux, repo, Project, SCRIPTED};

#[test]
fn bundled_manifest_and_batches_validate() {
    let mut args = vec!["validate".to_string()];
    for e in std::fs::read_dir(repo().join("batches")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            args.push(path.to_string_lossy().to_string());
        }
    }
    flux().current_dir(repo()).args(&args).assert().success();
}

#[test]
fn typo_cycle_and_bad_reference_give_three_located_errors() {
    let p = Project::new(SCRIPTED);
    let batch = p.write(
        "bad.yaml",
        "calls:\n  - id: a\n    tool: raed\n  - id: b\n    tool: read\n    args: { x: \"${c.y}\" }\n  - id: c\n    tool: read\n    args: { x: \"${b}\" }\n  - id: d\n    tool: read\n    args: { x: \"${nobody.z}\" }\n",
    );
    for cmd in ["plan", "run", "validate"] {
        let out = p
            .cmd()
            .args([cmd, batch.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(
            out.stdout.is_empty(),
            "{cmd}: stdout must stay empty: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.matches("error:").count(), 3, "{cmd}: {err}");
        assert!(err.contains("call `a` uses unknown tool `raed`"), "{err}");
        assert!(err.contains("bad.yaml:3:11"), "{err}");
        assert!(err.contains("did you mean `read`?"), "{err}");
        assert!(err.contains("references unknown call `nobody`"), "{err}");
        assert!(err.contains("bad.yaml:12:17"), "{err}");
        assert!(err.contains("reference cycle: b → c → b"), "{err}");
        assert!(err.contains("bad.yaml:6:17"), "{err}");
    }
}

#[test]
fn manifest_problems_are_all_reported_with_locations() {
    let p = Project::new(
        r#"[concurrency]
max_concurrent_tools = "eight"

[lanes.api]
rate = "10 per second"

[tools.search]
kind = "scripted"
effect = "read"
lanes = ["apii"]
latncy = "1s"

[tools.fetch]
kind = "htp"
"#,
    );
    let out = p.cmd().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "`max_concurrent_tools` in [concurrency] should be an integer, found a string"
        ),
        "{err}"
    );
    assert!(err.contains("tools.toml:2:24"), "{err}");
    assert!(err.contains("is not a rate"), "{err}");
    assert!(err.contains("tools.toml:5:8"), "{err}");
    assert!(
        err.contains("draws on lane `apii`, which [lanes] does not declare"),
        "{err}"
    );
    assert!(err.contains("did you mean `api`?"), "{err}");
    assert!(
        err.contains("unknown field `latncy` in [tools.search]"),
        "{err}"
    );
    assert!(err.contains("did you mean `latency`?"), "{err}");
    assert!(err.contains("unknown tool kind `htp`"), "{err}");
    assert!(err.contains("did you mean `http`?"), "{err}");
    assert_eq!(err.matches("error:").count(), 5, "{err}");
}

#[test]
fn invalid_toml_points_at_the_syntax_error() {
    let p = Project::new("[tools.a]\nkind = \"scripted\"\neffect = read\n");
    let out = p.cmd().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid TOML"), "{err}");
    assert!(err.contains("tools.toml:3:"), "{err}");
}

#[test]
fn warnings_do_not_fail_validation() {
    let p = Project::new("[tools.a]\nkind = \"scripted\"\n");
    let out = p.cmd().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: tool `a` does not declare `effect`"),
        "{err}"
    );
    assert!(err.contains("warning: the turn lane is unbounded"), "{err}");
    assert!(
        err.contains("warning: write tool `a` has no idempotency protection"),
        "{err}"
    );
}

#[test]
fn literal_arguments_failing_the_schema_are_errors_before_anything_runs() {
    let p = Project::new(
        "[tools.search]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"touch\", \"ran\"]\nstdin = \"none\"\n[tools.search.args]\nquery = { type = \"string\", required = true, max_length = 5 }\n",
    );
    let b = p.write(
        "b.yaml",
        "- tool: search\n  args: { query: \"far too long\", qery: 1 }\n",
    );
    let out = p.cmd().args(["run", b.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("over its max_length 5"), "{err}");
    assert!(
        err.contains("unknown argument `qery` (did you mean `query`?)"),
        "{err}"
    );
    assert!(!p.path().join("ran").exists(), "nothing may run");
}

#[test]
fn a_batch_can_never_read_the_environment() {
    let p = Project::new(SCRIPTED);
    let b = p.write(
        "b.yaml",
        "- tool: read\n  args: { home: \"${env:HOME}\" }\n",
    );
    let out = p
        .cmd()
        .args(["run", b.to_str().unwrap()])
        .env("HOME", "/secret-home")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a batch can never read the environment"),
        "{err}"
    );
    assert!(err.contains("b.yaml:2:"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("/secret-home"));
}

#[test]
fn unknown_call_fields_and_unsafe_ids_are_rejected() {
    let p = Project::new(SCRIPTED);
    let b = p.write(
        "b.yaml",
        "- id: \"../../etc\"\n  tool: read\n- tool: read\n  arguments: {}\n",
    );
    let out = p
        .cmd()
        .args(["validate", b.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("call id `../../etc` contains `.`"), "{err}");
    assert!(
        err.contains("unknown field `arguments` in call `c2`"),
        "{err}"
    );
    assert!(err.contains("arguments go under `args:`"), "{err}");
}

#[test]
fn manifest_is_found_in_a_parent_or_through_the_environment() {
    let p = Project::new(SCRIPTED);
    let sub = p.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    flux().current_dir(&sub).arg("tools").assert().success();
    let elsewhere = tempfile::tempdir().unwrap();
    flux()
        .current_dir(elsewhere.path())
        .env("FLUX_TOOLS_MANIFEST", p.path().join("tools.toml"))
        .arg("tools")
        .assert()
        .success();
    let out = flux()
        .current_dir(elsewhere.path())
        .arg("tools")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tools.toml found"));
}

#[test]
fn secrets_are_never_printed_by_tools() {
    let p = Project::new(
        "[tools.api]\nkind = \"http\"\neffect = \"read\"\nurl = \"https://example.test/v1?key=${env:FLUX_TEST_KEY}\"\nheaders = { Authorization = \"Bearer ${env:FLUX_TEST_KEY}\" }\n",
    );
    for format in ["table", "json"] {
        let out = p
            .cmd()
            .args(["tools", "--format", format])
            .env("FLUX_TEST_KEY", "hunter2-secret")
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("***"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}

#[test]
fn validate_finds_a_command_whose_program_is_not_there() {
    let p = crate::common::Project::new(
        r#"
[tools.here]
kind = "command"
effect = "read"
command = ["sh", "-c", "true"]

[tools.gone]
kind = "command"
effect = "read"
command = ["no-such-program-anywhere", "x"]

[tools.local]
kind = "command"
effect = "read"
command = ["./bin/missing"]

[tools.later]
kind = "command"
effect = "read"
command = ["${env:FLUX_TEST_SOME_PROGRAM}"]
"#,
    );
    let out = p.cmd().args(["validate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tool `gone`: program `no-such-program-anywhere` is not found on PATH"),
        "{err}"
    );
    assert!(err.contains("tools.toml:7:"), "located: {err}");
    assert!(
        err.contains("tool `local`: program `./bin/missing` is not an executable file"),
        "{err}"
    );
    assert!(
        !err.contains("tool `here`") && !err.contains("tool `later`"),
        "{err}"
    );
    assert!(err.contains("2 errors found"), "{err}");
    // Once the local program exists (and is executable), only the missing one is left.
    std::fs::create_dir_all(p.path().join("bin")).unwrap();
    let prog = p.path().join("bin/missing");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = p
        .cmd()
        .args(["validate", "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["errors"], 1, "{doc}");
}

#[test]
fn a_model_may_not_send_a_scripted_tools_reserved_arguments() {
    let p = crate::common::Project::new("[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n");
    let reply = r#"{"role": "assistant", "content": null, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{\"_latency\": \"5s\"}"}},
        {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{\"x\": 1}"}}]}"#;
    let path = p.write("reply.json", reply);
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &doc["results"];
    assert_eq!(r[0]["error"]["kind"], "invalid_call", "{doc}");
    assert!(r[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`_latency` is reserved for batch files"));
    assert_eq!(r[1]["status"], "ok");
    // A batch file may still use them.
    let (doc, code) = p.run_json("- { tool: t, args: { _latency: 10ms } }\n", &[]);
    assert_eq!(code, 0, "{doc}");
}

#[test]
fn validate_json_names_the_call_and_the_tool_of_each_problem() {
    let p = crate::common::Project::new(
        "[tools.t]\nkind = \"scripted\"\neffect = \"read\"\n[tools.t.args]\nn = { type = \"integer\", max = 3 }\n",
    );
    let b = p.write(
        "b.yaml",
        "- { id: first, tool: t, args: { n: 9 } }\n- { id: second, tool: tt }\n",
    );
    let out = p
        .cmd()
        .args(["validate", b.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let diags = doc["diagnostics"].as_array().unwrap();
    let of = |call: &str| {
        diags
            .iter()
            .find(|d| d["call"] == call)
            .unwrap_or_else(|| panic!("{doc}"))
    };
    assert_eq!(of("first")["tool"], "t");
    assert!(of("first")["message"]
        .as_str()
        .unwrap()
        .contains("above its maximum 3"));
    assert_eq!(of("second")["tool"], "tt");
    assert_eq!(of("second")["line"], 2);
}
