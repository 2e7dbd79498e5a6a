//! The reproductions of issue 25 against a real MCP server nobody here wrote: the reference
//! SQLite server (`mcp-server-sqlite` from PyPI, in `target/sqlite-venv`, installed by
//! `.ci/run`). Its tools declare no annotations, so the manifest says which ones read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{repo, results, Project};

/// The server's launcher, or `None` (then the test is skipped, except in CI).
fn sqlite_server() -> Option<PathBuf> {
    let path = std::env::var_os("FLUX_TEST_MCP_SQLITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/sqlite-venv/bin/mcp-server-sqlite"));
    if path.exists() {
        return Some(path);
    }
    crate::common::skip(
        &format!("mcp-server-sqlite is not installed at {}", path.display()),
        "python3 -m venv target/sqlite-venv && target/sqlite-venv/bin/pip install 'mcp<2' mcp-server-sqlite",
    );
    None
}

fn manifest(server: &Path, db: &Path, insert_extra: &str) -> String {
    format!(
        r#"
[mcp_servers.sqlite]
command = ["{server}", "--db-path", "{db}"]

[tools.read_query]
kind = "mcp"
server = "sqlite"
effect = "read"
cache = "5m"

[tools.write_query]
kind = "mcp"
server = "sqlite"
effect = "write"
{insert_extra}

[tools.create_table]
kind = "mcp"
server = "sqlite"
effect = "write"
"#,
        server = server.display(),
        db = db.display()
    )
}

const COUNT: &str = "SELECT count(*) AS n FROM items";

fn setup(insert_extra: &str) -> Option<Project> {
    let server = sqlite_server()?;
    let dir = tempfile::tempdir().unwrap().keep();
    let p = Project::new(&manifest(&server, &dir.join("db.sqlite"), insert_extra));
    let (doc, code) = p.run_json(
        "- { tool: create_table, args: { query: 'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)' } }\n",
        &[],
    );
    assert_eq!(code, 0, "{doc}");
    Some(p)
}

fn count_of(r: &Value) -> String {
    // The server answers with the rows as text (a Python list of dicts).
    r["output"].to_string()
}

fn batch() -> String {
    format!(
        "- {{ id: before, tool: read_query, args: {{ query: '{COUNT}' }} }}\n\
         - {{ id: add, tool: write_query, args: {{ query: \"INSERT INTO items (name) VALUES ('x')\" }} }}\n\
         - {{ id: after, tool: read_query, args: {{ query: '{COUNT}' }} }}\n"
    )
}

#[test]
fn a_cached_select_after_an_insert_sees_the_row() {
    let Some(p) = setup("") else { return };
    let (doc, code) = p.run_json(&batch(), &[]);
    assert_eq!(code, 0, "{doc}");
    let r = results(&doc);
    assert!(count_of(&r[0]).contains("'n': 0"), "{doc}");
    assert!(r[2].get("cached").is_none(), "{doc}");
    assert!(count_of(&r[2]).contains("'n': 1"), "{doc}");
    // The next run: its first SELECT finds the entry stored after the insert.
    let (doc, _) = p.run_json(&batch(), &[]);
    let r = results(&doc);
    assert_eq!(r[0]["cached"], true, "{doc}");
    assert!(count_of(&r[0]).contains("'n': 1"), "{doc}");
    assert!(count_of(&r[2]).contains("'n': 2"), "{doc}");
}

#[test]
fn a_select_after_an_insert_paused_for_approval_waits_and_runs_after_it() {
    let Some(p) = setup("requires_approval = true") else {
        return;
    };
    let journal = p.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let (doc, code) = p.run_json(&batch(), &["--journal", j]);
    assert_eq!(code, 4, "{doc}");
    let r = results(&doc);
    assert_eq!(r[2]["error"]["kind"], "awaiting_approval", "{doc}");
    let (doc, code) = p.resume_approving(j, "add", &[]);
    assert_eq!(code, 0, "{doc}");
    assert!(count_of(&results(&doc)[2]).contains("'n': 1"), "{doc}");
}

/// `mcp import` of a server that declares nothing: each write it assumes says why, `--reads`
/// marks the reads, multi-line descriptions stay multi-line, and the result validates with
/// a warning only for the writes that remain.
#[test]
fn importing_a_server_without_annotations_explains_the_default_and_marks_reads() {
    let Some(server) = sqlite_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let head = format!(
        "[concurrency]\nmax_concurrent_tools = 4\n\n[mcp_servers.sqlite]\ncommand = [\"{}\", \"--db-path\", \"{}\"]\n",
        server.display(),
        dir.path().join("db.sqlite").display()
    );
    let p = Project::new(&head);
    let import = |extra: &[&str]| {
        let out = p
            .cmd()
            .args(["mcp", "import", "sqlite"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let plain = import(&[]);
    let tools = plain.matches("kind = \"mcp\"").count();
    assert!(tools >= 5, "{plain}");
    assert_eq!(
        plain.matches("declares no readOnlyHint").count(),
        tools,
        "{plain}"
    );
    let marked = import(&["--reads", "read_*,list_tables,describe_table"]);
    assert_eq!(
        marked.matches("marked read-only at import").count(),
        3,
        "{marked}"
    );
    let assumed = marked.matches("declares no readOnlyHint").count();
    assert_eq!(assumed, tools - 3, "{marked}");
    p.write("tools.toml", &format!("{head}{marked}"));
    let out = p.cmd().args(["validate"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("has no idempotency protection").count(),
        assumed,
        "{err}"
    );
    let listed = p
        .cmd()
        .args(["tools", "--format", "json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let read = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "read_query")
        .cloned()
        .unwrap();
    assert_eq!(read["effect"], "read", "{read}");
}
