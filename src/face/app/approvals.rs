//! `flux-tools approvals [JOURNAL]`: what a paused run waits for, or (no journal) what
//! `mcp serve` holds for approval; `flux-tools approve ID@HASH` and `deny ID` answer the latter.

use std::path::Path;

use super::parked::{Decision, Parked, Waiting};
use super::stdout_write;
use crate::cli::{Args, LaneStoreChoice, ListFormat};
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

/// The parked calls of the manifest `args` names, on `store`'s board (Redis) or this
/// machine's files; with the runtime the board is read on.
fn registry(
    args: &Args,
    store: Option<&LaneStoreChoice>,
) -> Result<(std::path::PathBuf, Parked, tokio::runtime::Runtime), Error> {
    let path = crate::app::config::manifest_path(args.manifest.as_deref())?;
    let canonical = path
        .canonicalize()
        .map_err(|e| Error::Usage(format!("cannot read manifest `{}`: {e}", path.display())))?;
    let rt = super::runtime()?;
    let board = match store {
        Some(LaneStoreChoice::Redis(url)) => {
            let ns = canonical.display().to_string();
            let lanes = rt
                .block_on(crate::run::RedisLanes::connect(url, &[], &ns))
                .map_err(|e| Error::Usage(e.to_string()))?;
            crate::run::store::Connection::board(&lanes)
        }
        _ => None,
    };
    let parked = Parked::of(&canonical, board).map_err(Error::Usage)?;
    Ok((path, parked, rt))
}

pub(super) fn parked(
    args: &Args,
    store: Option<&LaneStoreChoice>,
    format: Option<ListFormat>,
) -> Result<u8, Error> {
    let (path, parked, rt) = registry(args, store)?;
    let waiting = rt.block_on(parked.list());
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!(
                "{}\n",
                serde_json::to_string(&waiting).unwrap_or_else(|_| "[]".into())
            )
        }
        Some(ListFormat::Table) | None => {
            let now = super::parked::unix_now();
            let left: Vec<(std::time::Duration, bool, String)> = waiting
                .iter()
                .map(|w| {
                    let left = std::time::Duration::from_secs_f64((w.until - now).max(0.0));
                    (left, w.orphaned, w.asked_by())
                })
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

/// Who answers from this command line, for the gateway's audit trail: the user it runs as.
fn answerer() -> String {
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    format!("flux-tools approve (uid {uid})")
}

/// `approve ID@HASH` / `deny ID[@HASH]`.
pub(super) fn answer(
    args: &Args,
    store: Option<&LaneStoreChoice>,
    call: &str,
    d: Decision,
) -> Result<u8, Error> {
    let (_, parked, rt) = registry(args, store)?;
    let (id, hash) = match call.split_once('@') {
        Some((id, hash)) => (id, Some(hash)),
        None => (call, None),
    };
    let w = rt
        .block_on(parked.answer(id, hash, d, &answerer()))
        .map_err(Error::Usage)?;
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
