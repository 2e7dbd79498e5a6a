//! A tenant's spend over a sliding window (`[budget] per_tenant = { max_cost, window }`),
//! counted in the lane store so every run and gateway sharing it counts the same calls. A
//! call's cost is reserved just before it is dispatched and given back if it never reached its
//! tool; a call that does not fit is refused with when enough of the window frees up. The
//! arithmetic is here, shared by the stores: memory keeps the entries in this process, the
//! local store in a file under a lock, Redis in a sorted set by script.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// One reserved call: when (Unix seconds), its cost, and its id (to give it back).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub at: f64,
    pub cost: f64,
    pub id: String,
}

/// What the window says of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Charge {
    /// Reserved under this id.
    Granted(String),
    /// Refused: what the tenant has spent in the window, and how long until enough of it has
    /// left the window for this call (`None`: the call alone costs more than the window allows).
    Refused {
        spent: f64,
        frees_in: Option<Duration>,
    },
}

/// Room for rounding (three calls of 0.30 fit 0.90, not 0.9000000001).
const EPSILON: f64 = 1e-9;

/// Decide a call of `cost` at `now` against `entries` (any order; the expired ones are
/// dropped), reserving it under `id` when it fits.
pub(crate) fn charge(
    entries: &mut Vec<Entry>,
    (now, window, max): (f64, f64, f64),
    cost: f64,
    id: &str,
) -> Charge {
    entries.retain(|e| e.at > now - window);
    entries.sort_by(|a, b| a.at.total_cmp(&b.at));
    let spent: f64 = entries.iter().map(|e| e.cost).sum();
    if spent + cost <= max + EPSILON {
        entries.push(Entry {
            at: now,
            cost,
            id: id.to_string(),
        });
        return Charge::Granted(id.to_string());
    }
    Charge::Refused {
        spent,
        frees_in: frees_in(entries, (now, window, max), cost),
    }
}

/// How long until the oldest entries have left the window enough for `cost` to fit.
fn frees_in(entries: &[Entry], (now, window, max): (f64, f64, f64), cost: f64) -> Option<Duration> {
    if cost > max + EPSILON {
        return None;
    }
    let mut left: f64 = entries.iter().map(|e| e.cost).sum();
    for e in entries {
        left -= e.cost;
        if left + cost <= max + EPSILON {
            return Some(Duration::from_secs_f64((e.at + window - now).max(0.0)));
        }
    }
    Some(Duration::ZERO)
}

/// The refusal's words.
pub(crate) fn refusal(
    tenant: &str,
    spent: f64,
    frees_in: Option<Duration>,
    cost: f64,
    w: &crate::manifest::TenantWindow,
) -> String {
    let when = match frees_in {
        Some(d) => format!(
            "the window frees enough for it in {}",
            crate::duration::format(d)
        ),
        None => "it costs more than the whole window allows".to_string(),
    };
    format!(
        "tenant `{tenant}` has spent {spent:.2} of its {:.2} per {}; this call costs {cost:.2} and was not made; {when}",
        w.max_cost, w.window_text
    )
}

/// The windows of this process's tenants (the memory store's).
#[derive(Default)]
pub(crate) struct Ledger {
    tenants: Mutex<HashMap<String, Vec<Entry>>>,
}

impl Ledger {
    pub(crate) fn charge(
        &self,
        tenant: &str,
        w: &crate::manifest::TenantWindow,
        cost: f64,
    ) -> Charge {
        let id = format!("{:016x}", fastrand::u64(..));
        let mut t = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let entries = t.entry(tenant.to_string()).or_default();
        charge(
            entries,
            (unix_now(), w.window.as_secs_f64(), w.max_cost),
            cost,
            &id,
        )
    }

    pub(crate) fn refund(&self, tenant: &str, id: &str) {
        let mut t = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entries) = t.get_mut(tenant) {
            entries.retain(|e| e.id != id);
        }
    }
}

pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_calls_of_030_fit_a_window_of_100_and_the_fourth_waits_for_the_first_to_leave() {
        let mut e = Vec::new();
        let w = (1000.0, 3600.0, 1.0);
        for (i, now) in [0.0, 10.0, 20.0].iter().enumerate() {
            let at = (1000.0 + now, 3600.0, 1.0);
            assert!(matches!(
                charge(&mut e, at, 0.30, &i.to_string()),
                Charge::Granted(_)
            ));
        }
        let Charge::Refused { spent, frees_in } = charge(&mut e, (1030.0, w.1, w.2), 0.30, "x")
        else {
            panic!("a fourth call of 0.30 does not fit 1.00");
        };
        assert!((spent - 0.90).abs() < 1e-9);
        // The first call (at 1000) leaves the window at 4600: 3570 s from now.
        assert_eq!(frees_in, Some(Duration::from_secs(3570)));
        // After it has left, the call fits.
        assert!(matches!(
            charge(&mut e, (4601.0, w.1, w.2), 0.30, "y"),
            Charge::Granted(_)
        ));
    }

    #[test]
    fn a_call_dearer_than_the_window_is_never_made() {
        let mut e = Vec::new();
        let got = charge(&mut e, (0.0, 60.0, 1.0), 2.0, "x");
        assert_eq!(
            got,
            Charge::Refused {
                spent: 0.0,
                frees_in: None
            }
        );
    }

    #[test]
    fn a_refunded_call_gives_its_room_back() {
        let l = Ledger::default();
        let w = crate::manifest::TenantWindow {
            max_cost: 0.5,
            window: Duration::from_secs(60),
            window_text: "1m".into(),
        };
        let Charge::Granted(id) = l.charge("t", &w, 0.5) else {
            panic!("fits")
        };
        assert!(matches!(l.charge("t", &w, 0.5), Charge::Refused { .. }));
        l.refund("t", &id);
        assert!(matches!(l.charge("t", &w, 0.5), Charge::Granted(_)));
        // Another tenant has its own window.
        assert!(matches!(l.charge("u", &w, 0.5), Charge::Granted(_)));
    }
}
