//! The cost of one call in a long-lived engine — what `run --turns` and `mcp serve` pay for
//! every call an agent makes: `cargo build --release --examples --bins &&
//! target/release/examples/call_overhead [CALLS]`.
//!
//! Rows, each a p50 and p99 over CALLS calls (default 20,000, after 1,000 to warm up), the
//! tool an inline `scripted` one with no latency (its own time is nothing):
//! - `engine`: in this process, the gateway's path for one call — plan a one-call batch and
//!   run it on a memory lane store with tools built once — from before the plan to the result
//!   in hand (dispatch to result, with the plan that dispatch needs);
//! - `engine + local store`: the same on the machine's `local` store (the default);
//! - `run --turns`: a `flux-tools run --turns` child (the release binary beside this example),
//!   one call a turn: a line written to its stdin until its answer line is read.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_tools::{
    build_plan, execute, tool_impls, Args, Batch, Call, LaneStore, LocalLanes, Manifest,
    MemoryLanes, PlanOptions, RunConfig, SourceFile,
};

const MANIFEST: &str = "[tools.z]\nkind = \"scripted\"\neffect = \"read\"\n";
const WARM: usize = 1_000;

fn one_call(seq: usize) -> Batch {
    let mut b = Batch::empty("<bench>");
    b.calls.push(Call {
        id: format!("c{seq}"),
        explicit_id: false,
        tool: "z".into(),
        args: Arc::new(Args {
            value: serde_json::Map::new(),
            holes: Vec::new(),
        }),
        after: Vec::new(),
        invalid: None,
    });
    b
}

fn config(lanes: Arc<dyn LaneStore>, tools: &Arc<Vec<Arc<flux_tools::ToolImpl>>>) -> RunConfig {
    RunConfig {
        tools: Some(tools.clone()),
        ..RunConfig::bare("run-bench", lanes)
    }
}

/// Each call's time through the engine on `lanes`.
fn engine(manifest: &Arc<Manifest>, lanes: Arc<dyn LaneStore>, calls: usize) -> Vec<Duration> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let opts = PlanOptions::default();
    let tools = {
        let plan = build_plan(manifest, &one_call(0), &opts).expect("plan");
        Arc::new(tool_impls(manifest, &plan, None))
    };
    let manifest = manifest.clone();
    rt.block_on(async move {
        let mut times = Vec::with_capacity(calls);
        for seq in 0..WARM + calls {
            let t0 = Instant::now();
            let plan = build_plan(&manifest, &one_call(seq), &opts).expect("plan");
            let (_ctl, rx) = tokio::sync::mpsc::unbounded_channel();
            let cfg = config(lanes.clone(), &tools);
            let report = execute(manifest.clone(), Arc::new(plan), cfg, rx).await;
            let took = t0.elapsed();
            assert!(report.results[0].is_ok(), "{:?}", report.results[0]);
            if seq >= WARM {
                times.push(took);
            }
        }
        times
    })
}

/// Each turn's round trip through a `run --turns` child, one call a turn.
fn turns(flux: &PathBuf, manifest: &std::path::Path, calls: usize) -> Vec<Duration> {
    let mut child = Command::new(flux)
        .args(["--manifest", manifest.to_str().unwrap_or_default()])
        .args(["run", "--turns", "-q", "--lane-store", "memory"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("flux-tools run --turns (build the release binary)");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut times = Vec::with_capacity(calls);
    for i in 0..WARM + calls {
        let t0 = Instant::now();
        stdin
            .write_all(b"[{\"tool\":\"z\"}]\n")
            .expect("write a turn");
        stdin.flush().expect("flush");
        line.clear();
        stdout.read_line(&mut line).expect("read the answer");
        let took = t0.elapsed();
        assert!(line.contains("\"ok\""), "{line}");
        if i >= WARM {
            times.push(took);
        }
    }
    drop(stdin);
    let _ = child.wait();
    times
}

fn row(name: &str, mut t: Vec<Duration>) {
    t.sort_unstable();
    let at = |q: f64| t[((t.len() as f64 * q) as usize).min(t.len() - 1)];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<24} {:>9.1} {:>9.1} {:>9.1}",
        us(at(0.5)),
        us(at(0.99)),
        us(at(0.999))
    );
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("a scratch folder");
    let path = dir.path().join("tools.toml");
    std::fs::write(&path, MANIFEST).expect("write the manifest");
    let manifest = Manifest::parse(
        SourceFile::new("tools.toml", MANIFEST),
        path.clone(),
        flux_tools::KINDS,
    )
    .expect("the manifest");
    let manifest = Arc::new(manifest);
    let plan = build_plan(&manifest, &one_call(0), &PlanOptions::default()).expect("plan");
    println!("one zero-latency scripted call, {calls} times (µs)");
    println!("{:<24} {:>9} {:>9} {:>9}", "", "p50", "p99", "p99.9");
    let memory: Arc<dyn LaneStore> = Arc::new(MemoryLanes::new(&plan.lanes));
    row("engine", engine(&manifest, memory, calls));
    match LocalLanes::new(&plan.lanes, &path) {
        Ok(local) => row(
            "engine + local store",
            engine(&manifest, Arc::new(local), calls),
        ),
        Err(e) => println!("engine + local store: not here ({e})"),
    }
    let flux = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("flux-tools")))
        .filter(|p| p.exists());
    match flux {
        Some(flux) => row("run --turns", turns(&flux, &path, calls)),
        None => println!("run --turns: no release flux-tools beside this example"),
    }
}
