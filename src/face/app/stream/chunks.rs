//! Reading a stream: stdin's lines on a thread of their own, cut into chunks of calls as
//! they arrive (whatever has come within [`GATHER`](super::GATHER), up to
//! [`CHUNK`](super::CHUNK) calls).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{CHUNK, GATHER};
use crate::error::{Error, SourceFile};

/// Read stdin's first non-empty line; `Some((blank lines before it, the line))` when it is a
/// JSON object (a JSON Lines stream), else the text read so far is put back for a whole-batch
/// read and `None` is returned.
pub(in crate::face::app) fn first_jsonl_line() -> Result<Option<(usize, String)>, Error> {
    let mut stdin = std::io::stdin().lock();
    let mut seen = String::new();
    let mut blank = 0;
    loop {
        let mut line = String::new();
        let n = stdin
            .read_line(&mut line)
            .map_err(|e| Error::io("cannot read stdin", e))?;
        if n == 0 {
            crate::app::config::unread_stdin(seen);
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
        crate::app::config::unread_stdin(seen);
        return Ok(None);
    }
}

/// A JSON Lines call: an object with `tool` and no `calls`.
fn is_call(v: &Value) -> bool {
    v.get("tool").is_some() && v.get("calls").is_none()
}

/// The calls of stdin in chunks; each line with its 0-based line number.
pub(in crate::face::app) struct Chunks {
    lines: Receiver<(usize, String)>,
    /// When any is set, no more chunks are read (Ctrl-C, a closed stdout).
    stop: Vec<Arc<AtomicBool>>,
}

/// One chunk: its text and how many lines of the input came before it.
pub(in crate::face::app) struct Chunk {
    pub file: SourceFile,
    pub calls: usize,
}

impl Chunks {
    /// The stream whose first call is `first`, after `blank` blank lines.
    pub(super) fn new((blank, first): (usize, String), stop: Vec<Arc<AtomicBool>>) -> Chunks {
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
        Chunks { lines: rx, stop }
    }
}

impl Iterator for Chunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        let (first_line, first) = loop {
            if self.stop.iter().any(|s| s.load(Ordering::SeqCst)) {
                return None;
            }
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => break line,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        };
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
