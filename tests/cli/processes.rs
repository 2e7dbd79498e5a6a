//! `command` tools as real processes: argv without a shell, stdin JSON, environment, exit
//! status, bounded output, process groups killed on timeout.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{results, Project};

const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8

[tools.echo]
kind = "command"
effect = "read"
command = ["echo", "{text}"]
stdin = "none"

[tools.args]
kind = "command"
effect = "read"
command = ["printf", "%s|", "{a}", "--b={b}"]
stdin = "none"

[tools.cat]
kind = "command"
effect = "read"
command = ["cat"]

[tools.env]
kind = "command"
effect = "write"
idempotent = true
command = ["sh", "-c", "printf '%s %s %s %s' \"$FLUX_CALL_ID\" \"$FLUX_TOOL\" \"$FLUX_TENANT\" \"$FLUX_IDEMPOTENCY_KEY\"; printf ' %s' \"$EXTRA\""]
stdin = "none"
env = { EXTRA = "from-manifest" }

[tools.fail]
kind = "command"
effect = "read"
command = ["sh", "-c", "echo starting; echo 'something broke' >&2; exit 7"]
stdin = "none"

[tools.forks]
kind = "command"
effect = "read"
command = ["sh", "-c", "sleep 300 & echo $! > \"$1\"; wait", "forks", "{pidfile}"]
stdin = "none"
timeout = "500ms"
kill_grace = "1s"

[tools.flood]
kind = "command"
effect = "read"
command = ["head", "-c", "52428800", "/dev/zero"]
stdin = "none"

[tools.flaky]
kind = "command"
effect = "read"
command = ["sh", "-c", "if [ -e \"$1\" ]; then echo recovered; else touch \"$1\"; exit 75; fi", "flaky", "{marker}"]
stdin = "none"
retries = 2
retry_on_exit = [75]

[tools.flaky_write]
kind = "command"
effect = "write"
command = ["sh", "-c", "if [ -e \"$1\" ]; then echo recovered; else touch \"$1\"; exit 75; fi", "flaky", "{marker}"]
stdin = "none"
retries = 2
retry_on_exit = [75]

[tools.missing]
kind = "command"
effect = "read"
command = ["/nonexistent/program"]

[tools.signals]
kind = "command"
effect = "read"
command = ["grep", "-E", "^Sig(Blk|Ign|Cgt)", "/proc/self/status"]
stdin = "none"

[tools.plain]
kind = "command"
effect = "read"
command = ["./plain.sh"]
stdin = "none"

[tools.nowhere]
kind = "command"
effect = "read"
command = ["no-such-program-on-any-path"]
stdin = "none"

[tools.inside]
kind = "command"
effect = "read"
command = ["pwd"]
cwd = "sub"
stdin = "none"

[tools.masks]
kind = "command"
effect = "read"
command = ["sh", "-c", "grep SigBlk /proc/self/status; grep -h SigBlk /proc/$PPID/task/*/status"]
stdin = "none"

[tools.threads]
kind = "command"
effect = "read"
command = ["sh", "-c", "cat /proc/$PPID/task/*/comm"]
stdin = "none"
"#;

#[test]
fn shell_metacharacters_reach_the_program_verbatim() {
    let p = Project::new(MANIFEST);
    let nasty = "; rm -rf / $(id) `id` && echo pwned | cat > /tmp/x ' \" \\ *";
    let batch = serde_json::json!([{"tool": "echo", "args": {"text": nasty}}, {"tool": "args", "args": {"a": "$(id)", "b": "`id`;x"}}]);
    let (doc, code) = p.run_json(&batch.to_string(), &[]);
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert_eq!(r[0]["output"], nasty);
    assert_eq!(r[1]["output"], "$(id)|--b=`id`;x|");
}

#[test]
fn arguments_arrive_on_stdin_as_json_and_output_json_is_parsed() {
    let p = Project::new(MANIFEST);
    let (doc, code) = p.run_json("- tool: cat\n  args: { n: 1, list: [a, b] }\n", &[]);
    assert_eq!(code, 0);
    assert_eq!(
        results(&doc)[0]["output"],
        serde_json::json!({"n": 1, "list": ["a", "b"]})
    );
}

