//! The reference the scheduler is held to: the same batch, one call at a time in call order,
//! with the rules the README states — and nothing about lanes, tasks or time.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{Answer, GenCall, Seen};
use crate::events::{ErrorKind, Status};
use crate::manifest::Manifest;
use crate::plan::Plan;

pub(super) struct Sequential<'a> {
    manifest: &'a Manifest,
    plan: &'a Plan,
    calls: &'a [GenCall],
    kv: HashMap<String, Value>,
    /// Per backend: how many writes have resolved on it.
    epochs: HashMap<String, u64>,
    /// Cached reads: key → output and the epochs of its backends when it was read.
    cache: HashMap<String, (Value, Vec<u64>)>,
    calls_made: u64,
    spent: f64,
    /// Calls deferred at the gate itself (not for waiting on one), as the journal lists them.
    pub(super) deferred: HashSet<usize>,
}

impl<'a> Sequential<'a> {
    pub(super) fn new(manifest: &'a Manifest, plan: &'a Plan, calls: &'a [GenCall]) -> Self {
        Sequential {
            manifest,
            plan,
            calls,
            kv: HashMap::new(),
            epochs: HashMap::new(),
            cache: HashMap::new(),
            calls_made: 0,
            spent: 0.0,
            deferred: HashSet::new(),
        }
    }

    /// One run of the batch. `prior`: the answers of the run being resumed — what it settled
    /// stands, what it never dispatched runs now, and the calls it deferred are approved.
    pub(super) fn run(&mut self, prior: Option<&[Seen]>) -> Vec<Seen> {
        let granted = std::mem::take(&mut self.deferred);
        // A resumed run counts the calls its journal dispatched, and what they cost.
        let mut out: Vec<Seen> = Vec::new();
        let mut paused: Option<usize> = None;
        for p in 0..self.plan.calls.len() {
            if let Some(prior) = prior {
                if prior[p].status != Status::NeverDispatched {
                    out.push(prior[p].clone());
                    continue;
                }
            }
            let seen = self.one(p, &out, &mut paused, &granted);
            out.push(seen);
        }
        out
    }

    fn one(
        &mut self,
        p: usize,
        out: &[Seen],
        paused: &mut Option<usize>,
        granted: &HashSet<usize>,
    ) -> Seen {
        let call = &self.plan.calls[p];
        if paused.is_some_and(|q| q < call.phase) {
            return Seen::never(ErrorKind::AwaitingApproval);
        }
        if call
            .edges
            .iter()
            .any(|e| out[e.from].kind == Some(ErrorKind::AwaitingApproval))
        {
            return Seen::never(ErrorKind::AwaitingApproval);
        }
        let deps = call.edges.iter().filter(|e| e.reason.needs_success());
        if deps.clone().any(|e| out[e.from].status != Status::Ok) {
            return Seen::never(ErrorKind::DependencyFailed);
        }
        let args = self.resolve(p, out);
        let Some(t) = call.tool else {
            return Seen::never(ErrorKind::UnknownTool);
        };
        let tool = &self.manifest.tools[t];
        let key = format!(
            "{}\u{0}{}",
            call.tool_name,
            crate::run::cache::canonical(&Value::Object(args.clone()))
        );
        let marks = self.marks(&tool.backends);
        if tool.cache.is_some() {
            if let Some((v, m)) = self.cache.get(&key) {
                if *m == marks {
                    return Seen::ok(v.clone(), true);
                }
            }
        }
        if let Some(refused) = self.reserve(call.cost) {
            return refused;
        }
        if tool.requires_approval {
            let answer = if granted.contains(&p) {
                Answer::Grant
            } else {
                self.calls[p].answer
            };
            match answer {
                Answer::Grant => {}
                Answer::Deny => {
                    self.give_back(call.cost);
                    return Seen::never(ErrorKind::ApprovalDenied);
                }
                Answer::Defer => {
                    self.give_back(call.cost);
                    *paused = Some(paused.map_or(call.phase, |q| q.min(call.phase)));
                    self.deferred.insert(p);
                    return Seen::never(ErrorKind::AwaitingApproval);
                }
            }
        }
        let seen = self.invoke(p, &args);
        if tool.is_write() {
            for b in &tool.backends {
                *self.epochs.entry(b.clone()).or_insert(0) += 1;
            }
        } else if tool.cache.is_some() && seen.status == Status::Ok {
            self.cache.insert(key, (seen.output.clone(), marks));
        }
        seen
    }

    /// The call's arguments with its reference filled in.
    fn resolve(&self, p: usize, out: &[Seen]) -> Map<String, Value> {
        let g = &self.calls[p];
        let mut args = self.plan.calls[p].args.value.clone();
        if let (Some(r), true) = (g.reference, args.contains_key("value")) {
            args.insert("value".into(), out[r].output.clone());
        }
        args
    }

    fn marks(&self, backends: &[String]) -> Vec<u64> {
        backends
            .iter()
            .map(|b| self.epochs.get(b).copied().unwrap_or(0))
            .collect()
    }

    /// The call cap, then the budget (a call refused by the budget gives its slot back).
    fn reserve(&mut self, cost: f64) -> Option<Seen> {
        if let Some(max) = self.plan.settings.max_calls {
            if self.calls_made >= u64::from(max) {
                return Some(Seen::never(ErrorKind::CallLimit));
            }
        }
        if let Some(max) = self.plan.settings.max_cost.filter(|_| cost > 0.0) {
            if self.spent + cost > max + 1e-9 {
                return Some(Seen::never(ErrorKind::BudgetExhausted));
            }
            self.spent += cost;
        }
        self.calls_made += 1;
        None
    }

    fn give_back(&mut self, cost: f64) {
        self.calls_made -= 1;
        if self.plan.settings.max_cost.is_some() && cost > 0.0 {
            self.spent -= cost;
        }
    }

    /// What the kv tool does: a failure changes nothing; a get reads, a put replaces.
    fn invoke(&mut self, p: usize, args: &Map<String, Value>) -> Seen {
        if self.calls[p].fail {
            return Seen::failed(Status::Error, ErrorKind::ToolError);
        }
        let key = args
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let tool = self.calls[p].tool;
        if tool == "get" || tool == "cget" {
            Seen::ok(self.kv.get(&key).cloned().unwrap_or(Value::Null), false)
        } else {
            let value = args.get("value").cloned().unwrap_or(Value::Null);
            Seen::ok(self.kv.insert(key, value).unwrap_or(Value::Null), false)
        }
    }
}
