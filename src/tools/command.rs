//! The `command` kind: a program run directly (never through a shell) in its own process
//! group.
//!
//! Placeholders become whole argv elements; the arguments go to stdin as one JSON object;
//! stdout is read while the program runs and bounded by `max_output` (beyond it the group is
//! killed: memory stays bounded whatever the tool prints); stderr keeps only its tail. On a
//! timeout or when the run ends, the whole group gets SIGTERM, then SIGKILL after
//! `kill_grace`; when the program exits, anything it left running in its group is killed, so
//! no child outlives the call.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use toml::de::{DeTable, DeValue};

use super::{parse_output, Failure, Invocation, Kind, Site, Stop, ToolContext};
use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::Tool;
use crate::template::{redacted_map, RenderError, Template};

/// `kind = "command"`: a program run directly, never through a shell.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    pub argv: Vec<Template>,
    pub stdin_json: bool,
    pub env: BTreeMap<String, Template>,
    /// Where the program runs: `cwd` resolved against the manifest's folder, else that
    /// folder (as `just` runs a recipe from its justfile's folder). Absolute.
    pub cwd: PathBuf,
    /// The manifest's folder: a relative program path (`./bin/lookup`) resolves against it.
    pub dir: PathBuf,
    pub max_output: u64,
    pub kill_grace: Duration,
    pub retry_on_exit: Vec<i32>,
}

/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

