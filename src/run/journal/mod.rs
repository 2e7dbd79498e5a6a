//! The write-ahead journal (`--journal FILE`) and resuming from it (`--resume FILE`).
//!
//! Append-only JSON lines, written from one place (a thread that owns the file) and fsynced at
//! each record. A call's `dispatch` record is on disk *before* its tool is invoked (the call
//! waits for the acknowledgement), and its `result` record after; both carry the call id and
//! the fingerprint of its tool and resolved arguments, so a resumed, edited batch never
//! mistakes one call for another. On resume: a call with a recorded result keeps it (nothing is
//! invoked), a call never dispatched runs, an idempotent call that was in flight runs again,
//! and a non-idempotent call that was in flight is `indeterminate` — unless
//! `--retry-indeterminate`, which sends it again with the same idempotency key (the run id is
//! the journal's). A call deferred for an approval has an `awaiting_approval` record (its
//! resolved arguments and their hash) until a later run settles it.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::Path;

use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::events::{Awaiting, CallResult};

/// A stable fingerprint of a call: its tool, how the tool is invoked (`target`, secrets as
/// `***`) and its resolved arguments.
pub(crate) fn fingerprint(
    tool: &str,
    target: &str,
    args: &serde_json::Map<String, Value>,
) -> String {
    let text = format!(
        "{tool}\u{0}{target}\u{0}{}",
        serde_json::to_string(args).unwrap_or_default()
    );
    crate::hash::fnv_hex(text.as_bytes())
}

mod shared;

pub(crate) use shared::open_shared;

enum Msg {
    Line(String, Option<oneshot::Sender<Result<(), String>>>),
}

/// Where journal records go: a file, or a list in Redis.
pub(crate) trait Sink: Send + 'static {
    /// Append one record, durably.
    fn append(&mut self, line: &str) -> Result<(), String>;
    /// How often [`Sink::idle`] wants to run (a lease to renew), if at all.
    fn tick(&self) -> Option<std::time::Duration> {
        None
    }
    fn idle(&mut self) {}
    /// The run is over: nothing more is written.
    fn close(&mut self) {}
}

/// A journal file: each record appended and fsynced.
struct FileSink(std::fs::File);

impl Sink for FileSink {
    fn append(&mut self, line: &str) -> Result<(), String> {
        self.0
            .write_all(line.as_bytes())
            .and_then(|_| self.0.write_all(b"\n"))
            .and_then(|_| self.0.sync_data())
            .map_err(|e| format!("journal write failed: {e}"))
    }
}

/// The journal writer: a thread that owns the sink.
#[derive(Clone)]
pub struct Journal {
    tx: std::sync::mpsc::Sender<Msg>,
}

impl Journal {
    /// Open `path` for appending (creating it), with a thread that writes each record.
    pub fn open(path: &Path) -> Result<(Journal, std::thread::JoinHandle<()>), String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open journal `{}`: {e}", path.display()))?;
        Ok(Journal::spawn(Box::new(FileSink(file))))
    }

    /// A thread that writes each record to `sink` (and lets it renew what it holds between).
    pub(crate) fn spawn(mut sink: Box<dyn Sink>) -> (Journal, std::thread::JoinHandle<()>) {
        use std::sync::mpsc::RecvTimeoutError;
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        let handle = std::thread::spawn(move || loop {
            let msg = match sink.tick() {
                Some(every) => match rx.recv_timeout(every) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => {
                        sink.idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break sink.close(),
                },
                None => match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break sink.close(),
                },
            };
            let Msg::Line(line, ack) = msg;
            let r = sink.append(&line);
            if let Some(ack) = ack {
                let _ = ack.send(r);
            }
        });
        (Journal { tx }, handle)
    }

    /// Append a record without waiting for it to reach the disk.
    pub fn record(&self, v: Value) {
        let _ = self.tx.send(Msg::Line(v.to_string(), None));
    }

    /// Append a record and wait until it is fsynced.
    pub async fn record_durably(&self, v: Value) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Msg::Line(v.to_string(), Some(ack)))
            .map_err(|_| "the journal is closed".to_string())?;
        done.await
            .map_err(|_| "the journal is closed".to_string())?
    }

    pub fn dispatch(id: &str, index: usize, fp: &str, attempt: u32) -> Value {
        json!({"type": "dispatch", "index": index, "id": id, "fp": fp, "attempt": attempt})
    }

    pub fn result(fp: &str, r: &CallResult) -> Value {
        json!({"type": "result", "index": r.index, "id": r.id, "fp": fp, "result": r})
    }
}

