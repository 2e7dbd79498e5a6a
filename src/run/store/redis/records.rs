//! Records in Redis: `flux-tools:NS:KIND:{ID}` (the id hashed: a client may send anything),
//! a string that expires `keep` after it was last written or read; its counters a hash beside
//! it (`…:{ID}:tally`), added to all or none in one script.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::store_error;
use crate::run::store::{BoxFuture, LaneError};
use crate::store::records::{Add, Records, Tally};

pub(super) struct RedisRecords {
    pub conn: ConnectionManager,
    pub ns: String,
    pub url: String,
    pub kind: String,
}

impl RedisRecords {
    fn key(&self, id: &str) -> String {
        let id = crate::hash::fnv_hex(id.as_bytes());
        format!("flux-tools:{}:{}:{{{id}}}", self.ns, self.kind)
    }
}

/// KEYS[1] the counters; ARGV[1] how long to keep them (ms), then (counter, by, most or '')
/// triples: refused at the first that would pass its most (`{i, now}`), else all added.
const TALLY: &str = r#"
local n = (#ARGV - 1) / 3
for i = 0, n - 1 do
  local most = ARGV[4 + 3 * i]
  if most ~= '' then
    local now = tonumber(redis.call('HGET', KEYS[1], ARGV[2 + 3 * i]) or '0')
    if now + tonumber(ARGV[3 + 3 * i]) > tonumber(most) + 1e-9 then
      return {i, tostring(now)}
    end
  end
end
for i = 0, n - 1 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[2 + 3 * i], ARGV[3 + 3 * i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {-1, '0'}
"#;

fn millis(keep: Duration) -> u64 {
    (keep.as_millis() as u64).max(1)
}

impl Records for RedisRecords {
    fn put(
        self: Arc<Self>,
        id: String,
        text: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("SET")
                .arg(self.key(&id))
                .arg(text)
                .arg("PX")
                .arg(millis(keep))
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }

    fn get(
        self: Arc<Self>,
        id: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut cmd = redis::cmd("GETEX");
            cmd.arg(self.key(&id));
            if !keep.is_zero() {
                cmd.arg("PX").arg(millis(keep));
            }
            cmd.query_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }

    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("DEL")
                .arg(self.key(&id))
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }

    fn tally(
        self: Arc<Self>,
        id: String,
        adds: Vec<Add>,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Tally, LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let script = redis::Script::new(TALLY);
            let mut call = script.key(format!("{}:tally", self.key(&id)));
            call.arg(millis(keep));
            for a in &adds {
                call.arg(&a.counter).arg(a.by.to_string());
                call.arg(a.most.map(|m| m.to_string()).unwrap_or_default());
            }
            let (i, now): (i64, String) = call
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(match usize::try_from(i) {
                Ok(i) => Err((i, now.parse().unwrap_or(0.0))),
                Err(_) => Ok(()),
            })
        })
    }

    fn counters(
        self: Arc<Self>,
        id: String,
    ) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let all: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(format!("{}:tally", self.key(&id)))
                .query_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(all
                .into_iter()
                .map(|(k, v)| (k, v.parse().unwrap_or(0.0)))
                .collect())
        })
    }

    fn forget(
        self: Arc<Self>,
        id: String,
        counters: Vec<String>,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            if counters.is_empty() {
                return Ok(());
            }
            let mut conn = self.conn.clone();
            redis::cmd("HDEL")
                .arg(format!("{}:tally", self.key(&id)))
                .arg(counters)
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }
}
