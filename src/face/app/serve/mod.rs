//! `flux-tools mcp serve`: the manifest's tools as an MCP server — the engine's fourth face.
//!
//! Over stdio (what a client's `command`/`args` launches: one session) or Streamable HTTP
//! (`--http ADDR`, `/mcp`: a session per client, a tenant per bearer token). Every
//! `tools/call` runs as a run of one call on one engine for the process (`gateway.rs`):
//! the same schema checks, lanes, retries, idempotency keys, cache and classification as a
//! batch. The turn lane is each session's; the tenant, tool and shared lanes live in the lane
//! store, so every session, every other gateway process and every `flux-tools run` of that
//! store share one limit. Side effects keep arrival order across sessions (`order.rs`). The
//! tools are listed as a model should see them (`catalog.rs`) and answered as a model can act
//! on (`answer.rs`); `handler.rs` speaks MCP, `http.rs` hosts it on HTTP.

mod answer;
mod approve;
mod audit;
mod audit_logs;
mod auth;
mod caller;
mod catalog;
mod cx;
mod door;
pub mod entry;
mod fast;
mod fault;
mod followers;
mod force;
mod gateway;
mod handler;
mod http;
mod keys;
mod listen;
mod metrics;
mod open;
mod ops;
mod order;
mod passthrough;
mod pinned;
pub(super) mod pins;
mod progress;
mod record;
mod reload;
mod repoll;
mod reviewer;
mod rounds;
mod say;
mod session;
mod sessions;
mod shaped;
mod spend;
mod status;
mod stdio;
mod steps;
mod subscriptions;
mod tasks;
mod uri;

#[cfg(test)]
mod floors_tests;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::engine::Core;
use super::options::ServeOptions;
use super::prepare::Parts;
use super::runtime_with;
use crate::batch::Batch;
use crate::error::{Error, EXIT_OK};
use crate::manifest::Manifest;
use crate::plan;
use catalog::Catalog;
use gateway::Gateway;
use handler::Handler;

