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
        .case("docs/src/*.md");
}
