//! The bounded load: client tasks, each pinned to one instance (so a paused instance stalls only
//! its own clients while the others keep taking over its shards), issuing orders under fresh
//! idempotency keys and now and then replaying an acknowledged one. Every operation goes into the
//! [`History`]. The load ends when stopped or when its request budget is spent.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    api::Api,
    history::{History, Invocation, OpKind, Outcome},
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
}

/// A running load.
#[derive(Debug)]
pub struct Load {
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
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
                };
                tokio::spawn(ctx.run())
            })
            .collect();
        Self { stop, workers }
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
            let outcome = Outcome::classify(
                &api.order(&self.sku, &order.user, order.quantity, &order.key)
                    .await,
            );
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
