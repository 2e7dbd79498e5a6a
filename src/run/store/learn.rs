//! Lanes that learn (`concurrency = "auto"`): the law that moves a lane's limit by what its
//! backend answers ([`Law`]), and a lane's learner in one process ([`Learner`]).
//!
//! The law (`choices.md` says why this one): answers are gathered in windows, each at least
//! two unloaded round trips long. From a window's mean latency `rtt` and the lowest latency
//! seen (`base`: the backend unloaded), the calls queued at the backend are estimated as
//! `limit × (1 − base / rtt)`, as TCP Vegas does. Few queued (under α = 3·log₁₀ limit, within
//! [1, limit / 4]):
//! grow — doubling until the first sign of queueing or overload (a slow start), then by
//! √limit. Many queued (over 2α): shrink to what the backend serves plus α
//! (`limit × base / rtt + α`, at most halving). An overload — a 429, a 502/503/504, a
//! `Retry-After`, a refused connection, a timeout — halves it at once (the answers to
//! calls sent within a round trip after any cut are not counted: they met the queue the old
//! limit built, not the new one). A window whose
//! calls never held the whole limit (half of it in the slow start) does not grow it: the lane is
//! not what holds calls back.
//! At the floor and still queueing, the base drifts up a tenth of the way a window: the
//! backend may have got slower for everyone.
//!
//! In one process ([`MemoryLanes`](super::MemoryLanes)) the learner judges its own windows; on
//! a shared store each process gathers its answers and hands them to the store every
//! [`EXCHANGE`], which judges the windows of all of them as one and answers the limit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::OrderedSemaphore;
use crate::manifest::AutoLimit;

/// The shortest window judged.
const MIN_WINDOW: Duration = Duration::from_millis(50);
/// How often a process on a shared store hands its answers over and learns the limit.
pub(crate) const EXCHANGE: Duration = Duration::from_millis(100);
/// A shared window older than this many spans is begun afresh (the lane lay idle).
pub(crate) const STALE_SPANS: f64 = 10.0;
/// The most moves a lane remembers (for the history and the report).
const MOVES_KEPT: usize = 240;

/// What one attempt said of its backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// It answered (well, or with an error of its own) after this long.
    Answered(Duration),
    /// It pushed back: a 429, a 5xx gateway error, `Retry-After`, a refusal, a timeout.
    Overloaded,
}

/// One window's answers (of one process, or merged from all of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Window {
    pub answered: u64,
    pub sum_ms: f64,
    /// The quickest answer (0: none).
    pub min_ms: f64,
    pub overloads: u64,
    /// The most permits held while it was gathered.
    pub peak: u64,
}

impl Window {
    pub(crate) fn add(&mut self, sample: Sample, held: u64) {
        self.peak = self.peak.max(held);
        match sample {
            Sample::Answered(d) => {
                let ms = d.as_secs_f64() * 1000.0;
                self.answered += 1;
                self.sum_ms += ms;
                self.min_ms = if self.min_ms > 0.0 {
                    self.min_ms.min(ms)
                } else {
                    ms.max(f64::MIN_POSITIVE)
                };
            }
            Sample::Overloaded => self.overloads += 1,
        }
    }

    pub(crate) fn merge(&mut self, o: &Window) {
        self.answered += o.answered;
        self.sum_ms += o.sum_ms;
        self.overloads += o.overloads;
        self.peak = self.peak.max(o.peak);
        if o.min_ms > 0.0 && (self.min_ms <= 0.0 || o.min_ms < self.min_ms) {
            self.min_ms = o.min_ms;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.answered == 0 && self.overloads == 0
    }
}

/// Why a learned limit moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Calls were answered at the unloaded latency with the limit in use.
    Grew,
    /// The latency rose well above the unloaded one: calls queue at the backend.
    Queueing,
    /// The backend pushed back (429, 503, `Retry-After`, a refusal, a timeout).
    Overloaded,
    /// Learned elsewhere: by another process or replica sharing the lane, or an earlier run.
    Adopted,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Grew => "grew",
            Why::Queueing => "queueing",
            Why::Overloaded => "overloaded",
            Why::Adopted => "adopted",
        }
    }
}

/// A move of a learned limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub from: u32,
    pub to: u32,
    pub why: Why,
}

/// The law's state: the limit (fractional, rounded when used), the unloaded latency, and
/// whether it is still in its slow start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Law {
    pub limit: f64,
    pub base_ms: f64,
    pub slow_start: bool,
}

