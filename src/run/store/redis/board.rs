//! The board of parked approvals in Redis, so every replica of `mcp serve` on one Redis lists
//! and answers the calls any of them holds: `flux-tools:NS:approvals` (id → the waiting call)
//! and `flux-tools:NS:approval-answers` (id → its answer). Entries are renewed by the waiting
//! replica; one that stopped being renewed is taken over (by a script that compares and sets)
//! by the replica the client's retry reaches.

use redis::aio::ConnectionManager;

use super::store_error;
use crate::run::store::{Answers, Beats, Entries};
use crate::run::store::{BoxFuture, LaneError};
use std::sync::Arc;

/// Set entry ARGV[1] to ARGV[3] if it still reads ARGV[2].
const CLAIM: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"#;

pub(super) struct RedisBoard {
    pub conn: ConnectionManager,
    pub ns: String,
    pub url: String,
    pub of: crate::run::store::BoardOf,
}

impl RedisBoard {
    /// `flux-tools:NS:approvals` and `…:approval-answers` (the catalog's: `catalogs`, …).
    fn keys(&self) -> (String, String) {
        let (ns, of) = (&self.ns, self.of.name());
        (
            format!("flux-tools:{ns}:{of}s"),
            format!("flux-tools:{ns}:{of}-answers"),
        )
    }

    fn beats_key(&self) -> String {
        format!("flux-tools:{}:{}-gateways", self.ns, self.of.name())
    }

    fn run<T: redis::FromRedisValue + Send + 'static>(
        self: Arc<Self>,
        cmd: redis::Cmd,
    ) -> BoxFuture<'static, Result<T, LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            cmd.query_async::<T>(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }
}

impl Entries for RedisBoard {
    fn put(
        self: Arc<Self>,
        id: String,
        entry: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys().0).arg(id).arg(entry);
        let run = self.run::<i64>(cmd);
        Box::pin(async move { run.await.map(|_| ()) })
    }

    fn entries(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        let mut cmd = redis::cmd("HVALS");
        cmd.arg(self.keys().0);
        self.run::<Vec<String>>(cmd)
    }

    fn ids(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        let mut cmd = redis::cmd("HKEYS");
        cmd.arg(self.keys().0);
        self.run::<Vec<String>>(cmd)
    }

    fn get(
        self: Arc<Self>,
        ids: Vec<String>,
    ) -> BoxFuture<'static, Result<Vec<String>, LaneError>> {
        if ids.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.keys().0).arg(ids);
        let run = self.run::<Vec<Option<String>>>(cmd);
        Box::pin(async move { run.await.map(|v| v.into_iter().flatten().collect()) })
    }

    fn claim(
        self: Arc<Self>,
        id: String,
        old: String,
        entry: String,
    ) -> BoxFuture<'static, Result<bool, LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::Script::new(CLAIM)
                .key(self.keys().0)
                .arg(id)
                .arg(old)
                .arg(entry)
                .invoke_async::<i64>(&mut conn)
                .await
                .map(|n| n == 1)
                .map_err(|e| store_error(&self.url, e))
        })
    }

    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>> {
        let (entries, answers) = self.keys();
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(entries).arg(&id).ignore();
        pipe.cmd("HDEL").arg(answers).arg(&id).ignore();
        Box::pin(async move {
            let mut conn = self.conn.clone();
            pipe.query_async::<()>(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))
        })
    }
}

impl Answers for RedisBoard {
    fn set_answer(
        self: Arc<Self>,
        id: String,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys().1).arg(id).arg(answer);
        let run = self.run::<i64>(cmd);
        Box::pin(async move { run.await.map(|_| ()) })
    }

    fn answer(
        self: Arc<Self>,
        id: String,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys().1).arg(id);
        self.run::<Option<String>>(cmd)
    }

    fn answers(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, String)>, LaneError>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys().1);
        self.run::<Vec<(String, String)>>(cmd)
    }
}

impl Beats for RedisBoard {
    fn beat(
        self: Arc<Self>,
        gateway: String,
        at: f64,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.beats_key()).arg(gateway).arg(at);
        let run = self.run::<i64>(cmd);
        Box::pin(async move { run.await.map(|_| ()) })
    }

    fn beats(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.beats_key());
        self.run::<Vec<(String, f64)>>(cmd)
    }
}
