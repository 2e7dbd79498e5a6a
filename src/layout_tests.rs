//! Limits the compiler does not keep, kept by a test: the layers point one way, and no source
//! file grows past 800 lines.
//!
//! [`LAYERS`] ranks every top-level module; a `crate::…` path in a file (a `use` or inline,
//! comments aside) may name its own module, a module of a lower layer, or one of its own layer
//! that [`SIDEWAYS`] allows. Anything else is a back-arrow and fails `cargo test`.
//!
//! Test files (`tests.rs`, `*_tests.rs`) may reach up for real parts, as a crate's
//! dev-dependencies may: the manifest's tests parse tools of the real kinds, which live a layer
//! above it. The code they test may not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every top-level module, by layer, lowest first.
const LAYERS: &[&[&str]] = &[
    // The ground: types and helpers everyone shares.
    &[
        "events",
        "error",
        "glob",
        "duration",
        "hash",
        "ids",
        "trace_context",
        "yaml",
        "schema",
    ],
    // The model: what a manifest, a batch and a model's reply say.
    &[
        "template",
        "model_formats",
        "reference",
        "manifest",
        "batch",
        "lock",
    ],
    &["plan"],
    &["tools"],
    &["store"],
    &["run"],
    // The reporters.
    &["history", "report"],
    // The face: the command line's words, then what the commands do with them.
    &["cli"],
    &["app"],
];

/// Edges inside one layer that are allowed: (from, to).
const SIDEWAYS: &[(&str, &str)] = &[
    ("reference", "template"),
    ("manifest", "template"),
    ("manifest", "reference"),
    ("batch", "manifest"),
    ("batch", "reference"),
    ("batch", "model_formats"),
    ("report", "history"),
    ("model_formats", "schema"),
    ("trace_context", "hash"),
    ("schema", "error"),
];

/// Edges the layers would allow but the design does not: the command line's words are its
/// own, mapped by the face onto the runner's (nothing of the runner is parsed in `cli.rs`).
const NEVER: &[(&str, &str)] = &[("cli", "run"), ("cli", "tools"), ("cli", "plan")];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Every source file under `src/`.
fn all_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    files
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The folder each layer of [`LAYERS`] lives in under `src/` (`None`: each of its modules is
/// a folder of its own at the top).
const FOLDERS: &[Option<&str>] = &[
    Some("ground"),
    Some("model"),
    None,
    None,
    None,
    None,
    Some("reporters"),
    Some("face"),
    Some("face"),
];

/// The module a source file belongs to, as the crate names it (`crate::events`, whose file is
/// `ground/events.rs`); `None`: the crate's root files and the layer folders' own `mod.rs`.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let mut parts = rel
        .components()
        .map(|c| c.as_os_str().to_str().unwrap_or(""));
    let mut first = parts.next()?;
    if FOLDERS.contains(&Some(first)) {
        first = parts.next()?;
        if first == "mod.rs" {
            return None;
        }
    }
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main", "layout_tests"].contains(&name)).then(|| name.to_string())
}

/// The top-level modules `code` names through `crate::` (in paths and in `use crate::{…}`
/// groups), comments aside.
fn named(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            // A layer's folder (`crate::face::app`) names the module inside it.
            for folder in FOLDERS.iter().flatten() {
                if let Some(inner) = rest.strip_prefix(folder).and_then(|r| r.strip_prefix("::")) {
                    rest = inner;
                }
            }
            let group = rest
                .strip_prefix('{')
                .map(|g| g.split('}').next().unwrap_or(g));
            let heads: Vec<&str> = match group {
                Some(g) => g.split(',').collect(),
                None => vec![rest],
            };
            for h in heads {
                let ident: String = h
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() && ident != "self" {
                    out.insert(ident);
                }
            }
        }
    }
    out
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Whether `file` holds tests only (`tests.rs`, `*_tests.rs`).
fn is_test_file(file: &Path) -> bool {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests")
}

/// Every edge between top-level modules that code (not a test file) makes, with its file.
fn edges() -> Vec<((String, String), PathBuf)> {
    let files = all_sources();
    let mut out = Vec::new();
    for f in files.iter().filter(|f| !is_test_file(f)) {
        let Some(from) = module_of(f) else { continue };
        let code = std::fs::read_to_string(f).unwrap_or_default();
        for to in named(&code) {
            if to != from {
                out.push(((from.clone(), to), f.clone()));
            }
        }
    }
    out
}

/// Whether an edge goes the way the layers allow.
fn allowed(from: &str, to: &str) -> bool {
    if NEVER.contains(&(from, to)) {
        return false;
    }
    match (rank(from), rank(to)) {
        (Some(a), Some(b)) if b < a => true,
        (Some(a), Some(b)) if a == b => SIDEWAYS.contains(&(from, to)),
        _ => false,
    }
}

