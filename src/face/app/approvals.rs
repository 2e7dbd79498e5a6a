//! `flux-tools approvals [JOURNAL]`: what a paused run waits for, or (no journal) what
//! `mcp serve` holds for approval; `flux-tools approve ID@HASH` and `deny ID` answer the latter.

use std::path::Path;

use super::parked::{Decision, Parked, Waiting};
use super::review::{HeldTool, Review};
use super::stdout_write;
use crate::cli::{Args, LaneStoreChoice, ListFormat};
use crate::error::{self, Error};
use crate::report;
use crate::run::store::BoardOf;
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

/// The boards of the manifest `args` names — its parked calls and the tools `tools.lock` holds
/// back — on `store`'s (Redis) or this machine's files; with the runtime they are read on.
struct Boards {
    path: std::path::PathBuf,
    parked: Parked,
    review: Review,
    rt: tokio::runtime::Runtime,
}

fn registry(args: &Args, store: Option<&LaneStoreChoice>) -> Result<Boards, Error> {
    let path = crate::app::config::manifest_path(args.manifest.as_deref())?;
    let canonical = path
        .canonicalize()
        .map_err(|e| Error::Usage(format!("cannot read manifest `{}`: {e}", path.display())))?;
    let rt = super::runtime()?;
    // One connection for both boards.
    let lanes = match store {
        Some(LaneStoreChoice::Redis(url)) => {
            let ns = canonical.display().to_string();
            let lanes = rt
                .block_on(crate::run::RedisLanes::connect(url, &[], &ns))
                .map_err(|e| Error::Usage(e.to_string()))?;
            Some(lanes)
        }
        _ => None,
    };
    let board = |of| (lanes.as_ref()).and_then(|l| crate::run::store::Connection::board(l, of));
    let parked = Parked::of(&canonical, board(BoardOf::Calls)).map_err(Error::Usage)?;
    let review = Review::of(&canonical, board(BoardOf::Catalog)).map_err(Error::Usage)?;
    Ok(Boards {
        path,
        parked,
        review,
        rt,
    })
}

pub(super) fn parked(
    args: &Args,
    store: Option<&LaneStoreChoice>,
    format: Option<ListFormat>,
) -> Result<u8, Error> {
    let Boards {
        path,
        parked,
        review,
        rt,
    } = registry(args, store)?;
    let waiting = rt.block_on(parked.list());
    let held = rt.block_on(review.list()).map_err(Error::Usage)?;
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            let mut items: Vec<serde_json::Value> = (waiting.iter())
                .filter_map(|w| serde_json::to_value(w).ok())
                .collect();
            items.extend(held.iter().map(held_json));
            format!("{}\n", serde_json::Value::Array(items))
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
            let shown_held: Vec<(String, String, String)> = (held.iter())
                .map(|h| (h.handle(), h.now.from.clone(), h.change.clone()))
                .collect();
            report::approvals::parked_to_text(&path.display().to_string(), &shown, &left)
                + &report::approvals::held_to_text(&shown_held)
        }
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

/// A held-back tool as `approvals --format json` lists it, beside the parked calls: marked
/// `"kind": "tool"`.
fn held_json(h: &HeldTool) -> serde_json::Value {
    serde_json::json!({
        "kind": "tool",
        "handle": h.handle(),
        "tool": h.now.name,
        "from": h.now.from,
        "hash": h.now.hash,
        "was": h.was,
        "change": h.change,
        "definition": h.now.definition,
        "since": h.since,
    })
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

/// `approve ID@HASH` / `deny ID[@HASH]`; `approve tool:NAME@HASH` / `deny tool:NAME@HASH`
/// decide on a held-back definition, for every gateway on the board.
pub(super) fn answer(
    args: &Args,
    store: Option<&LaneStoreChoice>,
    call: &str,
    d: Decision,
) -> Result<u8, Error> {
    let Boards {
        parked, review, rt, ..
    } = registry(args, store)?;
    if call.starts_with("tool:") {
        let h = (rt.block_on(review.decide(call, d, &answerer()))).map_err(Error::Usage)?;
        let what = match d {
            Decision::Approve => "approved: it is served by every gateway on this board from their next look (within a second)",
            Decision::Deny => "denied: it stays held back",
        };
        eprintln!("tool `{}` ({}) {what}", h.now.name, h.now.hash);
        return Ok(error::EXIT_OK);
    }
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
