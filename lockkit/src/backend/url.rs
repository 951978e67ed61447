//! Connection URLs: the scheme picks the backend, the rest lists its servers.
//!
//! | URL | backend |
//! |---|---|
//! | `redis://[user:password@]host:port[/db]`, `rediss://...` | one Redis (passed to redis-rs as is) |
//! | `redis+cluster://[user:password@]host:port,host:port,...` | Redis Cluster, from these seed nodes |
//! | `redlock://[user:password@]host:port,[user:password@]host:port,...` | Redlock over these masters |
//! | `redis+sentinel://[user:password@]host:port,host:port,.../master-name[/db]` | one Redis, the master that these Sentinels name |
//! | `zk://[user:password@]host:port[,host:port...][/chroot]` | ZooKeeper, locks under `chroot` (default `/`); with credentials, a digest identity that alone may touch the lock nodes |
//! | `etcd://[user:password@]host:port[,host:port...]` | etcd v3 over these endpoints |
//! | `postgres://...`, `postgresql://...` | PostgreSQL lease table (the URL goes to tokio-postgres) |
//! | `postgres+advisory://...` | PostgreSQL session advisory locks |
//!
//! `rediss+cluster://`, `redlocks://` and `rediss+sentinel://` are the same over TLS (with the
//! `tls` feature). Cluster credentials given on the first seed apply to every seed; Redlock
//! credentials are per node, as its masters are independent. Sentinel: the userinfo is the
//! master's (and its replicas'), as in redis-py's and rustis' `redis+sentinel://`; Sentinels that
//! want their own AUTH get it from the query parameters `sentinel_username` and
//! `sentinel_password` (percent-encoded, as in a userinfo), which are taken out; any other query
//! parameter goes on to the master's URL.
//!
//! One query parameter is lockkit's own and is taken out before the URL goes on:
//! `allow_eviction=true` lets a Redis backend connect to servers whose `maxmemory-policy` is not
//! `noeviction` (see `eviction`).

use crate::model::error::{Error, ErrorKind, Result};

/// A parsed connection URL. Holds credentials: never log it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum BackendUrl {
    /// One Redis: the URL itself.
    Redis(String),
    /// A Redis Cluster: one `redis://` URL per seed node.
    Cluster(Vec<String>),
    /// Independent masters for Redlock: one `redis://` URL per node.
    Redlock(Vec<String>),
    /// Sentinels and the master they name.
    Sentinel(SentinelUrl),
    /// A ZooKeeper ensemble: `host:port,host:port`, the chroot the locks live under, and the
    /// optional user and password of a digest identity.
    ZooKeeper { servers: String, chroot: String, credentials: Option<(String, String)> },
    /// etcd endpoints (`http://host:port`) and optional user and password.
    Etcd { endpoints: Vec<String>, credentials: Option<(String, String)> },
    /// PostgreSQL: a `postgres://` URL for tokio-postgres, and which kind of lock.
    Postgres { url: String, mode: PgMode },
}

/// A `redis+sentinel://` URL, parsed. Holds credentials: never log it (its `Debug` hides them).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// One `redis://` URL per Sentinel, with the Sentinels' own credentials if the URL gave some.
    pub(crate) sentinels: Vec<String>,
    /// The name the Sentinels monitor the master under (`sentinel monitor NAME ...`).
    pub(crate) service: String,
    /// `redis` or `rediss`: the master is reached like the Sentinels.
    scheme: &'static str,
    /// The master's `user:password`, as written in the URL.
    userinfo: Option<String>,
    /// What follows the master's address in its URL: `/db` and the query, or nothing.
    tail: String,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sentinel({} sentinel(s), master {:?}, credentials hidden)", self.sentinels.len(), self.service)
    }
}

impl SentinelUrl {
    /// The URL of the master that a Sentinel named at `ip`:`port`.
    pub(crate) fn master_url(&self, ip: &str, port: u16) -> String {
        let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() };
        let userinfo = self.userinfo.as_ref().map_or_else(String::new, |u| format!("{u}@"));
        format!("{}://{userinfo}{host}:{port}{}", self.scheme, self.tail)
    }
}