impl Law {
    pub(crate) fn new(b: AutoLimit) -> Law {
        Law {
            limit: f64::from(b.start),
            base_ms: 0.0,
            slow_start: true,
        }
    }

    /// The limit in force.
    pub(crate) fn limit(&self) -> u32 {
        self.limit.round().max(1.0) as u32
    }

    /// Whether `w`, gathered over `elapsed`, is enough to judge: an overload at once (every
    /// call sent meanwhile would meet it too), else a whole round — as many answers as the
    /// limit — and long enough (see [`span`](Self::span)).
    pub(crate) fn ready(&self, w: &Window, elapsed: Duration) -> bool {
        w.overloads > 0 || (self.a_round(w) && elapsed >= self.span(w))
    }

    /// Whether `w` holds a round of answers: as many as the limit (the first answers after a
    /// cut come from a backend whose queue drained meanwhile; judged on them alone, the lane
    /// would grow straight back).
    pub(crate) fn a_round(&self, w: &Window) -> bool {
        w.answered >= u64::from(self.limit())
    }

    /// How long a window like `w` must be: twice the unloaded latency and twice its own mean
    /// (the slow answers of a round come last; a window closed on the quick ones alone would
    /// see no queue).
    pub(crate) fn span(&self, w: &Window) -> Duration {
        let mean = if w.answered > 0 {
            w.sum_ms / w.answered as f64
        } else {
            0.0
        };
        let ms = self.base_ms.max(w.min_ms).max(mean) * 2.0;
        Duration::from_secs_f64(ms / 1000.0).max(MIN_WINDOW)
    }

    /// Whether the lane held calls back in window `w` (only then is growing it any use): in
    /// the slow start, calls held half the limit; after it, all of it (RFC 7661's "limited
    /// by the window" — a lane that is not what holds calls back, grown on, bursts far past
    /// the backend when the real bottleneck clears).
    fn held_back(&self, w: &Window) -> bool {
        let peak = w.peak as f64;
        if self.slow_start {
            peak * 2.0 >= self.limit
        } else {
            peak >= f64::from(self.limit())
        }
    }

    /// Judge window `w`: the move it makes, if any.
    pub(crate) fn step(&mut self, w: &Window, b: AutoLimit) -> Option<Move> {
        let from = self.limit();
        let l = self.limit;
        let (lo, hi) = (f64::from(b.min), f64::from(b.max));
        if w.min_ms > 0.0 && (self.base_ms <= 0.0 || w.min_ms < self.base_ms) {
            self.base_ms = w.min_ms;
        }
        let (next, why) = if w.overloads > 0 {
            self.slow_start = false;
            (l * 0.5, Why::Overloaded)
        } else if w.answered == 0 {
            return None;
        } else {
            let rtt = w.sum_ms / w.answered as f64;
            let served = (self.base_ms / rtt).min(1.0);
            let queued = l * (1.0 - served);
            let alpha = (3.0 * l.log10()).min(l / 4.0).max(1.0);
            if queued > 2.0 * alpha {
                self.slow_start = false;
                // Half way to what it serves plus α: the queue drains over a window or two,
                // and a window judged while it drains must not cut the limit twice.
                ((l + l * served + alpha) / 2.0, Why::Queueing)
            } else if queued >= alpha {
                self.slow_start = false;
                return None;
            } else if !self.held_back(w) {
                return None;
            } else if self.slow_start && queued < alpha / 4.0 {
                (l * 2.0, Why::Grew)
            } else {
                self.slow_start = false;
                (l + l.sqrt(), Why::Grew)
            }
        };
        self.limit = next.clamp(lo, hi);
        if self.limit <= lo && why == Why::Queueing && w.min_ms > self.base_ms {
            // At the floor and still queueing: the backend may have got slower for everyone.
            // The unloaded latency drifts a tenth of the way up a window (a queue draining
            // after an overload must not become the new unloaded latency at once).
            self.base_ms += (w.min_ms - self.base_ms) * 0.1;
        }
        let to = self.limit();
        (to != from).then_some(Move { from, to, why })
    }
}

/// Where a learned lane's windows are judged for every process sharing it (a shared store).
pub(crate) trait Judge: Send + Sync + 'static {
    /// Hand `mine` (this process's answers since the last exchange, and the limit it had in
    /// force) to the lane's shared window, judged when it is due: the limit in force, and the
    /// move this exchange made.
    fn exchange(
        &self,
        mine: (Window, u32),
        bounds: AutoLimit,
    ) -> super::BoxFuture<'static, Result<(u32, Option<Move>), super::LaneError>>;
}

