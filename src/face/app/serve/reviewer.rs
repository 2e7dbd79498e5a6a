//! The gateway's side of the review board ([`crate::app::review`]): every [`EVERY`] it puts
//! each tool `tools.lock` holds back on the board (once per definition, with a
//! `catalog.changed` line in the audit trail), takes off those no longer held (a server that
//! changed back), and — while anything is held — reads the decisions. An approval of the very
//! definition held back puts it in force here (listed again, every session told, a
//! `catalog.approved` line) and rewrites `tools.lock` beside the manifest when the gateway may
//! write it; a denial keeps it held and takes it off the board (`catalog.denied`). Every
//! replica on one Redis reads the same decisions, so one `approve` reaches them all.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;

use super::audit::Event;
use super::gateway::Gateway;
use crate::app::review::{HeldTool, Review, Verdict};

/// How often the board is looked at (an approval is in force on every replica within it).
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// What one gateway's reviewer keeps between looks.
struct Reviewer {
    review: Review,
    /// `tools.lock` beside the manifest (rewritten on an approval, when it may be).
    lock: PathBuf,
    quiet: bool,
    /// Served name → the hash put on the board.
    shown: HashMap<String, String>,
    /// The denials already carried out (name, hash); an approval is carried out once by
    /// its nature (what it approved is no longer held).
    denied: HashSet<(String, String)>,
    /// The board could not be read: said once until it can again.
    failing: bool,
}

/// Keep the board and the catalog of `gateway` in step until the gateway is gone.
pub(super) async fn review(gateway: Weak<Gateway>, review: Review, lock: PathBuf, quiet: bool) {
    let mut r = Reviewer {
        review,
        lock,
        quiet,
        shown: HashMap::new(),
        denied: HashSet::new(),
        failing: false,
    };
    loop {
        let Some(g) = gateway.upgrade() else { return };
        if g.catalog.pinned().is_on() {
            r.look(&g).await;
        }
        drop(g);
        tokio::time::sleep(EVERY).await;
    }
}

impl Reviewer {
    async fn look(&mut self, g: &Gateway) {
        let held = g.catalog.pinned().held();
        self.show(g, &held).await;
        if held.is_empty() {
            return;
        }
        match self.review.verdicts().await {
            Ok(verdicts) => {
                self.failing = false;
                for v in verdicts {
                    let current = held.iter().any(|h| h.now == v.pin);
                    let said = (self.denied).contains(&(v.pin.name.clone(), v.pin.hash.clone()));
                    if current && (v.approved || !said) {
                        self.carry_out(g, &v).await;
                    }
                }
            }
            Err(e) if !self.failing => {
                self.failing = true;
                self.say(format!("warning: mcp serve: the review board cannot be read ({e}); held-back tools stay held until it can"));
            }
            Err(_) => {}
        }
    }

    /// Put what is newly held on the board, and take off what no longer is.
    async fn show(&mut self, g: &Gateway, held: &[HeldTool]) {
        for h in held {
            if self.shown.get(&h.now.name) == Some(&h.now.hash) {
                continue;
            }
            if let Err(e) = self.review.put(h).await {
                self.say(format!(
                    "warning: mcp serve: tool `{}` could not be put up for review: {e}",
                    h.now.name
                ));
                continue;
            }
            self.shown.insert(h.now.name.clone(), h.now.hash.clone());
            let fields = json!({"tool": h.now.name, "from": h.now.from, "was": h.was, "now": h.now.hash, "change": h.change});
            tell(g, Event::CatalogChanged, fields);
        }
        let gone: Vec<String> = (self.shown.keys())
            .filter(|name| !held.iter().any(|h| &h.now.name == *name))
            .cloned()
            .collect();
        for name in gone {
            if self.review.remove(&name).await.is_ok() {
                self.shown.remove(&name);
            }
        }
    }

