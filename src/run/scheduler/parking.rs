//! Parking: calls beyond a lane's limit plus [`QUEUE_AHEAD`](super::QUEUE_AHEAD) wait as
//! indices (with their resolved arguments), not as tasks, and go out lowest-first as
//! completions make room, so a batch of any width waits in bounded memory.

use super::state::Coordinator;

impl Coordinator {
    /// The lane `p` must park on, if any: one whose queue is full, or where an earlier call is
    /// parked already.
    pub(super) fn park_lane(&self, p: usize) -> Option<usize> {
        self.plan.calls[p].lanes.iter().copied().find(|&lane| {
            self.outstanding[lane] >= self.lane_cap[lane]
                || self.parked[lane].first().is_some_and(|&q| q < p)
        })
    }

    /// Dispatch parked calls that now have room, lowest call index first on each lane.
    pub(super) fn unpark(&mut self) {
        while self.recheck && self.ending.is_none() {
            self.recheck = false;
            for lane in 0..self.parked.len() {
                while let Some(&q) = self.parked[lane].first() {
                    if self.outstanding[lane] >= self.lane_cap[lane] || self.ending.is_some() {
                        break;
                    }
                    self.parked[lane].remove(&q);
                    self.parked_n -= 1;
                    let args = self.parked_args.remove(&q).flatten();
                    // May park it again on another of its lanes, or complete it at once.
                    let before = self.parked_n;
                    self.spawn(q, args);
                    // It went out: another pass, for calls re-parked on lanes already passed.
                    // (The lowest parked call always goes out when its lanes have room, so a
                    // run with nothing in flight cannot be left with parked calls.)
                    self.recheck |= self.parked_n == before && self.parked_n > 0;
                }
            }
        }
    }
}
