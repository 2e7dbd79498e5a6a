//! Records a shared store keeps for every process that uses it, each a text under a kind and
//! an id, kept for a while after it was last written or read: what `mcp serve` keeps of an
//! HTTP session (its owner and its `initialize`) so that any replica serves any of its
//! requests — and counters under the same id (what a session has spent). A store that is not
//! shared has none: its process keeps its own.

use std::sync::Arc;
use std::time::Duration;

use super::{BoxFuture, LaneError};

/// Records of one kind.
pub trait Records: Send + Sync {
    /// Keep `text` under `id` for `keep`.
    fn put(
        self: Arc<Self>,
        id: String,
        text: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<(), LaneError>>;
    /// The text under `id`, kept `keep` longer from now; `None`: there is none.
    fn get(
        self: Arc<Self>,
        id: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>>;
    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>>;
    /// Add each [`Add`] to the counters under `id` (kept `keep` longer), all or none: `Ok(Err((i,
    /// now)))` says the `i`-th would pass its most, counter `now` (nothing was added).
    fn tally(
        self: Arc<Self>,
        id: String,
        adds: Vec<Add>,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Tally, LaneError>>;
}

/// A tally's outcome: added, or refused by the `i`-th addition, its counter being `now`.
pub(crate) type Tally = Result<(), (usize, f64)>;

/// One counter's addition, refused when it would take the counter past `most`.
#[derive(Debug, Clone)]
pub struct Add {
    pub counter: String,
    pub by: f64,
    pub most: Option<f64>,
}
