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
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/mcp/node_modules/.bin");
    if !bin.join("mcp-server-everything").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "server-everything is not installed under target/mcp (under CI every test runs)"
        );
        // Straight to the terminal (cargo captures `eprintln!`) and to the skips' log.
        let line = format!(
            "NOTICE: skipped the gateway's quick start: server-everything is not installed at {} \
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
        return;
    }
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
