//! The stream's ledger: the segments running, what the finished ones left (results for
//! later references, stats, the outcome), and whether the next segment may start beside the
//! running ones.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::app::engine::Engine;
use crate::batch::{Batch, OnToolError};
use crate::events::{Outcome, Stats, Status};
use crate::history;
use crate::manifest::Manifest;
use crate::plan::{External, PlanOptions};
use crate::run::RunReport;

/// What a segment holds that decides whether the next may run beside it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Traits {
    /// A `parallel_safe = false` call: nothing may overlap it.
    pub(super) alone: bool,
    /// A chained write (`claims::chained`: the write chain runs across segments; a tool's
    /// concurrent writes are ordered on their backends by the lane store, as across runs).
    pub(super) writes: bool,
    /// A reference or `after` to a call outside the segment.
    pub(super) outside: bool,
}

impl Traits {
    pub(super) fn of(batch: &Batch, manifest: &Manifest) -> Traits {
        let ids: HashSet<&str> = batch.calls.iter().map(|c| c.id.as_str()).collect();
        let mut t = Traits::default();
        for c in &batch.calls {
            if let Some(tool) = manifest.tool(&c.tool) {
                t.alone |= crate::plan::claims::alone(tool);
                t.writes |= crate::plan::claims::chained(tool);
            }
            t.outside |= c.args.refs().any(|(_, r)| !ids.contains(r.target.as_str()))
                || c.after.iter().any(|a| !ids.contains(a.as_str()));
        }
        t
    }
}

/// A segment running.
pub(super) struct Segment {
    pub(super) handle: JoinHandle<RunReport>,
    pub(super) traits: Traits,
    /// Its calls' ids, and whether each was named (named ones are kept for later references).
    pub(super) ids: Vec<(String, bool)>,
}

/// The stream's ledger: segments running, what finished, how the run stands.
pub(super) struct Ledger {
    pub(super) running: VecDeque<Segment>,
    pub(super) external: Arc<External>,
    pub(super) failures: Vec<Status>,
    pub(super) total: Option<Stats>,
    pub(super) outcome: Outcome,
    /// The run has a call cap: segments count calls one after another.
    pub(super) capped: bool,
    /// For the history: the widest segment's plan width, and the most calls a segment had in
    /// flight at once.
    pub(super) width: usize,
    pub(super) peak: usize,
    /// Every result, kept only when the run's spans are exported.
    pub(super) kept: Option<Vec<crate::events::CallResult>>,
}

impl Ledger {
    /// Whether a segment with `next` traits must wait for every running one.
    pub(super) fn must_wait(&self, next: Traits, opts: &PlanOptions) -> bool {
        let ledgered = opts.max_cost.is_some()
            || self.capped
            || opts.on_tool_error == Some(OnToolError::FailRun);
        ledgered
            || next.alone
            || next.outside
            || self
                .running
                .iter()
                .any(|s| s.traits.alone || (next.writes && s.traits.writes))
    }

    /// Take in the segments that finished (all of them with `wait`), in order.
    pub(super) fn settle(
        &mut self,
        session: &mut Engine,
        rt: &tokio::runtime::Runtime,
        wait: bool,
    ) {
        while let Some(front) = self.running.front() {
            if !wait && !front.handle.is_finished() {
                break;
            }
            self.settle_first(session, rt);
        }
    }

    /// Wait for the oldest running segment and take it in.
    pub(super) fn settle_first(&mut self, session: &mut Engine, rt: &tokio::runtime::Runtime) {
        let Some(seg) = self.running.pop_front() else {
            return;
        };
        let report = match rt.block_on(seg.handle) {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.take(session, seg.ids, report);
    }

    pub(super) fn take(
        &mut self,
        session: &mut Engine,
        ids: Vec<(String, bool)>,
        report: RunReport,
    ) {
        session.spent = session.spent.max(report.spent);
        session.calls_made = session.calls_made.max(report.calls_made);
        let ext = Arc::make_mut(&mut self.external);
        self.peak = self.peak.max(history::peak_in_flight(&report.results));
        for ((id, named), res) in ids.into_iter().zip(&report.results) {
            if named {
                ext.insert(id, res.is_ok().then(|| res.output.clone()));
            }
            if !res.is_ok() {
                self.failures.push(res.status);
            }
        }
        match &mut self.total {
            Some(t) => crate::run::stats::merge(t, report.stats),
            None => self.total = Some(report.stats),
        }
        if let Some(kept) = &mut self.kept {
            kept.extend(report.results);
        }
        match (self.outcome, report.outcome) {
            (_, Outcome::Completed) => {}
            // A budget refuses calls that do not fit; later (cheaper) ones may still run.
            (Outcome::Completed | Outcome::Paused, Outcome::BudgetExhausted) => {
                self.outcome = Outcome::BudgetExhausted
            }
            (Outcome::Completed, Outcome::Paused) => self.outcome = Outcome::Paused,
            (Outcome::BudgetExhausted, Outcome::Paused) => {}
            (Outcome::Completed | Outcome::BudgetExhausted | Outcome::Paused, ended) => {
                self.outcome = ended
            }
            // The run had ended already: the first reason stands.
            (
                Outcome::Failed
                | Outcome::DeadlineExceeded
                | Outcome::Interrupted
                | Outcome::Drained,
                _,
            ) => {}
        }
    }

    /// Whether the run has ended (fail_run, a deadline, Ctrl-C).
    pub(super) fn ended(&self) -> bool {
        !matches!(
            self.outcome,
            Outcome::Completed | Outcome::BudgetExhausted | Outcome::Paused
        )
    }
}
