//! `flux-tools approvals JOURNAL`: the calls a paused run left waiting for an approval, with
//! what to pass to approve each one.

use crate::events::Awaiting;

/// One block per call: its id, tool, resolved arguments and the `--approve` that runs it.
pub(crate) fn to_text(journal: &str, run_id: &str, waiting: &[Awaiting]) -> String {
    if waiting.is_empty() {
        return format!("no call awaits approval in {journal} (run {run_id})\n");
    }
    let mut out = format!(
        "{} in {journal} (run {run_id}):\n",
        match waiting.len() {
            1 => "1 call awaits approval".to_string(),
            n => format!("{n} calls await approval"),
        }
    );
    for a in waiting {
        out.push_str(&format!(
            "\n  {} → {}\n    arguments: {}\n    approve:   --approve {}@{}\n",
            a.id, a.tool, a.args, a.id, a.hash
        ));
    }
    let all: Vec<String> = waiting
        .iter()
        .map(|a| format!("{}@{}", a.id, a.hash))
        .collect();
    out.push_str(&format!(
        "\nresume: flux-tools run BATCH --resume {journal} --approve {}\n",
        all.join(",")
    ));
    out
}

/// The calls `mcp serve` holds for approval out of band (`left`: how long each may still
/// wait), with the command that approves each.
pub(crate) fn parked_to_text(
    manifest: &str,
    waiting: &[Awaiting],
    left: &[(std::time::Duration, bool, String)],
) -> String {
    if waiting.is_empty() {
        return format!("no call of mcp serve awaits approval (manifest {manifest})\n");
    }
    let mut out = format!(
        "{} of mcp serve (manifest {manifest}):\n",
        match waiting.len() {
            1 => "1 call awaits approval".to_string(),
            n => format!("{n} calls await approval"),
        }
    );
    for (a, (left, orphaned, who)) in waiting.iter().zip(left) {
        out.push_str(&format!(
            "\n  {} → {}\n    asked by:  {who}\n    arguments: {}\n    approve:   flux-tools approve {}@{}\n    deny:      flux-tools deny {}\n    refused in {} unless approved\n",
            a.id,
            a.tool,
            a.args,
            a.id,
            a.hash,
            a.id,
            crate::duration::format(*left)
        ));
        if *orphaned {
            out.push_str("    its gateway stopped: the answer goes to the client's retry of this call, through any gateway\n");
        }
    }
    out
}

/// The tools `tools.lock` holds back at `mcp serve`, each as (`tool:NAME@HASH`, where it comes
/// from, what changed): what a reviewer reads, and how to answer (nothing when none is).
pub(crate) fn held_to_text(held: &[(String, String, String)]) -> String {
    if held.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n{} held back by tools.lock (not listed, a call answered as unknown):\n",
        crate::report::summary::plural(held.len(), "tool")
    );
    for (handle, from, change) in held {
        let name = handle.trim_start_matches("tool:");
        let name = name.rsplit_once('@').map_or(name, |(n, _)| n);
        out.push_str(&format!("\n  {name} (from {from})\n"));
        for line in change.lines() {
            out.push_str(&format!("    {line}\n"));
        }
        out.push_str(&format!(
            "    approve:   flux-tools approve {handle}\n    deny:      flux-tools deny {handle}\n"
        ));
    }
    out
}

/// `[{index, id, tool, args, hash}]`.
pub(crate) fn to_json(waiting: &[Awaiting]) -> String {
    serde_json::to_string(waiting).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_call_shows_how_to_approve_it() {
        let w = vec![Awaiting {
            index: 2,
            id: "pay-1".into(),
            tool: "pay".into(),
            args: json!({"amount": 120}),
            hash: "0123456789abcdef".into(),
        }];
        let text = to_text("j.jsonl", "run-1", &w);
        assert!(text.starts_with("1 call awaits approval in j.jsonl (run run-1):"));
        assert!(text.contains("pay-1 → pay"));
        assert!(text.contains(r#"arguments: {"amount":120}"#));
        assert!(text.contains("--approve pay-1@0123456789abcdef"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&to_json(&w)).unwrap()[0]["hash"],
            "0123456789abcdef"
        );
        assert!(to_text("j", "r", &[]).starts_with("no call awaits approval"));
    }
}
