//! The one-line summary and the stats block printed on stderr after a run.

use std::time::Duration;

use crate::duration::format;
use crate::events::{Outcome, Stats, Status};

fn ms(v: u64) -> String {
    format(Duration::from_millis(v))
}

/// `5 calls: 4 ok, 1 failed (1 timed_out) in 1.02s · tool time 3.9s · speed-up 3.8× · critical path 1s`
pub(crate) fn line(outcome: Outcome, stats: &Stats, statuses: &[Status]) -> String {
    let count = |s: Status| statuses.iter().filter(|x| **x == s).count();
    let mut kinds = Vec::new();
    for s in [
        Status::Error,
        Status::TimedOut,
        Status::NeverDispatched,
        Status::Cancelled,
        Status::Indeterminate,
        Status::NotApplied,
    ] {
        let c = count(s);
        if c > 0 {
            kinds.push(format!("{c} {}", s.as_str()));
        }
    }
    let failed = if stats.failed > 0 {
        format!(", {} failed ({})", stats.failed, kinds.join(", "))
    } else {
        String::new()
    };
    let mut s = format!(
        "{}: {} ok{failed} in {} · tool time {} · speed-up {:.1}× · critical path {}",
        plural(stats.calls, "call"),
        stats.ok,
        ms(stats.wall_ms),
        ms(stats.tool_time_ms),
        stats.speedup,
        ms(stats.critical_path_ms),
    );
    if stats.cache_hits > 0 {
        s.push_str(&format!(" · {} cached", stats.cache_hits));
    }
    if !stats.settled.is_empty() {
        s.push_str(&format!(" · {}", settled_phrase(&stats.settled)));
    }
    if stats.cost > 0.0 {
        s.push_str(&format!(
            " · cost {}",
            crate::events::trim_float(stats.cost)
        ));
    }
    if outcome != Outcome::Completed {
        s.push_str(&format!(" · outcome {}", outcome.as_str()));
    }
    s
}

/// `settled 23 of 25 cut-off writes (21 applied, 2 not applied)`: what the probes found.
pub(crate) fn settled_phrase(s: &crate::events::Settlements) -> String {
    let known = s.applied + s.not_applied;
    let noun = if s.total() == 1 { "write" } else { "writes" };
    format!(
        "settled {known} of {} cut-off {noun} ({} applied, {} not applied)",
        s.total(),
        s.applied,
        s.not_applied
    )
}

/// Lanes that held calls back: `lane tool:search: peak 4/4, waited 1.2s over 6 calls`; a
/// learned lane's limit as it went: `peak 16, limit learned 2→14 (16 at most), …`.
pub(crate) fn lane_lines(stats: &Stats) -> Vec<String> {
    stats
        .lanes
        .iter()
        .filter(|l| l.waits > 0)
        .map(|l| {
            let peak = match (&l.learned, l.limit) {
                (Some(k), _) => format!(
                    "{}, limit learned {}→{} ({} at most)",
                    l.peak_in_flight, k.start, k.last, k.highest
                ),
                (None, Some(n)) => format!("{}/{n}", l.peak_in_flight),
                (None, None) => format!("{}/∞", l.peak_in_flight),
            };
            let mut s = format!(
                "lane {}: peak {peak}, waited {} over {}",
                l.lane,
                ms(l.wait_ms),
                plural(l.waits as usize, "call")
            );
            if let Some(n) = l.peak_held_elsewhere {
                s.push_str(&format!(", other runs held up to {n}"));
            }
            if let Some(r) = &l.rate {
                s.push_str(&format!(" (rate {r}, {} token waits)", l.rate_limit_waits));
            }
            s
        })
        .collect()
}

/// `1 call`, `2 calls`: a count with its noun (`noun` is the singular; plurals add `s`).
pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
