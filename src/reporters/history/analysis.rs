//! A history read back: runs grouped by hour or day (UTC), each period's fan-out width
//! distribution, speed-up, peaks per shared lane, 429s and cost per turn, and the first
//! period where the width distribution moved against the periods before it — the sign that
//! a prompt or model change altered how wide the agent fans out.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// How runs are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Period {
    Hour,
    Day,
}

impl Period {
    /// The period a record's `time` falls in: `2026-11-30T16` or `2026-11-30`.
    fn key(self, time: &str) -> Option<&str> {
        let ok = time.len() >= 13 && time.as_bytes()[10] == b'T';
        ok.then(|| match self {
            Period::Hour => &time[..13],
            Period::Day => &time[..10],
        })
    }

    /// How a period is shown: `2026-11-30 16:00` or `2026-11-30`.
    fn label(self, key: &str) -> String {
        match self {
            Period::Hour => format!("{} {}:00", &key[..10], &key[11..13]),
            Period::Day => key.to_string(),
        }
    }
}

/// What the analysis reads of a record (the rest of the line is skipped unparsed).
#[derive(Deserialize)]
struct Line {
    time: String,
    width: usize,
    wall_ms: u64,
    tool_time_ms: u64,
    #[serde(default)]
    http_429: u64,
    #[serde(default)]
    settled: crate::events::Settlements,
    #[serde(default)]
    cost: f64,
    #[serde(default)]
    lanes: Vec<LaneLine>,
    #[serde(default)]
    model: Option<ModelLine>,
}

#[derive(Deserialize)]
struct LaneLine {
    lane: String,
    peak: u64,
    held_elsewhere: Option<u64>,
    #[serde(default)]
    learned: Option<crate::events::Learned>,
}

#[derive(Deserialize)]
struct ModelLine {
    cost: Option<f64>,
}

/// One period's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    pub period: String,
    pub turns: usize,
    pub width_p50: usize,
    pub width_p95: usize,
    pub width_max: usize,
    /// Summed tool time over summed wall time.
    pub speedup: f64,
    /// Per lane shared across runs: the most permits held at once by a run and the others
    /// it saw (its peak plus what others held while it waited).
    pub lane_peaks: BTreeMap<String, u64>,
    /// Per learned lane (`concurrency = "auto"`): its lowest and highest limit over the
    /// period's runs, and the last one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lane_limits: BTreeMap<String, LimitSpan>,
    pub http_429: u64,
    pub tool_cost_per_turn: f64,
    /// `None` when no run of the period priced its model.
    pub model_cost_per_turn: Option<f64>,
}

/// A learned lane's limit over a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct LimitSpan {
    pub lowest: u32,
    pub highest: u32,
    pub last: u32,
}

/// The first period whose width moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Shift {
    pub period: String,
    /// `up` or `down`.
    pub direction: &'static str,
    pub p95_before: usize,
    pub p95: usize,
    pub turns_before: usize,
    pub turns: usize,
}

/// A history, grouped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Analysis {
    pub by: Period,
    pub runs: usize,
    /// Lines that are not run records (torn, foreign): skipped.
    pub skipped: usize,
    pub rows: Vec<Row>,
    pub shift: Option<Shift>,
    /// Writes cut off in flight that their probes settled, over every run.
    pub settled: crate::events::Settlements,
}

/// What a period gathers while lines are read.
#[derive(Default)]
struct Acc {
    widths: Vec<usize>,
    wall_ms: u64,
    tool_ms: u64,
    http_429: u64,
    tool_cost: f64,
    model_cost: f64,
    priced: usize,
    lanes: BTreeMap<String, u64>,
    limits: BTreeMap<String, LimitSpan>,
}

impl Acc {
    fn add(&mut self, l: Line) {
        self.widths.push(l.width);
        self.wall_ms += l.wall_ms;
        self.tool_ms += l.tool_time_ms;
        self.http_429 += l.http_429;
        self.tool_cost += l.cost;
        if let Some(c) = l.model.and_then(|m| m.cost) {
            self.model_cost += c;
            self.priced += 1;
        }
        for lane in l.lanes.into_iter().filter(|x| shared(&x.lane)) {
            if let Some(learned) = &lane.learned {
                let e = self.limits.entry(lane.lane.clone()).or_insert(LimitSpan {
                    lowest: learned.lowest,
                    highest: learned.highest,
                    last: learned.last,
                });
                e.lowest = e.lowest.min(learned.lowest);
                e.highest = e.highest.max(learned.highest);
                e.last = learned.last;
            }
            let seen = lane.peak + lane.held_elsewhere.unwrap_or(0);
            let e = self.lanes.entry(lane.lane).or_default();
            *e = (*e).max(seen);
        }
    }

