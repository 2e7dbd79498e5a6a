//! What one client session has spent, against `[serve.session]`: calls, cost, calls per tool.
//! A call reserves its share before it takes its place (so concurrent calls cannot overspend
//! together) and gives it back if it never reaches its tool (cancelled while queued, refused
//! before dispatch, answered from the cache). A refusal is an answer, never a protocol error.
//! An HTTP session on a shared lane store spends in the store (its counters beside the
//! session's record, added all or none), so every replica serving it holds it to one budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::answer::Refusal;
use crate::events::ErrorKind;
use crate::manifest::SessionLimits;
use crate::store::records::{Add, Records};

/// Slack for sums of decimal costs (`0.1 + 0.2`).
const EPSILON: f64 = 1e-9;

/// A session's running totals.
#[derive(Default)]
pub(super) struct Spend {
    totals: Arc<Mutex<Totals>>,
    /// The shared store's counters of the session (its id, how long they are kept).
    shared: OnceLock<(Arc<dyn Records>, String, Duration)>,
}

#[derive(Default, Clone)]
struct Totals {
    calls: u32,
    cost: f64,
    per_tool: HashMap<String, u32>,
}

/// What a session has spent, as its session table keeps it: a session let go after
/// `session_idle` and opened again goes on from it (a pause is no new budget).
#[derive(Clone)]
pub(super) struct Spent(Arc<Mutex<Totals>>);

/// One call's share, to give back if it never runs.
pub(super) struct Share {
    tool: String,
    cost: f64,
}

impl Spend {
    /// What it has spent so far (shared with it: later calls count too).
    pub(super) fn spent(&self) -> Spent {
        Spent(self.totals.clone())
    }

    /// Go on from what an earlier opening of the same session spent.
    pub(super) fn go_on_from(&self, earlier: &Spent) {
        let before = earlier.0.lock().map(|t| t.clone()).unwrap_or_default();
        if let Ok(mut t) = self.totals.lock() {
            t.calls += before.calls;
            t.cost += before.cost;
            for (tool, n) in before.per_tool {
                *t.per_tool.entry(tool).or_default() += n;
            }
        }
    }

    /// Spend in the shared store from now on, under session `id` (kept `keep`).
    pub(super) fn share(&self, records: Arc<dyn Records>, id: &str, keep: Duration) {
        let _ = self.shared.set((records, id.to_string(), keep));
    }

    /// Reserve one call of `tool` costing `cost`; `Err` says which limit refused it.
    pub(super) async fn reserve(
        &self,
        limits: &SessionLimits,
        tool: &str,
        cost: f64,
    ) -> Result<Share, Refusal> {
        let share = Share {
            tool: tool.to_string(),
            cost,
        };
        let Some((records, id, keep)) = self.shared.get() else {
            return self.reserve_here(limits, share);
        };
        let adds = adds(&share, 1.0, Some(limits));
        match records.clone().tally(id.clone(), adds, *keep).await {
            Ok(Ok(())) => Ok(share),
            Ok(Err((i, now))) => Err(refused(limits, &share, i, now)),
            Err(e) => Err(Refusal::new(ErrorKind::LaneStore, e.to_string())),
        }
    }

    /// [`Spend::reserve`] in this process.
    fn reserve_here(&self, limits: &SessionLimits, share: Share) -> Result<Share, Refusal> {
        let mut t = self
            .totals
            .lock()
            .map_err(|_| Refusal::new(ErrorKind::RunEnded, "session state lost"))?;
        let tool_calls = t.per_tool.get(&share.tool).copied().unwrap_or(0);
        let now = [f64::from(t.calls), f64::from(tool_calls), t.cost];
        let adds = adds(&share, 1.0, Some(limits));
        if let Some(i) = (0..3).find(|&i| {
            adds[i]
                .most
                .is_some_and(|m| now[i] + adds[i].by > m + EPSILON)
        }) {
            return Err(refused(limits, &share, i, now[i]));
        }
        t.calls += 1;
        t.cost += share.cost;
        *t.per_tool.entry(share.tool.clone()).or_default() += 1;
        Ok(share)
    }

