//! What a newcomer trips on (issue 30): help that says what the README says, a drained run
//! said as drained, and the other first-hour stumbles.

use crate::common::{flux, Project};
use crate::pane::Pane;

fn help(args: &[&str]) -> String {
    let out = flux().args(args).arg("--help").output().expect("help");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn run_help_names_approvals_by_id_and_hash() {
    let h = help(&["run"]);
    let approve = h.split("--approve").nth(1).unwrap_or_default();
    let approve = approve.split("\n      --").next().unwrap_or_default();
    assert!(approve.contains("ID@HASH"), "{approve}");
}

#[test]
fn tools_help_describes_what_is_offered_not_what_is_answered() {
    let h = help(&["tools"]);
    assert!(!h.contains("tool messages"), "{h}");
    assert!(!h.contains("tool_result"), "{h}");
    assert!(h.contains("input_schema"), "{h}");
    assert!(h.contains("function_declarations"), "{h}");
}

const APPROVAL: &str = r#"[tools.slow]
kind = "scripted"
effect = "read"
latency = "3s"

[tools.danger]
kind = "scripted"
effect = "read"
latency = "200ms"
requires_approval = true
"#;

#[test]
fn the_approval_question_shows_over_the_live_display_and_the_display_comes_back() {
    let p = Project::new(APPROVAL);
    p.write(
        "b.yaml",
        "- tool: slow\n- tool: slow\n- tool: slow\n- {id: d, tool: danger, args: {path: /tmp/x}}\n",
    );
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let cmd = format!("{} run b.yaml --format jsonl > out.jsonl", bin.display());
    let Some(pane) = Pane::start(p.path(), 100, &cmd) else {
        return;
    };
    let question = "approve call `d` to `danger` with arguments {\"path\":\"/tmp/x\"}? [y/N]";
    pane.wait_for(question, 20);
    // Still there a second later: the display's redraws (10 a second) leave it alone.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let screen = pane.screen();
    assert!(screen.contains(question), "{screen}");
    pane.type_line("y");
    let screen = pane.wait_for("EXIT=0", 20);
    let out = std::fs::read_to_string(p.path().join("out.jsonl")).unwrap_or_default();
    assert_eq!(
        out.matches("\"status\":\"ok\"").count(),
        4,
        "{out}\n{screen}"
    );
}

const WIDE: &str = r#"[concurrency]
max_concurrent_tools = 12
per_tool = { limited = 2 }

[tools.slow]
kind = "scripted"
effect = "read"
latency = "3s"

[tools.limited]
kind = "scripted"
effect = "read"
latency = "3s"
"#;

/// 30 slow calls and 4 in a lane of 2, run in a 100-column pane.
fn wide_run(p: &Project) -> Option<Pane> {
    let mut b = "- tool: slow\n".repeat(30);
    b.push_str(&"- tool: limited\n".repeat(4));
    p.write("b.yaml", &b);
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let cmd = format!("{} run b.yaml --format jsonl > out.jsonl", bin.display());
    Pane::start(p.path(), 100, &cmd)
}

#[test]
fn the_live_display_counts_what_runs_and_shows_only_lanes_with_a_limit() {
    let p = Project::new(WIDE);
    let Some(pane) = wide_run(&p) else { return };
    let screen = pane.wait_for("12 running", 20);
    assert!(
        screen.contains("no limit on tenant:default, tool:slow"),
        "{screen}"
    );
    assert!(screen.contains("12/12"), "the turn lane of 12: {screen}");
    assert!(
        !screen.contains('∞'),
        "unbounded lanes are not drawn: {screen}"
    );
}

#[test]
fn ctrl_c_leaves_the_summary_and_no_stale_progress_line() {
    let p = Project::new(WIDE);
    let Some(pane) = wide_run(&p) else { return };
    pane.wait_for("12 running", 20);
    pane.ctrl_c();
    let screen = pane.wait_for("EXIT=130", 20);
    assert!(screen.contains("outcome interrupted"), "{screen}");
    assert!(
        !screen.contains("/34 calls"),
        "a stale progress line: {screen}"
    );
    assert!(
        !screen.contains("running ·"),
        "a stale progress line: {screen}"
    );
}

const LONG: &str = r#"[concurrency]
per_tool = { fetch_the_release_notes = 2 }

[tools.fetch_the_release_notes]
kind = "command"
effect = "read"
idempotent = true
backend = "github-releases-api"
timeout = "30s"
command = ["curl", "--silent", "--fail", "--location", "https://api.github.com/repos/example/project/releases/latest"]

[tools.write_the_changelog_entry]
kind = "command"
effect = "write"
backend = "changelog-file"
command = ["python3", "scripts/write_changelog_entry.py", "--section", "unreleased", "--format", "keepachangelog"]
"#;

/// `tools` and `plan` fit a 100-column terminal, and keep their natural width in a pipe.
#[test]
fn plan_and_tools_tables_fit_the_terminal_and_keep_their_width_in_a_pipe() {
    let p = Project::new(LONG);
    p.write(
        "b.yaml",
        "- {id: notes, tool: fetch_the_release_notes}\n- {id: entry, tool: write_the_changelog_entry, after: [notes]}\n",
    );
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    let bin = bin.display();
    let cmd = format!(
        "{bin} tools; {bin} plan b.yaml; {bin} tools > tools.txt; {bin} plan b.yaml --format table > plan.txt"
    );
    let Some(pane) = Pane::start(p.path(), 100, &cmd) else {
        return;
    };
    pane.wait_for("EXIT=", 20);
    let screen = pane.joined();
    assert!(screen.contains("fetch_the_release_notes"), "{screen}");
    assert!(screen.contains("est. start"), "{screen}");
    for line in screen.lines() {
        assert!(
            line.trim_end().chars().count() <= 100,
            "wider than the terminal: {line}"
        );
    }
    for file in ["tools.txt", "plan.txt"] {
        let text = std::fs::read_to_string(p.path().join(file)).unwrap_or_default();
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(
            widest > 100,
            "{file} keeps its natural width in a pipe:\n{text}"
        );
    }
}

/// A test that skips for want of a dependency says so in `cargo test`'s own output (not only
/// under `--nocapture`), and fails under CI.
#[test]
fn a_skipped_test_says_so_without_nocapture_and_fails_under_ci() {
    let exe = std::env::current_exe().expect("this test binary");
    let dir = tempfile::tempdir().expect("a folder");
    let log = dir.path().join("skips.log");
    let run = |ci: bool| {
        let mut c = std::process::Command::new(&exe);
        c.args([
            "--exact",
            "sdk::tool_definitions_are_what_each_providers_sdk_types_take",
            "--test-threads",
            "1",
        ])
        .env("FLUX_TEST_SDK_PYTHON", "/nonexistent/python")
        .env("FLUX_TEST_SKIP_LOG", &log);
        if ci {
            c.env("CI", "true");
        } else {
            c.env_remove("CI");
        }
        let out = c.output().expect("the test binary");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = run(false);
    assert!(ok, "{text}");
    assert!(
        text.contains("NOTICE: skipped sdk::tool_definitions_are_what_each_providers_sdk_types_take: no SDK virtualenv"),
        "{text}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged.lines().count(), 1, "{logged}");
    let (ok, text) = run(true);
    assert!(!ok, "under CI a missing dependency fails: {text}");
    assert!(text.contains("under CI every test runs"), "{text}");
}