    /// Carry out `v`, a decision on a definition held back now.
    async fn carry_out(&mut self, g: &Gateway, v: &Verdict) {
        let (name, hash) = (&v.pin.name, &v.pin.hash);
        let fields = json!({"tool": name, "from": v.pin.from, "hash": hash, "by": v.by});
        if v.approved {
            if !g.catalog.accept(&v.pin) {
                return;
            }
            tell(g, Event::CatalogApproved, fields);
            let written = match g.catalog.pinned().pins() {
                Some(pins) => {
                    super::super::lock::write(&self.lock, &pins).map_err(|e| e.to_string())
                }
                None => Ok(()),
            };
            let lock = match written {
                Ok(()) => format!("{} updated", self.lock.display()),
                Err(e) => format!("{e}; the decision stays in the lane store (record it with `flux-tools lock --update`)"),
            };
            self.say(format!(
                "mcp serve: tool `{name}` approved by {}: served from now on ({lock})",
                v.by
            ));
            if self.review.remove(name).await.is_ok() {
                self.shown.remove(name);
            }
        } else {
            tell(g, Event::CatalogDenied, fields);
            self.say(format!(
                "mcp serve: tool `{name}` denied by {}: it stays held back",
                v.by
            ));
            self.denied.insert((name.clone(), hash.clone()));
            // Off the board, and not put back while this definition is what is held.
            let _ = self.review.remove(name).await;
        }
    }

    fn say(&self, line: String) {
        if !self.quiet {
            super::say::line(line);
        }
    }
}

/// Say `event` of the catalog in the audit trail and, when spans go somewhere, as a span of its
/// own (`catalog.changed TOOL`, its `fields` as `flux_tools.catalog.*` attributes).
fn tell(g: &Gateway, event: Event, fields: serde_json::Value) {
    g.audit.record(event, None, fields.clone());
    if !g.finish().exports() {
        return;
    }
    let tool = fields["tool"].as_str().unwrap_or_default();
    let name = format!("{} {tool}", event.as_str());
    let mut attributes = vec![opentelemetry::KeyValue::new(
        "gen_ai.tool.name",
        tool.to_string(),
    )];
    let more = (fields.as_object().into_iter().flatten()).filter(|(k, _)| *k != "tool");
    for (k, v) in more.filter_map(|(k, v)| Some((k, v.as_str()?))) {
        attributes.push(opentelemetry::KeyValue::new(
            format!("flux_tools.catalog.{k}"),
            v.to_string(),
        ));
    }
    let finish = g.finish().clone();
    tokio::spawn(async move { finish.event(name, attributes).await });
}

/// Decide on `handle` (`tool:NAME@HASH`) for `by` from the status page: on the board, so every
/// replica carries it out. What was decided, as the page shows it.
pub(super) async fn decide(
    gateway: &Gateway,
    handle: &str,
    d: crate::app::parked::Decision,
    by: &str,
) -> Result<String, String> {
    let Some(review) = gateway.review.get() else {
        return Err("this gateway has no review board".into());
    };
    let h = review.decide(handle, d, by).await?;
    let what = match d {
        crate::app::parked::Decision::Approve => "approved",
        crate::app::parked::Decision::Deny => "denied",
    };
    Ok(format!("{what}: tool {} ({})", h.now.name, h.now.hash))
}

/// Start `gateway`'s reviewer on the board of its lane store (Redis: every replica's; else this
/// machine's files), if it can be had.
pub(super) fn start(gateway: &Arc<Gateway>, quiet: bool) -> Option<Review> {
    let manifest = gateway.catalog.manifest().path.clone();
    let canonical = manifest.canonicalize().unwrap_or(manifest.clone());
    let board = gateway.base().board(crate::run::store::BoardOf::Catalog);
    let review = match Review::of(&canonical, board) {
        Ok(r) => r,
        Err(e) => {
            if !quiet && gateway.catalog.pinned().is_on() {
                super::say::line(format!("warning: mcp serve: no review board ({e}): held-back tools are approved with `flux-tools lock --update` only"));
            }
            return None;
        }
    };
    let lock = manifest
        .parent()
        .unwrap_or(std::path::Path::new(""))
        .join(crate::lock::FILE);
    tokio::spawn(self::review(
        Arc::downgrade(gateway),
        review.clone(),
        lock,
        quiet,
    ));
    Some(review)
}
