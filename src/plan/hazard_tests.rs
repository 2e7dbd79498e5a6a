//! Read/write hazards in the planner: waves for mixes of reads and writes on one and two
//! backends, backends named, inferred from a lane and from an MCP server, and the opt-out.

use std::path::PathBuf;

use super::*;
use crate::batch::Batch;
use crate::error::SourceFile;
use crate::manifest::Manifest;

const MANIFEST: &str = r#"
[lanes.db]
concurrency = 4

[mcp_servers.git]
command = ["mcp-server-git"]

[tools.read_a]
kind = "scripted"
effect = "read"
backend = "a"
[tools.write_a]
kind = "scripted"
effect = "write"
idempotent = true
backend = "a"
[tools.read_b]
kind = "scripted"
effect = "read"
backend = "b"
[tools.write_ab]
kind = "scripted"
effect = "write"
idempotent = true
backend = ["a", "b"]
[tools.lane_read]
kind = "scripted"
effect = "read"
lanes = ["db"]
[tools.lane_write]
kind = "scripted"
effect = "write"
idempotent = true
lanes = ["db"]
[tools.git_diff_unstaged]
kind = "mcp"
server = "git"
effect = "read"
[tools.git_add]
kind = "mcp"
server = "git"
effect = "write"
idempotent = true
"#;

fn plan_with(manifest: &str, batch: &str) -> Plan {
    let m = Manifest::parse(
        SourceFile::new("tools.toml", manifest),
        PathBuf::from("/tmp/t.toml"),
        crate::tools::KINDS,
    )
    .unwrap();
    let (b, _) = Batch::parse(SourceFile::new("b.yaml", batch)).unwrap();
    build(&m, &b, &PlanOptions::default()).unwrap()
}

fn plan(batch: &str) -> Plan {
    plan_with(MANIFEST, batch)
}

/// `(from, reason, backend)` of call `p`'s edges.
fn edges(plan: &Plan, p: usize) -> Vec<(usize, EdgeReason, Option<&str>)> {
    plan.calls[p]
        .edges
        .iter()
        .map(|e| {
            let b = e.backend.map(|b| plan.backends[b as usize].as_str());
            (e.from, e.reason, b)
        })
        .collect()
}

#[test]
fn reads_and_writes_on_one_backend_keep_call_order_and_other_backends_overlap() {
    let p =
        plan("- tool: read_a\n- tool: write_a\n- tool: read_a\n- tool: read_b\n- tool: read_a\n");
    assert_eq!(edges(&p, 1), [(0, EdgeReason::ReadThenWrite, Some("a"))]);
    assert_eq!(edges(&p, 2), [(1, EdgeReason::WriteThenRead, Some("a"))]);
    assert!(edges(&p, 3).is_empty(), "another backend overlaps");
    // Reads among themselves never wait: the second later read waits only for the write.
    assert_eq!(edges(&p, 4), [(1, EdgeReason::WriteThenRead, Some("a"))]);
    let est = simulate(&p);
    assert_eq!(est.wave, [0, 1, 2, 0, 2]);
}

#[test]
fn a_write_on_two_backends_waits_for_the_reads_of_both_once_each() {
    let p = plan("- tool: read_a\n- tool: read_b\n- tool: write_ab\n- tool: read_b\n");
    assert_eq!(
        edges(&p, 2),
        [
            (0, EdgeReason::ReadThenWrite, Some("a")),
            (1, EdgeReason::ReadThenWrite, Some("b"))
        ]
    );
    assert_eq!(edges(&p, 3), [(2, EdgeReason::WriteThenRead, Some("b"))]);
}

#[test]
fn writes_keep_their_chain_and_reads_wait_only_for_the_latest_write() {
    let p = plan("- tool: write_a\n- tool: write_a\n- tool: read_a\n");
    assert_eq!(edges(&p, 1), [(0, EdgeReason::WriteChain, None)]);
    assert_eq!(edges(&p, 2), [(1, EdgeReason::WriteThenRead, Some("a"))]);
}

#[test]
fn backends_are_inferred_from_lanes_and_from_the_mcp_server() {
    let p = plan("- tool: lane_read\n- tool: lane_write\n");
    assert_eq!(edges(&p, 1), [(0, EdgeReason::ReadThenWrite, Some("db"))]);
    let p = plan("- tool: git_diff_unstaged\n- tool: git_add\n- tool: git_diff_unstaged\n");
    assert_eq!(
        edges(&p, 1),
        [(0, EdgeReason::ReadThenWrite, Some("mcp:git"))]
    );
    assert_eq!(
        edges(&p, 2),
        [(1, EdgeReason::WriteThenRead, Some("mcp:git"))]
    );
}

#[test]
fn hazards_writes_orders_only_writes_and_a_batch_may_only_make_it_stricter() {
    let loose = MANIFEST.replacen(
        "[lanes.db]",
        "[concurrency]\nhazards = \"writes\"\n\n[lanes.db]",
        1,
    );
    let p = plan_with(&loose, "- tool: read_a\n- tool: write_a\n- tool: read_a\n");
    assert!((0..3).all(|c| edges(&p, c).is_empty()));
    let stricter =
        "concurrency: { hazards: backend }\ncalls:\n  - tool: read_a\n  - tool: write_a\n";
    let p = plan_with(&loose, stricter);
    assert_eq!(edges(&p, 1), [(0, EdgeReason::ReadThenWrite, Some("a"))]);
    // A batch asking for looser ordering than the manifest's is refused with a warning.
    let looser = "concurrency: { hazards: writes }\ncalls:\n  - tool: read_a\n  - tool: write_a\n";
    let p = plan(looser);
    assert_eq!(edges(&p, 1), [(0, EdgeReason::ReadThenWrite, Some("a"))]);
    assert!(p.warnings.iter().any(|w| w.message.contains("looser")));
}

#[test]
fn a_write_after_many_reads_gets_one_edge_each_in_linear_time() {
    let mut batch = String::new();
    for _ in 0..20_000 {
        batch.push_str("- tool: read_a\n");
    }
    batch.push_str("- tool: write_a\n- tool: read_a\n");
    let p = plan(&batch);
    assert_eq!(p.calls[20_000].edges.len(), 20_000);
    assert_eq!(p.calls[20_001].edges.len(), 1);
}

#[test]
fn a_cached_read_waits_for_the_write_before_it_even_when_hazards_order_only_writes() {
    let loose = MANIFEST
        .replacen(
            "[lanes.db]",
            "[concurrency]\nhazards = \"writes\"\n\n[lanes.db]",
            1,
        )
        .replacen(
            "[tools.read_b]",
            "[tools.cached_a]\nkind = \"scripted\"\neffect = \"read\"\nbackend = \"a\"\ncache = \"5m\"\n[tools.read_b]",
            1,
        );
    let p = plan_with(
        &loose,
        "- tool: cached_a\n- tool: write_a\n- tool: read_a\n- tool: cached_a\n",
    );
    // The write does not wait for the read (writes only), the plain read does not wait for
    // the write, but the cached read does: its entry must not predate the write.
    assert!(edges(&p, 1).is_empty());
    assert!(edges(&p, 2).is_empty());
    assert_eq!(edges(&p, 3), [(1, EdgeReason::WriteThenRead, Some("a"))]);
}
