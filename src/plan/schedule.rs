//! The simulated schedule `plan` prints: each call's estimated start and end from its tool's
//! `expected` (or scripted `latency`), respecting phases, edges and every lane's concurrency
//! and rate; plus the critical path, width, total tool time, makespan and cost.
//!
//! The simulation is event-driven and groups ready calls by their lane signature, so each
//! dispatch decision looks at a handful of queue heads, not every waiting call: 100,000 calls
//! plan in milliseconds.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use super::model::Plan;

/// The estimate for a whole plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Estimated start and end of each call (indexed like `Plan::calls`).
    pub start: Vec<Duration>,
    pub end: Vec<Duration>,
    /// Dependency depth of each call inside its phase (0 = no edges): its "wave".
    pub wave: Vec<usize>,
    /// The longest chain of edges and phase barriers, as call positions, first to last.
    pub critical_path: Vec<usize>,
    /// Sum of the estimates on the critical path: the floor no amount of concurrency beats.
    pub critical_path_time: Duration,
    /// The most calls the simulation had in flight at once.
    pub width: usize,
    pub total_tool_time: Duration,
    pub makespan: Duration,
    pub cost: f64,
}

#[derive(Clone, Copy)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: f64,
}

/// Simulate `plan`. Times are in seconds as f64 internally.
pub fn simulate(plan: &Plan) -> Estimate {
    let n = plan.calls.len();

    let est: Vec<f64> = plan
        .calls
        .iter()
        .map(|c| c.estimate.as_secs_f64())
        .collect();
    let mut start = vec![0f64; n];
    let mut end = vec![0f64; n];

    // Dependants and in-phase dependency counts.
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pending = vec![0usize; n];
    for (p, c) in plan.calls.iter().enumerate() {
        for e in &c.edges {
            if plan.calls[e.from].phase == c.phase {
                dependants[e.from].push(p);
                pending[p] += 1;
            }
        }
    }
    let mut wave = vec![0usize; n];

    let mut in_use = vec![0u64; plan.lanes.len()];
    let mut buckets: Vec<Option<Bucket>> = plan
        .lanes
        .iter()
        .map(|l| {
            l.rate.map(|r| {
                let burst = f64::from(l.burst.unwrap_or(r.count));
                Bucket {
                    rate: r.per_second(),
                    burst,
                    tokens: burst,
                    at: 0.0,
                }
            })
        })
        .collect();

    // Ready calls grouped by lane signature; each group FIFO in call order.
    let mut group_of_sig: HashMap<&[usize], usize> = HashMap::new();
    let mut group_sig: Vec<&[usize]> = Vec::new();
    let call_group: Vec<usize> = plan
        .calls
        .iter()
        .map(|c| {
            *group_of_sig.entry(c.lanes.as_slice()).or_insert_with(|| {
                group_sig.push(c.lanes.as_slice());
                group_sig.len() - 1
            })
        })
        .collect();
    let mut groups: Vec<VecDeque<usize>> = vec![VecDeque::new(); group_sig.len()];

    let mut now = 0f64;
    let mut width = 0usize;
    let mut in_flight = 0usize;
    // (end time in ns, call)
    let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let to_ns = |s: f64| (s * 1e9).round() as u64;

    for phase in &plan.phases {
        // Calls of this phase, as positions in plan.calls.
        let members: Vec<usize> = (phase.start..phase.end).collect();
        let mut left = members.len();
        for &p in &members {
            if pending[p] == 0 {
                groups[call_group[p]].push_back(p);
            }
        }
        while left > 0 {
            // Dispatch every ready call that fits, lowest call index first.
            loop {
                let mut best: Option<usize> = None;
                for (g, q) in groups.iter().enumerate() {
                    let Some(&head) = q.front() else { continue };
                    let w = u64::from(plan.calls[head].weight);
                    let fits = group_sig[g].iter().all(|&l| {
                        plan.lanes[l]
                            .limit
                            .is_none_or(|lim| in_use[l] + w <= u64::from(lim))
                    });
                    if fits && best.is_none_or(|b| head < groups[b][0]) {
                        best = Some(g);
                    }
                }
                let Some(g) = best else { break };
                let Some(p) = groups[g].pop_front() else {
                    break;
                };
                let w = u64::from(plan.calls[p].weight);
                let mut at = now;
                for &l in group_sig[g] {
                    in_use[l] += w;
                    if let Some(b) = buckets[l].as_mut() {
                        b.tokens = (b.tokens + (now - b.at) * b.rate).min(b.burst);
                        b.at = now;
                        b.tokens -= 1.0;
                        if b.tokens < 0.0 {
                            at = at.max(now + (-b.tokens) / b.rate);
                        }
                    }
                }
                start[p] = at;
                end[p] = at + est[p];
                in_flight += 1;
                width = width.max(in_flight);
                running.push(Reverse((to_ns(end[p]), p)));
            }
            // Advance to the next completion.
            let Some(Reverse((t, p))) = running.pop() else {
                break;
            };
            now = now.max(t as f64 / 1e9);
            in_flight -= 1;
            left -= 1;
            let w = u64::from(plan.calls[p].weight);
            for &l in &plan.calls[p].lanes {
                in_use[l] -= w;
            }
            for &d in &dependants[p] {
                wave[d] = wave[d].max(wave[p] + 1);
                pending[d] -= 1;
                if pending[d] == 0 {
                    groups[call_group[d]].push_back(d);
                    // keep each group ordered by call index
                    let q = &mut groups[call_group[d]];
                    let mut i = q.len() - 1;
                    while i > 0 && q[i - 1] > q[i] {
                        q.swap(i - 1, i);
                        i -= 1;
                    }
                }
            }
        }
        // Phase barrier: the next phase starts when this one has resolved.
        if let Some(last) = members.iter().map(|&p| end[p]).reduce(f64::max) {
            now = now.max(last);
        }
    }

    let est_ns: Vec<u64> = est.iter().map(|&s| to_ns(s)).collect();
    let (critical_path, critical_ns) = critical_path(plan, &est_ns);
    let critical_path_time = critical_ns as f64 / 1e9;

    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    Estimate {
        makespan: secs(end.iter().copied().fold(0.0, f64::max)),
        start: start.into_iter().map(secs).collect(),
        end: end.into_iter().map(secs).collect(),
        wave,
        critical_path,
        critical_path_time: secs(critical_path_time),
        width,
        total_tool_time: secs(est.iter().sum()),
        cost: plan.calls.iter().map(|c| c.cost).sum(),
    }
}

