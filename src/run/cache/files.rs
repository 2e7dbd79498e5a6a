//! Cached results shared by every process on this machine using the same manifest (the
//! `local` lane store): one file per entry in the store's private folder (`cache/`, mode
//! 0700; files mode 0600), written atomically (a temporary file renamed into place), holding
//! the entry and when it expires on the wall clock. A process leads a key by holding an
//! advisory `flock` on its `.lock` file; the kernel lets it go when the process dies. A
//! backend's mark is a file `mark-HASH` holding a random number, replaced (renamed into place)
//! by every write that resolves on it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{CacheError, CacheStore, Claim, Entry};
use crate::run::store::{Answer, BoxFuture};

/// Entries as files under `dir`.
pub(crate) struct FileCache {
    dir: PathBuf,
}

/// An entry as stored: the entry and when it expires (ms since the Unix epoch).
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    expires_ms: u64,
    run: String,
    output: Value,
    #[serde(default)]
    marks: Vec<u64>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn error(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> CacheError {
    CacheError(format!("cannot {what} {}: {e}", path.display()))
}

impl FileCache {
    /// The cache folder under a local store's private folder (created, mode 0700).
    pub(crate) fn new(root: &std::path::Path) -> FileCache {
        FileCache {
            dir: root.join("cache"),
        }
    }

    fn ensure_dir(&self) -> Result<(), CacheError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| error("create", &self.dir, e))
    }

    fn read(&self, key: &str) -> Result<Option<Entry>, CacheError> {
        let path = self.dir.join(format!("{key}.json"));
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(error("read", &path, e)),
        };
        // A file that does not parse (another version, a full disk) is no entry.
        let Ok(stored) = serde_json::from_slice::<Stored>(&text) else {
            return Ok(None);
        };
        if stored.expires_ms <= now_ms() {
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        Ok(Some(Entry {
            run: stored.run,
            output: stored.output,
            marks: stored.marks,
        }))
    }

    fn write(&self, key: &str, entry: Entry, ttl: Duration) -> Result<(), CacheError> {
        self.ensure_dir()?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let stored = Stored {
            expires_ms: now_ms().saturating_add(ttl_ms),
            run: entry.run,
            output: entry.output,
            marks: entry.marks,
        };
        let body = serde_json::to_vec(&stored).map_err(|e| CacheError(e.to_string()))?;
        self.replace(&format!("{key}.json"), &body)
    }

    /// Write `name` in the folder atomically: a private temporary file, synced, renamed.
    fn replace(&self, name: &str, body: &[u8]) -> Result<(), CacheError> {
        let tmp = self
            .dir
            .join(format!("{name}.{:08x}.tmp", fastrand::u32(..)));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| error("create", &tmp, e))?;
        let written = file.write_all(body).and_then(|()| file.sync_data());
        let path = self.dir.join(name);
        match written.and_then(|()| std::fs::rename(&tmp, &path)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(error("write", &path, e))
            }
        }
    }

    /// The file holding a backend's mark (its name hashed: any backend name is safe).
    fn mark_name(backend: &str) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(backend.as_bytes());
        format!("mark-{}", super::hex(&digest[..8]))
    }

    fn read_mark(&self, backend: &str) -> Result<u64, CacheError> {
        let path = self.dir.join(Self::mark_name(backend));
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(t.trim().parse().unwrap_or(0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(error("read", &path, e)),
        }
    }

    fn write_mark(&self, backend: &str) -> Result<(), CacheError> {
        self.ensure_dir()?;
        let mark = fastrand::u64(1..);
        self.replace(&Self::mark_name(backend), mark.to_string().as_bytes())
    }

    fn try_claim(&self, key: &str) -> Result<Option<Claim>, CacheError> {
        self.ensure_dir()?;
        let path = self.dir.join(format!("{key}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| error("open", &path, e))?;
        Ok(lock_now(&file).then(|| Box::new(Locked { _file: file }) as Claim))
    }
}

/// A key's lock file, locked: closing it unlocks.
struct Locked {
    _file: File,
}

impl super::Claimed for Locked {
    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        drop(self);
        Box::pin(std::future::ready(()))
    }
}

/// Take an exclusive `flock` without waiting.
fn lock_now(file: &File) -> bool {
    // SAFETY: flock on a descriptor we own; failure is reported by the return value.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

impl CacheStore for FileCache {
    fn get(self: Arc<Self>, key: String) -> Answer<Result<Option<Entry>, CacheError>> {
        Answer::Now(self.read(&key))
    }

    fn put(self: Arc<Self>, key: String, entry: Entry, ttl: Duration) -> BoxFuture<'static, ()> {
        // A result that cannot be kept is only a later miss.
        let _ = self.write(&key, entry, ttl);
        Box::pin(std::future::ready(()))
    }

    fn claim(
        self: Arc<Self>,
        key: String,
        _hold: Duration,
    ) -> Answer<Result<Option<Claim>, CacheError>> {
        Answer::Now(self.try_claim(&key))
    }

    fn marks(self: Arc<Self>, backends: Arc<[String]>) -> Answer<Result<Vec<u64>, CacheError>> {
        Answer::Now(backends.iter().map(|b| self.read_mark(b)).collect())
    }

    fn wrote(
        self: Arc<Self>,
        backends: Arc<[String]>,
    ) -> BoxFuture<'static, Result<(), CacheError>> {
        let done = backends.iter().try_for_each(|b| self.write_mark(b));
        Box::pin(std::future::ready(done))
    }
}
