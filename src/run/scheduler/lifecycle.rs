//! The coordinator's loop — dispatch what is ready, move to the next phase, wait for a
//! completion, a verdict, the deadline or a signal — and how a finished run is settled: every
//! call without a result is classified, the hooks are wound down, the stats computed.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::caching::CacheAnswer;
use super::state::Coordinator;
use super::{Control, RunConfig, RunReport};
use crate::duration::millis;
use crate::events::{CallResult, ErrorKind, Event, Outcome};
use crate::run::call::{never_dispatched, Completion};
use crate::run::gate::Verdict;
use crate::run::stats;
use crate::tools::StopLevel;

impl Coordinator {
    /// Run until every call has a result (or the run ended and nothing is in flight).
    pub(super) async fn run_loop(
        &mut self,
        mut done_rx: mpsc::UnboundedReceiver<Completion>,
        mut verdicts: mpsc::UnboundedReceiver<Verdict>,
        mut cache_answers: mpsc::UnboundedReceiver<CacheAnswer>,
        signals: &mut mpsc::UnboundedReceiver<Control>,
    ) {
        let run_deadline = self.plan.settings.run_deadline.map(|d| self.start + d);
        let mut signals_open = true;
        if !self.plan.phases.is_empty() {
            self.start_phase();
        }
        loop {
            self.dispatch_ready(&mut done_rx);
            if self.ending.is_none() && self.phase_left == 0 && self.ready.is_empty() {
                self.phase += 1;
                if self.phase >= self.plan.phases.len() {
                    break;
                }
                self.start_phase();
                continue;
            }
            if self.in_flight == 0
                && (self.ending.is_some()
                    || (self.ready.is_empty()
                        && self.gating == 0
                        && self.held.is_empty()
                        && self.cache_waiting == 0
                        && self.parked_n == 0))
            {
                // Ending with nothing in flight, or (a bug) calls left that nothing will
                // release: classify them in `settle` rather than hang.
                break;
            }
            let deadline = async {
                match run_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(c) = done_rx.recv() => self.completed(c),
                Some(v) = verdicts.recv(), if self.gating > 0 => self.verdict(v),
                Some(a) = cache_answers.recv(), if self.cache_waiting > 0 => self.cache_answered(a),
                _ = deadline, if self.ending.is_none() => {
                    let d = self.plan.settings.run_deadline.map(crate::duration::format).unwrap_or_default();
                    self.end_run(Outcome::DeadlineExceeded, format!("the run deadline of {d} was reached"));
                }
                s = signals.recv(), if signals_open => match s {
                    None => signals_open = false,
                    Some(Control::Drain) => self.drain(),
                    Some(Control::Interrupt) if self.ending.is_some() => {
                        // A second signal (or one after the run began ending): stop at once.
                        self.stop_tx.send_replace(StopLevel::Force);
                    }
                    Some(Control::Interrupt) => self.end_run(Outcome::Interrupted, "interrupted".into()),
                },
            }
        }
    }

    /// Nobody reads the results: end the run without stopping the calls in flight.
    fn drain(&mut self) {
        if self.ending.is_none() {
            let why = "nobody reads the results any more (stdout closed)".to_string();
            self.ending = Some((Outcome::Drained, why));
        }
    }

    /// The gate decided about a call.
    fn verdict(&mut self, v: Verdict) {
        self.gating -= 1;
        let pos = match &v {
            Verdict::Proceed { pos, .. }
            | Verdict::Refuse { pos, .. }
            | Verdict::Defer { pos, .. } => *pos,
        };
        self.at_gate(pos, false);
        match v {
            Verdict::Proceed { pos, .. } if self.ending.is_some() => {
                let why = "the run ended while it waited for approval";
                let r = never_dispatched(&self.plan, pos, ErrorKind::RunEnded, why);
                self.finish(pos, r);
            }
            Verdict::Proceed { pos, resolved } => self.spawn(pos, resolved),
            Verdict::Refuse { pos, kind, why } => {
                let r = never_dispatched(&self.plan, pos, kind, &why);
                self.finish(pos, r);
            }
            Verdict::Defer { pos, args, hash } => self.defer(pos, args, hash),
        }
        // A verdict frees a refusal held for it, even when it gave nothing back.
        self.held_dirty = true;
    }

    /// Classify what never went out, wind down the hooks, and report.
    pub(super) async fn settle(
        mut self,
        gate: Option<JoinHandle<()>>,
        after: Option<JoinHandle<()>>,
        config: RunConfig,
    ) -> RunReport {
        let why = self.ending.as_ref().map_or_else(
            || "the run ended".to_string(),
            |(_, w)| format!("run ended: {w}"),
        );
        for p in 0..self.results.len() {
            if self.results[p].is_none() {
                let r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, &why);
                self.emitter.emit_finished(&r);
                self.results[p] = Some(r);
            }
        }
        self.feed_after_hook();
        if let Some(gate) = gate {
            // A question nobody answered must not keep the process alive.
            gate.abort();
        }
        self.after_tx = None;
        if let Some(after) = after {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), after).await;
        }
        let outcome = match &self.ending {
            Some((o, _)) => *o,
            None if self.budget_hit => Outcome::BudgetExhausted,
            None if self.paused_phase.is_some() => Outcome::Paused,
            None => Outcome::Completed,
        };
        let plan = self.plan.clone();
        // Mapped, not flattened, so the vector is reused in place (no second copy of every result).
        let results: Vec<CallResult> = std::mem::take(&mut self.results)
            .into_iter()
            .enumerate()
            .map(|(p, r)| {
                r.unwrap_or_else(|| never_dispatched(&plan, p, ErrorKind::RunEnded, &why))
            })
            .collect();
        let stats = stats::compute(
            &plan,
            &results,
            millis(self.start.elapsed()),
            config.lanes.stats(),
            self.http_429,
        );
        if config.segment.is_none() {
            self.emitter.emit(Event::RunFinished {
                outcome,
                stats: Box::new(stats.clone()),
            });
        }
        RunReport {
            run_id: config.run_id,
            outcome,
            results,
            stats,
            fingerprints: std::mem::take(&mut self.fps),
            recorded_args: std::mem::take(&mut self.recorded_args),
            spent: self.spent,
            calls_made: self.calls_made,
        }
    }
}
