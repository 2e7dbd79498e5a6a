//! The `command` kind: a program run directly (never through a shell) in its own process
//! group.
//!
//! Placeholders become whole argv elements; the arguments go to stdin as one JSON object;
//! stdout is read while the program runs and bounded by `max_output` (beyond it the group is
//! killed: memory stays bounded whatever the tool prints); stderr keeps only its tail. On a
//! timeout or when the run ends, the whole group gets SIGTERM, then SIGKILL after
//! `kill_grace`; when the program exits, anything it left running in its group is killed, so
//! no child outlives the call.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
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

mod capture;
mod clone3;
mod pipes;
mod process;
mod spawn;

use capture::{exiting_gone, read_into, trim_tail, Capture};
use process::{nonblocking, Environment, ExitWatch, GroupGuard, Launch, Reaped};
pub(crate) use process::quiet_child_exits;

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
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

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
/// How long a program runs before its exit is watched whether or not its pipes have ended.
/// Most programs end their output by exiting and are reaped when it ends, without a pidfd.
const WATCH_AFTER: Duration = Duration::from_millis(50);

pub struct CommandTool {
    name: String,
    spec: CommandSpec,
    /// The environment its programs inherit, made once.
    env: Environment,
    /// `FLUX_INVOCATION_DIR=…` (where flux-tools was started; the program runs in `spec.cwd`),
    /// made once.
    invocation_var: CString,
    /// `spec.cwd`, when it is not where flux-tools runs (else the program starts here and
    /// nothing changes directory).
    cwd: Option<CString>,
    /// The stdout and stderr pipes its next call takes, made while its last program ran.
    spare: pipes::Spare,
}

/// The variables every call sets (a manifest's `env` may set more, and wins over these).
const CALL_VARS: [&str; 7] = [
    "FLUX_CALL_ID",
    "FLUX_TOOL",
    "FLUX_TENANT",
    "FLUX_RUN_ID",
    "FLUX_IDEMPOTENCY_KEY",
    "FLUX_TOOLS_LEASE",
    "FLUX_INVOCATION_DIR",
];

impl CommandTool {
    pub fn new(tool: &Tool, spec: CommandSpec) -> CommandTool {
        let invocation_dir = std::env::current_dir().unwrap_or_default();
        let mut set: Vec<&str> = CALL_VARS.to_vec();
        set.extend(spec.env.keys().map(String::as_str));
        let env = Environment::inherit(&set);
        let cwd = (spec.cwd != invocation_dir)
            .then(|| CString::new(spec.cwd.as_os_str().as_bytes()).ok())
            .flatten();
        let dir = invocation_dir.as_os_str().as_bytes();
        let invocation_var = process::entry(b"FLUX_INVOCATION_DIR", dir).unwrap_or_default();
        CommandTool {
            name: tool.name.clone(),
            invocation_var,
            env,
            cwd,
            spec,
            spare: pipes::Spare::default(),
        }
    }

