//! A stream of JSON Lines calls on stdin (`… | flux-tools run --stream`), cut into chunks.
//!
//! A chunk is whatever lines have arrived (up to [`CHUNK`]) once its first one is there. The
//! run pipeline ([`super::run`]) plans and runs each chunk with the run's one manifest, lane
//! store, MCP sessions, approvals, hooks, budget, deadline and signals; its results are
//! written before the next chunk starts, so a chunk boundary is one more barrier: it can only
//! make a run more ordered, never less safe. Default ids (`c1`, `c2`, …), result indices,
//! times and error locations continue across chunks. A call may reference or be `after` a
//! call of an earlier chunk that had an explicit `id` (its output is kept; default-id calls
//! are not, so memory is bounded by explicitly named calls).

use std::io::BufRead;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, SourceFile};

/// Most calls in one chunk.
pub const CHUNK: usize = 2048;
/// How long to wait for more lines before running what has arrived.
const GATHER: Duration = Duration::from_millis(5);

/// Read stdin's first non-empty line; `Some((blank lines before it, the line))` when it is a
/// JSON object (a JSON Lines stream), else the text read so far is put back for a whole-batch
/// read and `None` is returned.
pub(super) fn first_jsonl_line() -> Result<Option<(usize, String)>, Error> {
    let mut stdin = std::io::stdin().lock();
    let mut seen = String::new();
    let mut blank = 0;
    loop {
        let mut line = String::new();
        let n = stdin
            .read_line(&mut line)
            .map_err(|e| Error::io("cannot read stdin", e))?;
        if n == 0 {
            crate::config::unread_stdin(seen);
            return Ok(None);
        }
        if line.trim().is_empty() {
            seen.push_str(&line);
            blank += 1;
            continue;
        }
        // A call starts a stream; a one-line document (a model's reply as `model_dump_json()`
        // or curl writes it, or a batch document) is read whole.
        if serde_json::from_str::<Value>(&line).is_ok_and(|v| is_call(&v)) {
            let line = line.trim_end_matches(['\n', '\r']).to_string();
            return Ok(Some((blank, line)));
        }
        seen.push_str(&line);
        crate::config::unread_stdin(seen);
        return Ok(None);
    }
}

/// A JSON Lines call: an object with `tool` and no `calls`.
fn is_call(v: &Value) -> bool {
    v.get("tool").is_some() && v.get("calls").is_none()
}

/// The calls of stdin in chunks; each line with its 0-based line number.
pub(super) struct Chunks {
    lines: Receiver<(usize, String)>,
}

/// One chunk: its text and how many lines of the input came before it.
pub(super) struct Chunk {
    pub file: SourceFile,
    pub calls: usize,
}

impl Chunks {
    /// The stream whose first call is `first`, after `blank` blank lines.
    pub fn new((blank, first): (usize, String)) -> Chunks {
        let (tx, rx) = sync_channel::<(usize, String)>(CHUNK * 2);
        std::thread::spawn(move || {
            if tx.send((blank, first)).is_err() {
                return;
            }
            for (n, line) in std::io::stdin().lock().lines().enumerate() {
                let Ok(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                if tx.send((blank + 1 + n, line)).is_err() {
                    break;
                }
            }
        });
        Chunks { lines: rx }
    }
}

impl Iterator for Chunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        let (first_line, first) = self.lines.recv().ok()?;
        let mut text = first;
        let mut last_line = first_line;
        let mut calls = 1;
        while calls < CHUNK {
            match self.lines.recv_timeout(GATHER) {
                Ok((n, l)) => {
                    // Blank lines skipped by the reader keep their place, so a location
                    // names the line as the user counts it.
                    for _ in last_line..n {
                        text.push('\n');
                    }
                    text.push_str(&l);
                    last_line = n;
                    calls += 1;
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        Some(Chunk {
            file: SourceFile::new("<stdin>", text).after_lines(first_line),
            calls,
        })
    }
}
