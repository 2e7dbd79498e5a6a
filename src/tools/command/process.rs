//! Starting a command's program (`spawn.rs` makes the child), and owning it until it is reaped.
//!
//! Not `std::process::Command`: once a single variable is set (every call sets seven), std
//! copies this process's whole environment into a map and back into C strings on every spawn,
//! and it opens `/dev/null` anew for each. Here the inherited environment becomes C strings
//! once per tool ([`Environment`]), a call adds only its own variables, and one `/dev/null` is
//! shared. The child starts as std starts it: in its own process group, with an empty signal
//! mask and SIGPIPE back to its default, the pipes (or `/dev/null`) on descriptors 0–2 and
//! every other descriptor closed at exec (all of ours are close-on-exec).

use std::ffi::{c_char, CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment a tool's programs inherit: this process's, made into `KEY=VALUE` C strings
/// once, without the variables every call sets itself.
pub(super) struct Environment {
    inherited: Vec<CString>,
    /// An inherited `TRACEPARENT`, left out when the call has a trace context of its own.
    traceparent: Option<CString>,
}

impl Environment {
    /// This process's environment, without the variables named in `set`.
    pub(super) fn inherit(set: &[&str]) -> Environment {
        let mut inherited = Vec::new();
        let mut traceparent = None;
        for (k, v) in std::env::vars_os() {
            if set.iter().any(|s| s.as_bytes() == k.as_bytes()) {
                continue;
            }
            let Some(e) = entry(k.as_bytes(), v.as_bytes()) else {
                continue;
            };
            if k == "TRACEPARENT" {
                traceparent = Some(e);
            } else {
                inherited.push(e);
            }
        }
        Environment {
            inherited,
            traceparent,
        }
    }
}

/// `KEY=VALUE` as a C string; `None` when either holds a NUL byte.
pub(super) fn entry(key: &[u8], value: &[u8]) -> Option<CString> {
    let mut b = Vec::with_capacity(key.len() + value.len() + 1);
    b.extend_from_slice(key);
    b.push(b'=');
    b.extend_from_slice(value);
    CString::new(b).ok()
}

/// One program to start.
pub(super) struct Launch<'a> {
    /// A path, or a bare name to look up on `PATH`.
    pub(super) program: CString,
    /// The arguments, the program as written first.
    pub(super) argv: Vec<CString>,
    pub(super) env: &'a Environment,
    /// The call's own variables, `KEY=VALUE`, each key once.
    pub(super) vars: Vec<CString>,
    /// Where it runs (`None`: where this process runs).
    pub(super) cwd: Option<CString>,
    /// Its stdin is a pipe (else `/dev/null`).
    pub(super) stdin: bool,
}

/// The program's ends of its pipes: stdin (its read end, when it gets one; else `/dev/null`),
/// stdout and stderr (their write ends). Ours are made ready for the runtime before the program
/// starts (`pipes.rs`), so that is not done while the program runs and wants the CPU.
pub(super) struct Theirs<'a> {
    pub(super) stdin: Option<&'a OwnedFd>,
    pub(super) stdout: &'a OwnedFd,
    pub(super) stderr: &'a OwnedFd,
}

/// Start the program of `l` in a process group of its own, on `theirs`: its pid (the group's
/// id).
pub(super) fn spawn(l: &Launch<'_>, theirs: Theirs<'_>) -> io::Result<libc::pid_t> {
    crate::tools::reaper::ready();
    let stdin = match theirs.stdin {
        Some(r) => r.as_raw_fd(),
        None => devnull()?,
    };
    let call_sets = |name: &[u8]| l.vars.iter().any(|v| key(v) == name);
    let mut envp: Vec<*const c_char> =
        Vec::with_capacity(l.env.inherited.len() + l.vars.len() + 2);
    envp.extend(l.env.inherited.iter().map(|e| e.as_ptr()));
    if let Some(tp) = l.env.traceparent.as_ref().filter(|_| !call_sets(b"TRACEPARENT")) {
        envp.push(tp.as_ptr());
    }
    envp.extend(l.vars.iter().map(|e| e.as_ptr()));
    envp.push(std::ptr::null());
    let mut argv: Vec<*const c_char> = l.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let path_of_call = l.vars.iter().find(|v| key(v) == b"PATH");
    let (program, search) = match path_of_call {
        // A bare name under a PATH the manifest sets is looked up there, as the program's
        // own PATH (std does the same).
        Some(p) if !l.program.as_bytes().contains(&b'/') => (lookup(&l.program, p)?, false),
        _ => (l.program.clone(), !l.program.as_bytes().contains(&b'/')),
    };
    let fds = [stdin, theirs.stdout.as_raw_fd(), theirs.stderr.as_raw_fd()];
    super::spawn::start(&program, search, &argv, &envp, fds, l.cwd.as_deref())
}

