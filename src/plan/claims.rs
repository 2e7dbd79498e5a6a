//! The rules that order side effects, in one room: what a call of a tool claims — to run
//! alone (`parallel_safe = false`), a place in its write chain (a write, unless its tool
//! allows concurrent writes), its backends (read or written, under the manifest's
//! `hazards`) — and which claim waits for which. The plan's hazard edges (`graph/`), a stream's
//! segments (`app/stream/ledger.rs`) and the gateway's arrival queues (`app/serve/order.rs`)
//! all read them here; the lane store holds the backend claims across processes.

use crate::manifest::{Hazards, Tool};

/// The key every call claims in an arrival order: a call that runs alone writes it.
pub(crate) const ALONE: &str = "*";

/// Whether a call of `tool` runs alone: nothing overlaps it.
pub(crate) fn alone(tool: &Tool) -> bool {
    !tool.parallel_safe
}

/// Whether a call of `tool` waits for the write before it in its chain (a write, unless its
/// tool allows concurrent writes).
pub(crate) fn chained(tool: &Tool) -> bool {
    tool.is_write() && !tool.concurrent_writes
}

/// Everything a call of `tool` claims in an arrival order of many callers (the gateway's):
/// [`ALONE`] (written when it runs alone, else read), its write chain `chain` (a session),
/// and its backends.
pub(crate) fn claims(tool: &Tool, hazards: Hazards, chain: &str) -> Vec<(String, Claim)> {
    let on_alone = if alone(tool) {
        Claim::Write
    } else {
        Claim::Read
    };
    let mut out = vec![(ALONE.to_string(), on_alone)];
    if chained(tool) {
        out.push((format!("chain:{chain}"), Claim::Write));
    }
    for (b, c) in backend_claims(tool, hazards) {
        out.push((format!("backend:{b}"), c));
    }
    out
}

/// How a call holds one of its backends, for the order of side effects across runs and
/// sessions (inside one batch the plan's edges keep it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Read,
    Write,
    /// A write of a tool with `concurrent_writes = true`: writes like it may overlap it.
    ConcurrentWrite,
}

impl Claim {
    /// Whether a call holding `self` must wait for an earlier one holding `earlier`.
    pub fn waits_for(self, earlier: Claim) -> bool {
        match self {
            Claim::Read => earlier != Claim::Read,
            Claim::Write => true,
            Claim::ConcurrentWrite => earlier != Claim::ConcurrentWrite,
        }
    }
}

/// What a call of `tool` claims of each of its backends under `hazards`: a write writes them
/// (concurrently, when its tool allows concurrent writes); under `"backend"` a read reads
/// them; under `"writes"` only a cached read does (its entry must not predate a write).
pub(crate) fn backend_claim(tool: &Tool, hazards: Hazards) -> Option<Claim> {
    match (hazards, tool.is_write()) {
        (_, true) if tool.concurrent_writes => Some(Claim::ConcurrentWrite),
        (_, true) => Some(Claim::Write),
        (Hazards::Backend, false) => Some(Claim::Read),
        (Hazards::Writes, false) => tool.cache.is_some().then_some(Claim::Read),
    }
}

/// [`backend_claim`], by backend name (each once).
pub(crate) fn backend_claims(tool: &Tool, hazards: Hazards) -> Vec<(String, Claim)> {
    let Some(claim) = backend_claim(tool, hazards) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Claim)> = tool.backends.iter().map(|b| (b.clone(), claim)).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}
