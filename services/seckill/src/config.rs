//! Settings: defaults, then an optional TOML file (`SECKILL_CONFIG`), then environment variables,
//! merged by figment. Every key has one environment variable, derived from it: `SECKILL_` and the
//! key's path in capitals, sections joined by `__` (`batch.linger_ms` is
//! `SECKILL_BATCH__LINGER_MS`); `REDIS_URL` and `DATABASE_URL` are also read unprefixed, as most
//! tools spell them. Secrets (admin token, passwords inside URLs) are wrapped so they never reach
//! a log line. The table of settings in docs/api.md is generated from this file's docs (see
//! `settings_doc`).

use std::{fmt, net::SocketAddr, path::PathBuf, time::Duration};

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};

use crate::domain::ReturnPath;

/// A value that must never be printed.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(#[serde(deserialize_with = "text")] String);

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
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Redis, for the hints and `redis-gate` (also read as `REDIS_URL`); may carry a password
    /// (`redis://:pw@host`) or use `rediss://`.
    pub redis_url: Secret,
    /// PostgreSQL, `postgres://user:password@host:port/db` (also read as `DATABASE_URL`).
    pub database_url: Secret,
    /// Bearer token of the admin routes. Empty disables them.
    pub admin_token: Secret,
    /// This instance's name, shown as the owner of the shards it claims and used for its
    /// heartbeat (unique among the instances of a deployment, at most 64 printable characters).
    /// Empty picks a random one at start-up.
    #[serde(deserialize_with = "text")]
    pub instance: String,
    /// Where to write the bound address (`127.0.0.1:PORT`) once the listener is up, so that
    /// whoever started the instance on port 0 finds it without reading the log. Written
    /// atomically (a temporary file renamed). Unset or empty: not written.
    #[serde(deserialize_with = "empty_is_none")]
    pub address_file: Option<PathBuf>,
    /// HTTP worker threads; 0 means one per CPU.
    pub workers: usize,
    /// Purchases processed at once; more wait, up to their deadline, then get `503 busy`.
    pub max_in_flight: usize,
    /// How long one order may take, waiting for locks included.
    #[serde(rename = "request_deadline_ms", with = "millis")]
    pub request_deadline: Duration,
    /// The shard locks.
    pub locks: Locks,
    /// What an owner of shards may do (`owned-shards`).
    pub owner: Owner,
    /// An owner's batches (`owned-shards`).
    pub batch: Batch,
    /// PostgreSQL connections per instance.
    pub pools: Pools,
    /// `redis-gate`'s stream consumers.
    pub gate: Gate,
    /// The order lifecycle: expiry, and how returned units reach the stock.
    pub orders: Orders,
    /// **Test only**: a failpoint that makes the process fail on purpose. Never set it in
    /// production.
    pub failpoint: Option<Failpoint>,
}

/// The shard locks.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Locks {
    /// Where they live, as a lockkit URL (`redis://`, `redis+sentinel://`, `redis+cluster://`, `redlock://`, `zk://`,
    /// `etcd://`, `postgres://`, `postgres+advisory://`). Empty means the Redis URL.
    pub url: Secret,
    /// Lease of a shard lock, renewed by the watchdog while held. Short, so that another instance
    /// takes an owned shard over quickly when its owner is gone; at least 100 ms.
    #[serde(rename = "lease_ms", with = "millis")]
    pub lease: Duration,
}

/// What an owner of shards may do.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Owner {
    /// Bound of an owner's database statement (a claim or a batch commit), below the lease: an
    /// owner that cannot write in time gives its shards back. 0 means 40% of the lease.
    #[serde(rename = "write_timeout_ms", with = "millis")]
    pub write_timeout: Duration,
    /// Whether a batch starts only while its owner's lease outlasts the write bound, so no write
    /// of its lands after the lease. `false` is a test control: the fence alone then keeps late
    /// writes out.
    pub lease_margin: bool,
    /// An owned shard unused this long is handed back.
    #[serde(rename = "idle_release_ms", with = "millis")]
    pub idle_release: Duration,
    /// How long a buyer that PostgreSQL refused for the per-user limit is refused again from
    /// memory, without a batch (0: never). A cancelled or expired order gives the buyer units
    /// back, which a refusal from memory does not see for up to this long.
    #[serde(rename = "limit_refusal_trust_ms", with = "millis")]
    pub limit_refusal_trust: Duration,
}