/// The key of `KEY=VALUE`.
pub(super) fn key(e: &CStr) -> &[u8] {
    let b = e.to_bytes();
    b.split(|c| *c == b'=').next().unwrap_or(b)
}

/// A pipe, both ends close-on-exec: (read, write).
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills in two new descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `/dev/null`, opened once for the process (read-only, close-on-exec): the stdin of every
/// program that gets no arguments on it.
fn devnull() -> io::Result<RawFd> {
    static NULL: OnceLock<Result<std::fs::File, i32>> = OnceLock::new();
    let opened = NULL.get_or_init(|| {
        std::fs::File::open("/dev/null").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    });
    match opened {
        Ok(f) => Ok(f.as_raw_fd()),
        Err(e) => Err(io::Error::from_raw_os_error(*e)),
    }
}

/// Whether `p` is a file someone may execute.
pub(super) fn executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `program` looked up on `path` (a `PATH=…` entry): the first executable file.
fn lookup(program: &CStr, path: &CStr) -> io::Result<CString> {
    let dirs = &path.to_bytes()[b"PATH=".len().min(path.to_bytes().len())..];
    super::spawn::on_path(program, dirs)
        .find(|p| executable(std::path::Path::new(std::ffi::OsStr::from_bytes(p.as_bytes()))))
        .ok_or_else(|| io::ErrorKind::NotFound.into())
}

/// Set a pipe end non-blocking, as the runtime's pipes need (one `fcntl`: the descriptor
/// was just made, so its other status flags are known to be clear).
pub(super) fn nonblocking(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_SETFL on a descriptor we own; it changes only its status flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Block SIGCHLD in this thread, and so in every thread it starts afterwards — call it first
/// thing in `main`, before any other thread exists — when this system has pidfds. Returns
/// whether it did.
///
/// No thread needs the signal: exits are watched with pidfds (ours, and tokio's for the
/// processes it starts), and a child starts with an empty mask. But a spawn (ours, and glibc's
/// `posix_spawn`) blocks every signal in the spawning thread until the child has exec'd, and while it does, a
/// signal the default action would drop is queued instead: an earlier child of that thread
/// that exits meanwhile wakes another thread (the main one, or the reporters') to take it.
/// At J = 8 that was a wake-up for a third of all calls. Blocked everywhere, it wakes nobody
/// and stays pending (a standard signal is kept once, however many arrive). Without pidfds
/// (Linux < 5.3) tokio reaps by SIGCHLD, so it is left alone.
pub(crate) fn quiet_child_exits() -> bool {
    // SAFETY: getpid(2) cannot fail.
    if pidfd_open(unsafe { libc::getpid() }).is_none() {
        return false;
    }
    // SAFETY: the signal set is initialised by sigemptyset before use and only read by
    // pthread_sigmask.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) == 0
    }
}

/// A pidfd for `pid` (ours, or a child of ours); `None` where the system has none.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2); a negative result is an error, else a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The child, reaped exactly once: by [`Reaped::reap`] once it has exited, or — when the
/// call is dropped half-way — killed and reaped off the runtime's threads, so no zombie is
/// left behind in a long-lived process (`mcp serve`, `--turns`).
pub(super) struct Reaped(Option<libc::pid_t>);

impl Reaped {
    pub(super) fn new(pid: libc::pid_t) -> Reaped {
        Reaped(Some(pid))
    }

    /// Wait until the program has exited (without reaping), then reap it.
    pub(super) async fn reap(&mut self, exit: &ExitWatch) -> io::Result<ExitStatus> {
        let Some(pid) = self.0 else {
            return Err(io::Error::other("the tool was already reaped"));
        };
        loop {
            if let Some(status) = wait(pid, libc::WNOHANG)? {
                self.0 = None;
                return Ok(status);
            }
            exit.exited().await;
        }
    }
}

