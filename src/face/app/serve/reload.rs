//! Reloading the manifest while serving: on SIGHUP, and with `--watch` when the file changes
//! (its modification time or length, looked at every second). A manifest that loads is put in
//! force for new calls ([`Gateway::reload`]); one that does not is refused with its
//! diagnostics on stderr, and the manifest in force stays. `[serve.tokens]` and the listening
//! options are read once, at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::gateway::Gateway;
use crate::manifest::Manifest;

/// What a watch compares: the file's modification time and length.
fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Reload `path` into `gateway` on every SIGHUP (and change, with `watch`), for as long as
/// the gateway serves. SIGHUP is taken from the moment this is called (inside the runtime),
/// before the gateway says it listens: a SIGHUP that comes at once reloads, never kills it.
pub(super) fn reloads(
    gateway: Arc<Gateway>,
    path: PathBuf,
    watch: bool,
    quiet: bool,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hup = signal(SignalKind::hangup()).ok();
    async move {
        if let Some(hup) = hup {
            reload_on(hup, gateway, path, (watch, quiet)).await;
        }
    }
}

async fn reload_on(
    mut hup: tokio::signal::unix::Signal,
    gateway: Arc<Gateway>,
    path: PathBuf,
    (watch, quiet): (bool, bool),
) {
    let mut last = stamp(&path);
    loop {
        let why = tokio::select! {
            _ = hup.recv() => "SIGHUP",
            () = tokio::time::sleep(Duration::from_secs(1)), if watch => {
                let now = stamp(&path);
                if now == last {
                    continue;
                }
                last = now;
                "the file changed"
            }
        };
        reload_once(&gateway, &path, why, quiet).await;
    }
}

async fn reload_once(gateway: &Arc<Gateway>, path: &Path, why: &str, quiet: bool) {
    let shown = path.display();
    let loaded = {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || Manifest::load(&path, crate::tools::KINDS)).await
    };
    let manifest = match loaded {
        Ok(Ok(m)) => m,
        Ok(Err(diags)) => {
            let text = crate::error::render_all(&diags);
            eprintln!("flux-tools mcp serve: {shown} was not reloaded ({why}); the manifest in force stays\n{text}");
            return;
        }
        Err(e) => {
            eprintln!("flux-tools mcp serve: {shown} was not reloaded ({why}): {e}");
            return;
        }
    };
    if !quiet && !manifest.warnings.is_empty() {
        eprint!("{}", crate::error::render_all(&manifest.warnings));
    }
    // The lock beside it is read again too (accepted changes are served from now on).
    let lock = match super::super::lock::in_force(path, manifest.serve.pin) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("flux-tools mcp serve: {shown} was not reloaded ({why}); the manifest in force stays: {e}");
            return;
        }
    };
    match gateway.reload(manifest, lock).await {
        Ok(n) => eprintln!("flux-tools mcp serve: reloaded {shown} ({why}): {n} tools, in force for new calls"),
        Err(e) => eprintln!("flux-tools mcp serve: {shown} was not reloaded ({why}); the manifest in force stays: {e}"),
    }
}