/// The state a shared store keeps for a learned lane: the law, the window gathering since
/// `since_ms` (its clock's milliseconds), and how long that window must be.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Shared {
    pub law: Law,
    pub window: Window,
    pub since_ms: f64,
    pub span_ms: f64,
    /// When answers were last handed over (a window nobody feeds goes stale).
    #[serde(default)]
    pub fed_ms: f64,
}

impl Shared {
    pub(crate) fn new(b: AutoLimit, now_ms: f64) -> Shared {
        Shared {
            law: Law::new(b),
            window: Window::default(),
            since_ms: now_ms,
            span_ms: MIN_WINDOW.as_secs_f64() * 1000.0,
            fed_ms: now_ms,
        }
    }

    /// Merge `mine` at `now_ms`; judge the window when it is due: the move it made. A window
    /// nobody fed for ten spans (the lane lay idle) begins afresh: its age says nothing of the
    /// answers coming in now.
    pub(crate) fn exchange(&mut self, mine: &Window, now_ms: f64, b: AutoLimit) -> Option<Move> {
        if now_ms - self.fed_ms.max(self.since_ms) > STALE_SPANS * self.span_ms.max(1.0) {
            self.window = Window::default();
            self.since_ms = now_ms;
        }
        if !mine.is_empty() {
            self.fed_ms = now_ms;
        }
        self.window.merge(mine);
        let span = shared_span(&self.law, &self.window);
        let long = now_ms - self.since_ms >= self.span_ms.max(span);
        if self.window.overloads == 0 && !(self.law.a_round(&self.window) && long) {
            return None;
        }
        let w = std::mem::take(&mut self.window);
        self.since_ms = now_ms;
        self.judge(&w, b)
    }

    /// Judge window `w` (closed already): the move, and the next window's length.
    pub(crate) fn judge(&mut self, w: &Window, b: AutoLimit) -> Option<Move> {
        let moved = self.law.step(w, b);
        self.span_ms = shared_span(&self.law, w);
        moved
    }
}

/// How long a shared window must be, in ms: the law's span, and two exchanges more — every
/// process hears of a move at its next exchange, and only its calls sent after that speak for
/// the new limit.
pub(crate) fn shared_span(law: &Law, w: &Window) -> f64 {
    (law.span(w) + 2 * EXCHANGE).as_secs_f64() * 1000.0
}

/// Exchange `learner`'s answers with `judge` every [`EXCHANGE`] while the lane is in use, for
/// as long as the learner lives (once per learner, however many stores share it) — from now
/// on when a runtime runs here, else from its first answer.
pub(crate) fn keep_exchanging(learner: &Arc<Learner>, judge: Arc<dyn Judge>) {
    let _ = learner.judge.set(judge);
    learner.start();
}

/// A learned lane in this process: the limit in force (the lane's semaphore sized to it), and
/// the answers gathered since the last judgement (or the last exchange with a shared store).
pub(crate) struct Learner {
    pub bounds: AutoLimit,
    /// Whether a shared store judges the windows (this process only gathers).
    shared: bool,
    /// Whether a task exchanges its answers with the shared store already.
    exchanging: std::sync::atomic::AtomicBool,
    /// Where its windows are judged (a shared store).
    judge: std::sync::OnceLock<Arc<dyn Judge>>,
    /// Itself, for the task that exchanges while it lives.
    me: std::sync::Weak<Learner>,
    limit: AtomicU32,
    sem: Arc<OrderedSemaphore>,
    state: Mutex<Learning>,
}

struct Learning {
    law: Law,
    window: Window,
    since: Instant,
    /// When the limit last moved here: an answer to a call sent before says nothing of it
    /// (after a cut, a round trip later: until then calls meet the old limit's queue).
    moved_at: Instant,
    /// The recent answers' latency (a moving mean): how long a cut's queue takes to drain.
    recent: Duration,
    /// A move not yet told (to the call whose answer came next).
    untold: Option<Move>,
    /// Every move here, with when (ms since the learner began), the newest last.
    moves: VecDeque<(u64, Move)>,
    began: Instant,
}

impl Learner {
    /// A learner for a lane of `bounds` whose permits are `sem` (sized to the start).
    pub(crate) fn new(bounds: AutoLimit, sem: Arc<OrderedSemaphore>, shared: bool) -> Arc<Learner> {
        let now = Instant::now();
        Arc::new_cyclic(|me| Learner {
            judge: std::sync::OnceLock::new(),
            me: me.clone(),
            bounds,
            shared,
            exchanging: std::sync::atomic::AtomicBool::new(false),
            limit: AtomicU32::new(bounds.start),
            sem,
            state: Mutex::new(Learning {
                law: Law::new(bounds),
                window: Window::default(),
                since: now,
                moved_at: now,
                recent: Duration::ZERO,
                untold: None,
                moves: VecDeque::new(),
                began: now,
            }),
        })
    }

