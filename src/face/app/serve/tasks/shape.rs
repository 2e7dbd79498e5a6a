//! What a task is, kept and shown: its record in the store (status, what it says, its
//! result, whose it is, the call itself), and the shapes clients see — a `2025-11-25`
//! task (`wire`), the tasks extension's `DetailedTask` (`detailed`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::super::caller::{Caller, Via};
use super::POLL_MS;

/// A task's status, as the protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

/// What the store keeps of a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    pub id: String,
    pub owner: String,
    pub tenant: String,
    pub subject: Option<String>,
    pub roles: Option<Vec<String>>,
    pub jwt: bool,
    pub tool: String,
    pub args: Map<String, Value>,
    pub status: Status,
    pub message: Option<String>,
    pub created: String,
    pub updated: String,
    /// How long it is kept (ms).
    pub ttl: u64,
    /// Its call reached its tool (a replica that dies after this may have made it).
    pub started: bool,
    /// The call's `CallToolResult`, once it ended.
    pub result: Option<Value>,
}

/// Unix milliseconds now.
pub(super) fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_millis() as f64)
}

pub(super) fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The record that says task `id` was cancelled.
pub(super) fn mark_of(id: &str) -> String {
    format!("cancelled\u{0}{id}")
}

/// The record of an owner's tasks (an index: one counter per task id).
pub(super) fn index_of(owner: &str) -> String {
    format!("tasks-of\u{0}{owner}")
}

/// A task as the protocol shows it.
pub(super) fn wire(r: &Record) -> Value {
    let mut t = json!({
        "taskId": r.id,
        "status": r.status,
        "createdAt": r.created,
        "lastUpdatedAt": r.updated,
        "ttl": r.ttl,
        "pollInterval": POLL_MS,
    });
    if let Some(m) = &r.message {
        t["statusMessage"] = m.clone().into();
    }
    t
}

/// A task as the tasks extension shows it (`tasks/get`): a tool's failure is a completed
/// task whose result says `isError`.
pub(super) fn detailed(r: &Record) -> rmcp::model::DetailedTask {
    use rmcp::model::{DetailedTask, Task, TaskPayload};
    let result = r.result.as_ref().and_then(Value::as_object).cloned();
    let payload = match (r.status, result) {
        (Status::Cancelled, _) => TaskPayload::Cancelled,
        (Status::Completed | Status::Failed, Some(result)) => TaskPayload::Completed { result },
        _ => TaskPayload::Working,
    };
    let mut task = Task::new(
        r.id.clone(),
        payload.status(),
        r.created.clone(),
        r.updated.clone(),
    )
    .with_ttl_ms(r.ttl)
    .with_poll_interval_ms(POLL_MS);
    if let Some(m) = &r.message {
        task = task.with_status_message(m.clone());
    }
    DetailedTask::new(task, payload)
}

/// The caller a task was started by (to run it again on another replica).
pub(super) fn caller_of(r: &Record) -> Caller {
    Caller {
        tenant: r.tenant.clone(),
        subject: r.subject.clone(),
        roles: r.roles.clone().map(Arc::from),
        via: if r.jwt {
            Via::Jwt
        } else if r.roles.is_some() {
            Via::Token
        } else {
            Via::Local
        },
        // A caller's token is never kept with its task: an upstream that carries the
        // caller's identity refuses the task when another replica takes it over.
        behalf: None,
    }
}

/// The first text of a `CallToolResult`.
pub(super) fn first_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(500)
        .collect()
}

/// A task id: 128 random bits (what keeps a task from others is its owner, not its id).
pub(super) fn task_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}
