//! A client's `_meta.idempotencyKey` through the gateway: per tenant, the key is claimed in
//! the lane store before the call is dispatched and its answer recorded after, so the same
//! key through any replica that shares the store makes no second call — it waits for the
//! first while that is in flight, and gets the recorded answer after. A replica that died
//! mid-call leaves its claim orphaned: the retry reruns the call with the same key upstream
//! when that is safe (a read, or an idempotent tool — one whose server honours the key),
//! else it is answered `indeterminate`. A key reused for other arguments is refused. Without
//! a client's key nothing is remembered: the gateway cannot tell a retry from a new call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::answer::{self, Refusal};
use super::caller::{Caller, Via};
use crate::events::ErrorKind;
use crate::manifest::ServeLimits;
use crate::store::intents::{Claim, Intent, Intents, LocalIntents};

/// The longest key a client may send (bytes).
const MAX_KEY: usize = 256;
/// How often a waiting retry looks again.
const POLL: Duration = Duration::from_millis(100);

pub(super) struct Keys {
    store: Arc<dyn Intents>,
    kept: Duration,
    lease: Duration,
}

/// A client's idempotency key, and the tenant whose it is (keys are kept per tenant).
pub(super) struct ClientKey<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
}

/// What a claim found.
pub(super) enum Claimed {
    /// Run the call (`true`: a replica died with it in flight; it may have landed).
    Run(Held, bool),
    /// The recorded answer.
    Answered(Value),
    Refused(Refusal),
}

/// A key this gateway holds while its call runs; its lease is renewed until it is answered
/// or forgotten (or this process dies, and the claim is orphaned).
pub(super) struct Held {
    claim: Claim,
    store: Arc<dyn Intents>,
    renewing: tokio::task::JoinHandle<()>,
}

impl Keys {
    /// Intents in `store` when it shares them (Redis), else in this process.
    pub(super) fn new(store: Option<Arc<dyn Intents>>, limits: &ServeLimits) -> Keys {
        let lease = std::env::var("FLUX_TOOLS_LEASE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis)
            .max(Duration::from_millis(300));
        Keys {
            store: store.unwrap_or_else(|| Arc::new(LocalIntents::new(limits.keys as usize))),
            kept: limits.keys_kept,
            lease,
        }
    }

    /// Claim `key` of `tenant` for a call of `tool` with `args`, waiting while another
    /// attempt has it in flight (until `cancel`).
    pub(super) async fn claim(
        &self,
        ClientKey { tenant, key }: ClientKey<'_>,
        (tool, args): (&str, &Map<String, Value>),
        cancel: &CancellationToken,
    ) -> Claimed {
        if key.is_empty() || key.len() > MAX_KEY {
            let why = format!("`_meta.idempotencyKey` must be a string of 1 to {MAX_KEY} bytes; the call was not made");
            return Claimed::Refused(Refusal::new(ErrorKind::InvalidCall, why));
        }
        let args_text = serde_json::to_string(args).unwrap_or_default();
        let claim = Claim {
            scope: format!("{tenant}\u{0}{key}"),
            hash: crate::hash::fnv_hex(format!("{tool}\u{0}{args_text}").as_bytes()),
            token: format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)),
            lease: self.lease,
            keep: self.kept,
        };
        loop {
            let found = self.store.clone().claim(claim.clone()).await;
            match found {
                Ok(Intent::New) => return Claimed::Run(self.hold(claim), false),
                Ok(Intent::Orphaned) => return Claimed::Run(self.hold(claim), true),
                Ok(Intent::Done(text)) => {
                    let v = serde_json::from_str(&text)
                        .unwrap_or_else(|_| answer::error("the recorded answer is unreadable"));
                    return Claimed::Answered(v);
                }
                Ok(Intent::Mismatch) => {
                    let why = format!("idempotency key `{}` was used for a call with other arguments (or another tool); a key names one intent: send a new key for a new call", key.escape_default());
                    return Claimed::Refused(Refusal::new(ErrorKind::InvalidCall, why));
                }
                Ok(Intent::InFlight) => {}
                Err(e) => {
                    let why = format!(
                        "{e}; the call with idempotency key `{}` was not made",
                        key.escape_default()
                    );
                    return Claimed::Refused(Refusal::new(ErrorKind::LaneStore, why));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = cancel.cancelled() => return Claimed::Refused(Refusal::Cancelled),
            }
        }
    }

    fn hold(&self, claim: Claim) -> Held {
        let (store, c, every) = (self.store.clone(), claim.clone(), self.lease / 3);
        let renewing = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if !matches!(store.clone().renew(c.clone()).await, Ok(true)) {
                    return;
                }
            }
        });
        Held {
            claim,
            store: self.store.clone(),
            renewing,
        }
    }
}

impl Held {
    /// Record the call's answer for every retry of its key.
    pub(super) async fn answer(self, answer: &Value) {
        self.renewing.abort();
        let text = answer.to_string();
        let _ = self.store.clone().answer(self.claim.clone(), text).await;
    }

    /// The call never reached its tool: let the key go, so a retry makes it.
    pub(super) async fn forget(self) {
        self.renewing.abort();
        let _ = self.store.clone().forget(self.claim.clone()).await;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewing.abort();
    }
}

/// The answer to a retry of a non-idempotent write whose first attempt died in flight.
pub(super) fn indeterminate(key: &str) -> Value {
    answer::error(&format!(
        "indeterminate: the call with idempotency key `{}` was in flight on a gateway that stopped; it may have reached its tool, and it is not sent again (the tool is not idempotent)",
        key.escape_default()
    ))
}

/// The key a tool sees for a client's `key`: the client's own from the gateway's own tenant;
/// from a tenant a token or a JWT names, `TENANT:KEY`, so two tenants' same key never reaches
/// a tool that dedupes by key as one intent.
pub(super) fn upstream(caller: &Caller, key: String) -> String {
    match caller.via {
        Via::Local => key,
        Via::Token | Via::Jwt => format!("{}:{key}", caller.tenant),
    }
}
/// The idempotency key a request's `_meta.idempotencyKey` gives: a value that is not a string
/// (`5`, `null`) is no key at all, and is refused as an empty one is — never ignored.
pub(super) fn key_in(meta: Option<&Value>) -> Option<String> {
    meta.map(|k| k.as_str().unwrap_or_default().to_string())
}
