//! `flux-tools lock`: pin what the model is shown in `tools.lock` beside the manifest. With no
//! lock yet, it is written; with one, what differs is named and nothing is written unless
//! `--update` accepts it; `--check` never writes (for CI: exit 1 when anything differs).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{config, load_manifest, runtime};
use crate::cli::Args;
use crate::error::{Error, EXIT_CALLS_FAILED, EXIT_OK};
use crate::lock::{self, Change, Pin, FILE};

pub(super) fn lock(args: &Args, check: bool, update: bool) -> Result<u8, Error> {
    let manifest = config::manifest_path(args.manifest.as_deref())?;
    let path = manifest.parent().unwrap_or(Path::new("")).join(FILE);
    let shown = shown(args)?;
    let say = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    let locked = match std::fs::read_to_string(&path) {
        Ok(text) => match lock::parse(&path.display().to_string(), &text) {
            Ok(pins) => Some(pins),
            // `--update` writes a lock it cannot trust anew: every definition is new to it.
            Err(why) if update && !check => {
                say(format!(
                    "warning: {}; writing it anew",
                    why.lines().next().unwrap_or("")
                ));
                Some(Vec::new())
            }
            Err(why) => return Err(Error::Usage(why)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    let Some(locked) = locked else {
        if check {
            return Err(Error::Usage(format!(
                "no {} beside the manifest\nhint: write it with `flux-tools lock`, review it, and check it in",
                path.display()
            )));
        }
        write(&path, &shown)?;
        say(format!("wrote {}: {}", path.display(), counted(&shown)));
        return Ok(EXIT_OK);
    };
    let changes = lock::changes(&locked, &shown);
    if changes.is_empty() {
        say(format!(
            "{} is up to date: {}",
            path.display(),
            counted(&shown)
        ));
        return Ok(EXIT_OK);
    }
    let text: String = changes.iter().map(Change::describe).collect();
    super::stdout_write(text.as_bytes())?;
    if update && !check {
        write(&path, &shown)?;
        say(format!(
            "accepted {} in {}",
            plural(changes.len()),
            path.display()
        ));
        return Ok(EXIT_OK);
    }
    say(format!(
        "{} differs from what the servers offer ({})\nhint: review them, then accept with `flux-tools lock --update`",
        path.display(),
        plural(changes.len())
    ));
    Ok(EXIT_CALLS_FAILED)
}

/// The lock in force for the manifest at `manifest` under its `[serve] pin` (absent: strict
/// when `tools.lock` is beside it, else none), read and checked (`None`: nothing is pinned).
pub(super) fn in_force(
    manifest: &Path,
    pin: Option<crate::manifest::Pin>,
) -> Result<Option<lock::InForce>, Error> {
    use crate::manifest::Pin as Way;
    if pin == Some(Way::Off) {
        return Ok(None);
    }
    let path = manifest.parent().unwrap_or(Path::new("")).join(FILE);
    let pins = match std::fs::read_to_string(&path) {
        Ok(text) => lock::parse(&path.display().to_string(), &text).map_err(Error::Usage)?,
        // No lock: strict holds back everything, new-allowed only what a lock would change.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && pin.is_some() => Vec::new(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    Ok(Some(lock::InForce {
        pins,
        new_allowed: pin == Some(Way::NewAllowed),
    }))
}

/// The served tool names the lock in force holds back now: changed since it was written, or
/// new (empty: nothing is pinned). Asks every server, as `lock` does.
pub(super) fn held(args: &Args) -> Result<std::collections::HashSet<String>, Error> {
    let manifest = config::manifest_path(args.manifest.as_deref())?;
    let pin = load_manifest(args)?.serve.pin;
    let Some(locked) = in_force(&manifest, pin)? else {
        return Ok(Default::default());
    };
    Ok(held_of(&locked, &shown(args)?))
}

/// The served tool names `locked` holds back of `manifest` as its servers (through `hub`, or
/// a hub of its own, stopped again) offer them now.
pub(super) fn held_in(
    manifest: &crate::manifest::Manifest,
    hub: Option<std::sync::Arc<crate::tools::mcp::McpHub>>,
    locked: &lock::InForce,
    rt: &tokio::runtime::Runtime,
) -> Result<std::collections::HashSet<String>, Error> {
    let own = hub
        .is_none()
        .then(|| crate::tools::mcp::hub_for(manifest))
        .flatten();
    let asked = hub.or_else(|| own.clone());
    let shown = rt.block_on(super::serve::pins::shown(manifest.clone(), asked, true));
    if let Some(own) = own {
        rt.block_on(own.shutdown());
    }
    let shown = shown.map_err(|e| Error::Usage(format!("cannot check tools.lock: {e}")))?;
    Ok(held_of(locked, &shown))
}

/// The names of the tools of `shown` that `locked` holds back.
fn held_of(locked: &lock::InForce, shown: &[Pin]) -> std::collections::HashSet<String> {
    (shown.iter())
        .filter(|p| p.kind == lock::Kind::Tool && locked.holds(p).is_some())
        .map(|p| p.name.clone())
        .collect()
}

/// The pins of everything the manifest serves (its servers started, and stopped again).
fn shown(args: &Args) -> Result<Vec<Pin>, Error> {
    let m = load_manifest(args)?;
    let hub = crate::tools::mcp::hub_for(&m);
    let rt = runtime()?;
    let pins = rt.block_on(super::serve::pins::shown(m, hub.clone(), args.quiet));
    if let Some(hub) = hub {
        rt.block_on(hub.shutdown());
    }
    pins.map_err(Error::Usage)
}

/// Write the lock of `pins` at `path` whole or not at all (a file beside it, renamed over it).
pub(super) fn write(path: &Path, pins: &[Pin]) -> Result<(), Error> {
    let text = lock::render(pins);
    let name = path.file_name().map(|n| n.to_string_lossy().to_string());
    let temp: PathBuf = path.with_file_name(format!(
        ".{}.{}",
        name.unwrap_or_else(|| FILE.into()),
        std::process::id()
    ));
    let cannot = |e| Error::io(format!("cannot write {}", path.display()), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(cannot)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&temp);
        return Err(cannot(e));
    }
    Ok(())
}

/// `3 tools, 1 prompt, 2 resource templates`.
fn counted(pins: &[Pin]) -> String {
    use crate::lock::Kind;
    let n = |k: Kind| pins.iter().filter(|p| p.kind == k).count();
    let of = |count: usize, noun: &str| crate::report::summary::plural(count, noun);
    format!(
        "{}, {}, {}",
        of(n(Kind::Tool), "tool"),
        of(n(Kind::Prompt), "prompt"),
        of(n(Kind::ResourceTemplate), "resource template")
    )
}

fn plural(changes: usize) -> String {
    crate::report::summary::plural(changes, "change")
}
