//! PostgreSQL: the source of truth. Connections, migrations, and one file per table family.
//! Every write that protects stock goes through the `seckill_commit` function (see the
//! migration), so an order is all-or-nothing in one round trip.

mod audit;
mod error;
mod gate;
mod lifecycle;
mod live;
mod migrate;
mod orders;
mod owners;
mod sales;
mod shards;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod, Runtime};
use lockkit::Fence;
use tokio_postgres::NoTls;

pub use audit::{AUDIT, Audit};
pub use error::StoreError;
pub use gate::{GateEntry, GateWritten, ShardTruth};
pub use lifecycle::{LifecycleGuards, OrderStatus, Settled, Settlement};
pub use live::LiveSale;
pub(crate) use orders::commit_order_on;
pub use orders::{CommitError, CommitGuard, CommitPart, OrderRecord, ShardGuard};
pub use owners::{BatchOrder, BatchOutcome, BatchShard, CommittedBatch, LockOrder, OrderOutcome, OwnerWriteError};
pub use sales::{SaleSummary, ShardRow};
pub use shards::ShardRead;
pub(crate) use shards::lock_shards_for_update;

/// PostgreSQL connections with the seckill queries on them.
#[derive(Clone)]
pub struct Db {
    /// Where this handle's queries run: the general pool, or the critical one.
    pool: Pool,
    /// Reserved for work done under a shard lock, so a lock holder never queues behind requests
    /// that hold no lock: under load that convoy would stretch every lock's hold time.
    critical: Pool,
    /// The owners' batches' own connections, bounded as the critical ones. A connection is driven
    /// on the thread that made it, and only the batch thread (`owned::batch_thread`) asks this
    /// pool for one, so a batch's answer is read where its batcher runs.
    batches: Pool,
}

impl Db {
    /// Connects (lazily) with three pools, the general one (`size` connections), the one for
    /// critical sections (`critical_size`) and the owners' batches' (`critical_size` too), and
    /// applies pending migrations. Statements on the critical pool and the batches' are bounded by
    /// `critical_bound` on the server (`statement_timeout`) and on the wire (TCP user timeout,
    /// keepalives), so a lock holder never waits past its lease.
    ///
    /// The general pool is bounded too, more loosely (10 s): a statement, a write
    /// left unacknowledged on the wire, and a silent peer all end within it, so no request (and no
    /// admission permit) hangs on a connection that stopped answering. Requests bound their whole
    /// answer as well (`RequestBounds`), for what no socket option sees.
    pub async fn connect(url: &str, size: usize, critical_size: usize, critical_bound: Duration) -> Result<Self, StoreError> {
        let parsed: tokio_postgres::Config =
            url.parse().map_err(|_| StoreError::Config("DATABASE_URL is not a valid postgres URL".into()))?;
        let general = bounded_config(&parsed, GENERAL_BOUND, None);
        // A lock wait ends before the statement's own bound, so that losing to another
        // transaction reads as contention (55P03: rolled back, nothing written, the owner keeps
        // its shards) and not as a database too slow to answer (57014). With equal bounds the
        // statement timeout, which started first, always fired first.
        let lock_wait = (critical_bound * 3 / 4).max(Duration::from_millis(1));
        let critical = bounded_config(&parsed, critical_bound, Some(lock_wait));
        let pool = |config: &tokio_postgres::Config, size: usize| {
            let manager = Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
            Pool::builder(manager)
                .max_size(size)
                // The connection used last goes out first: a batcher, which sends one batch at a
                // time, keeps finding the same backend (its plans, caches and pages warm) instead
                // of cycling through every idle one. pgbench of seckill_commit_batch, batches of 3
                // orders at 200/s: 1520 and 1640 µs of PostgreSQL CPU per batch on one connection,
                // 1767 and 2310 spread over 16.
                .queue_mode(QueueMode::Lifo)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(Duration::from_secs(2)))
                .create_timeout(Some(Duration::from_secs(2)))
                .build()
                .map_err(|e| StoreError::Config(format!("database pool: {e}")))
        };
        let db = Self { pool: pool(&general, size)?, critical: pool(&critical, critical_size)?, batches: pool(&critical, critical_size)? };
        migrate::apply(&mut *db.client().await?).await?;
        Ok(db)
    }

    /// A handle whose queries use the connections reserved for lock holders.
    pub fn critical_section(&self) -> Db {
        Self { pool: self.critical.clone(), critical: self.critical.clone(), batches: self.batches.clone() }
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Whether PostgreSQL answers a trivial query.
    pub async fn ping(&self) -> bool {
        match self.client().await {
            Ok(client) => client.simple_query("SELECT 1").await.is_ok(),
            Err(_) => false,
        }
    }
}

/// The bound of a statement on the general pool (the audit, a reset, the per-request strategies'
/// transactions, reads): far above what any of them takes, far below "hangs for minutes".
const GENERAL_BOUND: Duration = Duration::from_secs(10);

/// `config` with every statement bounded by `bound` on the server (and lock waits by
/// `lock_wait`), and the connection by the same on the wire: data unacknowledged for that long,
/// or a peer silent to keepalives, ends it.
fn bounded_config(config: &tokio_postgres::Config, bound: Duration, lock_wait: Option<Duration>) -> tokio_postgres::Config {
    let mut options = format!("{} -c statement_timeout={}", config.get_options().unwrap_or_default(), bound.as_millis().max(1));
    if let Some(wait) = lock_wait {
        options.push_str(&format!(" -c lock_timeout={}", wait.as_millis().max(1)));
    }
    let mut bounded = config.clone();
    bounded.options(options.trim()).tcp_user_timeout(bound).keepalives(true).keepalives_idle(bound.max(Duration::from_secs(1)));
    bounded
}

/// A fence as read back from a `bigint` column. Only granted fences (positive) or 0 are ever
/// stored; anything below 0 reads as 0.
fn fence_from_sql(value: i64) -> Fence {
    Fence::new(value.max(0) as u64)
}
