//! A real terminal for the tests that look at what a person sees: a detached tmux session of
//! a given width running one command, read back with `capture-pane` (the screen as drawn,
//! not the bytes written). Each pane has its own tmux server (a socket in a temp folder).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Pane {
    socket: tempfile::TempDir,
}

impl Pane {
    /// `command` (a shell line: the test's own text) in `cwd`, on a `cols`×40 screen, with
    /// `CI` unset so the live display is as a person gets it. `None` (with a notice) when
    /// tmux is missing outside CI; under CI a missing tmux fails the test.
    pub fn start(cwd: &Path, cols: u16, command: &str) -> Option<Pane> {
        if Command::new("tmux").arg("-V").output().is_err() {
            crate::common::skip("tmux is not installed", "apt-get install tmux");
            return None;
        }
        let pane = Pane {
            socket: tempfile::tempdir().expect("a folder"),
        };
        let line = format!("env -u CI {command}; echo EXIT=$?; sleep 600");
        let ok = pane
            .tmux()
            .args([
                "new-session",
                "-d",
                "-x",
                &cols.to_string(),
                "-y",
                "40",
                "-c",
            ])
            .arg(cwd)
            .arg(line)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux new-session failed");
        Some(pane)
    }

    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(self.socket.path().join("s"));
        c
    }

    /// The screen now, as a person sees it.
    pub fn screen(&self) -> String {
        self.capture(&[])
    }

    /// The screen with the lines the terminal wrapped joined again (how wide they were).
    pub fn joined(&self) -> String {
        self.capture(&["-J"])
    }

    fn capture(&self, extra: &[&str]) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p"])
            .args(extra)
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Wait until the screen shows `text` (at most `secs`): the screen then.
    pub fn wait_for(&self, text: &str, secs: u64) -> String {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            assert!(
                Instant::now() < until,
                "the screen never showed {text:?}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Type `keys` and Enter.
    pub fn type_line(&self, keys: &str) {
        let ok = self
            .tmux()
            .args(["send-keys", "-l", keys])
            .status()
            .is_ok_and(|s| s.success());
        let enter = self.tmux().args(["send-keys", "Enter"]).status();
        assert!(ok && enter.is_ok_and(|s| s.success()), "send-keys failed");
    }

    /// Send Ctrl-C.
    pub fn ctrl_c(&self) {
        self.keys(&["C-c"]);
    }

    /// Send `keys` as tmux names them (`C-d`, `Enter`).
    pub fn keys(&self, keys: &[&str]) {
        let _ = self.tmux().arg("send-keys").args(keys).status();
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}
