//! The whole promise as a property: random batches of reads and writes on two backends
//! (scripted `kv` tools over one in-memory store) — with references, `after`, tools run
//! alone, cached reads, approvals granted, refused and deferred then resumed, a call cap, a
//! budget, failures and random latencies — run through the real scheduler on tokio's paused
//! clock, and every call compared with a plain interpreter that runs the same batch one call
//! at a time in call order. Whatever schedule the runner picks, each call must get the
//! sequential answer: the same status and kind, the same output, the same cache hit.
//!
//! `PROPTEST_CASES=N` runs more cases (`benches/differential.sh` runs a long one).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;
use crate::batch::Batch;
use crate::error::SourceFile;
use crate::events::{ErrorKind, Status};
use crate::plan::{build, PlanOptions};
use crate::run::gate::{ApprovalRequest, Grant};
use crate::run::store::MemoryLanes;

const BACKENDS: [&str; 2] = ["a", "b"];

/// Per backend: a read, a cached read, a write, a write that needs approval, a write run
/// alone. Writes cost 1.
fn manifest_text() -> String {
    let mut m = String::from(
        "[concurrency]\nmax_concurrent_tools = 3\n[concurrency.per_tool]\nget_a = 1\n",
    );
    for b in BACKENDS {
        m.push_str(&format!(
            r#"
[tools.get_{b}]
kind = "scripted"
effect = "read"
kv = "get"
backend = "{b}"
[tools.cget_{b}]
kind = "scripted"
effect = "read"
kv = "get"
backend = "{b}"
cache = "5m"
[tools.put_{b}]
kind = "scripted"
effect = "write"
kv = "put"
backend = "{b}"
cost = 1.0
[tools.okput_{b}]
kind = "scripted"
effect = "write"
kv = "put"
backend = "{b}"
cost = 1.0
requires_approval = true
[tools.lone_{b}]
kind = "scripted"
effect = "write"
idempotent = true
kv = "put"
backend = "{b}"
parallel_safe = false
"#
        ));
    }
    m
}

/// What the approver answers for a call (deferred calls are granted by `ID@HASH` on resume).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Grant,
    Deny,
    Defer,
}

#[derive(Debug, Clone)]
struct GenCall {
    tool: &'static str,
    backend: usize,
    key: u8,
    value: u8,
    latency_ms: u64,
    fail: bool,
    reference: Option<usize>,
    after: Option<usize>,
    answer: Answer,
}

#[derive(Debug, Clone)]
struct Case {
    calls: Vec<GenCall>,
    max_calls: Option<u32>,
    max_cost: Option<f64>,
}

fn call_strategy() -> impl Strategy<Value = GenCall> {
    let tool = prop::sample::select(vec!["get", "cget", "cget", "put", "okput", "lone"]);
    let answer = prop::sample::select(vec![Answer::Grant, Answer::Deny, Answer::Defer]);
    (
        tool,
        0..BACKENDS.len(),
        0u8..2,
        0u8..50,
        prop::sample::select(vec![0u64, 0, 50, 120, 300]),
        prop::bool::weighted(0.1),
        prop::option::weighted(0.25, any::<prop::sample::Index>()),
        prop::option::weighted(0.15, any::<prop::sample::Index>()),
        answer,
    )
        .prop_map(
            |(tool, backend, key, value, latency_ms, fail, r, a, answer)| GenCall {
                tool,
                backend,
                key,
                value,
                latency_ms,
                fail,
                reference: r.map(|i| i.index(usize::MAX)),
                after: a.map(|i| i.index(usize::MAX)),
                answer,
            },
        )
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(call_strategy(), 1..14),
        prop::option::weighted(0.4, 1u32..8),
        prop::option::weighted(0.25, prop::sample::select(vec![1.0, 2.0, 3.5])),
    )
        .prop_map(|(mut calls, max_calls, max_cost)| {
            // References and `after` point at earlier calls only.
            for (i, c) in calls.iter_mut().enumerate() {
                c.reference = c.reference.filter(|_| i > 0).map(|r| r % i.max(1));
                c.after = c.after.filter(|_| i > 0).map(|a| a % i.max(1));
            }
            Case {
                calls,
                max_calls,
                max_cost,
            }
        })
}

