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

/// Simulate the run: every call starts as soon as its phase has started, its edges resolved
/// and its lanes (weights, rate tokens) allow, lowest call index first among ready calls that
/// fit. Times are the tools' `expected` latencies.
pub fn simulate(plan: &Plan) -> Estimate {
    let mut sim = Sim::new(plan);
    for phase in &plan.phases {
        sim.run_phase(phase.start..phase.end);
    }
    sim.estimate()
}

/// The simulation's state.
struct Sim<'p> {
    plan: &'p Plan,
    est: Vec<f64>,
    start: Vec<f64>,
    end: Vec<f64>,
    dependants: Vec<Vec<usize>>,
    pending: Vec<usize>,
    wave: Vec<usize>,
    in_use: Vec<u64>,
    buckets: Vec<Option<Bucket>>,
    /// Ready calls grouped by lane signature; each group FIFO in call order.
    group_sig: Vec<&'p [usize]>,
    call_group: Vec<usize>,
    groups: Vec<VecDeque<usize>>,
    now: f64,
    width: usize,
    in_flight: usize,
    /// (end time in ns, call)
    running: BinaryHeap<Reverse<(u64, usize)>>,
}

fn to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

impl<'p> Sim<'p> {
    fn new(plan: &'p Plan) -> Sim<'p> {
        let n = plan.calls.len();
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
        let buckets = plan
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
        let mut group_of_sig: HashMap<&[usize], usize> = HashMap::new();
        let mut group_sig: Vec<&[usize]> = Vec::new();
        let call_group: Vec<usize> = plan
            .calls
            .iter()
            .map(|c| {
                *group_of_sig.entry(&c.lanes[..]).or_insert_with(|| {
                    group_sig.push(&c.lanes[..]);
                    group_sig.len() - 1
                })
            })
            .collect();
        Sim {
            plan,
            est: plan
                .calls
                .iter()
                .map(|c| c.estimate.as_secs_f64())
                .collect(),
            start: vec![0f64; n],
            end: vec![0f64; n],
            dependants,
            pending,
            wave: vec![0usize; n],
            in_use: vec![0u64; plan.lanes.len()],
            buckets,
            groups: vec![VecDeque::new(); group_sig.len()],
            group_sig,
            call_group,
            now: 0.0,
            width: 0,
            in_flight: 0,
            running: BinaryHeap::new(),
        }
    }

    /// One phase, to its last completion (the barrier before the next).
    fn run_phase(&mut self, members: std::ops::Range<usize>) {
        let mut left = members.len();
        for p in members.clone() {
            if self.pending[p] == 0 {
                self.groups[self.call_group[p]].push_back(p);
            }
        }
        while left > 0 {
            while self.dispatch_one() {}
            if !self.complete_next() {
                break;
            }
            left -= 1;
        }
        if let Some(last) = members.map(|p| self.end[p]).reduce(f64::max) {
            self.now = self.now.max(last);
        }
    }

    /// Start the lowest-indexed ready call whose lanes have room; `false` when none fits.
    fn dispatch_one(&mut self) -> bool {
        let plan = self.plan;
        let mut best: Option<usize> = None;
        for (g, q) in self.groups.iter().enumerate() {
            let Some(&head) = q.front() else { continue };
            let w = u64::from(plan.calls[head].weight);
            let fits = self.group_sig[g].iter().all(|&l| {
                plan.lanes[l]
                    .planned()
                    .is_none_or(|lim| self.in_use[l] + w <= u64::from(lim))
            });
            if fits && best.is_none_or(|b| head < self.groups[b][0]) {
                best = Some(g);
            }
        }
        let Some(g) = best else { return false };
        let Some(p) = self.groups[g].pop_front() else {
            return false;
        };
        let w = u64::from(plan.calls[p].weight);
        let now = self.now;
        let mut at = now;
        for &l in self.group_sig[g] {
            self.in_use[l] += w;
            if let Some(b) = self.buckets[l].as_mut() {
                b.tokens = (b.tokens + (now - b.at) * b.rate).min(b.burst);
                b.at = now;
                b.tokens -= 1.0;
                if b.tokens < 0.0 {
                    at = at.max(now + (-b.tokens) / b.rate);
                }
            }
        }
        self.start[p] = at;
        self.end[p] = at + self.est[p];
        self.in_flight += 1;
        self.width = self.width.max(self.in_flight);
        self.running.push(Reverse((to_ns(self.end[p]), p)));
        true
    }

    /// Advance to the next completion and release what waited on it; `false` when nothing runs.
    fn complete_next(&mut self) -> bool {
        let Some(Reverse((t, p))) = self.running.pop() else {
            return false;
        };
        self.now = self.now.max(t as f64 / 1e9);
        self.in_flight -= 1;
        let w = u64::from(self.plan.calls[p].weight);
        for &l in self.plan.calls[p].lanes.iter() {
            self.in_use[l] -= w;
        }
        for i in 0..self.dependants[p].len() {
            let d = self.dependants[p][i];
            self.wave[d] = self.wave[d].max(self.wave[p] + 1);
            self.pending[d] -= 1;
            if self.pending[d] == 0 {
                // Keep each group ordered by call index.
                let q = &mut self.groups[self.call_group[d]];
                q.push_back(d);
                let mut i = q.len() - 1;
                while i > 0 && q[i - 1] > q[i] {
                    q.swap(i - 1, i);
                    i -= 1;
                }
            }
        }
        true
    }

    fn estimate(self) -> Estimate {
        let plan = self.plan;
        let est_ns: Vec<u64> = self.est.iter().map(|&s| to_ns(s)).collect();
        let (critical_path, critical_ns) = critical_path(plan, &est_ns);
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        Estimate {
            makespan: secs(self.end.iter().copied().fold(0.0, f64::max)),
            start: self.start.into_iter().map(secs).collect(),
            end: self.end.into_iter().map(secs).collect(),
            wave: self.wave,
            critical_path,
            critical_path_time: secs(critical_ns as f64 / 1e9),
            width: self.width,
            total_tool_time: secs(self.est.iter().sum()),
            cost: plan.calls.iter().map(|c| c.cost).sum(),
        }
    }
}

/// The longest chain of edges and phase barriers (ignoring lanes) given each call's duration
/// (any unit): the floor no amount of concurrency beats. Returns the chain as call positions,
/// first to last, and its length. Used for `plan`'s estimate and a run's measured stats.
pub(crate) fn critical_path(plan: &Plan, dur: &[u64]) -> (Vec<usize>, u64) {
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
        for l in std::sync::Arc::make_mut(&mut p.lanes) {
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
