//! The manifest in force and what the gateway runs calls with for it: the kit (its tools
//! made ready) and the lanes sessions are renewed from, one pair a generation (a reload) and
//! shape (a whole server's tools learnt again) — so a call is planned and run with a manifest
//! and a kit of the same tools.

use std::sync::Arc;

use super::gateway::Gateway;
use crate::app::engine::CallKit;
use crate::batch::Batch;
use crate::plan;
use crate::run::{self, LaneStore};

impl Gateway {
    /// The store sessions' lanes are renewed from.
    pub(super) fn base(&self) -> Arc<dyn LaneStore> {
        self.store
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The manifest in force and its kit, of one generation (a reload sets them one after
    /// the other: a look between the two looks again).
    pub(super) async fn in_force(&self) -> (super::catalog::Current, Arc<CallKit>) {
        loop {
            let now = self.catalog.now();
            let ((generation, shape), kit) = self
                .kit
                .read()
                .map(|k| k.clone())
                .unwrap_or_else(|e| e.into_inner().clone());
            if (generation, shape) == (now.generation, now.shape) {
                return (now, kit);
            }
            if generation == now.generation {
                // A whole server's tools were learnt again: its kit and lanes, made for them.
                if let Ok(kit) = self.reshape(&now, &kit) {
                    return (now, kit);
                }
            }
            tokio::task::yield_now().await;
        }
    }

    /// The kit and the lanes sessions are renewed from, made for the tools of `now` (a new
    /// shape of its generation); the new kit.
    fn reshape(
        &self,
        now: &super::catalog::Current,
        kit: &CallKit,
    ) -> Result<Arc<CallKit>, String> {
        let _one = self.reshaping.lock().map_err(|_| "gateway state lost")?;
        if let Ok(k) = self.kit.read() {
            if k.0 == (now.generation, now.shape) {
                return Ok(k.1.clone());
            }
        }
        let fresh = Arc::new(self.kit_for(&now.manifest, now.hub(), kit)?);
        let table = plan::lane_table(&now.manifest, &self.opts);
        let base = self
            .base()
            .for_lanes(&table, &run::Flow::default())
            .map_err(|e| e.0)?;
        if let (Ok(mut s), Ok(mut k)) = (self.store.write(), self.kit.write()) {
            if k.0 .0 == now.generation && k.0 .1 < now.shape {
                *s = base;
                *k = ((now.generation, now.shape), fresh.clone());
            }
        }
        Ok(fresh)
    }

    /// `kit` made anew for `manifest`'s tools, on the MCP sessions of `hub`.
    fn kit_for(
        &self,
        manifest: &crate::manifest::Manifest,
        hub: Option<Arc<crate::tools::mcp::McpHub>>,
        kit: &CallKit,
    ) -> Result<CallKit, String> {
        let empty = plan::build(manifest, &Batch::empty("<mcp>"), &self.opts)
            .map_err(|d| crate::error::render_all(&d))?;
        Ok(kit.for_manifest(manifest, &empty, hub))
    }

    /// Put `manifest` in force for new calls (SIGHUP, `--watch`): calls already made finish
    /// under the declarations they were planned with; sessions are told the list changed.
    /// `Err`: it was not put in force (the old one stays).
    pub(super) async fn reload(
        self: &Arc<Self>,
        manifest: crate::manifest::Manifest,
        lock: Option<crate::lock::InForce>,
    ) -> Result<usize, String> {
        let _one = self.reloading.lock().await;
        let old = self.catalog.now();
        let same_servers =
            format!("{:?}", old.manifest.mcp_servers) == format!("{:?}", manifest.mcp_servers);
        let has_mcp = crate::tools::mcp::needs_hub(&manifest);
        let hub = match (same_servers, has_mcp) {
            (_, false) => None,
            (true, true) => old.hub(),
            (false, true) => Some(crate::tools::mcp::McpHub::new(&manifest.mcp_servers)),
        };
        let kit = self
            .kit
            .read()
            .map(|k| k.1.clone())
            .unwrap_or_else(|e| e.into_inner().1.clone());
        let kit = Arc::new(self.kit_for(&manifest, hub.clone(), &kit)?);
        let table = plan::lane_table(&manifest, &self.opts);
        let base = self
            .base()
            .for_lanes(&table, &run::Flow::default())
            .map_err(|e| e.0)?;
        let fresh = hub
            .clone()
            .filter(|h| !old.hub().is_some_and(|o| Arc::ptr_eq(&o, h)));
        self.catalog.repin(lock);
        let generation = self.catalog.replace(manifest, hub).await?;
        if let Some(hub) = fresh {
            tokio::spawn(super::followers::follow(self.clone(), hub));
        }
        if let Ok(mut s) = self.store.write() {
            *s = base;
        }
        if let Ok(mut k) = self.kit.write() {
            *k = ((generation, 0), kit);
        }
        // What a client is offered now: a whole server's tools once it is asked.
        self.catalog.ensure_wholes().await;
        let m = self.catalog.manifest();
        Ok(m.tools.iter().filter(|t| t.listed).count())
    }
}
