//! Building a [`Plan`]: validate a batch against the manifest (every problem, located), split
//! it into phases, derive each call's edges and lanes.
//!
//! Phases: consecutive `parallel_safe` calls share one; a call to a `parallel_safe = false`
//! tool is a phase alone. Edges inside a phase: references and `after` (must succeed) and the
//! write chain (the previous write must have resolved). Lanes are listed in the fixed
//! acquisition order ([`super::lanes`]). Each step is a method of [`Builder`], which collects
//! every diagnostic so one pass reports every problem.

use std::collections::HashMap;
use std::time::Duration;

use super::claims::{self, Claim};
use super::lanes::{settings, LaneTable};
use super::model::*;
use crate::batch::Batch;
use crate::error::{suggest, Diagnostic};
use crate::manifest::{Hazards, Manifest};

/// Validate `batch` against `manifest` and plan it. `Err` holds every error (and warnings).
pub fn build(
    manifest: &Manifest,
    batch: &Batch,
    opts: &PlanOptions,
) -> Result<Plan, Vec<Diagnostic>> {
    let mut b = Builder {
        manifest,
        batch,
        opts,
        diags: Vec::new(),
        warnings: Vec::new(),
        invalid: batch.calls.iter().map(|c| c.invalid.clone()).collect(),
    };
    let ids = b.check_ids();
    let tool_of = b.resolve_tools();
    let (phases, phase_of) = split_phases(manifest, &tool_of);
    let (mut edges, mut external_deps) = b.link(&ids, &phases, &phase_of);
    b.report_cycles(&edges);
    b.check_batch_per_tool();
    let (settings, turn) = settings(manifest, batch, opts, &mut b.warnings);
    let backends = order_side_effects(manifest, &tool_of, &phase_of, settings.hazards, &mut edges);
    let mut table = LaneTable::new(manifest, batch, &settings, turn, opts.lanes.as_ref());
    let mut calls: Vec<CallPlan> = Vec::with_capacity(batch.calls.len());
    for (i, c) in batch.calls.iter().enumerate() {
        let Some(t) = tool_of[i] else {
            if b.invalid[i].is_some() {
                calls.push(CallPlan::invalid(i, c, phase_of[i]));
            }
            continue;
        };
        let lanes = table.of_tool(manifest, batch, opts, t, &mut b.warnings);
        b.check_call(i, t);
        let tool = &manifest.tools[t];
        calls.push(CallPlan {
            index: i,
            id: c.id.clone(),
            tool: Some(t),
            tool_name: tool.name.clone(),
            called_as: (c.tool != tool.name).then(|| c.tool.clone()),
            phase: phase_of[i],
            edges: std::mem::take(&mut edges[i]),
            lanes,
            args: c.args.clone(),
            weight: tool.weight,
            write: tool.is_write(),
            idempotent: tool.idempotent,
            cost: tool.cost,
            estimate: estimate_of(tool),
            estimate_known: tool.estimate().is_some(),
            external_deps: std::mem::take(&mut external_deps[i]),
            invalid: None,
        });
    }
    let lanes = table.into_lanes();
    b.check_weights(&calls, &lanes);
    b.mark_invalid(&mut calls);
    if b.diags.iter().any(Diagnostic::is_error) {
        b.diags.extend(b.warnings);
        return Err(b.diags);
    }
    b.warn_fan_out(&phases, &calls, &lanes);
    let mut warnings = b.warnings;
    warnings.extend(b.diags);
    debug_assert!(calls.iter().enumerate().all(|(p, c)| c.index == p));
    Ok(Plan {
        settings,
        calls,
        phases,
        lanes,
        warnings,
        ids: std::sync::OnceLock::new(),
        external: opts.external.clone(),
        backends,
        input_format: batch.input_format,
        usage: batch.usage.clone(),
        run_id: batch.run_id.clone(),
        reply_id: batch.reply_id.clone(),
        given_key: None,
        cut_off_before: false,
    })
}