impl Kind for CommandSpec {
    const NAME: &'static str = "command";
    const KEYS: &'static [&'static str] = &[
        "command",
        "stdin",
        "env",
        "cwd",
        "max_output",
        "kill_grace",
        "retry_on_exit",
    ];
    const SPAWNS_PROCESS: bool = true;
    type Runner = CommandTool;

    fn parse(r: &mut Reader<'_>, t: &DeTable<'_>, site: &Site<'_>) -> CommandSpec {
        let (ctx, span, base) = (site.ctx, site.span.clone(), site.base);
        let argv = r.templates(t, "command", ctx, true).unwrap_or_default();
        if argv.is_empty() {
            r.error(
                span,
                format!("{ctx} needs `command`, the program and its arguments"),
                Some("e.g. command = [\"./bin/lookup\", \"--id\", \"{id}\"]".into()),
            );
        } else if argv[0].placeholders().next().is_some() {
            if let Some((_, v)) = Reader::entry(t, "command") {
                r.error(
                    v.span(),
                    format!("the program in {ctx} cannot come from an argument"),
                    Some("a batch must never choose which program runs".into()),
                );
            }
        }
        let stdin_json = match r.string(t, "stdin", ctx) {
            Some((s, _)) if s == "json" => true,
            Some((s, _)) if s == "none" => false,
            Some((s, ss)) => {
                r.error(
                    ss,
                    format!("`stdin` in {ctx} is `{s}`; use \"json\" or \"none\""),
                    None,
                );
                true
            }
            None => true,
        };
        let max_output = r.max_output(t, ctx);
        let retry_on_exit = match Reader::entry(t, "retry_on_exit") {
            Some((_, v)) => match v.get_ref() {
                DeValue::Array(items) => items
                    .iter()
                    .filter_map(|i| r.int(i, &format!("each of `retry_on_exit` in {ctx}")))
                    .filter_map(|n| i32::try_from(n).ok())
                    .collect(),
                other => {
                    r.type_error(
                        v.span(),
                        &format!("`retry_on_exit` in {ctx}"),
                        "an array of exit codes",
                        other,
                    );
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        CommandSpec {
            argv,
            stdin_json,
            env: r.template_map(t, "env", ctx),
            cwd: r
                .string(t, "cwd", ctx)
                .map_or_else(|| base.to_path_buf(), |(s, _)| base.join(s)),
            dir: base.to_path_buf(),
            max_output,
            kill_grace: r
                .duration(t, "kill_grace", ctx)
                .map_or(DEFAULT_KILL_GRACE, |(d, _)| d),
            retry_on_exit,
        }
    }

    fn placeholders(&self) -> Vec<&str> {
        self.argv.iter().flat_map(Template::placeholders).collect()
    }

    fn target(&self) -> String {
        self.argv
            .iter()
            .map(Template::redacted)
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn settings(&self) -> Value {
        json!({
            "command": self.argv.iter().map(Template::redacted).collect::<Vec<_>>(),
            "stdin": if self.stdin_json { "json" } else { "none" },
            "env": redacted_map(&self.env),
            "max_output": self.max_output,
            "kill_grace": crate::duration::format(self.kill_grace),
            "retry_on_exit": self.retry_on_exit,
        })
    }

    fn runner(&self, tool: &Tool, _ctx: &ToolContext) -> Result<CommandTool, String> {
        Ok(CommandTool::new(tool, self.clone()))
    }
}

super::kind::invoke_boxed!(CommandTool);

/// How much of stderr an error keeps.
const STDERR_TAIL: usize = 2048;
/// How long to wait for pipes to close after the program exited and its group was killed
/// (a grandchild that escaped the group with setsid can hold them open).
const DRAIN_WAIT: Duration = Duration::from_millis(500);

pub struct CommandTool {
    name: String,
    spec: CommandSpec,
    /// `FLUX_INVOCATION_DIR`: where flux-tools was started (the program runs in `spec.cwd`).
    invocation_dir: PathBuf,
}

impl CommandTool {
    pub fn new(tool: &Tool, spec: CommandSpec) -> CommandTool {
        CommandTool {
            name: tool.name.clone(),
            spec,
            invocation_dir: std::env::current_dir().unwrap_or_default(),
        }
    }

    fn command(&self, inv: &Invocation) -> Result<Command, Failure> {
        let render_err = |e: RenderError| match e {
            RenderError::Env(m) => Failure::failed(ErrorKind::SpawnFailed, m.to_string()),
            RenderError::MissingArg(_) => Failure::failed(ErrorKind::Guardrail, e.to_string()),
        };
        let mut argv = Vec::with_capacity(self.spec.argv.len());
        for t in &self.spec.argv {
            argv.push(
                t.render(inv.args(), &|s| s.to_string())
                    .map_err(render_err)?,
            );
        }
        let Some((program, rest)) = argv.split_first() else {
            return Err(Failure::failed(
                ErrorKind::SpawnFailed,
                format!("tool `{}` has an empty command", self.name),
            ));
        };
        // `./bin/lookup`: the manifest's folder, wherever flux-tools was started. A bare name
        // (`cat`) is looked up in PATH.
        let program = Path::new(program);
        let mut cmd = if program.is_relative() && program.components().count() > 1 {
            Command::new(self.spec.dir.join(program))
        } else {
            Command::new(program)
        };
        cmd.args(rest)
            .stdin(if self.spec.stdin_json {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .env("FLUX_CALL_ID", inv.call_id())
            .env("FLUX_TOOL", inv.tool())
            .env("FLUX_TENANT", inv.tenant())
            .env("FLUX_RUN_ID", inv.run_id())
            .env(
                "FLUX_IDEMPOTENCY_KEY",
                inv.idempotency_key.as_deref().unwrap_or(""),
            )
            .env("FLUX_TOOLS_LEASE", inv.lease())
            .env("FLUX_INVOCATION_DIR", &self.invocation_dir)
            .current_dir(&self.spec.cwd);
        if let Some(tp) = inv.traceparent() {
            cmd.env("TRACEPARENT", tp);
        }
        for (k, v) in &self.spec.env {
            cmd.env(
                k,
                v.render(inv.args(), &|s| s.to_string())
                    .map_err(render_err)?,
            );
        }
        Ok(cmd)
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let Proc {
            mut child,
            mut guard,
            exit,
            mut stdout,
            mut stderr,
        } = self.start(inv)?;

        let max = usize::try_from(self.spec.max_output).unwrap_or(usize::MAX);
        let mut out: Vec<u8> = Vec::with_capacity(4096.min(max + 1));
        let mut err_tail: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut ebuf = vec![0u8; 4 * 1024];
        let (mut out_open, mut err_open) = (true, true);
        let mut status = None;
        let mut drain_deadline: Option<tokio::time::Instant> = None;

        // One stop future for the whole loop (not one per turn); it borrows `stop`, so the
        // loop sits in a block and the termination happens after it.
        let stopped = {
            let stopped = stop.stopped();
            tokio::pin!(stopped);
            loop {
                if status.is_some() && !out_open && !err_open {
                    break false;
                }
                let drain = async {
                    match drain_deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    n = stdout.read(&mut buf), if out_open => match n {
                        Ok(0) | Err(_) => out_open = false,
                        Ok(n) => {
                            if out.len() + n > max {
                                guard.signal(libc::SIGKILL);
                                let _ = child.reap(&exit).await;
                                return Err(Failure::failed(
                                    ErrorKind::OutputTooLarge,
                                    format!("tool `{}` printed more than its max_output of {} bytes", self.name, self.spec.max_output),
                                ));
                            }
                            out.extend_from_slice(&buf[..n]);
                        }
                    },
                    n = stderr.read(&mut ebuf), if err_open => match n {
                        Ok(0) | Err(_) => err_open = false,
                        Ok(n) => {
                            err_tail.extend_from_slice(&ebuf[..n]);
                            if err_tail.len() > STDERR_TAIL * 2 {
                                err_tail.drain(..err_tail.len() - STDERR_TAIL);
                            }
                        }
                    },
                    _ = exit.exited(), if status.is_none() => {
                        // The program is done but not yet reaped: its group id cannot have been
                        // reused, so nothing it started outlives the call and no stranger's
                        // group gets the signal. Then reap it.
                        guard.kill_once();
                        let s = child.reap(&exit).await;
                        status = Some(s.map_err(|e| Failure::failed(ErrorKind::SpawnFailed, format!("waiting for the tool failed: {e}")))?);
                        drain_deadline = Some(tokio::time::Instant::now() + DRAIN_WAIT);
                    },
                    _ = drain => break false,
                    _ = &mut stopped, if status.is_none() => break true,
                }
            }
        };
        if stopped {
            terminate(&guard, &mut child, &exit, self.spec.kill_grace, stop).await;
            return Err(Failure::Stopped);
        }
        let Some(status) = status else {
            return Err(Failure::failed(
                ErrorKind::SpawnFailed,
                "the tool's exit status was lost",
            ));
        };
        if status.success() {
            return match String::from_utf8(out) {
                Ok(text) => Ok(parse_output(&text)),
                Err(_) => Err(Failure::failed(
                    ErrorKind::InvalidOutput,
                    format!("tool `{}` printed output that is not UTF-8", self.name),
                )),
            };
        }
        Err(self.exit_failure(status, &err_tail))
    }

    /// Start the program in its own process group, its arguments written to stdin.
    fn start(&self, inv: &Invocation) -> Result<Proc, Failure> {
        let mut cmd = self.command(inv)?;
        let spawned = cmd.spawn().map_err(|e| {
            let program = self.spec.argv.first().map(|t| t.redacted());
            Failure::failed(
                ErrorKind::SpawnFailed,
                format!("cannot start `{}`: {e}", program.unwrap_or_default()),
            )
        })?;
        // Never 0 (which would name our own group to `killpg` and `kill`): a pid that does not
        // fit a pid_t is an error (Linux pids always fit; this only guards the conversion).
        let Some(pid) = libc::pid_t::try_from(spawned.id()).ok().filter(|p| *p > 0) else {
            return Err(Failure::failed(ErrorKind::SpawnFailed, "the tool's pid is out of range"));
        };
        let mut child = Reaped::new(spawned, pid);
        let guard = GroupGuard { pgid: Some(pid) };
        let exit = ExitWatch::new(pid);
        let pipes = child.0.as_mut().map(|c| (c.stdout.take(), c.stderr.take(), c.stdin.take()));
        let Some((Some(out), Some(err), stdin)) = pipes else {
            return Err(Failure::failed(
                ErrorKind::SpawnFailed,
                "the child's pipes were not captured",
            ));
        };
        let lost = |e: std::io::Error| {
            Failure::failed(ErrorKind::SpawnFailed, format!("cannot watch the tool's output: {e}"))
        };
        let stdout = nonblocking(out.into()).and_then(pipe::Receiver::from_owned_fd_unchecked);
        let stderr = nonblocking(err.into()).and_then(pipe::Receiver::from_owned_fd_unchecked);
        let (stdout, stderr) = (stdout.map_err(lost)?, stderr.map_err(lost)?);
        if let Some(stdin) = stdin {
            let body = serde_json::to_vec(inv.args()).unwrap_or_default();
            let sender = nonblocking(stdin.into()).and_then(pipe::Sender::from_owned_fd_unchecked);
            // A tool that does not read stdin may close it early: that is not an error.
            if let Ok(mut stdin) = sender {
                tokio::spawn(async move {
                    let _ = stdin.write_all(&body).await;
                    let _ = stdin.shutdown().await;
                });
            }
        }
        Ok(Proc {
            child,
            guard,
            exit,
            stdout,
            stderr,
        })
    }

    /// A non-zero exit (or death by a signal), with the tail of stderr; transient when the
    /// status is one `retry_on_exit` names.
    fn exit_failure(&self, status: std::process::ExitStatus, err_tail: &[u8]) -> Failure {
        let code = status.code();
        let tail = String::from_utf8_lossy(err_tail);
        let tail = tail.trim();
        let tail: String = if tail.len() > STDERR_TAIL {
            let mut start = tail.len() - STDERR_TAIL;
            while !tail.is_char_boundary(start) {
                start += 1;
            }
            format!("…{}", &tail[start..])
        } else {
            tail.to_string()
        };
        let how = match code {
            Some(c) => format!("exited with status {c}"),
            None => {
                use std::os::unix::process::ExitStatusExt;
                format!("was killed by signal {}", status.signal().unwrap_or(0))
            }
        };
        let message = if tail.is_empty() {
            format!("tool `{}` {how}", self.name)
        } else {
            format!("tool `{}` {how}: {tail}", self.name)
        };
        Failure::Failed {
            kind: ErrorKind::ExitStatus,
            message,
            transient: code.is_some_and(|c| self.spec.retry_on_exit.contains(&c)),
            retry_after: None,
        }
    }
}

/// SIGTERM the group; SIGKILL it after `grace` or when the run forces; reap the child.
async fn terminate(
    guard: &GroupGuard,
    child: &mut Reaped,
    exit: &ExitWatch,
    grace: Duration,
    stop: &mut Stop,
) {
    guard.signal(libc::SIGTERM);
    tokio::select! {
        _ = exit.exited() => {}
        _ = tokio::time::sleep(grace) => {}
        _ = stop.forced() => {}
    }
    guard.signal(libc::SIGKILL);
    let _ = child.reap(exit).await;
}

/// A started program, with its pipes registered with the runtime and its exit watched.
struct Proc {
    child: Reaped,
    guard: GroupGuard,
    exit: ExitWatch,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

/// Set a pipe end non-blocking, as the runtime's pipes need (one `fcntl`: the descriptor
/// was just made by the spawn, so its other status flags are known to be clear).
fn nonblocking(fd: std::os::fd::OwnedFd) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETFL on a descriptor we own; it changes only its status flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// The child, reaped exactly once: by [`Reaped::reap`] once it has exited, or — when the
/// call is dropped half-way — killed and reaped off the runtime's threads, so no zombie is
/// left behind in a long-lived process (`mcp serve`, `--turns`).
///
/// The program runs under `std::process` rather than `tokio::process`: tokio's child installs
/// a SIGCHLD handler (each exit then interrupts a parked worker) and opens a pidfd of its own
/// beside ours; the exit is watched by our pidfd alone.
struct Reaped(Option<Child>, libc::pid_t);

impl Reaped {
    fn new(child: Child, pid: libc::pid_t) -> Reaped {
        Reaped(Some(child), pid)
    }

    /// Wait until the program has exited (without reaping), then reap it.
    async fn reap(&mut self, exit: &ExitWatch) -> std::io::Result<std::process::ExitStatus> {
        let Some(child) = self.0.as_mut() else {
            return Err(std::io::Error::other("the tool was already reaped"));
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.0 = None;
                return Ok(status);
            }
            exit.exited().await;
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        // Not reaped yet, so the pid is still ours: the program itself goes, even if it left
        // its group, and is reaped where blocking is allowed.
        // SAFETY: kill(2) only sends a signal to our own unreaped child.
        unsafe {
            libc::kill(self.1, libc::SIGKILL);
        }
        let reap = move || {
            let _ = child.wait();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(reap)),
            Err(_) => drop(std::thread::Builder::new().spawn(reap)),
        }
    }
}

/// Kills the process group when the call is dropped half-way (e.g. a forced exit), so that
/// even an abandoned invocation leaves nothing running.
struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    fn signal(&self, sig: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: killpg only sends a signal; a group that is already gone yields ESRCH.
            unsafe {
                libc::killpg(pgid, sig);
            }
        }
    }
}

/// Resolves when the program has exited, *without* reaping it (a pidfd turns readable): while
/// it is a zombie its process-group id stays taken, so the group can be killed before it is
/// reaped and a recycled id can never receive the signal. Without pidfds (Linux < 5.3) it
/// looks with `waitid(WNOWAIT)` every few milliseconds instead.
struct ExitWatch(Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>, libc::pid_t);

/// How often an exit is looked for without a pidfd.
const EXIT_POLL: Duration = Duration::from_millis(5);

impl ExitWatch {
    fn new(pid: libc::pid_t) -> ExitWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open(2) on our own child; a negative result is an error, else a new
        // descriptor we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let Ok(fd) = i32::try_from(fd) else {
            return ExitWatch(None, pid);
        };
        if fd < 0 {
            return ExitWatch(None, pid);
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else; the
        // AsyncFd owns it from here and deregisters it before closing it.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let readable = tokio::io::Interest::READABLE;
        // SAFETY: the descriptor is owned by the AsyncFd and not registered elsewhere.
        let registered = unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, readable) };
        ExitWatch(registered.ok(), pid)
    }

    async fn exited(&self) {
        match &self.0 {
            Some(fd) => {
                let _ = fd.readable().await;
            }
            None => {
                while !self.gone() {
                    tokio::time::sleep(EXIT_POLL).await;
                }
            }
        }
    }

    /// Whether the program has exited, looked at without reaping it.
    fn gone(&self) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                libc::id_t::try_from(self.1).unwrap_or(0),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid when a child was found (else it stays 0).
        r != 0 || unsafe { info.si_pid() } != 0
    }
}

