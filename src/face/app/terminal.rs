//! Approval questions asked on the controlling terminal (`/dev/tty`), so they reach a person
//! even when stdin and stdout are pipes.

use std::io::{BufRead, Write};

use serde_json::Value;

use std::sync::Arc;

use crate::run::store::BoxFuture;
use crate::run::{ApprovalRequest, Approver, Ruling};

/// Asks on `/dev/tty`; no terminal means no answer.
pub(super) struct TerminalApprover;

impl Approver for TerminalApprover {
    fn ask(self: Arc<Self>, request: ApprovalRequest) -> BoxFuture<'static, Ruling> {
        // A prompt blocks until the person answers: on a thread of its own (questions come
        // one at a time), never a runtime thread or the runtime's blocking pool.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let asked = std::thread::Builder::new()
            .name("approve".into())
            .spawn(move || {
                let _ = tx.send(rule(&request));
            });
        Box::pin(async move {
            match asked {
                Ok(_) => rx.await.unwrap_or(Ruling::Unanswered),
                Err(_) => Ruling::Unanswered,
            }
        })
    }
}

/// Ask on the terminal: `y` approves, anything else refuses; no terminal, no answer.
fn rule(request: &ApprovalRequest) -> Ruling {
    let question = format!(
        "approve call `{}` to `{}` with arguments {}? [y/N] ",
        request.id,
        request.tool,
        Value::to_string(&request.args)
    );
    let Some(answer) = crate::report::progress::suspend(|| ask_terminal(&question)) else {
        return Ruling::Unanswered;
    };
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ruling::Approved
    } else {
        Ruling::Denied("approval denied on the terminal".into())
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