/// Serve until stdin closes (stdio) or SIGTERM/SIGINT.
pub(super) fn serve(s: &ServeOptions) -> Result<u8, Error> {
    let opts = &s.run;
    // Before anything is started: what the gateway starts dies with it, even under kill -9.
    if let Err(e) = crate::tools::reaper::start() {
        eprintln!("warning: mcp serve: the watchdog that ends this gateway's tools with it could not start: {e}");
    }
    let manifest = Manifest::load(&opts.manifest, crate::tools::KINDS).map_err(Error::Invalid)?;
    let tokens = tokens(&manifest)?;
    let admin = admin_token(&manifest)?;
    let mut manifest = manifest;
    let hub = crate::tools::mcp::hub_for(&manifest);
    // Over stdio one worker: a call's hops between the wire, the engine and an upstream's
    // pipe stay on one thread (`benches/README.md`, a third look).
    let rt = runtime_with(s.workers.or(s.http.is_none().then_some(1)))?;
    let audit = rt
        .block_on(async { audit::Audit::open(s.audit.as_deref(), opts.otlp.clone()) })
        .map_err(Error::Usage)?;
    let audit = Arc::new(audit);
    if let Some(hub) = &hub {
        super::prepare::learn_whole(opts.quiet, &mut manifest, hub, &rt);
    }
    // What `tools.lock` pins is all that is served (a changed or new tool is held back).
    let lock = super::lock::in_force(&opts.manifest, manifest.serve.pin)?;
    let catalog = Catalog::new(
        manifest.clone(),
        s.tools.as_deref(),
        hub.clone(),
        opts.quiet,
    )
    .map_err(Error::Usage)?
    .pinned_by(lock);
    let parts = Parts::of_manifest(opts, manifest, hub, &rt)?;
    let lanes = parts.lanes.clone();
    let approver = Arc::new(crate::run::gate::NoApprover);
    // The gateway is a face of the engine's core: no reporters, no summary; its calls are
    // runs of the core's kit, and they and its sessions end through the core's `Finish`.
    let mut core = Core::open(opts, parts, approver, (None, Arc::default()));
    let empty =
        plan::build(&core.manifest, &Batch::empty("<mcp>"), &opts.plan).map_err(Error::Invalid)?;
    let kit = core.kit(&empty);
    let gateway = Arc::new(Gateway::new(
        catalog,
        kit,
        lanes,
        opts.plan.clone(),
        core.finish(),
        core.controls(),
        audit.clone(),
    ));
    if let Some(hub) = gateway.catalog.now().hub() {
        rt.spawn(followers::follow(gateway.clone(), hub));
    }
    // Whole servers are judged against the lock now, not at the first `tools/list`: what is
    // held back is on the board, the page and `/metrics` before any client comes.
    if gateway.catalog.pinned().is_on() {
        rt.block_on(gateway.catalog.ensure_wholes());
    }
    if let Some(review) = rt.block_on(async { reviewer::start(&gateway, opts.quiet) }) {
        let _ = gateway.review.set(review);
    }
    let path = opts.manifest.clone();
    let reloading = {
        let _in = rt.enter();
        reload::reloads(gateway.clone(), path, s.watch, opts.quiet)
    };
    rt.spawn(reloading);
    let tenant = s.tenant.clone();
    let served = match &s.http {
        None => rt.block_on(stdio(gateway, tenant, s.grace)),
        Some(addr) => {
            let m = gateway.catalog.manifest();
            let auth = m
                .serve
                .auth
                .clone()
                .map(|a| Arc::new(auth::Verifier::new(a)));
            if let Some(v) = &auth {
                if let Err(failed) = rt.block_on(v.prime()) {
                    for f in failed {
                        eprintln!("warning: mcp serve: [serve.auth]: the issuer's keys could not be fetched yet (tried again when a token comes): {f}");
                    }
                }
            }
            let token_roles = (m.serve.token_roles.iter())
                .map(|(t, r)| (t.clone(), Arc::from(r.as_slice())))
                .collect();
            let http = http::HttpOptions {
                door: door::Door {
                    tokens,
                    token_roles,
                    admin,
                    auth,
                    tenant,
                    audit,
                },
                hosts: s.allow_host.clone(),
                origins: s.allow_origin.clone(),
                limits: m.serve.limits.clone(),
            };
            rt.block_on(serve_http(gateway, addr, http, s.grace, opts.quiet))
        }
    };
    core.close(rt);
    served.map(|()| EXIT_OK)
}

/// `[serve] admin_token`, rendered, by digest.
fn admin_token(manifest: &Manifest) -> Result<Option<[u8; 32]>, Error> {
    let Some(t) = &manifest.serve.admin_token else {
        return Ok(None);
    };
    let token = t
        .render(&serde_json::Map::new(), &|s| s.to_string())
        .map_err(|e| Error::Usage(format!("[serve] admin_token: {e}")))?;
    if token.trim().is_empty() {
        return Err(Error::Usage(
            "[serve] admin_token is empty\nhint: set the variable it names".into(),
        ));
    }
    Ok(Some(door::digest(token.trim())))
}

/// `[serve.tokens]`, rendered (their `${env:…}` read now), by digest.
fn tokens(manifest: &Manifest) -> Result<door::Tokens, Error> {
    let mut out = door::Tokens::new();
    let no_args = serde_json::Map::new();
    for (tenant, t) in &manifest.serve.tokens {
        let token = t
            .render(&no_args, &|s| s.to_string())
            .map_err(|e| Error::Usage(format!("[serve.tokens] {tenant}: {e}")))?;
        if token.trim().is_empty() {
            return Err(Error::Usage(format!(
                "[serve.tokens] {tenant}: the token is empty\nhint: set the variable it names"
            )));
        }
        out.insert(door::digest(token.trim()), tenant.clone());
    }
    Ok(out)
}

/// SIGTERM or SIGINT.
async fn terminated() {
    let mut signals = crate::app::signals::subscribe();
    crate::app::signals::next(&mut signals).await;
}

