//! The run history: concurrent runs append whole lines, model replies are priced, and
//! `report --history` groups runs and names the hour the fan-out width moved.

use std::path::Path;

use serde_json::Value;

use crate::common::{repo, Project};

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn thirty_runs_from_three_processes_append_thirty_whole_lines() {
    let p = Project::new(
        r#"
[concurrency]
max_concurrent_tools = 4
[tools.read]
kind = "scripted"
effect = "read"
latency = "1ms"
"#,
    );
    let calls: String = (0..6)
        .map(|i| format!("- {{ id: c{i}, tool: read, args: {{ n: {i} }} }}\n"))
        .collect();
    let b = p.write("b.yaml", &calls);
    let history = p.path().join("history.jsonl");
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (b, h) = (b.clone(), history.clone());
            let dir = p.path().to_path_buf();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let out = crate::common::flux()
                        .current_dir(&dir)
                        .args(["run", b.to_str().unwrap(), "--format", "json", "-q"])
                        .env("FLUX_TOOLS_HISTORY", &h)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{:?}\n{}\n{}",
                        out.status,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let records = lines(&history);
    assert_eq!(records.len(), 30, "{records:?}");
    let mut ids: Vec<&str> = records
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 30, "every run once");
    for r in &records {
        assert!(r["time"].as_str().unwrap().ends_with('Z'), "{r}");
        assert_eq!(r["input_format"], "batch", "{r}");
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!(r["calls"], 6, "{r}");
        assert_eq!(r["width"], 4, "the turn lane holds 4: {r}");
        let peak = r["peak_in_flight"].as_u64().unwrap();
        assert!((1..=4).contains(&peak), "{r}");
        let lanes = r["lanes"].as_array().unwrap();
        assert!(lanes.iter().any(|l| l["lane"] == "turn"), "{r}");
        assert!(r["model"].is_null(), "{r}");
    }
}

#[test]
fn a_models_usage_is_priced_from_the_manifest() {
    let p = Project::new(
        r#"
[history]
path = "runs.jsonl"

[models."gpt-4o"]
input_per_mtok = 2.5
output_per_mtok = 10

[models."claude-sonnet-4-5"]
input_per_mtok = 3
output_per_mtok = 15

[tools.lookup]
kind = "scripted"
effect = "read"
"#,
    );
    for provider in ["openai", "anthropic", "gemini"] {
        let reply = repo().join(format!("tests/fixtures/sdk/{provider}-usage.json"));
        let out = p
            .cmd()
            .args(["run", reply.to_str().unwrap(), "-q"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let records = lines(&p.path().join("runs.jsonl"));
    let model = |i: usize| &records[i]["model"];
    // OpenAI: 1,200 in at 2.5/M + 85 out at 10/M.
    assert_eq!(records[0]["input_format"], "openai");
    assert_eq!(model(0)["name"], "gpt-4o-2024-08-06");
    assert_eq!(
        (
            model(0)["input_tokens"].as_u64(),
            model(0)["output_tokens"].as_u64()
        ),
        (Some(1200), Some(85))
    );
    assert_eq!(model(0)["cost"].as_f64(), Some(0.00385));
    // Anthropic: 1,500 in + 300 read from its cache at 3/M + 120 out at 15/M.
    assert_eq!(model(1)["name"], "claude-sonnet-4-5-20250929");
    assert_eq!(model(1)["input_tokens"], 1800);
    assert_eq!(model(1)["cost"].as_f64(), Some(0.0072));
    // Gemini: counted, but the manifest prices no such model.
    assert_eq!(model(2)["input_tokens"], 900);
    assert!(model(2)["cost"].is_null());
}

#[test]
fn report_names_the_hour_the_width_moved_and_draws_it() {
    let fixture = repo().join("tests/fixtures/history/width-jump.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("h.svg");
    let out = crate::common::flux()
        .args([
            "report",
            "--history",
            fixture.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("80 run(s) by hour"), "{table}");
    assert!(
        table.contains("shift: fan-out width moved up at 2026-11-30 05:00"),
        "{table}"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.contains("width moved up here"));

    let out = crate::common::flux()
        .args([
            "report",
            "--history",
            fixture.to_str().unwrap(),
            "--format",
            "json",
            "--by",
            "day",
        ])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["by"], "day");
    assert_eq!(doc["rows"].as_array().unwrap().len(), 1);
    assert_eq!(doc["rows"][0]["width_max"], 10);
}