/// Which PostgreSQL lock a `postgres` URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PgMode {
    /// `postgres://`: rows of a lease table, timed by the server's clock, renewed by the watchdog.
    Lease,
    /// `postgres+advisory://`: session advisory locks, held while the session lives.
    Advisory,
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, servers) = match self {
            Self::Redis(_) => ("Redis", 1),
            Self::Cluster(nodes) => ("Cluster", nodes.len()),
            Self::Redlock(nodes) => ("Redlock", nodes.len()),
            Self::Sentinel(url) => ("Sentinel", url.sentinels.len()),
            Self::ZooKeeper { servers, .. } => ("ZooKeeper", servers.split(',').count()),
            Self::Etcd { endpoints, .. } => ("Etcd", endpoints.len()),
            Self::Postgres { mode: PgMode::Lease, .. } => ("Postgres", 1),
            Self::Postgres { mode: PgMode::Advisory, .. } => ("PostgresAdvisory", 1),
        };
        write!(f, "{kind}({servers} server(s), credentials hidden)")
    }
}

/// Takes lockkit's `allow_eviction` parameter out of `url`'s query: the URL without it, and
/// whether it said `true` (`1`, `yes`). Other parameters stay, in order.
pub(crate) fn take_allow_eviction(url: &str) -> Result<(String, bool)> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), false)) };
    let mut allow = false;
    let mut kept = Vec::new();
    for param in query.split('&') {
        let (name, value) = param.split_once('=').unwrap_or((param, "true"));
        if name != "allow_eviction" {
            kept.push(param);
            continue;
        }
        allow = match value {
            "true" | "1" | "yes" => true,
            "false" | "0" | "no" => false,
            _ => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("invalid lock URL: allow_eviction={value:?} (expected true or false)"),
                ));
            }
        };
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok((url, allow))
}

impl BackendUrl {
    /// Parses `url`; a config error names what is wrong without echoing credentials.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let invalid = |why: &str| Error::new(ErrorKind::Config, format!("invalid lock URL: {why}"));
        const EXPECTED: &str =
            "expected redis://, redis+cluster://, redis+sentinel://, redlock://, zk://, etcd:// or postgres://";
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid(&format!("no scheme ({EXPECTED})")))?;
        let node_scheme = match scheme {
            "redis" | "rediss" | "redis+unix" | "unix" => return Ok(Self::Redis(url.to_owned())),
            "redis+cluster" | "redlock" => "redis",
            "rediss+cluster" | "redlocks" => "rediss",
            "redis+sentinel" => return parse_sentinel("redis", rest).map(Self::Sentinel),
            "rediss+sentinel" => return parse_sentinel("rediss", rest).map(Self::Sentinel),
            "postgres" | "postgresql" => return Ok(Self::Postgres { url: url.to_owned(), mode: PgMode::Lease }),
            "postgres+advisory" | "postgresql+advisory" => {
                return Ok(Self::Postgres { url: format!("postgres://{rest}"), mode: PgMode::Advisory });
            }
            "zk" | "etcd" => scheme,
            _ => return Err(invalid(&format!("unknown scheme ({EXPECTED})"))),
        };
        if scheme == "zk" {
            // The userinfo ends at the last '@' before the hosts, so a password may hold '@' (not
            // '/' or ',').
            let (credentials, rest) = match rest.split_once('/').map_or(rest, |(hosts, _)| hosts).rsplit_once('@') {
                Some((userinfo, _)) => {
                    let (user, password) =
                        userinfo.split_once(':').ok_or_else(|| invalid("zookeeper credentials are user:password"))?;
                    if user.is_empty() || user.contains(',') {
                        return Err(invalid("an empty or malformed zookeeper user"));
                    }
                    (Some((user.to_owned(), password.to_owned())), &rest[userinfo.len() + 1..])
                }
                None => (None, rest),
            };
            let (servers, chroot) = rest.split_once('/').map_or((rest, "/"), |(servers, chroot)| (servers, chroot));
            let chroot = format!("/{}", chroot.trim_matches('/'));
            if servers.split(',').any(|host| host.trim().is_empty()) {
                return Err(invalid("an empty host in the list"));
            }
            let servers = servers.split(',').map(str::trim).collect::<Vec<_>>().join(",");
            return Ok(Self::ZooKeeper { servers, chroot, credentials });
        }
        let hosts: Vec<&str> = rest.split(',').map(str::trim).collect();
        if hosts.iter().any(|host| host.is_empty() || host.starts_with('@') || host.ends_with('@')) {
            return Err(invalid("an empty host in the list"));
        }
        if scheme == "etcd" {
            let credentials = match hosts[0].rsplit_once('@') {
                Some((credentials, _)) => {
                    let (user, password) =
                        credentials.split_once(':').ok_or_else(|| invalid("etcd credentials are user:password"))?;
                    Some((user.to_owned(), password.to_owned()))
                }
                None => None,
            };
            let endpoints = hosts
                .iter()
                .map(|host| format!("http://{}", host.rsplit_once('@').map_or(*host, |(_, address)| address)))
                .collect();
            return Ok(Self::Etcd { endpoints, credentials });
        }
        if scheme.ends_with("cluster") {
            // Credentials of the first seed apply to the seeds that give none.
            let credentials = hosts[0].rsplit_once('@').map(|(credentials, _)| credentials);
            let nodes = hosts
                .iter()
                .map(|host| match (credentials, host.contains('@')) {
                    (Some(credentials), false) => format!("{node_scheme}://{credentials}@{host}"),
                    _ => format!("{node_scheme}://{host}"),
                })
                .collect();
            Ok(Self::Cluster(nodes))
        } else {
            if hosts.len() < 3 {
                return Err(invalid("Redlock needs at least 3 independent masters (5 is usual)"));
            }
            Ok(Self::Redlock(hosts.iter().map(|host| format!("{node_scheme}://{host}")).collect()))
        }
    }

    /// The scheme, for messages.
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Self::Redis(_) => "redis://",
            Self::Cluster(_) => "redis+cluster://",
            Self::Redlock(_) => "redlock://",
            Self::Sentinel(_) => "redis+sentinel://",
            Self::ZooKeeper { .. } => "zk://",
            Self::Etcd { .. } => "etcd://",
            Self::Postgres { mode: PgMode::Lease, .. } => "postgres://",
            Self::Postgres { mode: PgMode::Advisory, .. } => "postgres+advisory://",
        }
    }

    /// The cargo feature that builds this backend (Redis backends are always built).
    pub(crate) fn feature(&self) -> &'static str {
        match self {
            Self::Redis(_) | Self::Cluster(_) | Self::Redlock(_) | Self::Sentinel(_) => "default",
            Self::ZooKeeper { .. } => "zookeeper",
            Self::Etcd { .. } => "etcd",
            Self::Postgres { .. } => "postgres",
        }
    }
}

