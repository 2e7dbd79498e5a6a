//! Cassettes: `--record FILE` keeps every call's fingerprint, resolved arguments and result;
//! `--replay FILE` answers calls from it without invoking any tool.
//!
//! A fingerprint is the tool, how it is invoked (its command, URL or server, secrets as `***`)
//! and the resolved arguments — never `parallel_safe`, lanes, timeouts or retries, so changing
//! scheduling never breaks a cassette. Replay takes recorded results in call order per
//! fingerprint and reports them exactly as recorded (run id, idempotency keys and timings
//! too), so a batch replays to the same results whatever order its calls finished in when it
//! was recorded. Replay is strict: a call with no recorded match is never dispatched, and the
//! message names the call and the closest recorded fingerprint.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::events::CallResult;

/// A loaded cassette.
pub struct Cassette {
    pub run_id: String,
    by_fp: Mutex<HashMap<String, VecDeque<CallResult>>>,
    /// (call id, fingerprint) of every recording, for "closest" hints.
    recorded: Vec<(String, String)>,
}

impl Cassette {
    pub fn load(path: &Path) -> Result<Cassette, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read cassette `{}`: {e}", path.display()))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| format!("cassette `{}` is not JSON: {e}", path.display()))?;
        let calls = doc["calls"]
            .as_array()
            .ok_or_else(|| format!("cassette `{}` has no calls", path.display()))?;
        let mut by_fp: HashMap<String, VecDeque<CallResult>> = HashMap::new();
        let mut recorded = Vec::new();
        for c in calls {
            let fp = c["fingerprint"].as_str().unwrap_or("").to_string();
            let result =
                super::journal::result_from_json(c["result"].clone()).ok_or_else(|| {
                    format!(
                        "cassette `{}`: a recorded result does not parse",
                        path.display()
                    )
                })?;
            recorded.push((result.id.clone(), fp.clone()));
            by_fp.entry(fp).or_default().push_back(result);
        }
        Ok(Cassette {
            run_id: doc["run_id"].as_str().unwrap_or("").to_string(),
            by_fp: Mutex::new(by_fp),
            recorded,
        })
    }

    /// The recorded result for a call with this fingerprint, or why there is none.
    pub fn take(&self, id: &str, fp: &str) -> Result<CallResult, String> {
        let mut map = self
            .by_fp
            .lock()
            .map_err(|_| "cassette lock poisoned".to_string())?;
        if let Some(r) = map.get_mut(fp).and_then(VecDeque::pop_front) {
            return Ok(r);
        }
        let closest = self
            .recorded
            .iter()
            .find(|(rid, _)| rid == id)
            .map(|(rid, rfp)| format!("call `{rid}` was recorded with fingerprint {rfp}"))
            .unwrap_or_else(|| "no call with this id was recorded".into());
        Err(format!("replay: call `{id}` (fingerprint {fp}) matches nothing recorded; {closest} (did its arguments change?)"))
    }
}

/// The cassette document for a finished run.
pub(crate) fn document(
    run_id: &str,
    results: &[CallResult],
    fingerprints: &[Option<String>],
    args: &[Option<Value>],
) -> Value {
    let calls: Vec<Value> = results
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            fingerprints.get(*i).is_some_and(Option::is_some) && r.started_ms.is_some()
        })
        .map(|(i, r)| {
            json!({
                "id": r.id,
                "tool": r.tool,
                "fingerprint": fingerprints[i],
                "args": args.get(i).cloned().flatten(),
                "result": r,
            })
        })
        .collect();
    json!({"version": 1, "run_id": run_id, "calls": calls})
}
