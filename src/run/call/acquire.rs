//! Taking a call's lanes in the plan's fixed order. The coordinator begins it synchronously
//! ([`begin_acquire`]): every lane that is free is taken at once and the first that is not is
//! queued for, so waiters register in call order. The call's own task finishes the job
//! ([`Job::finish_acquire`]): the queued lane, then each rate token or back-off, then the rest.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{never, Emitter, Job};
use crate::events::{CallResult, ErrorKind, Event};
use crate::plan::Plan;
use crate::run::store::{
    Admission, Answer, BoxFuture, Claims, LaneError, LaneFigures, Lanes, Lease,
};
use crate::tools::StopLevel;

/// A lane acquisition in progress.
type LeaseFuture = BoxFuture<'static, Result<Lease, LaneError>>;

/// How long to wait before dispatch for a lane's rate token or back-off: known, or still
/// being asked of a store that answers after I/O.
enum Admit {
    Known(Admission),
    Asking(BoxFuture<'static, Result<Admission, LaneError>>),
}

/// Lanes a call holds, and where its acquisition stands.
pub(in crate::run) struct Acquisition {
    pub(super) leases: Vec<(usize, Lease)>,
    /// Next position in the call's lane list still to acquire.
    next: usize,
    /// A lane wait the coordinator began (so it is queued in call order): lane, since, future.
    pending: Option<(usize, Instant, LeaseFuture)>,
    /// A rate token reserved (or a back-off) not yet due: lane, since, how long to wait.
    token: Option<(usize, Instant, Admit)>,
    /// The lane waited on longest so far.
    pub(super) longest: Option<(Duration, usize)>,
    /// The backend read to take with a lane (the last that can carry it, by its position in
    /// the call's lanes): [`LaneStore::acquire_along`].
    along: Option<(usize, Claims)>,
}

impl Acquisition {
    /// Whether the call's backend read goes with the lane at position `at` of its lanes.
    fn carries(&self, at: usize) -> bool {
        self.along.as_ref().is_some_and(|(i, _)| *i == at)
    }

    /// Start acquiring `lane`, at position `at` of the call's lanes: its future. A call that
    /// may wait for it holds no backend meanwhile.
    fn start(
        &mut self,
        store: &Arc<dyn Lanes>,
        (lane, weight, order): (usize, u32, u64),
        at: usize,
    ) -> LeaseFuture {
        if self.carries(at) {
            if let Some((_, along)) = self.along.take() {
                return store.clone().acquire_along(lane, weight, order, along);
            }
        }
        self.give_back_backend();
        store.clone().acquire(lane, weight, order)
    }

    /// Whether the call's backends came with its lanes.
    pub(super) fn holds_backends(&self) -> bool {
        self.leases.iter().any(|(_, l)| l.holds_backend())
    }

    /// The call is about to wait for a lane: the backend read that came with an earlier one
    /// goes back (no call waits for a lane holding a backend), and is asked for after.
    fn give_back_backend(&mut self) {
        for (_, lease) in &mut self.leases {
            lease.give_back_backend();
        }
    }