/// An owner's batches.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Batch {
    /// The longest an order waits in a lingering batch for more orders before it is committed (0
    /// commits at once). A batch waits only while orders arrive faster than that, and stops as
    /// soon as a full batch is pending: a lone order waits for nothing.
    #[serde(rename = "linger_ms", with = "millis")]
    pub linger: Duration,
    /// Whether a batch takes its users and idempotency keys in ascending order, so that two
    /// instances' batches that want the same rows queue instead of deadlocking. `false` is a test
    /// control: arrival order.
    pub sorted_locks: bool,
}

/// PostgreSQL connections per instance.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Pools {
    /// For general work.
    pub general: usize,
    /// Reserved for shard-lock holders; at least the number of shards, so no holder waits for one.
    /// The owners' batches have a pool of this size of their own.
    pub critical: usize,
}

/// `redis-gate`'s stream consumers.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Gate {
    /// Stream entries unacknowledged this long are claimed by another consumer, and orders in
    /// flight this long count as dead for reconciliation.
    #[serde(rename = "claim_idle_ms", with = "millis")]
    pub claim_idle: Duration,
    /// How often each consumer looks for such entries.
    #[serde(rename = "claim_interval_ms", with = "millis")]
    pub claim_interval: Duration,
}

/// The order lifecycle.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Orders {
    /// How often this instance's sweeper expires orders whose payment window has closed (every
    /// instance runs one; they share the work).
    #[serde(rename = "sweep_interval_ms", with = "millis")]
    pub sweep_interval: Duration,
    /// Most orders one sweep statement expires; a full round is followed by another at once.
    pub sweep_batch: u32,
    /// Whether ending an order requires it to be reserved. `false` is a test control: expiry then
    /// also ends paid orders, and their units are sold twice.
    pub expiry_checks_state: bool,
    /// How returned units reach the stock: `through-owner`, or `direct`, the test control that
    /// adds them to the shard outside its owner, where the owner's next write loses them.
    pub returns: ReturnPath,
}

/// A failpoint: a place where the process fails on purpose, for tests and the chaos suite only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
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
    /// given it, until the test calls [`crate::lab::failpoint::release_batch_answers`]: the window in
    /// which a shard can be lost and claimed again while the answer is on its way.
    HoldBatchAnswers,
    /// `panic-after-batch-commit`: the first batch an owner commits makes its batcher panic once
    /// PostgreSQL has committed it, before any of its orders is answered (a bug past the commit).
    PanicAfterBatchCommit,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            redis_url: Secret::new("redis://127.0.0.1:6390"),
            database_url: Secret::new("postgres://seckill@127.0.0.1:5440/seckill"),
            admin_token: Secret::default(),
            instance: String::new(),
            address_file: None,
            workers: 0,
            max_in_flight: 256,
            request_deadline: Duration::from_secs(2),
            locks: Locks::default(),
            owner: Owner::default(),
            batch: Batch::default(),
            pools: Pools::default(),
            gate: Gate::default(),
            orders: Orders::default(),
            failpoint: None,
        }
    }
}

impl Default for Locks {
    fn default() -> Self {
        Self { url: Secret::default(), lease: Duration::from_secs(2) }
    }
}

impl Default for Owner {
    fn default() -> Self {
        Self {
            write_timeout: Duration::ZERO,
            lease_margin: true,
            idle_release: Duration::from_millis(500),
            limit_refusal_trust: Duration::from_millis(500),
        }
    }
}

impl Default for Batch {
    fn default() -> Self {
        Self { linger: Duration::from_millis(15), sorted_locks: true }
    }
}

impl Default for Pools {
    fn default() -> Self {
        Self { general: 16, critical: 32 }
    }
}

impl Default for Orders {
    fn default() -> Self {
        Self { sweep_interval: Duration::from_secs(1), sweep_batch: 500, expiry_checks_state: true, returns: ReturnPath::ThroughOwner }
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self { claim_idle: Duration::from_secs(5), claim_interval: Duration::from_secs(1) }
    }
}

/// A setting that could not be read or is out of range; says which one and why.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(String);

/// Variables with the `SECKILL_` prefix that are not settings: the file to read, and the names the
/// project's own scripts use for themselves.
const NOT_SETTINGS: [&str; 4] = ["CONFIG", "BIN", "STOP_TIMEOUT", "RUST_LOG"];

impl Settings {
    /// The lockkit URL of the shard locks: `locks.url`, or the Redis URL when it is empty.
    pub fn lock_url(&self) -> &str {
        if self.locks.url.expose().is_empty() { self.redis_url.expose() } else { self.locks.url.expose() }
    }

    /// The bound of an owner's database writes: the configured one, or 40% of the lease.
    pub fn owner_write_bound(&self) -> Duration {
        if self.owner.write_timeout.is_zero() { self.locks.lease * 2 / 5 } else { self.owner.write_timeout }
    }

