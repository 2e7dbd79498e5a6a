//! `flux-tools report RESULTS.json --svg F`: a results document drawn as a timeline; and
//! `flux-tools report --history FILE`: runs over time.

use std::path::Path;

use crate::app::config;
use crate::cli::ListFormat;
use crate::error::{self, Error};
use crate::history::analysis::{self, Period};
use crate::report;

pub(super) fn report(results: &Path, svg: Option<&Path>) -> Result<u8, Error> {
    let Some(svg) = svg else {
        return Err(Error::Usage(
            "a results document is drawn with --svg FILE".into(),
        ));
    };
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
        parsed.push(crate::run::result_from_json(r.clone()).ok_or_else(|| {
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

/// A run history, grouped by period: a table (or JSON) on stdout, and a picture with `--svg`.
pub(super) fn history(
    path: &Path,
    svg: Option<&Path>,
    by: Option<Period>,
    min_turns: usize,
    format: Option<ListFormat>,
) -> Result<u8, Error> {
    if let Some(svg) = svg {
        config::check_output_path(svg)?;
    }
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot read history `{}`", path.display()), e))?;
    let analysis = analysis::analyse(
        std::io::BufReader::with_capacity(1 << 20, file),
        by,
        min_turns,
    )
    .map_err(|e| Error::io(format!("cannot read history `{}`", path.display()), e))?;
    if let Some(svg) = svg {
        config::write_atomic(svg, report::history::svg(&analysis).as_bytes())?;
    }
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!("{}\n", report::history::to_json(&analysis))
        }
        Some(ListFormat::Table) | None => report::history::to_table(&analysis),
    };
    super::stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}
