//! Asking the Sentinels where the master is, as the Sentinel client spec says: each Sentinel in
//! turn until one names a server that says it is the master.
//!
//! `SENTINEL MASTER name` rather than `SENTINEL get-master-addr-by-name`: the same address, and
//! with it the `config-epoch` of the failover that made it master, in one answer (so the two
//! belong together). The epoch is what the fence floor is made of (see `fence_floor`). redis-rs'
//! own `sentinel` feature resolves the address the same way but keeps the epoch to itself, and
//! neither follows `+switch-master`, so lockkit asks with plain commands.
//!
//! `ROLE` on the named server must say master: a Sentinel that has not heard of a failover yet
//! names the old master, which the failover turned into a replica.

use std::{collections::HashMap, time::Duration};

use super::super::single;
use crate::{
    backend::url::SentinelUrl,
    model::error::{Error, ErrorKind, Result},
};

/// The master that a Sentinel named and that confirmed it is one.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its `redis://` URL, with the master's credentials.
    pub(crate) url: String,
    /// `ip:port`, for messages.
    pub(crate) address: String,
    /// The Sentinels' configuration epoch of the master: the epoch of the failover that promoted
    /// it (0 if it never failed over). Grows with every failover.
    pub(crate) epoch: u64,
}

/// Asks each Sentinel in turn (each bounded by `timeout`, as is the `ROLE` check) until one names
/// a master that confirms; unavailable if none does.
pub(crate) async fn find_master(url: &SentinelUrl, timeout: Duration) -> Result<Found> {
    let mut failures = Vec::with_capacity(url.sentinels.len());
    for sentinel in &url.sentinels {
        let client = single::client(sentinel)?;
        let name = client.get_connection_info().addr().to_string();
        match tokio::time::timeout(timeout.saturating_mul(2), ask(&client, url, timeout)).await {
            Ok(Ok(found)) => return Ok(found),
            Ok(Err(why)) => failures.push(format!("{name}: {why}")),
            Err(_) => failures.push(format!("{name}: no answer within {timeout:?}")),
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!("no Sentinel named a master for {:?} ({})", url.service, failures.join("; ")),
    ))
}

/// One Sentinel's answer, checked with `ROLE` on the server it names.
async fn ask(sentinel: &redis::Client, url: &SentinelUrl, timeout: Duration) -> std::result::Result<Found, String> {
    let config =
        redis::AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout));
    let mut conn = sentinel.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| e.to_string())?;
    let fields: HashMap<String, String> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(&url.service)
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let field = |name: &str| fields.get(name).ok_or_else(|| format!("no {name} in SENTINEL MASTER's answer"));
    let ip = field("ip")?;
    let port: u16 = field("port")?.parse().map_err(|_| "a malformed port in SENTINEL MASTER's answer".to_owned())?;
    let epoch: u64 = field("config-epoch")?
        .parse()
        .map_err(|_| "a malformed config-epoch in SENTINEL MASTER's answer".to_owned())?;
    let address = format!("{ip}:{port}");
    let master_url = url.master_url(ip, port);
    let client = single::client(&master_url).map_err(|e| e.to_string())?;
    let mut master =
        client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| format!("{address}: {e}"))?;
    match redis::cmd("ROLE").query_async(&mut master).await.map_err(|e| format!("{address}: {e}"))? {
        redis::Role::Primary { .. } => Ok(Found { url: master_url, address, epoch }),
        _ => Err(format!("{address} is not a master (a failover under way?)")),
    }
}