    /// Defaults, then the TOML file named by `SECKILL_CONFIG` (if set), then the environment;
    /// checked. An unknown key, in the file or as a `SECKILL_` variable, is an error.
    pub fn load() -> Result<Self, ConfigError> {
        let settings: Settings = Self::figment().extract().map_err(|e| ConfigError(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Where settings come from, in order: the defaults, the `SECKILL_CONFIG` file, `REDIS_URL`
    /// and `DATABASE_URL`, then every `SECKILL_` variable (`__` separates sections).
    pub fn figment() -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Ok(path) = std::env::var("SECKILL_CONFIG") {
            figment = figment.merge(Toml::file_exact(path));
        }
        figment.merge(Env::raw().only(&["REDIS_URL", "DATABASE_URL"])).merge(Env::prefixed("SECKILL_").split("__").ignore(&NOT_SETTINGS))
    }

    /// Refuses values that are well-formed but unusable, naming the setting.
    fn validate(&self) -> Result<(), ConfigError> {
        let refuse = |key: &str, why: &str| Err(ConfigError(format!("{key} ({}) {why}", env_name(key))));
        if self.locks.lease < Duration::from_millis(100) {
            return refuse("locks.lease_ms", "must be at least 100");
        }
        if self.owner.write_timeout >= self.locks.lease {
            return refuse("owner.write_timeout_ms", "must be below locks.lease_ms");
        }
        if self.request_deadline.is_zero() {
            return refuse("request_deadline_ms", "must be positive");
        }
        if self.gate.claim_interval.is_zero() {
            return refuse("gate.claim_interval_ms", "must be positive");
        }
        if self.orders.sweep_interval.is_zero() {
            return refuse("orders.sweep_interval_ms", "must be positive");
        }
        if self.orders.sweep_batch == 0 {
            return refuse("orders.sweep_batch", "must be positive");
        }
        for (key, value) in
            [("pools.general", self.pools.general), ("pools.critical", self.pools.critical), ("max_in_flight", self.max_in_flight)]
        {
            if value == 0 {
                return refuse(key, "must be positive");
            }
        }
        if self.instance.len() > 64 || self.instance.chars().any(char::is_control) {
            return refuse("instance", "must be at most 64 printable characters");
        }
        Ok(())
    }
}

/// The environment variable of a setting's key: `batch.linger_ms` is `SECKILL_BATCH__LINGER_MS`.
pub fn env_name(key: &str) -> String {
    format!("SECKILL_{}", key.replace('.', "__").to_ascii_uppercase())
}

/// Reads a text setting that the environment may spell as a number or a boolean (figment parses
/// `SECKILL_ADMIN_TOKEN=12345` as an integer).
fn text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("text")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(Text)
}

/// An unset or empty path is none.
fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|p| !p.is_empty()).map(PathBuf::from))
}

/// Durations are whole milliseconds in files and the environment (keys end in `_ms`).
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
// figment's `Jail` closures return its large error type; only the tests use them.
#[allow(clippy::result_large_err)]
mod tests {
    use figment::Jail;

    use super::*;

    /// Runs `check` on what [`Settings::load`] makes of a clean environment plus `vars`.
    fn load_with(vars: &[(&str, &str)], check: impl FnOnce(Result<Settings, ConfigError>)) {
        Jail::expect_with(|jail| {
            jail.clear_env();
            for (name, value) in vars {
                jail.set_env(name, value);
            }
            check(Settings::load());
            Ok(())
        });
    }

