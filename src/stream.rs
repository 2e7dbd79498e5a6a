//! Streaming input: `… | flux-tools run --stream` with JSON Lines on stdin. Calls start as they
//! arrive and memory stays bounded however long the stream is.
//!
//! The stream is cut into chunks: whatever lines have arrived (up to [`CHUNK`]) once the first
//! one is there. Each chunk is planned and run like a batch — with the same manifest, lanes and
//! rules — and its results are written, in call order, before the next chunk starts; a chunk
//! boundary is one more barrier, so it can only make a run more ordered, never less safe.
//! Default ids (`c1`, `c2`, …) and result indices continue across chunks. A call may reference
//! or be `after` a call of an earlier chunk that had an explicit `id` (its output is kept;
//! default-id calls are not kept, so memory is bounded by explicitly named calls).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::batch::Batch;
use crate::cli::{Args, Emit, RunArgs};
use crate::error::{self, Error, SourceFile};
use crate::events::{Outcome, Status};
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{self, External, PlanOptions};
use crate::report::output;
use crate::run::lanes::{LaneStore, LocalLanes, MemoryLanes};
use crate::run::{self, RunConfig};

/// Most calls in one chunk.
pub const CHUNK: usize = 2048;
/// How long to wait for more lines before running what has arrived.
const GATHER: Duration = Duration::from_millis(5);

/// Read stdin's first non-empty line; `Some` when it is a JSON object (a JSON Lines stream),
/// else the text read so far is put back for a whole-batch read and `None` is returned.
pub fn first_jsonl_line() -> Result<Option<String>, Error> {
    let mut stdin = std::io::stdin().lock();
    let mut seen = String::new();
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
            continue;
        }
        if serde_json::from_str::<Value>(&line).is_ok_and(|v| v.is_object()) {
            return Ok(Some(line));
        }
        seen.push_str(&line);
        crate::config::unread_stdin(seen);
        return Ok(None);
    }
}

fn reader(first: String) -> Receiver<String> {
    let (tx, rx) = sync_channel::<String>(CHUNK * 2);
    std::thread::spawn(move || {
        if tx.send(first).is_err() {
            return;
        }
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Run a JSON Lines stream chunk by chunk.
pub fn run_stream(
    args: &Args,
    r: &RunArgs,
    mut opts: PlanOptions,
    first: String,
) -> Result<u8, Error> {
    for (set, flag) in [
        (r.output.is_some(), "--output"),
        (
            r.journal.is_some() || r.resume.is_some(),
            "--journal/--resume",
        ),
        (
            r.record.is_some() || r.replay.is_some(),
            "--record/--replay",
        ),
        (r.trace.is_some(), "--trace"),
    ] {
        if set {
            return Err(Error::Usage(format!("{flag} needs a whole batch; it cannot be used with a --stream of JSON Lines on stdin")));
        }
    }
    let path = crate::config::manifest_path(args.manifest.as_deref())?;
    let manifest = Arc::new(Manifest::load(&path).map_err(Error::Invalid)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    let lines = reader(first);
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut external: Arc<External> = Arc::new(HashMap::new());
    let (mut base, mut ok, mut failed) = (0usize, 0usize, 0usize);
    let mut outcome = Outcome::Completed;
    let started = Instant::now();
    let run_id = run::scheduler::new_run_id();
    // Signals go to whichever chunk is running.
    let current: Arc<std::sync::Mutex<Option<mpsc::UnboundedSender<()>>>> = Arc::default();
    let (sig_tx, mut sig_rx) = mpsc::unbounded_channel::<()>();
    {
        let current = current.clone();
        rt.spawn(async move {
            while sig_rx.recv().await.is_some() {
                if let Some(tx) = current.lock().ok().and_then(|c| c.clone()) {
                    let _ = tx.send(());
                }
            }
        });
    }
    rt.block_on(async { crate::app::spawn_signal_forwarder(sig_tx) });
    'chunks: while let Ok(first) = lines.recv() {
        let mut chunk = vec![first];
        while chunk.len() < CHUNK {
            match lines.recv_timeout(GATHER) {
                Ok(l) => chunk.push(l),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let file = SourceFile::new(
            format!("<stdin> calls {}-{}", base + 1, base + chunk.len()),
            chunk.join("\n"),
        );
        drop(chunk);
        let (batch, _) =
            Batch::parse_chunk(file, InputFormat::Jsonl, base).map_err(Error::Invalid)?;
        opts.external = Some(external.clone());
        let plan = plan::build(&manifest, &batch, &opts).map_err(Error::Invalid)?;
        opts.external = None;
        let lanes: Arc<dyn LaneStore> = match r.lane_store.as_str() {
            "memory" => Arc::new(MemoryLanes::new(&plan.lanes)),
            _ => Arc::new(
                LocalLanes::new(&plan.lanes, &manifest.path)
                    .map_err(|e| Error::Usage(e.to_string()))?,
            ),
        };
        let n = plan.calls.len();
        let plan = Arc::new(plan);
        // This chunk's signals: forward the process's to it.
        let (chunk_tx, chunk_rx) = mpsc::unbounded_channel::<()>();
        if let Ok(mut c) = current.lock() {
            *c = Some(chunk_tx);
        }
        let report = rt.block_on(async {
            let config = RunConfig {
                run_id: run_id.clone(),
                lanes,
                events: None,
                lane_events: false,
                mcp: None,
                approvals: r
                    .approve
                    .as_deref()
                    .map(crate::run::gate::Approvals::parse)
                    .unwrap_or_default(),
                journal: None,
                resume: None,
                retry_indeterminate: false,
                record: false,
                replay: None,
            };
            run::execute_spawned(manifest.clone(), plan.clone(), config, chunk_rx).await
        });
        let ext = Arc::make_mut(&mut external);
        for (c, res) in batch.calls.iter().zip(&report.results) {
            if c.explicit_id {
                ext.insert(
                    c.id.clone(),
                    (res.status == Status::Ok).then(|| res.output.clone()),
                );
            }
            if res.status == Status::Ok {
                ok += 1;
            } else {
                failed += 1;
            }
            let mut line = match r.emit {
                Some(Emit::Openai) => output::openai_message(res),
                Some(Emit::Anthropic) => output::anthropic_block(res),
                None => serde_json::to_value(res).unwrap_or(Value::Null),
            };
            if r.emit.is_none() {
                line["index"] = Value::from(base + res.index);
            }
            let written = serde_json::to_writer(&mut out, &line)
                .map_err(std::io::Error::from)
                .and_then(|_| out.write_all(b"\n"));
            if written.is_err() {
                break 'chunks;
            }
        }
        if out.flush().is_err() {
            break;
        }
        base += n;
        if report.outcome != Outcome::Completed {
            outcome = report.outcome;
            break;
        }
    }
    rt.shutdown_background();
    if !args.quiet {
        let mut line = format!(
            "{} calls streamed: {ok} ok, {failed} failed in {}",
            base,
            crate::duration::format(started.elapsed())
        );
        if outcome != Outcome::Completed {
            line.push_str(&format!(" · outcome {}", outcome.as_str()));
        }
        eprintln!("{line}");
    }
    Ok(match outcome {
        Outcome::Completed if failed == 0 => error::EXIT_OK,
        Outcome::Completed => error::EXIT_CALLS_FAILED,
        Outcome::Interrupted => error::EXIT_INTERRUPTED,
        _ => error::EXIT_ENDED_EARLY,
    })
}