impl GroupGuard {
    /// SIGKILL the group now, and not again on drop (the group is gone for good).
    fn kill_once(&mut self) {
        self.signal(libc::SIGKILL);
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Why the program of `spec` will not start (`None`: it is found, or only known at run time
/// because its name holds a placeholder or a secret). A name with a `/` is a path (relative to
/// the manifest's folder); a bare name is looked up on `PATH`.
pub fn missing_program(spec: &CommandSpec) -> Option<String> {
    let program = spec.argv.first()?.literal()?;
    let executable = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = spec.dir.join(&program);
        return (!executable(&path)).then(|| {
            format!("program `{program}` is not an executable file ({})", path.display())
        });
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| executable(&d.join(&program))));
    (!found).then(|| format!("program `{program}` is not found on PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` is still our child, unreaped (a zombie included).
    fn unreaped(pid: libc::pid_t) -> bool {
        // SAFETY: a zeroed siginfo_t is valid for waitid to fill in; WNOWAIT reaps nothing.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let options = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        let id = libc::id_t::try_from(pid).unwrap_or(0);
        // SAFETY: as above; ECHILD once the pid was reaped.
        unsafe { libc::waitid(libc::P_PID, id, &mut info, options) == 0 }
    }

    fn sleeper() -> (Reaped, libc::pid_t) {
        let child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        (Reaped::new(child, pid), pid)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_call_dropped_half_way_kills_and_reaps_its_program() {
        let (child, pid) = sleeper();
        assert!(unreaped(pid));
        drop(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while unreaped(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!unreaped(pid), "the dropped call's program was left unreaped");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_exit_is_seen_before_the_reap_with_or_without_a_pidfd() {
        for pidfd in [true, false] {
            let (mut child, pid) = sleeper();
            let mut exit = ExitWatch::new(pid);
            if !pidfd {
                exit.0 = None;
            }
            assert!(!exit.gone(), "a running program is not gone");
            // SAFETY: a signal to our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let waited = tokio::time::timeout(Duration::from_secs(10), exit.exited()).await;
            assert!(waited.is_ok(), "the exit was not seen (pidfd: {pidfd})");
            // Seen, but not reaped: the group id is still taken until the reap.
            assert!(unreaped(pid), "the watch reaped the program (pidfd: {pidfd})");
            let status = child.reap(&exit).await.expect("reaped once");
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGTERM)
            );
            assert!(!unreaped(pid));
        }
    }
}