    #[test]
    fn environment_overrides_file_which_overrides_defaults() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.create_file(
                "seckill.toml",
                "listen = \"127.0.0.1:9000\"\nrequest_deadline_ms = 1500\nadmin_token = \"from-file\"\n[batch]\nlinger_ms = 7\n",
            )?;
            jail.set_env("SECKILL_CONFIG", "seckill.toml");
            jail.set_env("SECKILL_ADMIN_TOKEN", "from-env");
            jail.set_env("SECKILL_BATCH__SORTED_LOCKS", "false");
            jail.set_env("DATABASE_URL", "postgres://u@h/db");
            let settings = Settings::load().unwrap();
            assert_eq!(settings.listen.port(), 9000);
            assert_eq!(settings.request_deadline, Duration::from_millis(1500));
            assert_eq!(settings.admin_token.expose(), "from-env");
            assert_eq!(settings.batch, Batch { linger: Duration::from_millis(7), sorted_locks: false });
            assert_eq!(settings.database_url.expose(), "postgres://u@h/db");
            assert_eq!(settings.locks.lease, Settings::default().locks.lease);
            Ok(())
        });
    }

    #[test]
    fn env_names_come_from_the_keys() {
        assert_eq!(env_name("batch.linger_ms"), "SECKILL_BATCH__LINGER_MS");
        assert_eq!(env_name("max_in_flight"), "SECKILL_MAX_IN_FLIGHT");
        load_with(&[("SECKILL_POOLS__GENERAL", "3"), ("SECKILL_OWNER__IDLE_RELEASE_MS", "900")], |s| {
            let s = s.unwrap();
            assert_eq!((s.pools.general, s.owner.idle_release), (3, Duration::from_millis(900)));
        });
    }

    #[test]
    fn secrets_never_print_and_may_look_like_numbers() {
        let settings =
            Settings { admin_token: Secret::new("hunter2"), database_url: Secret::new("postgres://u:pw@h/db"), ..Settings::default() };
        let printed = format!("{settings:?}");
        assert!(!printed.contains("hunter2") && !printed.contains("pw@"));
        load_with(&[("SECKILL_ADMIN_TOKEN", "12345"), ("SECKILL_INSTANCE", "7")], |s| {
            let s = s.unwrap();
            assert_eq!((s.admin_token.expose(), s.instance.as_str()), ("12345", "7"));
        });
    }

    #[test]
    fn the_failpoint_is_off_unless_named() {
        load_with(&[], |s| assert_eq!(s.unwrap().failpoint, None));
        load_with(&[("SECKILL_FAILPOINT", "gate-after-decrement")], |s| {
            assert_eq!(s.unwrap().failpoint, Some(Failpoint::GateAfterDecrement));
        });
        load_with(&[("SECKILL_FAILPOINT", "everywhere")], |s| {
            let e = s.unwrap_err().to_string();
            assert!(e.contains("FAILPOINT") && e.contains("gate-after-decrement"), "{e}");
        });
    }

    #[test]
    fn shard_locks_follow_the_redis_url_unless_a_lock_url_is_given() {
        assert_eq!(Settings::default().lock_url(), "redis://127.0.0.1:6390");
        load_with(&[("SECKILL_LOCKS__URL", "etcd://u:pw@127.0.0.1:2389")], |s| {
            let s = s.unwrap();
            assert_eq!(s.lock_url(), "etcd://u:pw@127.0.0.1:2389");
            assert!(!format!("{s:?}").contains("pw@"));
        });
    }

    #[test]
    fn an_empty_address_file_is_none() {
        load_with(&[("SECKILL_ADDRESS_FILE", "")], |s| assert_eq!(s.unwrap().address_file, None));
        load_with(&[("SECKILL_ADDRESS_FILE", "/tmp/a")], |s| assert_eq!(s.unwrap().address_file, Some("/tmp/a".into())));
    }

    #[test]
    fn a_bad_value_names_its_setting() {
        load_with(&[("SECKILL_LOCKS__LEASE_MS", "nope")], |s| {
            let e = s.unwrap_err().to_string();
            assert!(e.contains("LOCKS.LEASE_MS") && e.contains("SECKILL_"), "{e}");
        });
        load_with(&[("SECKILL_LOCKS__LEASE_MS", "50")], |s| {
            let e = s.unwrap_err().to_string();
            assert!(e.contains("locks.lease_ms (SECKILL_LOCKS__LEASE_MS) must be at least 100"), "{e}");
        });
        load_with(&[("SECKILL_LOCKS__LEASE_MS", "1000"), ("SECKILL_OWNER__WRITE_TIMEOUT_MS", "1000")], |s| {
            assert!(s.unwrap_err().to_string().contains("owner.write_timeout_ms"));
        });
        load_with(&[("SECKILL_POOLS__CRITICAL", "0")], |s| assert!(s.unwrap_err().to_string().contains("pools.critical")));
        let long = "x".repeat(65);
        load_with(&[("SECKILL_INSTANCE", long.as_str())], |s| assert!(s.unwrap_err().to_string().contains("instance")));
    }

    #[test]
    fn an_unknown_variable_is_refused_but_the_scripts_own_are_not() {
        load_with(&[("SECKILL_BATCH__LINGER", "5")], |s| {
            let e = s.unwrap_err().to_string();
            assert!(e.contains("linger"), "a typo is refused: {e}");
        });
        load_with(&[("SECKILL_BIN", "/usr/bin/seckill"), ("SECKILL_STOP_TIMEOUT", "5")], |s| assert!(s.is_ok()));
    }
}