/// What building a plan reads, and the diagnostics it has found so far.
pub(super) struct Builder<'a> {
    pub manifest: &'a Manifest,
    pub batch: &'a Batch,
    pub opts: &'a PlanOptions,
    /// Errors (and warnings found with them).
    pub diags: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// Per call: why it cannot be made, for a model's reply (whose problems cost only the
    /// call: answered `invalid_call`, never dispatched).
    pub invalid: Vec<Option<String>>,
}

impl<'a> Builder<'a> {
    pub(super) fn error(&mut self, d: Diagnostic) {
        self.diags.push(d.in_file(&self.batch.file.name));
    }

    /// A problem with call `i` alone: for a model's reply the call becomes invalid (its
    /// first problem, with the hint, is its answer); for a batch it is an error.
    pub(super) fn call_error(&mut self, i: usize, d: Diagnostic) {
        let c = &self.batch.calls[i];
        let d = d.for_call(&c.id, &c.tool);
        if !self.batch.from_model {
            return self.error(d);
        }
        let text = match &d.hint {
            Some(h) => format!("{} ({h})", d.message),
            None => d.message,
        };
        // Every problem of the call, so the model can fix them all at once.
        match &mut self.invalid[i] {
            None => self.invalid[i] = Some(text),
            Some(first) => {
                let prefix = format!("call `{}` to `{}`: ", c.id, c.tool);
                first.push_str("; ");
                first.push_str(text.strip_prefix(&prefix).unwrap_or(&text));
            }
        }
    }

    /// Invalid calls take no lanes and wait for nothing: they are answered at once.
    fn mark_invalid(&mut self, calls: &mut [CallPlan]) {
        for c in calls.iter_mut() {
            if let Some(why) = self.invalid[c.index].take() {
                c.refuse(why);
            }
        }
    }

