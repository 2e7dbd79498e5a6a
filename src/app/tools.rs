//! `flux-tools tools`: the manifest's tools and their declarations.

use super::{load_manifest, stdout_write};
use crate::cli::{Args, ListFormat};
use crate::error::{self, Error};
use crate::report;

pub(super) fn tools(args: &Args, format: Option<ListFormat>) -> Result<u8, Error> {
    let m = load_manifest(args)?;
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!("{}\n", report::tools::to_json(&m))
        }
        Some(ListFormat::Table) | None => report::tools::to_table(&m),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}
