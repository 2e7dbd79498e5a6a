//! The gate (approvals and the `before_call` hook, serially in call order), calls deferred
//! for an approval nobody can give now, and the `after_call` hook (fed results in call order
//! as they settle).

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::state::Coordinator;
use super::RunConfig;
use crate::events::ErrorKind;
use crate::run::call::never_dispatched;
use crate::run::gate::{self, Gate, Verdict};

impl Coordinator {
    /// Start the gate when any call may need it; its verdicts come back on the receiver.
    pub(super) fn start_gate(
        &mut self,
        config: &RunConfig,
    ) -> (Option<JoinHandle<()>>, mpsc::UnboundedReceiver<Verdict>) {
        let (verdict_tx, verdict_rx) = mpsc::unbounded_channel::<Verdict>();
        let needs_gate = self.manifest.hooks.before_call.is_some()
            || self.manifest.tools.iter().any(|t| t.requires_approval);
        let task = needs_gate.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.gate_tx = Some(tx);
            let gate = Gate {
                hook_timeout: self.manifest.hooks.timeout,
                approvals: config.approvals.clone(),
                approver: config.approver.clone(),
                before_call: self.manifest.hooks.before_call.clone(),
                run_id: config.run_id.clone(),
                defer: config.journal.is_some(),
            };
            tokio::spawn(gate.serve(rx, verdict_tx))
        });
        (task, verdict_rx)
    }

    /// A call nobody can approve now, in a journaled run: the journal records what it waits
    /// for (its resolved arguments and their hash), and it and whatever depends on it wait
    /// for a resumed run.
    pub(super) fn defer(&mut self, p: usize, args: Map<String, Value>, hash: String) {
        let call = &self.plan.calls[p];
        if let Some(j) = &self.journal {
            j.record(json!({
                "type": "awaiting_approval", "index": p, "id": call.id, "tool": call.tool_name,
                "args": args, "hash": hash,
            }));
        }
        let why = format!(
            "awaiting approval: resume with --resume JOURNAL --approve {}@{hash} (`flux-tools approvals JOURNAL` lists what waits)",
            call.id
        );
        let phase = call.phase;
        self.paused_phase = Some(self.paused_phase.map_or(phase, |q| q.min(phase)));
        let r = never_dispatched(&self.plan, p, ErrorKind::AwaitingApproval, &why);
        self.finish(p, r);
    }

    /// Start the `after_call` hook's feeder, if the manifest has one.
    pub(super) fn start_after_hook(&mut self) -> Option<JoinHandle<()>> {
        let argv = self.manifest.hooks.after_call.clone()?;
        let limit = self.manifest.hooks.timeout;
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        self.after_tx = Some(tx);
        Some(tokio::spawn(async move {
            // An observer: its failures never change a result.
            while let Some(input) = rx.recv().await {
                let _ = gate::run_hook(&argv, &input, limit).await;
            }
        }))
    }

    /// Hand every result that now follows its predecessors to the after_call hook.
    pub(super) fn feed_after_hook(&mut self) {
        let Some(tx) = &self.after_tx else { return };
        while let Some(Some(r)) = self.results.get(self.after_next) {
            let c = &self.plan.calls[self.after_next];
            let _ = tx.send(serde_json::json!({
                "run_id": self.run.run_id,
                "call": {"index": c.index, "id": c.id, "tool": c.tool_name},
                "result": r,
            }));
            self.after_next += 1;
        }
    }
}
