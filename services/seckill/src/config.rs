//! Settings: defaults, then an optional TOML file (`SECKILL_CONFIG`), then environment variables.
//! Secrets (admin token, passwords inside URLs) are wrapped so they never reach a log line.

use std::{fmt, net::SocketAddr, path::Path, time::Duration};

use serde::Deserialize;

/// A value that must never be printed.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it is used, never to log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

/// Everything the service needs to start.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on (`SECKILL_LISTEN`); port 0 picks a free port.
    pub listen: SocketAddr,
    /// `REDIS_URL`; may carry a password (`redis://:pw@host`) or use `rediss://`.
    pub redis_url: Secret,
    /// `DATABASE_URL` (`postgres://user:password@host:port/db`).
    pub database_url: Secret,
    /// `SECKILL_LOCK_URL`: where the shard locks live, as a lockkit URL (`redis://`,
    /// `redis+cluster://`, `redlock://`, `zk://`, `etcd://`, `postgres://`,
    /// `postgres+advisory://`). Empty (the default) means the Redis URL.
    pub lock_url: Secret,
    /// Bearer token of the admin routes (`SECKILL_ADMIN_TOKEN`). Empty disables them.
    pub admin_token: Secret,
    /// How long one order may take, waiting for locks included (`SECKILL_REQUEST_DEADLINE_MS`).
    #[serde(with = "millis")]
    pub request_deadline: Duration,
    /// Lease of a shard lock; renewed by the watchdog while held (`SECKILL_LOCK_LEASE_MS`). Short,
    /// so that another instance takes an owned shard over quickly when its owner is gone.
    #[serde(with = "millis")]
    pub lock_lease: Duration,
    /// Bound of a lock holder's database statement: an owner's claim or batch commit
    /// (`SECKILL_OWNER_WRITE_TIMEOUT_MS`). Below the lease: an owner that cannot write in time
    /// gives its shards back. 0 (the default) means 40% of the lease; see
    /// [`owner_write_bound`](Self::owner_write_bound).
    #[serde(with = "millis")]
    pub owner_write_timeout: Duration,
    /// The longest an owner's batch waits for more orders before committing
    /// (`SECKILL_BATCH_LINGER_MS`; 0 commits at once). It waits only while orders arrive faster
    /// than that, and stops as soon as a full batch is pending: a lone order waits for nothing.
    #[serde(with = "millis")]
    pub batch_linger: Duration,
    /// Whether a batch takes its users and idempotency keys in ascending order
    /// (`SECKILL_BATCH_SORTED_LOCKS`, default true), so that two instances' batches that want the
    /// same rows queue instead of deadlocking. `false` is a test control: arrival order.
    pub batch_sorted_locks: bool,
    /// Whether an owner starts a batch only while its lease outlasts the write bound
    /// (`SECKILL_OWNER_LEASE_MARGIN`, default true), so no write of its lands after the lease.
    /// `false` is a test control: the fence alone then keeps late writes out.
    pub owner_lease_margin: bool,
    /// An owned shard unused this long is handed back (`SECKILL_IDLE_RELEASE_MS`).
    #[serde(with = "millis")]
    pub idle_release: Duration,
    /// PostgreSQL connections per instance for general work (`SECKILL_DB_POOL`).
    pub db_pool_size: usize,
    /// PostgreSQL connections per instance reserved for shard-lock holders
    /// (`SECKILL_DB_CRITICAL_POOL`); at least the number of shards, so no holder waits for one.
    pub db_critical_pool_size: usize,
    /// HTTP worker threads (`SECKILL_WORKERS`); 0 means one per CPU.
    pub workers: usize,
    /// Purchases processed at once per instance (`SECKILL_MAX_IN_FLIGHT`); more wait, up to their
    /// deadline, then get `503 busy`.
    pub max_in_flight: usize,
    /// This instance's name, shown as the owner of the shards it claims and used for its
    /// heartbeat (`SECKILL_INSTANCE`; unique among the instances of a deployment, at most 64
    /// printable characters). Empty (the default) picks a random one at start-up.
    pub instance: String,
    /// Where to write the bound address (`127.0.0.1:PORT`) once the listener is up
    /// (`SECKILL_ADDRESS_FILE`), so that whoever started the instance on port 0 finds it without
    /// reading the log. Written atomically (a temporary file renamed). Empty: not written.
    pub address_file: Option<std::path::PathBuf>,
    /// `redis-gate`: stream entries unacknowledged this long are claimed by another consumer, and
    /// orders in flight this long count as dead for reconciliation (`SECKILL_GATE_CLAIM_IDLE_MS`).
    #[serde(with = "millis")]
    pub gate_claim_idle: Duration,
    /// `redis-gate`: how often each stream consumer looks for such entries
    /// (`SECKILL_GATE_CLAIM_INTERVAL_MS`).
    #[serde(with = "millis")]
    pub gate_claim_interval: Duration,
    /// **Test only**: a failpoint that makes the process fail on purpose (`SECKILL_FAILPOINT`).
    /// Never set it in production.
    pub failpoint: Option<Failpoint>,
}

