//! The history's record arithmetic and its analysis.

use serde_json::json;

use super::analysis::{analyse, percentile, Period};

fn line(time: &str, width: usize) -> String {
    json!({
        "time": time, "run_id": "r", "tenant": "t", "manifest": "m", "input_format": "batch",
        "outcome": "completed", "calls": width, "width": width, "peak_in_flight": width,
        "wall_ms": 100, "tool_time_ms": 100 * width as u64, "critical_path_ms": 100,
        "retries": 0, "http_429": 1, "cost": 0.01, "cost_by_tool": {},
        "lanes": [{"lane": "tool:search", "limit": 4, "peak": 2, "held_elsewhere": 1, "rejections": 1},
                  {"lane": "turn", "limit": 8, "peak": 9, "held_elsewhere": null, "rejections": 0}],
        "model": {"name": "gpt-4o", "input_tokens": 1000, "output_tokens": 100, "cost": 0.0035},
    })
    .to_string()
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<usize> = (1..=20).collect();
    assert_eq!(percentile(&v, 50), 10);
    assert_eq!(percentile(&v, 95), 19);
    assert_eq!(percentile(&[7], 95), 7);
    assert_eq!(percentile(&[], 95), 0);
}

#[test]
fn a_width_jump_is_flagged_at_the_hour_it_happened() {
    let mut text = String::new();
    for h in 0..6 {
        for m in 0..10 {
            // Width 3 or 4 until 04:00, then 8 or 9.
            let w = if h < 4 { 3 + m % 2 } else { 8 + m % 2 };
            text.push_str(&line(&format!("2026-11-30T{h:02}:{m:02}:00Z"), w));
            text.push('\n');
        }
    }
    text.push_str("not json\n");
    let a = analyse(text.as_bytes(), None, 5).unwrap();
    assert_eq!(a.by, Period::Hour);
    assert_eq!((a.runs, a.skipped), (60, 1));
    assert_eq!(a.rows.len(), 6);
    let first = &a.rows[0];
    assert_eq!(first.period, "2026-11-30 00:00");
    assert_eq!(
        (
            first.turns,
            first.width_p50,
            first.width_p95,
            first.width_max
        ),
        (10, 3, 4, 4)
    );
    assert_eq!(first.speedup, 3.5);
    assert_eq!(first.http_429, 10);
    assert_eq!(first.lane_peaks.get("tool:search"), Some(&3));
    assert!(!first.lane_peaks.contains_key("turn"));
    assert_eq!(first.tool_cost_per_turn, 0.01);
    assert_eq!(first.model_cost_per_turn, Some(0.0035));
    let shift = a.shift.expect("a shift");
    assert_eq!(shift.period, "2026-11-30 04:00");
    assert_eq!((shift.direction, shift.p95_before, shift.p95), ("up", 4, 9));
    assert_eq!(shift.turns_before, 40);
}

#[test]
fn steady_widths_raise_nothing_and_long_spans_go_by_day() {
    let mut text = String::new();
    for d in 1..=6 {
        for m in 0..10 {
            text.push_str(&line(&format!("2026-11-0{d}T10:{m:02}:00Z"), 4 + m % 3));
            text.push('\n');
        }
    }
    let a = analyse(text.as_bytes(), None, 5).unwrap();
    assert_eq!(a.by, Period::Day);
    assert_eq!(a.rows.len(), 6);
    assert!(a.shift.is_none(), "{:?}", a.shift);
    // Too few turns per period: no verdict either way.
    let a = analyse(text.as_bytes(), Some(Period::Day), 11).unwrap();
    assert!(a.shift.is_none());
}

#[test]
fn the_peak_in_flight_is_measured_from_the_calls_intervals() {
    use crate::events::{CallResult, Status};
    let r = |start: u64, dur: u64, cached: bool| CallResult {
        index: 0,
        id: "c".into(),
        tool: "t".into(),
        called_as: None,
        status: Status::Ok,
        event: "TOOL_RESULT",
        output: serde_json::Value::Null,
        error: None,
        attempts: 1,
        phase: 0,
        idempotency_key: None,
        cached,
        settled: None,
        queued_ms: Some(0),
        waited_on: None,
        started_ms: Some(start),
        duration_ms: Some(dur),
    };
    // Three overlap in 100..150; the fourth starts as the first ends; a hit invokes nothing.
    let results = [
        r(0, 100, false),
        r(50, 100, false),
        r(100, 50, false),
        r(100, 10, false),
        r(60, 500, true),
    ];
    assert_eq!(super::peak_in_flight(&results), 3);
}

#[test]
fn a_model_is_priced_by_its_name_or_the_longest_prefix() {
    let m = crate::manifest::Manifest::parse(
        crate::error::SourceFile::new(
            "t.toml",
            "[models.\"gpt-4o\"]\ninput_per_mtok = 2.5\noutput_per_mtok = 10\n[models.\"gpt-4o-mini\"]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\n",
        ),
        std::path::PathBuf::from("/t/tools.toml"),
        crate::tools::KINDS,
    )
    .unwrap();
    let usage = |name: &str| crate::model_formats::Usage {
        model: Some(name.into()),
        input_tokens: 1_000_000,
        output_tokens: 100_000,
    };
    let cost = |name: &str| super::model_record(&usage(name), &m).cost;
    assert_eq!(cost("gpt-4o-2024-08-06"), Some(3.5));
    assert_eq!(cost("gpt-4o-mini-2024-07-18"), Some(0.21));
    assert_eq!(cost("claude-sonnet-4-5"), None);
}
