//! Checks on planned calls: literal arguments against the tool's schema (the guardrail before
//! anything runs), placeholders the tool needs, weights against every lane, and warnings for a
//! phase that fans out wider than a lane.

use super::graph::Builder;
use super::model::{CallPlan, LaneKey, LaneSpec, Phase};
use crate::error::Diagnostic;
use crate::schema::ProblemKind;

impl Builder<'_> {
    /// Call `i` to tool `t`: its literal arguments pass the schema (a missing argument that a
    /// reference will fill is checked once it is resolved), and it gives every placeholder.
    pub(super) fn check_call(&mut self, i: usize, t: usize) {
        let (batch, tool) = (self.batch, &self.manifest.tools[t]);
        let c = &batch.calls[i];
        // A kind's reserved arguments (`_latency`, …) are for batch files, never a model.
        if batch.from_model {
            if let Some(r) = tool
                .kind
                .reserved()
                .iter()
                .find(|r| c.args.value.contains_key(**r))
            {
                let at = batch.locate(i, Some("args"), r);
                self.call_error(
                    i,
                    Diagnostic::error(format!(
                        "call `{}` to `{}`: argument `{r}` is reserved for batch files; a model may not send it",
                        c.id, tool.name
                    ))
                    .at(at),
                );
            }
        }
        // The arguments reported missing already (a placeholder's need says nothing more).
        let mut missing = Vec::new();
        if let Some(schema) = &tool.args {
            let referenced = c.args.referenced_args();
            let mut literal = c.args.literal_without_holes();
            for r in &referenced {
                literal.remove(r);
            }
            for problem in schema.check(&literal, tool.kind.reserved()) {
                if problem.kind == ProblemKind::Missing && referenced.contains(&problem.arg) {
                    continue;
                }
                if problem.kind == ProblemKind::Missing {
                    missing.push(problem.arg.clone());
                }
                let at = batch.locate(i, Some("args"), &problem.arg);
                self.call_error(
                    i,
                    Diagnostic::error(format!("call `{}` to `{}`: {problem}", c.id, tool.name))
                        .at(at),
                );
            }
        }
        for p in tool.kind.placeholders() {
            if !c.args.value.contains_key(p) && !missing.iter().any(|m| m == p) {
                let at = batch.locate(i, Some("tool"), &c.tool);
                self.call_error(
                    i,
                    Diagnostic::error(format!(
                        "call `{}` to `{}` gives no argument `{p}`, which the tool needs to be invoked",
                        c.id, tool.name
                    ))
                    .at(at),
                );
            }
        }
    }

    /// A call heavier than a (narrowed) lane could never run.
    pub(super) fn check_weights(&mut self, calls: &[CallPlan], lanes: &[LaneSpec]) {
        for c in calls {
            for &l in c.lanes.iter() {
                let Some(lim) = lanes[l].floor().filter(|lim| c.weight > *lim) else {
                    continue;
                };
                let learned = if lanes[l].auto.is_some() {
                    ", the floor of its learned limit"
                } else {
                    ""
                };
                let at = self.batch.locate(c.index, Some("tool"), &c.tool_name);
                self.call_error(
                    c.index,
                    Diagnostic::error(format!(
                        "call `{}`: tool `{}` has weight {}, more than lane {} allows ({lim}{learned}): it could never run",
                        c.id, c.tool_name, c.weight, lanes[l].name
                    ))
                    .at(at),
                );
            }
        }
    }

    /// A phase asking more of a lane (other than the turn) than it allows: the rest queue.
    pub(super) fn warn_fan_out(
        &mut self,
        phases: &[Phase],
        calls: &[CallPlan],
        lanes: &[LaneSpec],
    ) {
        for (pi, p) in phases.iter().enumerate() {
            let mut per_lane = vec![0u64; lanes.len()];
            for c in &calls[p.start..p.end] {
                for &l in c.lanes.iter() {
                    per_lane[l] += u64::from(c.weight);
                }
            }
            let wide = per_lane.into_iter().enumerate().filter(|&(l, w)| {
                lanes[l].planned().is_some_and(|lim| w > u64::from(lim))
                    && !matches!(lanes[l].key, LaneKey::Turn)
            });
            for (l, w) in wide {
                self.warnings.push(
                    Diagnostic::warning(format!(
                        "phase {pi} fans out {w} permits onto lane {} (limit {}{}): the rest queue",
                        lanes[l].name,
                        lanes[l].planned().unwrap_or(0),
                        if lanes[l].auto.is_some() {
                            ", learned from here"
                        } else {
                            ""
                        }
                    ))
                    .in_file(&self.batch.file.name),
                );
            }
        }
    }
}
