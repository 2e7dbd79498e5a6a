//! The status page at `/` for the person on call: lanes (limit, in flight, who waits by
//! session and tenant), the last calls, spend per tenant and the calls waiting for approval,
//! with Approve / Deny. The page (`status.html`: HTML, CSS and a little JavaScript in the
//! binary, nothing fetched from elsewhere) carries no data; it reads `/status/events`, a
//! stream of one JSON snapshot a second in the event-stream format, with the bearer token the
//! person types (when the manifest has `[serve.tokens]` or `[serve.auth]`). An answer is a
//! `POST /status/answer` that needs `[serve] admin_token` or a role with `approve`, the header `X-Flux-Tools: answer` (a form
//! another site posts cannot set it, and a cross-site script that sets it is stopped by the
//! browser's preflight, which the gateway never grants) and, if the browser sends an `Origin`,
//! this gateway's own.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{json, Value};

use super::caller::Caller;
use crate::app::parked::{Decision, Waiting};
use crate::events::{CallResult, ErrorKind, Status};
use crate::run::store::Occupancy;

/// The page itself.
pub(super) const PAGE: &str = include_str!("status.html");

/// How many of the last calls the page shows.
const RECENT: usize = 50;

/// One finished call, as the page lists it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Recent {
    pub at: String,
    pub tool: String,
    pub tenant: String,
    /// Who made it, when its caller named a subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub session: u64,
    pub status: Status,
    /// What kind of failure (none when it succeeded).
    pub kind: Option<ErrorKind>,
    pub duration_ms: Option<u64>,
    pub queued_ms: Option<u64>,
    /// A cut-off write its probe settled (`verify`): what it found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<crate::events::Settled>,
}

/// What the page is told besides the lanes and approvals.
#[derive(Default)]
pub(super) struct Log {
    recent: Mutex<VecDeque<Recent>>,
    spent: Mutex<BTreeMap<String, f64>>,
}

impl Log {
    pub(super) fn record(&self, (caller, session): (&Caller, u64), r: &CallResult, cost: f64) {
        let tenant = caller.tenant.as_str();
        let entry = Recent {
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            tool: r.tool.clone(),
            tenant: tenant.to_string(),
            subject: caller.subject.clone(),
            session,
            status: r.status,
            kind: r.error.as_ref().map(|e| e.kind),
            duration_ms: r.duration_ms,
            queued_ms: r.queued_ms,
            settled: r.settled,
        };
        if let Ok(mut q) = self.recent.lock() {
            q.push_front(entry);
            q.truncate(RECENT);
        }
        if r.attempts > 0 && !r.cached && cost > 0.0 {
            if let Ok(mut s) = self.spent.lock() {
                *s.entry(tenant.to_string()).or_default() += cost;
            }
        }
    }

    /// One snapshot for the page: everything, or (`only`) what one tenant may see — its own
    /// waiters, calls, spend and approvals, and no other tenant's lane.
    pub(super) fn snapshot(
        &self,
        lanes: &[Occupancy],
        approvals: &[Waiting],
        only: Option<&str>,
    ) -> Value {
        let mine = |t: &str| only.is_none_or(|o| o == t);
        let lanes: Vec<Value> = lanes
            .iter()
            .filter(|l| {
                let tenant = l.lane.strip_prefix("tenant:").map(|t| t.trim_end_matches(" (batch)"));
                tenant.is_none_or(mine)
            })
            .map(|l| {
                let queue: Vec<Value> = l
                    .queue
                    .iter()
                    .filter(|(_, tenant, _)| mine(tenant))
                    .map(|(flow, tenant, n)| json!({"session": flow, "tenant": tenant, "waiting": n}))
                    .collect();
                let learned = l.learned.map(|m| json!({"from": m.from, "to": m.to, "why": m.why.as_str()}));
                json!({"lane": l.lane, "limit": l.limit, "learned": learned, "in_flight": l.held, "waiting": l.waiting, "queue": queue})
            })
            .collect();
        let recent: Vec<Recent> = self
            .recent
            .lock()
            .map(|q| q.iter().filter(|r| mine(&r.tenant)).cloned().collect())
            .unwrap_or_default();
        let mut spent = self.spent.lock().map(|s| s.clone()).unwrap_or_default();
        spent.retain(|t, _| mine(t));
        let approvals: Vec<&Waiting> = approvals.iter().filter(|w| mine(&w.tenant)).collect();
        json!({"lanes": lanes, "recent": recent, "spent": spent, "approvals": approvals})
    }
}

/// The tools `tools.lock` holds back, as the page lists them beside the parked calls (a tenant's
/// view has none: a definition is everyone's).
pub(super) fn held(held: &[crate::app::review::HeldTool]) -> Value {
    let items = held.iter().map(|h| {
        let hash = crate::app::review::short(&h.now.hash);
        json!({"id": format!("tool:{}", h.now.name), "hash": hash, "tool": h.now.name, "from": h.now.from, "change": h.change})
    });
    Value::Array(items.collect())
}

/// What an answer from the page asks: the call, its hash, approve or deny.
pub(super) fn parse_answer(body: &[u8]) -> Result<(String, String, Decision), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let text = |k: &str| {
        v[k].as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("`{k}` is missing"))
    };
    let decision = match v["decision"].as_str() {
        Some("approve") => Decision::Approve,
        Some("deny") => Decision::Deny,
        _ => return Err("`decision` is approve or deny".into()),
    };
    Ok((text("id")?, text("hash")?, decision))
}

/// Whether a page request may answer: the header only a script of the page sets, and no
/// `Origin` other than this gateway's (`host` is the request's `Host`).
pub(super) fn same_site(headers: &http::HeaderMap, host: &str) -> bool {
    let marked = headers.get("x-flux-tools").is_some_and(|v| v == "answer");
    let origin = headers
        .get(http::header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    let ours = origin.is_none_or(|o| {
        o.strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    });
    marked && ours
}
