//! The gateway's message entry on both faces: any bytes as a stdio line, and any bytes as the
//! body of an HTTP request whose head the first byte picks (method, an `Origin`, a foreign
//! `Host`, a protocol version rmcp serves alone). Nothing may panic; a refusal is a JSON-RPC
//! error with status 400 (or 200 for a call's params); the short way takes only a
//! `tools/call` or a cancel.
#![no_main]

use flux_tools::gateway_entry::{http_request, stdio_line, HttpEntry, Line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    if let Line::Refused(e) = stdio_line(body) {
        let v: serde_json::Value = serde_json::from_slice(&e).expect("an error is JSON");
        assert!(v["error"]["code"].is_i64());
    }
    let method = ["POST", "GET", "DELETE", "PUT"][usize::from(pick & 3)];
    let mut b = http::Request::builder()
        .method(method)
        .uri("/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", "s1")
        .header("host", if pick & 4 == 0 { "127.0.0.1:8808" } else { "evil.example" });
    if pick & 8 != 0 {
        b = b.header("origin", "http://evil.example");
    }
    if pick & 16 != 0 {
        b = b.header("mcp-protocol-version", "2026-07-28");
    }
    let Ok(req) = b.body(()) else { return };
    let (parts, ()) = req.into_parts();
    match http_request(&parts, &["127.0.0.1".to_string()], body) {
        HttpEntry::Refused { status, body } => {
            assert!(status == 400 || status == 200);
            let v: serde_json::Value = serde_json::from_slice(&body).expect("an error is JSON");
            assert!(v["error"]["code"].is_i64());
        }
        HttpEntry::Short(_) => {
            assert_eq!(method, "POST");
            assert!(pick & (4 | 8 | 16) == 0, "only a plain request goes the short way");
        }
        HttpEntry::Task(_) => {
            assert_eq!(method, "POST");
            assert!(pick & (4 | 8 | 16) == 0, "only a plain request reaches the tasks");
        }
        HttpEntry::Rmcp => {}
    }
});