/// The longest chain of edges and phase barriers (ignoring lanes) given each call's duration
/// (any unit): the floor no amount of concurrency beats. Returns the chain as call positions,
/// first to last, and its length. Used for `plan`'s estimate and a run's measured stats.
pub fn critical_path(plan: &Plan, dur: &[u64]) -> (Vec<usize>, u64) {
    let n = plan.calls.len().min(dur.len());
    let mut chain = vec![0u64; n];
    let mut prev: Vec<Option<usize>> = vec![None; n];
    // The longest chain ending in the previous phase, and in the current one so far.
    let mut barrier: (u64, Option<usize>) = (0, None);
    let mut phase_best = barrier;
    let mut cur_phase = usize::MAX;
    for p in 0..n {
        let c = &plan.calls[p];
        if c.phase != cur_phase {
            if cur_phase != usize::MAX {
                barrier = phase_best;
            }
            phase_best = barrier;
            cur_phase = c.phase;
        }
        let (mut best, mut via) = barrier;
        for e in &c.edges {
            let f = e.from;
            if f < n && plan.calls[f].phase == c.phase && (chain[f] > best || via.is_none()) {
                best = chain[f];
                via = Some(f);
            }
        }
        chain[p] = best + dur[p];
        prev[p] = via;
        if chain[p] > phase_best.0 || phase_best.1.is_none() {
            phase_best = (chain[p], Some(p));
        }
    }
    let mut path = Vec::new();
    let mut cur = (0..n).max_by(|&a, &b| chain[a].cmp(&chain[b]).then(b.cmp(&a)));
    let total = cur.map_or(0, |c| chain[c]);
    while let Some(c) = cur {
        path.push(c);
        cur = prev[c];
    }
    path.reverse();
    (path, total)
}

