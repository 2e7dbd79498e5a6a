//! `plan` on the bundled examples: waves, edges with reasons, critical path, phases.

use serde_json::Value;

use crate::common::{flux, repo, Project, SCRIPTED};

fn plan_json(batch: &str) -> Value {
    let out = flux()
        .current_dir(repo())
        .args(["plan", batch, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn refund_turn_reads_in_one_wave_then_the_write_chain() {
    let p = plan_json("batches/refund.yaml");
    assert_eq!(p["phases"].as_array().unwrap().len(), 1);
    let waves = &p["phases"][0]["waves"];
    assert_eq!(
        waves[0],
        serde_json::json!(["search", "customer", "orders"])
    );
    assert_eq!(waves[1], serde_json::json!(["refund"]));
    assert_eq!(waves[2], serde_json::json!(["email"]));
    let calls = p["calls"].as_array().unwrap();
    assert_eq!(
        calls[3]["edges"],
        serde_json::json!([{"from": "orders", "reason": "reference"}])
    );
    assert_eq!(
        calls[4]["edges"],
        serde_json::json!([{"from": "refund", "reason": "after"}])
    );
    assert_eq!(
        p["critical_path"],
        serde_json::json!(["orders", "refund", "email"])
    );
    assert_eq!(p["critical_path_ms"], 800);
    assert_eq!(p["makespan_ms"], 800);
    assert_eq!(p["width"], 3);
    assert_eq!(
        calls[0]["lanes"],
        serde_json::json!(["tenant:acme", "turn", "tool:search", "lane:partner-api"])
    );
}

#[test]
fn order_dependent_tool_has_a_phase_of_its_own() {
    let p = plan_json("batches/order-dependent.yaml");
    let phases = p["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    assert_eq!(phases[1]["alone"], true);
    assert_eq!(phases[1]["calls"], serde_json::json!(["book"]));
    assert_eq!(p["calls"][2]["own_phase"], true);
    // Booking starts when both lookups have ended and the rest start after it.
    assert_eq!(p["calls"][2]["est_start_ms"], 1000);
    assert_eq!(p["calls"][3]["est_start_ms"], 1500);
}

#[test]
fn lane_limits_shape_the_estimate() {
    let p = Project::new(SCRIPTED);
    let b = p.write(
        "b.yaml",
        "- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n",
    );
    let out = p
        .cmd()
        .args(["plan", b.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["width"], 2);
    assert_eq!(v["makespan_ms"], 900);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("fans out 5 permits onto lane tool:pair (limit 2)"));
}

#[test]
fn plan_renders_table_dot_and_mermaid() {
    let run = |format: &str| {
        let out = flux()
            .current_dir(repo())
            .args(["plan", "batches/refund.yaml", "--format", format])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run("table");
    assert!(
        table.contains("critical path:      orders → refund → email (800ms)"),
        "{table}"
    );
    assert!(table.contains("orders (reference)"), "{table}");
    let dot = run("dot");
    assert!(dot.starts_with("digraph plan {"), "{dot}");
    assert!(
        dot.contains("\"orders\" -> \"refund\" [label=\"reference\", penwidth=2];"),
        "{dot}"
    );
    let mermaid = run("mermaid");
    assert!(mermaid.starts_with("flowchart LR"), "{mermaid}");
    assert!(mermaid.contains("n2 -->|reference| n3"), "{mermaid}");
}

#[test]
fn plan_reads_a_batch_from_stdin_and_runs_nothing() {
    let p = Project::new("[tools.t]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"touch\", \"ran\"]\nstdin = \"none\"\n");
    p.cmd()
        .args(["plan", "-", "--format", "json"])
        .write_stdin("- tool: t\n- tool: t\n")
        .assert()
        .success();
    assert!(!p.path().join("ran").exists());
}

#[test]
fn refund_plan_table_snapshot() {
    let out = flux()
        .current_dir(repo())
        .args(["plan", "batches/refund.yaml", "--format", "table"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

#[test]
fn tools_table_snapshot() {
    let out = flux()
        .current_dir(repo())
        .args(["tools", "--format", "table"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}