/// What a journal says about an earlier run.
#[derive(Debug, Default)]
pub struct Resume {
    pub run_id: String,
    pub manifest: String,
    /// (call id, fingerprint) → its final result.
    pub results: HashMap<(String, String), CallResult>,
    /// (call id, fingerprint) of calls dispatched without a recorded result (in flight).
    pub in_flight: HashSet<(String, String)>,
    pub ids: HashSet<String>,
    /// Calls waiting for an approval, in call order (the last run deferred them).
    pub awaiting: Vec<Awaiting>,
    /// How many dispatches the journal records (they count against `max_calls`).
    pub dispatches: u64,
    /// The ids of the calls it dispatched (their costs count against `max_cost`).
    pub dispatched: HashSet<String>,
}

impl Resume {
    /// Read a journal. A torn last line (the crash came mid-write) is ignored.
    pub fn load(path: &Path) -> Result<Resume, String> {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("cannot read journal `{}`: {e}", path.display()))?;
        let lines = std::io::BufReader::new(file).lines().map_while(Result::ok);
        Resume::read(lines).ok_or_else(|| {
            format!(
                "`{}` is not a flux-tools journal (it has no run record)",
                path.display()
            )
        })
    }

    /// Read a journal's records; `None` when there is no run record.
    pub(crate) fn read(lines: impl Iterator<Item = String>) -> Option<Resume> {
        let mut r = Resume::default();
        let mut dispatched: HashSet<(String, String)> = HashSet::new();
        let mut awaiting: HashMap<String, Awaiting> = HashMap::new();
        for line in lines {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let key = || {
                (
                    v["id"].as_str().unwrap_or("").to_string(),
                    v["fp"].as_str().unwrap_or("").to_string(),
                )
            };
            match v["type"].as_str() {
                Some("run") => {
                    r.run_id = v["run_id"].as_str().unwrap_or("").to_string();
                    r.manifest = v["manifest"].as_str().unwrap_or("").to_string();
                }
                Some("dispatch") => {
                    r.dispatches += 1;
                    r.dispatched.insert(key().0);
                    r.ids.insert(key().0);
                    dispatched.insert(key());
                }
                Some("result") => {
                    if let Ok(res) = serde_json::from_value::<ResultRecord>(v["result"].clone()) {
                        r.ids.insert(key().0);
                        // A call never dispatched runs when the journal is resumed, and so
                        // does a write its probe found never landed (it was not sent
                        // again as the run ended): resumed, its probe is asked again.
                        use crate::events::Status;
                        if !matches!(res.status, Status::NeverDispatched | Status::NotApplied) {
                            awaiting.remove(&key().0);
                            r.results.insert(key(), res.into_result());
                        }
                    }
                }
                Some("awaiting_approval") => {
                    if let Ok(a) = serde_json::from_value::<Awaiting>(v.clone()) {
                        awaiting.insert(a.id.clone(), a);
                    }
                }
                _ => {}
            }
        }
        if r.run_id.is_empty() {
            return None;
        }
        r.awaiting = awaiting.into_values().collect();
        r.awaiting.sort_by_key(|a| a.index);
        r.in_flight = dispatched
            .into_iter()
            .filter(|k| !r.results.contains_key(k))
            .collect();
        Some(r)
    }
}

/// Parse a result as journaled or recorded.
pub(crate) fn result_from_json(v: Value) -> Option<CallResult> {
    serde_json::from_value::<ResultRecord>(v)
        .ok()
        .map(ResultRecord::into_result)
}

/// A result as journaled (the `&'static str` event is rebuilt from the status).
#[derive(serde::Deserialize)]
struct ResultRecord {
    index: usize,
    id: String,
    tool: String,
    #[serde(default)]
    called_as: Option<String>,
    status: crate::events::Status,
    output: Value,
    error: Option<crate::events::ErrorInfo>,
    attempts: u32,
    phase: usize,
    idempotency_key: Option<String>,
    #[serde(default)]
    cached: bool,
    #[serde(default)]
    settled: Option<crate::events::Settled>,
    queued_ms: Option<u64>,
    waited_on: Option<String>,
    started_ms: Option<u64>,
    duration_ms: Option<u64>,
}

impl ResultRecord {
    fn into_result(self) -> CallResult {
        CallResult {
            index: self.index,
            id: self.id,
            tool: self.tool,
            called_as: self.called_as,
            event: self.status.event(),
            status: self.status,
            output: self.output,
            error: self.error,
            attempts: self.attempts,
            phase: self.phase,
            idempotency_key: self.idempotency_key,
            cached: self.cached,
            settled: self.settled,
            queued_ms: self.queued_ms,
            waited_on: self.waited_on,
            started_ms: self.started_ms,
            duration_ms: self.duration_ms,
        }
    }
}