/// A failpoint: a place where the process fails on purpose, for tests and the chaos suite only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failpoint {
    /// `gate-after-decrement`: a `redis-gate` order aborts the process (as `kill -9` would) right
    /// after the Lua script that decided and enqueued it, before the answer: the order is in the
    /// stream, and no client heard of it.
    GateAfterDecrement,
    /// `gate-pause-after-decrement`: at the same place the process stops itself (`SIGSTOP`), as a
    /// long pause would (GC, swap, a frozen VM); whoever started it resumes it with `SIGCONT`.
    GatePauseAfterDecrement,
    /// `hold-batch-answers`: an owner's batcher holds each batch's answer, once PostgreSQL has
    /// given it, until the test calls [`crate::failpoint::release_batch_answers`]: the window in
    /// which a shard can be lost and claimed again while the answer is on its way.
    HoldBatchAnswers,
    /// `panic-after-batch-commit`: the first batch an owner commits makes its batcher panic once
    /// PostgreSQL has committed it, before any of its orders is answered (a bug past the commit).
    PanicAfterBatchCommit,
}

impl std::str::FromStr for Failpoint {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "gate-after-decrement" => Ok(Self::GateAfterDecrement),
            "gate-pause-after-decrement" => Ok(Self::GatePauseAfterDecrement),
            "hold-batch-answers" => Ok(Self::HoldBatchAnswers),
            "panic-after-batch-commit" => Ok(Self::PanicAfterBatchCommit),
            _ => Err(ConfigError(
                "SECKILL_FAILPOINT must be gate-after-decrement, gate-pause-after-decrement, hold-batch-answers or \
                 panic-after-batch-commit (tests only)"
                    .into(),
            )),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            redis_url: Secret::new("redis://127.0.0.1:6390"),
            database_url: Secret::new("postgres://seckill@127.0.0.1:5440/seckill"),
            lock_url: Secret::default(),
            admin_token: Secret::default(),
            request_deadline: Duration::from_secs(2),
            lock_lease: Duration::from_secs(2),
            owner_write_timeout: Duration::ZERO,
            idle_release: Duration::from_millis(500),
            batch_linger: Duration::from_millis(5),
            owner_lease_margin: true,
            batch_sorted_locks: true,
            db_pool_size: 16,
            db_critical_pool_size: 32,
            workers: 0,
            max_in_flight: 256,
            instance: String::new(),
            address_file: None,
            gate_claim_idle: Duration::from_secs(5),
            gate_claim_interval: Duration::from_secs(1),
            failpoint: None,
        }
    }
}

/// A setting that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(String);

impl Settings {
    /// The lockkit URL of the shard locks: `SECKILL_LOCK_URL`, or the Redis URL when it is empty.
    pub fn lock_url(&self) -> &str {
        if self.lock_url.expose().is_empty() { self.redis_url.expose() } else { self.lock_url.expose() }
    }

