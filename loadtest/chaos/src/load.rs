//! The bounded load: client tasks, each pinned to one instance (so a paused instance stalls only
//! its own clients while the others keep taking over its shards), issuing orders under fresh
//! idempotency keys and now and then replaying an acknowledged one. In the lifecycle rows, a
//! buyer then pays or cancels some of its new orders beside the load. Every operation goes into
//! the [`History`]. The load ends when stopped or when its request budget is spent.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::Value;
use tokio::{
    sync::{Semaphore, watch},
    task::JoinHandle,
};

use crate::{
    api::{Api, Reply},
    history::{History, Invocation, OpKind, Outcome},
    settings::{Budget, SaleSettings, Settling},
    settlement::{SettleAction, SettleOutcome},
};

/// The shape of the load.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Client tasks, spread evenly over the instances.
    pub workers: usize,
    /// Most requests in total.
    pub max_requests: u64,
    /// Users are `user-0` .. `user-(users-1)`, drawn uniformly.
    pub users: u32,
    /// Quantities are drawn from `1..=max_per_order`.
    pub max_per_order: u32,
    /// Share of operations replaying an acknowledged key.
    pub replay_fraction: f64,
    /// Idempotency keys are `PREFIX-wWORKER-SEQ` (distinct per load on one sale).
    pub key_prefix: String,
    /// The lifecycle rows: what buyers do with their reserved orders (`None`: nothing, they stay
    /// reserved for their sale's window, a day outside those rows).
    pub settling: Option<Settling>,
}

impl LoadSpec {
    /// The budget's load on `sale`, keyed by `sku`; buyers settle their orders when the sale has
    /// a payment window of its own (the lifecycle rows).
    pub fn for_sale(budget: &Budget, sale: &SaleSettings, sku: &str) -> Self {
        Self {
            workers: budget.workers,
            max_requests: budget.max_requests,
            users: sale.users,
            max_per_order: sale.max_per_order,
            replay_fraction: budget.replay_fraction,
            key_prefix: sku.to_owned(),
            settling: sale.payment_window_ms.map(|_| budget.settling.clone()),
        }
    }
}

/// A running load.
#[derive(Debug)]
pub struct Load {
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    settler: Option<Arc<Settler>>,
}

/// An order a worker saw acknowledged, kept for replays.
#[derive(Debug, Clone)]
struct Acked {
    key: String,
    user: String,
    quantity: u32,
}

/// Replays are drawn from a worker's most recent acknowledgements.
const REPLAY_WINDOW: usize = 64;

/// After a 503, a refused connection or an unknown outcome, a worker waits a jittered backoff
/// that doubles from this...
const BACKOFF_MIN_MS: u64 = 25;

/// ... up to this (the service says `Retry-After: 1`; 24 clients retrying at most this late
/// still notice a recovery within a few tens of milliseconds).
const BACKOFF_MAX_MS: u64 = 400;

impl Load {
    /// Starts `spec.workers` tasks against `apis` selling `sku`, recording into `history`.
    pub fn start(apis: Vec<Api>, sku: &str, spec: LoadSpec, history: History) -> Self {
        let (stop, stopped) = watch::channel(false);
        let sent = Arc::new(AtomicU64::new(0));
        let apis = Arc::new(apis);
        let settler = spec.settling.clone().map(|settling| {
            Arc::new(Settler {
                permits: Arc::new(Semaphore::new(settling.in_flight)),
                settling,
                apis: apis.clone(),
                history: history.clone(),
            })
        });
        let workers = (0..spec.workers)
            .map(|worker| {
                let ctx = Worker {
                    worker,
                    instance: worker % apis.len(),
                    apis: apis.clone(),
                    sku: sku.to_owned(),
                    spec: spec.clone(),
                    history: history.clone(),
                    sent: sent.clone(),
                    stopped: stopped.clone(),
                    settler: settler.clone(),
                };
                tokio::spawn(ctx.run())
            })
            .collect();
        Self {
            stop,
            workers,
            settler,
        }
    }

    /// Whether every worker has finished (budget spent).
    pub fn finished(&self) -> bool {
        self.workers.iter().all(JoinHandle::is_finished)
    }

    /// Stops issuing new requests and waits for those in flight (each bounded by the client
    /// timeout).
    pub async fn stop(self) {
        self.stop.send_replace(true);
        for worker in self.workers {
            let _ = worker.await;
        }
        if let Some(settler) = self.settler {
            settler.wait().await;
        }
    }
}

