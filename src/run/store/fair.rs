//! [`OrderedSemaphore`]: a lane's permits in this process, granted fairly. Each waiter belongs
//! to a [`Flow`] — one session of `mcp serve`, or a whole batch run — of a tenant. Inside a
//! flow, waiters are served in call order (a key: the call's position, or its arrival at the
//! gateway); across the flows of one tenant, round robin; across tenants, by weight (a tenant
//! of weight 2 is served twice as often as one of weight 1 while both wait). A batch run is
//! one flow, so its calls keep call order. Only the waiter chosen next may take permits, and
//! it waits until its weight fits: a heavy call is not starved by light ones behind it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Who a waiter is, for fairness: its flow (a session, or a run), its tenant, and the
/// tenant's weight. The default is the one flow of a batch run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flow {
    /// Unique in this process (0: a run's own flow).
    pub id: u64,
    /// A name unique across processes (Redis orders its queue by it); empty for a run.
    pub name: Arc<str>,
    pub tenant: Arc<str>,
    /// `[tenants.NAME] weight` (0 is read as 1).
    pub weight: u32,
}

type Waiter = (u64, oneshot::Sender<()>);

struct FlowQueue {
    tenant: Arc<str>,
    name: Arc<str>,
    /// Waiters by key (call order).
    waiters: BTreeMap<u64, Waiter>,
}

/// A tenant with waiting flows.
struct TenantQueue {
    weight: f64,
    /// Virtual time: permits served so far over the weight (smallest goes next).
    pass: f64,
    /// When it was last served (ties go to the one served longest ago).
    served: u64,
    /// Its flows with waiters, in turn.
    ring: VecDeque<u64>,
}

#[derive(Default)]
struct State {
    total: u64,
    available: u64,
    /// Permits still held above a lowered limit (`resize`): paid off by releases before any
    /// is available again. Held = total + debt − available.
    debt: u64,
    flows: HashMap<u64, FlowQueue>,
    tenants: HashMap<Arc<str>, TenantQueue>,
    /// The pass of the tenant served last: a tenant that starts waiting begins here, so an
    /// idle tenant banks no credit.
    now: f64,
    grants: u64,
}

/// A counting semaphore served fairly across flows, in key order within one.
pub(crate) struct OrderedSemaphore {
    state: Mutex<State>,
    /// Permits whose holders also hold the lane's shared part (a file slot, Redis permits):
    /// in flight, where the rest of `held` still waits for the shared part.
    shared_held: std::sync::atomic::AtomicI64,
}

