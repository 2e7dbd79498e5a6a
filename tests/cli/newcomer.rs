//! What a newcomer trips on (issue 30): help that says what the README says, a drained run
//! said as drained, and the other first-hour stumbles.

use crate::common::flux;

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
