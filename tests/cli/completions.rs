//! Completion scripts: generated at run time, and the committed copies are current.

use crate::common::{flux, repo};

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = flux().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("flux-tools"), "{shell}");
        assert!(text.contains("max-concurrent-tools"), "{shell}");
    }
}

#[test]
fn committed_completions_are_current() {
    let files = [
        ("bash", "flux-tools.bash"),
        ("zsh", "_flux-tools"),
        ("fish", "flux-tools.fish"),
        ("elvish", "flux-tools.elv"),
        ("powershell", "_flux-tools.ps1"),
    ];
    for (shell, file) in files {
        let out = flux().args(["completions", shell]).output().unwrap();
        let path = repo().join("completions").join(file);
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == out.stdout,
            "completions/{file} is stale: regenerate with `cargo run -- completions {shell} > completions/{file}`"
        );
    }
}