/// `waitpid` for our own child: its status once it has exited, `None` while it runs (with
/// `WNOHANG`).
fn wait(pid: libc::pid_t, options: libc::c_int) -> io::Result<Option<ExitStatus>> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child, into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, options) };
        if r == pid {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let Some(pid) = self.0.take() else {
            return;
        };
        // Not reaped yet, so the pid is still ours: the program itself goes, even if it left
        // its group, and is reaped where blocking is allowed.
        // SAFETY: kill(2) only sends a signal to our own unreaped child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let reap = move || {
            let _ = wait(pid, 0);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(reap)),
            Err(_) => drop(std::thread::Builder::new().spawn(reap)),
        }
    }
}

/// Kills the process group when the call is dropped half-way (e.g. a forced exit), so that
/// even an abandoned invocation leaves nothing running.
pub(super) struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    /// The guard of the group program `pid` leads (the watchdog, when on, is told of it).
    pub(super) fn new(pid: i32) -> GroupGuard {
        crate::tools::reaper::watch(pid);
        GroupGuard { pgid: Some(pid) }
    }

    pub(super) fn signal(&self, sig: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: killpg only sends a signal; a group that is already gone yields ESRCH.
            unsafe {
                libc::killpg(pgid, sig);
            }
        }
    }

    /// SIGKILL the group now, and not again on drop (the group is gone for good).
    pub(super) fn kill_once(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(g) = self.pgid.take() {
            crate::tools::reaper::forget(g);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill_once();
    }
}

/// Resolves when the program has exited, *without* reaping it (a pidfd turns readable): while
/// it is a zombie its process-group id stays taken, so the group can be killed before it is
/// reaped and a recycled id can never receive the signal. Without pidfds (Linux < 5.3) it
/// looks with `waitid(WNOWAIT)` every few milliseconds instead.
///
/// The pidfd is opened (and registered with the runtime) the first time the exit is awaited,
/// not at the start: a program that ends its output by exiting is seen gone with [`gone`]
/// once its pipes end, and costs no descriptor and no registration at all.
///
/// [`gone`]: ExitWatch::gone
pub(super) struct ExitWatch {
    pid: libc::pid_t,
    /// `None` inside: no pidfd on this system, so exits are polled.
    pidfd: OnceLock<Option<tokio::io::unix::AsyncFd<OwnedFd>>>,
}

/// How often an exit is looked for without a pidfd.
const EXIT_POLL: Duration = Duration::from_millis(5);

impl ExitWatch {
    pub(super) fn new(pid: libc::pid_t) -> ExitWatch {
        ExitWatch {
            pid,
            pidfd: OnceLock::new(),
        }
    }

