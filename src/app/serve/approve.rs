//! Approval of a served call that needs it: asked through the client (MCP elicitation) when
//! the manifest allows in-band approval (`[serve] approval_in_band = true`), the tool is not
//! `approval = "out_of_band"` and the client can be asked; else — and when the client cannot
//! answer — parked out of band for `flux-tools approve ID@HASH` from another terminal. A call
//! that nobody approves by its deadline (`[serve] approval_timeout`, 10 minutes) is refused
//! `approval_denied`, as is one declined either way. The client's cancellation ends the wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::app::parked::{Decision, Parked, Waiting};
use crate::run::{ApprovalRequest, Approver};

/// How long a parked call waits unless the manifest says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a parked call looks for its answer, and says it still waits.
const POLL: Duration = Duration::from_millis(100);
const RENEW: Duration = Duration::from_secs(1);

/// What a client answered an elicitation with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InBand {
    Accept,
    Decline,
    Cancel,
}

/// Ask the client (its message); `Err`: it could not be asked.
pub type Elicit = Arc<dyn Fn(String) -> Asking + Send + Sync>;

/// A question to the client, under way.
pub type Asking =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InBand, String>> + Send>>;

/// The approver of one served call.
pub struct CallApprover {
    pub handle: tokio::runtime::Handle,
    /// The client, when it may be asked.
    pub in_band: Option<Elicit>,
    pub parked: Option<Arc<Parked>>,
    /// The parked call's id (`PID-SEQ`) and how long it may wait.
    pub id: String,
    /// The tenant the call came from.
    pub tenant: String,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    why: Mutex<String>,
}

impl CallApprover {
    pub fn new(
        handle: tokio::runtime::Handle,
        (in_band, parked): (Option<Elicit>, Option<Arc<Parked>>),
        (id, tenant): (String, String),
        timeout: Duration,
        cancel: CancellationToken,
    ) -> CallApprover {
        CallApprover {
            handle,
            in_band,
            parked,
            id,
            tenant,
            timeout,
            cancel,
            why: Mutex::default(),
        }
    }

    fn refuse(&self, why: String) -> Option<bool> {
        if let Ok(mut w) = self.why.lock() {
            *w = why;
        }
        Some(false)
    }

    async fn decide(&self, req: &ApprovalRequest) -> Option<bool> {
        let hash = crate::run::gate::approval_hash(&req.tool, req.args.as_object()?);
        if let Some(elicit) = &self.in_band {
            let message = format!(
                "flux-tools: approve the call of `{}` with arguments {} (hash {hash})?",
                req.tool, req.args
            );
            match elicit(message).await {
                Ok(InBand::Accept) => return Some(true),
                Ok(InBand::Decline) => {
                    return self.refuse("approval denied: declined through the client".into())
                }
                Ok(InBand::Cancel) => {
                    return self.refuse("approval denied: dismissed through the client".into())
                }
                // The client could not answer: ask out of band instead.
                Err(_) => {}
            }
        }
        self.out_of_band(req, hash).await
    }

    async fn out_of_band(&self, req: &ApprovalRequest, hash: String) -> Option<bool> {
        let Some(parked) = &self.parked else {
            return self.refuse("approval required, and there is nowhere to park the call".into());
        };
        let now = crate::app::parked::unix_now();
        let waiting = Waiting {
            id: self.id.clone(),
            tool: req.tool.clone(),
            args: req.args.clone(),
            hash: hash.clone(),
            pid: std::process::id(),
            tenant: self.tenant.clone(),
            orphaned: false,
            since: now,
            until: now + self.timeout.as_secs_f64(),
            seen: now,
        };
        let mut place = match parked.adopt(&waiting).await {
            Some(p) => {
                eprintln!(
                    "flux-tools mcp serve: call `{}` of `{}`, parked by a gateway that stopped, is taken over here by the client's retry",
                    p.waiting().id, req.tool
                );
                p
            }
            None => match parked.park(waiting).await {
                Ok(p) => p,
                Err(e) => {
                    return self.refuse(format!(
                        "approval required, and the call could not be parked: {e}"
                    ))
                }
            },
        };
        let id = place.waiting().id.clone();
        eprintln!(
            "flux-tools mcp serve: call `{id}` of `{}` waits for approval: flux-tools approve {id}@{hash}",
            req.tool
        );
        let left = (place.waiting().until - now).max(0.0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(left);
        let mut renewed = tokio::time::Instant::now();
        loop {
            if renewed.elapsed() >= RENEW {
                place.renew().await;
                renewed = tokio::time::Instant::now();
            }
            match place.decision().await {
                Some(Decision::Approve) => return Some(true),
                Some(Decision::Deny) => {
                    return self.refuse("approval denied out of band (flux-tools deny)".into())
                }
                None => {}
            }
            if tokio::time::Instant::now() >= deadline {
                let t = crate::duration::format(self.timeout);
                return self.refuse(format!("approval denied: nobody approved it within {t}"));
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = self.cancel.cancelled() => {
                    return self.refuse("approval denied: the client cancelled the call".into())
                }
            }
        }
    }
}

impl Approver for CallApprover {
    fn ask(&self, request: &ApprovalRequest) -> Option<bool> {
        // On the gate's blocking thread: the wait runs on the gateway's runtime.
        self.handle.block_on(self.decide(request))
    }

    fn refusal(&self, _: &ApprovalRequest) -> String {
        self.why.lock().map(|w| w.clone()).unwrap_or_default()
    }
}