    /// What to start for `inv`: its program and arguments rendered, its variables.
    fn launch(&self, inv: &Invocation) -> Result<Launch<'_>, Failure> {
        let render_err = |e: RenderError| match e {
            RenderError::Env(m) => Failure::failed(ErrorKind::SpawnFailed, m.to_string()),
            RenderError::MissingArg(_) => Failure::failed(ErrorKind::Guardrail, e.to_string()),
        };
        let nul = |what: &str| {
            let tool = &self.name;
            Failure::failed(
                ErrorKind::SpawnFailed,
                format!("cannot start tool `{tool}`: {what} holds a NUL byte"),
            )
        };
        let mut argv = Vec::with_capacity(self.spec.argv.len());
        for t in &self.spec.argv {
            let a = t.render(inv.args(), &|s| s.to_string()).map_err(render_err)?;
            argv.push(CString::new(a).map_err(|_| nul("an argument"))?);
        }
        let Some(first) = argv.first() else {
            return Err(Failure::failed(
                ErrorKind::SpawnFailed,
                format!("tool `{}` has an empty command", self.name),
            ));
        };
        // `./bin/lookup`: the manifest's folder, wherever flux-tools was started. A bare name
        // (`cat`) is looked up in PATH.
        let path = Path::new(std::ffi::OsStr::from_bytes(first.as_bytes()));
        let program = if path.is_relative() && path.components().count() > 1 {
            let joined = self.spec.dir.join(path);
            CString::new(joined.as_os_str().as_bytes()).map_err(|_| nul("the program"))?
        } else {
            first.clone()
        };
        let mut vars = Vec::with_capacity(CALL_VARS.len() + 1 + self.spec.env.len());
        let lease = inv.lease();
        let own: [(&str, &[u8]); 6] = [
            ("FLUX_CALL_ID", inv.call_id().as_bytes()),
            ("FLUX_TOOL", inv.tool().as_bytes()),
            ("FLUX_TENANT", inv.tenant().as_bytes()),
            ("FLUX_RUN_ID", inv.run_id().as_bytes()),
            ("FLUX_IDEMPOTENCY_KEY", inv.idempotency_key.as_deref().unwrap_or("").as_bytes()),
            ("FLUX_TOOLS_LEASE", lease.as_bytes()),
        ];
        for (k, v) in own {
            vars.push(process::entry(k.as_bytes(), v).ok_or_else(|| nul(k))?);
        }
        vars.push(self.invocation_var.clone());
        if let Some(tp) = inv.traceparent() {
            vars.push(process::entry(b"TRACEPARENT", tp.as_bytes()).ok_or_else(|| nul("TRACEPARENT"))?);
        }
        for (k, v) in &self.spec.env {
            let v = v.render(inv.args(), &|s| s.to_string()).map_err(render_err)?;
            vars.retain(|e| process::key(e) != k.as_bytes());
            vars.push(process::entry(k.as_bytes(), v.as_bytes()).ok_or_else(|| nul(k))?);
        }
        Ok(Launch {
            program,
            argv,
            env: &self.env,
            vars,
            cwd: self.cwd.clone(),
            stdin: self.spec.stdin_json,
        })
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let Proc {
            mut child,
            mut guard,
            exit,
            mut stdout,
            mut stderr,
        } = self.start(inv)?;
        // The next call's pipes, made while this program runs.
        self.spare.refill();

        let max = usize::try_from(self.spec.max_output).unwrap_or(usize::MAX);
        let mut cap = Capture::new(max);
        let mut status = None;
        let mut drain_deadline: Option<tokio::time::Instant> = None;
        // The exit is watched once both pipes have ended, or from `WATCH_AFTER` on (a program
        // that exits while something it started holds its pipes is seen that late at worst).
        let watch_from = tokio::time::sleep(WATCH_AFTER);
        tokio::pin!(watch_from);
        let mut watching = false;