#[test]
fn the_call_gets_its_flux_environment() {
    let p = Project::new(MANIFEST);
    let (doc, code) = p.run_json("tenant: acme\ncalls:\n  - { id: w1, tool: env }\n", &[]);
    assert_eq!(code, 0);
    let out = results(&doc)[0]["output"].as_str().unwrap().to_string();
    let run_id = doc["run_id"].as_str().unwrap();
    // The key is RUN:CALL:FINGERPRINT, the one the result reports.
    let key = results(&doc)[0]["idempotency_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(key.starts_with(&format!("{run_id}:w1:")), "{key}");
    assert_eq!(key.len(), format!("{run_id}:w1:").len() + 16, "{key}");
    assert_eq!(out, format!("w1 env acme {key} from-manifest"));
}

#[test]
fn exit_status_and_stderr_tail_are_reported() {
    let p = Project::new(MANIFEST);
    let (doc, code) = p.run_json("- tool: fail\n- tool: missing\n", &[]);
    assert_eq!(code, 1);
    let r = results(&doc);
    assert_eq!(r[0]["error"]["kind"], "exit_status");
    assert_eq!(
        r[0]["error"]["message"],
        "tool `fail` exited with status 7: something broke"
    );
    assert_eq!(r[1]["error"]["kind"], "spawn_failed");
    assert!(r[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/program"));
}

/// Whether this system has pidfds (Linux 5.3 and later).
fn pidfds() -> bool {
    // SAFETY: pidfd_open(2) on our own pid; the descriptor is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if fd >= 0 {
        // SAFETY: the descriptor was just opened and is ours.
        unsafe { libc::close(fd as i32) };
    }
    fd >= 0
}

/// A child's exit must wake no thread of flux-tools (see `quiet_child_exits`): SIGCHLD is
/// blocked in every one of its threads, while the program itself starts with nothing blocked.
#[test]
fn sigchld_is_blocked_in_every_thread_and_in_no_program() {
    if !pidfds() {
        eprintln!("NOTICE: no pidfds on this system: SIGCHLD is left alone, nothing to check");
        return;
    }
    let p = Project::new(MANIFEST);
    let (doc, code) = p.run_json("- tool: masks\n", &[]);
    assert_eq!(code, 0, "{doc}");
    let out = results(&doc)[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let masks: Vec<u64> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|m| u64::from_str_radix(m, 16).ok())
        .collect();
    assert!(
        masks.len() >= 3,
        "the program and at least two threads: {out}"
    );
    assert_eq!(
        masks[0], 0,
        "the program starts with signals blocked: {out}"
    );
    let sigchld = 1u64 << (libc::SIGCHLD - 1);
    for m in &masks[1..] {
        assert_ne!(
            m & sigchld,
            0,
            "a thread of flux-tools takes SIGCHLD: {out}"
        );
    }
}

/// A run that holds one call at a time, capped so by the flag or by the batch, runs on one
/// worker thread (the one that sees a call end starts the next); an uncapped run on one a core.
#[test]
fn a_run_of_one_call_at_a_time_has_one_worker_thread() {
    let p = Project::new(MANIFEST);
    let workers = |batch: &str, extra: &[&str]| {
        let (doc, code) = p.run_json(batch, extra);
        assert_eq!(code, 0, "{doc}");
        let out = results(&doc)[0]["output"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (
            out.lines().filter(|l| l.starts_with("tokio-r")).count(),
            out,
        )
    };
    let (n, out) = workers("- tool: threads\n", &["--max-concurrent-tools", "1"]);
    assert_eq!(n, 1, "--max-concurrent-tools 1: {out}");
    let capped = "concurrency: { max_concurrent_tools: 1 }\ncalls:\n  - tool: threads\n";
    let (n, out) = workers(capped, &[]);
    assert_eq!(n, 1, "the batch's cap of 1: {out}");
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("NOTICE: one core here: a run of 8 at a time has one worker too, not checked");
        return;
    }
    let (n, out) = workers("- tool: threads\n", &[]);
    assert!(
        n >= 2,
        "a cap of 8 on more than one core: a worker a core: {out}"
    );
}

/// The program starts as `posix_spawn` started it: nothing blocked, SIGPIPE at its default, and what flux-tools was started ignoring (as under `nohup`) still ignored.
#[test]
fn a_program_keeps_ignored_signals_and_gets_sigpipe_back_with_nothing_blocked() {
    signals_as_posix_spawn_leaves_them(false);
}

/// The same where `clone3` is refused, as a container runtime's default seccomp profile
/// refuses it (ENOSYS): the program is started the other way, with the same start.
#[cfg(target_arch = "x86_64")]
#[test]
fn where_clone3_is_refused_a_program_starts_the_other_way_the_same() {
    signals_as_posix_spawn_leaves_them(true);
}

/// Run the `signals` tool with SIGHUP and SIGUSR2 ignored (and, when `refuse_clone3`, under a
/// seccomp filter answering ENOSYS to `clone3`), and check the dispositions it starts with.
fn signals_as_posix_spawn_leaves_them(refuse_clone3: bool) {
    use std::os::unix::process::CommandExt;
    let p = Project::new(MANIFEST);
    let batch = p.write("batch.yaml", "- tool: signals\n");
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("flux-tools"));
    cmd.current_dir(p.path())
        .args([
            "run",
            batch.to_str().unwrap_or_default(),
            "--format",
            "json",
        ])
        .env("CI", "true")
        .env_remove("FLUX_TOOLS_MANIFEST");
    // SAFETY: signal(2) and prctl(2) only, in the child between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGUSR2, libc::SIG_IGN);
            if refuse_clone3 {
                refuse_clone3_here()?;
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run flux-tools");
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let text = results(&doc)[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} in {text:?} ({doc})"))
    };
    let bit = |sig: i32| 1u64 << (sig - 1);
    assert_eq!(field("SigBlk"), 0, "{text}");
    let ignored = field("SigIgn");
    assert_ne!(
        ignored & bit(libc::SIGHUP),
        0,
        "SIGHUP no longer ignored: {text}"
    );
    assert_ne!(
        ignored & bit(libc::SIGUSR2),
        0,
        "SIGUSR2 no longer ignored: {text}"
    );
    assert_eq!(
        ignored & bit(libc::SIGPIPE),
        0,
        "SIGPIPE still ignored: {text}"
    );
}

/// A seccomp filter on this process (and what it execs) that answers `clone3` with ENOSYS.
#[cfg(target_arch = "x86_64")]
fn refuse_clone3_here() -> std::io::Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // The system call's number (`seccomp_data.nr`, at offset 0).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_clone3 as u32,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl(2) on this process with a filter that outlives the call.
    let r = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog)
        }
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn refuse_clone3_here() -> std::io::Result<()> {
    Ok(())
}

