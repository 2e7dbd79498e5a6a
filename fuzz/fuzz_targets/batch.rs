//! Any text as a batch: parse it, and plan it against a small fixed manifest. Must never panic.
#![no_main]

use std::path::PathBuf;

use flux_tools::{build_plan as build, simulate_plan as simulate, Batch, Manifest, PlanOptions, SourceFile};
use libfuzzer_sys::fuzz_target;

const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 4
[concurrency.per_tool]
a = 2
[lanes.l]
concurrency = 2
rate = "5/s"
[tools.a]
kind = "scripted"
effect = "read"
lanes = ["l"]
[tools.w]
kind = "scripted"
effect = "write"
[tools.alone]
kind = "scripted"
effect = "write"
parallel_safe = false
[tools.a.args]
q = { type = "string", max_length = 5 }
"#;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(manifest) = Manifest::parse(
        SourceFile::new("tools.toml", MANIFEST),
        PathBuf::from("/fuzz/tools.toml"),
        flux_tools::KINDS,
    ) else {
        return;
    };
    if let Ok((batch, _)) = Batch::parse(SourceFile::new("fuzz.yaml", text)) {
        if let Ok(plan) = build(&manifest, &batch, &PlanOptions::default()) {
            let _ = simulate(&plan);
        }
    }
});
