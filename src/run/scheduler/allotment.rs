//! The run's limits — the call cap and the budget — are allotted in call order, as if the
//! calls ran one after another: a later call never takes room an earlier call may still
//! need. Calls wait on their edges at different times, so a later independent call often
//! reaches its reservation first; it goes ahead when the room fits it *and* every earlier
//! call still undecided, is refused when even the room left now cannot fit it, and else
//! waits (held) until the earlier calls are decided. Calls at the gate hold a reservation
//! they may give back (a call deferred or refused there was never made), so a refusal waits
//! for their verdicts too.
//!
//! The undecided calls before a position are counted with two Fenwick trees (how many, and
//! their costs), kept only when the run has a limit: O(log n) a call.

use serde_json::{Map, Value};

use super::predispatch::Refusal;
use super::state::Coordinator;
use crate::events::ErrorKind;
use crate::plan::Plan;
use crate::run::call::never_dispatched;

/// Calls not yet decided (neither holding a reservation nor settled), by position.
pub(super) struct Allotment {
    open: Vec<bool>,
    count: Vec<i64>,
    cost: Vec<f64>,
}

impl Allotment {
    /// Only for a run with a call cap or a budget.
    pub(super) fn for_plan(plan: &Plan) -> Option<Allotment> {
        let s = &plan.settings;
        if s.max_calls.is_none() && s.max_cost.is_none() {
            return None;
        }
        let n = plan.calls.len();
        let mut a = Allotment {
            open: vec![true; n],
            count: vec![0; n + 1],
            cost: vec![0.0; n + 1],
        };
        for (p, c) in plan.calls.iter().enumerate() {
            a.add(p, 1, c.cost);
        }
        Some(a)
    }

    fn add(&mut self, p: usize, n: i64, cost: f64) {
        let mut i = p + 1;
        while i < self.count.len() {
            self.count[i] += n;
            self.cost[i] += cost;
            i += i & i.wrapping_neg();
        }
    }

    /// Call `p` is decided (it holds its reservation, or it settled).
    pub(super) fn close(&mut self, p: usize, cost: f64) {
        if std::mem::take(&mut self.open[p]) {
            self.add(p, -1, -cost);
        }
    }

    /// How many undecided calls stand before `p`, and what they may cost.
    fn before(&self, p: usize) -> (u64, f64) {
        let (mut n, mut cost, mut i) = (0i64, 0.0, p);
        while i > 0 {
            n += self.count[i];
            cost += self.cost[i];
            i &= i - 1;
        }
        (u64::try_from(n).unwrap_or(0), cost.max(0.0))
    }
}

/// Whether a call's share of the limits can be taken now.
enum Room {
    Fits,
    /// Only if earlier undecided calls leave it.
    Wait,
    Never(Refusal),
}

impl Coordinator {
    /// Past pre-dispatch's checks: take the call's share of the limits and send it on, wait
    /// for the earlier calls or the gate (see the module's doc), or refuse it.
    pub(super) fn reserve_then_go(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        match self.room(p, (0, 0.0)) {
            Room::Fits => {
                self.reserve(p);
                self.gate_or_spawn(p, resolved);
            }
            Room::Wait => self.hold(p, resolved),
            // Calls at the gate may give back enough for it.
            Room::Never(_) if !matches!(self.room(p, self.gate_room), Room::Never(_)) => {
                self.hold(p, resolved)
            }
            Room::Never((kind, why)) => {
                let r = never_dispatched(&self.plan, p, kind, &why);
                self.finish(p, r);
            }
        }
    }

    /// Hold a call for room. A call that leads its key in the read cache lets it go, so an
    /// earlier identical read it waits for is not left waiting on it; it looks again when it
    /// tries again (and may then find that read's entry).
    fn hold(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        self.leads.remove(&p);
        self.held.insert(p, resolved);
    }

