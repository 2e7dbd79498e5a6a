//! The board of parked approvals as files (the `local` and `memory` stores'; Redis keeps
//! its twin, `redis/board.rs`): in the manifest's private lane folder (mode 0700), one
//! `ID.json` per waiting call, `answers/ID.answer` and `beats/GW.beat`, each written whole by
//! rename, never through a symlink someone put there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::run::store::{Answers, Beats, BoardOf, BoxFuture, Entries, LaneError};

/// The board as files in a private folder: an entry per parked call (`ID.json`), and beside
/// them the answers (`answers/ID.answer`) and the gateways' beats (`beats/GW.beat`) — in
/// folders of their own, so a gateway looking for answers every 100 ms reads only answers,
/// not every parked call's entry.
pub(crate) struct FileBoard {
    dir: PathBuf,
}

impl FileBoard {
    /// The board `of` the manifest at canonical path `manifest`, in its private lane folder
    /// (`approvals`, `catalogs`).
    pub(crate) fn for_manifest(manifest: &Path, of: BoardOf) -> Result<FileBoard, String> {
        let root = crate::run::runtime_dir().map_err(|e| e.to_string())?;
        let key = crate::hash::fnv(manifest.as_os_str().as_encoded_bytes());
        let folder = format!("{}s", of.name());
        FileBoard::new(root.join(format!("{key:016x}")).join(folder))
    }

    /// The board in `dir`, its folders made private (0700) when missing.
    pub(crate) fn new(dir: PathBuf) -> Result<FileBoard, String> {
        use std::os::unix::fs::DirBuilderExt;
        for d in [dir.clone(), dir.join(ANSWERS), dir.join(BEATS)] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        Ok(FileBoard { dir })
    }

    /// Where the file `NAME.ext` is: an entry in the folder, answers and beats in theirs.
    fn path(&self, id: &str, ext: &str) -> PathBuf {
        self.folder(ext).join(format!("{id}.{ext}"))
    }

    fn folder(&self, ext: &str) -> PathBuf {
        match ext {
            "answer" => self.dir.join(ANSWERS),
            "beat" => self.dir.join(BEATS),
            _ => self.dir.clone(),
        }
    }

    /// The files named `NAME.ext` in their folder: each name and path.
    fn names(&self, ext: &str) -> Vec<(String, PathBuf)> {
        let files = std::fs::read_dir(self.folder(ext))
            .into_iter()
            .flatten()
            .flatten();
        files
            .filter_map(|e| {
                let path = e.path();
                if path.extension()? != ext {
                    return None;
                }
                Some((path.file_stem()?.to_str()?.to_string(), path))
            })
            .collect()
    }
}

impl Entries for FileBoard {
    fn put(
        self: Arc<Self>,
        id: String,
        entry: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let done = write_whole(&self.path(&id, "json"), entry.as_bytes()).map_err(LaneError);
        Box::pin(std::future::ready(done))
    }

    fn entries(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        let out = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn ids(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        let ids = self.names("json").into_iter().map(|(id, _)| id).collect();
        Box::pin(std::future::ready(Ok(ids)))
    }

    fn get(
        self: Arc<Self>,
        ids: Vec<String>,
    ) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        let out = ids
            .iter()
            .filter_map(|id| std::fs::read_to_string(self.path(id, "json")).ok())
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn claim(
        self: Arc<Self>,
        id: String,
        old: String,
        entry: String,
    ) -> BoxFuture<'static, Result<bool, LaneError>> {
        let path = self.path(&id, "json");
        let done = (|| {
            // The folder's lock makes compare-and-set one step for every gateway.
            let lock = std::fs::File::open(&self.dir).map_err(|e| LaneError(e.to_string()))?;
            let _held = Flock::exclusive(&lock)?;
            if std::fs::read_to_string(&path).ok().as_deref() != Some(old.as_str()) {
                return Ok(false);
            }
            write_whole(&path, entry.as_bytes()).map_err(LaneError)?;
            Ok(true)
        })();
        Box::pin(std::future::ready(done))
    }

    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>> {
        if !id.is_empty() {
            let _ = std::fs::remove_file(self.path(&id, "json"));
            let _ = std::fs::remove_file(self.path(&id, "answer"));
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

impl Answers for FileBoard {
    fn set_answer(
        self: Arc<Self>,
        id: String,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let done = write_whole(&self.path(&id, "answer"), answer.as_bytes()).map_err(LaneError);
        Box::pin(std::future::ready(done))
    }

    fn answer(
        self: Arc<Self>,
        id: String,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>> {
        let text = std::fs::read_to_string(self.path(&id, "answer")).ok();
        Box::pin(std::future::ready(Ok(text)))
    }

    fn answers(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, String)>, LaneError>> {
        let out = self
            .names("answer")
            .into_iter()
            .filter_map(|(id, path)| Some((id, std::fs::read_to_string(path).ok()?)))
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}

impl Beats for FileBoard {
    fn beat(
        self: Arc<Self>,
        gateway: String,
        at: f64,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let done = write_whole(&self.path(&gateway, "beat"), at.to_string().as_bytes());
        Box::pin(std::future::ready(done.map_err(LaneError)))
    }

    fn beats(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>> {
        let out = self
            .names("beat")
            .into_iter()
            .filter_map(|(gw, path)| {
                Some((gw, std::fs::read_to_string(path).ok()?.trim().parse().ok()?))
            })
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}

const ANSWERS: &str = "answers";
const BEATS: &str = "beats";

/// Write `path` whole: a temporary file beside it, renamed over it (never a partial file, and
/// never through a symlink someone put there).
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!(
        "tmp{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ));
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

/// An exclusive `flock` on an open file, let go when dropped.
struct Flock<'a>(&'a std::fs::File);

impl<'a> Flock<'a> {
    fn exclusive(file: &'a std::fs::File) -> Result<Flock<'a>, LaneError> {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; failure is reported by the return value.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(LaneError(std::io::Error::last_os_error().to_string()));
        }
        Ok(Flock(file))
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