    /// Start exchanging with the judge, once, when there is one and a runtime to run it on.
    fn start(&self) {
        let Some(judge) = self.judge.get().cloned() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.exchanging.swap(true, Ordering::Relaxed) {
            return;
        }
        let weak = self.me.clone();
        rt.spawn(async move {
            let mut tick = tokio::time::interval(EXCHANGE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(l) = weak.upgrade() else { return };
                if l.idle() {
                    continue;
                }
                let mine = (l.take(), l.limit());
                if let Ok((limit, moved)) = judge.exchange(mine, l.bounds).await {
                    l.set(limit, moved.map(|m| m.why));
                }
            }
        });
    }

    fn lock(&self) -> MutexGuard<'_, Learning> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit in force now.
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The answer to an attempt sent at `sent`: gathered (unless it was sent before the limit
    /// last moved), and judged when its window is long enough (in a process of its own). A
    /// move made since the last answer is returned, to be told.
    pub(crate) fn observe(&self, sample: Sample, sent: Instant) -> Option<Move> {
        if self.shared && !self.exchanging.load(Ordering::Relaxed) {
            self.start();
        }
        let held = self.sem.held();
        let mut st = self.lock();
        if let Sample::Answered(d) = sample {
            st.recent = if st.recent.is_zero() {
                d
            } else {
                (st.recent * 7 + d) / 8
            };
        }
        if sent >= st.moved_at {
            st.window.add(sample, held);
        }
        let now = Instant::now();
        if !self.shared && st.law.ready(&st.window, now - st.since) {
            let w = std::mem::take(&mut st.window);
            st.since = now;
            let moved = st.law.step(&w, self.bounds);
            if let Some(m) = moved {
                self.apply(&mut st, m);
            }
        }
        st.untold.take()
    }

    /// Whether the lane is not in use here: nothing held, nobody waiting, nothing gathered.
    fn idle(&self) -> bool {
        self.sem.held() == 0 && self.sem.waiting() == 0 && self.lock().window.is_empty()
    }

    /// The answers gathered since the last exchange (a shared store's turn).
    pub(crate) fn take(&self) -> Window {
        std::mem::take(&mut self.lock().window)
    }

    /// The shared store's limit: in force here from now on (`why`: the move it made, when it
    /// was this exchange that judged).
    pub(crate) fn set(&self, limit: u32, why: Option<Why>) {
        let to = limit.clamp(self.bounds.min, self.bounds.max);
        let from = self.limit();
        if to == from {
            return;
        }
        let mut st = self.lock();
        st.law.limit = f64::from(to);
        let why = why.unwrap_or(Why::Adopted);
        self.apply(&mut st, Move { from, to, why });
    }

    fn apply(&self, st: &mut Learning, m: Move) {
        self.limit.store(m.to, Ordering::Relaxed);
        self.sem.resize(u64::from(m.to));
        let now = Instant::now();
        st.moved_at = if m.to < m.from { now + st.recent } else { now };
        st.window = Window::default();
        // The window begins with the calls it counts (closed on the quick answers of calls
        // sent late, it would see no queue).
        st.since = st.moved_at;
        let at = u64::try_from(st.began.elapsed().as_millis()).unwrap_or(u64::MAX);
        if st.moves.len() == MOVES_KEPT {
            st.moves.pop_front();
        }
        st.moves.push_back((at, m));
        st.untold = Some(m);
    }

    /// How the limit went, for the stats.
    pub(crate) fn learned(&self) -> crate::events::Learned {
        let st = self.lock();
        let limits = st.moves.iter().map(|(_, m)| m.to);
        let start = self.bounds.start;
        crate::events::Learned {
            start,
            last: self.limit(),
            lowest: limits.clone().chain([start]).min().unwrap_or(start),
            highest: limits.chain([start]).max().unwrap_or(start),
            moves: (st.moves.iter())
                .map(|(at, m)| (*at, m.to, m.why.as_str().to_string()))
                .collect(),
        }
    }

    /// Which way the limit last moved (for the live display): up, down, or not yet.
    pub(crate) fn last_move(&self) -> Option<Move> {
        self.lock().moves.back().map(|(_, m)| *m)
    }
}

#[cfg(test)]
mod tests;
