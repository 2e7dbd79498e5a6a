//! The serial, call-ordered steps that may wait on the outside world before a call is
//! dispatched — approval (`requires_approval`) and the `before_call` hook — and the
//! `after_call` hook as results are merged in call order.
//!
//! The coordinator hands ready calls to the gate in call order; the gate handles them one at a
//! time (a human deciding sees one question at a time, in the order the model asked) and
//! answers each with a [`Verdict`]. Other calls keep running meanwhile: only the gated call
//! waits. Approvals come from `--approve all|none|TOOL,...`, else from the [`Approver`] the
//! caller handed in (the binary's asks on the terminal), else the call is refused ("approval
//! required"). Nothing here opens a terminal or prints.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::events::ErrorKind;
use crate::template::Template;

/// `--approve`: answers given in advance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Approvals {
    /// Ask on the terminal when there is one, else refuse.
    #[default]
    Ask,
    All,
    None,
    /// These tools are approved; others are asked about.
    Tools(Vec<String>),
}

impl Approvals {
    /// `--approve`: `all`, `none` or a comma-separated list of tools (clap's value parser).
    pub fn parse(s: &str) -> Result<Approvals, String> {
        Ok(match s {
            "all" => Approvals::All,
            "none" => Approvals::None,
            list => {
                let tools: Vec<String> = list
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
                if tools.is_empty() {
                    return Err("use all, none or a comma-separated list of tools".into());
                }
                Approvals::Tools(tools)
            }
        })
    }
}

/// A question for whoever approves calls.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub id: String,
    pub tool: String,
    /// The resolved arguments the approval is for.
    pub args: Value,
}

/// Answers approval questions that `--approve` did not answer in advance. The binary hands in
/// one that asks on the terminal; tests hand in their own.
pub trait Approver: Send + Sync {
    /// `Some(true)` to run the call, `Some(false)` to refuse it, `None` when there is nobody
    /// to ask. Called on a blocking thread, one question at a time, in call order.
    fn ask(&self, request: &ApprovalRequest) -> Option<bool>;
}

/// Nobody to ask: every question is unanswered.
pub struct NoApprover;

impl Approver for NoApprover {
    fn ask(&self, _: &ApprovalRequest) -> Option<bool> {
        None
    }
}

/// One call waiting at the gate.
pub struct GateJob {
    pub pos: usize,
    pub id: String,
    pub tool: String,
    pub needs_approval: bool,
    pub args: Map<String, Value>,
    pub resolved: Option<Map<String, Value>>,
}

/// What the gate decided.
pub enum Verdict {
    Proceed {
        pos: usize,
        resolved: Option<Map<String, Value>>,
    },
    Refuse {
        pos: usize,
        kind: ErrorKind,
        why: String,
    },
}

/// Everything the gate needs.
pub struct Gate {
    /// `[hooks] hook_timeout`.
    pub hook_timeout: Duration,
    pub approvals: Approvals,
    pub approver: Arc<dyn Approver>,
    pub before_call: Option<Vec<Template>>,
    pub run_id: String,
}

impl Gate {
    /// Handle jobs one at a time, in the order they arrive.
    pub async fn serve(
        self,
        mut jobs: mpsc::UnboundedReceiver<GateJob>,
        verdicts: mpsc::UnboundedSender<Verdict>,
    ) {
        while let Some(job) = jobs.recv().await {
            let v = self.judge(job).await;
            if verdicts.send(v).is_err() {
                break;
            }
        }
    }

    async fn judge(&self, job: GateJob) -> Verdict {
        let pos = job.pos;
        if job.needs_approval {
            match self.approve(&job).await {
                Ok(()) => {}
                Err(why) => {
                    return Verdict::Refuse {
                        pos,
                        kind: ErrorKind::ApprovalDenied,
                        why,
                    }
                }
            }
        }
        if let Some(argv) = &self.before_call {
            let input = json!({"run_id": self.run_id, "call": {"index": job.pos, "id": job.id, "tool": job.tool, "args": job.args}});
            if let Err(e) = run_hook(argv, &input, self.hook_timeout).await {
                return Verdict::Refuse {
                    pos,
                    kind: ErrorKind::Guardrail,
                    why: format!("the before_call hook refused: {e}"),
                };
            }
        }
        Verdict::Proceed {
            pos,
            resolved: job.resolved,
        }
    }

    async fn approve(&self, job: &GateJob) -> Result<(), String> {
        match &self.approvals {
            Approvals::All => return Ok(()),
            Approvals::None => return Err("approval denied (--approve none)".into()),
            Approvals::Tools(t) if t.contains(&job.tool) => return Ok(()),
            _ => {}
        }
        let request = ApprovalRequest {
            id: job.id.clone(),
            tool: job.tool.clone(),
            args: Value::Object(job.args.clone()),
        };
        let approver = self.approver.clone();
        let answer = tokio::task::spawn_blocking(move || approver.ask(&request))
            .await
            .map_err(|e| e.to_string())?;
        match answer {
            Some(true) => Ok(()),
            Some(false) => Err("approval denied on the terminal".into()),
            None => Err("approval required (no terminal to ask on; pass --approve)".into()),
        }
    }
}

/// Run a hook with `input` as JSON on stdin, within `limit` from start to exit. Its stdin is
/// written from its own task and its stderr read while it runs, so a hook that reads neither
/// cannot block anything; past the limit its process group is killed. `Err` says why it
/// failed.
pub async fn run_hook(argv: &[Template], input: &Value, limit: Duration) -> Result<(), String> {
    let no_args = Map::new();
    let mut parts = Vec::with_capacity(argv.len());
    for t in argv {
        parts.push(
            t.render(&no_args, &|s| s.to_string())
                .map_err(|e| e.to_string())?,
        );
    }
    let Some((program, rest)) = parts.split_first() else {
        return Err("empty hook".into());
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", argv[0].redacted()))?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    if let Some(mut stdin) = child.stdin.take() {
        let body = serde_json::to_vec(input).unwrap_or_default();
        // A hook need not read its input: a full pipe must not hold the gate.
        tokio::spawn(async move {
            let _ = stdin.write_all(&body).await;
        });
    }
    let stderr = child.stderr.take().map(|mut err| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut err).take(4096).read_to_end(&mut buf).await;
            // Drain the rest so the hook never blocks writing to stderr.
            let _ = tokio::io::copy(&mut err, &mut tokio::io::sink()).await;
            buf
        })
    });
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => {
            if let Some(g) = pgid {
                // SAFETY: kill(2) on the hook's own process group.
                unsafe {
                    libc::kill(-g, libc::SIGKILL);
                }
            }
            let _ = child.wait().await;
            return Err(format!(
                "hook timed out after {}",
                crate::duration::format(limit)
            ));
        }
    };
    if let Some(g) = pgid {
        // Anything the hook left behind in its group goes with it.
        // SAFETY: kill(2) on the hook's own process group, which has exited.
        unsafe {
            libc::kill(-g, libc::SIGKILL);
        }
    }
    if status.success() {
        return Ok(());
    }
    let tail = match stderr {
        Some(t) => match tokio::time::timeout(Duration::from_millis(500), t).await {
            Ok(Ok(buf)) => String::from_utf8_lossy(&buf).trim().to_string(),
            _ => String::new(),
        },
        None => String::new(),
    };
    let code = status
        .code()
        .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
    Err(if tail.is_empty() {
        format!("exit {code}")
    } else {
        format!("exit {code}: {tail}")
    })
}
