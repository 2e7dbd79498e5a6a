//! Seeing a run: a Chrome trace-event file (`--trace FILE`, opens in Perfetto) and an SVG Gantt
//! chart of a results document (`flux-tools report RESULTS.json --svg FILE`).
//!
//! Both are drawn from results alone (`started_ms`, `duration_ms`, `queued_ms`), so a recorded
//! or replayed run draws the same. Calls are laid on tracks ("slots") by greedy interval
//! colouring: a call goes on the lowest track free when it started, so the number of tracks is
//! the run's peak concurrency.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::events::{CallResult, Status};

/// Track (slot) of each dispatched call; `None` for calls never dispatched.
pub(crate) fn slots(results: &[CallResult]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..results.len())
        .filter(|&i| results[i].started_ms.is_some())
        .collect();
    order.sort_by_key(|&i| (results[i].started_ms, i));
    let mut busy_until: Vec<u64> = Vec::new();
    let mut out = vec![None; results.len()];
    for i in order {
        let start = results[i].started_ms.unwrap_or(0);
        let end = start + results[i].duration_ms.unwrap_or(0);
        let slot = match busy_until.iter().position(|&b| b <= start) {
            Some(s) => s,
            None => {
                busy_until.push(0);
                busy_until.len() - 1
            }
        };
        busy_until[slot] = end.max(start + 1);
        out[i] = Some(slot);
    }
    out
}

/// Chrome trace-event JSON: per dispatched call a complete span for its queue wait and one for
/// its execution, on its slot's track.
pub(crate) fn chrome_trace(run_id: &str, results: &[CallResult]) -> Value {
    let slots = slots(results);
    let mut events = vec![
        json!({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": format!("flux-tools {run_id}")}}),
    ];
    let tracks = slots.iter().flatten().max().map_or(0, |m| m + 1);
    for t in 0..tracks {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": format!("slot {t}")}}));
    }
    for (r, slot) in results.iter().zip(&slots) {
        let (Some(slot), Some(start)) = (slot, r.started_ms) else {
            continue;
        };
        let queued = r.queued_ms.unwrap_or(0);
        if queued > 0 {
            events.push(json!({
                "name": format!("{} (queued)", r.id), "cat": "queue", "ph": "X", "pid": 1, "tid": slot,
                "ts": (start - queued.min(start)) * 1000, "dur": queued * 1000,
                "args": {"waited_on": r.waited_on},
            }));
        }
        events.push(json!({
            "name": r.id, "cat": r.tool, "ph": "X", "pid": 1, "tid": slot,
            "ts": start * 1000, "dur": r.duration_ms.unwrap_or(0) * 1000,
            "args": {"tool": r.tool, "status": r.status, "phase": r.phase, "attempts": r.attempts, "error": r.error},
        }));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(s: Status) -> &'static str {
    match s {
        Status::Ok => "#2f7ed8",
        Status::Error | Status::TimedOut | Status::NotApplied => "#d9534f",
        Status::Indeterminate => "#9b59b6",
        Status::Cancelled | Status::NeverDispatched => "#f0ad4e",
    }
}

/// A Gantt chart: one row per call; queue wait light, execution dark (red when it failed);
/// phase boundaries as dashed lines; a time axis.
pub(crate) fn svg(run_id: &str, outcome: &str, results: &[CallResult]) -> String {
    let (label_w, row_h, top, plot_w) = (220.0, 22.0, 40.0, 760.0);
    let end_ms = results
        .iter()
        .filter_map(|r| Some(r.started_ms? + r.duration_ms.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = |ms: f64| label_w + ms / end_ms * plot_w;
    let height = top + row_h * results.len() as f64 + 40.0;
    let width = label_w + plot_w + 60.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="14">{} · {} · {} calls · {}</text>"#,
        esc(run_id),
        esc(outcome),
        results.len(),
        crate::duration::format(std::time::Duration::from_millis(end_ms as u64))
    );
    // Phase boundaries: where a call's phase differs from the previous one's.
    for (i, r) in results.iter().enumerate().skip(1) {
        if r.phase != results[i - 1].phase {
            let y = top + row_h * i as f64 - 2.0;
            let _ = writeln!(
                s,
                r##"<line class="phase" x1="0" y1="{y}" x2="{width}" y2="{y}" stroke="#888" stroke-dasharray="4 3"/>"##
            );
        }
    }
    for (i, r) in results.iter().enumerate() {
        let y = top + row_h * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="10" y="{}">{} · {}</text>"#,
            y + 14.0,
            esc(&r.id),
            esc(&r.tool)
        );
        let Some(start) = r.started_ms else {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" fill="#a66">{}</text>"##,
                label_w,
                y + 14.0,
                esc(r.status.as_str())
            );
            continue;
        };
        let queued = r.queued_ms.unwrap_or(0).min(start);
        if queued > 0 {
            let _ = writeln!(
                s,
                r##"<rect class="queued" x="{:.1}" y="{}" width="{:.1}" height="{}" fill="#cfd8e3"><title>{} queued {} ms</title></rect>"##,
                x((start - queued) as f64),
                y + 3.0,
                (x(start as f64) - x((start - queued) as f64)).max(1.0),
                row_h - 6.0,
                esc(&r.id),
                queued
            );
        }
        let dur = r.duration_ms.unwrap_or(0);
        let _ = writeln!(
            s,
            r#"<rect class="call {}" x="{:.1}" y="{}" width="{:.1}" height="{}" fill="{}"><title>{} {} {} ms</title></rect>"#,
            r.status.as_str(),
            x(start as f64),
            y + 3.0,
            (x((start + dur) as f64) - x(start as f64)).max(1.0),
            row_h - 6.0,
            color(r.status),
            esc(&r.id),
            r.status.as_str(),
            dur
        );
    }
    let axis_y = top + row_h * results.len() as f64 + 15.0;
    for k in 0..=4 {
        let ms = end_ms * k as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{axis_y}" fill="#555">{}</text>"##,
            x(ms),
            crate::duration::format(std::time::Duration::from_millis(ms as u64))
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(i: usize, start: Option<u64>, dur: u64, status: Status) -> CallResult {
        CallResult {
            index: i,
            id: format!("c{i}"),
            tool: "t".into(),
            called_as: None,
            status,
            event: status.event(),
            output: Value::Null,
            error: None,
            attempts: 1,
            phase: 0,
            idempotency_key: None,
            cached: false,
            settled: None,
            queued_ms: start.map(|_| 5),
            waited_on: None,
            started_ms: start,
            duration_ms: start.map(|_| dur),
        }
    }

    #[test]
    fn slots_are_the_peak_concurrency() {
        let rs = vec![
            r(0, Some(0), 100, Status::Ok),
            r(1, Some(0), 50, Status::Ok),
            r(2, Some(60), 10, Status::Ok),
            r(3, None, 0, Status::NeverDispatched),
        ];
        assert_eq!(slots(&rs), vec![Some(0), Some(1), Some(1), None]);
        let trace = chrome_trace("run-x", &rs);
        let spans = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] != "queue")
            .count();
        assert_eq!(spans, 3, "one complete span per dispatched call");
        let svg = svg("run-x", "completed", &rs);
        assert_eq!(svg.matches("class=\"call ").count(), 3);
        assert!(svg.contains("never_dispatched"));
    }
}
