//! The run history: one JSON line per run (`--history FILE`, `$FLUX_TOOLS_HISTORY`, or
//! `[history] path`), appended under an exclusive `flock` so concurrent runs never interleave,
//! and read back by `flux-tools report --history` ([`analysis`]) to show how runs change over
//! time — fan-out width, speed-up, peaks per shared lane, 429s, cost per turn split between
//! the tools and the model.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::events::CallResult;
use crate::manifest::Manifest;
use crate::model_formats::Usage;
use crate::run::RunEnd;

pub(crate) mod analysis;

/// One run, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// When the run ended (RFC 3339, UTC).
    pub time: String,
    pub run_id: String,
    pub tenant: String,
    /// Who made the calls (a gateway session's caller, when a token named a subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The manifest's fingerprint (the same as the journal's).
    pub manifest: String,
    /// `batch`, `jsonl`, or the provider whose reply it was (`openai`, …).
    pub input_format: String,
    pub outcome: String,
    pub calls: usize,
    /// The plan's width: the most calls it would run at once.
    pub width: usize,
    /// The most calls that were in flight at once, measured.
    pub peak_in_flight: usize,
    pub wall_ms: u64,
    pub tool_time_ms: u64,
    pub critical_path_ms: u64,
    pub retries: u64,
    pub http_429: u64,
    #[serde(default)]
    pub cache_hits: usize,
    /// Writes cut off in flight that their probes settled (`verify`); only when any were.
    #[serde(default, skip_serializing_if = "crate::events::Settlements::is_empty")]
    pub settled: crate::events::Settlements,
    /// What the tools cost, in all and per tool.
    pub cost: f64,
    #[serde(default)]
    pub cost_by_tool: BTreeMap<String, f64>,
    #[serde(default)]
    pub lanes: Vec<LaneRecord>,
    /// The model whose reply this run answered, when it reported its usage.
    #[serde(default)]
    pub model: Option<ModelRecord>,
}

/// A lane's figures in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LaneRecord {
    pub lane: String,
    pub limit: Option<u32>,
    pub peak: u64,
    /// For a lane shared with other runs: the most permits they held while one of ours waited.
    pub held_elsewhere: Option<u64>,
    /// Partner rejections (HTTP 429/503 with a wait) met in this lane.
    pub rejections: u64,
    /// A learned lane (`concurrency = "auto"`): its limit over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<crate::events::Learned>,
}

/// Each learned lane's last limit in the history at `path` (its newest run that used it):
/// what `plan` simulates with. Nothing when there is no history or it cannot be read.
pub(crate) fn learned_limits(path: &Path) -> std::collections::BTreeMap<String, u32> {
    #[derive(Deserialize)]
    struct Line {
        #[serde(default)]
        lanes: Vec<Lane>,
    }
    #[derive(Deserialize)]
    struct Lane {
        lane: String,
        learned: Option<crate::events::Learned>,
    }
    let mut out = std::collections::BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    for line in text.lines() {
        let Ok(l) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        for lane in l.lanes {
            if let Some(learned) = lane.learned {
                out.insert(lane.lane, learned.last);
            }
        }
    }
    out
}

/// A model reply's usage and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelRecord {
    pub name: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// From `[models."NAME"]` (`None`: the manifest prices no such model).
    pub cost: Option<f64>,
}

impl Record {
    /// The record of a run that ended now.
    pub(crate) fn of(facts: &RunEnd<'_>, manifest: &Manifest) -> Record {
        let s = facts.stats;
        Record {
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            run_id: facts.run_id.to_string(),
            tenant: facts.tenant.to_string(),
            subject: facts.subject.map(str::to_string),
            manifest: manifest.fingerprint(),
            input_format: facts.input_format.to_string(),
            outcome: facts.outcome.as_str().to_string(),
            calls: s.calls,
            width: facts.width,
            peak_in_flight: facts.peak_in_flight,
            wall_ms: s.wall_ms,
            tool_time_ms: s.tool_time_ms,
            critical_path_ms: s.critical_path_ms,
            retries: s.retries,
            http_429: s.http_429,
            cache_hits: s.cache_hits,
            settled: s.settled,
            cost: s.cost,
            cost_by_tool: s.cost_by_tool.clone(),
            lanes: s
                .lanes
                .iter()
                .map(|l| LaneRecord {
                    lane: l.lane.clone(),
                    limit: l.limit,
                    peak: l.peak_in_flight,
                    held_elsewhere: l.peak_held_elsewhere,
                    rejections: l.rejections,
                    learned: l.learned.clone(),
                })
                .collect(),
            model: facts.usage.map(|u| model_record(u, manifest)),
        }
    }
}

/// A reply's usage priced with the manifest's `[models]`.
pub(crate) fn model_record(u: &Usage, manifest: &Manifest) -> ModelRecord {
    let price = u.model.as_deref().and_then(|m| manifest.model_price(m));
    ModelRecord {
        name: u.model.clone(),
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cost: price.map(|p| {
            let c = u.input_tokens as f64 / 1e6 * p.input_per_mtok
                + u.output_tokens as f64 / 1e6 * p.output_per_mtok;
            (c * 1e9).round() / 1e9
        }),
    }
}

/// The most invocations that overlapped (cache hits invoked nothing).
pub(crate) fn peak_in_flight(results: &[CallResult]) -> usize {
    let mut edges: Vec<(u64, i32)> = results
        .iter()
        .filter(|r| !r.cached)
        .filter_map(|r| Some((r.started_ms?, r.duration_ms?)))
        .flat_map(|(s, d)| [(s, 1), (s + d.max(1), -1)])
        .collect();
    // Ends before starts at the same millisecond: back-to-back calls do not overlap.
    edges.sort_unstable();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap_or(0)
}

/// Append `record` as one line to `path`, holding an exclusive lock on the file so lines of
/// concurrent runs never interleave.
pub(crate) fn append(path: &Path, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: flock on a descriptor we own; a failure is returned as an error.
    if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let written = file.write_all(&line);
    // SAFETY: as above; closing the file would unlock it too.
    unsafe { libc::flock(fd, libc::LOCK_UN) };
    written
}

#[cfg(test)]
mod tests;
