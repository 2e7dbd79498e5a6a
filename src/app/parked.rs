//! Calls of `mcp serve` parked for approval out of band, as files every process of the
//! machine sees: `approvals/` in the manifest's private lane folder (mode 0700), one
//! `ID.json` per waiting call (tool, arguments, their hash, the gateway's pid, the deadline),
//! written whole by rename. `flux-tools approvals` lists them; `flux-tools approve ID@HASH`
//! (or `deny ID`) writes `ID.answer`, which the waiting gateway reads. An approval names the
//! hash of the arguments it was given for: a wrong hash is refused, and the gateway checks the
//! hash again, so changed arguments are never run on an old approval. A parked call's files
//! go when it is answered, refused at its deadline, or cancelled; a gateway that was killed
//! leaves files whose pid is gone, which the list skips and removes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One call waiting for approval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Waiting {
    pub id: String,
    pub tool: String,
    pub args: Value,
    pub hash: String,
    /// The gateway waiting for the answer.
    pub pid: u32,
    /// Unix seconds: since when, and until when it waits.
    pub since: f64,
    pub until: f64,
}

/// What `approve`/`deny` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

/// The folder of one manifest's parked calls.
pub struct Parked {
    dir: PathBuf,
}

/// A parked call's place: its files go when it drops.
pub struct Place {
    json: PathBuf,
    answer: PathBuf,
    hash: String,
}

impl Parked {
    /// The parked calls of the manifest at canonical path `manifest`.
    pub fn of(manifest: &Path) -> Result<Parked, String> {
        let root = crate::run::runtime_dir().map_err(|e| e.to_string())?;
        let key = crate::hash::fnv(manifest.as_os_str().as_encoded_bytes());
        let dir = root.join(format!("{key:016x}")).join("approvals");
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Parked { dir })
    }

    fn path(&self, id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{id}.{ext}"))
    }

    /// Park `w`: listed from now until the place drops.
    pub fn park(&self, w: &Waiting) -> Result<Place, String> {
        let json = self.path(&w.id, "json");
        let text = serde_json::to_vec_pretty(w).map_err(|e| e.to_string())?;
        write_whole(&json, &text)?;
        Ok(Place {
            json,
            answer: self.path(&w.id, "answer"),
            hash: w.hash.clone(),
        })
    }

    /// The calls waiting now, oldest first (a dead gateway's are removed).
    pub fn list(&self) -> Vec<Waiting> {
        let mut out: Vec<Waiting> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| {
                let text = std::fs::read(e.path()).ok()?;
                let w: Waiting = serde_json::from_slice(&text).ok()?;
                if alive(w.pid) {
                    return Some(w);
                }
                let _ = std::fs::remove_file(e.path());
                let _ = std::fs::remove_file(self.path(&w.id, "answer"));
                None
            })
            .collect();
        out.sort_by(|a, b| a.since.total_cmp(&b.since));
        out
    }

    /// Answer the parked call `id`; `hash` (required to approve) must be the hash of its
    /// arguments. The waiting call it answered.
    pub fn answer(&self, id: &str, hash: Option<&str>, d: Decision) -> Result<Waiting, String> {
        let Some(w) = self.list().into_iter().find(|w| w.id == id) else {
            return Err(format!("no call `{id}` waits for approval (it may have been answered, cancelled, or refused at its deadline)\nhint: `flux-tools approvals` lists the calls that wait"));
        };
        match (d, hash) {
            (Decision::Approve, None) => {
                return Err(format!("approve names the call with the hash of its arguments: `{id}@{}`", w.hash))
            }
            (_, Some(h)) if h != w.hash => {
                return Err(format!(
                    "`{id}` waits with arguments whose hash is {}, not {h}: refused (its arguments are not the ones you approved, or the hash is mistyped)\nhint: `flux-tools approvals` shows each call's arguments and ID@HASH",
                    w.hash
                ))
            }
            _ => {}
        }
        let body = match d {
            Decision::Approve => format!("approve {}\n", w.hash),
            Decision::Deny => "deny\n".to_string(),
        };
        write_whole(&self.path(id, "answer"), body.as_bytes())?;
        Ok(w)
    }
}

impl Place {
    /// The answer given so far, if any. An approval for other arguments counts as none.
    pub fn decision(&self) -> Option<Decision> {
        let text = std::fs::read_to_string(&self.answer).ok()?;
        let mut words = text.split_whitespace();
        match (words.next(), words.next()) {
            (Some("approve"), Some(h)) if h == self.hash => Some(Decision::Approve),
            (Some("deny"), _) => Some(Decision::Deny),
            _ => None,
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.json);
        let _ = std::fs::remove_file(&self.answer);
    }
}

/// Write `path` whole: a temporary file beside it, renamed over it (never a partial file, and
/// never through a symlink someone put there).
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    use std::io::Write;
    f.write_all(bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Whether process `pid` still runs.
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}
