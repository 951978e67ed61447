//! Connection URLs: the scheme picks the backend, the rest lists its servers.
//!
//! | URL | backend |
//! |---|---|
//! | `redis://[user:password@]host:port[/db]`, `rediss://...` | one Redis (passed to redis-rs as is) |
//! | `redis+cluster://[user:password@]host:port,host:port,...` | Redis Cluster, from these seed nodes |
//! | `redlock://[user:password@]host:port,[user:password@]host:port,...` | Redlock over these masters |
//!
//! `rediss+cluster://` and `redlocks://` are the same over TLS (with the `tls` feature). Cluster
//! credentials given on the first seed apply to every seed; Redlock credentials are per node, as
//! its masters are independent.

use crate::error::{Error, ErrorKind, Result};

/// A parsed connection URL. Holds credentials: never log it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum BackendUrl {
    /// One Redis: the URL itself.
    Redis(String),
    /// A Redis Cluster: one `redis://` URL per seed node.
    Cluster(Vec<String>),
    /// Independent masters for Redlock: one `redis://` URL per node.
    Redlock(Vec<String>),
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, servers) = match self {
            Self::Redis(_) => ("Redis", 1),
            Self::Cluster(nodes) => ("Cluster", nodes.len()),
            Self::Redlock(nodes) => ("Redlock", nodes.len()),
        };
        write!(f, "{kind}({servers} server(s), credentials hidden)")
    }
}

impl BackendUrl {
    /// Parses `url`; a config error names what is wrong without echoing credentials.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let invalid = |why: &str| Error::new(ErrorKind::Config, format!("invalid lock URL: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("no scheme (expected redis://, redis+cluster:// or redlock://)"))?;
        let node_scheme = match scheme {
            "redis" | "rediss" | "redis+unix" | "unix" => return Ok(Self::Redis(url.to_owned())),
            "redis+cluster" | "redlock" => "redis",
            "rediss+cluster" | "redlocks" => "rediss",
            _ => return Err(invalid("unknown scheme (expected redis://, redis+cluster:// or redlock://)")),
        };
        let hosts: Vec<&str> = rest.split(',').map(str::trim).collect();
        if hosts.iter().any(|host| host.is_empty() || host.starts_with('@') || host.ends_with('@')) {
            return Err(invalid("an empty host in the list"));
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
    fn bad_urls_are_config_errors_without_secrets() {
        for bad in ["127.0.0.1:6379", "memcache://h:1", "redlock://a:1,b:2", "redlock://a:1,,c:3", "redis+cluster://"] {
            let err = BackendUrl::parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{bad}");
        }
        let err = BackendUrl::parse("redlock://u:secret@a:1").unwrap_err();
        assert!(!err.to_string().contains("secret"));
        assert!(!format!("{:?}", BackendUrl::parse("redlock://u:secret@a:1,b:2,c:3").unwrap()).contains("secret"));
    }
}
