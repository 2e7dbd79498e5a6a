//! Pre-dispatch: the serial steps, one call at a time in call order, before a ready call may
//! go — its dependencies succeeded, its references resolve, its arguments pass the guardrail,
//! the journal or a cassette has not settled it already, the read cache has no answer for it,
//! and the budget and the call cap have room for it.

use std::borrow::Cow;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::state::Coordinator;
use super::{Ready, DRAIN_EVERY};
use crate::events::ErrorKind;
use crate::reference::ResolveError;
use crate::run::call::{never_dispatched, Completion};

/// Why a call is never dispatched.
pub(super) type Refusal = (ErrorKind, String);

impl Coordinator {
    /// Pre-dispatch every ready call, in call order, and spawn those that pass.
    pub(super) fn dispatch_ready(&mut self, done_rx: &mut mpsc::UnboundedReceiver<Completion>) {
        let mut since_drain = 0;
        self.unpark();
        while self.ending.is_none() {
            let Some(p) = self.ready.pop_first() else {
                break;
            };
            match self.pre_dispatch(p) {
                Ok(Ready::Go(resolved)) => self.reserve_then_go(p, resolved),
                Ok(Ready::Reuse(r)) => self.finish_reused(p, *r),
                Ok(Ready::Cached(r)) => self.finish(p, *r),
                Ok(Ready::Waiting) => {}
                Err((kind, why)) => {
                    let r = never_dispatched(&self.plan, p, kind, &why);
                    self.finish(p, r);
                }
            }
            since_drain += 1;
            if since_drain >= DRAIN_EVERY {
                since_drain = 0;
                while let Ok(c) = done_rx.try_recv() {
                    self.completed(c);
                }
            }
            self.unpark();
        }
    }

    /// The serial steps before a call may be dispatched: `Ok(Go(resolved arguments, if any
    /// reference or escape had to be filled))`, `Ok(Reuse)` when a journal or cassette already
    /// holds its result, or `Err((kind, why))` to never dispatch it.
    fn pre_dispatch(&mut self, p: usize) -> Result<Ready, Refusal> {
        let call = &self.plan.calls[p];
        let t = match (&call.invalid, call.tool) {
            (None, Some(t)) => t,
            (why, _) => {
                let why = why
                    .clone()
                    .unwrap_or_else(|| "the call names no tool".into());
                return Err((ErrorKind::InvalidCall, why));
            }
        };
        self.check_dependencies(p)?;
        let plan = self.plan.clone();
        let args = self.resolve_args(&plan, p)?;
        self.guardrail(t, &args)?;
        if self.fingerprints {
            if let Some(settled) = self.durable(p, t, &args)? {
                return Ok(settled);
            }
        }
        if let Some(found) = self.consult_cache(p, t, &args) {
            if matches!(found, Ready::Waiting) {
                let resolved = match args {
                    Cow::Borrowed(_) => None,
                    Cow::Owned(m) => Some(m),
                };
                self.cache_args.insert(p, resolved);
            }
            return Ok(found);
        }
        Ok(Ready::Go(match args {
            Cow::Borrowed(_) => None,
            Cow::Owned(m) => Some(m),
        }))
    }

    /// Past pre-dispatch's checks: take the call's share of the limits and send it on. When
    /// the limits are full but calls at the gate hold reservations they may give back (a call
    /// deferred or refused there was never made), the call waits for their verdicts.
    pub(super) fn reserve_then_go(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        match self.reserve(p) {
            Ok(()) => self.gate_or_spawn(p, resolved),
            Err(_) if self.gating > 0 => {
                self.held.insert(p, resolved);
            }
            Err((kind, why)) => {
                let r = never_dispatched(&self.plan, p, kind, &why);
                self.finish(p, r);
            }
        }
    }

