//! Nested runs: a `command` tool's process gets `FLUX_TOOLS_LEASE` (the lanes and weights its
//! call holds, and the manifest's canonical path). A `flux-tools run` started inside it, with
//! the same manifest, *borrows* those lanes: each becomes this run's own in-memory lane limited
//! to the weight the parent holds, instead of queueing in the shared store behind its own
//! caller. Nested calls so count against the parent's limits exactly once, and a nested batch
//! under `per_tenant = 1` completes instead of deadlocking.

use crate::manifest::Manifest;
use crate::plan::LaneSpec;

/// The environment variable carrying a call's lease.
pub(crate) const LEASE_ENV: &str = "FLUX_TOOLS_LEASE";

/// What [`LEASE_ENV`] says: written for each command call, so straight from borrowed text.
#[derive(serde::Serialize)]
pub(crate) struct Lease<'a> {
    pub run_id: &'a str,
    pub manifest: &'a str,
    pub call: &'a str,
    pub lanes: Vec<HeldLane<'a>>,
}

/// One lane a call holds, and its weight there.
#[derive(serde::Serialize)]
pub(crate) struct HeldLane<'a> {
    pub lane: &'a str,
    pub weight: u32,
}

/// Apply `lease` (what [`LEASE_ENV`] says, if set: the face reads it) to a run's lanes.
/// Returns the lanes borrowed.
pub(crate) fn borrow(
    lanes: &mut [LaneSpec],
    manifest: &Manifest,
    lease: Option<&str>,
) -> Vec<String> {
    let Some(text) = lease else {
        return Vec::new();
    };
    let Ok(lease) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    if lease["manifest"].as_str() != Some(&manifest.path.display().to_string()) {
        return Vec::new();
    }
    let held: Vec<(String, u32)> = lease["lanes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| {
                    Some((
                        l["lane"].as_str()?.to_string(),
                        u32::try_from(l["weight"].as_u64()?).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut borrowed = Vec::new();
    for lane in lanes.iter_mut().filter(|l| l.key.across_runs()) {
        if let Some((_, w)) = held.iter().find(|(name, _)| *name == lane.name) {
            lane.limit = Some(lane.limit.map_or(*w, |l| l.min(*w)).max(1));
            lane.borrowed = true;
            borrowed.push(lane.name.clone());
        }
    }
    borrowed
}