    fn note_wait(&mut self, lanes: &dyn Lanes, lane: usize, since: Instant, token: bool) {
        let waited = since.elapsed();
        if waited >= Duration::from_millis(1) {
            lanes.record_wait(lane, waited, token);
            if self.longest.is_none_or(|(w, _)| waited > w) {
                self.longest = Some((waited, lane));
            }
        }
    }
}

/// Start acquiring a ready call's lanes, synchronously and in call order: every lane that is
/// free is taken at once; the first that is not is queued for (its future polled once) and
/// the call's task finishes the job.
pub(in crate::run) fn begin_acquire(
    store: &Arc<dyn Lanes>,
    figures: &Arc<dyn LaneFigures>,
    plan: &Plan,
    pos: usize,
    emitter: &Emitter,
    along: Option<Claims>,
) -> Result<Acquisition, String> {
    let call = &plan.calls[pos];
    let along = along.and_then(|a| {
        let at = call.lanes.iter().rposition(|&l| store.carries_along(l))?;
        Some((at, a))
    });
    let mut acq = Acquisition {
        leases: Vec::with_capacity(call.lanes.len()),
        next: 0,
        pending: None,
        token: None,
        longest: None,
        along,
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while acq.next < call.lanes.len() {
        let lane = call.lanes[acq.next];
        acq.next += 1;
        // Free at once (no future), else queued: waiters queue in call order across the
        // whole run (a stream's segments included).
        let at = acq.next - 1;
        let free = match acq.carries(at) {
            true => None,
            false => store.try_acquire(lane, call.weight),
        };
        let (polled, mut fut) = match free {
            Some(lease) => (std::task::Poll::Ready(Ok(lease)), None),
            None => {
                let order = (emitter.base + pos) as u64;
                let mut fut = acq.start(store, (lane, call.weight, order), at);
                (fut.as_mut().poll(&mut cx), Some(fut))
            }
        };
        match polled {
            std::task::Poll::Ready(Ok(lease)) => {
                emitter.lane(|| Event::LaneAcquired {
                    call: pos,
                    lane,
                    weight: call.weight,
                });
                acq.leases.push((lane, lease));
                match store.clone().admission(lane) {
                    Answer::Now(adm) => {
                        let adm = adm.map_err(|e| e.to_string())?;
                        if !adm.wait.is_zero() {
                            if adm.token {
                                emitter.lane(|| Event::RateWaiting {
                                    call: pos,
                                    lane,
                                    waiting: true,
                                });
                            }
                            acq.token = Some((lane, Instant::now(), Admit::Known(adm)));
                            break;
                        }
                    }
                    Answer::Later(asking) => {
                        acq.token = Some((lane, Instant::now(), Admit::Asking(asking)));
                        break;
                    }
                }
            }
            std::task::Poll::Ready(Err(e)) => return Err(e.to_string()),
            std::task::Poll::Pending => {
                match figures.clone().held_elsewhere(lane) {
                    Answer::Now(Some(held)) => emitter.lane(|| Event::LaneShared { lane, held }),
                    Answer::Now(None) => {}
                    Answer::Later(asking) => {
                        let emitter = emitter.clone();
                        tokio::spawn(async move {
                            if let Some(held) = asking.await {
                                emitter.lane(|| Event::LaneShared { lane, held });
                            }
                        });
                    }
                }
                emitter.lane(|| Event::LaneWaiting {
                    call: pos,
                    lane,
                    weight: call.weight,
                });
                // The clock is read only for a lane that is waited for (not per lane taken).
                acq.pending = fut.take().map(|f| (lane, Instant::now(), f));
                break;
            }
        }
    }
    Ok(acq)
}

impl Job {
    /// Finish acquiring lanes. `Err` is the never-dispatched result.
    pub(super) async fn finish_acquire(
        &mut self,
        acq: &mut Acquisition,
        result: &mut CallResult,
    ) -> Result<(), CallResult> {
        let call = &self.plan.calls[self.pos];
        let (pos, weight, lanes) = (self.pos, call.weight, call.lanes.len());
        loop {
            if let Some((lane, since, fut)) = acq.pending.take() {
                self.await_lease(acq, (lane, since, fut), result).await?;
            }
            if let Some(token) = acq.token.take() {
                self.await_admission(acq, token, result).await?;
            }
            if acq.next >= lanes {
                return Ok(());
            }
            let lane = self.plan.calls[pos].lanes[acq.next];
            acq.next += 1;
            let at = acq.next - 1;
            if acq.holds_backends() {
                // After the lane that brought the read: kept only if this one is free at once.
                if let Some(lease) = self.lanes.try_acquire(lane, weight) {
                    let ready: LeaseFuture = Box::pin(std::future::ready(Ok(lease)));
                    acq.pending = Some((lane, Instant::now(), ready));
                    continue;
                }
            }
            self.emitter.lane(|| Event::LaneWaiting {
                call: pos,
                lane,
                weight,
            });
            let order = (self.emitter.base + pos) as u64;
            let fut = acq.start(&self.lanes, (lane, weight, order), at);
            acq.pending = Some((lane, Instant::now(), fut));
        }
    }

    /// Wait for the lane the acquisition queued on (or the run ending), then ask for its
    /// rate token or back-off.
    async fn await_lease(
        &mut self,
        acq: &mut Acquisition,
        (lane, since, fut): (usize, Instant, LeaseFuture),
        result: &mut CallResult,
    ) -> Result<(), CallResult> {
        let (pos, weight) = (self.pos, self.plan.calls[self.pos].weight);
        let mut stop = self.stop_rx.clone();
        let lease = tokio::select! {
            biased;
            _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => None,
            r = fut => Some(r),
        };
        let lease = match lease {
            Some(Ok(lease)) => lease,
            other => {
                self.emitter.lane(|| Event::LaneReleased {
                    call: pos,
                    lane,
                    weight,
                    held: false,
                });
                let why = format!(
                    "run ended while queued on lane {}",
                    self.plan.lanes[lane].name
                );
                return Err(match other {
                    Some(Err(e)) => never(result, ErrorKind::LaneStore, &e.to_string()),
                    _ => never(result, ErrorKind::RunEnded, &why),
                });
            }
        };
        self.emitter.lane(|| Event::LaneAcquired {
            call: pos,
            lane,
            weight,
        });
        acq.leases.push((lane, lease));
        acq.note_wait(self.lanes.as_ref(), lane, since, false);
        let admit = match self.lanes.clone().admission(lane) {
            Answer::Now(adm) => {
                let adm = adm.map_err(|e| never(result, ErrorKind::LaneStore, &e.to_string()))?;
                self.announce_token(lane, &adm);
                Admit::Known(adm)
            }
            Answer::Later(asking) => Admit::Asking(asking),
        };
        acq.token = Some((lane, Instant::now(), admit));
        Ok(())
    }

    /// Wait out a lane's rate token or back-off (or the run ending).
    async fn await_admission(
        &mut self,
        acq: &mut Acquisition,
        (lane, since, admit): (usize, Instant, Admit),
        result: &mut CallResult,
    ) -> Result<(), CallResult> {
        let adm = match admit {
            Admit::Known(adm) => adm,
            Admit::Asking(asking) => {
                let adm = asking
                    .await
                    .map_err(|e| never(result, ErrorKind::LaneStore, &e.to_string()))?;
                self.announce_token(lane, &adm);
                adm
            }
        };
        if adm.wait.is_zero() {
            return Ok(());
        }
        let mut stop = self.stop_rx.clone();
        let stopped = tokio::select! {
            biased;
            _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
            _ = tokio::time::sleep(adm.wait) => false,
        };
        if adm.token {
            let pos = self.pos;
            self.emitter.lane(|| Event::RateWaiting {
                call: pos,
                lane,
                waiting: false,
            });
        }
        if stopped {
            let why = format!(
                "run ended while waiting for a rate token of lane {}",
                self.plan.lanes[lane].name
            );
            return Err(never(result, ErrorKind::RunEnded, &why));
        }
        acq.note_wait(self.lanes.as_ref(), lane, since, adm.token);
        Ok(())
    }

    /// Tell the live display the call now waits for a rate token.
    fn announce_token(&self, lane: usize, adm: &Admission) {
        if adm.token && !adm.wait.is_zero() {
            let pos = self.pos;
            self.emitter.lane(|| Event::RateWaiting {
                call: pos,
                lane,
                waiting: true,
            });
        }
    }
}
