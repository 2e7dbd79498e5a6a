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
use crate::run::store::BoxFuture;
use crate::template::Template;

/// `--approve`: answers given in advance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Approvals {
    /// Ask on the terminal when there is one, else refuse (or defer, with a journal).
    #[default]
    Ask,
    All,
    None,
    /// These tools and calls are approved; others are asked about.
    Some(Vec<Grant>),
}

/// One answer of a `--approve` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Every call to this tool.
    Tool(String),
    /// This call, only with the arguments whose [`approval_hash`] this is (`ID@HASH`, as
    /// `flux-tools approvals` shows it).
    Call { id: String, hash: String },
}

impl Approvals {
    /// The `ID@HASH` grants.
    pub fn calls(&self) -> Vec<(&str, &str)> {
        match self {
            Approvals::Some(g) => g
                .iter()
                .filter_map(|g| match g {
                    Grant::Call { id, hash } => Some((id.as_str(), hash.as_str())),
                    Grant::Tool(_) => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

const HASH_LEN: usize = 16;

/// What an approval is bound to: a SHA-256 of the tool and its resolved arguments (keys
/// sorted), its first 16 hex digits.
pub(crate) fn approval_hash(tool: &str, args: &Map<String, Value>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(tool.as_bytes());
    h.update([0u8]);
    h.update(crate::run::cache::canonical(&Value::Object(args.clone())).as_bytes());
    let mut hex = crate::run::cache::hex(&h.finalize());
    hex.truncate(HASH_LEN);
    hex
}

/// A question for whoever approves calls.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub id: String,
    pub tool: String,
    /// The resolved arguments the approval is for.
    pub args: Value,
}

/// What an approver decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    Approved,
    /// Refused, and why (`approval denied on the terminal`, …).
    Denied(String),
    /// Nobody to ask.
    Unanswered,
}

/// Answers approval questions that `--approve` did not answer in advance. The binary hands in
/// one that asks on the terminal; the gateway one that asks its client or parks the call;
/// tests hand in their own.
pub trait Approver: Send + Sync {
    /// Rule on `request`: asked one question at a time, in call order. The answer is a future
    /// that waits without holding a thread (an approver that must block, as a prompt on a
    /// terminal does, moves that to the blocking pool itself).
    fn ask(self: Arc<Self>, request: ApprovalRequest) -> BoxFuture<'static, Ruling>;
}

/// Nobody to ask: every question is unanswered.
pub(crate) struct NoApprover;

impl Approver for NoApprover {
    fn ask(self: Arc<Self>, _: ApprovalRequest) -> BoxFuture<'static, Ruling> {
        Box::pin(std::future::ready(Ruling::Unanswered))
    }
}

/// A question already answered: every ask gets this ruling at once (the gateway asks before
/// a call's run starts, so a call parked for approval holds no scheduler).
pub(crate) struct Answered(pub Ruling);

impl Approver for Answered {
    fn ask(self: Arc<Self>, _: ApprovalRequest) -> BoxFuture<'static, Ruling> {
        Box::pin(std::future::ready(self.0.clone()))
    }
}

/// One call waiting at the gate.
pub(crate) struct GateJob {
    pub pos: usize,
    pub id: String,
    pub tool: String,
    pub needs_approval: bool,
    pub args: Map<String, Value>,
    pub resolved: Option<Map<String, Value>>,
}

/// What the gate decided.
pub(crate) enum Verdict {
    Proceed {
        pos: usize,
        resolved: Option<Map<String, Value>>,
    },
    Refuse {
        pos: usize,
        kind: ErrorKind,
        why: String,
    },
    /// Nobody can approve it now and the run is journaled: it waits for a resumed run.
    Defer {
        pos: usize,
        args: Map<String, Value>,
        hash: String,
    },
}

/// Why an approval was not given.
enum NotApproved {
    /// Refused (`--approve none`, "n" on the terminal, arguments changed since approved).
    Denied(String),
    /// Nobody to ask.
    Unanswered,
}

/// Everything the gate needs.
pub(crate) struct Gate {
    /// `[hooks] hook_timeout`.
    pub hook_timeout: Duration,
    pub approvals: Approvals,
    pub approver: Arc<dyn Approver>,
    pub before_call: Option<Vec<Template>>,
    pub run_id: String,
    /// The run is journaled: a call nobody can approve now is deferred, not refused.
    pub defer: bool,
}

impl Gate {
    /// Handle jobs one at a time, in the order they arrive.
    pub(crate) async fn serve(
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
                Err(NotApproved::Unanswered) if self.defer => {
                    let hash = approval_hash(&job.tool, &job.args);
                    return Verdict::Defer {
                        pos,
                        args: job.args,
                        hash,
                    };
                }
                Err(NotApproved::Unanswered) => {
                    return Verdict::Refuse {
                        pos,
                        kind: ErrorKind::ApprovalDenied,
                        why: "approval required (no terminal to ask on; pass --approve, or --journal to pause for it)".into(),
                    }
                }
                Err(NotApproved::Denied(why)) => {
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

    async fn approve(&self, job: &GateJob) -> Result<(), NotApproved> {
        match &self.approvals {
            Approvals::All => return Ok(()),
            Approvals::None => {
                return Err(NotApproved::Denied(
                    "approval denied (--approve none)".into(),
                ))
            }
            Approvals::Some(grants) => {
                if let Some(answer) = granted(grants, job) {
                    return answer;
                }
            }
            Approvals::Ask => {}
        }
        let request = ApprovalRequest {
            id: job.id.clone(),
            tool: job.tool.clone(),
            args: Value::Object(job.args.clone()),
        };
        match self.approver.clone().ask(request).await {
            Ruling::Approved => Ok(()),
            Ruling::Denied(why) => Err(NotApproved::Denied(why)),
            Ruling::Unanswered => Err(NotApproved::Unanswered),
        }
    }
}

/// What `--approve` says of this call: its tool approved, or its id approved for arguments
/// that still hash the same (else refused: nobody approved these arguments). `None`: nothing.
fn granted(grants: &[Grant], job: &GateJob) -> Option<Result<(), NotApproved>> {
    for g in grants {
        match g {
            Grant::Tool(t) if *t == job.tool => return Some(Ok(())),
            Grant::Call { id, hash } if *id == job.id => {
                let now = approval_hash(&job.tool, &job.args);
                return Some(if now == *hash {
                    Ok(())
                } else {
                    Err(NotApproved::Denied(format!(
                        "approval denied: `{id}` was approved for arguments with hash {hash}, and its arguments now hash to {now}"
                    )))
                });
            }
            Grant::Tool(_) | Grant::Call { .. } => {}
        }
    }
    None
}

/// Run a hook with `input` as JSON on stdin, within `limit` from start to exit. Its stdin is
/// written from its own task and its stderr read while it runs, so a hook that reads neither
/// cannot block anything; past the limit its process group is killed. `Err` says why it
/// failed.
pub(crate) async fn run_hook(
    argv: &[Template],
    input: &Value,
    limit: Duration,
) -> Result<(), String> {
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
    let child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", argv[0].redacted()))?;
    let mut hook = Hook {
        pgid: child.id().and_then(|p| i32::try_from(p).ok()),
        child: Some(child),
    };
    if let Some(g) = hook.pgid {
        crate::tools::reaper::watch(g);
    }
    let Some(child) = hook.child.as_mut() else {
        return Err("hook not started".into());
    };
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
            hook.kill_group();
            if let Some(child) = hook.child.as_mut() {
                let _ = child.wait().await;
            }
            return Err(format!(
                "hook timed out after {}",
                crate::duration::format(limit)
            ));
        }
    };
    // Anything the hook left behind in its group goes with it.
    hook.kill_group();
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

/// A hook's process. Dropped before it was waited for (the gate aborted as a run or a turn
/// ends), its group is killed and it is reaped on a task of its own: left to tokio it would be
/// an orphan reaped on a SIGCHLD that never comes (the signal is blocked, see
/// `quiet_child_exits`), a zombie for the life of `mcp serve` or `run --turns`.
struct Hook {
    child: Option<tokio::process::Child>,
    pgid: Option<i32>,
}

impl Hook {
    fn kill_group(&self) {
        if let Some(g) = self.pgid {
            // SAFETY: kill(2) on the hook's own process group.
            unsafe {
                libc::kill(-g, libc::SIGKILL);
            }
            crate::tools::reaper::forget(g);
        }
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        self.kill_group();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = child.wait().await;
            });
        }
    }
}
