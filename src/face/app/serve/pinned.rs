//! `tools.lock` in force at the gateway: a served tool whose definition is not the one pinned
//! — changed since, or new under `pin = "strict"` — is held back: left out of `tools/list`, and
//! a call to it answered as for a tool that does not exist, with a warning on stderr naming the
//! change (once per definition). A definition is judged when it is learnt (a manifest's tools
//! when it is put in force, an upstream's when its server is asked) and the judgement kept
//! until the next; one approved on the review board ([`super::reviewer`]) joins the lock in
//! force.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use serde_json::Value;

use crate::app::review::HeldTool;
use crate::lock::{InForce, Kind, Pin};

/// The lock in force, and what it made of each served tool.
#[derive(Default)]
pub(super) struct Pinned {
    /// `None`: no lock — everything is served.
    lock: RwLock<Option<InForce>>,
    /// Served names held back, with their definitions now.
    held: Mutex<BTreeMap<String, HeldTool>>,
    /// The definitions warned about (name, hash): each once.
    warned: Mutex<HashSet<(String, String)>>,
}

impl Pinned {
    pub(super) fn new(lock: Option<InForce>) -> Pinned {
        Pinned {
            lock: RwLock::new(lock),
            ..Pinned::default()
        }
    }

    /// Put `lock` in force (a reload read it again): every tool is judged afresh as it is
    /// learnt again.
    pub(super) fn set(&self, lock: Option<InForce>) {
        *self.lock.write().unwrap_or_else(|e| e.into_inner()) = lock;
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Judge the tools `from` (`manifest`, `mcp:SERVER`) offers now — served name → its
    /// definition as listed — afresh: each one the lock does not pin as it is now is held
    /// back, the rest served (and one of `from` no longer offered is no longer held).
    pub(super) fn judge(&self, from: &str, entries: HashMap<String, Value>, quiet: bool) {
        let lock = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let Some(lock) = lock.as_ref() else { return };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|name, h| h.now.from != from || entries.contains_key(name));
        for (name, entry) in entries {
            let now = Pin::new(Kind::Tool, &name, from.to_string(), &entry);
            let Some(change) = lock.holds(&now) else {
                held.remove(&name);
                continue;
            };
            let fresh = (self.warned.lock())
                .map(|mut w| w.insert((name.clone(), now.hash.clone())))
                .unwrap_or(false);
            if fresh && !quiet {
                let short = crate::app::review::short(&now.hash);
                super::say::line(format!(
                    "warning: mcp serve: tool `{name}` is held back: its definition is not the one tools.lock pins\n{change}hint: review it, then accept it with `flux-tools approve tool:{name}@{short}` (or `flux-tools lock --update`)"
                ));
            }
            if held.get(&name).is_some_and(|h| h.now.hash == now.hash) {
                continue;
            }
            let was = (lock.pins.iter())
                .find(|p| p.kind == Kind::Tool && p.name == name)
                .map(|p| p.hash.clone());
            let since = crate::app::parked::unix_now();
            held.insert(
                name,
                HeldTool {
                    now,
                    was,
                    change,
                    since,
                },
            );
        }
    }

    /// Accept `pin` (approved on the review board) if it is the definition held back under
    /// its name now: it joins the lock in force and is served. Whether it did.
    pub(super) fn accept(&self, pin: &Pin) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.get(&pin.name).is_none_or(|h| h.now.hash != pin.hash) {
            return false;
        }
        let mut lock = self.lock.write().unwrap_or_else(|e| e.into_inner());
        let Some(lock) = lock.as_mut() else {
            return false;
        };
        lock.accept(pin.clone());
        held.remove(&pin.name);
        true
    }

    /// Whether the served tool `name` is held back.
    pub(super) fn holds(&self, name: &str) -> bool {
        (self.held.lock())
            .map(|h| !h.is_empty() && h.contains_key(name))
            .unwrap_or(false)
    }

    /// How many served tools are held back.
    pub(super) fn count(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }

    /// The tools held back now, by name.
    pub(super) fn held(&self) -> Vec<HeldTool> {
        (self.held.lock())
            .map(|h| h.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The pins of the lock in force (with what was approved since), if there is one.
    pub(super) fn pins(&self) -> Option<Vec<Pin>> {
        let lock = self.lock.read().ok()?;
        lock.as_ref().map(|l| l.pins.clone())
    }

    /// Whether a lock is in force (judging is needed at all).
    pub(super) fn is_on(&self) -> bool {
        self.lock.read().map(|l| l.is_some()).unwrap_or(true)
    }
}
