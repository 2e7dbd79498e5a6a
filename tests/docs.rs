//! The book's examples (`docs/src/*.md`): every ```console block — a `$ flux-tools …` command
//! and its output — is run by trycmd in the chapter's `NAME.in/` folder and must print what
//! the page shows, so the documentation cannot drift from the binary.

#[test]
fn the_books_examples_print_what_the_pages_show() {
    trycmd::TestCases::new()
        .register_bin(
            "flux-tools",
            std::path::Path::new(env!("CARGO_BIN_EXE_flux-tools")),
        )
        .env("NO_COLOR", "1")
        .env("CI", "true")
        .env("FLUX_TOOLS_MANIFEST", "tools.toml")
        .case("docs/src/*.md")
        .skip("docs/src/serving-mcp.md");
}

/// The gateway's quick start puts it in front of the reference server, installed by `.ci/run`
/// (`target/mcp`): its commands run with that server on the `PATH`, as a reader's would be
/// after `npm install -g`.
#[test]
fn the_gateways_quick_start_prints_what_its_page_shows() {
    let Some(bin) = everything_bin("the gateway's quick start") else {
        return;
    };
    let path = std::env::var("PATH").unwrap_or_default();
    trycmd::TestCases::new()
        .register_bin(
            "flux-tools",
            std::path::Path::new(env!("CARGO_BIN_EXE_flux-tools")),
        )
        .env("NO_COLOR", "1")
        .env("CI", "true")
        .env("FLUX_TOOLS_MANIFEST", "tools.toml")
        .env("PATH", format!("{}:{path}", bin.display()))
        .case("docs/src/serving-mcp.md");
}

/// The quick starts show their files inline (a page read on GitHub has no `{{#include}}`),
/// and what they show is the file their examples run with.
#[test]
fn the_quick_starts_show_the_files_their_examples_run_with() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
    for (page, files) in [
        ("quickstart.md", &["tools.toml", "batch.yaml"][..]),
        ("serving-mcp.md", &["tools.toml"][..]),
    ] {
        let text = std::fs::read_to_string(root.join(page)).expect("the page");
        assert!(!text.contains("{{#include"), "{page} includes a file");
        let folder = page.replace(".md", ".in");
        for f in files {
            let shown = std::fs::read_to_string(root.join(&folder).join(f)).expect("the file");
            let lang = if f.ends_with(".toml") { "toml" } else { "yaml" };
            let block = format!("```{lang}\n{}\n```", shown.trim_end());
            assert!(
                text.contains(&block),
                "{page} does not show {folder}/{f} as it is"
            );
        }
    }
}

/// The manifest chapter's MCP example, as written: its manifest in `/tmp` (not where the
/// server was installed) finds the server and imports its tools.
#[test]
fn the_manifest_chapters_mcp_example_runs_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(bin) = everything_bin("the manifest chapter's MCP example") else {
        return;
    };
    let page = std::fs::read_to_string(root.join("docs/src/manifest.md")).expect("the page");
    let toml = page
        .split("cat > /tmp/mcp.toml <<'TOML'\n")
        .nth(1)
        .and_then(|rest| rest.split("\nTOML\n").next())
        .expect("the example's manifest");
    assert!(
        page.contains("export PATH=\"$PWD/target/mcp/node_modules/.bin:$PATH\""),
        "the example puts the server on PATH"
    );
    let dir = tempfile::tempdir().expect("a folder");
    let manifest = dir.path().join("mcp.toml");
    std::fs::write(&manifest, format!("{toml}\n")).expect("write");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-tools"))
        .current_dir(root)
        .env("PATH", path)
        .env("CI", "true")
        .args([
            "--manifest",
            manifest.to_str().expect("utf-8"),
            "mcp",
            "import",
            "everything",
        ])
        .output()
        .expect("flux-tools");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[tools.\"echo\"]"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Every relative link of the pages a reader opens first leads somewhere, and the Python
/// package's README names a chapter that exists.
#[test]
fn the_readmes_links_lead_somewhere() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("benches/README.md"),
        root.join("python/README.md"),
    ];
    let book = std::fs::read_dir(root.join("docs/src")).expect("the book");
    pages.extend(
        book.flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page");
        for link in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
        {
            let target = link.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let dir = page.parent().expect("a folder");
            if !dir.join(target).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
    let python = std::fs::read_to_string(root.join("python/README.md")).expect("python/README.md");
    for named in python
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".md"))
    {
        assert!(root.join(named).exists(), "python/README.md names {named}");
    }
    assert!(
        !python.contains("README's"),
        "python/README.md points to a README section"
    );
}

/// The folder holding server-everything's command (`target/mcp`, installed by `.ci/run`), or
/// `None` with a notice (straight to the terminal and to the skips' log) when it is missing —
/// under CI a missing server fails the test.
fn everything_bin(what: &str) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/mcp/node_modules/.bin");
    if bin.join("mcp-server-everything").exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "server-everything is not installed under target/mcp (under CI every test runs)"
    );
    let line = format!(
        "NOTICE: skipped {what}: server-everything is not installed at {} \
         (npm install --prefix target/mcp @modelcontextprotocol/server-everything)\n",
        bin.display()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    let log = std::env::var_os("FLUX_TEST_SKIP_LOG")
        .map_or_else(|| root.join("target/test-skips.log"), Into::into);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = std::io::Write::write_all(&mut f, line.as_bytes());
    }
    None
}
