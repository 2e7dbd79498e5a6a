//! Reference syntax and resolution: parse the first half as an argument string and walk it into
//! the second half parsed as JSON output.
#![no_main]

use flux_tools::{Args, StrTemplate};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let (arg, out) = text.split_at(mid);
    let _ = StrTemplate::parse(arg);
    let output: Value = serde_json::from_str(out).unwrap_or(Value::Null);
    let Some(map) = json!({"x": arg, "nested": [arg, {"y": arg}]})
        .as_object()
        .cloned()
    else {
        return;
    };
    let (args, _) = Args::compile(map);
    let lookup = |_: &str| Some(&output);
    let _ = args.resolve(&lookup);
    let _ = args.literal_without_holes();
});
