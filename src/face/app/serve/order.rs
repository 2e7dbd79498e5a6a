//! The gateway's order across sessions: what a batch's plan orders with edges, the gateway
//! orders by arrival. Each call, as it arrives, takes a place in the queue of every key it
//! claims — its backends (read/write hazards), its session's write chain, and the gateway as
//! a whole (a `parallel_safe = false` tool runs alone) — all at once, under one lock, so
//! arrival order is one order for every key and no two calls can wait for each other. A call
//! may go when, on every key, nothing before it conflicts: a read waits for earlier writes,
//! a write for everything earlier, a concurrent write for earlier reads and plain writes.
//! Its [`Ticket`] leaves every queue when dropped (the call finished, or was cancelled while
//! it waited), and wakes whoever was behind it.
//!
//! Arrival is the order on the wire: a session's requests are numbered as they are read
//! ([`Turnstile`]), and a call takes its places only once every earlier request of its session
//! has taken its own or is gone — however the tasks that serve them are scheduled.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

pub(super) use crate::plan::Claim;

/// One key's queue: the calls holding each kind of claim on it, by arrival number, each with
/// how to wake it. Kept by kind, a call finds what it waits behind, and a leaving call whom
/// to wake, among the claims that conflict only: ten thousand reads parked on the gateway's
/// key cost a read nothing.
#[derive(Default)]
struct Queue {
    by_claim: [std::collections::BTreeMap<u64, Slot>; 3],
}

/// One call's place on a key.
#[derive(Clone)]
struct Slot {
    wake: Arc<Notify>,
    /// The session whose call it is.
    session: u64,
    /// A place held for its own session only (a call waiting for approval).
    own: bool,
}

const KINDS: [Claim; 3] = [Claim::Read, Claim::Write, Claim::ConcurrentWrite];

fn kind(c: Claim) -> usize {
    match c {
        Claim::Read => 0,
        Claim::Write => 1,
        Claim::ConcurrentWrite => 2,
    }
}

/// Whose places a call waits behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Everyone's (a call that needs no approval).
    All,
    /// Its own session's only: a call waiting for approval holds its session's order and
    /// nobody else's ([`Order::park`]).
    Own,
    /// Everyone's but its own session's: an approved call taking its place across sessions
    /// (its session's later calls wait behind the place it held while parked).
    Others,
}

/// Who a ticket is.
#[derive(Debug, Clone, Copy)]
struct Who {
    session: u64,
    scope: Scope,
}

impl Queue {
    /// How many calls before `seq` hold a claim that `claim` of `who` waits for.
    fn ahead(&self, seq: u64, claim: Claim, who: Who) -> usize {
        let counts = |s: &Slot| {
            let mine = s.session == who.session;
            (mine || !s.own)
                && match who.scope {
                    Scope::All => true,
                    Scope::Own => mine,
                    Scope::Others => !mine,
                }
        };
        KINDS
            .iter()
            .filter(|k| claim.waits_for(**k))
            .map(|k| {
                let earlier = self.by_claim[kind(*k)].range(..seq);
                earlier.filter(|e| counts(e.1)).count()
            })
            .sum()
    }

    fn is_empty(&self) -> bool {
        self.by_claim.iter().all(|m| m.is_empty())
    }
}

/// Every key's queue, in arrival order.
#[derive(Default)]
pub(super) struct Order {
    queues: Mutex<HashMap<String, Queue>>,
}

/// What a waiting call waits behind: the first key that holds it back, and how many
/// earlier calls are queued there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Behind {
    pub key: String,
    pub ahead: usize,
}

/// A call's place in the queues of its keys.
pub(super) struct Ticket {
    order: Arc<Order>,
    seq: u64,
    keys: Vec<(String, Claim)>,
    wake: Arc<Notify>,
    who: Who,
}

impl Order {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Queue>> {
        // Every update is one step: a panic elsewhere leaves the queues consistent.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take call `seq`'s place (arrival order: `seq` only grows) in the queues of `keys`,
    /// for session `session`.
    pub(super) fn enter(
        self: &Arc<Self>,
        seq: u64,
        keys: Vec<(String, Claim)>,
        session: u64,
    ) -> Ticket {
        self.place(seq, keys, (session, Scope::All))
    }

