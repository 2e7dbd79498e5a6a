//! Stats computed from a finished run: tool time, the measured critical path, speed-up and
//! cost by tool.

use std::collections::BTreeMap;

use crate::events::{CallResult, LaneStats, Stats, Status};
use crate::plan::Plan;

/// Stats for `results` (indexed like `plan.calls`).
pub(crate) fn compute(
    plan: &Plan,
    results: &[CallResult],
    wall_ms: u64,
    lanes: Vec<LaneStats>,
    http_429: u64,
) -> Stats {
    let n = results.len();
    // A cache hit invoked nothing: its lookup is no tool time.
    let dur: Vec<u64> = results
        .iter()
        .map(|r| {
            if r.cached {
                0
            } else {
                r.duration_ms.unwrap_or(0)
            }
        })
        .collect();

    let (chain, critical_path_ms) = crate::plan::critical_path(plan, &dur);
    let path: Vec<String> = chain.into_iter().map(|p| results[p].id.clone()).collect();

    let tool_time_ms: u64 = dur.iter().sum();
    let mut cost_by_tool: BTreeMap<String, f64> = BTreeMap::new();
    let mut cost = 0.0;
    for (p, r) in results.iter().enumerate() {
        if r.started_ms.is_some() && !r.cached && plan.calls[p].cost > 0.0 {
            *cost_by_tool.entry(r.tool.clone()).or_default() += plan.calls[p].cost;
            cost += plan.calls[p].cost;
        }
    }
    let ok = results.iter().filter(|r| r.status == Status::Ok).count();
    let mut cache_hits_by_tool: BTreeMap<String, usize> = BTreeMap::new();
    for r in results.iter().filter(|r| r.cached) {
        *cache_hits_by_tool.entry(r.tool.clone()).or_default() += 1;
    }
    let mut settled = crate::events::Settlements::default();
    results
        .iter()
        .filter_map(|r| r.settled)
        .for_each(|s| settled.add(s));
    Stats {
        calls: n,
        ok,
        failed: n - ok,
        wall_ms,
        tool_time_ms,
        critical_path_ms,
        critical_path: path,
        speedup: if wall_ms > 0 {
            (tool_time_ms as f64 / wall_ms as f64 * 100.0).round() / 100.0
        } else {
            0.0
        },
        retries: results
            .iter()
            .map(|r| u64::from(r.attempts.saturating_sub(1)))
            .sum(),
        rate_limit_waits: lanes.iter().map(|l| l.rate_limit_waits).sum(),
        http_429,
        cost: (cost * 1e9).round() / 1e9,
        cost_by_tool,
        cache_hits: cache_hits_by_tool.values().sum(),
        cache_hits_by_tool,
        settled,
        lanes,
    }
}

/// Fold a later batch of the same run (a stream's chunk) into `total`. Times count from the
/// run's start and lane figures are the store's running totals, so those are the later ones.
pub(crate) fn merge(total: &mut Stats, next: Stats) {
    total.calls += next.calls;
    total.ok += next.ok;
    total.failed += next.failed;
    total.wall_ms = total.wall_ms.max(next.wall_ms);
    total.tool_time_ms += next.tool_time_ms;
    if next.critical_path_ms > total.critical_path_ms {
        total.critical_path_ms = next.critical_path_ms;
        total.critical_path = next.critical_path;
    }
    total.speedup = if total.wall_ms > 0 {
        (total.tool_time_ms as f64 / total.wall_ms as f64 * 100.0).round() / 100.0
    } else {
        0.0
    };
    total.retries += next.retries;
    total.rate_limit_waits = next.rate_limit_waits;
    total.http_429 += next.http_429;
    total.cost = ((total.cost + next.cost) * 1e9).round() / 1e9;
    for (tool, c) in next.cost_by_tool {
        *total.cost_by_tool.entry(tool).or_default() += c;
    }
    total.cache_hits += next.cache_hits;
    for (tool, n) in next.cache_hits_by_tool {
        *total.cache_hits_by_tool.entry(tool).or_default() += n;
    }
    total.settled.merge(next.settled);
    total.lanes = next.lanes;
}
