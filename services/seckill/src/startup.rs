//! Building and running the application: connect to PostgreSQL (migrating it) and Redis, bind
//! the listener (port 0 works), serve until stopped.

use std::{net::TcpListener, sync::Arc, time::Instant};

use actix_web::{App, HttpServer, dev::Server, middleware::from_fn, web};
use lockkit::LockClient;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Settings,
    inventory::Inventory,
    lab::gate::{Gate, GateSettings},
    lifecycle::{Lifecycle, SweepSettings},
    owned::{BatchSettings, OwnedShards, PlacementSettings},
    routes::{self, AdminToken, AuditGate},
    selling::{Hints, RequestBounds, ShardLocks},
    store::{Db, LifecycleGuards, LockOrder, StoreError},
    telemetry,
    traffic::Traffic,
};

/// Why the service could not start. Each keeps its cause as its `source`, so the log line shows
/// the whole chain (see [`StartupError::chain`]).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// PostgreSQL: unreachable, misconfigured, or a migration failed.
    #[error("database")]
    Store(#[from] StoreError),
    /// Redis: a bad `REDIS_URL`, or Redis unreachable.
    #[error("redis")]
    Redis(#[from] redis::RedisError),
    /// The shard locks' server (`SECKILL_LOCKS__URL`, any lockkit backend): unreachable or
    /// misconfigured.
    #[error("shard locks")]
    Locks(#[from] lockkit::Error),
    /// The listener could not be bound or started, or its address file not written.
    #[error("listen ({what})")]
    Listen {
        /// What was being done: `bind 0.0.0.0:8080`, `SECKILL_ADDRESS_FILE /path`.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A thread of the service's own (the owners' batch thread) could not be started.
    #[error("start the {name} thread")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl StartupError {
    /// The error and every cause under it, `: `-separated, for the one log line.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            text.push_str(": ");
            text.push_str(&e.to_string());
            cause = e.source();
        }
        text
    }

    fn listen(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Listen { what, source }
    }
}

/// A bound, not yet running, service instance.
pub struct Application {
    port: u16,
    server: Server,
    locks: LockClient,
    owned: Arc<OwnedShards>,
    gate: Arc<Gate>,
    /// Stops this instance's expiry sweeper.
    sweeper: CancellationToken,
}

/// How often an instance looks at idle owned shards and at other instances' requests for stock.
const PLACEMENT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Application {
    /// Connects to the dependencies and binds `settings.listen`.
    pub async fn build(settings: &Settings) -> Result<Self, StartupError> {
        // Install the recorder before lockkit starts recording.
        telemetry::prometheus();
        let db = Db::connect(settings.database_url.expose(), settings.pools.general, settings.pools.critical, settings.owner_write_bound())
            .await?;
        let redis_url = settings.redis_url.expose();
        let lock_url = settings.lock_url();
        let locks = LockClient::builder(lock_url).default_lease(settings.locks.lease).connect().await?;
        tracing::info!(backend = %locks.backend(), "shard locks connected");
        let redis = redis::Client::open(redis_url)?;
        let redis_client = redis.clone();
        let redis = redis::aio::ConnectionManager::new(redis).await?;
        let hints = Hints::new(redis.clone());
        let shard_locks = ShardLocks::new(locks.clone());
        // An order decided just before its deadline may wait for the batch in flight, its own
        // batch, and a lease renewal if its shard's lease ran short: that is its grace.
        let bounds =
            RequestBounds { deadline: settings.request_deadline, answer_grace: settings.locks.lease + 2 * settings.owner_write_bound() };
        let placement = PlacementSettings {
            instance: if settings.instance.is_empty() { format!("{:016x}", rand::random::<u64>()) } else { settings.instance.clone() },
            write_bound: settings.owner_write_bound(),
            idle_release: settings.owner.idle_release,
            interval: PLACEMENT_INTERVAL,
            owner_idle: settings.owner.idle_release.max(bounds.answer()),
            lease: settings.locks.lease,
        };
        let gate_settings = GateSettings {
            consumer: placement.instance.clone(),
            claim_idle: settings.gate.claim_idle,
            claim_interval: settings.gate.claim_interval,
            failpoint: settings.failpoint,
        };
        if let Some(failpoint) = settings.failpoint {
            tracing::warn!(?failpoint, "a test-only failpoint is enabled: this instance will fail on purpose");
        }
        let gate = Arc::new(Gate::new(gate_settings, redis_client, redis.clone(), db.clone()));
        let batches = BatchSettings {
            linger: settings.batch.linger,
            lease_margin: settings.owner.lease_margin,
            lock_order: if settings.batch.sorted_locks { LockOrder::Ascending } else { LockOrder::Arrival },
            limit_refusal_trust: settings.owner.limit_refusal_trust,
            failpoint: settings.failpoint,
        };
        let owned = OwnedShards::start(placement, batches, db.clone(), shard_locks.clone(), hints.clone(), redis)
            .map_err(|source| StartupError::Thread { name: crate::owned::BATCH_THREAD, source })?;
        let guards = LifecycleGuards { state_checked: settings.orders.expiry_checks_state, returns: settings.orders.returns };
        let lifecycle = Lifecycle::new(db.clone(), hints.clone(), guards).await?;
        let sweeper = CancellationToken::new();
        lifecycle.sweep(SweepSettings { interval: settings.orders.sweep_interval, batch: settings.orders.sweep_batch }, sweeper.clone());
        let lifecycle = web::Data::from(lifecycle);
        let inventory = web::Data::new(Inventory::new(db, hints, shard_locks, owned.clone(), gate.clone(), bounds, settings.max_in_flight));
        let admin = web::Data::new(AdminToken(settings.admin_token.clone()));
        let traffic = web::Data::new(Traffic::default());
        let audits = web::Data::new(AuditGate::default());
        let listener = TcpListener::bind(settings.listen).map_err(StartupError::listen(format!("bind {}", settings.listen)))?;
        let address = listener.local_addr().map_err(StartupError::listen("local address"))?;
        let port = address.port();
        let workers = if settings.workers == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { settings.workers };
        let server = HttpServer::new(move || {
            App::new()
                .wrap(from_fn(record_request))
                .app_data(inventory.clone())
                .app_data(lifecycle.clone())
                .app_data(admin.clone())
                .app_data(traffic.clone())
                .app_data(audits.clone())
                .configure(routes::configure)
        })
        .workers(workers)
        // Longer than the idle timeout of common client pools (and load balancers' upstream
        // keep-alive), so a client never sends on a connection we are just closing.
        .keep_alive(std::time::Duration::from_secs(75))
        // A starved worker may take seconds to read a request head; answering such a request
        // with actix's bodiless 408 would break the JSON error contract.
        .client_request_timeout(std::time::Duration::from_secs(20))
        .shutdown_timeout(10)
        .listen(listener)
        .map_err(StartupError::listen("start the server"))?
        .run();
        if let Some(file) = &settings.address_file {
            write_address(file, address).map_err(StartupError::listen(format!("SECKILL_ADDRESS_FILE {}", file.display())))?;
        }
        tracing::info!(port, workers, "seckill listening");
        Ok(Self { port, server, locks, owned, gate, sweeper })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// This instance's owned shards: what it keeps per sale ([`OwnedShards::sale_owners`]) where
    /// the gauges are those of the whole process, which may run several instances.
    pub fn owned(&self) -> Arc<OwnedShards> {
        self.owned.clone()
    }

    /// This instance's `redis-gate` gate: its own writers ([`Gate::live_writers`]), where the
    /// gauge `seckill_gate_writers` sums every instance of the process.
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    /// A handle to stop the server gracefully (drains in-flight requests).
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped (SIGINT/SIGTERM or [`handle`](Self::handle)); in-flight requests
    /// finish and release their shard locks first.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await?;
        // Every request has been answered: hand the owned shards back so others take over now.
        self.sweeper.cancel();
        self.owned.shutdown().await;
        // No durable request waits any more: the stream writers may stop after their batch.
        self.gate.shutdown().await;
        let leftover = self.locks.held_leases();
        if leftover > 0 {
            tracing::warn!(leftover, "shard locks still held at shutdown; they expire with their lease");
        }
        tracing::info!("seckill stopped");
        Ok(())
    }
}

/// Counts requests by matched route (bounded labels: the pattern, never the raw path).
async fn record_request(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method = method_label(req.method());
    let response = next.call(req).await?;
    // Read after routing, from the route the request took. Before routing, actix matched the
    // path against the patterns again (regex_lite: about a tenth of seckill's CPU at 2000
    // orders/s, `perf record` of both instances).
    let route = response.request().match_pattern().unwrap_or_else(|| "unmatched".into());
    let status = response.status().as_u16().to_string();
    metrics::counter!("seckill_http_requests_total", "route" => route.clone(), "method" => method, "status" => status).increment(1);
    metrics::histogram!("seckill_http_request_duration_seconds", "route" => route).record(started.elapsed().as_secs_f64());
    Ok(response)
}

/// The method as a metric label: the methods the API serves, and `other` for any token a client
/// invents (actix accepts every method token; a label per invented token would grow the series
/// without bound). Static, so labelling costs no allocation per request.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Writes `address` to `file` atomically: a reader sees the whole line or no file.
fn write_address(file: &std::path::Path, address: std::net::SocketAddr) -> std::io::Result<()> {
    let partial = file.with_extension("partial");
    std::fs::write(&partial, format!("{address}\n"))?;
    std::fs::rename(partial, file)
}
