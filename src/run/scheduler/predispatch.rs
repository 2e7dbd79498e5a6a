//! Pre-dispatch: the serial steps, one call at a time in call order, before a ready call may
//! go — its dependencies succeeded, its references resolve, its arguments pass the guardrail,
//! the journal or a cassette has not settled it already, the read cache has no answer for it;
//! then the budget and the call cap are asked for room (`allotment`).

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
            if self.held_dirty && !self.held.is_empty() {
                self.retry_held();
            }
            let Some(p) = self.ready.pop_first() else {
                if self.held_dirty && !self.held.is_empty() {
                    continue;
                }
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
                return Err((call.refusal_kind(), why));
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
        } else if plan.calls[p].write {
            let target = self.manifest.tools[t].kind.target();
            let fp = crate::run::journal::fingerprint(&plan.calls[p].tool_name, &target, &args);
            self.write_fps.insert(p, fp);
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
            match plan.position(id) {
                Some(i) => results[i].as_ref().filter(|r| r.is_ok()).map(|r| &r.output),
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
}
