//! Files the run writes never replace what is not ours: a device stays a device, a FIFO's
//! reader gets the document, a symlink keeps pointing at its target, which gets the document.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;

use serde_json::Value;

use crate::common::{Project, SCRIPTED};

const BATCH: &str = "- { tool: read, args: { _latency: 10ms } }\n";

fn run_with_output(p: &Project, output: &std::path::Path) -> std::process::Output {
    let b = p.write("b.yaml", BATCH);
    p.cmd()
        .args(["run", b.to_str().unwrap(), "--format", "json", "--output"])
        .arg(output)
        .output()
        .unwrap()
}

#[test]
fn output_to_a_character_device_writes_through_it() {
    // Before: as root, `--output /dev/null` renamed a regular file over the device.
    let p = Project::new(SCRIPTED);
    let dev = p.path().join("null");
    let c = CString::new(dev.as_os_str().as_bytes()).unwrap();
    // SAFETY: mknod on a path we own, with a valid C string.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    if made != 0 {
        let why = format!("mknod needs root: {}", std::io::Error::last_os_error());
        crate::common::skip(&why, "run the tests as root, as CI does");
        return;
    }
    let out = run_with_output(&p, &dev);
    assert!(out.status.success(), "{out:?}");
    let meta = std::fs::metadata(&dev).unwrap();
    assert!(meta.file_type().is_char_device(), "the device was replaced");
}

#[test]
fn output_to_a_fifo_reaches_its_reader() {
    // Before: the FIFO was replaced by a regular file and its reader got nothing.
    let p = Project::new(SCRIPTED);
    let fifo = p.path().join("pipe");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own, with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader_path = fifo.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(reader_path).unwrap_or_default());
    });
    let out = run_with_output(&p, &fifo);
    assert!(out.status.success(), "{out:?}");
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the FIFO's reader got nothing: it was replaced");
    let doc: Value = serde_json::from_str(&got).expect("the reader got the document");
    assert_eq!(doc["outcome"], "completed");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn output_to_a_symlink_replaces_its_target_and_keeps_the_link() {
    // Before: the link itself was replaced by a regular file and its target left stale.
    let p = Project::new(SCRIPTED);
    std::fs::create_dir_all(p.path().join("real")).unwrap();
    let target = p.write("real/results.json", "stale");
    let link = p.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = run_with_output(&p, &link);
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "completed");
}

#[test]
fn an_output_that_cannot_be_written_after_calls_ran_keeps_the_runs_exit_status() {
    // Before: the `--output` folder removed mid-run gave exit 2 ("nothing was run") and no
    // results on stdout, though the calls had run.
    let p = Project::new(
        "[tools.slow]\nkind = \"command\"\neffect = \"read\"\nstdin = \"none\"\ncommand = [\"sh\", \"-c\", \"touch started; sleep 1; echo done\"]\n",
    );
    std::fs::create_dir_all(p.path().join("out")).unwrap();
    let b = p.write("b.yaml", "- tool: slow\n");
    let child = p.spawn(&[
        "run",
        b.to_str().unwrap(),
        "--format",
        "json",
        "--output",
        "out/results.json",
    ]);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !p.path().join("started").exists() {
        assert!(std::time::Instant::now() < until, "the call never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::remove_dir_all(p.path().join("out")).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("results still on stdout");
    assert_eq!(doc["results"][0]["output"], "done");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write `out/results.json`"));
}
