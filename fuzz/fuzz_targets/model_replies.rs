//! Model replies: any text read as an OpenAI chat completion, a Responses API response, an
//! Anthropic message and a Gemini response (forced and detected), then planned against a
//! small manifest. Nothing may panic; every call read must be answerable.
#![no_main]

use std::path::PathBuf;

use flux_tools::{
    build_plan, detect_reply, read_reply, Batch, InputFormat, Manifest, PlanOptions, Reading,
    SourceFile,
};
use libfuzzer_sys::fuzz_target;

const MANIFEST: &str = "[tools.search]\nkind = \"scripted\"\neffect = \"read\"\n[tools.search.args]\nquery = { type = \"string\", required = true }\n[tools.echo]\nkind = \"scripted\"\neffect = \"write\"\nidempotent = true\n";

const FORMATS: [InputFormat; 5] = [
    InputFormat::Auto,
    InputFormat::Openai,
    InputFormat::OpenaiResponses,
    InputFormat::Anthropic,
    InputFormat::Gemini,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        if let Some(f) = detect_reply(&v) {
            let _ = read_reply(f, &v);
        }
    }
    let Ok(manifest) = Manifest::parse(
        SourceFile::new("tools.toml", MANIFEST),
        PathBuf::from("/fuzz/tools.toml"),
        flux_tools::KINDS,
    ) else {
        return;
    };
    for format in FORMATS {
        let reading = Reading {
            format,
            ..Reading::default()
        };
        let Ok((batch, _)) = Batch::parse_with(SourceFile::new("reply.json", text), reading) else {
            continue;
        };
        if batch.from_model {
            // A model's reply never fails planning: its bad calls become invalid ones.
            let p = build_plan(&manifest, &batch, &PlanOptions::default())
                .expect("a model's reply always plans");
            assert_eq!(p.calls.len(), batch.calls.len());
        }
    }
});
