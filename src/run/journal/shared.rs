//! The shared journal in Redis (`--journal redis://…`): the same records as a journal file, in a
//! list every machine reads, for one run id of one tenant.
//!
//! One process at a time owns a run: it holds a lease (`…:owner`, a random token with a
//! time to live, renewed by the journal's thread) and every record is appended by a script
//! that checks the token first, so a process that lost its lease (paused past it, cut off)
//! cannot journal a dispatch — and a call whose dispatch is not journaled is never invoked.
//! A second process with the same run id waits for the lease, then reads what the first
//! recorded and resumes from it. Redis must keep an append-only file (`appendonly yes`):
//! without one a restart forgets dispatch records, and that is refused at start; with
//! replicas, each record waits (`WAIT`) for one of them.

use std::time::Duration;

use redis::{Commands, Connection, Script};

use super::{Journal, Resume, Sink};

/// How long an ended (or abandoned) run's journal is kept: a week after its last record.
const RETENTION_SECS: u64 = 7 * 24 * 3600;
const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Append a record if this process still owns the run, renewing its lease.
const APPEND: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return redis.error_reply('FENCED another process owns this run now')
end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1";

/// Renew the lease (1) — or say it is lost (0).
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1";

/// Let the run go (only if it is still ours).
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1";

/// A shared journal, opened and owned.
pub(crate) struct Shared {
    /// What earlier attempts of this run recorded (`None`: the run is new).
    pub resume: Option<Resume>,
    pub journal: Journal,
    pub thread: std::thread::JoinHandle<()>,
    /// What the caller should know about how durable the records are.
    pub warnings: Vec<String>,
}

/// The journal of run `run_id` of `tenant` at `url` (already redacted in `shown`), owned
/// by this process; `on_wait` is told once if another process owns it now.
pub(crate) fn open_shared(
    url: &str,
    shown: &str,
    tenant: &str,
    run_id: &str,
    on_wait: &dyn Fn(&str),
) -> Result<Shared, String> {
    let unreachable = |e: redis::RedisError| format!("journal {shown} is unreachable: {e}");
    let client = redis::Client::open(url).map_err(|e| format!("--journal {shown}: {e}"))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(unreachable)?;
    let timeout = Some(Duration::from_secs(5));
    conn.set_read_timeout(timeout).map_err(unreachable)?;
    conn.set_write_timeout(timeout).map_err(unreachable)?;
    let (warnings, replicas) = persistence(&mut conn, shown)?;
    let base = format!("flux-tools:journal:{{{tenant}:{run_id}}}");
    let owner = format!("{base}:owner");
    let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let lease = lease();
    let mut told = false;
    loop {
        let set: Option<String> = redis::cmd("SET")
            .arg(&owner)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(lease.as_millis() as u64)
            .query(&mut conn)
            .map_err(unreachable)?;
        if set.is_some() {
            break;
        }
        if !told {
            on_wait(&format!(
                "run {run_id} is running in another process (journal {shown}); waiting until it ends or its lease of {}s runs out",
                lease.as_secs_f64()
            ));
            told = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let lines: Vec<String> = conn.lrange(&base, 0, -1).map_err(unreachable)?;
    let resume = Resume::read(lines.into_iter());
    let sink = RedisSink {
        conn,
        list: base,
        owner,
        token,
        lease,
        replicas,
    };
    let (journal, thread) = Journal::spawn(Box::new(sink));
    Ok(Shared {
        resume,
        journal,
        thread,
        warnings,
    })
}

/// The lease a process holds on its run: `FLUX_TOOLS_LEASE_MS`, as for lanes (at least
/// 300 ms), else 10 s.
fn lease() -> Duration {
    std::env::var("FLUX_TOOLS_LEASE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DEFAULT_LEASE, Duration::from_millis)
        .max(Duration::from_millis(300))
}

/// Whether Redis keeps what it is told: an append-only file is required; `appendfsync`
/// other than `always` is a warning. Also how many replicas each record waits for (one,
/// if it has any).
fn persistence(conn: &mut Connection, shown: &str) -> Result<(Vec<String>, usize), String> {
    let hint = "hint: run Redis with `--appendonly yes --appendfsync always` (docs/src/durability.md, \"A journal in Redis\")";
    let config: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .arg("appendfsync")
        .query(conn);
    let mut warnings = Vec::new();
    let (aof, fsync) = match config {
        Ok(pairs) => {
            let get = |k: &str| {
                pairs
                    .chunks(2)
                    .find(|p| p[0] == k)
                    .and_then(|p| p.get(1).cloned())
            };
            (get("appendonly").map(|v| v == "yes"), get("appendfsync"))
        }
        Err(_) => (
            info(conn, "persistence", "aof_enabled").map(|v| v == "1"),
            None,
        ),
    };
    match aof {
        Some(false) => {
            return Err(format!(
                "journal {shown}: Redis keeps no append-only file (appendonly no), so a restart could forget that a call was dispatched and it would run twice\n{hint}"
            ))
        }
        None => warnings.push(format!(
            "journal {shown}: cannot tell whether Redis keeps an append-only file (CONFIG and INFO refused); the journal is only as durable as its configuration"
        )),
        Some(true) => {}
    }
    match fsync.as_deref() {
        Some("always") => {}
        Some(other) => warnings.push(format!(
            "journal {shown}: appendfsync is `{other}`: if Redis itself crashes, its last second of records can be lost ({hint})"
        )),
        None => {}
    }
    let replicas = info(conn, "replication", "connected_slaves")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    Ok((warnings, replicas.min(1)))
}

/// One field of `INFO section`.
fn info(conn: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(conn).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// Records appended to a Redis list by the lease holder.
struct RedisSink {
    conn: Connection,
    list: String,
    owner: String,
    token: String,
    lease: Duration,
    /// Replicas each record waits for (0 or 1).
    replicas: usize,
}

impl Sink for RedisSink {
    fn append(&mut self, line: &str) -> Result<(), String> {
        Script::new(APPEND)
            .key(&self.list)
            .key(&self.owner)
            .arg(&self.token)
            .arg(line)
            .arg(self.lease.as_millis() as u64)
            .arg(RETENTION_SECS)
            .invoke::<i64>(&mut self.conn)
            .map_err(|e| format!("journal write failed: {e}"))?;
        if self.replicas > 0 {
            // Well inside the lease: a wait that fails leaves the lease held, so the next
            // record says why too.
            let ms = (self.lease.as_millis() as u64 / 4).clamp(1, 1000);
            let acked: usize = redis::cmd("WAIT")
                .arg(self.replicas)
                .arg(ms)
                .query(&mut self.conn)
                .map_err(|e| format!("journal write failed: {e}"))?;
            if acked < self.replicas {
                return Err(format!(
                    "journal write failed: no replica acknowledged the record within {ms} ms"
                ));
            }
        }
        Ok(())
    }

    fn tick(&self) -> Option<Duration> {
        Some(self.lease / 3)
    }

    /// Renew the lease; a lost one is found by the next append, which is refused.
    fn idle(&mut self) {
        let _: Result<i64, _> = Script::new(RENEW)
            .key(&self.owner)
            .arg(&self.token)
            .arg(self.lease.as_millis() as u64)
            .invoke(&mut self.conn);
    }

    fn close(&mut self) {
        let _: Result<i64, _> = Script::new(RELEASE)
            .key(&self.owner)
            .arg(&self.token)
            .invoke(&mut self.conn);
    }
}
