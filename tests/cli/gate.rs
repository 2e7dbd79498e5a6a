//! Approvals and hooks: serial and in call order, through a pseudo-terminal or `--approve`.

use serde_json::Value;

use crate::common::{results, Project};

const MANIFEST: &str = r#"
[hooks]
before_call = ["sh", "-c", "input=$(cat); case \"$input\" in *forbidden*) echo 'no forbidden calls' >&2; exit 3;; esac"]
after_call = ["sh", "-c", "cat >> after.log; echo >> after.log"]

[tools.pay]
kind = "scripted"
effect = "write"
idempotent = true
requires_approval = true
latency = "100ms"

[tools.read]
kind = "scripted"
effect = "read"
latency = "300ms"
"#;

fn statuses(doc: &Value) -> Vec<String> {
    results(doc)
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn approvals_are_asked_on_the_terminal_one_at_a_time_in_call_order() {
    let p = Project::new(MANIFEST);
    let b = p.write(
        "b.yaml",
        "- { id: first, tool: pay, args: { amount: 1 } }\n- { id: slow, tool: read, args: { _latency: 1s } }\n- { id: second, tool: pay, args: { amount: 2 } }\n- { id: third, tool: pay, args: { amount: 3 } }\n",
    );
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let inner = format!(
        "{} run {} --format json --progress never > out.json",
        bin.display(),
        b.display()
    );
    let mut child = std::process::Command::new("script")
        .current_dir(p.path())
        .args(["-qfec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) gives flux-tools a terminal");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"y\nn\ny\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(p.path().join("out.json")).unwrap()).unwrap();
    assert_eq!(
        statuses(&doc),
        ["ok", "ok", "never_dispatched", "ok"],
        "{screen}"
    );
    assert_eq!(results(&doc)[2]["error"]["kind"], "approval_denied");
    // The questions came in call order, each showing the tool and its resolved arguments.
    let a = screen
        .find("approve call `first` to `pay` with arguments {\"amount\":1}")
        .expect("first asked");
    let b = screen.find("approve call `second`").expect("second asked");
    let c = screen.find("approve call `third`").expect("third asked");
    assert!(a < b && b < c, "{screen}");
    // The read was not held up by the questions.
    assert!(results(&doc)[1]["started_ms"].as_u64().unwrap() < 1000);
}

#[test]
fn without_a_terminal_or_an_answer_approval_is_required() {
    let p = Project::new(MANIFEST);
    let b = p.write(
        "b.yaml",
        "- { tool: pay, args: { amount: 1 } }\n- { tool: read, args: { x: 1 } }\n",
    );
    for (flag, first) in [
        (
            None,
            "approval required (no terminal to ask on; pass --approve, or --journal to pause for it)",
        ),
        (Some("none"), "approval denied (--approve none)"),
    ] {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"));
        cmd.current_dir(p.path())
            .args(["run", b.to_str().unwrap(), "--format", "json"])
            .stdin(std::process::Stdio::null());
        if let Some(f) = flag {
            cmd.args(["--approve", f]);
        }
        // No controlling terminal, even when the tests run in one: a new session has none.
        // SAFETY: setsid is async-signal-safe and touches nothing of the parent.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::setsid();
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = results(&doc);
        assert_eq!(r[0]["status"], "never_dispatched");
        assert_eq!(r[0]["error"]["kind"], "approval_denied");
        assert_eq!(
            r[0]["error"]["message"],
            format!("never dispatched: {first}")
        );
        assert_eq!(r[1]["status"], "ok");
    }
    let (doc, code) = p.run_json(
        "- { tool: pay, args: { amount: 1 } }\n",
        &["--approve", "pay"],
    );
    assert_eq!(code, 0, "{doc}");
}

#[test]
fn hooks_guard_and_observe_in_call_order() {
    let p = Project::new(MANIFEST);
    let (doc, code) = p.run_json(
        "- { id: a, tool: read, args: { _latency: 600ms } }\n- { id: b, tool: read, args: { x: forbidden } }\n- { id: c, tool: read, args: { _latency: 100ms } }\n",
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(statuses(&doc), ["ok", "never_dispatched", "ok"]);
    let r = &results(&doc)[1];
    assert_eq!(r["error"]["kind"], "guardrail");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no forbidden calls"));
    let log = std::fs::read_to_string(p.path().join("after.log")).unwrap();
    let ids: Vec<String> = log
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["call"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        ids,
        ["a", "b", "c"],
        "after_call sees results in call order although c finished first"
    );
}

#[test]
fn a_hook_that_reads_nothing_cannot_hang_the_run() {
    // Before: a before_call hook that never reads its stdin, given 300 KB of arguments,
    // blocked the serial gate forever (the write to its stdin never finished).
    let p = Project::new(
        "[hooks]\nbefore_call = [\"sleep\", \"1000\"]\nhook_timeout = \"1s\"\n\n[tools.read]\nkind = \"scripted\"\neffect = \"read\"\n",
    );
    let big = "x".repeat(300 * 1024);
    let b = p.write(
        "b.yaml",
        &format!("- {{ id: big, tool: read, args: {{ blob: \"{big}\" }} }}\n- {{ id: small, tool: read }}\n"),
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(["run", b.to_str().unwrap(), "--format", "json"])
        .env("CI", "true")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the run hung on a hook that reads nothing");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for r in results(&doc) {
        assert_eq!(r["status"], "never_dispatched", "{r}");
        assert_eq!(r["error"]["kind"], "guardrail");
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hook timed out after 1s"));
    }
}