/// The batch as JSON: ids `c0`, `c1`, …
fn batch_json(case: &Case) -> String {
    let calls: Vec<Value> = case
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let b = BACKENDS[c.backend];
            let mut args = Map::new();
            args.insert("key".into(), json!(format!("{b}{}", c.key)));
            let writes = c.tool != "get" && c.tool != "cget";
            if writes {
                let value = match c.reference {
                    Some(r) => json!(format!("${{c{r}}}")),
                    None => json!(c.value),
                };
                args.insert("value".into(), value);
            }
            if c.latency_ms > 0 {
                args.insert("_latency".into(), json!(format!("{}ms", c.latency_ms)));
            }
            if c.fail {
                args.insert("_fail".into(), json!(true));
            }
            let mut call =
                json!({"id": format!("c{i}"), "tool": format!("{}_{b}", c.tool), "args": args});
            if let Some(a) = c.after {
                call["after"] = json!([format!("c{a}")]);
            }
            call
        })
        .collect();
    let mut doc = json!({ "calls": calls });
    if let Some(n) = case.max_calls {
        doc["budget"] = json!({ "max_calls": n });
    }
    if let Some(c) = case.max_cost {
        doc["budget"]
            .as_object_mut()
            .map(|b| b.insert("max_cost".into(), json!(c)))
            .unwrap_or_else(|| {
                doc["budget"] = json!({ "max_cost": c });
                None
            });
    }
    doc.to_string()
}

struct Decide(HashMap<String, Answer>);

impl crate::run::gate::Approver for Decide {
    fn ask(
        self: Arc<Self>,
        r: ApprovalRequest,
    ) -> crate::run::store::BoxFuture<'static, crate::run::Ruling> {
        use crate::run::Ruling;
        let ruling = match self.0.get(&r.id) {
            Some(Answer::Grant) => Ruling::Approved,
            Some(Answer::Deny) => Ruling::Denied("approval denied on the terminal".into()),
            _ => Ruling::Unanswered,
        };
        Box::pin(std::future::ready(ruling))
    }
}

/// What a call ended as, as far as the promise speaks of it. Which of two identical reads
/// with no write between them is the one answered from the cache is the schedule's choice:
/// `cached` is compared as a count per run, not call by call.
#[derive(Debug, Clone)]
struct Seen {
    status: Status,
    kind: Option<ErrorKind>,
    output: Value,
    cached: bool,
}

impl PartialEq for Seen {
    fn eq(&self, o: &Seen) -> bool {
        (self.status, self.kind, &self.output) == (o.status, o.kind, &o.output)
    }
}

impl Seen {
    fn of(r: &CallResult) -> Seen {
        Seen {
            status: r.status,
            kind: r.error.as_ref().map(|e| e.kind),
            output: if r.is_ok() {
                r.output.clone()
            } else {
                Value::Null
            },
            cached: r.cached,
        }
    }
    fn failed(status: Status, kind: ErrorKind) -> Seen {
        Seen {
            status,
            kind: Some(kind),
            output: Value::Null,
            cached: false,
        }
    }
    fn never(kind: ErrorKind) -> Seen {
        Seen::failed(Status::NeverDispatched, kind)
    }
    fn ok(output: Value, cached: bool) -> Seen {
        Seen {
            status: Status::Ok,
            kind: None,
            output,
            cached,
        }
    }
}

mod sequential;
use sequential::Sequential;

/// The runner's answers for a case: the first run, and (when calls were deferred) the
/// resumed run that approves them; the calls each run dispatched.
struct Runner {
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    lanes: Arc<dyn crate::run::store::LaneStore>,
    cache: Arc<crate::run::cache::Cache>,
    tools: Arc<Vec<Arc<crate::tools::ToolImpl>>>,
    dir: tempfile::TempDir,
}

