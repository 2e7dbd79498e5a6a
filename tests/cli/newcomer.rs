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