impl OrderedSemaphore {
    pub(crate) fn new(permits: u64) -> OrderedSemaphore {
        OrderedSemaphore {
            state: Mutex::new(State {
                total: permits,
                available: permits,
                ..State::default()
            }),
            shared_held: std::sync::atomic::AtomicI64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is one step: the state stays consistent if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `weight` permits now if nobody waits and they are free (`false`: queue with
    /// [`acquire`](Self::acquire)).
    pub(crate) fn try_acquire(&self, weight: u64) -> bool {
        let mut s = self.lock();
        let free = s.flows.is_empty() && s.available >= weight;
        if free {
            s.available -= weight;
        }
        free
    }

    /// Wait for `weight` permits; `key` orders the flow's own waiters (smaller first).
    pub(crate) async fn acquire(self: &Arc<Self>, flow: &Flow, key: u64, weight: u64) {
        let mut rx = {
            let mut s = self.lock();
            if s.flows.is_empty() && s.available >= weight {
                s.available -= weight;
                return;
            }
            let (tx, rx) = oneshot::channel();
            s.enqueue(flow, key, (weight, tx));
            s.grant();
            rx
        };
        if rx.try_recv().is_ok() {
            return;
        }
        let mut guard = WaitGuard {
            sem: self,
            flow: flow.id,
            key,
            weight,
            armed: true,
        };
        let _ = rx.await;
        guard.armed = false;
    }

    /// `delta` permits got (or gave back) their shared part.
    pub(crate) fn running(&self, delta: i64) {
        self.shared_held
            .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }

    /// Permits held with their shared part.
    pub(crate) fn shared_held(&self) -> u64 {
        u64::try_from(self.shared_held.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0)
    }

    /// Calls waiting now, in every flow.
    pub(crate) fn waiting(&self) -> u64 {
        let s = self.lock();
        s.flows.values().map(|q| q.waiters.len() as u64).sum()
    }

    /// Calls waiting now, per flow: (flow name, tenant, how many).
    pub(crate) fn queue(&self) -> Vec<(String, String, u64)> {
        let s = self.lock();
        let mut out: Vec<(String, String, u64)> = s
            .flows
            .values()
            .filter(|q| !q.waiters.is_empty())
            .map(|q| {
                (
                    q.name.to_string(),
                    q.tenant.to_string(),
                    q.waiters.len() as u64,
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Permits held now, by every flow.
    pub(crate) fn held(&self) -> u64 {
        let s = self.lock();
        (s.total + s.debt).saturating_sub(s.available)
    }

    pub(crate) fn release(&self, weight: u64) {
        let mut s = self.lock();
        s.give_back(weight);
        s.grant();
    }

    /// Make the limit `total` (a learned lane's limit moved): a raise is granted to waiters at
    /// once; permits held above a lowered limit are kept until their calls end, and new calls
    /// wait until the lane is under it.
    pub(crate) fn resize(&self, total: u64) {
        let mut s = self.lock();
        if total >= s.total {
            let up = total - s.total;
            let paid = up.min(s.debt);
            s.debt -= paid;
            s.available += up - paid;
        } else {
            let cut = s.total - total;
            let taken = cut.min(s.available);
            s.available -= taken;
            s.debt += cut - taken;
        }
        s.total = total;
        s.grant();
    }
}

impl State {
    /// Permits a call gave back: they pay off a lowered limit's debt first.
    fn give_back(&mut self, weight: u64) {
        let paid = weight.min(self.debt);
        self.debt -= paid;
        self.available += weight - paid;
    }

    fn enqueue(&mut self, flow: &Flow, key: u64, waiter: Waiter) {
        let q = self.flows.entry(flow.id).or_insert_with(|| FlowQueue {
            tenant: flow.tenant.clone(),
            name: flow.name.clone(),
            waiters: BTreeMap::new(),
        });
        let fresh = q.waiters.is_empty();
        q.waiters.insert(key, waiter);
        if !fresh {
            return;
        }
        let now = self.now;
        let t = self
            .tenants
            .entry(flow.tenant.clone())
            .or_insert_with(|| TenantQueue {
                weight: f64::from(flow.weight.max(1)),
                pass: now,
                served: 0,
                ring: VecDeque::new(),
            });
        t.ring.push_back(flow.id);
    }

    /// The tenant to serve next: the smallest pass, then the one served longest ago.
    fn next_tenant(&self) -> Option<Arc<str>> {
        self.tenants
            .iter()
            .filter(|(_, t)| !t.ring.is_empty())
            .min_by(|a, b| {
                a.1.pass
                    .total_cmp(&b.1.pass)
                    .then(a.1.served.cmp(&b.1.served))
            })
            .map(|(k, _)| k.clone())
    }

    /// Grant permits while the waiter chosen next fits.
    fn grant(&mut self) {
        while let Some(tenant) = self.next_tenant() {
            let Some(t) = self.tenants.get_mut(&tenant) else {
                return;
            };
            let Some(&flow) = t.ring.front() else { return };
            let Some(q) = self.flows.get_mut(&flow) else {
                t.ring.pop_front();
                continue;
            };
            let Some((&key, &(w, _))) = q.waiters.iter().next() else {
                t.ring.pop_front();
                self.flows.remove(&flow);
                continue;
            };
            if self.available < w {
                return;
            }
            let Some((_, tx)) = q.waiters.remove(&key) else {
                return;
            };
            let empty = q.waiters.is_empty();
            if tx.send(()).is_err() {
                // Its waiter is gone (being dropped): try the next.
                if empty {
                    self.leave(&tenant, flow);
                }
                continue;
            }
            self.available -= w;
            self.grants += 1;
            self.now = t.pass;
            t.pass += w as f64 / t.weight;
            t.served = self.grants;
            t.ring.pop_front();
            if empty {
                self.flows.remove(&flow);
            } else {
                t.ring.push_back(flow);
            }
            if t.ring.is_empty() {
                self.tenants.remove(&tenant);
            }
        }
    }

    /// A flow has no more waiters: out of its tenant's ring (and the tenant out, if idle).
    fn leave(&mut self, tenant: &Arc<str>, flow: u64) {
        self.flows.remove(&flow);
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.ring.retain(|f| *f != flow);
            if t.ring.is_empty() {
                self.tenants.remove(tenant);
            }
        }
    }
}

/// Takes a waiter out of the queue if its future is dropped (the run ended while it waited),
/// and gives back permits that were granted but never picked up.
struct WaitGuard<'a> {
    sem: &'a OrderedSemaphore,
    flow: u64,
    key: u64,
    weight: u64,
    armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.sem.lock();
        let found = s.flows.get_mut(&self.flow).map(|q| {
            let removed = q.waiters.remove(&self.key).is_some();
            (removed, q.waiters.is_empty(), q.tenant.clone())
        });
        match found {
            Some((true, empty, tenant)) => {
                if empty {
                    s.leave(&tenant, self.flow);
                }
            }
            // Granted while we were being dropped: hand the permits on.
            _ => s.give_back(self.weight),
        }
        s.grant();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn flow(id: u64, tenant: &str, weight: u32) -> Flow {
        Flow {
            id,
            name: format!("f{id}").into(),
            tenant: tenant.into(),
            weight,
        }
    }

    /// Hold the one permit, queue `waiters` (flow, key) in that order, then release it again
    /// and again: the order they were served in.
    async fn served(permits: u64, waiters: &[(Flow, u64)]) -> Vec<(u64, u64)> {
        let sem = Arc::new(OrderedSemaphore::new(permits));
        let first = flow(999, "first", 1);
        for i in 0..permits {
            sem.acquire(&first, i, 1).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (f, key) in waiters.iter().cloned() {
            let (sem, tx) = (sem.clone(), tx.clone());
            tokio::spawn(async move {
                sem.acquire(&f, key, 1).await;
                let _ = tx.send((f.id, key));
            });
            tokio::task::yield_now().await;
        }
        let mut got = Vec::new();
        for _ in waiters {
            sem.release(1);
            got.push(rx.recv().await.expect("served"));
        }
        got
    }

    #[tokio::test(start_paused = true)]
    async fn one_flow_is_served_in_key_order_whatever_the_arrival() {
        let f = Flow::default();
        let got = served(1, &[(f.clone(), 9), (f.clone(), 5), (f, 7)]).await;
        assert_eq!(got, vec![(0, 5), (0, 7), (0, 9)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_from_one_session_does_not_starve_a_second_session() {
        let (a, b) = (flow(1, "t", 1), flow(2, "t", 1));
        let mut waiters: Vec<(Flow, u64)> = (0..50).map(|k| (a.clone(), k)).collect();
        waiters.extend((100..103).map(|k| (b.clone(), k)));
        let got = served(1, &waiters).await;
        // B's three calls are served within its first turns: A, B, A, B, A, B.
        let b_at: Vec<usize> = got
            .iter()
            .enumerate()
            .filter(|(_, (f, _))| *f == 2)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(b_at, vec![1, 3, 5], "{got:?}");
        // Each flow in its own key order.
        let a_keys: Vec<u64> = got.iter().filter(|(f, _)| *f == 1).map(|x| x.1).collect();
        assert_eq!(a_keys, (0..50).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn tenants_share_by_weight_and_sessions_of_a_tenant_take_turns() {
        let heavy = flow(1, "gold", 2);
        let (s1, s2) = (flow(2, "free", 1), flow(3, "free", 1));
        let mut waiters: Vec<(Flow, u64)> = Vec::new();
        for k in 0..20 {
            waiters.push((heavy.clone(), k));
            waiters.push((s1.clone(), 100 + k));
            waiters.push((s2.clone(), 200 + k));
        }
        let got = served(1, &waiters).await;
        let first: Vec<u64> = got.iter().take(30).map(|x| x.0).collect();
        let gold = first.iter().filter(|f| **f == 1).count();
        // gold (weight 2) gets two thirds; free's two sessions split the rest evenly.
        assert_eq!(gold, 20, "{first:?}");
        let s1n = first.iter().filter(|f| **f == 2).count();
        assert_eq!(s1n, 5, "{first:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_leaves_the_queue() {
        let sem = Arc::new(OrderedSemaphore::new(1));
        let f = Flow::default();
        sem.acquire(&f, 0, 1).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(20), sem.acquire(&f, 1, 1)).await;
        assert!(gave_up.is_err());
        sem.release(1);
        // The abandoned waiter must not have swallowed the permit.
        tokio::time::timeout(Duration::from_millis(20), sem.acquire(&f, 2, 1))
            .await
            .expect("the permit is free");
    }

    #[tokio::test(start_paused = true)]
    async fn a_heavy_waiter_chosen_next_is_not_overtaken_by_light_ones() {
        let sem = Arc::new(OrderedSemaphore::new(2));
        let (a, b) = (flow(1, "t", 1), flow(2, "t", 1));
        sem.acquire(&a, 0, 1).await;
        let heavy = {
            let (sem, b) = (sem.clone(), b.clone());
            tokio::spawn(async move { sem.acquire(&b, 1, 2).await })
        };
        tokio::task::yield_now().await;
        // One permit is free, but the heavy waiter is next: a light one must wait behind it.
        let light = tokio::time::timeout(Duration::from_millis(20), sem.acquire(&a, 2, 1)).await;
        assert!(light.is_err());
        sem.release(1);
        heavy.await.expect("the heavy waiter is served");
    }
}
