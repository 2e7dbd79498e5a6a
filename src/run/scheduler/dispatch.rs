//! Sending a call on: through the gate (approval, `before_call`) when it needs it, else
//! straight to its lanes and its own task — or, for a kind that can complete inline, polled
//! once right here.

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::state::Coordinator;
use crate::batch::OnToolError;
use crate::events::ErrorKind;
use crate::plan::Claim;
use crate::run::call::{begin_acquire, never_dispatched, Charger, Job, Ticket};
use crate::run::gate::GateJob;
use crate::run::store::Claims;
use crate::tools::Invocation;

impl Coordinator {
    /// Calls that need approval or a before_call hook go through the gate (serially, in call
    /// order); the rest are spawned at once.
    pub(super) fn gate_or_spawn(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        let call = &self.plan.calls[p];
        let Some(t) = call.tool else {
            return self.refuse_invalid(p);
        };
        let needs_approval = self.manifest.tools[t].requires_approval;
        match &self.gate_tx {
            Some(tx) if needs_approval || self.manifest.hooks.before_call.is_some() => {
                let args = resolved.clone().unwrap_or_else(|| call.args.value.clone());
                let job = GateJob {
                    pos: p,
                    id: call.id.clone(),
                    tool: call.tool_name.clone(),
                    needs_approval,
                    args,
                    resolved,
                };
                if tx.send(job).is_ok() {
                    self.gating += 1;
                    self.at_gate(p, true);
                } else {
                    let r = never_dispatched(
                        &self.plan,
                        p,
                        ErrorKind::Guardrail,
                        "the approval gate is gone",
                    );
                    self.finish(p, r);
                }
            }
            _ => self.spawn(p, resolved),
        }
    }

    /// Whether call `p`'s backend `claims` are one read it may take with its last lane
    /// ([`LaneStore::acquire_along`](crate::run::store::LaneStore::acquire_along)): not a
    /// write (whose cache marks change before it holds its backend), nor a call that holds
    /// the lock of a `parallel_safe = false` tool first.
    fn reads_alone(&self, p: usize, claims: &Claims) -> bool {
        let call = &self.plan.calls[p];
        matches!(&claims[..], [(_, Claim::Read)])
            && !call.write
            && !self.plan.phases[call.phase].alone
    }

    pub(super) fn spawn(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        if let Some(lane) = self.park_lane(p) {
            self.parked[lane].insert(p);
            self.parked_args.insert(p, resolved);
            self.parked_n += 1;
            return;
        }
        let Some(t) = self.plan.calls[p].tool else {
            return self.refuse_invalid(p);
        };
        let claims = self.claims.get(t).cloned().flatten();
        let along = claims.clone().filter(|c| self.reads_alone(p, c));
        let acquisition = match begin_acquire(
            &self.lanes,
            &self.figures,
            &self.plan,
            p,
            &self.emitter,
            along,
        ) {
            Ok(a) => a,
            Err(e) => {
                let r = never_dispatched(&self.plan, p, ErrorKind::LaneStore, &e);
                self.finish(p, r);
                return;
            }
        };
        let window = self.ticket(p);
        let call = &self.plan.calls[p];
        let tool = &self.manifest.tools[t];
        let inv = Invocation {
            plan: self.plan.clone(),
            pos: p,
            run: self.run.clone(),
            resolved,
            idempotency_key: self.idempotency_key(p).inspect(|_| {
                self.write_fps.remove(&p);
            }),
            attempt: 1,
        };
        let job = Box::new(Job {
            pos: p,
            acquisition: Some(acquisition),
            plan: self.plan.clone(),
            tool: self.tools[t].clone(),
            lanes: self.lanes.clone(),
            store_backends: self.backends.clone(),
            inv,
            stop_rx: self.stop_rx.clone(),
            emitter: self.emitter.clone(),
            run_start: self.start,
            ready_at: self.ready_at[p].unwrap_or_else(Instant::now),
            timeout: tool.timeout,
            timeout_text: tool.timeout_text.clone(),
            ceiling: self.plan.settings.tool_call_deadline,
            retries: if tool.idempotent { tool.retries } else { 0 },
            stop_tx: self.stop_tx.clone(),
            fail_run: self.plan.settings.on_tool_error == OnToolError::FailRun,
            journal: self.journal.clone().zip(self.fps.get(p).cloned().flatten()),
            cache: self.leads.remove(&p).zip(tool.cache),
            backends: claims,
            window,
            probe: self.probe_of(t),
            settle_first: self.settle_first.remove(&p) || self.plan.cut_off_before,
            marks: if call.write {
                self.cache
                    .clone()
                    .zip(self.marked.get(t).cloned().flatten())
            } else {
                None
            },
        });
        self.in_flight += 1;
        for &lane in call.lanes.iter() {
            self.outstanding[lane] += 1;
        }
        let mut fut = Box::pin(job.run());
        if self.tools[t].inline() {
            // An in-process tool: poll it here once, and a call that completes at once (no
            // lane wait, no latency) is finished without a task or a channel round trip.
            // Whatever it registered a waker for is polled again by the task below, which
            // registers the real waker.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if let std::task::Poll::Ready(mut c) = std::future::Future::poll(fut.as_mut(), &mut cx)
            {
                // Lanes first, as a spawned call gives them back before its completion is read.
                drop(std::mem::take(&mut c.held));
                self.completed(c);
                return;
            }
        }
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let mut c = fut.await;
            // Lanes before the completion: once the coordinator has read the last one the run
            // may end, and a hold given back after that (a shared store's permits) would be
            // dropped with the runtime and kept in the store until its lease lapses.
            drop(std::mem::take(&mut c.held));
            let _ = done.send(c);
        });
    }

    /// A call that costs, under `[budget] per_tenant`: its place in line for its reservation.
    fn ticket(&mut self, p: usize) -> Option<Ticket> {
        let cost = self.plan.calls[p].cost;
        let (w, tenant) = self.window.as_ref().filter(|_| cost > 0.0)?;
        let lanes = &self.spend;
        let charger = self
            .charger
            .get_or_insert_with(|| Charger::start(lanes.clone(), w.clone(), tenant.clone()));
        Some(charger.ask(cost))
    }

    /// A call with no tool to invoke (pre-dispatch answers those first; this is the guard).
    fn refuse_invalid(&mut self, p: usize) {
        let why = self.plan.calls[p]
            .invalid
            .clone()
            .unwrap_or_else(|| "the call names no tool".into());
        let kind = self.plan.calls[p].refusal_kind();
        let r = never_dispatched(&self.plan, p, kind, &why);
        self.finish(p, r);
    }
}
