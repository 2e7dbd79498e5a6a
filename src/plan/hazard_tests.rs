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
    // The plain read does not wait for the write (writes only), but the cached read does: its
    // entry must not predate the write; and the write waits for the cached read before it (no
    // entry is taken from under a write) — as the gateway's order and the lane store hold them.
    assert_eq!(edges(&p, 1), [(0, EdgeReason::ReadThenWrite, Some("a"))]);
    assert!(edges(&p, 2).is_empty());
    assert_eq!(edges(&p, 3), [(1, EdgeReason::WriteThenRead, Some("a"))]);
}

#[test]
fn concurrent_writes_overlap_each_other_but_not_a_plain_write_or_a_read_on_their_backend() {
    let m = MANIFEST.replacen(
        "[tools.read_b]",
        "[tools.append_a]\nkind = \"scripted\"\neffect = \"write\"\nidempotent = true\nconcurrent_writes = true\nbackend = \"a\"\n[tools.read_b]",
        1,
    );
    let p = plan_with(
        &m,
        "- tool: write_a\n- tool: append_a\n- tool: append_a\n- tool: read_a\n- tool: write_a\n",
    );
    // Each append waits for the plain write; not for the other append.
    assert_eq!(edges(&p, 1), [(0, EdgeReason::WriteThenWrite, Some("a"))]);
    assert_eq!(edges(&p, 2), [(0, EdgeReason::WriteThenWrite, Some("a"))]);
    // The read waits for both appends; the next plain write for the first through the
    // chain, and for the appends and the read on the backend.
    assert_eq!(
        edges(&p, 3),
        [
            (1, EdgeReason::WriteThenRead, Some("a")),
            (2, EdgeReason::WriteThenRead, Some("a"))
        ]
    );
    assert_eq!(
        edges(&p, 4),
        [
            (0, EdgeReason::WriteChain, None),
            (3, EdgeReason::ReadThenWrite, Some("a")),
            (1, EdgeReason::WriteThenWrite, Some("a")),
            (2, EdgeReason::WriteThenWrite, Some("a"))
        ]
    );
}

mod agree {
    //! The plan's hazard edges and the claims (`claims.rs`) the gateway's order and the lane
    //! store follow say the same: on random batches, a call reaches every earlier call of its
    //! phase whose claim it waits for, and every hazard edge joins two such calls.

    use proptest::prelude::*;

    use super::*;
    use crate::plan::claims::{claims, Claim};

    /// Tools of every kind of claim, on two backends.
    const TOOLS: &str = r#"
[tools.r_a]
kind = "scripted"
effect = "read"
backend = "a"
[tools.c_a]
kind = "scripted"
effect = "read"
backend = "a"
cache = "5m"
[tools.w_a]
kind = "scripted"
effect = "write"
idempotent = true
backend = "a"
[tools.cw_a]
kind = "scripted"
effect = "write"
idempotent = true
concurrent_writes = true
backend = "a"
[tools.w_ab]
kind = "scripted"
effect = "write"
idempotent = true
backend = ["a", "b"]
[tools.cw_ab]
kind = "scripted"
effect = "write"
idempotent = true
concurrent_writes = true
backend = ["a", "b"]
[tools.r_b]
kind = "scripted"
effect = "read"
backend = "b"
[tools.free]
kind = "scripted"
effect = "read"
"#;
    const NAMES: [&str; 8] = ["r_a", "c_a", "w_a", "cw_a", "w_ab", "cw_ab", "r_b", "free"];

    /// Whether a call of `later` waits for an earlier call of `earlier` by their claims.
    fn conflict(m: &Manifest, h: crate::manifest::Hazards, earlier: &str, later: &str) -> bool {
        let of = |n: &str| claims(m.tool(n).expect("tool"), h, "s");
        let before: Vec<(String, Claim)> = of(earlier);
        of(later)
            .iter()
            .any(|(k, c)| before.iter().any(|(k2, c2)| k == k2 && c.waits_for(*c2)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn hazard_edges_are_the_claims(picks in proptest::collection::vec(0..NAMES.len(), 1..24), writes_only in any::<bool>()) {
            let head = if writes_only { "[concurrency]\nhazards = \"writes\"\n" } else { "" };
            let manifest = format!("{head}{TOOLS}");
            let batch: String = picks.iter().map(|i| format!("- tool: {}\n", NAMES[*i])).collect();
            let p = plan_with(&manifest, &batch);
            let m = Manifest::parse(SourceFile::new("tools.toml", manifest.as_str()), PathBuf::from("/tmp/t.toml"), crate::tools::KINDS).expect("manifest");
            let h = p.settings.hazards;
            let n = picks.len();
            // Which earlier calls each call reaches through the edges.
            let mut reach = vec![vec![false; n]; n];
            for j in 0..n {
                for e in &p.calls[j].edges {
                    let through = reach[e.from].clone();
                    for (k, r) in reach[j].iter_mut().enumerate() {
                        *r |= k == e.from || through[k];
                    }
                }
            }
            for j in 0..n {
                for i in 0..j {
                    if conflict(&m, h, NAMES[picks[i]], NAMES[picks[j]]) {
                        prop_assert!(reach[j][i], "{batch}: call {j} does not wait for {i}");
                    }
                }
                for e in &p.calls[j].edges {
                    prop_assert!(conflict(&m, h, NAMES[picks[e.from]], NAMES[picks[j]]), "{batch}: edge {} -> {j} without a claim", e.from);
                }
            }
        }
    }
}