/// Pays or cancels acknowledged orders beside the load, each in its own task.
#[derive(Debug)]
struct Settler {
    settling: Settling,
    apis: Arc<Vec<Api>>,
    history: History,
    /// One per call in flight, so that at most `settling.in_flight` run at once.
    permits: Arc<Semaphore>,
}

impl Settler {
    /// Draws what the buyer of a new order does, and starts the call unless the order is left to
    /// expire (or too many calls are in flight already).
    fn consider(&self, rng: &mut StdRng, reply: &Reply, user: &str) {
        let Reply::Http { status: 201, body } = reply else {
            return;
        };
        let (Some(order_id), Some(secret)) = (
            body.get("order_id").and_then(Value::as_i64),
            body.get("secret").and_then(Value::as_str),
        ) else {
            return;
        };
        let draw: f64 = rng.random();
        let action = if draw < self.settling.pay {
            SettleAction::Pay
        } else if draw < self.settling.pay + self.settling.cancel {
            SettleAction::Cancel
        } else {
            return;
        };
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return;
        };
        let think = rng.random_range(Duration::ZERO..=self.settling.think);
        let instance = rng.random_range(0..self.apis.len());
        let (apis, history) = (self.apis.clone(), self.history.clone());
        let (user, secret) = (user.to_owned(), secret.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(think).await;
            let id = history.invoke_settle(order_id, action, instance);
            let reply = apis[instance]
                .settle(order_id, &user, &secret, action)
                .await;
            history.complete_settle(id, SettleOutcome::classify(&reply));
            drop(permit);
        });
    }

    /// Waits for every call in flight (each bounded by its think time and the client timeout).
    async fn wait(&self) {
        let _ = self
            .permits
            .acquire_many(self.settling.in_flight as u32)
            .await;
    }
}

struct Worker {
    worker: usize,
    instance: usize,
    apis: Arc<Vec<Api>>,
    sku: String,
    spec: LoadSpec,
    history: History,
    sent: Arc<AtomicU64>,
    stopped: watch::Receiver<bool>,
    settler: Option<Arc<Settler>>,
}

impl Worker {
    async fn run(self) {
        let mut rng = StdRng::seed_from_u64(rand::random());
        let api = &self.apis[self.instance];
        let mut acked: Vec<Acked> = Vec::new();
        let mut backoff = 0;
        for seq in 0.. {
            if *self.stopped.borrow()
                || self.sent.fetch_add(1, Ordering::Relaxed) >= self.spec.max_requests
            {
                break;
            }
            let (kind, order) = if !acked.is_empty() && rng.random_bool(self.spec.replay_fraction) {
                (
                    OpKind::Replay,
                    acked[rng.random_range(0..acked.len())].clone(),
                )
            } else {
                let order = Acked {
                    key: format!("{}-w{}-{seq}", self.spec.key_prefix, self.worker),
                    user: format!("user-{}", rng.random_range(0..self.spec.users)),
                    quantity: rng.random_range(1..=self.spec.max_per_order),
                };
                (OpKind::Order, order)
            };
            let id = self.history.invoke(Invocation {
                worker: self.worker,
                instance: self.instance,
                kind,
                key: order.key.clone(),
                user: order.user.clone(),
                quantity: order.quantity,
            });
            let reply = api
                .order(&self.sku, &order.user, order.quantity, &order.key)
                .await;
            let outcome = Outcome::classify(&reply);
            if let (Some(settler), OpKind::Order) = (&self.settler, kind) {
                settler.consider(&mut rng, &reply, &order.user);
            }
            match &outcome {
                // The instance or a dependency is down or busy: back off like a polite client.
                Outcome::Fail {
                    status: 0 | 503, ..
                }
                | Outcome::Info { .. } => {
                    backoff = (backoff * 2).clamp(BACKOFF_MIN_MS, BACKOFF_MAX_MS)
                }
                Outcome::Ok { .. } if kind == OpKind::Order => {
                    if acked.len() == REPLAY_WINDOW {
                        acked.remove(0);
                    }
                    acked.push(order);
                    backoff = 0;
                }
                _ => backoff = 0,
            }
            self.history.complete(id, outcome);
            if backoff > 0 {
                tokio::time::sleep(Duration::from_millis(
                    rng.random_range(backoff / 2..=backoff),
                ))
                .await;
            }
        }
    }
}