    /// Ids are unique: call id → position of its first use.
    /// (Empty when no call names an id or a call: the ids given by position are unique.)
    fn check_ids(&mut self) -> HashMap<&'a str, usize> {
        let batch = self.batch;
        let named = |c: &crate::batch::Call| {
            c.explicit_id || !c.after.is_empty() || c.args.refs().next().is_some()
        };
        if !batch.calls.iter().any(named) {
            return HashMap::new();
        }
        let mut ids: HashMap<&str, usize> = HashMap::with_capacity(batch.calls.len());
        for (i, c) in batch.calls.iter().enumerate() {
            if let Some(&first) = ids.get(c.id.as_str()) {
                self.call_error(
                    i,
                    Diagnostic::error(format!(
                        "call id `{}` is used twice (calls #{} and #{})",
                        c.id,
                        first + 1,
                        i + 1
                    ))
                    .at(batch.locate(i, Some("id"), &c.id))
                    .hint("give each call its own id"),
                );
            } else {
                ids.insert(&c.id, i);
            }
        }
        ids
    }

    /// Each call's tool (`None`: unknown, reported).
    fn resolve_tools(&mut self) -> Vec<Option<usize>> {
        let (batch, manifest) = (self.batch, self.manifest);
        let mut tool_of = Vec::with_capacity(batch.calls.len());
        for (i, c) in batch.calls.iter().enumerate() {
            let t = manifest.tool_position(&c.tool);
            if t.is_none() {
                self.call_error(
                    i,
                    Diagnostic::error(format!("call `{}` uses unknown tool `{}`", c.id, c.tool))
                        .at(batch.locate(i, Some("tool"), &c.tool))
                        .maybe_hint(manifest.suggest_tool(&c.tool)),
                );
            }
            tool_of.push(t);
        }
        tool_of
    }

    /// Edges from references and `after`, and the ids outside the batch each call names.
    fn link(
        &mut self,
        ids: &HashMap<&str, usize>,
        phases: &[Phase],
        phase_of: &[usize],
    ) -> (Vec<Vec<Edge>>, Vec<Vec<String>>) {
        let n = self.batch.calls.len();
        let mut edges: Vec<Vec<Edge>> = vec![Vec::new(); n];
        let mut external: Vec<Vec<String>> = vec![Vec::new(); n];
        for i in 0..n {
            let targets = self.targets(i);
            for (target, reason, needle, what) in targets {
                match ids.get(target.as_str()) {
                    None if self.is_external(&target) => external[i].push(target),
                    None => self.unknown_target(i, &target, &needle, &what, reason),
                    Some(&j) if j == i => self.self_target(i, &needle, &what, reason),
                    Some(&j) if phase_of[j] > phase_of[i] => {
                        let hint = later_phase_hint(phases, phase_of[i], phase_of[j]);
                        self.later_target(i, &target, &needle, &what, reason, hint)
                    }
                    Some(&j) => {
                        if !edges[i].iter().any(|e| e.from == j) {
                            edges[i].push(Edge {
                                from: j,
                                reason,
                                backend: None,
                            });
                        }
                    }
                }
            }
        }
        (edges, external)
    }

    /// What call `i` waits for: (target id, why, the text naming it, the argument or "after").
    fn targets(&self, i: usize) -> Vec<(String, EdgeReason, String, String)> {
        let c = &self.batch.calls[i];
        let refs = c.args.refs().map(|(hole, r)| {
            (
                r.target.clone(),
                EdgeReason::Reference,
                r.to_string(),
                hole.arg_name().to_string(),
            )
        });
        let after = c
            .after
            .iter()
            .map(|a| (a.clone(), EdgeReason::After, a.clone(), String::new()));
        refs.chain(after).collect()
    }

    fn is_external(&self, id: &str) -> bool {
        self.opts
            .external
            .as_ref()
            .is_some_and(|e| e.contains_key(id))
    }

    /// Where call `i` names `needle` (a reference in its arguments, or its `after`).
    fn locate_target(
        &self,
        i: usize,
        needle: &str,
        reason: EdgeReason,
    ) -> Option<crate::error::Location> {
        match reason {
            EdgeReason::After => self.batch.locate(i, Some("after"), needle),
            _ => self.batch.locate(i, None, needle),
        }
    }

    fn unknown_target(
        &mut self,
        i: usize,
        target: &str,
        needle: &str,
        arg: &str,
        reason: EdgeReason,
    ) {
        let c = &self.batch.calls[i];
        let msg = match reason {
            EdgeReason::After => format!("call `{}` is `after` unknown call `{target}`", c.id),
            _ => format!(
                "call `{}` argument `{arg}` references unknown call `{target}` in `{needle}`",
                c.id
            ),
        };
        let hint = suggest(target, self.batch.calls.iter().map(|c| c.id.as_str()));
        let at = self.locate_target(i, needle, reason);
        self.error(Diagnostic::error(msg).at(at).maybe_hint(hint));
    }

    fn self_target(&mut self, i: usize, needle: &str, arg: &str, reason: EdgeReason) {
        let c = &self.batch.calls[i];
        let msg = match reason {
            EdgeReason::After => format!("call `{}` is `after` itself", c.id),
            _ => format!(
                "reference cycle: call `{}` references itself in argument `{arg}`",
                c.id
            ),
        };
        let at = self.locate_target(i, needle, reason);
        self.error(Diagnostic::error(msg).at(at));
    }

    fn later_target(
        &mut self,
        i: usize,
        target: &str,
        needle: &str,
        arg: &str,
        reason: EdgeReason,
        hint: String,
    ) {
        let c = &self.batch.calls[i];
        let msg = match reason {
            EdgeReason::After => format!(
                "call `{}` is `after` `{target}`, which runs in a later phase",
                c.id
            ),
            _ => format!(
                "call `{}` argument `{arg}` references `{target}`, which runs in a later phase",
                c.id
            ),
        };
        let at = self.locate_target(i, needle, reason);
        self.error(Diagnostic::error(msg).at(at).hint(hint));
    }

    /// Cycles are only possible through forward edges inside a phase.
    fn report_cycles(&mut self, edges: &[Vec<Edge>]) {
        let batch = self.batch;
        for cycle in find_cycles(edges) {
            let names: Vec<&str> = cycle.iter().map(|&i| batch.calls[i].id.as_str()).collect();
            let first = cycle[0];
            let next = cycle[1 % cycle.len()];
            let loc = batch
                .calls
                .get(first)
                .and_then(|c| {
                    c.args
                        .refs()
                        .find(|(_, r)| r.target == batch.calls[next].id)
                        .map(|(_, r)| batch.locate(first, None, &r.to_string()))
                        .or_else(|| Some(batch.locate(first, Some("after"), &batch.calls[next].id)))
                })
                .flatten();
            self.error(
                Diagnostic::error(format!(
                    "reference cycle: {} → {}",
                    names.join(" → "),
                    names[0]
                ))
                .at(loc)
                .hint("each call in a cycle waits for another; remove one of the references or `after` entries"),
            );
        }
    }

    /// The batch's `concurrency.per_tool` may only name tools.
    fn check_batch_per_tool(&mut self) {
        let manifest = self.manifest;
        for t in self.batch.concurrency.per_tool.keys() {
            if manifest.tool(t).is_none() {
                self.error(
                    Diagnostic::error(format!(
                        "the batch's concurrency.per_tool limits `{t}`, which is not a tool"
                    ))
                    .maybe_hint(manifest.suggest_tool(t)),
                );
            }
        }
    }
}

