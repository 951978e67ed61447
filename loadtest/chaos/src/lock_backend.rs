//! Where the service's shard locks live in a scenario: the suite's Redis (every scenario), or one
//! of lockkit's coordination backends (`zk://`, `etcd://`, `postgres://`), selected through
//! seckill's `SECKILL_LOCKS__URL`. The fenced `pause`, the unfenced `control` and `session-loss` run
//! against each of them.

use std::net::SocketAddr;

use crate::environment::Environment;

/// A lock backend the instances of a scenario use for their shard locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockBackend {
    /// The suite's Redis (the service's default: its Redis URL).
    Redis,
    /// ZooKeeper: ephemeral sequential nodes kept by the session.
    ZooKeeper,
    /// etcd: a key under a lease kept alive.
    Etcd,
    /// PostgreSQL: the lease table, in the suite's own PostgreSQL.
    Postgres,
}

impl LockBackend {
    /// The backends besides Redis, in suite order.
    pub const COORDINATION: [LockBackend; 3] = [Self::ZooKeeper, Self::Etcd, Self::Postgres];

    /// The tag in scenario names (`pause@zk`); Redis scenarios carry none.
    pub fn tag(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::ZooKeeper => "zk",
            Self::Etcd => "etcd",
            Self::Postgres => "postgres",
        }
    }

    /// Looks a tag up.
    pub fn parse(tag: &str) -> Option<Self> {
        [Self::Redis, Self::ZooKeeper, Self::Etcd, Self::Postgres]
            .into_iter()
            .find(|b| b.tag() == tag)
    }

    /// The lock URL the instances get, or `None` when the suite was not given this server.
    pub fn url(self, env: &Environment) -> Option<String> {
        match self {
            Self::Redis => Some(env.redis.url()),
            Self::ZooKeeper => env.config.zookeeper_url.clone(),
            Self::Etcd => env.config.etcd_url.clone(),
            Self::Postgres => Some(env.database_url()),
        }
    }

    /// The loopback server address inside `url`, for a fault proxy to stand in front of.
    pub fn server(url: &str) -> Option<SocketAddr> {
        let rest = url.split_once("://")?.1;
        let authority = rest.split(['/', ',']).next()?;
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        host_port.parse().ok()
    }

    /// `url` with its server replaced by `proxy`.
    pub fn via(url: &str, proxy: SocketAddr) -> Option<String> {
        let server = Self::server(url)?;
        Some(url.replacen(&server.to_string(), &proxy.to_string(), 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_rerouted_through_a_proxy() {
        let proxy: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(
            LockBackend::via("zk://127.0.0.1:2192/chaos", proxy).as_deref(),
            Some("zk://127.0.0.1:9/chaos")
        );
        assert_eq!(
            LockBackend::via("postgres://seckill@127.0.0.1:5441/chaos", proxy).as_deref(),
            Some("postgres://seckill@127.0.0.1:9/chaos")
        );
        assert_eq!(
            LockBackend::via("etcd://127.0.0.1:2392", proxy).as_deref(),
            Some("etcd://127.0.0.1:9")
        );
        assert_eq!(LockBackend::parse("zk"), Some(LockBackend::ZooKeeper));
    }
}
