//! What one client session has spent, against `[serve.session]`: calls, cost, calls per tool.
//! A call reserves its share before it takes its place (so concurrent calls cannot overspend
//! together) and gives it back if it never reaches its tool (cancelled while queued, refused
//! before dispatch, answered from the cache). A refusal is an answer, never a protocol error.

use std::collections::HashMap;
use std::sync::Mutex;

use super::answer::Refusal;
use crate::events::ErrorKind;
use crate::manifest::SessionLimits;

/// Slack for sums of decimal costs (`0.1 + 0.2`).
const EPSILON: f64 = 1e-9;

/// A session's running totals.
#[derive(Default)]
pub(super) struct Spend {
    totals: Mutex<Totals>,
}

#[derive(Default)]
struct Totals {
    calls: u32,
    cost: f64,
    per_tool: HashMap<String, u32>,
}

/// One call's share, to give back if it never runs.
pub(super) struct Share {
    tool: String,
    cost: f64,
}

impl Spend {
    /// Reserve one call of `tool` costing `cost`; `Err` says which limit refused it.
    pub(super) fn reserve(
        &self,
        limits: &SessionLimits,
        tool: &str,
        cost: f64,
    ) -> Result<Share, Refusal> {
        let mut t = self
            .totals
            .lock()
            .map_err(|_| Refusal::new(ErrorKind::RunEnded, "session state lost"))?;
        if let Some(max) = limits.max_calls {
            if t.calls >= max {
                return Err(Refusal::new(
                    ErrorKind::CallLimit,
                    format!(
                        "this session has made its {max} calls ([serve.session] max_calls); \
                         the call was not made — start a new session"
                    ),
                ));
            }
        }
        if let Some(&max) = limits.per_tool.get(tool) {
            if t.per_tool.get(tool).copied().unwrap_or(0) >= max {
                return Err(Refusal::new(
                    ErrorKind::CallLimit,
                    format!(
                        "this session has made its {max} calls of `{tool}` \
                         ([serve.session.per_tool]); the call was not made"
                    ),
                ));
            }
        }
        if let Some(max) = limits.max_cost {
            if t.cost + cost > max + EPSILON {
                return Err(Refusal::new(
                    ErrorKind::BudgetExhausted,
                    format!(
                        "this session has spent {:.2} of its max_cost {max:.2} and \
                         `{tool}` costs {cost:.2}; the call was not made",
                        t.cost
                    ),
                ));
            }
        }
        t.calls += 1;
        t.cost += cost;
        *t.per_tool.entry(tool.to_string()).or_default() += 1;
        Ok(Share {
            tool: tool.to_string(),
            cost,
        })
    }

    /// Give a share back: its call never reached its tool.
    pub(super) fn give_back(&self, share: Share) {
        if let Ok(mut t) = self.totals.lock() {
            t.calls = t.calls.saturating_sub(1);
            t.cost = (t.cost - share.cost).max(0.0);
            if let Some(n) = t.per_tool.get_mut(&share.tool) {
                *n = n.saturating_sub(1);
            }
        }
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

    #[test]
    fn a_budget_of_one_admits_three_calls_costing_point_three() {
        let (s, l) = (Spend::default(), limits(None, Some(1.0), &[]));
        let got: Vec<_> = (0..10).map(|_| s.reserve(&l, "t", 0.3)).collect();
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

    #[test]
    fn decimal_costs_add_up_to_the_budget_exactly() {
        let (s, l) = (Spend::default(), limits(None, Some(0.3), &[]));
        assert!(s.reserve(&l, "t", 0.1).is_ok());
        assert!(s.reserve(&l, "t", 0.2).is_ok());
        assert!(s.reserve(&l, "t", 0.0).is_ok());
        assert!(s.reserve(&l, "t", 0.01).is_err());
    }

    #[test]
    fn call_limits_per_session_and_per_tool_and_a_share_given_back() {
        let (s, l) = (Spend::default(), limits(Some(3), None, &[("rm", 1)]));
        let first = s.reserve(&l, "rm", 0.0).expect("first rm");
        let e = s.reserve(&l, "rm", 0.0).err().expect("second rm refused");
        assert!(
            matches!(&e, Refusal::Failed(ErrorKind::CallLimit, why) if why.contains("`rm`")),
            "{e:?}"
        );
        s.give_back(first);
        assert!(s.reserve(&l, "rm", 0.0).is_ok(), "given back: rm may run");
        assert!(s.reserve(&l, "ls", 0.0).is_ok());
        assert!(s.reserve(&l, "ls", 0.0).is_ok());
        let e = s
            .reserve(&l, "ls", 0.0)
            .err()
            .expect("a fourth call refused")
            .text();
        assert!(e.contains("its 3 calls"), "{e}");
    }

    #[test]
    fn no_limits_admit_everything() {
        let s = Spend::default();
        for _ in 0..1000 {
            assert!(s.reserve(&SessionLimits::default(), "t", 5.0).is_ok());
        }
    }
}
