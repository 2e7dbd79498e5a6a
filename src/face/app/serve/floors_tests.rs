//! The gateway's floors, kept by a test: the same mechanism as the crate's `LAYERS`
//! (`src/layout_tests.rs`), one level down. Every module of `serve/` stands on one floor of
//! [`FLOORS`]; a module names (`super::x`, `crate::app::serve::x`) only modules of its own floor
//! or of a floor below, and no import circle passes through more than two files.
//!
//! - **wire**: the transports — stdio lines, HTTP requests, the listener — and the entry that
//!   decides what a message is and where it goes; they execute the route.
//! - **protocol**: MCP itself — rmcp's handler, a whole server's resources and prompts, the
//!   shaping per protocol version, `subscriptions/listen`.
//! - **core**: the gateway and what it holds — sessions, the catalog, tasks, followers, what
//!   is in force, records, metrics, the status board.
//! - **policy**: who calls and what each call may do — identity, roles, spend, keys, order,
//!   approval, audit, the URI door.
//! - **ground**: the words every floor shares — an outcome in MCP's words, progress, protocol
//!   faults, stderr lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The gateway's floors, highest first, with the modules on each.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "wire",
        &["stdio", "http", "listen", "repoll", "entry", "fast", "ops"],
    ),
    (
        "protocol",
        &["handler", "passthrough", "pins", "shaped", "subscriptions"],
    ),
    (
        "core",
        &[
            "mod",
            "gateway",
            "cx",
            "session",
            "sessions",
            "catalog",
            "pinned",
            "reviewer",
            "force",
            "record",
            "reload",
            "metrics",
            "status",
            "tasks",
            "followers",
            "rounds",
            "steps",
            "open",
        ],
    ),
    (
        "policy",
        &[
            "door",
            "auth",
            "caller",
            "spend",
            "keys",
            "order",
            "approve",
            "audit",
            "audit_logs",
            "uri",
        ],
    ),
    ("ground", &["answer", "progress", "fault", "say"]),
];

/// How high `module`'s floor is (0: the ground).
fn height(module: &str) -> Option<usize> {
    let at = FLOORS.iter().position(|(_, ms)| ms.contains(&module))?;
    Some(FLOORS.len() - 1 - at)
}

fn serve_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/face/app/serve")
}

/// Every source file of the gateway with the module it belongs to (a folder's files are its
/// folder's module).
fn files() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(serve_dir()) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if inner.path().extension().is_some_and(|x| x == "rs") {
                    out.push((name.to_string(), inner.path()));
                }
            }
        } else if path.extension().is_some_and(|x| x == "rs") && !name.ends_with("_tests") {
            out.push((name.to_string(), path));
        }
    }
    out
}

/// The gateway modules `code` (of a file `depth` folders below `serve/`) names, its tests and
/// comments aside.
fn named(code: &str, depth: usize) -> BTreeSet<String> {
    let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or(code);
    let up = "super::".repeat(depth + 1);
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for prefix in [up.as_str(), "crate::app::serve::"] {
            let mut rest = line;
            while let Some(at) = rest.find(prefix) {
                rest = &rest[at + prefix.len()..];
                let ident: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() && !ident.starts_with(char::is_uppercase) {
                    out.insert(ident);
                }
            }
        }
    }
    out
}

/// Every edge between the gateway's modules: (from, to) → the files that make it.
fn edges() -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let base = serve_dir();
    for (from, path) in files() {
        // A folder's `mod.rs` is its folder's module: `super::` is the gateway's.
        let in_folder = path
            .strip_prefix(&base)
            .map_or(0, |r| r.components().count() - 1);
        let depth = in_folder - usize::from(path.ends_with("mod.rs") && in_folder > 0);
        let code = std::fs::read_to_string(&path).unwrap_or_default();
        for to in named(&code, depth) {
            if to != from && height(&to).is_some() {
                let file = path.strip_prefix(&base).unwrap_or(&path).display();
                out.entry((from.clone(), to))
                    .or_default()
                    .insert(file.to_string());
            }
        }
    }
    out
}

