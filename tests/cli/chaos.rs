//! A short chaos run (`benches/chaos.py`): SIGKILLs at random points of a run mixing reads,
//! chained writes, concurrent idempotent writes and a `parallel_safe = false` tool, resumed
//! each time and finished: no write effect of a non-idempotent tool twice, no result lost, no
//! tool process left running after a kill.

use serde_json::Value;

use crate::common::repo;

#[test]
fn killed_and_resumed_runs_never_repeat_a_write_nor_lose_a_result() {
    let out = std::process::Command::new("python3")
        .arg(repo().join("benches/chaos.py"))
        .args([
            "--runs", "1", "--kills", "3", "--calls", "40", "--seed", "7", "--bin",
        ])
        .arg(assert_cmd::cargo::cargo_bin("flux-tools"))
        .output()
        .expect("python3 runs benches/chaos.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let figures: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(figures["duplicate write effects"], 0, "{figures}");
    assert_eq!(figures["lost results"], 0, "{figures}");
    assert_eq!(figures["processes left behind"], 0, "{figures}");
    assert_eq!(figures["runs"], 1);
}

#[test]
fn with_probes_killed_and_resumed_runs_leave_nothing_indeterminate() {
    let out = std::process::Command::new("python3")
        .arg(repo().join("benches/chaos.py"))
        .args([
            "--runs", "1", "--kills", "3", "--calls", "40", "--seed", "11", "--verify", "--bin",
        ])
        .arg(assert_cmd::cargo::cargo_bin("flux-tools"))
        .output()
        .expect("python3 runs benches/chaos.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let figures: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    for figure in [
        "duplicate write effects",
        "lost results",
        "processes left behind",
        "indeterminate",
    ] {
        assert_eq!(figures[figure], 0, "{figure}: {figures}");
    }
    assert_eq!(figures["runs"], 1);
}
