//! Invoking the tool until it succeeds, fails for good, or is stopped: transient failures of
//! idempotent tools are retried after a backoff (and a partner's `Retry-After`), a 429 makes
//! the call's tool and shared lanes back off for everyone, and a stop is classified by its
//! cause — the tool's own timeout, the run's ceiling, or the run ending.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{backoff, Job};
use crate::events::{CallResult, ErrorInfo, ErrorKind, Event, Status};
use crate::plan::LaneKey;
use crate::run::store::{Lanes, Lease, Sample};
use crate::tools::{Failure, Stop, StopCause, StopLevel};

impl Job {
    /// Invoke (and retry) the tool; the outcome goes into `result`. Returns whether the run's
    /// `tool_call_seconds` ceiling was hit, and how many 429s the partner sent.
    pub(super) async fn attempts(
        &mut self,
        result: &mut CallResult,
        leases: &[(usize, Lease)],
        dispatched: Instant,
    ) -> (bool, u32) {
        let ceiling_at = self.ceiling.map(|c| dispatched + c);
        let mut ceiling_hit = false;
        let mut attempt = 1u32;
        let mut rejections = 0u32;
        loop {
            self.inv.attempt = attempt;
            result.attempts = attempt;
            let pos = self.pos;
            self.emitter
                .lane(|| Event::CallStarted { call: pos, attempt });
            let mut stop = Stop::new(
                self.timeout.map(|t| Instant::now() + t),
                ceiling_at,
                self.stop_rx.clone(),
            );
            let sent = Instant::now();
            let outcome = self.tool.invoke(&self.inv, &mut stop).await;
            self.tell_lanes(leases, &outcome, &stop, (sent, dispatched));
            if let Some(q) = stop.quota() {
                self.heed_quota(leases, q);
            }
            match outcome {
                Ok(v) => {
                    result.status = Status::Ok;
                    result.output = v;
                }
                Err(Failure::Failed {
                    kind,
                    message,
                    transient,
                    retry_after,
                }) => {
                    let wait = backoff(attempt).max(retry_after.unwrap_or_default());
                    if kind.is_rate_limit() || retry_after.is_some() {
                        rejections += u32::from(kind.is_rate_limit());
                        self.push_back(leases, wait);
                    }
                    if transient
                        && attempt <= self.retries
                        && Self::before_retry(&self.lanes, &self.stop_rx, leases, wait).await
                    {
                        attempt += 1;
                        continue;
                    }
                    // Not retryable, or stopped between attempts: the last failure stands.
                    result.status = Status::Error;
                    result.error = Some(ErrorInfo { kind, message });
                }
                Err(Failure::Absent(message)) => {
                    result.status = Status::Error;
                    let kind = ErrorKind::HttpStatus;
                    result.error = Some(ErrorInfo { kind, message });
                }
                Err(Failure::Stopped) => ceiling_hit = self.stopped(result, stop.cause()),
                Err(Failure::Lost(why)) => {
                    // What carried it went away: an idempotent call is made again (its
                    // server is started again for it) while it has retries left.
                    let wait = backoff(attempt);
                    if self.plan.calls[self.pos].idempotent
                        && attempt <= self.retries
                        && Self::before_retry(&self.lanes, &self.stop_rx, leases, wait).await
                    {
                        attempt += 1;
                        continue;
                    }
                    self.cut_off(result, ErrorKind::ConnectionLost, Some(why))
                }
            }
            break;
        }
        (ceiling_hit, rejections)
    }

    /// What the attempt sent at `sent` said of its backend, told to each learned lane the call
    /// holds (`concurrency = "auto"`) as of when the call took its permits (`dispatched`: a
    /// retry of a call sent under an older limit says nothing of the new one); a move of a
    /// lane's limit becomes an event.
    fn tell_lanes(
        &self,
        leases: &[(usize, Lease)],
        outcome: &Result<serde_json::Value, Failure>,
        stop: &Stop,
        (sent, dispatched): (Instant, Instant),
    ) {
        let learned = |l: &usize| self.plan.lanes[*l].auto.is_some();
        if !leases.iter().any(|(l, _)| learned(l)) {
            return;
        }
        let sample = match outcome {
            Err(Failure::Failed {
                kind,
                transient,
                retry_after,
                ..
            }) if kind.is_rate_limit() || retry_after.is_some() || *transient => Sample::Overloaded,
            Err(Failure::Stopped) if stop.cause() == Some(StopCause::Timeout) => Sample::Overloaded,
            Err(Failure::Stopped | Failure::Lost(_)) => return,
            _ => Sample::Answered(sent.elapsed()),
        };
        for (lane, _) in leases.iter().filter(|(l, _)| learned(l)) {
            if let Some(m) = self.lanes.observe(*lane, sample, dispatched) {
                self.emitter.lane(|| Event::LaneLimit {
                    lane: *lane,
                    from: m.from,
                    to: m.to,
                    why: m.why.as_str(),
                });
            }
        }
    }

