//! Nothing a gateway holds outlives its owner: a call parked for approval is answered
//! `run_ended` when the gateway stops (stdio and HTTP, `/readyz` draining meanwhile), leaves
//! the board when its client's session ends, and is taken over by a retry only with the same
//! idempotency key.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::Project;
use crate::serve::HttpGateway;
use crate::serve_holds::{open_session, request, StdioGateway};

/// `peek` needs approval; `who` does not.
fn manifest(p: &Project) {
    p.write(
        "tools.toml",
        "[tools.who]\nkind = \"scripted\"\neffect = \"read\"\noutput = { ok = true }\n\n[tools.peek]\nkind = \"scripted\"\neffect = \"read\"\nrequires_approval = true\noutput = { seen = true }\n[tools.peek.args]\nwhat = { type = \"string\", required = true }\n",
    );
}

use crate::serve_policies::parked;

/// A `tools/call` of `peek` in session `id`, in a thread (it waits while the call is parked):
/// the HTTP answer.
fn park_over_http(addr: &str, id: &str) -> std::thread::JoinHandle<(u16, String, String)> {
    let (addr, id) = (addr.to_string(), id.to_string());
    std::thread::spawn(move || {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "peek", "arguments": {"what": "a"}}});
        let headers = [
            ("Mcp-Session-Id", id.as_str()),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ];
        request(&addr, ("POST", "/mcp"), &headers, &call.to_string())
    })
}

