//! An upstream's question to a 2026-07-28 client (issue 67, defect 5): the client answers in
//! its follow-up request (`input_required`, SEP-2322) — the call goes on meanwhile, and the
//! follow-up's answers reach the server's waiting request. Tried with the SDK 2.x client in
//! its default mode over stdio and HTTP, then by hand: forged and foreign states, another
//! tool, an answer that never comes.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{repo, Project};
use crate::serve::{raw_post_with, raw_response, sdk2, HttpGateway};
use crate::serve_door::printed;
use crate::serve_whole::own_whole;

/// What the SDK 2.x client (answering `answer`) got of a call of `tool` with `args`.
fn asked(py: &Path, how: &[String], answer: &str, tool: &str, args: Value) -> Value {
    let mut cmd = Command::new(py);
    cmd.arg(repo().join("tests/fixtures/mcp_ask2.py"))
        .args(how)
        .args([answer, tool, &args.to_string()]);
    printed(&mut cmd)
}

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn an_upstream_s_questions_reach_a_2026_client_in_its_follow_ups_over_stdio_and_http() {
    let Some(py) = sdk2() else { return };
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(&p, &log, "");
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let bin = crate::serve::flux_bin().display().to_string();
    let manifest = p.path().join("tools.toml").display().to_string();
    let stdio = ["--", &bin, "--manifest", &manifest, "mcp", "serve"].map(String::from);
    for (face, how) in [("stdio", stdio.to_vec()), ("http", vec![gw.url.clone()])] {
        // Two questions, one after the other, in one call: two follow-ups.
        let r = asked(
            &py,
            &how,
            "accept",
            "own_ask",
            json!({"message": "may I?", "times": 2}),
        );
        assert_eq!(r["version"], "2026-07-28", "{face}: {r}");
        assert_eq!(
            r["asked"],
            json!(["may I? (1)", "may I? (2)"]),
            "{face}: {r}"
        );
        assert_eq!(
            text(&r),
            "{\"action\": \"accept\"}\n{\"action\": \"accept\"}",
            "{face}: {r}"
        );
        let r = asked(
            &py,
            &how,
            "decline",
            "own_ask",
            json!({"message": "may I?"}),
        );
        assert_eq!(text(&r), "{\"action\": \"decline\"}", "{face}: {r}");
        // A sampling request goes the same way.
        let r = asked(&py, &how, "accept", "own_ask", json!({"sample": true}));
        assert!(text(&r).contains("sampled by the client"), "{face}: {r}");
        // A client that declared neither: the server is told why, and says so.
        let r = asked(&py, &how, "none", "own_ask", json!({"message": "may I?"}));
        let said = text(&r);
        assert!(
            said.contains("not asked") && said.contains("elicitation"),
            "{face}: {r}"
        );
        assert_eq!(r["asked"], json!([]), "{face}: {r}");
    }
}

/// One stateless 2026-07-28 `tools/call` of `tool` with `args` by a client that answers
/// elicitations, with `bearer`'s token; `follow`: its follow-up's state and answers. The
/// JSON-RPC message.
fn call(
    addr: &str,
    bearer: &str,
    (tool, args): (&str, Value),
    follow: Option<(&str, Value)>,
) -> Value {
    let mut params = json!({
        "name": tool,
        "arguments": args,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        },
    });
    if let Some((state, answers)) = follow {
        params["requestState"] = json!(state);
        params["inputResponses"] = answers;
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let auth = format!("Bearer {bearer}");
    let headers = [
        ("Host", addr),
        ("Authorization", auth.as_str()),
        ("Mcp-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ];
    let (_, text) = raw_response(raw_post_with(addr, None, &body.to_string(), &headers));
    crate::serve::message_of(&text)
}

/// The question's key and the state of an `input_required` answer.
fn question(v: &Value) -> (String, String) {
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required", "{v}");
    let asks = r["inputRequests"].as_object().cloned().unwrap_or_default();
    assert_eq!(asks.len(), 1, "{v}");
    let (key, ask) = asks.into_iter().next().unwrap_or_default();
    assert_eq!(ask["method"], "elicitation/create", "{v}");
    let state = r["requestState"].as_str().unwrap_or_default().to_string();
    (key, state)
}

#[test]
fn a_follow_up_answers_only_its_own_call_of_its_own_tenant_and_an_unanswered_call_ends() {
    let p = Project::new("");
    let log = p.path().join("server.log");
    own_whole(
        &p,
        &log,
        "processes = 3\n[serve.tokens]\nacme = \"${env:ACME}\"\nbeta = \"${env:BETA}\"\n[serve.limits]\nanswer_wait = \"2s\"\nasking_per_tenant = 1\n",
    );
    let gw = HttpGateway::start(&p, &[], &[("ACME", "tok-a"), ("BETA", "tok-b")]);
    let addr = gw.addr();
    let ask = ("own_ask", json!({"message": "may I?"}));
    let first = call(&addr, "tok-a", ask.clone(), None);
    let (key, state) = question(&first);
    let yes = json!({ key.clone(): {"action": "accept", "content": {}} });
    // One call of the tenant waits for answers: its limit. Another tenant's is asked.
    let busy = call(&addr, "tok-a", ask.clone(), None);
    assert_eq!(busy["error"]["code"], -32000, "{busy}");
    assert!(busy.to_string().contains("asking_per_tenant"), "{busy}");
    let (beta_key, beta_state) = question(&call(&addr, "tok-b", ask.clone(), None));
    let no = json!({ beta_key: {"action": "decline"} });
    let beta = call(&addr, "tok-b", ask.clone(), Some((&beta_state, no)));
    assert_eq!(
        beta["result"]["content"][0]["text"], "{\"action\": \"decline\"}",
        "{beta}"
    );

    // A state nobody was given, another tenant's follow-up, another tool: refused, and the
    // call still waits for its own client.
    for (bearer, tool, state) in [
        ("tok-a", "own_ask", "flux-tools:round:forged"),
        ("tok-b", "own_ask", state.as_str()),
        ("tok-a", "own_structured", state.as_str()),
    ] {
        let v = call(
            &addr,
            bearer,
            (tool, json!({"message": "may I?"})),
            Some((state, yes.clone())),
        );
        assert_eq!(v["error"]["code"], -32602, "{bearer} {tool} {state}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("request state"), "{v}");
    }
    // A follow-up with no answer is asked the same question again.
    let again = call(&addr, "tok-a", ask.clone(), Some((&state, json!({}))));
    assert_eq!(question(&again), (key.clone(), state.clone()));
    // Its own follow-up ends the call; the state is spent.
    let done = call(&addr, "tok-a", ask.clone(), Some((&state, yes.clone())));
    assert_eq!(
        done["result"]["content"][0]["text"], "{\"action\": \"accept\"}",
        "{done}"
    );
    let spent = call(&addr, "tok-a", ask.clone(), Some((&state, yes.clone())));
    assert_eq!(spent["error"]["code"], -32602, "{spent}");

    // A question left unanswered past `answer_wait`: the call ends, its state with it.
    let (key, state) = question(&call(&addr, "tok-a", ask.clone(), None));
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let yes = json!({ key: {"action": "accept", "content": {}} });
    let late = call(&addr, "tok-a", ask, Some((&state, yes)));
    assert_eq!(late["error"]["code"], -32602, "{late}");
    let message = late["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("expired"), "{late}");
}
