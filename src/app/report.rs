//! `flux-tools report RESULTS.json --svg F`: a results document drawn as a timeline.

use std::path::Path;

use crate::config;
use crate::error::{self, Error};
use crate::report;
use crate::run::journal;

pub(super) fn report(results: &Path, svg: &Path) -> Result<u8, Error> {
    config::check_output_path(svg)?;
    let text = std::fs::read_to_string(results)
        .map_err(|e| Error::io(format!("cannot read `{}`", results.display()), e))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "`{}` is not a results document (run with --format json or --output): {e}",
            results.display()
        ))
    })?;
    let list = doc["results"]
        .as_array()
        .ok_or_else(|| Error::Usage(format!("`{}` has no `results`", results.display())))?;
    let mut parsed = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        parsed.push(journal::result_from_json(r.clone()).ok_or_else(|| {
            Error::Usage(format!(
                "`{}`: result #{i} is not a flux-tools result",
                results.display()
            ))
        })?);
    }
    let picture = report::timeline::svg(
        doc["run_id"].as_str().unwrap_or(""),
        doc["outcome"].as_str().unwrap_or(""),
        &parsed,
    );
    config::write_atomic(svg, picture.as_bytes())?;
    Ok(error::EXIT_OK)
}