#[cfg(test)]
mod tests {
    use super::super::graph::tests::{plan_of, REFUND};
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn refund_turn_critical_path_is_the_write_chain() {
        let p = plan_of(REFUND).unwrap();
        let e = simulate(&p);
        let names: Vec<&str> = e
            .critical_path
            .iter()
            .map(|&i| p.calls[i].id.as_str())
            .collect();
        assert_eq!(names, ["orders", "refund", "mail"]);
        assert_eq!(ms(e.critical_path_time), 800);
        assert_eq!(e.wave, vec![0, 0, 0, 1, 2]);
        assert_eq!(ms(e.start[3]), 200);
        assert_eq!(ms(e.start[4]), 700);
        assert_eq!(ms(e.makespan), 800);
        assert_eq!(e.width, 3);
        assert_eq!(ms(e.total_tool_time), 1300);
    }

    #[test]
    fn lane_limits_bind_the_schedule() {
        // partner-api allows 2 at once: six 300ms searches take three waves.
        let p = plan_of("- tool: search\n- tool: search\n- tool: search\n- tool: search\n- tool: search\n- tool: search\n").unwrap();
        let e = simulate(&p);
        assert_eq!(e.width, 2);
        assert_eq!(ms(e.makespan), 900);
        let mut starts: Vec<u128> = e.start.iter().map(|d| ms(*d)).collect();
        starts.sort();
        assert_eq!(starts, vec![0, 0, 300, 300, 600, 600]);
    }

    #[test]
    fn rate_lanes_delay_starts() {
        // 10/s with a burst of 10: the 11th and 12th calls wait for tokens.
        let mut batch = String::from("concurrency: { max_concurrent_tools: 8 }\ncalls:\n");
        for _ in 0..12 {
            batch.push_str("  - tool: search\n");
        }
        let mut p = plan_of(&batch).unwrap();
        for l in &mut p.lanes {
            if l.name == "lane:partner-api" {
                l.limit = None;
            }
            if l.name == "tool:search" || l.name == "turn" {
                l.limit = None;
            }
        }
        let e = simulate(&p);
        assert_eq!(ms(e.start[9]), 0);
        assert_eq!(ms(e.start[10]), 100);
        assert_eq!(ms(e.start[11]), 200);
    }

    #[test]
    fn phases_are_barriers() {
        let p = plan_of("- tool: search\n- tool: booking\n- tool: db.getOrders\n").unwrap();
        let e = simulate(&p);
        assert_eq!(ms(e.start[1]), 300);
        assert_eq!(ms(e.start[2]), 1300);
        let names: Vec<&str> = e
            .critical_path
            .iter()
            .map(|&i| p.calls[i].id.as_str())
            .collect();
        assert_eq!(names, ["c1", "c2", "c3"]);
    }

    #[test]
    fn plans_a_hundred_thousand_calls_quickly() {
        let mut batch = String::from("calls:\n");
        for i in 0..100_000 {
            if i % 10 == 9 {
                batch.push_str(&format!(
                    "  - {{ tool: db.getOrders, args: {{ x: \"${{c{i}}}\" }} }}\n"
                ));
            } else {
                batch.push_str("  - { tool: search }\n");
            }
        }
        let t = std::time::Instant::now();
        let p = plan_of(&batch).unwrap();
        let e = simulate(&p);
        assert_eq!(e.start.len(), 100_000);
        // Generous: debug builds are slow; the release benchmark measures the real figure.
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}