/// Why a program could not start comes back from the child: a file that is not executable,
/// a bare name on no folder of `PATH`; and a program starts in its `cwd`.
#[test]
fn a_program_that_cannot_start_says_why_and_one_that_can_runs_in_its_folder() {
    let p = Project::new(MANIFEST);
    p.write("plain.sh", "#!/bin/sh\necho never\n");
    std::fs::create_dir(p.path().join("sub")).expect("make sub");
    let (doc, _) = p.run_json("- tool: plain\n- tool: nowhere\n- tool: inside\n", &[]);
    let r = results(&doc);
    for (i, why) in [(0, "Permission denied"), (1, "No such file or directory")] {
        assert_eq!(r[i]["status"], "error", "{}", r[i]);
        assert_eq!(r[i]["error"]["kind"], "spawn_failed", "{}", r[i]);
        let message = r[i]["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("cannot start") && message.contains(why),
            "{message}"
        );
    }
    assert_eq!(r[2]["status"], "ok", "{}", r[2]);
    let dir = r[2]["output"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(dir.ends_with("/sub"), "{dir}");
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// The pid a tool wrote to `path`.
fn pid_in(path: &std::path::Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether `pid` is gone within 3 s (a signal takes a moment to be delivered).
fn gone_soon(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    !alive(pid)
}

#[test]
fn a_timed_out_tool_takes_its_grandchildren_with_it() {
    let p = Project::new(MANIFEST);
    let pidfile = p.path().join("grandchild.pid");
    let batch =
        serde_json::json!([{"tool": "forks", "args": {"pidfile": pidfile.to_str().unwrap()}}]);
    let started = Instant::now();
    let (doc, code) = p.run_json(&batch.to_string(), &[]);
    assert_eq!(code, 1);
    assert_eq!(results(&doc)[0]["status"], "timed_out");
    assert_eq!(
        results(&doc)[0]["error"]["message"],
        "tool 'forks' exceeded its 500ms timeout"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = pid_in(&pidfile);
    // SIGTERM went to the whole group; give the kernel a moment to deliver it.
    assert!(gone_soon(pid), "grandchild {pid} outlived its call");
}

#[test]
fn fifty_megabytes_of_output_is_output_too_large_in_bounded_memory() {
    let p = Project::new(MANIFEST);
    let b = p.write(
        "b.yaml",
        "- tool: flood\n- tool: echo\n  args: { text: fine }\n",
    );
    // The results document also goes to a FIFO nobody opens until the peak is read: the run
    // is over but the process still alive. (Its own high-water mark, from /proc: a rusage
    // would count the test harness's pages, which the child shares until it execs.)
    let fifo = p.path().join("out.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let mut child = p.spawn(&[
        "run",
        b.to_str().unwrap(),
        "--format",
        "json",
        "--output",
        fifo.to_str().unwrap(),
    ]);
    let stdout = child.stdout.take().unwrap();
    let doc: Value = serde_json::Deserializer::from_reader(stdout)
        .into_iter::<Value>()
        .next()
        .expect("a results document")
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    let mut copy = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::open(&fifo).unwrap(), &mut copy).unwrap();
    let _ = child.wait();
    let r = results(&doc);
    assert_eq!(r[0]["status"], "error");
    assert_eq!(r[0]["error"]["kind"], "output_too_large");
    assert_eq!(r[1]["output"], "fine");
    assert!(copy.contains("output_too_large"));
    let max_rss_mb = hwm_kb / 1024;
    assert!(
        max_rss_mb < 100,
        "peak RSS {max_rss_mb} MB while a tool printed 50 MB"
    );
}

#[test]
fn retry_on_exit_retries_idempotent_commands_only() {
    let p = Project::new(MANIFEST);
    let a = p.path().join("a.marker");
    let b = p.path().join("b.marker");
    let batch = serde_json::json!([
        {"tool": "flaky", "args": {"marker": a.to_str().unwrap()}},
        {"tool": "flaky_write", "args": {"marker": b.to_str().unwrap()}},
    ]);
    let (doc, code) = p.run_json(&batch.to_string(), &[]);
    assert_eq!(code, 1);
    let r = results(&doc);
    assert_eq!(r[0]["status"], "ok");
    assert_eq!(r[0]["output"], "recovered");
    assert_eq!(r[0]["attempts"], 2);
    // A write that is not idempotent is never retried: a second attempt could be a second effect.
    assert_eq!(r[1]["status"], "error");
    assert_eq!(r[1]["attempts"], 1);
    assert_eq!(r[1]["error"]["kind"], "exit_status");
}

#[test]
fn an_unbounded_batch_fits_what_the_machine_can_hold() {
    let p = Project::new("[tools.nap]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"sleep\", \"0.2\"]\nstdin = \"none\"\n");
    let batch: String = (0..600).map(|_| "{\"tool\": \"nap\"}\n").collect();
    let b = p.write("b.jsonl", &batch);
    let bin = assert_cmd::cargo::cargo_bin("flux-tools");
    // 256 descriptors: without a process cap this batch would fail with "too many open files".
    let out = std::process::Command::new("sh")
        .current_dir(p.path())
        .args([
            "-c",
            &format!(
                "ulimit -n 256 && exec {} run {} --format json",
                bin.display(),
                b.display()
            ),
        ])
        .env("CI", "true")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(results(&doc).iter().all(|r| r["status"] == "ok"));
    let lane = doc["stats"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "processes")
        .expect("a processes lane");
    let cap = lane["limit"].as_u64().unwrap();
    assert!(cap <= 48, "cap {cap} from ulimit -n 256");
    assert_eq!(lane["peak_in_flight"].as_u64().unwrap(), cap);
    // --max-processes lowers it further.
    let sixty: String = batch.lines().take(60).map(|l| format!("{l}\n")).collect();
    let (doc, code) = p.run_json(&sixty, &["--max-processes", "3"]);
    assert_eq!(code, 0);
    let lane = doc["stats"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "processes")
        .unwrap();
    assert_eq!(lane["limit"], 3);
    assert_eq!(lane["peak_in_flight"], 3);
}

#[test]
fn a_manifest_found_in_a_parent_folder_runs_its_commands_from_there() {
    // Before: `./bin/where` resolved against wherever flux-tools was started, so a manifest
    // found in a parent folder failed with "No such file or directory".
    let p = Project::new(
        "[tools.where]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"./bin/where\"]\nstdin = \"none\"\n",
    );
    std::fs::create_dir_all(p.path().join("bin")).unwrap();
    let script = p.write(
        "bin/where",
        "#!/bin/sh\nprintf '{\"pwd\": \"%s\", \"invoked\": \"%s\"}' \"$(pwd)\" \"$FLUX_INVOCATION_DIR\"\n",
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sub = p.path().join("deep/er");
    std::fs::create_dir_all(&sub).unwrap();
    let out = crate::common::flux()
        .current_dir(&sub)
        .args(["run", "-", "--format", "json"])
        .write_stdin("- tool: where\n")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let output = &results(&doc)[0]["output"];
    let canon = |p: &std::path::Path| p.canonicalize().unwrap().display().to_string();
    assert_eq!(output["pwd"], canon(p.path()), "{doc}");
    assert_eq!(output["invoked"], canon(&sub), "{doc}");
}

#[test]
fn a_tool_that_never_stops_writing_to_stderr_still_times_out() {
    // Output is read before the exit and the stop is looked at first: a pipe that never
    // pauses must not keep the timeout from being seen.
    let p = Project::new(
        "[tools.babble]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"sh\", \"-c\", \"yes babble >&2\"]\nstdin = \"none\"\ntimeout = \"1s\"\nkill_grace = \"1s\"\n",
    );
    let started = Instant::now();
    let (doc, code) = p.run_json("- tool: babble\n", &[]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(results(&doc)[0]["error"]["kind"], "timeout", "{doc}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the run took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_manifests_env_sets_path_and_wins_over_the_calls_own_variables() {
    let p = Project::new("");
    std::fs::create_dir(p.path().join("bin")).expect("bin");
    let script = p.write(
        "bin/only-here",
        "#!/bin/sh\nprintf '%s %s' \"$FLUX_TOOL\" \"$FLUX_CALL_ID\"\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = p.path().join("bin");
    let manifest = format!(
        "[tools.mine]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"only-here\"]\nstdin = \"none\"\nenv = {{ PATH = \"{}:/usr/bin:/bin\", FLUX_TOOL = \"renamed\" }}\n",
        bin.display()
    );
    p.write("tools.toml", &manifest);
    let (doc, code) = p.run_json("- { id: c9, tool: mine }\n", &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(results(&doc)[0]["output"], "renamed c9", "{doc}");
}

/// A program that exits while a background child of its own still holds its pipes: the exit is
/// seen (the pipes never end on their own), the group goes with it, and the call is `ok` with
/// what the program printed.
#[test]
fn a_program_that_exits_while_its_background_child_holds_the_pipes_finishes_and_takes_it_along() {
    let p = Project::new(
        "[tools.leaves]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"sh\", \"-c\", \"sleep 300 & echo $! > \\\"$1\\\"; echo '{\\\"left\\\": true}'\", \"leaves\", \"{pidfile}\"]\nstdin = \"none\"\n",
    );
    let pidfile = p.path().join("child.pid");
    let batch =
        serde_json::json!([{"tool": "leaves", "args": {"pidfile": pidfile.to_str().unwrap()}}]);
    let started = Instant::now();
    let (doc, code) = p.run_json(&batch.to_string(), &[]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(results(&doc)[0]["output"]["left"], true, "{doc}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the run took {:?}",
        started.elapsed()
    );
    let pid = pid_in(&pidfile);
    assert!(gone_soon(pid), "background child {pid} outlived its call");
}

/// One that escaped the group (`setsid`) and holds the pipes: the call ends after the drain
/// wait, with what was printed, not when the escapee lets go.
#[test]
fn a_program_whose_escaped_child_holds_the_pipes_finishes_after_the_drain_wait() {
    let p = Project::new(
        "[tools.escapes]\nkind = \"command\"\neffect = \"read\"\ncommand = [\"sh\", \"-c\", \"setsid sleep 120 & echo $! > \\\"$1\\\"; echo '{\\\"left\\\": true}'\", \"escapes\", \"{pidfile}\"]\nstdin = \"none\"\n",
    );
    let pidfile = p.path().join("escapee.pid");
    let batch =
        serde_json::json!([{"tool": "escapes", "args": {"pidfile": pidfile.to_str().unwrap()}}]);
    let started = Instant::now();
    let (doc, code) = p.run_json(&batch.to_string(), &[]);
    let took = started.elapsed();
    let pid = pid_in(&pidfile);
    // SAFETY: a signal to the escapee this test started (it outlives the call by design).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(code, 0, "{doc}");
    assert_eq!(results(&doc)[0]["output"]["left"], true, "{doc}");
    assert!(
        took < Duration::from_secs(60),
        "the run waited for the escapee: {took:?}"
    );
}