    /// A call goes to the gate (`entering`) or comes back from it: what it holds of the limits
    /// is, meanwhile, room the gate may give back.
    pub(super) fn at_gate(&mut self, p: usize, entering: bool) {
        let calls = u64::from(self.call_reserved.get(p).copied().unwrap_or(false));
        let cost = if self.reserved.get(p).copied().unwrap_or(false) {
            self.plan.calls[p].cost
        } else {
            0.0
        };
        if entering {
            self.gate_room = (self.gate_room.0 + calls, self.gate_room.1 + cost);
        } else {
            self.gate_room = (self.gate_room.0 - calls, (self.gate_room.1 - cost).max(0.0));
        }
    }

    /// The calls held for room try again, in call order (something settled since): the read
    /// cache first, then the limits. Once one must still wait for earlier calls, every later
    /// one must too (the room it waits for is theirs as well): they stay as they are.
    pub(super) fn retry_held(&mut self) {
        self.held_dirty = false;
        let mut held = std::mem::take(&mut self.held);
        while let Some((p, resolved)) = held.pop_first() {
            if self.ending.is_none() && matches!(self.room(p, (0, 0.0)), Room::Wait) {
                held.insert(p, resolved);
                self.held.append(&mut held);
                return;
            }
            if self.ending.is_some() {
                let why = "the run ended while it waited for the budget";
                let r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, why);
                self.finish(p, r);
                continue;
            }
            let Some(t) = self.plan.calls[p].tool else {
                continue;
            };
            let plan = self.plan.clone();
            let args = resolved.as_ref().unwrap_or(&plan.calls[p].args.value);
            match self.consult_cache(p, t, args) {
                Some(super::Ready::Cached(r)) => self.finish(p, *r),
                Some(_) => {
                    self.cache_args.insert(p, resolved);
                }
                None => self.reserve_then_go(p, resolved),
            }
        }
    }

    /// The call cap first, then the budget (a call whose cost does not fit is refused, and
    /// later, cheaper calls may still fit) — counting `credit` (calls, cost) as given back.
    fn room(&self, p: usize, credit: (u64, f64)) -> Room {
        let (before, before_cost) = self.allot.as_ref().map_or((0, 0.0), |a| a.before(p));
        let s = &self.plan.settings;
        let made = self.calls_made.saturating_sub(credit.0);
        let spent = self.spent - credit.1;
        if let Some(max) = s.max_calls.map(u64::from) {
            if made >= max {
                let why = format!("call limit reached (max_calls = {max})");
                return Room::Never((ErrorKind::CallLimit, why));
            }
            if made + before >= max {
                return Room::Wait;
            }
        }
        let cost = self.plan.calls[p].cost;
        let Some(max) = s.max_cost.filter(|_| cost > 0.0) else {
            return Room::Fits;
        };
        if spent + cost > max + 1e-9 {
            let why = format!(
                "budget exhausted ({} of {max} spent; this call costs {cost})",
                crate::events::trim_float(spent),
            );
            return Room::Never((ErrorKind::BudgetExhausted, why));
        }
        if spent + before_cost + cost > max + 1e-9 {
            return Room::Wait;
        }
        Room::Fits
    }

    /// Take the call's share: one call of `max_calls`, its cost of `max_cost`.
    fn reserve(&mut self, p: usize) {
        let cost = self.plan.calls[p].cost;
        if self.plan.settings.max_calls.is_some() {
            self.calls_made += 1;
            self.call_reserved[p] = true;
        }
        if self.plan.settings.max_cost.is_some() && cost > 0.0 {
            self.spent += cost;
            self.reserved[p] = true;
        }
        if let Some(a) = &mut self.allot {
            a.close(p, cost);
        }
    }

    /// A call counted against `max_calls` that never went out gives its place back.
    pub(super) fn give_back_call(&mut self, p: usize) {
        if self.call_reserved.get(p).copied().unwrap_or(false) {
            self.call_reserved[p] = false;
            self.calls_made -= 1;
        }
    }
}
