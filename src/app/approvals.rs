//! `flux-tools approvals JOURNAL`: what a paused run waits for.

use std::path::Path;

use super::stdout_write;
use crate::cli::ListFormat;
use crate::error::{self, Error};
use crate::report;
use crate::run::Resume;

pub(super) fn approvals(journal: &Path, format: Option<ListFormat>) -> Result<u8, Error> {
    let resume = Resume::load(journal).map_err(Error::Usage)?;
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!("{}\n", report::approvals::to_json(&resume.awaiting))
        }
        Some(ListFormat::Table) | None => report::approvals::to_text(
            &journal.display().to_string(),
            &resume.run_id,
            &resume.awaiting,
        ),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}
