//! What every scenario shares: the suite's own Redis and PostgreSQL (on their own ports, under
//! `.run/chaos/`, never the project's 6390 / 5440), a fresh database, the `seckill` binary, and
//! where logs and pid files go.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::{
    processes::{
        PidFiles,
        postgres::{self, PostgresServer},
        redis::RedisServer,
        seckill::{Instance, InstanceSpec},
    },
    progress,
    settings::Budget,
};

/// The database the suite creates afresh on every run.
const DATABASE: &str = "chaos";

/// Where and with what the suite runs.
#[derive(Debug, Clone)]
pub struct EnvConfig {
    /// Working directory for servers, logs, pid files (`.run/chaos`).
    pub work_dir: PathBuf,
    /// Port of the suite's Redis.
    pub redis_port: u16,
    /// Port of the suite's PostgreSQL.
    pub pg_port: u16,
    /// The `seckill` binary under test.
    pub seckill_bin: PathBuf,
    /// The `st` (schemathesis) executable, if installed.
    pub schemathesis: Option<PathBuf>,
    /// `zk://` URL of a ZooKeeper for the `@zk` scenarios (`None`: they are not applicable).
    pub zookeeper_url: Option<String>,
    /// `etcd://` URL of an etcd for the `@etcd` scenarios (`None`: they are not applicable).
    pub etcd_url: Option<String>,
}

/// The running shared servers.
#[derive(Debug)]
pub struct Environment {
    /// How it was configured.
    pub config: EnvConfig,
    /// The suite's Redis.
    pub redis: RedisServer,
    /// The suite's PostgreSQL.
    pub postgres: PostgresServer,
    /// Pid files of everything started.
    pub pids: PidFiles,
}

impl Environment {
    /// Starts Redis and PostgreSQL and creates a fresh database.
    pub async fn start(config: EnvConfig) -> Result<Self> {
        anyhow::ensure!(
            config.seckill_bin.is_file(),
            "seckill binary {} not found (build it first)",
            config.seckill_bin.display()
        );
        let pids = PidFiles::new(&config.work_dir.join("pids"))?;
        progress!("starting redis on 127.0.0.1:{}", config.redis_port);
        let redis =
            RedisServer::start(config.redis_port, &config.work_dir.join("redis"), &pids).await?;
        progress!("starting postgres on 127.0.0.1:{}", config.pg_port);
        let postgres =
            PostgresServer::start(config.pg_port, &config.work_dir.join("pg"), &pids).await?;
        postgres
            .recreate_database(DATABASE)
            .await
            .context("create the chaos database")?;
        Ok(Self {
            config,
            redis,
            postgres,
            pids,
        })
    }

    /// `DATABASE_URL` of the suite's database.
    pub fn database_url(&self) -> String {
        self.postgres.url(DATABASE)
    }

    /// A direct connection to the suite's database.
    pub async fn db(&self) -> Result<tokio_postgres::Client> {
        postgres::connect(&self.database_url()).await
    }

    /// Where instance logs go.
    pub fn log_dir(&self) -> PathBuf {
        self.config.work_dir.join("logs")
    }

    /// The working directory.
    pub fn work_dir(&self) -> &Path {
        &self.config.work_dir
    }

    /// An instance named `name` talking to the suite's Redis directly.
    pub fn instance_spec(&self, name: &str, budget: &Budget) -> InstanceSpec {
        InstanceSpec {
            name: name.to_owned(),
            redis_url: self.redis.url(),
            lock_url: None,
            database_url: self.database_url(),
            service: budget.service.clone(),
            env: Vec::new(),
            port: None,
        }
    }

    /// Starts an instance per `spec`; `label` (the scenario) names its log file.
    pub async fn start_instance(&self, spec: &InstanceSpec, label: &str) -> Result<Instance> {
        Instance::start(
            &self.config.seckill_bin,
            spec,
            label,
            &self.log_dir(),
            &self.pids,
        )
        .await
    }

    /// Brings back whatever a scenario left down: Redis and PostgreSQL running.
    pub async fn heal(&mut self) -> Result<()> {
        if !self.redis.is_running() {
            self.redis.restart().await?;
        }
        if !self.postgres.is_running() {
            self.postgres.restart().await?;
        }
        Ok(())
    }

    /// Stops both servers.
    pub async fn stop(mut self) -> Result<()> {
        let redis = self.redis.stop().await;
        let pg = self.postgres.stop_fast().await;
        redis.and(pg)
    }
}