    /// The bound of an owner's database writes: the configured one, or 40% of the lease.
    pub fn owner_write_bound(&self) -> Duration {
        if self.owner_write_timeout.is_zero() { self.lock_lease * 2 / 5 } else { self.owner_write_timeout }
    }

    /// Defaults, then the file named by `SECKILL_CONFIG` (if set), then environment variables.
    pub fn load() -> Result<Self, ConfigError> {
        let base = match std::env::var("SECKILL_CONFIG") {
            Ok(path) => Self::from_file(Path::new(&path))?,
            Err(_) => Self::default(),
        };
        base.with_env(|name| std::env::var(name).ok())
    }

    /// Reads a TOML file; keys are the field names (`listen`, `redis_url`, `request_deadline = 2000`, ...).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// Applies environment overrides read through `var`.
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ConfigError> {
            value.parse().map_err(|_| ConfigError(format!("{name} has an invalid value")))
        }
        if let Some(v) = var("SECKILL_LISTEN") {
            self.listen = parse("SECKILL_LISTEN", &v)?;
        }
        if let Some(v) = var("REDIS_URL") {
            self.redis_url = Secret::new(v);
        }
        if let Some(v) = var("DATABASE_URL") {
            self.database_url = Secret::new(v);
        }
        if let Some(v) = var("SECKILL_LOCK_URL") {
            self.lock_url = Secret::new(v);
        }
        if let Some(v) = var("SECKILL_ADMIN_TOKEN") {
            self.admin_token = Secret::new(v);
        }
        if let Some(v) = var("SECKILL_REQUEST_DEADLINE_MS") {
            self.request_deadline = Duration::from_millis(parse("SECKILL_REQUEST_DEADLINE_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_LOCK_LEASE_MS") {
            self.lock_lease = Duration::from_millis(parse("SECKILL_LOCK_LEASE_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_OWNER_WRITE_TIMEOUT_MS") {
            self.owner_write_timeout = Duration::from_millis(parse("SECKILL_OWNER_WRITE_TIMEOUT_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_BATCH_LINGER_MS") {
            self.batch_linger = Duration::from_millis(parse("SECKILL_BATCH_LINGER_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_BATCH_SORTED_LOCKS") {
            self.batch_sorted_locks = parse("SECKILL_BATCH_SORTED_LOCKS", &v)?;
        }
        if let Some(v) = var("SECKILL_OWNER_LEASE_MARGIN") {
            self.owner_lease_margin = parse("SECKILL_OWNER_LEASE_MARGIN", &v)?;
        }
        if let Some(v) = var("SECKILL_IDLE_RELEASE_MS") {
            self.idle_release = Duration::from_millis(parse("SECKILL_IDLE_RELEASE_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_DB_POOL") {
            self.db_pool_size = parse("SECKILL_DB_POOL", &v)?;
        }
        if let Some(v) = var("SECKILL_DB_CRITICAL_POOL") {
            self.db_critical_pool_size = parse("SECKILL_DB_CRITICAL_POOL", &v)?;
        }
        if let Some(v) = var("SECKILL_INSTANCE") {
            if v.len() > 64 || v.chars().any(char::is_control) {
                return Err(ConfigError("SECKILL_INSTANCE must be at most 64 printable characters".into()));
            }
            self.instance = v;
        }
        if let Some(v) = var("SECKILL_ADDRESS_FILE") {
            self.address_file = (!v.is_empty()).then(|| v.into());
        }
        if let Some(v) = var("SECKILL_GATE_CLAIM_IDLE_MS") {
            self.gate_claim_idle = Duration::from_millis(parse("SECKILL_GATE_CLAIM_IDLE_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_GATE_CLAIM_INTERVAL_MS") {
            self.gate_claim_interval = Duration::from_millis(parse("SECKILL_GATE_CLAIM_INTERVAL_MS", &v)?);
        }
        if let Some(v) = var("SECKILL_FAILPOINT").filter(|v| !v.is_empty()) {
            self.failpoint = Some(v.parse()?);
        }
        if let Some(v) = var("SECKILL_WORKERS") {
            self.workers = parse("SECKILL_WORKERS", &v)?;
        }
        if let Some(v) = var("SECKILL_MAX_IN_FLIGHT") {
            self.max_in_flight = parse("SECKILL_MAX_IN_FLIGHT", &v)?;
        }
        if self.lock_lease < Duration::from_millis(100)
            || self.request_deadline.is_zero()
            || self.db_pool_size == 0
            || self.db_critical_pool_size == 0
            || self.max_in_flight == 0
            || self.gate_claim_interval.is_zero()
        {
            return Err(ConfigError("lock lease must be >= 100 ms, deadline and pool size positive".into()));
        }
        if self.owner_write_timeout >= self.lock_lease {
            return Err(ConfigError("the owner write timeout must be below the lock lease".into()));
        }
        Ok(self)
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("seckill-config-{}", std::process::id()));
        std::fs::write(&dir, "listen = \"127.0.0.1:9000\"\nrequest_deadline = 1500\nadmin_token = \"from-file\"\n").unwrap();
        let from_file = Settings::from_file(&dir).unwrap();
        let env = |name: &str| (name == "SECKILL_ADMIN_TOKEN").then(|| "from-env".to_string());

        let settings = from_file.with_env(env).unwrap();

        assert_eq!(settings.listen.port(), 9000);
        assert_eq!(settings.request_deadline, Duration::from_millis(1500));
        assert_eq!(settings.admin_token.expose(), "from-env");
        assert_eq!(settings.lock_lease, Settings::default().lock_lease);
        std::fs::remove_file(dir).unwrap();
    }

    #[test]
    fn secrets_never_print() {
        let settings =
            Settings { admin_token: Secret::new("hunter2"), database_url: Secret::new("postgres://u:pw@h/db"), ..Settings::default() };
        let printed = format!("{settings:?}");
        assert!(!printed.contains("hunter2") && !printed.contains("pw@"));
    }

    #[test]
    fn the_failpoint_is_off_unless_named() {
        assert_eq!(Settings::default().failpoint, None);
        let env = |name: &str| (name == "SECKILL_FAILPOINT").then(|| "gate-after-decrement".to_string());
        assert_eq!(Settings::default().with_env(env).unwrap().failpoint, Some(Failpoint::GateAfterDecrement));
        let env = |name: &str| (name == "SECKILL_FAILPOINT").then(|| "everywhere".to_string());
        assert!(Settings::default().with_env(env).is_err());
    }

    #[test]
    fn shard_locks_follow_the_redis_url_unless_a_lock_url_is_given() {
        assert_eq!(Settings::default().lock_url(), "redis://127.0.0.1:6390");
        let env = |name: &str| (name == "SECKILL_LOCK_URL").then(|| "etcd://u:pw@127.0.0.1:2389".to_string());
        let settings = Settings::default().with_env(env).unwrap();
        assert_eq!(settings.lock_url(), "etcd://u:pw@127.0.0.1:2389");
        assert!(!format!("{settings:?}").contains("pw@"));
    }

    #[test]
    fn an_empty_address_file_is_none() {
        let env = |name: &str| (name == "SECKILL_ADDRESS_FILE").then(String::new);
        assert_eq!(Settings::default().with_env(env).unwrap().address_file, None);
        let env = |name: &str| (name == "SECKILL_ADDRESS_FILE").then(|| "/tmp/a".to_string());
        assert_eq!(Settings::default().with_env(env).unwrap().address_file, Some("/tmp/a".into()));
    }

    #[test]
    fn bad_values_are_refused() {
        let env = |name: &str| (name == "SECKILL_LOCK_LEASE_MS").then(|| "nope".to_string());
        assert!(Settings::default().with_env(env).is_err());
    }
}
