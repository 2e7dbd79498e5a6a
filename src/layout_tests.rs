//! Limits the compiler does not keep, kept by a test: the layers point one way (the runner,
//! the planner, the tool kinds and the manifest never name the Face or the reporters), and no
//! source file grows past 800 lines.

use std::path::{Path, PathBuf};

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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn lower_layers_never_name_the_face_or_the_reporters() {
    let mut bad = Vec::new();
    for layer in ["run", "plan", "tools", "manifest"] {
        let mut files = Vec::new();
        sources(&src().join(layer), &mut files);
        assert!(!files.is_empty(), "no sources under src/{layer}");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for name in ["crate::app", "crate::cli", "crate::report"] {
                if text.contains(name) {
                    bad.push(format!("{} names {name}", f.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn no_source_file_is_over_800_lines() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > 800).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "{long:#?}");
}
