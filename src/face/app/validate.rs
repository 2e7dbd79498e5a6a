//! `flux-tools validate [BATCH…]`: every problem of the manifest and the batches, located.

use super::stdout_write;
use crate::app::config;
use crate::batch::Batch;
use crate::cli::{Args, ListFormat};
use crate::error::{self, render_all, Diagnostic, Error};
use crate::manifest::Manifest;
use crate::plan::{self, PlanOptions};
use crate::report::summary::plural;

pub(super) fn validate(
    args: &Args,
    batches: &[std::path::PathBuf],
    format: Option<ListFormat>,
) -> Result<u8, Error> {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    let path = config::manifest_path(args.manifest.as_deref())?;
    let manifest = match Manifest::load(&path, crate::tools::KINDS) {
        Ok(m) => {
            diags.extend(m.warnings.iter().cloned());
            diags.extend(run_time_problems(&m));
            summary.push(format!("{}: {}", m.name(), plural(m.tools.len(), "tool")));
            Some(m)
        }
        Err(d) => {
            diags.extend(d);
            None
        }
    };
    for b in batches {
        let file = match config::read_batch(Some(&b.to_string_lossy()), false) {
            Ok(f) => f,
            Err(e) => {
                diags.push(Diagnostic::error(e.to_string()).in_file(&b.to_string_lossy()));
                continue;
            }
        };
        match Batch::parse(file) {
            Ok((batch, warnings)) => {
                diags.extend(warnings);
                if let Some(m) = &manifest {
                    match plan::build(m, &batch, &PlanOptions::default()) {
                        Ok(p) => {
                            diags.extend(p.warnings.iter().filter(|w| !w.is_error()).cloned());
                            summary.push(format!(
                                "{}: {} in {}",
                                batch.file.name,
                                plural(p.calls.len(), "call"),
                                plural(p.phases.len(), "phase")
                            ));
                        }
                        Err(d) => diags.extend(d),
                    }
                }
            }
            Err(d) => diags.extend(d),
        }
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    diags.sort_by_key(|d| d.severity);
    if matches!(format, Some(ListFormat::Json | ListFormat::Jsonl)) {
        let doc = serde_json::json!({
            "valid": errors == 0,
            "errors": errors,
            "diagnostics": diags.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        });
        stdout_write(format!("{doc}\n").as_bytes())?;
    } else {
        let shown: Vec<Diagnostic> = diags
            .iter()
            .filter(|d| d.is_error() || !args.quiet)
            .cloned()
            .collect();
        eprint!("{}", render_all(&shown));
        if errors == 0 && !args.quiet {
            eprintln!("ok: {}", summary.join("; "));
        } else if errors > 0 {
            eprintln!("{errors} error{} found", if errors == 1 { "" } else { "s" });
        }
    }
    Ok(if errors > 0 {
        error::EXIT_INVALID
    } else {
        error::EXIT_OK
    })
}

/// What the manifest's reader cannot see but a run would meet: a command's program that is
/// not there, and tool names a model provider refuses (offered under a safe name).
fn run_time_problems(m: &Manifest) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for t in &m.tools {
        let at = Some(m.file.location(t.span.start, t.span.end));
        if let Some(spec) = t.settings_of::<crate::tools::CommandSpec>() {
            if let Some(why) = crate::tools::command::missing_program(spec) {
                out.push(
                    Diagnostic::error(format!("tool `{}`: {why}", t.name))
                        .for_tool(&t.name)
                        .at(at.clone())
                        .hint("install it, or give its path (relative to the manifest's folder)"),
                );
            }
        }
        let safe = crate::manifest::export_name(&t.name);
        if safe != t.name {
            // Two tools of one safe name are refused when the manifest is read.
            let msg = format!(
                "tool name `{}` breaks a model provider's rule (^[a-zA-Z_][a-zA-Z0-9_-]{{0,63}}$)",
                t.name
            );
            let hint =
                format!("`tools --emit` offers it as `{safe}`, and a call to `{safe}` runs it");
            out.push(Diagnostic::warning(msg).for_tool(&t.name).at(at).hint(hint));
        }
    }
    out
}
