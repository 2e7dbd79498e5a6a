//! Reads and writes on one backend keep call order across real processes: command tools that
//! log when they start and end, and a real git repository.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{results, Project, Redis};

/// A command tool that logs `start ID NANOS` and `end ID NANOS` around a sleep.
fn logging_tool(name: &str, effect: &str, backend: &str, secs: &str) -> String {
    format!(
        "[tools.{name}]\nkind = \"command\"\neffect = \"{effect}\"\nidempotent = true\nbackend = \"{backend}\"\nstdin = \"none\"\ncommand = [\"sh\", \"-c\", \"echo start $FLUX_CALL_ID $(date +%s%N) >> log; sleep {secs}; echo end $FLUX_CALL_ID $(date +%s%N) >> log\"]\n"
    )
}

/// `(start, end)` in nanoseconds per call id, from the log.
fn spans(p: &Project) -> HashMap<String, (u128, u128)> {
    let mut out: HashMap<String, (u128, u128)> = HashMap::new();
    for line in std::fs::read_to_string(p.path().join("log"))
        .unwrap()
        .lines()
    {
        let w: Vec<&str> = line.split(' ').collect();
        let t: u128 = w[2].parse().unwrap();
        let e = out.entry(w[1].to_string()).or_default();
        if w[0] == "start" {
            e.0 = t;
        } else {
            e.1 = t;
        }
    }
    out
}

