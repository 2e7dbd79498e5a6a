//! The gateway's history (`--history`, `[history] path`): one record per client session — a
//! new one every hour of a long session — as a batch run writes one per run, so `report
//! --history` shows the gateway's sessions beside the runs: calls, cost, 429s, cache hits, and
//! each lane's peak with what other sessions and processes held while this session's calls
//! waited. Written through the engine's [`Finish`] when the session ends (its last handle
//! drops) or its hour is up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::app::finish::Finish;
use crate::events::{Outcome, Stats};
use crate::run::{Ended, RunEnd};

/// How long one record of a long session covers.
const PERIOD: Duration = Duration::from_secs(3600);

/// What a session's calls added up to since its last record.
#[derive(Default)]
struct Tally {
    since: Option<Instant>,
    tenant: String,
    subject: Option<String>,
    stats: Stats,
    in_flight: usize,
    peak: usize,
    part: u32,
}

/// A session's history: its calls, summed until written.
pub(super) struct SessionRecord {
    finish: Option<Arc<Finish>>,
    run_id: String,
    tally: Mutex<Tally>,
}

impl SessionRecord {
    pub(super) fn new(finish: Option<Arc<Finish>>, run_id: String) -> SessionRecord {
        SessionRecord {
            finish,
            run_id,
            tally: Mutex::default(),
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call of the session starts running (for the peak in flight).
    pub(super) fn started(&self, caller: &super::caller::Caller) {
        if self.finish.is_none() {
            return;
        }
        let mut t = self.tally();
        t.since.get_or_insert_with(Instant::now);
        if t.tenant.is_empty() {
            t.tenant = caller.tenant.clone();
            t.subject = caller.subject.clone();
        }
        t.in_flight += 1;
        t.peak = t.peak.max(t.in_flight);
    }

    /// A call ended with its run's figures (`lanes`: the session's, so far).
    pub(super) fn ended(&self, s: &Stats) {
        if self.finish.is_none() {
            return;
        }
        let mut t = self.tally();
        t.in_flight = t.in_flight.saturating_sub(1);
        let sum = &mut t.stats;
        sum.calls += s.calls;
        sum.ok += s.ok;
        sum.failed += s.failed;
        sum.tool_time_ms += s.tool_time_ms;
        sum.critical_path_ms = sum.critical_path_ms.max(s.wall_ms);
        sum.retries += s.retries;
        sum.http_429 += s.http_429;
        sum.cache_hits += s.cache_hits;
        sum.settled.merge(s.settled);
        sum.cost += s.cost;
        for (tool, c) in &s.cost_by_tool {
            *sum.cost_by_tool.entry(tool.clone()).or_default() += c;
        }
        sum.lanes = s.lanes.clone();
        if t.since.is_some_and(|at| at.elapsed() >= PERIOD) {
            self.write(&mut t);
        }
    }

    /// Write what the tally holds, and start the next period.
    fn write(&self, t: &mut Tally) {
        let (Some(finish), Some(since)) = (&self.finish, t.since) else {
            return;
        };
        if t.stats.calls == 0 {
            return;
        }
        let wall = since.elapsed();
        t.stats.wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
        t.part += 1;
        let run_id = match t.part {
            1 => self.run_id.clone(),
            n => format!("{}-h{n}", self.run_id),
        };
        let now = std::time::SystemTime::now();
        finish.record(&RunEnd {
            ended: Ended::Session,
            run_id: &run_id,
            tenant: &t.tenant,
            subject: t.subject.as_deref(),
            input_format: "mcp",
            outcome: Outcome::Completed,
            started: now.checked_sub(wall).unwrap_or(now),
            wall,
            stats: &t.stats,
            results: None,
            width: t.peak,
            peak_in_flight: t.peak,
            usage: None,
            trace: None,
        });
        let (tenant, part, in_flight) = (std::mem::take(&mut t.tenant), t.part, t.in_flight);
        *t = Tally {
            since: (in_flight > 0).then(Instant::now),
            tenant,
            subject: t.subject.take(),
            part,
            in_flight,
            peak: in_flight,
            ..Tally::default()
        };
    }
}

impl Drop for SessionRecord {
    fn drop(&mut self) {
        let mut t = std::mem::take(&mut *self.tally());
        self.write(&mut t);
    }
}