    /// A call that waits for approval: its places hold its own session's later calls, and
    /// nobody else's. Once approved it takes its place for everyone with [`Order::approved`].
    pub(super) fn park(
        self: &Arc<Self>,
        seq: u64,
        keys: Vec<(String, Claim)>,
        session: u64,
    ) -> Ticket {
        self.place(seq, keys, (session, Scope::Own))
    }

    /// The approved call `parked` takes its place in every key's queue as a call arriving
    /// now (`seq`, later than any before it), waiting behind everyone but its own session
    /// (whose later calls wait behind `parked`, which it keeps until it is done).
    pub(super) fn approved(self: &Arc<Self>, seq: u64, parked: &Ticket) -> Ticket {
        let session = parked.who.session;
        self.place(seq, parked.keys.clone(), (session, Scope::Others))
    }

    fn place(
        self: &Arc<Self>,
        seq: u64,
        keys: Vec<(String, Claim)>,
        (session, scope): (u64, Scope),
    ) -> Ticket {
        let wake = Arc::new(Notify::new());
        let slot = Slot {
            wake: wake.clone(),
            session,
            own: scope == Scope::Own,
        };
        let mut q = self.lock();
        for (k, claim) in &keys {
            let queue = q.entry(k.clone()).or_default();
            queue.by_claim[kind(*claim)].insert(seq, slot.clone());
        }
        drop(q);
        Ticket {
            order: self.clone(),
            seq,
            keys,
            wake,
            who: Who { session, scope },
        }
    }
}

impl Ticket {
    /// `None` when the call may go now; else what it waits behind.
    pub(super) fn behind(&self) -> Option<Behind> {
        let q = self.order.lock();
        for (k, claim) in &self.keys {
            let Some(queue) = q.get(k) else { continue };
            let ahead = queue.ahead(self.seq, *claim, self.who);
            if ahead > 0 {
                return Some(Behind {
                    key: k.clone(),
                    ahead,
                });
            }
        }
        None
    }

    /// [`Ticket::wait`], unless `cancel` comes first (`false`).
    pub(super) async fn wait_unless(
        &self,
        cancel: &tokio_util::sync::CancellationToken,
        waiting: impl FnMut(&Behind),
    ) -> bool {
        tokio::select! {
            () = self.wait(waiting) => true,
            () = cancel.cancelled() => false,
        }
    }

    /// Wait until nothing before the call conflicts with it. `waiting` is told what it
    /// waits behind each time that changes.
    pub(super) async fn wait(&self, mut waiting: impl FnMut(&Behind)) {
        let mut last: Option<Behind> = None;
        loop {
            // Registered before the check: a wake between the two is not lost.
            let woken = self.wake.notified();
            match self.behind() {
                None => return,
                Some(b) => {
                    if last.as_ref() != Some(&b) {
                        waiting(&b);
                        last = Some(b);
                    }
                }
            }
            woken.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = self.order.lock();
        for (k, claim) in &self.keys {
            let Some(queue) = q.get_mut(k) else { continue };
            if queue.by_claim[kind(*claim)].remove(&self.seq).is_some() {
                // Whoever behind it waited for it may go now: each looks for itself.
                for later in KINDS.iter().filter(|l| l.waits_for(*claim)) {
                    for slot in queue.by_claim[kind(*later)].range(self.seq..).map(|e| e.1) {
                        slot.wake.notify_one();
                    }
                }
            }
            if queue.is_empty() {
                q.remove(k);
            }
        }
    }
}

/// A request's place on its session's wire (a request extension: a `tools/call`'s, a
/// `resources/read`'s), stamped by the wire as it is read.
#[derive(Clone)]
pub(super) struct Arrival(pub Arc<Pass>);

/// One session's requests in the order they came off the wire.
#[derive(Default)]
pub(super) struct Turnstile {
    state: Mutex<Turns>,
}

#[derive(Default)]
struct Turns {
    /// Passes handed out.
    issued: u64,
    /// The lowest pass not yet through.
    next: u64,
    /// Passes through ahead of `next`.
    through: BTreeSet<u64>,
    /// Who waits for which pass to be next (each is woken alone: ten thousand calls in flight
    /// on one session cost one wake-up each, not one each per call before them).
    waiting: HashMap<u64, Arc<Notify>>,
}

/// A request's place on the wire: [`Pass::wait`] until every earlier request of its session is
/// through, then [`Pass::through`] (dropping it counts as through).
pub(super) struct Pass {
    turnstile: Arc<Turnstile>,
    n: u64,
    through: AtomicBool,
}

impl Turnstile {
    fn lock(&self) -> MutexGuard<'_, Turns> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next request's pass (called as it is read, in wire order).
    pub(super) fn pass(self: &Arc<Self>) -> Pass {
        let mut t = self.lock();
        let n = t.issued;
        t.issued += 1;
        Pass {
            turnstile: self.clone(),
            n,
            through: AtomicBool::new(false),
        }
    }
}

impl Pass {
    /// Wait until every earlier pass of the session is through.
    pub(super) async fn wait(&self) {
        let wake = {
            let mut t = self.turnstile.lock();
            if t.next >= self.n {
                return;
            }
            t.waiting.entry(self.n).or_default().clone()
        };
        loop {
            // A wake-up given before this wait is kept (`notify_one` stores it).
            wake.notified().await;
            let mut t = self.turnstile.lock();
            if t.next >= self.n {
                t.waiting.remove(&self.n);
                return;
            }
        }
    }

