//! Intents by idempotency key in Redis, so a client's retry through any replica of
//! `mcp serve` finds what the first attempt did: `flux-tools:NS:intent:{SCOPE}` (a hash:
//! the arguments' hash, then the answer) and `…:owner` (the token of the replica that
//! dispatched it, with a lease it renews while the call runs). An intent whose owner key
//! lapsed before an answer was recorded is orphaned: its replica died mid-call.

use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::Script;

use super::store_error;
use crate::run::store::{BoxFuture, LaneError};
use crate::store::intents::{Claim, Intent, Intents};

/// KEYS: the intent, its owner. ARGV: hash, token, lease ms, keep s.
const CLAIM: &str = r"
local h = redis.call('HGET', KEYS[1], 'hash')
if not h then
  redis.call('HSET', KEYS[1], 'hash', ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {'new'}
end
if h ~= ARGV[1] then return {'mismatch'} end
local answer = redis.call('HGET', KEYS[1], 'answer')
if answer then return {'done', answer} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'inflight'} end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return {'orphaned'}";

/// KEYS: owner. ARGV: token, lease ms.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1";

/// KEYS: the intent, its owner. ARGV: token, answer, keep s.
const ANSWER: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'answer', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1";

/// KEYS: the intent, its owner. ARGV: token.
const FORGET: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1";

pub(super) struct RedisIntents {
    pub conn: ConnectionManager,
    pub ns: String,
    pub url: String,
}

impl RedisIntents {
    fn keys(&self, c: &Claim) -> (String, String) {
        // The scope is hashed: a client's key may be long, or hold anything.
        let scope = crate::hash::fnv_hex(c.scope.as_bytes());
        let intent = format!("flux-tools:{}:intent:{{{scope}}}", self.ns);
        let owner = format!("{intent}:owner");
        (intent, owner)
    }
}

impl Intents for RedisIntents {
    fn claim(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<Intent, LaneError>> {
        Box::pin(async move {
            let (intent, owner) = self.keys(&c);
            let mut conn = self.conn.clone();
            let found: Vec<String> = Script::new(CLAIM)
                .key(intent)
                .key(owner)
                .arg(&c.hash)
                .arg(&c.token)
                .arg(c.lease.as_millis() as u64)
                .arg(c.keep.as_secs().max(1))
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(match found.first().map(String::as_str) {
                Some("new") => Intent::New,
                Some("mismatch") => Intent::Mismatch,
                Some("done") => Intent::Done(found.get(1).cloned().unwrap_or_default()),
                Some("inflight") => Intent::InFlight,
                _ => Intent::Orphaned,
            })
        })
    }

    fn renew(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<bool, LaneError>> {
        Box::pin(async move {
            let (_, owner) = self.keys(&c);
            let mut conn = self.conn.clone();
            let kept: i64 = Script::new(RENEW)
                .key(owner)
                .arg(&c.token)
                .arg(c.lease.as_millis() as u64)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(kept == 1)
        })
    }

    fn answer(
        self: Arc<Self>,
        c: Claim,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            let (intent, owner) = self.keys(&c);
            let mut conn = self.conn.clone();
            let _: i64 = Script::new(ANSWER)
                .key(intent)
                .key(owner)
                .arg(&c.token)
                .arg(answer)
                .arg(c.keep.as_secs().max(1))
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(())
        })
    }

    fn forget(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            let (intent, owner) = self.keys(&c);
            let mut conn = self.conn.clone();
            let _: i64 = Script::new(FORGET)
                .key(intent)
                .key(owner)
                .arg(&c.token)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(())
        })
    }
}