/// Consecutive `parallel_safe` calls share a phase; a call to any other tool is one alone.
fn split_phases(manifest: &Manifest, tool_of: &[Option<usize>]) -> (Vec<Phase>, Vec<usize>) {
    let mut phase_of = vec![0usize; tool_of.len()];
    let mut phases: Vec<Phase> = Vec::new();
    for (i, t) in tool_of.iter().enumerate() {
        let alone = t.is_some_and(|t| claims::alone(&manifest.tools[t]));
        match phases.last_mut() {
            Some(p) if !alone && !p.alone => p.end = i + 1,
            _ => phases.push(Phase {
                start: i,
                end: i + 1,
                alone,
            }),
        }
        phase_of[i] = phases.len() - 1;
    }
    (phases, phase_of)
}

/// Side effects keep call order inside a phase, by what each call claims (`claims.rs`, the
/// rules the gateway's order and the lane store follow too): a chained write waits for the
/// chained write before it (the write chain); on each backend, a claim waits for the earlier
/// claims it [`Claim::waits_for`] since that backend's last `Write` — or for that write —
/// so a write waits for the reads (and concurrent writes) before it, a read for the latest
/// write, a concurrent write for the reads and the plain writes. A plain write's wait for the
/// write before it on a backend is the chain's. All need the earlier call resolved, not
/// succeeded. Linear in the edges: per backend, its last write and the claims since, by kind.
/// Returns the backends the edges name.
fn order_side_effects(
    manifest: &Manifest,
    tool_of: &[Option<usize>],
    phase_of: &[usize],
    hazards: Hazards,
    edges: &mut [Vec<Edge>],
) -> Vec<String> {
    let claim_of: Vec<Option<Claim>> = (manifest.tools.iter())
        .map(|t| claims::backend_claim(t, hazards))
        .collect();
    let mut names: Vec<String> = Vec::new();
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut track: Vec<Backend> = Vec::new();
    // The call a call last got a hazard edge from, so two shared backends give one edge.
    let mut stamp = vec![usize::MAX; tool_of.len()];
    let mut last_chained: Option<usize> = None;
    for i in 0..tool_of.len() {
        let Some(t) = tool_of[i] else { continue };
        let tool = &manifest.tools[t];
        if i > 0 && phase_of[i] != phase_of[i - 1] {
            last_chained = None;
        }
        let before = edges[i].len();
        let mut add = |edges: &mut [Vec<Edge>], from: usize, reason, backend| {
            if stamp[from] != i && !edges[i][..before].iter().any(|e| e.from == from) {
                stamp[from] = i;
                edges[i].push(Edge {
                    from,
                    reason,
                    backend,
                });
            }
        };
        if claims::chained(tool) {
            if let Some(w) = last_chained {
                add(edges, w, EdgeReason::WriteChain, None);
            }
            last_chained = Some(i);
        }
        let Some(claim) = claim_of[t] else { continue };
        for b in &tool.backends {
            let id = *ids.entry(b.as_str()).or_insert_with(|| {
                names.push(b.clone());
                track.push(Backend::new(phase_of[i]));
                (names.len() - 1) as u32
            });
            let tr = &mut track[id as usize];
            if tr.phase != phase_of[i] {
                *tr = Backend::new(phase_of[i]);
            }
            for (from, reason) in tr.waited_for(claim) {
                add(edges, from, reason, Some(id));
            }
            tr.take(i, claim);
        }
    }
    names
}