/// `src/` shows the layers as folders: each module sits in its layer's folder.
#[test]
fn each_module_sits_in_its_layers_folder() {
    assert_eq!(LAYERS.len(), FOLDERS.len());
    let mut bad = BTreeSet::new();
    for f in all_sources() {
        let Some(m) = module_of(&f) else { continue };
        let Some(layer) = rank(&m) else { continue };
        let rel = f.strip_prefix(src()).unwrap_or(&f);
        let top = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().to_string());
        let want = FOLDERS[layer].map_or(m.clone(), str::to_string);
        if top.as_deref() != Some(want.as_str()) {
            bad.insert(format!("{}: `{m}` belongs in {want}/", rel.display()));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn every_module_has_a_layer() {
    let files = all_sources();
    let missing: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_of(f))
        .filter(|m| rank(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "modules with no layer in LAYERS: {missing:?}"
    );
}

#[test]
fn layers_point_one_way() {
    let all = edges();
    let bad: BTreeSet<String> = all
        .iter()
        .filter(|((a, b), _)| !allowed(a, b))
        .map(|((a, b), f)| format!("{} → {b} ({a} may not name {b}; see LAYERS)", f.display()))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_edge_reader_sees_groups_and_skips_comments() {
    let code = "use crate::{run::Flow, plan};\n// crate::app\nlet x = crate::tools::X;";
    let seen: Vec<String> = named(code).into_iter().collect();
    assert_eq!(seen, ["plan", "run", "tools"]);
}

#[test]
fn no_source_file_is_over_800_lines() {
    let files = all_sources();
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > 800).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "{long:#?}");
}

/// The text of every source file under `dir` (relative to `src/`), with its path.
fn texts_under(dir: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let root = src().join(dir);
    if root.is_file() {
        files.push(root);
    } else {
        sources(&root, &mut files);
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            (f, text)
        })
        .collect()
}