#[test]
fn a_read_before_a_write_ends_before_it_and_a_read_after_starts_after_it() {
    let manifest = [
        "[concurrency]\nmax_concurrent_tools = 8\n".to_string(),
        logging_tool("read", "read", "db", "0.3"),
        logging_tool("write", "write", "db", "0.3"),
        logging_tool("other", "read", "elsewhere", "1.2"),
    ]
    .concat();
    let p = Project::new(&manifest);
    let (doc, code) = p.run_json(
        "- { id: before, tool: read }\n- { id: w, tool: write }\n- { id: after, tool: read }\n- { id: o, tool: other }\n",
        &[],
    );
    assert_eq!(code, 0, "{doc}");
    let s = spans(&p);
    assert!(
        s["before"].1 <= s["w"].0,
        "the write ran under the read: {s:?}"
    );
    assert!(
        s["w"].1 <= s["after"].0,
        "the read saw a write in flight: {s:?}"
    );
    // Another backend overlaps both.
    assert!(s["o"].0 < s["w"].1 && s["w"].0 < s["o"].1, "{s:?}");
    assert!(s["o"].0 < s["after"].1 && s["after"].0 < s["o"].1, "{s:?}");
    let waited: Vec<&Value> = results(&doc).iter().map(|r| &r["waited_on"]).collect();
    assert_eq!(waited.len(), 4);
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn a_diff_listed_before_an_add_always_sees_the_change() {
    // Seen with mcp-server-git: `git_diff_unstaged` listed before `git_add` ran at the same
    // time as it, and returned an empty diff in one run and the full diff in the next.
    let p = Project::new(
        "[concurrency]\nmax_concurrent_tools = 8\n\n[tools.git_diff_unstaged]\nkind = \"command\"\neffect = \"read\"\nbackend = \"repo\"\ncwd = \"repo\"\nstdin = \"none\"\ncommand = [\"git\", \"diff\"]\n\n[tools.git_add]\nkind = \"command\"\neffect = \"write\"\nidempotent = true\nbackend = \"repo\"\ncwd = \"repo\"\nstdin = \"none\"\ncommand = [\"git\", \"add\", \"-A\"]\n\n[tools.git_diff_staged]\nkind = \"command\"\neffect = \"read\"\nbackend = \"repo\"\ncwd = \"repo\"\nstdin = \"none\"\ncommand = [\"git\", \"diff\", \"--cached\", \"--stat\"]\n",
    );
    let repo = p.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["config", "user.email", "t@example.test"]);
    git(&repo, &["config", "user.name", "t"]);
    std::fs::write(repo.join("notes.txt"), "one\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    let batch = "- { id: diff, tool: git_diff_unstaged }\n- { id: add, tool: git_add }\n- { id: staged, tool: git_diff_staged }\n";
    let mut seen = Vec::new();
    for _ in 0..20 {
        std::fs::write(repo.join("notes.txt"), "one\ntwo\n").unwrap();
        let (doc, code) = p.run_json(batch, &[]);
        assert_eq!(code, 0, "{doc}");
        let r = results(&doc);
        seen.push((r[0]["output"].clone(), r[2]["output"].clone()));
        git(&repo, &["reset", "-q"]);
    }
    assert!(
        seen[0].0.as_str().unwrap().contains("+two"),
        "the diff before the add shows the change: {:?}",
        seen[0]
    );
    assert!(seen[0].1.as_str().unwrap().contains("notes.txt"));
    assert!(
        seen.iter().all(|s| *s == seen[0]),
        "runs differed: {seen:?}"
    );
}

/// Two reads running in one process, another process's write arriving 300 ms later, then two
/// more reads of the first process (ready when the tool lane frees): the write waits for the
/// first two and the last two wait for it.
fn reads_and_a_write_from_two_processes(p: &Project) {
    let s = reader_then_writer(p, ("reads.yaml", 2), &[]);
    for r in ["r1", "r2"] {
        assert!(s[r].1 <= s["w"].0, "the write ran under {r}: {s:?}");
    }
    for r in ["r3", "r4"] {
        assert!(s["w"].1 <= s[r].0, "{r} overtook the waiting write: {s:?}");
    }
}

/// Run `reads` in one process and, once `running` of its reads have started, `write.yaml` in
/// another (each with `extra` arguments); both must succeed. The calls' spans.
fn reader_then_writer(
    p: &Project,
    (reads, running): (&str, usize),
    extra: &[&str],
) -> HashMap<String, (u128, u128)> {
    let reader = p.spawn(&[&["run", reads, "-q"], extra].concat());
    // The writer starts once the first reads run (a fixed pause let a reader that started
    // late on a loaded machine be overtaken by the write, and the test's premise failed).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(p.path().join("log")).unwrap_or_default();
        let started = log.lines().filter(|l| l.starts_with("start r")).count();
        if started >= running {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the reads never started: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let writer = p.spawn(&[&["run", "write.yaml", "-q"], extra].concat());
    for (name, child) in [("reads", reader), ("write", writer)] {
        let out = child.wait_with_output().expect("the run ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {:?} {stderr}", out.status);
    }
    spans(p)
}

fn race_project() -> Project {
    let manifest = [
        "[concurrency]\nmax_concurrent_tools = 8\n[concurrency.per_tool]\nread = 2\n".to_string(),
        logging_tool("read", "read", "db", "1.0"),
        logging_tool("write", "write", "db", "0.4"),
        "[tools.crash]\nkind = \"scripted\"\neffect = \"write\"\nbackend = \"db\"\nlatency = \"30s\"\n"
            .to_string(),
    ]
    .concat();
    let p = Project::new(&manifest);
    let reads = (1..=4).map(|i| format!("- {{ id: r{i}, tool: read }}\n"));
    p.write("reads.yaml", &reads.collect::<String>());
    p.write("write.yaml", "- { id: w, tool: write }\n");
    p
}

/// A process whose reads hold a backend shared lets its later reads join that hold without a
/// system call — but only while no write is announced. (With reads joining whenever their
/// process holds the backend, r3 overtook the write 3 times out of 3.)
#[test]
fn a_read_joining_its_process_hold_never_overtakes_a_write_another_process_announced() {
    reads_and_a_write_from_two_processes(&race_project());
}

/// A process killed while it writes leaves its announcement behind (nobody takes it back):
/// the kernel still drops its lock at once, so reads go on, and the order still holds — reads
/// then look at the gate each time, as they did before the count existed.
#[test]
fn a_writer_killed_mid_write_leaves_reads_running_and_the_order_strict() {
    let p = race_project();
    p.write("crash.yaml", "- { id: x, tool: crash }\n");
    let mut crash = p.spawn(&["run", "crash.yaml", "-q"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    crash.kill().expect("SIGKILL the writer");
    let _ = crash.wait();
    let started = std::time::Instant::now();
    let (doc, code) = p.run_json("- { id: a, tool: read }\n- { id: b, tool: read }\n", &[]);
    assert_eq!(code, 0, "{doc}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the reads waited for a dead writer"
    );
    reads_and_a_write_from_two_processes(&p);
}

/// The same order through a Redis lane store, where a read asks for its backend with its tool
/// lane, in one script.
#[test]
fn through_redis_a_read_taken_with_its_lane_never_overtakes_a_write_another_process_queued() {
    let Some(redis) = Redis::start() else { return };
    let p = race_project();
    let s = reader_then_writer(&p, ("reads.yaml", 2), &["--lane-store", &redis.url]);
    for r in ["r1", "r2"] {
        assert!(s[r].1 <= s["w"].0, "the write ran under {r}: {s:?}");
    }
    for r in ["r3", "r4"] {
        assert!(s["w"].1 <= s[r].0, "{r} overtook the waiting write: {s:?}");
    }
}

/// Through Redis, a read whose backend came with its tool lane but that must then wait for a
/// later lane (the batch's own `per_tool` of 1, kept in the process) gives the read back
/// before it waits, and asks again after its lanes, as every call did before: a write another
/// process queued meanwhile goes first (one read, the write, the other), and no call waits for a lane while it
/// holds a backend (the order that keeps two calls from waiting for each other). Keeping the
/// read ran both reads before the write.
#[test]
fn through_redis_a_read_that_must_wait_for_a_later_lane_holds_no_backend_meanwhile() {
    let Some(redis) = Redis::start() else { return };
    let p = race_project();
    let two = "concurrency:\n  per_tool: { read: 1 }\ncalls:\n  - { id: r1, tool: read }\n  - { id: r2, tool: read }\n";
    p.write("two.yaml", two);
    let s = reader_then_writer(&p, ("two.yaml", 1), &["--lane-store", &redis.url]);
    // Which read takes the batch's lane first is a race inside the process (both are granted
    // their tool lane at once); the order around the write is not.
    let (first, second) = match s["r1"].0 <= s["r2"].0 {
        true => ("r1", "r2"),
        false => ("r2", "r1"),
    };
    assert!(s[first].1 <= s["w"].0, "the write ran under {first}: {s:?}");
    assert!(
        s["w"].1 <= s[second].0,
        "{second} held its read while it waited for the batch's lane: {s:?}"
    );
}
