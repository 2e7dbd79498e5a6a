//! Any text as a manifest: every problem must become a diagnostic, never a panic.
#![no_main]

use std::path::PathBuf;

use flux_tools::{Manifest, SourceFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Manifest::parse(
        SourceFile::new("tools.toml", text),
        PathBuf::from("/fuzz/tools.toml"),
        flux_tools::KINDS,
    ) {
        Ok(m) => {
            for d in &m.warnings {
                let _ = d.to_string();
            }
        }
        Err(diags) => {
            for d in &diags {
                let _ = d.to_string();
            }
        }
    }
});
