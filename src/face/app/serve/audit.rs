//! The audit trail (`mcp serve --audit PATH|-`): every decision the gateway makes about a
//! caller — a call allowed or refused and why, an approval asked and answered and by whom, a
//! token rejected and why (never the token) — as one JSON line, to a file (appended) or
//! stderr; and, when spans go to an OTLP endpoint, as an OpenTelemetry log record there too.
//!
//! Lines are written by a thread of their own from a queue of [`QUEUE`]: a slow disk or an
//! unread stderr never stalls a call. When the queue is full a line is dropped, and how many
//! were is said in an `audit.dropped` line as soon as one fits again.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::time::SystemTime;

use serde_json::{Map, Value};

use super::caller::Caller;

/// Lines waiting to be written, at most.
const QUEUE: usize = 65_536;

/// What happened (the `event` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A call (or resource read, prompt get) was let through to its lanes.
    CallAllowed,
    /// A call was refused before it ran: `reason` says why.
    CallRefused,
    /// A write cut off in flight was settled by its probe (`verify`): `tool`, `outcome`.
    CallSettled,
    /// A call waits for approval.
    ApprovalAsked,
    /// A waiting call was approved or denied: `decision`, `by`.
    ApprovalAnswered,
    /// A request's bearer token was not accepted: `reason`, `status`.
    TokenRejected,
    /// A request of the operations face (status, metrics, answers) was refused.
    OpsRefused,
    /// A served tool is held back: `tools.lock` does not pin its definition as it is now
    /// (`tool`, `from`, `was`, `now`, `change`).
    CatalogChanged,
    /// A held-back definition was approved and is served: `tool`, `hash`, `by`.
    CatalogApproved,
    /// A held-back definition was denied and stays held back: `tool`, `hash`, `by`.
    CatalogDenied,
    /// Lines were dropped while the queue was full: `count`.
    Dropped,
}

impl Event {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Event::CallAllowed => "call.allowed",
            Event::CallRefused => "call.refused",
            Event::CallSettled => "call.settled",
            Event::ApprovalAsked => "approval.asked",
            Event::ApprovalAnswered => "approval.answered",
            Event::TokenRejected => "token.rejected",
            Event::OpsRefused => "ops.refused",
            Event::CatalogChanged => "catalog.changed",
            Event::CatalogApproved => "catalog.approved",
            Event::CatalogDenied => "catalog.denied",
            Event::Dropped => "audit.dropped",
        }
    }
}

/// Where the trail goes.
#[derive(Default)]
pub(crate) struct Audit {
    lines: Option<SyncSender<String>>,
    logs: Option<tokio::sync::mpsc::Sender<Map<String, Value>>>,
    dropped: AtomicU64,
}

impl Audit {
    /// A trail to `to` (`-`: stderr; else a file, appended to) and, with `otlp` (as
    /// `--otlp` is kept: `Some(None)` for `OTEL_EXPORTER_OTLP_*`), to that collector's logs.
    pub(crate) fn open(to: Option<&Path>, otlp: Option<Option<String>>) -> Result<Audit, String> {
        let lines = match to {
            None => None,
            Some(p) => Some(writer(p)?),
        };
        let logs = otlp.map(super::audit_logs::start);
        Ok(Audit {
            lines,
            logs,
            dropped: AtomicU64::new(0),
        })
    }

    /// Whether anything is written (a caller may skip gathering what only the trail needs).
    pub(crate) fn on(&self) -> bool {
        self.lines.is_some() || self.logs.is_some()
    }

    /// Record `event` of `caller` with its own `fields`.
    pub(crate) fn record(&self, event: Event, caller: Option<&Caller>, fields: Value) {
        if !self.on() {
            return;
        }
        let mut line = Map::new();
        line.insert("time".into(), Value::String(now()));
        line.insert("event".into(), event.as_str().into());
        if let Some(c) = caller {
            line.insert("subject".into(), c.who().into());
            line.insert("tenant".into(), c.tenant.clone().into());
            line.insert("via".into(), c.via.as_str().into());
            if c.roles.is_some() {
                line.insert("roles".into(), c.role_names().into());
            }
        }
        if let Value::Object(more) = fields {
            line.extend(more);
        }
        if let Some(tx) = &self.lines {
            self.send(tx, &line);
        }
        if let Some(tx) = &self.logs {
            // A collector that lags loses log records, never a call's time.
            let _ = tx.try_send(line);
        }
    }

    fn send(&self, tx: &SyncSender<String>, line: &Map<String, Value>) {
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            let mut note = Map::new();
            note.insert("time".into(), Value::String(now()));
            note.insert("event".into(), Event::Dropped.as_str().into());
            note.insert("count".into(), dropped.into());
            if tx.try_send(Value::Object(note).to_string()).is_ok() {
                self.dropped.fetch_sub(dropped, Ordering::Relaxed);
            }
        }
        match tx.try_send(Value::Object(line.clone()).to_string()) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// RFC 3339 UTC, to the millisecond.
fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The writing thread's end of the queue: stderr for `-`, else the file at `path` — a new
/// one, or a regular file it appends to (a symlink, FIFO or device is refused, so the trail
/// never writes through to something else).
fn writer(path: &Path) -> Result<SyncSender<String>, String> {
    let mut out: Box<dyn Write + Send> = if path == Path::new("-") {
        Box::new(std::io::stderr())
    } else {
        Box::new(open_file(path)?)
    };
    let (tx, rx) = sync_channel::<String>(QUEUE);
    std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || {
            while let Ok(line) = rx.recv() {
                let _ = writeln!(out, "{line}");
                // Write what else waits before flushing once.
                while let Ok(more) = rx.try_recv() {
                    let _ = writeln!(out, "{more}");
                }
                let _ = out.flush();
            }
        })
        .map_err(|e| format!("cannot start the audit writer: {e}"))?;
    Ok(tx)
}

fn open_file(path: &Path) -> Result<std::fs::File, String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => {
            return Err(format!(
                "--audit {shown}: not a regular file (a symlink, FIFO or device is not written to)\nhint: name a new file, or - for stderr"
            ))
        }
        _ => {}
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("--audit {shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_or_fifo_is_not_an_audit_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = Audit::open(Some(&link), None).err().unwrap();
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "x");
    }

    #[test]
    fn each_decision_is_one_json_line_with_who_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = Audit::open(Some(&path), None).unwrap();
        let caller = Caller {
            tenant: "acme".into(),
            subject: Some("alice".into()),
            roles: Some(vec!["reader".to_string()].into()),
            via: super::super::caller::Via::Jwt,
            behalf: None,
        };
        let why = serde_json::json!({"tool": "delete_repo", "reason": "unknown tool"});
        audit.record(Event::CallRefused, Some(&caller), why);
        drop(audit);
        let mut text = String::new();
        for _ in 0..100 {
            text = std::fs::read_to_string(&path).unwrap();
            if text.ends_with('\n') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["event"], "call.refused");
        assert_eq!(line["subject"], "alice");
        assert_eq!(line["tenant"], "acme");
        assert_eq!(line["via"], "jwt");
        assert_eq!(line["roles"], serde_json::json!(["reader"]));
        assert_eq!(line["tool"], "delete_repo");
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
    }
}