    /// This request has taken its place (or never will): later ones may take theirs.
    pub(super) fn through(&self) {
        if self.through.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut t = self.turnstile.lock();
        t.waiting.remove(&self.n);
        t.through.insert(self.n);
        let before = t.next;
        while t.through.first() == Some(&t.next) {
            t.through.pop_first();
            t.next += 1;
        }
        if t.next != before {
            if let Some(w) = t.waiting.get(&t.next) {
                w.notify_one();
            }
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.through();
    }
}

/// What an order wait is behind, for a person.
pub(super) fn behind_text(b: &Behind) -> String {
    let what = match b.key.split_once(':') {
        Some(("backend", name)) => format!("on backend `{name}`"),
        Some(("session", _)) => "of this session's earlier writes".to_string(),
        _ => "before a tool that runs alone (parallel_safe = false)".to_string(),
    };
    format!("waiting for {} earlier calls {what}", b.ahead)
}

/// A call's pass goes through when it has taken its place, or leaves without one.
pub(super) struct Through(pub(super) Option<Arc<Pass>>);

impl Drop for Through {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            p.through();
        }
    }
}

/// A call's place among each of its lanes' users while it lives.
pub(super) struct Users<'a> {
    users: &'a Mutex<HashMap<String, BTreeSet<u64>>>,
    seq: u64,
    lanes: Vec<String>,
}

impl<'a> Users<'a> {
    pub(super) fn enter(
        users: &'a Mutex<HashMap<String, BTreeSet<u64>>>,
        seq: u64,
        lanes: Vec<String>,
    ) -> Users<'a> {
        if let Ok(mut u) = users.lock() {
            for l in &lanes {
                u.entry(l.clone()).or_default().insert(seq);
            }
        }
        Users { users, seq, lanes }
    }
}

