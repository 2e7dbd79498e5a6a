//! The planner's tests: ids, phases, edges, cycles, the write chain, and what `plan` reports.

use super::*;
use crate::error::SourceFile;
use std::path::PathBuf;

pub(crate) const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8
per_tenant = 16
[concurrency.per_tool]
search = 4

[lanes.partner-api]
concurrency = 2
rate = "10/s"

[tools.search]
kind = "scripted"
effect = "read"
latency = "300ms"
lanes = ["partner-api"]
[tools."db.getCustomer"]
kind = "scripted"
effect = "read"
latency = "200ms"
[tools."db.getOrders"]
kind = "scripted"
effect = "read"
latency = "200ms"
output = { orders = [{ id = "o-17" }] }
[tools."api.createRefund"]
kind = "scripted"
effect = "write"
idempotent = true
latency = "500ms"
cost = 0.01
[tools."email.send"]
kind = "scripted"
effect = "write"
latency = "100ms"
[tools.booking]
kind = "scripted"
effect = "write"
parallel_safe = false
latency = "1s"
"#;

pub(crate) fn manifest() -> Manifest {
    Manifest::parse(
        SourceFile::new("tools.toml", MANIFEST),
        PathBuf::from("/tmp/tools.toml"),
        crate::tools::KINDS,
    )
    .unwrap()
}

pub(crate) fn plan_of(batch: &str) -> Result<Plan, Vec<Diagnostic>> {
    let (b, _) = Batch::parse(SourceFile::new("b.yaml", batch))?;
    build(&manifest(), &b, &PlanOptions::default())
}

pub(crate) const REFUND: &str = r#"
tenant: acme
calls:
  - id: search
    tool: search
    args: { q: refund }
  - id: customer
    tool: db.getCustomer
    args: { id: 42 }
  - id: orders
    tool: db.getOrders
    args: { customer: 42 }
  - id: refund
    tool: api.createRefund
    args: { order_id: "${orders.orders[0].id}" }
  - id: mail
    tool: email.send
    args: { customer: 42 }
    after: [refund]
"#;

#[test]
fn refund_turn_has_reads_then_a_write_chain() {
    let p = plan_of(REFUND).unwrap();
    assert_eq!(p.phases.len(), 1);
    assert!(p.calls[..3].iter().all(|c| c.edges.is_empty()));
    assert_eq!(
        p.calls[3].edges,
        vec![Edge {
            from: 2,
            reason: EdgeReason::Reference,
            backend: None
        }]
    );
    // `after` and the write chain both point at the refund: one edge, the stronger reason.
    assert_eq!(
        p.calls[4].edges,
        vec![Edge {
            from: 3,
            reason: EdgeReason::After,
            backend: None
        }]
    );
}

#[test]
fn lanes_are_in_fixed_order() {
    let p = plan_of(REFUND).unwrap();
    let names: Vec<&str> = p.calls[0]
        .lanes
        .iter()
        .map(|&l| p.lanes[l].name.as_str())
        .collect();
    assert_eq!(
        names,
        ["tenant:acme", "turn", "tool:search", "lane:partner-api"]
    );
    assert_eq!(p.lanes[p.calls[0].lanes[2]].limit, Some(4));
    assert_eq!(p.lanes[p.calls[0].lanes[3]].rate.map(|r| r.count), Some(10));
}

#[test]
fn non_parallel_safe_calls_get_their_own_phase() {
    let p = plan_of("- tool: search\n- tool: booking\n- tool: search\n- tool: search\n").unwrap();
    assert_eq!(
        p.phases,
        vec![
            Phase {
                start: 0,
                end: 1,
                alone: false
            },
            Phase {
                start: 1,
                end: 2,
                alone: true
            },
            Phase {
                start: 2,
                end: 4,
                alone: false
            },
        ]
    );
    assert_eq!(p.calls[3].phase, 2);
}

#[test]
fn write_chain_links_consecutive_writes_only_within_a_phase() {
    let p = plan_of(
        "- tool: email.send\n- tool: search\n- tool: email.send\n- tool: api.createRefund\n",
    )
    .unwrap();
    assert_eq!(
        p.calls[2].edges,
        vec![Edge {
            from: 0,
            reason: EdgeReason::WriteChain,
            backend: None
        }]
    );
    assert_eq!(
        p.calls[3].edges,
        vec![Edge {
            from: 2,
            reason: EdgeReason::WriteChain,
            backend: None
        }]
    );
    assert!(p.calls[1].edges.is_empty());
}

#[test]
fn narrowing_is_clamped_with_a_warning() {
    let p = plan_of("concurrency: { max_concurrent_tools: 20, per_tool: { search: 2 } }\ncalls:\n  - tool: search\n").unwrap();
    let turn = p.lanes.iter().find(|l| l.key == LaneKey::Turn).unwrap();
    assert_eq!(turn.limit, Some(8));
    assert!(p
        .warnings
        .iter()
        .any(|w| w.message.contains("clamped to 8")));
    let names: Vec<&str> = p.calls[0]
        .lanes
        .iter()
        .map(|&l| p.lanes[l].name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "tenant:default",
            "turn",
            "tool:search",
            "tool:search (batch)",
            "lane:partner-api"
        ]
    );
    let p =
        plan_of("concurrency: { max_concurrent_tools: 3 }\ncalls:\n  - tool: search\n").unwrap();
    assert_eq!(
        p.lanes
            .iter()
            .find(|l| l.key == LaneKey::Turn)
            .unwrap()
            .limit,
        Some(3)
    );
}

#[test]
fn reports_unknown_tool_cycle_and_bad_reference_together() {
    let e = plan_of(
            "calls:\n  - id: a\n    tool: serch\n  - id: b\n    tool: search\n    args: { q: \"${c}\" }\n  - id: c\n    tool: search\n    args: { q: \"${b}\" }\n  - id: d\n    tool: search\n    args: { q: \"${nope.x}\" }\n",
        )
        .unwrap_err();
    let errors: Vec<&Diagnostic> = e.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 3, "{e:#?}");
    assert!(errors[0].message.contains("unknown tool `serch`"));
    assert_eq!(errors[0].hint.as_deref(), Some("did you mean `search`?"));
    assert_eq!(
        (
            errors[0].location.as_ref().unwrap().line,
            errors[0].location.as_ref().unwrap().col
        ),
        (3, 11)
    );
    assert!(errors[1].message.contains("unknown call `nope`"));
    assert_eq!(errors[1].location.as_ref().unwrap().line, 12);
    assert!(
        errors[2].message.contains("reference cycle: b → c → b")
            || errors[2].message.contains("reference cycle: c → b → c"),
        "{}",
        errors[2].message
    );
    assert!(errors[2].location.is_some());
}

#[test]
fn reference_into_a_later_phase_is_an_error() {
    let e = plan_of("- id: a\n  tool: search\n  args: { q: \"${b}\" }\n- id: b\n  tool: booking\n")
        .unwrap_err();
    assert!(e[0].message.contains("runs in a later phase"), "{e:?}");
    assert!(e[0]
        .hint
        .as_ref()
        .unwrap()
        .contains("parallel_safe = false"));
}

#[test]
fn duplicate_ids_and_self_after_are_errors() {
    let e = plan_of(
        "- id: a\n  tool: search\n- id: a\n  tool: search\n- id: b\n  tool: search\n  after: [b]\n",
    )
    .unwrap_err();
    assert!(e.iter().any(|d| d.message.contains("used twice")));
    assert!(e.iter().any(|d| d.message.contains("`after` itself")));
}