    /// After a verdict of the gate: the calls held for its reservations try again, in call
    /// order.
    pub(super) fn retry_held(&mut self) {
        for (p, resolved) in std::mem::take(&mut self.held) {
            if self.ending.is_some() {
                let why = "the run ended while it waited for the budget";
                let r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, why);
                self.finish(p, r);
            } else {
                self.reserve_then_go(p, resolved);
            }
        }
    }

    /// What a call takes from the run's limits before it goes: its cost, and one call of
    /// `max_calls`. Either refused, neither is taken.
    pub(super) fn reserve(&mut self, p: usize) -> Result<(), Refusal> {
        self.reserve_call(p)?;
        if let Err(refusal) = self.reserve_budget(p) {
            self.give_back_call(p);
            return Err(refusal);
        }
        Ok(())
    }

    /// Count the call against `max_calls`; past the cap it is refused (kind `call_limit`).
    fn reserve_call(&mut self, p: usize) -> Result<(), Refusal> {
        let Some(max) = self.plan.settings.max_calls else {
            return Ok(());
        };
        if self.calls_made >= u64::from(max) {
            return Err((
                ErrorKind::CallLimit,
                format!("call limit reached (max_calls = {max})"),
            ));
        }
        self.calls_made += 1;
        self.call_reserved[p] = true;
        Ok(())
    }

    /// A call counted against `max_calls` that never went out gives its place back.
    pub(super) fn give_back_call(&mut self, p: usize) {
        if self.call_reserved.get(p).copied().unwrap_or(false) {
            self.call_reserved[p] = false;
            self.calls_made -= 1;
        }
    }

    /// Every call it references or runs `after` (in this batch or an earlier one) succeeded.
    fn check_dependencies(&self, p: usize) -> Result<(), Refusal> {
        let plan = &self.plan;
        let call = &plan.calls[p];
        if self.paused_phase.is_some_and(|q| q < call.phase) {
            let why = "awaiting approval of a call in an earlier phase";
            return Err((ErrorKind::AwaitingApproval, why.into()));
        }
        // Waiting is a dependency: whatever would wait for a call if it ran (a reference,
        // `after`, the write chain, a hazard on its backend) waits with it while it is
        // deferred for approval, and runs after it on resume.
        for e in &call.edges {
            let dep = self.results[e.from].as_ref();
            if dep.and_then(|r| r.error.as_ref()).map(|e| e.kind)
                == Some(ErrorKind::AwaitingApproval)
            {
                let from = &plan.calls[e.from].id;
                let why = format!("awaiting approval of {from}, which it waits for");
                return Err((ErrorKind::AwaitingApproval, why));
            }
        }
        for e in call.edges.iter().filter(|e| e.reason.needs_success()) {
            let dep = self.results[e.from].as_ref();
            if dep.is_none_or(|r| !r.is_ok()) {
                let from = &plan.calls[e.from].id;
                return Err((
                    ErrorKind::DependencyFailed,
                    format!("dependency {from} failed"),
                ));
            }
        }
        if let Some(ext) = &plan.external {
            let failed = call
                .external_deps
                .iter()
                .find(|id| ext.get(*id).is_none_or(Option::is_none));
            if let Some(id) = failed {
                return Err((
                    ErrorKind::DependencyFailed,
                    format!("dependency {id} failed"),
                ));
            }
        }
        Ok(())
    }

    /// The arguments with every reference filled from the outputs it names.
    fn resolve_args<'p>(
        &self,
        plan: &'p crate::plan::Plan,
        p: usize,
    ) -> Result<Cow<'p, Map<String, Value>>, Refusal> {
        let results = &self.results;
        let lookup = |id: &str| -> Option<&Value> {
            match plan.ids.get(id) {
                Some(&i) => results[i].as_ref().filter(|r| r.is_ok()).map(|r| &r.output),
                None => plan
                    .external
                    .as_ref()
                    .and_then(|e| e.get(id))
                    .and_then(Option::as_ref),
            }
        };
        plan.calls[p].args.resolve(&lookup).map_err(|(arg, e)| {
            let msg = match e {
                ResolveError::NoOutput(t) => format!("argument `{arg}`: call `{t}` has no output"),
                ResolveError::Path(r, m) => {
                    format!(
                        "argument `{arg}`: {r} cannot be resolved: `{}` — {}",
                        m.at, m.why
                    )
                }
            };
            (ErrorKind::DependencyFailed, msg)
        })
    }

    /// The resolved arguments pass the schema of tool `t`.
    fn guardrail(&self, t: usize, args: &Map<String, Value>) -> Result<(), Refusal> {
        let tool = &self.manifest.tools[t];
        let Some(schema) = &tool.args else {
            return Ok(());
        };
        let problems = schema.check(args, tool.kind.reserved());
        if problems.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Err((
            ErrorKind::Guardrail,
            format!("guardrail: {}", list.join("; ")),
        ))
    }

    /// Reserve the call's cost; a call that does not fit what is left is refused (later,
    /// cheaper calls may still fit). A call never dispatched gives its reservation back.
    fn reserve_budget(&mut self, p: usize) -> Result<(), Refusal> {
        let cost = self.plan.calls[p].cost;
        let Some(max) = self.plan.settings.max_cost.filter(|_| cost > 0.0) else {
            return Ok(());
        };
        if self.spent + cost > max + 1e-9 {
            return Err((
                ErrorKind::BudgetExhausted,
                format!(
                    "budget exhausted ({} of {max} spent; this call costs {cost})",
                    crate::events::trim_float(self.spent),
                ),
            ));
        }
        self.spent += cost;
        self.reserved[p] = true;
        Ok(())
    }
}
