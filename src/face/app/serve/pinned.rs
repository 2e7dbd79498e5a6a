//! `tools.lock` in force at the gateway: a served tool whose definition is not the one pinned
//! — changed since, or new — is held back: left out of `tools/list`, and a call to it answered
//! as for a tool that does not exist, with a warning on stderr naming the change (once per
//! definition). A definition is judged when it is learnt (a manifest's tools when it is put in
//! force, an upstream's when its server is asked) and the judgement kept until the next.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use serde_json::Value;

use crate::lock::{Change, Kind, Pin};

/// The lock in force, and what it made of each served tool.
#[derive(Default)]
pub(super) struct Pinned {
    /// `None`: no lock — everything is served.
    lock: RwLock<Option<Vec<Pin>>>,
    /// Served names held back.
    held: Mutex<HashSet<String>>,
    /// The definitions warned about (name, hash): each once.
    warned: Mutex<HashSet<(String, String)>>,
}

impl Pinned {
    pub(super) fn new(lock: Option<Vec<Pin>>) -> Pinned {
        Pinned {
            lock: RwLock::new(lock),
            ..Pinned::default()
        }
    }

    /// Put `lock` in force (a reload read it again): every tool is judged afresh as it is
    /// learnt again.
    pub(super) fn set(&self, lock: Option<Vec<Pin>>) {
        *self.lock.write().unwrap_or_else(|e| e.into_inner()) = lock;
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Judge `entries` (served name → where it comes from and its definition as listed)
    /// afresh: each one the lock does not pin as it is now is held back, the rest served.
    pub(super) fn judge(&self, entries: HashMap<String, (String, Value)>, quiet: bool) {
        let lock = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let Some(lock) = lock.as_ref() else { return };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for (name, (from, entry)) in entries {
            let now = Pin::new(Kind::Tool, &name, from, &entry);
            let pinned = lock.iter().find(|p| p.kind == Kind::Tool && p.name == name);
            let change = match pinned {
                Some(was) if was.hash == now.hash => None,
                Some(was) => Some(Change::Changed { was, now: &now }.describe()),
                None => Some(Change::New(&now).describe()),
            };
            let Some(change) = change else {
                held.remove(&name);
                continue;
            };
            held.insert(name.clone());
            let fresh = (self.warned.lock())
                .map(|mut w| w.insert((name.clone(), now.hash.clone())))
                .unwrap_or(false);
            if fresh && !quiet {
                super::say::line(format!(
                    "warning: mcp serve: tool `{name}` is held back: its definition is not the one tools.lock pins\n{change}hint: review it, then accept it with `flux-tools lock --update`"
                ));
            }
        }
    }

    /// Whether the served tool `name` is held back.
    pub(super) fn holds(&self, name: &str) -> bool {
        (self.held.lock())
            .map(|h| !h.is_empty() && h.contains(name))
            .unwrap_or(false)
    }

    /// How many served tools are held back.
    pub(super) fn count(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }

    /// Whether a lock is in force (judging is needed at all).
    pub(super) fn is_on(&self) -> bool {
        self.lock.read().map(|l| l.is_some()).unwrap_or(true)
    }
}
