//! PostgreSQL: the source of truth. Connections, migrations, and one file per table family.
//! Every write that protects stock goes through the `seckill_commit` function (see the
//! migration), so an order is all-or-nothing in one round trip.

mod audit;
mod migrate;
mod orders;
mod sales;
mod shards;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

pub use audit::Audit;
pub use orders::{CommitError, CommitGuard, CommitPart, OrderRecord};
pub(crate) use orders::commit_order_on;
pub(crate) use shards::lock_shards_for_update;
pub use sales::{Sale, ShardRow};
pub use shards::ShardRead;

use crate::error::ApiError;

/// PostgreSQL connections with the seckill queries on them.
#[derive(Clone)]
pub struct Db {
    /// Where this handle's queries run: the general pool, or the critical one.
    pool: Pool,
    /// Reserved for work done under a shard lock, so a lock holder never queues behind requests
    /// that hold no lock: under load that convoy would stretch every lock's hold time.
    critical: Pool,
}

impl Db {
    /// Connects (lazily) with two pools, the general one (`size` connections) and the one for
    /// critical sections (`critical_size`), and applies pending migrations.
    pub async fn connect(url: &str, size: usize, critical_size: usize) -> Result<Self, ApiError> {
        let config: tokio_postgres::Config =
            url.parse().map_err(|_| ApiError::Internal("DATABASE_URL is not a valid postgres URL".into()))?;
        let pool = |size: usize| {
            let manager = Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
            Pool::builder(manager)
                .max_size(size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(Duration::from_secs(2)))
                .create_timeout(Some(Duration::from_secs(2)))
                .build()
                .map_err(|e| ApiError::Internal(format!("database pool: {e}")))
        };
        let db = Self { pool: pool(size)?, critical: pool(critical_size)? };
        migrate::apply(&mut *db.client().await?).await?;
        Ok(db)
    }

    /// A handle whose queries use the connections reserved for lock holders.
    pub fn critical_section(&self) -> Db {
        Self { pool: self.critical.clone(), critical: self.critical.clone() }
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, ApiError> {
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
