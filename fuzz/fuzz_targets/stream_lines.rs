//! The streaming line splitter's contract: any text cut into chunks at any line, each chunk
//! read as JSON Lines after the lines before it. Nothing may panic, and a located problem
//! names a line of the whole input, never one past its end.
#![no_main]

use flux_tools::{Batch, InputFormat, Reading, SourceFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    let cut = usize::from(cut) % (lines.len() + 1);
    let mut seen = 0;
    for (before, part) in [(0, &lines[..cut]), (cut, &lines[cut..])] {
        if part.is_empty() {
            continue;
        }
        let file = SourceFile::new("<stdin>", part.join("\n")).after_lines(before);
        let reading = Reading {
            format: InputFormat::Jsonl,
            literal: false,
            id_offset: seen,
        };
        match Batch::parse_with(file, reading) {
            Ok((batch, _)) => seen += batch.calls.len(),
            Err(diags) => {
                for d in diags {
                    if let Some(loc) = d.location {
                        assert!(loc.line >= 1 && loc.line <= lines.len().max(1), "{loc:?}");
                    }
                }
            }
        }
    }
});
