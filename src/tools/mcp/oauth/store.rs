//! Where a server's tokens are kept: one file per server (its URL, grant and client), of mode
//! 0600 in a folder of mode 0700 under the user's state folder (`$XDG_STATE_HOME/flux-tools/
//! oauth`, else `~/.local/state/flux-tools/oauth`) — outside the manifest and the project, so
//! neither a commit nor a copied project carries them. A file another user could read, a
//! symlink, or one of another owner is refused, not used. It is replaced whole (a new file
//! renamed over it), so a reader never sees half of one; a refresh holds the `.lock` beside it,
//! so processes sharing the folder refresh once between them.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rmcp::transport::auth::{AuthorizationMetadata, StoredCredentials};
use serde::{Deserialize, Serialize};

use crate::manifest::{Grant, McpServer};

/// What is kept of a server's sign-in: enough to use and refresh its token in any process.
#[derive(Serialize, Deserialize)]
pub(crate) struct Kept {
    pub url: String,
    /// The client this token was issued to (registered, pre-registered or a metadata URL).
    pub client_id: String,
    /// A secret the authorization server gave a client that registered itself.
    #[serde(default)]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub redirect_uri: Option<String>,
    pub metadata: AuthorizationMetadata,
    /// The resource indicator (RFC 8707) the token is for.
    pub resource: String,
    pub credentials: StoredCredentials,
    /// Scopes a server asked for (`insufficient_scope`) that the next sign-in asks for too.
    #[serde(default)]
    pub wanted_scopes: Vec<String>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// The folder tokens are kept in.
pub(crate) fn folder() -> Result<PathBuf, String> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(s) => PathBuf::from(s),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => Path::new(&h).join(".local/state"),
            None => return Err("neither XDG_STATE_HOME nor HOME is set: there is nowhere to keep the sign-in".into()),
        },
    };
    Ok(base.join("flux-tools").join("oauth"))
}

/// The file of server `decl`'s tokens (it need not exist).
pub(crate) fn path_of(decl: &McpServer, url: &str) -> Result<PathBuf, String> {
    let auth = decl.auth.as_ref();
    let grant = match auth.map(|a| a.grant) {
        Some(Grant::Machine) => "client_credentials",
        _ => "oauth",
    };
    let client = auth.and_then(|a| a.client_id.as_deref()).unwrap_or("");
    let digest = crate::hash::fnv_hex(format!("{grant}\n{url}\n{client}").as_bytes());
    let name: String = decl
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(40)
        .collect();
    Ok(folder()?.join(format!("{name}-{digest}.json")))
}

/// The kept sign-in at `path`: `None` when there is none.
pub(crate) fn load(path: &Path) -> Result<Option<Kept>, String> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the token file {}: {e}", path.display())),
    };
    private(&file, path)?;
    let mut text = String::new();
    (&file)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        format!(
            "the token file {} is not one flux-tools wrote (line {}): sign in again",
            path.display(),
            e.line()
        )
    })
}

/// Refuse a file others could read, or one this user does not own.
fn private(file: &File, path: &Path) -> Result<(), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "the token file {} belongs to another user (uid {}): it is not used",
            path.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 || !meta.is_file() {
        return Err(format!(
            "the token file {} may be read by others (mode {mode:o}): it is not used; `chmod 600 {}` if it is yours, or `flux-tools mcp logout` and sign in again",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// Keep `kept` at `path`: a new file of mode 0600 renamed over the old one.
pub(crate) fn save(path: &Path, kept: &Kept) -> Result<(), String> {
    let dir = path.parent().ok_or("a token file has a folder")?;
    make_folder(dir)?;
    let bytes = serde_json::to_vec_pretty(kept).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("tokens"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| format!("cannot write the token file {}: {e}", tmp.display()))?;
    let written = f
        .write_all(&bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write the token file {}: {e}", path.display()));
    }
    Ok(())
}

/// Forget the sign-in at `path`: whether there was one.
pub(crate) fn remove(path: &Path) -> Result<bool, String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot remove the token file {}: {e}", path.display())),
    }
}

/// The token folder, made private (0700) when this call makes it.
fn make_folder(dir: &Path) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("cannot make the token folder {}: {e}", dir.display()))
}

/// An exclusive lock on the `.lock` beside a token file, let go when dropped: one refresh
/// at a time across every process that keeps tokens in that folder.
pub(crate) struct RefreshLock(File);

impl RefreshLock {
    /// Wait for the lock (blocking: call it off the async workers).
    pub(crate) fn take(path: &Path) -> Result<RefreshLock, String> {
        let lock = path.with_extension("lock");
        make_folder(lock.parent().ok_or("a token file has a folder")?)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&lock)
            .map_err(|e| format!("cannot open {}: {e}", lock.display()))?;
        // SAFETY: flock on a descriptor we own; failure is reported by the return value.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("cannot lock {}: {e}", lock.display()));
        }
        Ok(RefreshLock(file))
    }
}

impl Drop for RefreshLock {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Kept {
        let mut metadata = AuthorizationMetadata::default();
        metadata.token_endpoint = "https://as.example/token".into();
        Kept {
            url: "https://mcp.example/mcp".into(),
            client_id: "c".into(),
            client_secret: None,
            redirect_uri: None,
            metadata,
            resource: "https://mcp.example/mcp".into(),
            credentials: StoredCredentials::new("c".into(), None, vec![], None),
            wanted_scopes: vec![],
        }
    }

    #[test]
    fn a_token_file_is_private_and_one_others_could_read_or_a_symlink_is_refused() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("oauth").join("s-1.json");
        save(&path, &kept()).expect("saved");
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).ok();
        assert_eq!(mode(&path), Some(0o600));
        assert_eq!(mode(path.parent().expect("its folder")), Some(0o700));
        assert_eq!(load(&path).expect("loaded").map(|k| k.client_id), Some("c".into()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let e = load(&path).expect_err("group-readable");
        assert!(e.contains("may be read by others (mode 640)") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = path.with_file_name("s-2.json");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(load(&link).is_err(), "a symlink is not followed");
        // Saving over a symlink replaces the link, never writes through it.
        save(&link, &kept()).expect("saved");
        assert!(!std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
        assert!(remove(&path).expect("removed") && !remove(&path).expect("gone"));
    }
}