impl Runner {
    fn new(manifest: Arc<Manifest>, plan: Arc<Plan>) -> Runner {
        let lanes: Arc<dyn crate::run::store::LaneStore> = Arc::new(MemoryLanes::new(&plan.lanes));
        let cache = crate::run::cache::Cache::new(lanes.cache_store(), "run-d", false);
        let tools = Arc::new(tool_impls(&manifest, &plan, None));
        Runner {
            manifest,
            plan,
            lanes,
            cache,
            tools,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    async fn run(&self, decide: Arc<Decide>, approvals: Approvals, resume: bool) -> RunReport {
        let path = self.dir.path().join("journal.jsonl");
        let resumed = if resume {
            Some(Arc::new(
                crate::run::journal::Resume::load(&path).expect("journal"),
            ))
        } else {
            None
        };
        let (journal, thread) = crate::run::journal::Journal::open(&path).expect("journal");
        if !resume {
            journal.record(json!({"type": "run", "run_id": "run-d", "manifest": "m"}));
        }
        let config = RunConfig {
            approvals,
            approver: decide,
            journal: Some(journal),
            resume: resumed,
            cache: Some(self.cache.clone()),
            tools: Some(self.tools.clone()),
            ..RunConfig::bare("run-d", self.lanes.clone())
        };
        let (_signals, rx) = mpsc::unbounded_channel();
        let report = execute(self.manifest.clone(), self.plan.clone(), config, rx).await;
        let _ = thread.join();
        report
    }
}

/// Run a case through the scheduler and the interpreter; `Err` names the first call whose
/// answers differ.
fn check(case: &Case) -> Result<(), String> {
    let manifest = Arc::new(
        Manifest::parse(
            SourceFile::new("tools.toml", manifest_text().as_str()),
            PathBuf::from("/d/tools.toml"),
            crate::tools::KINDS,
        )
        .map_err(|d| format!("manifest: {d:?}"))?,
    );
    let text = batch_json(case);
    let (batch, _) =
        Batch::parse(SourceFile::new("b.json", text.as_str())).map_err(|d| format!("{d:?}"))?;
    let plan =
        Arc::new(build(&manifest, &batch, &PlanOptions::default()).map_err(|d| format!("{d:?}"))?);
    let answers: HashMap<String, Answer> = case
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("c{i}"), c.answer))
        .collect();
    let decide = Arc::new(Decide(answers));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let runner = Runner::new(manifest.clone(), plan.clone());
    let first = runtime.block_on(runner.run(decide.clone(), Approvals::Ask, false));
    let mut seq = Sequential::new(&manifest, &plan, &case.calls);
    let expected = seq.run(None);
    compare(
        "first run",
        &text,
        &first.results,
        &expected,
        case.max_calls,
        first.calls_made,
    )?;
    // What `flux-tools approvals` lists is what the resumed run approves, by ID@HASH.
    let journal = crate::run::journal::Resume::load(&runner.dir.path().join("journal.jsonl"))?;
    let listed: Vec<usize> = journal.awaiting.iter().map(|a| a.index).collect();
    let mut want: Vec<usize> = seq.deferred.iter().copied().collect();
    want.sort_unstable();
    if listed != want {
        return Err(format!(
            "deferred {listed:?}, the sequential run {want:?}\nbatch: {text}"
        ));
    }
    let deferred: Vec<Grant> = journal
        .awaiting
        .iter()
        .map(|a| Grant::Call {
            id: a.id.clone(),
            hash: a.hash.clone(),
        })
        .collect();
    if first.outcome != Outcome::Paused || deferred.is_empty() {
        return Ok(());
    }
    let second = runtime.block_on(runner.run(decide, Approvals::Some(deferred), true));
    let expected = seq.run(Some(&expected));
    compare(
        "resumed run",
        &text,
        &second.results,
        &expected,
        case.max_calls,
        second.calls_made,
    )
}

fn compare(
    which: &str,
    batch: &str,
    got: &[CallResult],
    want: &[Seen],
    max_calls: Option<u32>,
    made: u64,
) -> Result<(), String> {
    for (r, w) in got.iter().zip(want) {
        let seen = Seen::of(r);
        if &seen != w {
            return Err(format!(
                "{which}: call {} got {seen:?}, the sequential run {w:?}\nbatch: {batch}\nresults: {}",
                r.id,
                serde_json::to_string(got).unwrap_or_default()
            ));
        }
    }
    let hits = |cached: &mut dyn Iterator<Item = bool>| cached.filter(|&c| c).count();
    let (got_hits, want_hits) = (
        hits(&mut got.iter().map(|r| r.cached)),
        hits(&mut want.iter().map(|w| w.cached)),
    );
    if got_hits != want_hits {
        return Err(format!(
            "{which}: {got_hits} cache hits, the sequential run {want_hits}\nbatch: {batch}\nresults: {}",
            serde_json::to_string(got).unwrap_or_default()
        ));
    }
    if let Some(max) = max_calls {
        if made > u64::from(max) {
            return Err(format!(
                "{which}: {made} calls made under a cap of {max}\nbatch: {batch}"
            ));
        }
    }
    Ok(())
}

/// [`check`] on a thread of its own: a run that never ends (a scheduler that loses a call)
/// is reported, not waited for.
fn watched(case: Case) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let text = batch_json(&case);
    std::thread::spawn(move || {
        let _ = tx.send(check(&case));
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| Err(format!("the run never ended\nbatch: {text}")))
}

/// `PROPTEST_CASES`, else 256.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn any_schedule_gives_the_sequential_answer(case in case_strategy()) {
        if let Err(e) = watched(case) {
            prop_assert!(false, "{}", e);
        }
    }
}
