//! A tenant's spend over its window across the processes of one machine: the file
//! `spend/TENANT-HASH` beside the lanes, one line per reserved call (`AT COST ID`), read and
//! rewritten whole under an exclusive `flock` (entries that left the window are dropped on
//! every write, so the file stays as small as the window's calls). Blocking: called on a
//! blocking thread.

use std::io::{Read, Seek, Write};
use std::path::Path;

use super::{flock, lane_folder, open_rw, private_dir};
use crate::manifest::TenantWindow;
use crate::run::store::window::{self, Charge, Entry};
use crate::run::store::LaneError;

/// Run `f` on `tenant`'s entries under the file's lock, and write them back.
fn with_entries<T>(
    root: &Path,
    tenant: &str,
    f: impl FnOnce(&mut Vec<Entry>) -> T,
) -> Result<T, LaneError> {
    let dir = root.join("spend");
    private_dir(&dir)?;
    let path = lane_folder(&dir, tenant);
    let mut file = open_rw(&path)?;
    let io = |e: std::io::Error| LaneError(format!("{}: {e}", path.display()));
    if !flock(&file, libc::LOCK_EX) {
        return Err(io(std::io::Error::last_os_error()));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    let mut entries: Vec<Entry> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some(Entry {
                at: w.next()?.parse().ok()?,
                cost: w.next()?.parse().ok()?,
                id: w.next()?.to_string(),
            })
        })
        .collect();
    let out = f(&mut entries);
    let body: String = entries
        .iter()
        .map(|e| format!("{} {} {}\n", e.at, e.cost, e.id))
        .collect();
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(body.as_bytes()))
        .map_err(io)?;
    flock(&file, libc::LOCK_UN);
    Ok(out)
}

pub(super) fn charge(
    root: &Path,
    tenant: &str,
    w: &TenantWindow,
    cost: f64,
) -> Result<Charge, LaneError> {
    let id = format!("{:016x}", fastrand::u64(..));
    let limits = (window::unix_now(), w.window.as_secs_f64(), w.max_cost);
    with_entries(root, tenant, |e| window::charge(e, limits, cost, &id))
}

pub(super) fn refund(root: &Path, tenant: &str, id: &str) -> Result<(), LaneError> {
    with_entries(root, tenant, |e| e.retain(|x| x.id != id))
}
