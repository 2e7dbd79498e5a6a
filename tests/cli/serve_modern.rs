//! The 2026-07-28 protocol's shape for approvals: a call that needs the client's approval is
//! answered `input_required` at once, and the client's follow-up request — to any replica —
//! carries the answer, bound to the arguments' hash.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::serve::{log_lines, raw_post_with, raw_response, HttpGateway};

/// `write` needs approval (in band allowed), `vault` only out of band; each logs
/// `start TAG` to `log`.
fn project() -> (Project, std::path::PathBuf) {
    let p = Project::new("");
    let log = p.path().join("log");
    let tool = |name: &str, approval: &str| {
        format!(
            "[tools.{name}]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"-c\", \"echo \\\"start $1\\\" >> '{log}'; echo '{{\\\"ok\\\": true}}'\", \"w\", \"{{tag}}\"]\neffect = \"write\"\napproval = \"{approval}\"\n[tools.{name}.args]\ntag = {{ type = \"string\", required = true }}\n\n",
            log = log.display()
        )
    };
    p.write(
        "tools.toml",
        &format!(
            "[serve]\napproval_in_band = true\napproval_timeout = \"1s\"\n\n{}{}",
            tool("write", "required"),
            tool("vault", "out_of_band")
        ),
    );
    (p, log)
}

/// One stateless (2026-07-28) `tools/call` of `tool` with `args`, by a client that answers
/// elicitations when `elicits`; `follow` is the follow-up's (requestState, action). The
/// JSON-RPC `result` (or the whole message when there is none).
fn call(
    addr: &str,
    (tool, args): (&str, Value),
    elicits: bool,
    follow: Option<(&str, &str)>,
) -> Value {
    let caps = if elicits {
        json!({"elicitation": {}})
    } else {
        json!({})
    };
    let mut params = json!({
        "name": tool,
        "arguments": args,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": caps,
        },
    });
    if let Some((state, action)) = follow {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"flux-tools/approval": {"action": action}});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let headers = [
        ("Host", addr),
        ("Mcp-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ];
    let (_, text) = raw_response(raw_post_with(addr, None, &body.to_string(), &headers));
    let v = crate::serve::message_of(&text);
    v.get("result").cloned().unwrap_or(v)
}

fn starts(log: &std::path::Path) -> Vec<String> {
    log_lines(log)
}

#[test]
fn a_modern_client_is_asked_at_once_and_its_follow_up_to_any_replica_approves_only_that_call() {
    let (p, log) = project();
    let one = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let two = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let (a, b) = (one.addr(), two.addr());

    // Asked at once, nothing parked, nothing called.
    let t = Instant::now();
    let asked = call(&a, ("write", json!({"tag": "w1"})), true, None);
    let took = t.elapsed();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let question = &asked["inputRequests"]["flux-tools/approval"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    let message = question["params"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("approve the call of `write`") && message.contains(r#""tag":"w1""#),
        "{message}"
    );
    let state = asked["requestState"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(state.starts_with("flux-tools:approval:"), "{state}");
    assert!(starts(&log).is_empty());

    // The answer to w1's question does not approve a changed call: it is asked again.
    let changed = call(
        &b,
        ("write", json!({"tag": "w2"})),
        true,
        Some((&state, "accept")),
    );
    assert_eq!(changed["resultType"], "input_required", "{changed}");
    assert_ne!(changed["requestState"].as_str(), Some(state.as_str()));
    assert!(starts(&log).is_empty());

    // Declined: refused, nothing called. Accepted through the other replica: made once.
    let no = call(
        &b,
        ("write", json!({"tag": "w1"})),
        true,
        Some((&state, "decline")),
    );
    assert_eq!(no["isError"], true, "{no}");
    let text = no["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("approval_denied: "), "{no}");
    assert!(starts(&log).is_empty());
    let yes = call(
        &b,
        ("write", json!({"tag": "w1"})),
        true,
        Some((&state, "accept")),
    );
    assert_eq!(yes["isError"], false, "{yes}");
    assert_eq!(yes["resultType"], "complete", "{yes}");
    assert_eq!(starts(&log), ["start w1"]);
}

#[test]
fn a_modern_client_is_never_asked_for_an_out_of_band_tool_nor_when_it_cannot_answer() {
    let (p, log) = project();
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    // `approval = "out_of_band"`: not asked, parked for `flux-tools approve` (nobody does).
    let r = call(&addr, ("vault", json!({"tag": "v1"})), true, None);
    assert_eq!(r["resultType"], "complete", "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("nobody approved it within 1s"), "{r}");
    // A client that declared no elicitation: parked too, never sent a question.
    let r = call(&addr, ("write", json!({"tag": "w9"})), false, None);
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("nobody approved it within 1s"), "{r}");
    // A forged follow-up for an out-of-band tool approves nothing.
    let r = call(
        &addr,
        ("vault", json!({"tag": "v2"})),
        true,
        Some(("flux-tools:approval:0000000000000000", "accept")),
    );
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("nobody approved it within 1s"), "{r}");
    assert!(starts(&log).is_empty());
}

#[test]
fn the_2_x_sdk_client_answers_in_band_and_its_accept_makes_the_call_once() {
    let Some(py) = crate::serve::sdk2() else {
        return;
    };
    let (p, log) = project();
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let run = |answer: &str, tag: &str| -> Value {
        let mut cmd = Command::new(&py);
        cmd.arg(repo().join("tests/fixtures/mcp_modern.py"))
            .args([gw.url.as_str(), answer, "write"])
            .arg(json!({ "tag": tag }).to_string());
        crate::serve_door::printed(&mut cmd)
    };
    let yes = run("accept", "s1");
    assert_eq!(yes["version"], "2026-07-28", "{yes}");
    assert_eq!(yes["asked"].as_array().map(Vec::len), Some(1), "{yes}");
    assert_eq!(yes["result"]["isError"], false, "{yes}");
    let no = run("decline", "s2");
    assert_eq!(no["result"]["isError"], true, "{no}");
    assert_eq!(starts(&log), ["start s1"]);
}