fn wait_parked(p: &Project, n: usize) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let list = parked(p);
        if list.len() >= n {
            return list;
        }
        assert!(Instant::now() < until, "{} parked, not {n}", list.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The board is empty within `within`.
fn board_empties(p: &Project, within: Duration) {
    let until = Instant::now() + within;
    while !parked(p).is_empty() {
        assert!(
            Instant::now() < until,
            "still on the board: {:?}",
            parked(p)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigterm(pid: u32) {
    // SAFETY: a signal to a child this test started.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn on_sigterm_over_stdio_a_parked_call_is_answered_run_ended_and_leaves_the_board() {
    let p = Project::new("");
    manifest(&p);
    let mut gw = StdioGateway::start(&p, &["--grace", "10s"]);
    gw.call(1, "peek", json!({"what": "a"}));
    wait_parked(&p, 1);
    sigterm(gw.child.id());
    let answer = gw
        .recv(Duration::from_secs(5))
        .expect("the parked call is answered");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        text_of(&answer).starts_with("run_ended:") && text_of(&answer).contains("shutting down"),
        "{answer}"
    );
    let status = gw.child.wait().expect("the gateway exits");
    assert_eq!(status.code(), Some(0));
    assert!(parked(&p).is_empty(), "{:?}", parked(&p));
}

#[test]
fn on_sigterm_over_http_a_parked_call_is_answered_and_readyz_never_says_ready() {
    let p = Project::new("");
    manifest(&p);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory", "--grace", "10s"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let asking = park_over_http(&addr, &id);
    wait_parked(&p, 1);
    let (code, _, _) = request(&addr, ("GET", "/readyz"), &[], "");
    assert_eq!(code, 200);
    sigterm(gw.child.id());
    // Once the signal is taken, /readyz is never ready again until the listener closes.
    let (mut draining, until) = (false, Instant::now() + Duration::from_secs(3));
    while Instant::now() < until {
        let Some(answer) = readyz(&addr) else {
            break;
        };
        if answer.starts_with("HTTP/1.1 503") {
            assert!(answer.contains("shutting down"), "{answer}");
            draining = true;
        }
        assert!(
            !(draining && answer.starts_with("HTTP/1.1 200")),
            "ready again while draining: {answer}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, _, body) = asking.join().expect("the client thread");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("run_ended:") && body.contains("shutting down"),
        "the parked call's answer: {body}"
    );
    assert!(parked(&p).is_empty(), "{:?}", parked(&p));
}

/// What `GET /readyz` answers; `None`: the listener is closed.
fn readyz(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut all = String::new();
    let _ = s.read_to_string(&mut all);
    Some(all)
}

#[test]
fn a_stdio_client_that_leaves_takes_its_parked_calls_off_the_board_and_a_new_equal_call_parks_afresh(
) {
    let p = Project::new("");
    manifest(&p);
    let mut gw = StdioGateway::start(&p, &[]);
    for i in 0..3 {
        gw.call(i, "peek", json!({"what": format!("w{i}")}));
    }
    let before: Vec<String> = wait_parked(&p, 3)
        .iter()
        .map(|w| w["id"].as_str().unwrap_or_default().to_string())
        .collect();
    gw.hang_up();
    board_empties(&p, Duration::from_secs(1));
    // Another client's call that looks the same is its own call: parked afresh, under a new id.
    let mut again = StdioGateway::start(&p, &[]);
    again.call(9, "peek", json!({"what": "w0"}));
    let now = wait_parked(&p, 1);
    let id = now[0]["id"].as_str().unwrap_or_default().to_string();
    assert!(!before.contains(&id), "{id} was the old call's");
    again.hang_up();
    board_empties(&p, Duration::from_secs(1));
}

#[test]
fn an_http_session_deleted_takes_its_parked_calls_off_the_board() {
    let p = Project::new("");
    manifest(&p);
    let gw = HttpGateway::start(&p, &["--lane-store", "memory"], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let headers = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let asking = park_over_http(&addr, &id);
    wait_parked(&p, 1);
    let (code, _, _) = request(&addr, ("DELETE", "/mcp"), &headers, "");
    assert_eq!(code, 200);
    board_empties(&p, Duration::from_secs(1));
    let _ = asking.join();
    // The gateway serves on.
    let other = open_session(&addr, &[]);
    assert!(!other.is_empty());
}

#[test]
fn an_orphaned_parked_call_is_taken_over_only_by_a_retry_with_its_idempotency_key() {
    let p = Project::new("");
    manifest(&p);
    let keyed = |id: i64, key: Option<&str>| {
        let mut params = json!({"name": "peek", "arguments": {"what": "a"}});
        if let Some(k) = key {
            params["_meta"] = json!({"idempotencyKey": k});
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
    };
    let mut first = StdioGateway::start(&p, &[]);
    first.send(&keyed(1, Some("intent-1")));
    let old = wait_parked(&p, 1)[0]["id"].clone();
    // The gateway dies without a word: its entry stays, orphaned, for a retry to take over.
    first.child.kill().expect("kill -9");
    let _ = first.child.wait();
    // An entry is orphaned once its gateway has not beaten for 10 s.
    std::thread::sleep(Duration::from_secs(11));
    let mut second = StdioGateway::start(&p, &[]);
    // An equal call without the key is another call.
    second.send(&keyed(2, None));
    let listed = wait_parked(&p, 2);
    assert!(listed.iter().any(|w| w["id"] == old), "{listed:?}");
    // With another key, too.
    second.send(&keyed(3, Some("intent-2")));
    let listed = wait_parked(&p, 3);
    assert_eq!(listed.len(), 3, "{listed:?}");
    // The retry with its key takes the old entry over (no fourth entry, the old id lives on).
    second.send(&keyed(4, Some("intent-1")));
    std::thread::sleep(Duration::from_millis(1500));
    let listed = parked(&p);
    assert_eq!(listed.len(), 3, "{listed:?}");
    let old_one = listed.iter().find(|w| w["id"] == old).expect("the old id");
    assert_ne!(old_one["orphaned"], true, "{old_one}");
}

#[test]
fn a_session_let_go_after_session_idle_and_opened_again_keeps_what_it_spent() {
    let p = Project::new("");
    p.write(
        "tools.toml",
        "[serve.session]\nmax_calls = 3\n\n[serve.limits]\nsession_idle = \"1s\"\n\n[tools.who]\nkind = \"scripted\"\neffect = \"read\"\noutput = { ok = true }\n",
    );
    let gw = HttpGateway::start(&p, &[], &[]);
    let addr = gw.addr();
    let id = open_session(&addr, &[]);
    let headers = [
        ("Mcp-Session-Id", id.as_str()),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ];
    let call = |n: u32| {
        let msg = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "who", "arguments": {}}});
        let (code, _, body) = request(&addr, ("POST", "/mcp"), &headers, &msg.to_string());
        assert_eq!(code, 200, "{body}");
        body
    };
    let refused = |body: &str| body.contains("call_limit:");
    assert!(!refused(&call(1)) && !refused(&call(2)));
    // Idle past `session_idle`: the session is let go, and opened again by the next request.
    std::thread::sleep(Duration::from_millis(2500));
    let after: Vec<bool> = (3..=5).map(|n| refused(&call(n))).collect();
    assert_eq!(
        after,
        [false, true, true],
        "the budget restarted after the pause"
    );
    let (_, metrics) = crate::serve_ops::get(&gw, "/metrics", None);
    assert!(
        metrics.contains("flux_tools_sessions_reopened_total 1"),
        "{metrics}"
    );
}

#[test]
fn started_by_hand_in_a_terminal_it_says_what_it_waits_for_and_leaves_quietly() {
    let p = Project::new("");
    manifest(&p);
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    for stop in ["ctrl-c", "ctrl-d"] {
        let cmd = format!("{} mcp serve --lane-store memory", bin.display());
        let Some(pane) = crate::pane::Pane::start(p.path(), 200, &cmd) else {
            return;
        };
        pane.wait_for("waiting for an MCP client on stdin", 20);
        if stop == "ctrl-c" {
            pane.ctrl_c();
        } else {
            pane.keys(&["C-d"]);
        }
        let screen = pane.wait_for("EXIT=", 20);
        assert!(screen.contains("EXIT=0"), "{stop}: {screen}");
        assert!(!screen.to_lowercase().contains("error"), "{stop}: {screen}");
    }
}
