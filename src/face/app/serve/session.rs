//! One client's session as the gateway holds it: its run id (idempotency keys, history), its
//! lanes per tenant (its turn lane, and its flow in the lanes it shares), what it has spent,
//! its wire order, and whether its client answers questions. An HTTP session kept in a shared
//! store is one flow in the shared lanes whichever replica serves it ([`Session::share_as`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;

use super::order;
use super::spend::Spend;
use crate::app::finish::Finish;

/// A manifest's generation and shape within it.
pub(super) type Version = (u64, u64);

/// A session's lane store and plan options for one tenant (and the manifest generation they
/// were planned for).
pub(super) type TenantLanes = (
    Arc<dyn crate::run::LaneStore>,
    Arc<crate::plan::PlanOptions>,
);

/// One client's session: its run id (idempotency keys), its turn lane, per tenant.
pub(in crate::face::app::serve) struct Session {
    pub id: u64,
    pub run_id: String,
    pub lanes: Mutex<HashMap<String, (Version, TenantLanes)>>,
    /// What it has spent against `[serve.session]`.
    pub spend: Spend,
    /// Its history record, written when it ends (or hourly).
    pub record: super::record::SessionRecord,
    /// Its requests in wire order: its calls take their places in that order.
    pub turnstile: Arc<order::Turnstile>,
    /// Cancelled when its client is gone (stdin closed): every call of the session with it.
    pub gone: CancellationToken,
    /// Its client said it answers questions (elicitation) or samples when it initialized.
    pub answers: std::sync::atomic::AtomicBool,
    /// The least severe log message its client asked to hear (`logging/setLevel`), by rank
    /// ([`rank`]; 0: none asked).
    pub log_level: std::sync::atomic::AtomicU8,
    /// Its name as a flow of the shared lanes, when every replica knows it by one.
    shared: OnceLock<String>,
}

impl Session {
    /// Session `id` of run `run_id`, its history written to `history` (when kept).
    pub(super) fn new(id: u64, run_id: String, history: Option<Arc<Finish>>) -> Session {
        Session {
            id,
            record: super::record::SessionRecord::new(history, run_id.clone()),
            run_id,
            lanes: Mutex::default(),
            spend: Spend::default(),
            turnstile: Arc::default(),
            gone: CancellationToken::new(),
            answers: Default::default(),
            log_level: Default::default(),
            shared: OnceLock::new(),
        }
    }

    /// A session of no gateway (for tables of sessions).
    #[cfg(test)]
    pub(super) fn for_tests() -> Session {
        Session::new(0, "test".into(), None)
    }

    /// Known to every replica as HTTP session `id` (kept in the shared store): one flow in
    /// the shared lanes wherever its calls land (named by a hash of the id, which is never
    /// shown).
    pub(super) fn share_as(&self, id: &str) {
        let _ = self
            .shared
            .set(format!("s-{}", crate::hash::fnv_hex(id.as_bytes())));
    }

    /// Its name as a flow of the lanes: the shared one, else its run id.
    pub(super) fn flow_name(&self) -> &str {
        self.shared.get().map_or(&self.run_id, String::as_str)
    }
}

/// A log level's rank, least severe first (1: debug).
#[allow(deprecated)]
pub(super) fn rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 1,
        L::Info => 2,
        L::Notice => 3,
        L::Warning => 4,
        L::Error => 5,
        L::Critical => 6,
        L::Alert => 7,
        L::Emergency => 8,
    }
}