    /// The partner stated its rate quota: the call's tool and shared lanes heed it (spent,
    /// they wait for its reset — as everyone sharing them does).
    fn heed_quota(&self, leases: &[(usize, Lease)], q: crate::tools::quota::Quota) {
        for lane in self.partner_lanes(leases) {
            self.lanes.clone().quota(lane, q.remaining, q.reset);
        }
    }

    /// The call's lanes that stand for its partner: its tool's and the shared ones.
    fn partner_lanes<'a>(
        &'a self,
        leases: &'a [(usize, Lease)],
    ) -> impl Iterator<Item = usize> + 'a {
        leases.iter().map(|(l, _)| *l).filter(|&l| {
            matches!(
                self.plan.lanes[l].key,
                LaneKey::Tool(_) | LaneKey::BatchTool(_) | LaneKey::Shared(_)
            )
        })
    }

    /// The partner pushed back: the call's tool and shared lanes wait it out, so the other
    /// calls in them do not keep hammering it.
    fn push_back(&self, leases: &[(usize, Lease)], wait: Duration) {
        for lane in self.partner_lanes(leases) {
            self.lanes.clone().back_off(lane, wait);
        }
    }

    /// Classify a call its [`Stop`] ended, by why. Returns whether it reached the run's
    /// `tool_call_seconds` ceiling (which ends the run).
    fn stopped(&self, result: &mut CallResult, cause: Option<StopCause>) -> bool {
        let tool = self.inv.tool();
        let (message, ceiling) = match cause {
            Some(StopCause::Timeout) => {
                let text = self.timeout_text.clone().unwrap_or_else(|| {
                    self.timeout
                        .map(crate::duration::format)
                        .unwrap_or_default()
                });
                (format!("tool '{tool}' exceeded its {text} timeout"), false)
            }
            Some(StopCause::Ceiling) => {
                let text = self
                    .ceiling
                    .map(crate::duration::format)
                    .unwrap_or_default();
                let message = format!(
                    "tool '{tool}' reached the run's tool_call_seconds ceiling of {text}; the run ends"
                );
                (message, true)
            }
            Some(StopCause::RunEnded) | None => {
                self.cut_off(result, ErrorKind::RunEnded, None);
                return false;
            }
        };
        result.status = Status::TimedOut;
        result.error = Some(ErrorInfo {
            kind: ErrorKind::Timeout,
            message,
        });
        ceiling
    }

    /// Classify a call cut off in flight: `cancelled` if its tool is idempotent (safe to call
    /// again), else `indeterminate` (the side effect may have landed).
    fn cut_off(&self, result: &mut CallResult, kind: ErrorKind, why: Option<String>) {
        let idempotent = self.plan.calls[self.pos].idempotent;
        result.status = if idempotent {
            Status::Cancelled
        } else {
            Status::Indeterminate
        };
        let mut message = if idempotent {
            "cancelled in flight: safe to call again".to_string()
        } else {
            "cancelled in flight: the side effect may have landed".to_string()
        };
        if let Some(why) = why {
            message.push_str(&format!(" ({why})"));
        }
        result.error = Some(ErrorInfo { kind, message });
    }

    /// Wait before a retry: the backoff, then a fresh rate token in every rate-limited lane
    /// (each request spends one). `false` if the run ended meanwhile.
    async fn before_retry(
        lanes: &Arc<dyn Lanes>,
        stop_rx: &watch::Receiver<StopLevel>,
        leases: &[(usize, Lease)],
        wait: Duration,
    ) -> bool {
        let mut stop = stop_rx.clone();
        let stopped = tokio::select! {
            _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
            _ = tokio::time::sleep(wait) => false,
        };
        if stopped {
            return false;
        }
        for &(lane, _) in leases {
            let Ok(adm) = lanes.clone().admission(lane).get().await else {
                continue;
            };
            if !adm.wait.is_zero() {
                let mut stop = stop_rx.clone();
                let stopped = tokio::select! {
                    _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
                    _ = tokio::time::sleep(adm.wait) => false,
                };
                if stopped {
                    return false;
                }
            }
        }
        true
    }
}