/// Parses what follows `redis+sentinel://`: `[userinfo@]host:port,.../service[/db][?query]`.
fn parse_sentinel(scheme: &'static str, rest: &str) -> Result<SentinelUrl> {
    let invalid = |why: &str| Error::new(ErrorKind::Config, format!("invalid lock URL: {why}"));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo.to_owned()), hosts),
        None => (None, authority),
    };
    let (service, db) = path.split_once('/').unwrap_or((path, ""));
    if service.is_empty() {
        return Err(invalid("a Sentinel URL ends with the master's name: redis+sentinel://host:port,.../master-name"));
    }
    let db = db.trim_end_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return Err(invalid("the database after the master's name must be a number"));
    }
    let (mut sentinel_user, mut sentinel_password, mut kept) = (None, None, Vec::new());
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("sentinel_username", value)) => sentinel_user = Some(value),
            Some(("sentinel_password", value)) => sentinel_password = Some(value),
            _ => kept.push(param),
        }
    }
    let sentinel_auth = match (sentinel_user, sentinel_password) {
        (None, None) => String::new(),
        (user, password) => format!("{}:{}@", user.unwrap_or(""), password.unwrap_or("")),
    };
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if hosts.iter().any(|host| host.is_empty() || host.contains('@')) {
        return Err(invalid("an empty or malformed Sentinel host in the list"));
    }
    let mut tail = if db.is_empty() { String::new() } else { format!("/{db}") };
    if !kept.is_empty() {
        tail = format!("{tail}?{}", kept.join("&"));
    }
    Ok(SentinelUrl {
        sentinels: hosts.iter().map(|host| format!("{scheme}://{sentinel_auth}{host}")).collect(),
        service: service.to_owned(),
        scheme,
        userinfo,
        tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_picks_the_backend() {
        assert_eq!(BackendUrl::parse("redis://h:1/2").unwrap(), BackendUrl::Redis("redis://h:1/2".into()));
        assert_eq!(
            BackendUrl::parse("redis+cluster://u:p@a:1,b:2").unwrap(),
            BackendUrl::Cluster(vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()])
        );
        assert_eq!(
            BackendUrl::parse("redlocks://a:1, x:y@b:2,c:3").unwrap(),
            BackendUrl::Redlock(vec!["rediss://a:1".into(), "rediss://x:y@b:2".into(), "rediss://c:3".into()])
        );
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let BackendUrl::Sentinel(url) = BackendUrl::parse("redis+sentinel://u:p@a:26379, b:26380/mymaster").unwrap()
        else {
            panic!("not a Sentinel URL")
        };
        assert_eq!(url.sentinels, ["redis://a:26379", "redis://b:26380"]);
        assert_eq!(url.service, "mymaster");
        assert_eq!(url.master_url("10.0.0.5", 6379), "redis://u:p@10.0.0.5:6379");
        assert_eq!(url.master_url("::1", 6379), "redis://u:p@[::1]:6379");

        let BackendUrl::Sentinel(url) = BackendUrl::parse(
            "rediss+sentinel://a:1/m/3?sentinel_password=s%40cret&protocol=resp3&sentinel_username=sen",
        )
        .unwrap() else {
            panic!("not a Sentinel URL")
        };
        assert_eq!(url.sentinels, ["rediss://sen:s%40cret@a:1"]);
        assert_eq!(url.master_url("h", 2), "rediss://h:2/3?protocol=resp3");
        assert!(!format!("{:?}", BackendUrl::parse("redis+sentinel://u:secret@a:1/m").unwrap()).contains("secret"));
    }

    #[test]
    fn allow_eviction_is_taken_out_of_the_query() {
        assert_eq!(take_allow_eviction("redis://h:1/0").unwrap(), ("redis://h:1/0".into(), false));
        assert_eq!(take_allow_eviction("redis://h:1?allow_eviction=true").unwrap(), ("redis://h:1".into(), true));
        assert_eq!(
            take_allow_eviction("redis://h:1/0?protocol=resp3&allow_eviction=1").unwrap(),
            ("redis://h:1/0?protocol=resp3".into(), true)
        );
        assert_eq!(
            take_allow_eviction("redlock://a:1,b:2,c:3?allow_eviction=false").unwrap(),
            ("redlock://a:1,b:2,c:3".into(), false)
        );
        assert_eq!(take_allow_eviction("redis://h:1?allow_eviction=maybe").unwrap_err().kind(), ErrorKind::Config);
    }

    #[test]
    fn coordination_services_and_postgres() {
        assert_eq!(
            BackendUrl::parse("zk://a:2181, b:2181/locks/app/").unwrap(),
            BackendUrl::ZooKeeper { servers: "a:2181,b:2181".into(), chroot: "/locks/app".into(), credentials: None }
        );
        assert_eq!(
            BackendUrl::parse("zk://a:2181").unwrap(),
            BackendUrl::ZooKeeper { servers: "a:2181".into(), chroot: "/".into(), credentials: None }
        );
        assert_eq!(
            BackendUrl::parse("zk://app:p@ss@a:2181,b:2181/locks").unwrap(),
            BackendUrl::ZooKeeper {
                servers: "a:2181,b:2181".into(),
                chroot: "/locks".into(),
                credentials: Some(("app".into(), "p@ss".into()))
            }
        );
        assert!(!format!("{:?}", BackendUrl::parse("zk://u:secret@a:1").unwrap()).contains("secret"));
        assert_eq!(
            BackendUrl::parse("etcd://u:p@a:2379,b:2379").unwrap(),
            BackendUrl::Etcd {
                endpoints: vec!["http://a:2379".into(), "http://b:2379".into()],
                credentials: Some(("u".into(), "p".into()))
            }
        );
        assert_eq!(
            BackendUrl::parse("postgres+advisory://u:p@h:5/db").unwrap(),
            BackendUrl::Postgres { url: "postgres://u:p@h:5/db".into(), mode: PgMode::Advisory }
        );
        assert!(!format!("{:?}", BackendUrl::parse("etcd://u:secret@a:1").unwrap()).contains("secret"));
        assert!(!format!("{:?}", BackendUrl::parse("postgres://u:secret@a:1/d").unwrap()).contains("secret"));
    }

    #[test]
    fn bad_urls_are_config_errors_without_secrets() {
        for bad in [
            "127.0.0.1:6379",
            "memcache://h:1",
            "redlock://a:1,b:2",
            "redlock://a:1,,c:3",
            "redis+cluster://",
            "zk://a:1,,b:2/x",
            "zk://u@a:1",
            "zk://:p@a:1",
            "etcd://u@a:1",
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:1,,b:2/m",
            "redis+sentinel://a:1/m/db0",
        ] {
            let err = BackendUrl::parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{bad}");
        }
        let err = BackendUrl::parse("redlock://u:secret@a:1").unwrap_err();
        assert!(!err.to_string().contains("secret"));
        assert!(!format!("{:?}", BackendUrl::parse("redlock://u:secret@a:1,b:2,c:3").unwrap()).contains("secret"));
    }
}
