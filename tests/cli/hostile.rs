//! Hostile input: whatever a model (or anyone) writes, flux-tools answers with a clear error and
//! exit 2 — quickly, in bounded memory, writing nothing half-way — never a panic or a hang.

use std::time::{Duration, Instant};

use crate::common::{Project, SCRIPTED};

/// Run `flux-tools run` on raw batch bytes; returns (exit code, stderr).
fn run_bytes(p: &Project, bytes: &[u8], extra: &[&str]) -> (i32, String) {
    let path = p.path().join("hostile.yaml");
    std::fs::write(&path, bytes).unwrap();
    let started = Instant::now();
    let out = p
        .cmd()
        .args(["run", path.to_str().unwrap(), "--output", "res.json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code().unwrap_or(-1), err)
}

fn assert_refused(p: &Project, bytes: &[u8], needle: &str) {
    let (code, err) = run_bytes(p, bytes, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    assert!(
        !p.path().join("res.json").exists(),
        "nothing may be written"
    );
}

#[test]
fn malformed_batches_are_refused_clearly() {
    let p = Project::new(SCRIPTED);
    // Deep nesting.
    let deep = format!(
        "calls:\n  - tool: read\n    args: {{ x: {}{} }}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert_refused(&p, deep.as_bytes(), "error:");
    // An alias bomb.
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (i, c) in "bcdefghi".chars().enumerate() {
        let prev = (b'a' + i as u8) as char;
        bomb.push_str(&format!(
            "{c}: &{c} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    bomb.push_str("calls:\n  - tool: read\n    args: { x: *i }\n");
    assert_refused(&p, bomb.as_bytes(), "error:");
    // Not UTF-8, and NUL bytes.
    assert_refused(
        &p,
        b"calls:\n  - tool: read\n    args: { x: \"\xff\xfe\" }\n",
        "not UTF-8",
    );
    assert_refused(&p, b"calls:\n  - tool: read\0\n", "NUL");
    // Arguments that are not an object; a call that is not a mapping.
    assert_refused(
        &p,
        b"calls:\n  - tool: read\n    args: [1, 2]\n",
        "`args` should be a mapping",
    );
    assert_refused(&p, b"calls:\n  - 42\n", "should be a mapping");
    // Ids with shell and path characters.
    assert_refused(
        &p,
        b"calls:\n  - id: \"$(rm -rf /)\"\n    tool: read\n",
        "ids may use letters",
    );
    assert_refused(
        &p,
        b"calls:\n  - id: \"../../etc/passwd\"\n    tool: read\n",
        "ids may use letters",
    );
}

#[test]
fn huge_strings_are_handled_without_trouble() {
    let p = Project::new(&format!(
        "{SCRIPTED}\n[tools.echo]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"echo\", \"{{text}}\"]\nstdin = \"none\"\n"
    ));
    let big = "x".repeat(10 << 20);
    let batch = format!(
        "[{{\"tool\": \"echo\", \"args\": {{\"text\": \"{big}\"}}}}, {{\"tool\": \"read\"}}]"
    );
    let (code, err) = run_bytes(&p, batch.as_bytes(), &["-q"]);
    // 10 MB cannot be one argv element: the call fails on its own, the other succeeds.
    assert_eq!(code, 1, "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.path().join("res.json")).unwrap()).unwrap();
    assert_eq!(doc["results"][0]["status"], "error");
    assert_eq!(doc["results"][0]["error"]["kind"], "spawn_failed");
    assert_eq!(doc["results"][1]["status"], "ok");
}

#[test]
fn hostile_manifests_are_refused_with_locations() {
    for (text, needle) in [
        (
            "[concurrency]\nmax_concurrent_tools = -1\n",
            "must be between 1 and 1000000",
        ),
        (
            "[concurrency]\nmax_concurrent_tools = 99999999999999999999\n",
            "tools.toml:2:",
        ),
        (
            "[tools.a]\nkind = \"scripted\"\neffect = \"read\"\ncost = -5\n",
            "cannot be negative",
        ),
        (
            "[tools.a]\nkind = \"scripted\"\neffect = \"read\"\nretries = 1000000\n",
            "between 0 and 100",
        ),
        (
            "[tools.a]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"{prog}\"]\n",
            "cannot come from an argument",
        ),
        (
            "[deadline]\nrun_seconds = -3\n",
            "positive number of seconds",
        ),
    ] {
        let p = Project::new(text);
        let out = p.cmd().arg("validate").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn output_paths_that_cannot_be_written_are_refused_before_running() {
    let p = Project::new(SCRIPTED);
    std::fs::create_dir(p.path().join("adir")).unwrap();
    let b = p.write("b.yaml", "- tool: read\n");
    for target in ["adir", "missing/res.json"] {
        let out = p
            .cmd()
            .args(["run", b.to_str().unwrap(), "--output", target])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{target}");
        assert!(out.stdout.is_empty());
    }
}