    fn row(mut self, period: String) -> (Row, Vec<usize>) {
        self.widths.sort_unstable();
        let n = self.widths.len();
        let turns = n.max(1) as f64;
        let row = Row {
            period,
            turns: n,
            width_p50: percentile(&self.widths, 50),
            width_p95: percentile(&self.widths, 95),
            width_max: self.widths.last().copied().unwrap_or(0),
            speedup: round2(self.tool_ms as f64 / self.wall_ms.max(1) as f64),
            lane_peaks: self.lanes,
            lane_limits: self.limits,
            http_429: self.http_429,
            tool_cost_per_turn: round9(self.tool_cost / turns),
            model_cost_per_turn: (self.priced > 0).then(|| round9(self.model_cost / turns)),
        };
        (row, self.widths)
    }
}

/// A lane other runs share: the tenant, a tool, a declared lane (not the turn or processes).
fn shared(lane: &str) -> bool {
    ["tenant:", "tool:", "lane:"]
        .iter()
        .any(|p| lane.starts_with(p))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn round9(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}

/// The nearest-rank percentile of sorted values (0 when empty).
pub(crate) fn percentile(sorted: &[usize], p: usize) -> usize {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Read a history and group it. `by: None` picks days when the runs span more than three
/// days, else hours. A shift needs `min_turns` runs in the period and before it.
pub(crate) fn analyse(
    reader: impl BufRead,
    by: Option<Period>,
    min_turns: usize,
) -> std::io::Result<Analysis> {
    let mut lines: Vec<Line> = Vec::new();
    let mut skipped = 0;
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(l) if Period::Hour.key(&l.time).is_some() => lines.push(l),
            _ => skipped += 1,
        }
    }
    let by = by.unwrap_or_else(|| choose_period(&lines));
    let mut periods: BTreeMap<String, Acc> = BTreeMap::new();
    let runs = lines.len();
    let mut settled = crate::events::Settlements::default();
    for l in lines {
        settled.merge(l.settled);
        let Some(key) = by.key(&l.time).map(str::to_string) else {
            continue;
        };
        periods.entry(key).or_default().add(l);
    }
    let mut rows = Vec::with_capacity(periods.len());
    let mut widths = Vec::with_capacity(periods.len());
    for (key, acc) in periods {
        let (row, w) = acc.row(by.label(&key));
        rows.push(row);
        widths.push(w);
    }
    let shift = detect_shift(&rows, &widths, min_turns);
    Ok(Analysis {
        by,
        runs,
        skipped,
        rows,
        shift,
        settled,
    })
}

/// Days when the runs span more than three days, else hours.
fn choose_period(lines: &[Line]) -> Period {
    let secs = |t: &str| {
        humantime::parse_rfc3339_weak(t)
            .ok()
            .and_then(|s| s.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    };
    let times: Vec<u64> = lines.iter().filter_map(|l| secs(&l.time)).collect();
    match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) if b - a > 3 * 86_400 => Period::Day,
        _ => Period::Hour,
    }
}

/// The first period (with `min_turns` runs, after at least `min_turns` earlier runs in such
/// periods) whose p95 width is up by half or more, or down by a third or more, against every
/// such run before it.
fn detect_shift(rows: &[Row], widths: &[Vec<usize>], min_turns: usize) -> Option<Shift> {
    let min_turns = min_turns.max(1);
    let mut before: Vec<usize> = Vec::new();
    for (row, w) in rows.iter().zip(widths) {
        if w.len() < min_turns {
            continue;
        }
        if before.len() >= min_turns {
            before.sort_unstable();
            let (was, now) = (percentile(&before, 95), row.width_p95);
            let direction = if 2 * now >= 3 * was && now > was {
                Some("up")
            } else if 3 * now <= 2 * was {
                Some("down")
            } else {
                None
            };
            if let Some(direction) = direction {
                return Some(Shift {
                    period: row.period.clone(),
                    direction,
                    p95_before: was,
                    p95: now,
                    turns_before: before.len(),
                    turns: row.turns,
                });
            }
        }
        before.extend_from_slice(w);
    }
    None
}