/// Where `needle` is written (outside comments) in the sources, as `path:line`.
fn written(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (f, text) in texts_under("") {
        if f.ends_with("layout_tests.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if line.contains(needle) && !line.trim_start().starts_with("//") {
                let rel = f.strip_prefix(src()).unwrap_or(&f).display().to_string();
                out.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    out
}

/// Every run ends in one place: the history record is made and spans are exported in
/// `app/finish.rs` alone (ARCHITECTURE.md, "A run's end").
#[test]
fn a_run_ends_in_one_place() {
    for needle in ["Record::of(", "otlp::export(", "history::append("] {
        let at = written(needle);
        assert!(
            !at.is_empty() && at.iter().all(|p| p.starts_with("face/app/finish.rs")),
            "{needle} outside face/app/finish.rs: {at:?}"
        );
    }
}

/// One SIGINT/SIGTERM listener per process: `app/signals.rs`; the faces subscribe.
#[test]
fn one_place_listens_for_sigint_and_sigterm() {
    for needle in [
        "SignalKind::terminate",
        "SignalKind::interrupt",
        "signal::ctrl_c",
    ] {
        let at = written(needle);
        assert!(
            at.iter().all(|p| p.starts_with("face/app/signals.rs")),
            "{needle} outside face/app/signals.rs: {at:?}"
        );
    }
}

/// Below the options nothing sees the command line: the runners take `RunOptions` or
/// `ServeOptions` (the one typed value they carry from `cli.rs` is the lane store choice).
#[test]
fn the_command_line_stops_at_the_options() {
    let runners = [
        "face/app/engine.rs",
        "face/app/finish.rs",
        "face/app/controls.rs",
        "face/app/prepare.rs",
        "face/app/turns.rs",
        "face/app/stream",
        "face/app/serve",
    ];
    let mut bad = Vec::new();
    for dir in runners {
        for (f, text) in texts_under(dir) {
            for line in text.lines().filter(|l| l.contains("crate::cli")) {
                if !line.contains("cli::LaneStoreChoice") {
                    bad.push(format!("{}: {}", f.display(), line.trim()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The approval path never holds a thread: no `spawn_blocking`, no `block_on` (the terminal
/// approver reads on a thread of its own).
#[test]
fn the_approval_path_holds_no_thread() {
    for dir in [
        "run/gate.rs",
        "face/app/serve/approve.rs",
        "face/app/terminal.rs",
    ] {
        for (f, text) in texts_under(dir) {
            for needle in ["spawn_blocking", "block_on"] {
                assert!(!text.contains(needle), "{} uses {needle}", f.display());
            }
        }
    }
}

/// The gateway speaks `ErrorKind` until the edge: no error kind spelled as a string in
/// `app/serve` (they are put into words in `answer.rs` through `ErrorKind::as_str`).
#[test]
fn the_gateway_spells_no_error_kind() {
    let kinds = error_kinds();
    assert!(kinds.len() > 20, "{kinds:?}");
    for (f, text) in texts_under("face/app/serve") {
        for k in &kinds {
            let quoted = format!("\"{k}:");
            assert!(
                !text.contains(&quoted),
                "{} spells {k} as a string",
                f.display()
            );
        }
        assert!(!text.contains("kind: &'static str"), "{}", f.display());
    }
}

/// Every `ErrorKind` as it is written (snake_case), read from `events.rs`.
fn error_kinds() -> Vec<String> {
    let text = std::fs::read_to_string(src().join("ground/events.rs")).unwrap_or_default();
    let body = text.split("pub enum ErrorKind {").nth(1).unwrap_or("");
    let body = body.split("\n}").next().unwrap_or("");
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.ends_with(','))
        .map(|l| {
            let mut out = String::new();
            for (i, c) in l.trim_end_matches(',').chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            }
            out
        })
        .collect()
}

/// A store implements facets of at most eight methods each (`run/store/mod.rs`).
#[test]
fn each_store_facet_is_small() {
    let text = std::fs::read_to_string(src().join("run/store/mod.rs")).unwrap_or_default();
    let mut facet: Option<(String, usize)> = None;
    let mut big = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            facet = Some((name, 0));
        } else if line == "}" {
            if let Some((name, n)) = facet.take() {
                if n > 8 {
                    big.push(format!("{name}: {n} methods"));
                }
            }
        } else if line.trim_start().starts_with("fn ") {
            if let Some((_, n)) = &mut facet {
                *n += 1;
            }
        }
    }
    assert!(big.is_empty(), "{big:?}");
}

/// `pub` only what the benchmarks, the fuzz targets and the tests use (`#![deny
/// (unreachable_pub)]` keeps the rest `pub(crate)`): fewer than 400 items.
#[test]
fn the_public_surface_stays_small() {
    let words = [
        "pub fn ",
        "pub async fn ",
        "pub struct ",
        "pub enum ",
        "pub trait ",
        "pub type ",
        "pub const ",
        "pub static ",
        "pub mod ",
        "pub use ",
    ];
    let n: usize = texts_under("")
        .iter()
        .filter(|(f, _)| !f.ends_with("layout_tests.rs"))
        .map(|(_, text)| {
            text.lines()
                .filter(|l| words.iter().any(|w| l.trim_start().starts_with(w)))
                .count()
        })
        .sum();
    assert!(n < 400, "{n} pub items");
}

/// A file's code outside its test module (`#[cfg(test)] mod …` at the end) and comments.
fn code_of(text: &str) -> String {
    let body = text.split("\n#[cfg(test)]\nmod ").next().unwrap_or(text);
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Files under `dir` (test files aside) whose code contains any of `needles`.
fn offenders(dir: &str, needles: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (f, text) in texts_under(dir) {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with("tests.rs") || f.components().any(|c| c.as_os_str() == "differential") {
            continue;
        }
        let code = code_of(&text);
        for n in needles {
            if code.contains(n) {
                out.push(format!("{}: {n}", f.display()));
            }
        }
    }
    out
}

/// The planner is pure and synchronous: no I/O, no clock, no randomness, no environment.
#[test]
fn the_plan_is_pure() {
    let bad = offenders(
        "plan",
        &[
            "std::fs",
            "tokio::",
            "Instant::now",
            "SystemTime::now",
            "fastrand",
            "std::env",
        ],
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The runner emits events and never prints.
#[test]
fn the_runner_never_prints() {
    let bad = offenders("run", &["println!", "eprintln!", "print!(", "eprint!("]);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// No argument reaches a shell: no tool kind starts one.
#[test]
fn no_tool_starts_a_shell() {
    let bad = offenders("tools", &["\"sh\"", "\"/bin/sh\"", "\"bash\"", "\"-c\""]);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The reporters render: they never spawn, sleep or schedule.
#[test]
fn the_reporters_never_spawn_or_sleep() {
    let bad = offenders(
        "reporters",
        &["tokio::spawn", "thread::spawn", "sleep(", "Command::new"],
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A batch is untrusted: reading one never reads the environment.
#[test]
fn a_batch_never_reads_the_environment() {
    for dir in [
        "model/batch",
        "model/reference.rs",
        "model/model_formats.rs",
    ] {
        let bad = offenders(dir, &["env::var", "env::vars"]);
        assert!(bad.is_empty(), "{bad:#?}");
    }
}

/// The crate's root files hold no logic: `lib.rs` declares modules, `main.rs` calls `main`.
#[test]
fn the_crate_root_holds_no_logic() {
    let lib = code_of(&std::fs::read_to_string(src().join("lib.rs")).unwrap_or_default());
    assert!(!lib.contains("fn "), "lib.rs has a function");
    let main = code_of(&std::fs::read_to_string(src().join("main.rs")).unwrap_or_default());
    assert_eq!(main.matches("fn ").count(), 1, "main.rs: only `main`");
}