    /// A pidfd for the program, registered with the runtime (`None` when there is none).
    fn open(pid: libc::pid_t) -> Option<tokio::io::unix::AsyncFd<OwnedFd>> {
        let owned = pidfd_open(pid)?;
        let readable = tokio::io::Interest::READABLE;
        // SAFETY: the descriptor is owned by the AsyncFd and not registered elsewhere.
        unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, readable) }.ok()
    }

    pub(super) async fn exited(&self) {
        match self.pidfd.get_or_init(|| Self::open(self.pid)) {
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
    pub(super) fn gone(&self) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                libc::id_t::try_from(self.pid).unwrap_or(0),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid when a child was found (else it stays 0).
        r != 0 || unsafe { info.si_pid() } != 0
    }

    #[cfg(test)]
    pub(super) fn without_pidfd(pid: libc::pid_t) -> ExitWatch {
        ExitWatch {
            pid,
            pidfd: OnceLock::from(None),
        }
    }
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

    fn launch<'a>(env: &'a Environment, argv: &[&str], vars: &[(&str, &str)]) -> Launch<'a> {
        let c = |s: &str| CString::new(s).expect("no NUL");
        Launch {
            program: c(argv[0]),
            argv: argv.iter().map(|a| c(a)).collect(),
            env,
            vars: vars
                .iter()
                .filter_map(|(k, v)| entry(k.as_bytes(), v.as_bytes()))
                .collect(),
            cwd: None,
            stdin: false,
        }
    }

    /// Start `l` on a fresh pipe (its stdout and stderr both): its pid and our end.
    fn spawn_piped(l: &Launch<'_>) -> io::Result<(libc::pid_t, OwnedFd)> {
        let (ours, theirs) = pipe()?;
        let pid = spawn(
            l,
            Theirs {
                stdin: None,
                stdout: &theirs,
                stderr: &theirs,
            },
        )?;
        Ok((pid, ours))
    }

    fn sleeper() -> (Reaped, libc::pid_t) {
        let env = Environment::inherit(&[]);
        let (pid, _) = spawn_piped(&launch(&env, &["sleep", "30"], &[])).expect("sleep runs");
        (Reaped::new(pid), pid)
    }

    /// What a program printed on stdout, read to the end (blocking: tests only).
    fn stdout_of(l: &Launch<'_>) -> (String, libc::pid_t) {
        use std::io::Read;
        let (pid, stdout) = spawn_piped(l).expect("spawned");
        let mut out = String::new();
        std::fs::File::from(stdout).read_to_string(&mut out).expect("read");
        let status = wait(pid, 0).expect("waited").expect("exited");
        assert!(status.success(), "{status:?}");
        (out, pid)
    }

    #[test]
    fn a_program_gets_the_calls_variables_over_the_inherited_ones_its_own_group_and_null_stdin() {
        let env = Environment::inherit(&["FLUX_CALL_ID"]);
        let script = "printf '%s|%s|' \"$FLUX_CALL_ID\" \"$HOME\"; ps -o pgid= -p $$ | tr -d ' '; \
                      cat; echo end";
        let l = launch(&env, &["sh", "-c", script], &[("FLUX_CALL_ID", "c7")]);
        let (out, pid) = stdout_of(&l);
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(out, format!("c7|{home}|{pid}\nend\n"));
    }

    #[test]
    fn a_program_started_the_fallback_way_gets_the_same_start() {
        let env = Environment::inherit(&["FLUX_CALL_ID"]);
        let script = "printf '%s|' \"$FLUX_CALL_ID\"; grep -E '^Sig(Blk|Ign)' /proc/$$/status | \
                      tr '\\n\\t' '  '; ps -o pgid= -p $$ | tr -d ' '";
        let l = launch(&env, &["sh", "-c", script], &[("FLUX_CALL_ID", "c7")]);
        let (usual, pid) = stdout_of(&l);
        let (fallback, fpid) = super::super::clone3::with_fallback(|| stdout_of(&l));
        assert_eq!(usual.replace(&pid.to_string(), "PID"), fallback.replace(&fpid.to_string(), "PID"));
        assert!(usual.starts_with("c7|SigBlk: 0000000000000000 "), "{usual}");
        let missing = super::super::clone3::with_fallback(|| {
            spawn_piped(&launch(&env, &["flux-no-such-program"], &[]))
        });
        assert_eq!(missing.err().map(|e| e.kind()), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn a_bare_name_is_looked_up_on_the_path_the_call_sets_and_a_missing_one_is_not_found() {
        let env = Environment::inherit(&["PATH"]);
        let dir = std::env::temp_dir().join(format!("flux-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let tool = dir.join("only-here");
        std::fs::write(&tool, "#!/bin/sh\necho found\n").expect("script");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = format!("/nonexistent:{}:/bin:/usr/bin", dir.display());
        let (out, _) = stdout_of(&launch(&env, &["only-here"], &[("PATH", &path)]));
        assert_eq!(out, "found\n");
        let missing = spawn_piped(&launch(&env, &["only-here"], &[("PATH", "/bin")]));
        assert_eq!(missing.err().map(|e| e.kind()), Some(io::ErrorKind::NotFound));
        let missing = spawn_piped(&launch(&env, &["flux-no-such-program"], &[]));
        assert_eq!(missing.err().map(|e| e.kind()), Some(io::ErrorKind::NotFound));
        let _ = std::fs::remove_dir_all(&dir);
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
            let exit = match pidfd {
                true => ExitWatch::new(pid),
                false => ExitWatch::without_pidfd(pid),
            };
            assert!(!exit.gone(), "a running program is not gone");
            if pidfd {
                assert!(exit.pidfd.get().is_none(), "a pidfd was opened before it was needed");
            }
            // SAFETY: a signal to our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let waited = tokio::time::timeout(Duration::from_secs(10), exit.exited()).await;
            assert!(waited.is_ok(), "the exit was not seen (pidfd: {pidfd})");
            // Seen, but not reaped: the group id is still taken until the reap.
            assert!(unreaped(pid), "the watch reaped the program (pidfd: {pidfd})");
            let status = child.reap(&exit).await.expect("reaped once");
            assert_eq!(status.signal(), Some(libc::SIGTERM));
            assert!(!unreaped(pid));
        }
    }
}
