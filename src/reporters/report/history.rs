//! `flux-tools report --history FILE`: a history's periods as a table (or JSON), the shift in
//! fan-out width if there was one, and a picture of width and cost over time.

use std::fmt::Write as _;

use comfy_table::{presets, ContentArrangement, Table};

use crate::events::trim_float;
use crate::history::analysis::{Analysis, Period};

/// A table per period, then the shift verdict.
pub(crate) fn to_table(a: &Analysis) -> String {
    let mut out = String::new();
    let by = match a.by {
        Period::Hour => "hour",
        Period::Day => "day",
    };
    let _ = writeln!(
        out,
        "{} run(s) by {by}{}",
        a.runs,
        if a.skipped > 0 {
            format!(" ({} line(s) skipped: not run records)", a.skipped)
        } else {
            String::new()
        }
    );
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .force_no_tty()
        .set_header([
            "period",
            "turns",
            "width p50/p95/max",
            "speed-up",
            "peak per shared lane",
            "429s",
            "cost/turn tools",
            "cost/turn model",
        ]);
    for r in &a.rows {
        let lanes: Vec<String> = r
            .lane_peaks
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect();
        t.add_row(vec![
            r.period.clone(),
            r.turns.to_string(),
            format!("{}/{}/{}", r.width_p50, r.width_p95, r.width_max),
            format!("{:.1}×", r.speedup),
            if lanes.is_empty() {
                "—".into()
            } else {
                lanes.join(", ")
            },
            r.http_429.to_string(),
            trim_float(r.tool_cost_per_turn),
            r.model_cost_per_turn.map_or_else(|| "—".into(), trim_float),
        ]);
    }
    let _ = writeln!(out, "{t}");
    draw_limits(&mut out, a);
    if !a.settled.is_empty() {
        let phrase = super::summary::settled_phrase(&a.settled);
        let _ = writeln!(out, "{phrase}");
    }
    match &a.shift {
        Some(s) => {
            let _ = writeln!(
                out,
                "shift: fan-out width moved {} at {} — p95 {} (over {} turns) against {} before (over {} turns)",
                s.direction, s.period, s.p95, s.turns, s.p95_before, s.turns_before
            );
        }
        None => {
            let _ = writeln!(out, "shift: none (the width distribution held steady)");
        }
    }
    out
}

/// The analysis as one JSON document.
pub(crate) fn to_json(a: &Analysis) -> String {
    serde_json::to_string(a).unwrap_or_else(|_| "{}".into())
}

/// Width (p50, p95, max) and cost per turn over the periods, as an SVG line chart; the
/// shift, if any, is marked.
pub(crate) fn svg(a: &Analysis) -> String {
    const W: f64 = 900.0;
    const H: f64 = 240.0;
    const LEFT: f64 = 60.0;
    const GAP: f64 = 60.0;
    let n = a.rows.len().max(1);
    let x = |i: usize| LEFT + (W - LEFT - 20.0) * (i as f64 + 0.5) / n as f64;
    let mut out = String::new();
    let total_h = 2.0 * H + 3.0 * GAP;
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let widths = |f: &dyn Fn(&crate::history::analysis::Row) -> f64| -> Vec<f64> {
        a.rows.iter().map(f).collect()
    };
    let charts: [(&str, f64, Vec<Series<'_>>); 2] = [
        (
            "fan-out width per turn",
            GAP,
            vec![
                ("max", "#999999", widths(&|r| r.width_max as f64)),
                ("p95", "#cc3311", widths(&|r| r.width_p95 as f64)),
                ("p50", "#4477aa", widths(&|r| r.width_p50 as f64)),
            ],
        ),
        (
            "cost per turn",
            2.0 * GAP + H,
            vec![
                ("tools", "#228833", widths(&|r| r.tool_cost_per_turn)),
                (
                    "model",
                    "#aa3377",
                    widths(&|r| r.model_cost_per_turn.unwrap_or(0.0)),
                ),
            ],
        ),
    ];
    for (title, top, series) in &charts {
        chart(&mut out, title, *top, H, series, &x);
    }
    if let Some(s) = &a.shift {
        if let Some(i) = a.rows.iter().position(|r| r.period == s.period) {
            let _ = writeln!(
                out,
                r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#ee7733" stroke-dasharray="4 3"/><text x="{3:.1}" y="{4}" fill="#ee7733">width moved {5} here</text>"##,
                x(i),
                GAP,
                GAP + H,
                x(i) + 4.0,
                GAP + 14.0,
                s.direction
            );
        }
    }
    for (i, r) in a.rows.iter().enumerate() {
        if n <= 24 || i % n.div_ceil(24) == 0 {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
                x(i),
                total_h - 12.0,
                escape(&r.period)
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

/// A line: its name, its colour and a value per period.
type Series<'a> = (&'a str, &'a str, Vec<f64>);

/// One chart: axis, title, a polyline and a legend entry per series.
fn chart(
    out: &mut String,
    title: &str,
    top: f64,
    h: f64,
    series: &[Series<'_>],
    x: &dyn Fn(usize) -> f64,
) {
    let max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let y = |v: f64| top + h - h * v / max;
    let _ = writeln!(
        out,
        r##"<text x="60" y="{}" font-weight="bold">{title}</text><line x1="60" y1="{top}" x2="60" y2="{}" stroke="#333"/><line x1="60" y1="{1}" x2="880" y2="{1}" stroke="#333"/><text x="54" y="{}" text-anchor="end">{}</text><text x="54" y="{1}" text-anchor="end">0</text>"##,
        top - 8.0,
        top + h,
        top + 10.0,
        trim_float(max),
    );
    for (k, (name, color, values)) in series.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{color}">{name}</text>"#,
            points.join(" "),
            700.0 + 60.0 * k as f64,
            top - 8.0
        );
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Each learned lane's limit by period, drawn: a bar to its last limit (scaled to the highest
/// seen), and its range.
fn draw_limits(out: &mut String, a: &Analysis) {
    let lanes: std::collections::BTreeSet<&String> =
        a.rows.iter().flat_map(|r| r.lane_limits.keys()).collect();
    for lane in lanes {
        let spans: Vec<_> = (a.rows.iter())
            .filter_map(|r| r.lane_limits.get(lane).map(|s| (&r.period, s)))
            .collect();
        let top = spans
            .iter()
            .map(|(_, s)| s.highest)
            .max()
            .unwrap_or(1)
            .max(1);
        let _ = writeln!(out, "learned limit of {lane}:");
        for (period, s) in spans {
            let bar = "█".repeat((s.last as usize * 24).div_ceil(top as usize));
            let _ = writeln!(
                out,
                "  {period:<16} {bar:<24} {} ({}–{})",
                s.last, s.lowest, s.highest
            );
        }
    }
}