        // One stop future for the whole loop (not one per turn); it borrows `stop`, so the
        // loop sits in a block and the termination happens after it.
        let stopped = {
            let stopped = stop.stopped();
            tokio::pin!(stopped);
            loop {
                if status.is_some() && cap.closed() {
                    break false;
                }
                if status.is_none() && cap.closed() && !watching {
                    // Both pipes ended, as they do when a program exits: most often it is
                    // gone already, or a moment from it (see `Capture::one_ended`), and is
                    // reaped without a pidfd ever being opened.
                    if exit.gone() || exiting_gone(&exit) {
                        status = Some(settle(&mut guard, &mut child, &exit).await?);
                        continue;
                    }
                    watching = true;
                }
                let drain = async {
                    match drain_deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                // In this order: a stop first; then output, so that the end of both pipes
                // (which closes as the program exits, just before its exit is seen) is read
                // before the exit and no drain timer is set for a program that left nothing
                // open. The runtime's budget makes a pipe that never pauses yield in time.
                tokio::select! {
                    biased;
                    _ = &mut stopped, if status.is_none() => break true,
                    n = read_into(&mut stdout, &mut cap.out, 16 * 1024), if cap.out_open => match n {
                        Ok(0) | Err(_) => {
                            cap.out_open = false;
                            cap.one_ended(&stdout, &stderr);
                        }
                        Ok(_) if cap.out.len() > max => {
                            return Err(self.too_large(&mut guard, &mut child, &exit).await);
                        }
                        Ok(_) => {}
                    },
                    n = read_into(&mut stderr, &mut cap.err_tail, 4 * 1024), if cap.err_open => match n {
                        Ok(0) | Err(_) => {
                            cap.err_open = false;
                            cap.one_ended(&stdout, &stderr);
                            if cap.out.len() > max {
                                return Err(self.too_large(&mut guard, &mut child, &exit).await);
                            }
                        }
                        Ok(_) => trim_tail(&mut cap.err_tail),
                    },
                    _ = &mut watch_from, if !watching && status.is_none() => watching = true,
                    _ = exit.exited(), if watching && status.is_none() => {
                        status = Some(settle(&mut guard, &mut child, &exit).await?);
                        // Its pipes closed as it exited, whether or not the runtime has heard
                        // yet: what they hold is read now, and only a pipe something else
                        // still holds open is waited for, a while.
                        cap.read_ready(&stdout, &stderr);
                        if cap.out.len() > max {
                            return Err(self.too_large(&mut guard, &mut child, &exit).await);
                        }
                        if !cap.closed() {
                            drain_deadline = Some(tokio::time::Instant::now() + DRAIN_WAIT);
                        }
                    },
                    _ = drain => break false,
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
            return match String::from_utf8(cap.out) {
                Ok(text) => Ok(parse_output(&text)),
                Err(_) => Err(Failure::failed(
                    ErrorKind::InvalidOutput,
                    format!("tool `{}` printed output that is not UTF-8", self.name),
                )),
            };
        }
        Err(self.exit_failure(status, &cap.err_tail))
    }

    /// Start the program in its own process group, its arguments written to stdin.
    fn start(&self, inv: &Invocation) -> Result<Proc, Failure> {
        let launch = self.launch(inv)?;
        // Our ends are made non-blocking and watched by the runtime before the program starts
        // (stdout's and stderr's while the last program ran, when it did).
        let failed = |e: std::io::Error| {
            let program = self.spec.argv.first().map(|t| t.redacted());
            Failure::failed(
                ErrorKind::SpawnFailed,
                format!("cannot start `{}`: {e}", program.unwrap_or_default()),
            )
        };
        let outputs = self.spare.take().map_err(failed)?;
        let (their_stdin, stdin) = match launch.stdin {
            true => {
                let (r, w) = process::pipe().map_err(failed)?;
                let w = nonblocking(w).and_then(pipe::Sender::from_owned_fd_unchecked);
                (Some(r), Some(w.map_err(failed)?))
            }
            false => (None, None),
        };
        let theirs = process::Theirs {
            stdin: their_stdin.as_ref(),
            stdout: &outputs.their_stdout,
            stderr: &outputs.their_stderr,
        };
        let pid = process::spawn(&launch, theirs).map_err(failed)?;
        let pipes::Outputs { stdout, stderr, .. } = outputs;
        let child = Reaped::new(pid);
        let guard = GroupGuard::new(pid);
        let exit = ExitWatch::new(pid);
        // A tool that does not read stdin may close it early: that is not an error.
        if let Some(mut stdin) = stdin {
            let body = serde_json::to_vec(inv.args()).unwrap_or_default();
            tokio::spawn(async move {
                let _ = stdin.write_all(&body).await;
                let _ = stdin.shutdown().await;
            });
        }
        Ok(Proc {
            child,
            guard,
            exit,
            stdout,
            stderr,
        })
    }

    /// The program printed more than `max_output`: its group is killed, it is reaped, and
    /// this is the call's failure.
    async fn too_large(&self, guard: &mut GroupGuard, child: &mut Reaped, exit: &ExitWatch) -> Failure {
        guard.signal(libc::SIGKILL);
        let _ = child.reap(exit).await;
        let (name, max) = (&self.name, self.spec.max_output);
        Failure::failed(
            ErrorKind::OutputTooLarge,
            format!("tool `{name}` printed more than its max_output of {max} bytes"),
        )
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

/// The program is done but not yet reaped: its group id cannot have been reused, so the group
/// is killed (nothing it started outlives the call, and no stranger's group gets the signal),
/// then it is reaped.
async fn settle(
    guard: &mut GroupGuard,
    child: &mut Reaped,
    exit: &ExitWatch,
) -> Result<std::process::ExitStatus, Failure> {
    guard.kill_once();
    child.reap(exit).await.map_err(|e| {
        Failure::failed(ErrorKind::SpawnFailed, format!("waiting for the tool failed: {e}"))
    })
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

/// Why the program of `spec` will not start (`None`: it is found, or only known at run time
/// because its name holds a placeholder or a secret). A name with a `/` is a path (relative to
/// the manifest's folder); a bare name is looked up on `PATH`.
pub(crate) fn missing_program(spec: &CommandSpec) -> Option<String> {
    let program = spec.argv.first()?.literal()?;
    if program.contains('/') {
        let path = spec.dir.join(&program);
        return (!process::executable(&path)).then(|| {
            format!("program `{program}` is not an executable file ({})", path.display())
        });
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| process::executable(&d.join(&program))));
    (!found).then(|| format!("program `{program}` is not found on PATH"))
}
