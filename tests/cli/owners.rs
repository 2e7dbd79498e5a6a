//! Nothing outlives its owner: a `flux-tools` killed with SIGKILL takes its tools with it, on
//! every face (`run`, `run --turns`, `run --stream`), and a lane of 1 shared across processes is
//! never handed to the next run while the killed run's tool may still be running.

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Project, Redis};

/// A write tool in a lane of 1. Each call first looks at every earlier call's recorded pid: one
/// still alive (not a zombie) is two at once in the lane, logged `overlap`. Then it records its
/// own pid, logs `start NAME`, sleeps 3 s, logs `end NAME`.
const OWNED: &str = include_str!("../fixtures/lane_of_one.toml");

/// How a killed `flux-tools` was started and handed its call.
#[derive(Clone, Copy)]
enum Face {
    Batch,
    Turns,
    Stream,
}

fn log(p: &Project) -> String {
    std::fs::read_to_string(p.path().join("log")).unwrap_or_default()
}

/// Processes whose group is `pgid` (zombies aside).
pub fn group_members(pgid: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // After the command's closing parenthesis: state, ppid, pgrp.
            let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split(' ').collect();
            f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
        })
        .count()
}

fn start_owner(p: &Project, face: Face, store: &[&str], env: &[(&str, &str)]) -> Child {
    let call = serde_json::json!({"tool": "slow", "args": {"dir": p.path(), "name": "a"}});
    let mut args: Vec<&str> = vec!["run"];
    let batch = p.write("a.json", &serde_json::json!([call.clone()]).to_string());
    match face {
        Face::Batch => args.push(batch.to_str().unwrap()),
        Face::Turns => args.extend(["--turns", "-q"]),
        Face::Stream => args.push("--stream"),
    }
    args.extend(store);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"))
        .current_dir(p.path())
        .args(&args)
        .envs(env.iter().copied())
        .env("CI", "true")
        .env_remove("FLUX_TOOLS_MANIFEST")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start flux-tools");
    let line = match face {
        Face::Batch => None,
        Face::Turns => Some(serde_json::json!([call]).to_string()),
        Face::Stream => Some(call.to_string()),
    };
    if let (Some(line), Some(stdin)) = (line, child.stdin.as_mut()) {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
    child
}

/// Kill the owner with SIGKILL once its call started, start a second run of the same tool at
/// once, and check: never two at once, the killed run's tool ended with it.
fn killed_owner_takes_its_tool(face: Face, store: &[&str], env: &[(&str, &str)]) {
    let p = Project::new(OWNED);
    let mut owner = start_owner(&p, face, store, env);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !log(&p).contains("start a") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(log(&p).contains("start a"), "the first run never started");
    let pid: i32 = std::fs::read_to_string(p.path().join("pid-a"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    owner.kill().unwrap();
    let _ = owner.wait();
    let b = p.write(
        "b.json",
        &serde_json::json!([{"tool": "slow", "args": {"dir": p.path(), "name": "b"}}]).to_string(),
    );
    let mut args = vec!["run", b.to_str().unwrap(), "--format", "json"];
    args.extend(store);
    let out = p.spawn_env(&args, env).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = log(&p);
    assert!(
        !text.contains("overlap"),
        "two at once in a lane of 1:\n{text}"
    );
    assert!(text.contains("end b"), "{text}");
    // The killed run's tool (and its `sleep`) went with it: nothing of its group is left, and
    // it never reached its end, even after its own 3 s.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        group_members(pid),
        0,
        "the killed run's tool is still running"
    );
    assert!(
        !log(&p).contains("end a"),
        "the killed run's write ran to its end:\n{text}"
    );
}

#[test]
fn a_killed_run_takes_its_tool_with_it_and_its_permit_waits_for_that() {
    killed_owner_takes_its_tool(Face::Batch, &[], &[]);
}

#[test]
fn a_killed_turns_process_takes_its_tool_with_it() {
    killed_owner_takes_its_tool(Face::Turns, &[], &[]);
}

#[test]
fn a_killed_stream_takes_its_tool_with_it() {
    killed_owner_takes_its_tool(Face::Stream, &[], &[]);
}

#[test]
fn redis_a_killed_run_takes_its_tool_with_it_before_its_lease_lapses() {
    let Some(redis) = Redis::start() else { return };
    let store = ["--lane-store", redis.url.as_str()];
    killed_owner_takes_its_tool(Face::Batch, &store, &[("FLUX_TOOLS_LEASE_MS", "1000")]);
}
