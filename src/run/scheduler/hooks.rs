//! The gate (approvals and the `before_call` hook, serially in call order) and the
//! `after_call` hook (fed results in call order as they settle).

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::state::Coordinator;
use super::RunConfig;
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
            };
            tokio::spawn(gate.serve(rx, verdict_tx))
        });
        (task, verdict_rx)
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
