//! `flux-tools approvals [JOURNAL]`: what a paused run waits for, or (no journal) what
//! `mcp serve` holds for approval; `flux-tools approve ID@HASH` and `deny ID` answer the latter.

use std::path::Path;

use super::parked::{Decision, Parked, Waiting};
use super::stdout_write;
use crate::cli::{Args, ListFormat};
use crate::error::{self, Error};
use crate::report;
use crate::run::Resume;

pub(super) fn approvals(journal: &Path, format: Option<ListFormat>) -> Result<u8, Error> {
    let resume = Resume::load(journal).map_err(Error::Usage)?;
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!("{}\n", report::approvals::to_json(&resume.awaiting))
        }
        Some(ListFormat::Table) | None => report::approvals::to_text(
            &journal.display().to_string(),
            &resume.run_id,
            &resume.awaiting,
        ),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

/// The parked calls of the manifest `args` names.
fn registry(args: &Args) -> Result<(std::path::PathBuf, Parked), Error> {
    let path = crate::config::manifest_path(args.manifest.as_deref())?;
    let canonical = path
        .canonicalize()
        .map_err(|e| Error::Usage(format!("cannot read manifest `{}`: {e}", path.display())))?;
    let parked = Parked::of(&canonical).map_err(Error::Usage)?;
    Ok((path, parked))
}

pub(super) fn parked(args: &Args, format: Option<ListFormat>) -> Result<u8, Error> {
    let (path, parked) = registry(args)?;
    let waiting = parked.list();
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!(
                "{}\n",
                serde_json::to_string(&waiting).unwrap_or_else(|_| "[]".into())
            )
        }
        Some(ListFormat::Table) | None => {
            let now = unix_now();
            let left: Vec<std::time::Duration> = waiting
                .iter()
                .map(|w| std::time::Duration::from_secs_f64((w.until - now).max(0.0)))
                .collect();
            let shown: Vec<crate::events::Awaiting> = waiting.iter().map(awaiting).collect();
            report::approvals::parked_to_text(&path.display().to_string(), &shown, &left)
        }
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

fn awaiting(w: &Waiting) -> crate::events::Awaiting {
    crate::events::Awaiting {
        index: 0,
        id: w.id.clone(),
        tool: w.tool.clone(),
        args: w.args.clone(),
        hash: w.hash.clone(),
    }
}

/// `approve ID@HASH` / `deny ID[@HASH]`.
pub(super) fn answer(args: &Args, call: &str, d: Decision) -> Result<u8, Error> {
    let (_, parked) = registry(args)?;
    let (id, hash) = match call.split_once('@') {
        Some((id, hash)) => (id, Some(hash)),
        None => (call, None),
    };
    let w = parked.answer(id, hash, d).map_err(Error::Usage)?;
    let what = match d {
        Decision::Approve => "approved",
        Decision::Deny => "denied",
    };
    eprintln!(
        "{what}: call `{}` of `{}` with arguments {}",
        w.id, w.tool, w.args
    );
    Ok(error::EXIT_OK)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