/// One backend's claims in a phase: its last plain write, and the claims since, by kind.
struct Backend {
    phase: usize,
    write: Option<usize>,
    reads: Vec<usize>,
    concurrent: Vec<usize>,
}

impl Backend {
    fn new(phase: usize) -> Backend {
        Backend {
            phase,
            write: None,
            reads: Vec::new(),
            concurrent: Vec::new(),
        }
    }

    /// The earlier calls a call claiming `claim` waits for, each with why.
    fn waited_for(&self, claim: Claim) -> Vec<(usize, EdgeReason)> {
        let (reads, concurrent) = match claim {
            Claim::Read => (false, true),
            Claim::ConcurrentWrite => (true, false),
            Claim::Write => (true, true),
        };
        let mut out = Vec::new();
        if reads {
            out.extend(self.reads.iter().map(|r| (*r, EdgeReason::ReadThenWrite)));
        }
        if concurrent {
            let after_write = match claim {
                Claim::Read => EdgeReason::WriteThenRead,
                _ => EdgeReason::WriteThenWrite,
            };
            out.extend(self.concurrent.iter().map(|w| (*w, after_write)));
        }
        // The last plain write, unless a claim since already follows it (every claim waits
        // for a write) or the chain orders it (a plain write after a plain write).
        if let (Some(w), true) = (self.write, out.is_empty() && claim != Claim::Write) {
            let why = match claim {
                Claim::Read => EdgeReason::WriteThenRead,
                _ => EdgeReason::WriteThenWrite,
            };
            out.push((w, why));
        }
        out
    }

    /// Take call `i`'s claim.
    fn take(&mut self, i: usize, claim: Claim) {
        match claim {
            Claim::Write => {
                *self = Backend {
                    write: Some(i),
                    ..Backend::new(self.phase)
                };
            }
            Claim::Read => self.reads.push(i),
            Claim::ConcurrentWrite => self.concurrent.push(i),
        }
    }
}

fn estimate_of(tool: &crate::manifest::Tool) -> Duration {
    tool.estimate().unwrap_or(ASSUMED_LATENCY)
}

fn later_phase_hint(phases: &[Phase], mine: usize, theirs: usize) -> String {
    let why = if phases[theirs].alone {
        "its tool is parallel_safe = false, so it runs in a phase of its own after this one"
    } else if phases[mine].alone {
        "this call's tool is parallel_safe = false, so it runs alone before that phase"
    } else {
        "phases run in call order"
    };
    format!("{why}; move the referenced call before this one")
}

/// Every cycle in the dependency graph, each once (as call indices, in dependency order).
fn find_cycles(edges: &[Vec<Edge>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    // 0 = unvisited, 1 = on stack, 2 = done.
    let mut state = vec![0u8; n];
    let mut cycles = Vec::new();
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        let mut path: Vec<usize> = vec![root];
        state[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(e) = edges[node].get(*next) {
                *next += 1;
                let to = e.from;
                match state[to] {
                    0 => {
                        state[to] = 1;
                        stack.push((to, 0));
                        path.push(to);
                    }
                    1 => {
                        if let Some(pos) = path.iter().position(|&p| p == to) {
                            cycles.push(path[pos..].to_vec());
                        }
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                stack.pop();
                path.pop();
            }
        }
    }
    cycles
}

#[cfg(test)]
pub(crate) mod tests;
