//! From command-line arguments to what a command needs: the manifest path (discovery), the
//! output format, color, and the batch text (file or stdin).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::cli::ColorChoice;
use crate::error::{Error, SourceFile};

/// Where the manifest is: `--manifest` / `$FLUX_TOOLS_MANIFEST` (clap fills both), else
/// `tools.toml` in the current directory or the nearest parent.
pub(crate) fn manifest_path(given: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let cwd =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let mut dir: Option<&Path> = Some(&cwd);
    while let Some(d) = dir {
        let candidate = d.join("tools.toml");
        if candidate.is_file() {
            // Shown in messages: keep it short when it is right here.
            return Ok(if d == cwd {
                PathBuf::from("tools.toml")
            } else {
                candidate
            });
        }
        dir = d.parent();
    }
    Err(Error::Usage(
        "no tools.toml found here or in any parent directory\nhint: pass --manifest PATH or set FLUX_TOOLS_MANIFEST".into(),
    ))
}

/// Whether to color stdout (`stdout_terminal`: stdout is a terminal).
pub(crate) fn use_color(choice: ColorChoice, stdout_terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
                && stdout_terminal
        }
    }
}

/// Largest batch accepted, to keep memory bounded on hostile input.
pub(crate) const MAX_BATCH_BYTES: u64 = 256 << 20;

/// Text already read from stdin (to see whether it is a JSON Lines stream) that a whole-batch
/// read must put back in front of the rest.
static STDIN_PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Give back text read from stdin ahead of time.
pub(crate) fn unread_stdin(text: String) {
    let _ = STDIN_PREFIX.set(text);
}

/// Read the batch: a path, `-` for stdin, or stdin when nothing is given and it is piped
/// (`stdin_terminal`: it is not).
pub(crate) fn read_batch(arg: Option<&str>, stdin_terminal: bool) -> Result<SourceFile, Error> {
    let from_stdin = match arg {
        Some("-") => true,
        Some(_) => false,
        None if !stdin_terminal => true,
        None => {
            return Err(Error::Usage(
                "no batch given\nhint: flux-tools run BATCH.yaml, or pipe one in: cat batch.yaml | flux-tools run".into(),
            ))
        }
    };
    let mut bytes = Vec::new();
    let name = if from_stdin {
        if let Some(prefix) = STDIN_PREFIX.get() {
            bytes.extend_from_slice(prefix.as_bytes());
        }
        std::io::stdin()
            .take(MAX_BATCH_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("cannot read the batch from stdin", e))?;
        "<stdin>".to_string()
    } else {
        let path = arg.unwrap_or_default();
        let f = std::fs::File::open(path)
            .map_err(|e| Error::io(format!("cannot read batch `{path}`"), e))?;
        if f.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(Error::Usage(format!("batch `{path}` is a directory")));
        }
        f.take(MAX_BATCH_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("cannot read batch `{path}`"), e))?;
        path.to_string()
    };
    if bytes.len() as u64 > MAX_BATCH_BYTES {
        return Err(Error::Usage(format!(
            "batch `{name}` is larger than {} MiB",
            MAX_BATCH_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::Usage(format!(
            "batch `{name}` is not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.contains('\0') {
        return Err(Error::Usage(format!("batch `{name}` contains a NUL byte")));
    }
    Ok(SourceFile::new(name, text))
}

/// Check before running that an `--output` file can be written (its folder exists and it is
/// not a directory), so nothing runs only to fail at the end.
pub(crate) fn check_output_path(path: &Path) -> Result<(), Error> {
    if path.is_dir() {
        return Err(Error::Usage(format!(
            "--output `{}` is a directory",
            path.display()
        )));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(Error::Usage(format!(
            "--output `{}`: folder `{}` does not exist",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// Write `bytes` to `path` as [`write_atomic_with`] does.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Where a file the run writes goes.
enum Target {
    /// A regular file (or none yet): written to a temporary file beside it and renamed over
    /// it, so a reader never sees half a document. A symlink is resolved first, so the link
    /// stays and its target gets the document.
    Replace(PathBuf),
    /// Something that is not ours to replace — a device (`/dev/null`), a FIFO or process
    /// substitution (`>(jq …)`), a socket, `/dev/stdout`, `/dev/fd/N`: written through, in place.
    Through(PathBuf),
}

fn target_of(path: &Path) -> Target {
    let special = ["/dev/", "/proc/"]
        .iter()
        .any(|d| path.starts_with(d) || path.to_string_lossy().starts_with(d));
    match std::fs::metadata(path) {
        Ok(m) if special || !(m.is_file() || m.is_dir()) => Target::Through(path.to_path_buf()),
        Ok(_) => Target::Replace(path.canonicalize().unwrap_or_else(|_| path.to_path_buf())),
        // Nothing there yet, or a link to something not there yet: create what the link names.
        Err(_) => match std::fs::read_link(path) {
            Ok(to) => {
                let dir = path.parent().unwrap_or(Path::new("."));
                Target::Replace(dir.join(to))
            }
            Err(_) => Target::Replace(path.to_path_buf()),
        },
    }
}

/// Write a file the run produces (`--output`, `--record`, `--trace`, `report --svg`): a regular
/// file atomically (temporary file, fsync, rename), through a symlink to its target, and a
/// device, FIFO or socket in place — never replacing what is not ours.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), Error> {
    let err = |e| Error::io(format!("cannot write `{}`", path.display()), e);
    match target_of(path) {
        Target::Through(p) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .map_err(err)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            fill(&mut w).and_then(|_| w.flush()).map_err(err)
        }
        Target::Replace(p) => replace(&p, fill).map_err(err),
    }
}

/// Write `path` through a temporary file beside it, fsynced, then renamed over it.
fn replace(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "results".into());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(&tmp)?);
        fill(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// How many `command` calls the machine can hold at once: each needs about four descriptors
/// (three pipes and a spare) out of `ulimit -n`, less 64 kept for everything else, and a
/// process out of `ulimit -u` (of which half is left for the rest of the user's processes).
/// `asked` (`--max-processes`) can only lower it.
pub(crate) fn process_cap(asked: Option<u32>) -> u32 {
    let limit = |res| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct we pass; failure leaves it zeroed.
        let ok = unsafe { libc::getrlimit(res, &mut r) } == 0;
        (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
    };
    let by_fds = limit(libc::RLIMIT_NOFILE).map(|n| n.saturating_sub(64) / 4);
    let by_procs = limit(libc::RLIMIT_NPROC).map(|n| n / 2);
    let cap = [by_fds, by_procs, asked.map(u64::from)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(4096);
    u32::try_from(cap.clamp(1, 1_000_000)).unwrap_or(1_000_000)
}
