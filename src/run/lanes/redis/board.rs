//! The board of parked approvals in Redis, so every replica of `mcp serve` on one Redis lists
//! and answers the calls any of them holds: `flux-tools:NS:approvals` (id → the waiting call)
//! and `flux-tools:NS:approval-answers` (id → its answer). Entries are renewed by the waiting
//! replica; the readers drop one that stopped being renewed.

use redis::aio::ConnectionManager;

use super::store_error;
use crate::run::lanes::{Board, BoxFuture, LaneError};
use std::sync::Arc;

pub(super) struct RedisBoard {
    pub conn: ConnectionManager,
    pub ns: String,
    pub url: String,
}

impl RedisBoard {
    fn keys(&self) -> (String, String) {
        (
            format!("flux-tools:{}:approvals", self.ns),
            format!("flux-tools:{}:approval-answers", self.ns),
        )
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

impl Board for RedisBoard {
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
