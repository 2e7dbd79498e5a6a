//! What processes share through a store beside their lanes: the gateway's records (an HTTP
//! session, a task — `records`) and its clients' idempotency keys (`intents`), as traits with
//! one process's own implementation each. The lane store (`run/store`) hands out the shared
//! ones (Redis) through its `Connection`; the gateway keeps its data here, not in the runner.

use std::future::Future;
use std::pin::Pin;

pub(crate) mod intents;
pub(crate) mod records;

/// A boxed future, for the object-safe store traits.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a store could not do what was asked (a lane not acquired, a record not kept).
#[derive(Debug, Clone, thiserror::Error)]
#[error("lane store: {0}")]
pub struct LaneError(pub String);
