//! Ctrl-C and the live display: real signals to a real `flux-tools run`, and a pseudo-terminal.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Project, SCRIPTED};

/// Poll `ready` until it holds (panics after `limit`).
fn wait_for(limit: Duration, ready: impl Fn() -> bool) {
    let until = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < until, "the run never got there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigint_classifies_in_flight_calls_writes_results_and_exits_130() {
    let p = Project::new(&format!(
        "{SCRIPTED}\n[tools.sleeper]\nkind = \"command\"\neffect = \"write\"\ncommand = [\"sleep\", \"30\"]\nstdin = \"none\"\n"
    ));
    let b = p.write(
        "b.yaml",
        "concurrency: { max_concurrent_tools: 3 }\ncalls:\n  - { id: read, tool: read, args: { _latency: 30s } }\n  - { id: sleeper, tool: sleeper }\n  - { id: quick, tool: pair }\n  - { id: next, tool: read, args: { _latency: 30s } }\n  - { id: queued, tool: read }\n",
    );
    let child = p.spawn(&[
        "run",
        b.to_str().unwrap(),
        "--output",
        "res.json",
        "--format",
        "json",
        "--journal",
        "run.journal",
    ]);
    // No fixed sleep: the journal (fsynced at each dispatch) says when `next` is in flight.
    wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(p.path().join("run.journal"))
            .is_ok_and(|j| j.contains(r#""type":"dispatch","index":3"#))
    });
    // SAFETY: sending SIGINT to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "graceful stop took too long"
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(p.path().join("res.json")).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "interrupted");
    let status: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    // `next` took the turn slot `quick` freed and was in flight; `queued` never got one.
    assert_eq!(
        status,
        [
            "cancelled",
            "indeterminate",
            "ok",
            "cancelled",
            "never_dispatched"
        ]
    );
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        stdout["results"], doc["results"],
        "stdout and the file agree"
    );
}

#[test]
fn the_live_display_shows_lane_lines_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("`script` (util-linux) is needed to give flux-tools a pseudo-terminal");
    }
    let p = Project::new(SCRIPTED);
    let b = p.write(
        "b.yaml",
        "- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n",
    );
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let inner = format!(
        "{} run {} --format json > out.json",
        bin.display(),
        b.display()
    );
    let out = std::process::Command::new("script")
        .current_dir(p.path())
        .args(["-qfec", &inner, "/dev/null"])
        .env_remove("CI")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("tool:pair"),
        "no lane line for the tool lane: {screen}"
    );
    assert!(
        screen.contains("/2    held"),
        "no permits held / limit: {screen}"
    );
    assert!(screen.contains("queued"), "{screen}");
    assert!(screen.contains("calls"), "no overall line: {screen}");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(p.path().join("out.json")).unwrap()).unwrap();
    assert_eq!(
        doc["outcome"], "completed",
        "stdout carried the results, not the display"
    );
}

#[test]
fn a_second_sigint_kills_at_once() {
    // The tool ignores SIGTERM and has a long grace: only the second Ctrl-C's SIGKILL ends it soon.
    // It marks when it started and each SIGTERM it shrugged off, so the test waits for those
    // instead of sleeping a fixed time.
    let p = Project::new(
        "[tools.stubborn]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"sh\", \"-c\", \"trap 'touch termed' TERM; touch started; while :; do sleep 0.1; done\"]\nstdin = \"none\"\nkill_grace = \"30s\"\n",
    );
    let b = p.write("b.yaml", "- tool: stubborn\n");
    let child = p.spawn(&["run", b.to_str().unwrap(), "--format", "json"]);
    let pid = child.id() as i32;
    wait_for(Duration::from_secs(20), || {
        p.path().join("started").exists()
    });
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    wait_for(Duration::from_secs(20), || p.path().join("termed").exists());
    let second = Instant::now();
    // SAFETY: as above.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "the second Ctrl-C did not stop it at once"
    );
    assert_eq!(out.status.code(), Some(130));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["results"][0]["status"], "cancelled");
}