/// The edges of `edges` that climb a floor.
fn climbing<'e>(edges: impl Iterator<Item = &'e (String, String)>) -> Vec<String> {
    edges
        .filter(|(a, b)| match (height(a), height(b)) {
            (Some(ha), Some(hb)) => hb > ha,
            _ => false,
        })
        .map(|(a, b)| format!("{a} → {b}"))
        .collect()
}

/// A circle through three or more modules, if `edges` has one.
fn long_circle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    fn walk(
        path: &mut Vec<String>,
        edges: &BTreeSet<(String, String)>,
        found: &mut Option<Vec<String>>,
    ) {
        let (first, last) = (path[0].clone(), path[path.len() - 1].clone());
        for (_, next) in edges.iter().filter(|(a, _)| *a == last) {
            if found.is_some() {
                return;
            }
            if *next == first && path.len() >= 3 {
                *found = Some(path.clone());
            } else if !path.contains(next) && next > &first {
                path.push(next.clone());
                walk(path, edges, found);
                path.pop();
            }
        }
    }
    let starts: BTreeSet<&String> = edges.iter().map(|(a, _)| a).collect();
    let mut found = None;
    for s in starts {
        walk(&mut vec![s.clone()], edges, &mut found);
    }
    found
}

#[test]
fn every_gateway_module_stands_on_a_floor() {
    let missing: BTreeSet<String> = files()
        .into_iter()
        .map(|(m, _)| m)
        .filter(|m| height(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "gateway modules on no floor (add each to FLOORS in serve/floors_tests.rs): {missing:?}"
    );
}

#[test]
fn the_gateway_s_floors_point_down() {
    let all = edges();
    let bad: Vec<String> = climbing(all.keys())
        .into_iter()
        .map(|e| {
            let (a, b) = e.split_once(" → ").unwrap_or_default();
            let files = &all[&(a.to_string(), b.to_string())];
            format!("{e} ({files:?}): a floor names only its own and the ones below")
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn no_import_circle_of_the_gateway_passes_through_more_than_two_files() {
    let all: BTreeSet<(String, String)> = edges().into_keys().collect();
    assert!(all.len() > 80, "the edge reader sees {} edges", all.len());
    assert_eq!(long_circle(&all), None);
}

#[test]
fn the_floor_checks_catch_a_back_arrow_and_a_circle_of_three() {
    let e = |a: &str, b: &str| (a.to_string(), b.to_string());
    let scratch = [e("order", "gateway"), e("gateway", "order")];
    assert_eq!(climbing(scratch.iter()), ["order → gateway"]);
    let three: BTreeSet<_> = [e("a", "b"), e("b", "c"), e("c", "a")].into();
    assert!(long_circle(&three).is_some());
    let pairs: BTreeSet<_> = [e("a", "b"), e("b", "a"), e("a", "c"), e("c", "a")].into();
    assert_eq!(long_circle(&pairs), None);
    let code =
        "use super::gateway::Gateway;\n// super::http\nlet x = crate::app::serve::order::Pass;";
    assert_eq!(
        named(code, 0).into_iter().collect::<Vec<_>>(),
        ["gateway", "order"]
    );
    assert_eq!(
        named("use super::super::caller;", 1)
            .into_iter()
            .collect::<Vec<_>>(),
        ["caller"]
    );
}

/// JSON-RPC error codes are written in `fault.rs` alone: everything else says a [`Fault`]
/// (`super::fault::Fault`) or names rmcp's constructor.
#[test]
fn json_rpc_codes_are_written_in_one_place() {
    let mut bad = Vec::new();
    for (_, path) in files() {
        if path.ends_with("fault.rs") {
            continue;
        }
        let code = std::fs::read_to_string(&path).unwrap_or_default();
        let code = code
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            let text = line.trim_start();
            if text.starts_with("//") {
                continue;
            }
            let digits = text.match_indices("-32").any(|(at, _)| {
                let rest = &text[at + 3..];
                rest.len() >= 3 && rest.as_bytes()[..3].iter().all(u8::is_ascii_digit)
            });
            if digits {
                bad.push(format!("{}:{}: {text}", path.display(), i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "JSON-RPC codes outside fault.rs: {bad:#?}");
}
