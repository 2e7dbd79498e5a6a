//! Approval questions asked on the controlling terminal (`/dev/tty`), so they reach a person
//! even when stdin and stdout are pipes.

use std::io::{BufRead, Write};

use serde_json::Value;

use crate::run::{ApprovalRequest, Approver};

/// Asks on `/dev/tty`; no terminal means no answer.
pub(super) struct TerminalApprover;

impl Approver for TerminalApprover {
    fn ask(&self, request: &ApprovalRequest) -> Option<bool> {
        let question = format!(
            "approve call `{}` to `{}` with arguments {}? [y/N] ",
            request.id,
            request.tool,
            Value::to_string(&request.args)
        );
        let answer = crate::report::progress::suspend(|| ask_terminal(&question))?;
        Some(matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "y" | "yes"
        ))
    }
}

/// Ask on the controlling terminal; `None` when there is none.
fn ask_terminal(question: &str) -> Option<String> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut out = tty.try_clone().ok()?;
    out.write_all(question.as_bytes()).ok()?;
    out.flush().ok()?;
    let mut line = String::new();
    std::io::BufReader::new(tty).read_line(&mut line).ok()?;
    Some(line)
}
