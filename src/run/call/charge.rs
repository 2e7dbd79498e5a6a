//! A tenant window's reservations (`[budget] per_tenant`) asked in call order. The
//! coordinator asks for a call's reservation as it sends the call on (one call at a time, in
//! call order); one task per run puts the questions to the lane store one after another, so
//! calls that are ready together are granted in call order whichever of them reaches its
//! dispatch first. The call awaits its answer just before it goes out. A reservation whose
//! call never reaches its tool is given back, also when the call ends before it has heard.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::events::ErrorKind;
use crate::manifest::TenantWindow;
use crate::run::store::{refusal, Charge, LaneError, TenantSpend};

type Answer = Result<Charge, LaneError>;

/// The run's one line to its tenant's window.
pub(in crate::run) struct Charger {
    tx: mpsc::UnboundedSender<(f64, oneshot::Sender<Answer>)>,
    window: Arc<TenantWindow>,
    tenant: Arc<str>,
    lanes: Arc<dyn TenantSpend>,
}

impl Charger {
    /// Start the run's charging task (inside the runtime).
    pub(in crate::run) fn start(
        lanes: Arc<dyn TenantSpend>,
        window: Arc<TenantWindow>,
        tenant: Arc<str>,
    ) -> Charger {
        let (tx, mut rx) = mpsc::unbounded_channel::<(f64, oneshot::Sender<Answer>)>();
        let (store, w, t) = (lanes.clone(), window.clone(), tenant.clone());
        tokio::spawn(async move {
            while let Some((cost, answer)) = rx.recv().await {
                let got = store
                    .clone()
                    .charge(t.to_string(), (*w).clone(), cost)
                    .await;
                // The call ended before it heard: what was reserved for it goes back.
                if let Err(Ok(Charge::Granted(id))) = answer.send(got) {
                    store.clone().refund(t.to_string(), id);
                }
            }
        });
        Charger {
            tx,
            window,
            tenant,
            lanes,
        }
    }

    /// Ask for `cost` now, in this call's place in line.
    pub(in crate::run) fn ask(&self, cost: f64) -> Ticket {
        let (answer, rx) = oneshot::channel();
        let rx = self.tx.send((cost, answer)).is_ok().then_some(rx);
        Ticket {
            rx,
            cost,
            window: self.window.clone(),
            tenant: self.tenant.clone(),
            lanes: self.lanes.clone(),
        }
    }
}

/// One call's place in line for its reservation.
pub(in crate::run) struct Ticket {
    rx: Option<oneshot::Receiver<Answer>>,
    cost: f64,
    window: Arc<TenantWindow>,
    tenant: Arc<str>,
    lanes: Arc<dyn TenantSpend>,
}

impl Ticket {
    /// Wait for the answer: the id to give the reservation back under, or why the call may
    /// not go.
    pub(in crate::run) async fn granted(&mut self) -> Result<String, (ErrorKind, String)> {
        let lost = || {
            (
                ErrorKind::LaneStore,
                "the run's budget window is gone".into(),
            )
        };
        let Some(rx) = self.rx.take() else {
            return Err(lost());
        };
        match rx.await {
            Ok(Ok(Charge::Granted(id))) => Ok(id),
            Ok(Ok(Charge::Refused { spent, frees_in })) => Err((
                ErrorKind::BudgetExhausted,
                refusal(&self.tenant, spent, frees_in, self.cost, &self.window),
            )),
            Ok(Err(e)) => Err((ErrorKind::LaneStore, e.to_string())),
            Err(_) => Err(lost()),
        }
    }

    /// Give back a reservation whose call never reached its tool.
    pub(in crate::run) fn refund(&self, id: String) {
        self.lanes.clone().refund(self.tenant.to_string(), id);
    }
}

impl Drop for Ticket {
    /// A call that ends before it has heard: closing the line first means the answer is
    /// either here now (and given back) or never sent (and given back by the charger).
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(Ok(Charge::Granted(id))) = rx.try_recv() {
                self.refund(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::store::MemoryLanes;
    use std::time::Duration;

    fn window(max: f64) -> Arc<TenantWindow> {
        Arc::new(TenantWindow {
            max_cost: max,
            window: Duration::from_secs(3600),
            window_text: "1h".into(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn answers_in_the_order_asked_and_gives_back_what_an_ended_call_held() {
        let lanes: Arc<dyn TenantSpend> = Arc::new(MemoryLanes::new(&[]));
        let c = Charger::start(lanes, window(0.25), "t".into());
        let (mut a, b, mut d) = (c.ask(0.1), c.ask(0.1), c.ask(0.1));
        // The last asked is awaited first; the order asked still decides.
        assert_eq!(
            d.granted().await.map_err(|e| e.0),
            Err(ErrorKind::BudgetExhausted)
        );
        assert!(a.granted().await.is_ok());
        // `b` ends before it heard: its 0.1 goes back, so one more fits.
        drop(b);
        tokio::task::yield_now().await;
        let mut e = c.ask(0.1);
        assert!(e.granted().await.is_ok());
        let mut f = c.ask(0.1);
        assert_eq!(
            f.granted().await.map_err(|e| e.0),
            Err(ErrorKind::BudgetExhausted)
        );
    }
}