    /// Give a share back: its call never reached its tool.
    pub(super) async fn give_back(&self, share: Share) {
        if let Some((records, id, keep)) = self.shared.get() {
            let adds = adds(&share, -1.0, None);
            let _ = records.clone().tally(id.clone(), adds, *keep).await;
            return;
        }
        if let Ok(mut t) = self.totals.lock() {
            t.calls = t.calls.saturating_sub(1);
            t.cost = (t.cost - share.cost).max(0.0);
            if let Some(n) = t.per_tool.get_mut(&share.tool) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

/// A share's additions (`sign` 1 to take, -1 to give back): calls, the tool's calls, cost —
/// each bounded by its limit, when `limits` are given and set one.
fn adds(share: &Share, sign: f64, limits: Option<&SessionLimits>) -> Vec<Add> {
    let calls = limits.and_then(|l| l.max_calls).map(f64::from);
    let tool = limits.and_then(|l| l.per_tool.get(&share.tool).copied());
    vec![
        Add {
            counter: "calls".into(),
            by: sign,
            most: calls,
        },
        Add {
            counter: format!("tool:{}", share.tool),
            by: sign,
            most: tool.map(f64::from),
        },
        Add {
            counter: "cost".into(),
            by: sign * share.cost,
            most: limits.and_then(|l| l.max_cost),
        },
    ]
}

/// The refusal of `share` by the `i`-th of its [`adds`], that counter being `now`.
fn refused(limits: &SessionLimits, share: &Share, i: usize, now: f64) -> Refusal {
    let tool = &share.tool;
    match i {
        0 => Refusal::new(
            ErrorKind::CallLimit,
            format!(
                "this session has made its {} calls ([serve.session] max_calls); \
                 the call was not made — start a new session",
                limits.max_calls.unwrap_or_default()
            ),
        ),
        1 => Refusal::new(
            ErrorKind::CallLimit,
            format!(
                "this session has made its {} calls of `{tool}` \
                 ([serve.session.per_tool]); the call was not made",
                limits.per_tool.get(tool).copied().unwrap_or_default()
            ),
        ),
        _ => Refusal::new(
            ErrorKind::BudgetExhausted,
            format!(
                "this session has spent {now:.2} of its max_cost {:.2} and \
                 `{tool}` costs {:.2}; the call was not made",
                limits.max_cost.unwrap_or_default(),
                share.cost
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(
        max_calls: Option<u32>,
        max_cost: Option<f64>,
        per_tool: &[(&str, u32)],
    ) -> SessionLimits {
        SessionLimits {
            max_calls,
            max_cost,
            per_tool: per_tool.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[tokio::test]
    async fn a_budget_of_one_admits_three_calls_costing_point_three() {
        let (s, l) = (Spend::default(), limits(None, Some(1.0), &[]));
        let mut got = Vec::new();
        for _ in 0..10 {
            got.push(s.reserve(&l, "t", 0.3).await);
        }
        assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 3);
        let refused = got
            .iter()
            .find_map(|r| r.as_ref().err())
            .expect("a refusal");
        assert!(
            matches!(refused, Refusal::Failed(ErrorKind::BudgetExhausted, why) if why.contains("0.90 of its max_cost 1.00")),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn decimal_costs_add_up_to_the_budget_exactly() {
        let (s, l) = (Spend::default(), limits(None, Some(0.3), &[]));
        assert!(s.reserve(&l, "t", 0.1).await.is_ok());
        assert!(s.reserve(&l, "t", 0.2).await.is_ok());
        assert!(s.reserve(&l, "t", 0.0).await.is_ok());
        assert!(s.reserve(&l, "t", 0.01).await.is_err());
    }

    #[tokio::test]
    async fn call_limits_per_session_and_per_tool_and_a_share_given_back() {
        let (s, l) = (Spend::default(), limits(Some(3), None, &[("rm", 1)]));
        let first = s.reserve(&l, "rm", 0.0).await.expect("first rm");
        let e = s
            .reserve(&l, "rm", 0.0)
            .await
            .err()
            .expect("second rm refused");
        assert!(
            matches!(&e, Refusal::Failed(ErrorKind::CallLimit, why) if why.contains("`rm`")),
            "{e:?}"
        );
        s.give_back(first).await;
        assert!(
            s.reserve(&l, "rm", 0.0).await.is_ok(),
            "given back: rm may run"
        );
        assert!(s.reserve(&l, "ls", 0.0).await.is_ok());
        assert!(s.reserve(&l, "ls", 0.0).await.is_ok());
        let e = s
            .reserve(&l, "ls", 0.0)
            .await
            .err()
            .expect("a fourth call refused")
            .text();
        assert!(e.contains("its 3 calls"), "{e}");
    }

    #[tokio::test]
    async fn no_limits_admit_everything() {
        let s = Spend::default();
        for _ in 0..1000 {
            assert!(s.reserve(&SessionLimits::default(), "t", 5.0).await.is_ok());
        }
    }
}