/// One session on stdin and stdout, until stdin closes (its calls in flight are cancelled:
/// nobody is left to answer) or a signal (they get `grace` to finish, and the session is
/// served meanwhile, so their answers reach the client).
async fn stdio(gateway: Arc<Gateway>, tenant: String, grace: Duration) -> Result<(), Error> {
    let handler = Handler::new(gateway.clone(), tenant.clone());
    let (input, output) = rmcp::transport::io::stdio_pipes();
    let session = handler.session();
    let (wire, outbox) = stdio::Wire::new(
        input,
        output,
        (session.turnstile.clone(), session.gone.clone()),
    );
    let wire = wire.answering(stdio::Shortcut {
        gateway: gateway.clone(),
        session: session.clone(),
        caller: caller::Caller::local(tenant),
    });
    // Started by hand in a terminal: say what it waits for, and leave quietly when stopped
    // (Ctrl-C, Ctrl-D) before a client came.
    let by_hand = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if by_hand {
        eprintln!("{BY_HAND}");
    }
    let service = tokio::select! {
        served = handler.serve(wire) => match served {
            Ok(s) => s,
            Err(_) if by_hand => return Ok(()),
            Err(e) => return Err(Error::Usage(format!("mcp serve: the client's initialize failed: {e}"))),
        },
        () = terminated() => return Ok(()),
    };
    let stop = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let closed = tokio::select! {
        _ = &mut waiting => true,
        () = terminated() => false,
    };
    if closed {
        gateway.drain(Duration::ZERO).await;
        return Ok(());
    }
    // The calls get `grace`; then the answers of those that finished are sent before the wire
    // closes.
    let mut gone = false;
    {
        let drain = async {
            gateway.drain(grace).await;
            outbox.answered_within(SETTLE).await;
        };
        tokio::pin!(drain);
        loop {
            tokio::select! {
                () = &mut drain => break,
                _ = &mut waiting, if !gone => gone = true,
            }
        }
    }
    stop.cancel();
    if !gone {
        let _ = waiting.await;
    }
    outbox.written_within(SETTLE).await;
    Ok(())
}

/// What a gateway started by hand in a terminal says.
const BY_HAND: &str = "flux-tools mcp serve: waiting for an MCP client on stdin — this is a stdio MCP server, \
which a client starts itself: give the client `\"command\": \"flux-tools\", \"args\": [\"mcp\", \"serve\"]` \
(in this folder, or with `--manifest PATH`), or serve HTTP with `flux-tools mcp serve --http 127.0.0.1:8808`. \
Ctrl-C stops it.";

/// How long a stopping gateway waits for the answers of finished calls to be written.
const SETTLE: Duration = Duration::from_secs(2);

/// Streamable HTTP on `addr` until a signal: then no new calls, and the calls in flight get
/// `grace` to finish before they are cancelled; then the listener and the sessions close.
async fn serve_http(
    gateway: Arc<Gateway>,
    addr: &str,
    opts: http::HttpOptions,
    grace: Duration,
    quiet: bool,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Usage(format!("--http {addr}: cannot listen: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("--http: the listening address", e))?;
    if !quiet {
        eprintln!("flux-tools mcp serve: listening on http://{local}/mcp");
        if !opts.door.closed() && !local.ip().is_loopback() {
            eprintln!("warning: mcp serve: {local} is not loopback and the manifest has neither [serve.tokens] nor [serve.auth]: anyone who reaches it can call the tools");
        }
    }
    let (stop, sessions) = (CancellationToken::new(), CancellationToken::new());
    let server = tokio::spawn(http::serve(
        gateway.clone(),
        listener,
        opts,
        (stop.clone(), sessions.clone()),
    ));
    terminated().await;
    // New calls are refused from here on; connections are still served, so a session can
    // finish its exchange (a client lists the tools again to check a result, ends its session).
    gateway.drain(grace).await;
    stop.cancel();
    let _ = server.await;
    sessions.cancel();
    Ok(())
}