impl Drop for Users<'_> {
    fn drop(&mut self) {
        if let Ok(mut u) = self.users.lock() {
            for l in &self.lanes {
                if let Some(s) = u.get_mut(l) {
                    s.remove(&self.seq);
                    if s.is_empty() {
                        u.remove(l);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn passes_go_through_in_wire_order_and_a_dropped_one_lets_the_next_go() {
        let t = Arc::new(Turnstile::default());
        let (p0, p1, p2) = (t.pass(), t.pass(), t.pass());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // The later passes ask first.
        for (name, p) in [("p2", p2), ("p1", p1)] {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                p.wait().await;
                order.lock().expect("order").push(name);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                p.through();
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(order.lock().expect("order").is_empty(), "both wait for p0");
        drop(p0);
        for task in tasks {
            task.await.expect("a pass goes through");
        }
        assert_eq!(*order.lock().expect("order"), vec!["p1", "p2"]);
    }

    fn keys(list: &[(&str, Claim)]) -> Vec<(String, Claim)> {
        list.iter().map(|(k, c)| (k.to_string(), *c)).collect()
    }

    #[test]
    fn reads_overlap_and_a_write_waits_for_them_and_blocks_later_reads() {
        let o = Arc::new(Order::default());
        let r1 = o.enter(1, keys(&[("b", Claim::Read)]), 0);
        let r2 = o.enter(2, keys(&[("b", Claim::Read)]), 0);
        let w3 = o.enter(3, keys(&[("b", Claim::Write)]), 0);
        let r4 = o.enter(4, keys(&[("b", Claim::Read)]), 0);
        assert_eq!(r1.behind(), None);
        assert_eq!(r2.behind(), None);
        assert_eq!(w3.behind().map(|b| b.ahead), Some(2));
        assert_eq!(r4.behind().map(|b| b.ahead), Some(1));
        drop(r1);
        drop(r2);
        assert_eq!(w3.behind(), None);
        assert!(r4.behind().is_some());
        drop(w3);
        assert_eq!(r4.behind(), None);
    }

    #[test]
    fn concurrent_writes_overlap_each_other_but_not_reads() {
        let o = Arc::new(Order::default());
        let w1 = o.enter(1, keys(&[("b", Claim::ConcurrentWrite)]), 0);
        let w2 = o.enter(2, keys(&[("b", Claim::ConcurrentWrite)]), 0);
        let r3 = o.enter(3, keys(&[("b", Claim::Read)]), 0);
        let w4 = o.enter(4, keys(&[("b", Claim::ConcurrentWrite)]), 0);
        assert_eq!(w1.behind(), None);
        assert_eq!(w2.behind(), None);
        assert_eq!(r3.behind().map(|b| b.ahead), Some(2));
        assert_eq!(w4.behind().map(|b| b.ahead), Some(1));
    }

    #[test]
    fn a_call_waits_on_its_first_blocked_key_and_other_keys_are_free() {
        let o = Arc::new(Order::default());
        let w = o.enter(1, keys(&[("x", Claim::Write)]), 0);
        let on_y = o.enter(2, keys(&[("y", Claim::Write)]), 0);
        let both = o.enter(3, keys(&[("y", Claim::Read), ("x", Claim::Read)]), 0);
        assert_eq!(w.behind(), None);
        assert_eq!(on_y.behind(), None);
        let b = both.behind().map(|b| b.key);
        assert_eq!(b.as_deref(), Some("y"));
        drop(on_y);
        assert_eq!(both.behind().map(|b| b.key).as_deref(), Some("x"));
        drop(w);
        assert_eq!(both.behind(), None);
        drop(both);
        assert!(o.lock().is_empty(), "empty queues are removed");
    }

    #[test]
    fn a_call_parked_for_approval_holds_its_own_session_and_nobody_else() {
        let o = Arc::new(Order::default());
        // Session 1's write waits for approval; session 2 reads and writes the same backend.
        let parked = o.park(1, keys(&[("b", Claim::Write)]), 1);
        let theirs = o.enter(2, keys(&[("b", Claim::Read)]), 2);
        let their_write = o.enter(3, keys(&[("b", Claim::Write)]), 2);
        assert_eq!(parked.behind(), None);
        assert_eq!(theirs.behind(), None);
        assert_eq!(their_write.behind().map(|b| b.ahead), Some(1));
        // Its own session's later read waits behind it (and session 2's write).
        let mine = o.enter(4, keys(&[("b", Claim::Read)]), 1);
        assert_eq!(mine.behind().map(|b| b.ahead), Some(2));
        // Approved, it takes its place now: behind session 2's calls, not its own later one.
        let placed = o.approved(5, &parked);
        assert_eq!(placed.behind().map(|b| b.ahead), Some(2));
        // A later call of session 2 waits behind the approved place, not the parked one.
        let later = o.enter(6, keys(&[("b", Claim::Read)]), 2);
        assert_eq!(later.behind().map(|b| b.ahead), Some(2));
        drop((theirs, their_write));
        assert_eq!(placed.behind(), None);
        assert_eq!(later.behind().map(|b| b.ahead), Some(1));
        assert_eq!(mine.behind().map(|b| b.ahead), Some(1));
        drop((placed, parked));
        assert_eq!(mine.behind(), None);
        assert_eq!(later.behind(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_woken_when_the_call_before_it_leaves() {
        let o = Arc::new(Order::default());
        let first = o.enter(1, keys(&[("b", Claim::Write)]), 0);
        let second = o.enter(2, keys(&[("b", Claim::Write)]), 0);
        let mut seen = Vec::new();
        let waiter = tokio::spawn(async move {
            second.wait(|b| seen.push(b.ahead)).await;
            seen
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(first);
        let seen = waiter.await.expect("the waiter ends");
        assert_eq!(seen, vec![1]);
    }
}
