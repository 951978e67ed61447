//! Connections: a few long-lived multiplexed "lanes" checked out of a deadpool pool.
//!
//! deadpool opens and authenticates connections (with the `tls` feature, encrypted ones) and
//! bounds how many exist. But every checkout of a deadpool-redis connection costs an
//! `UNWATCH`+`PING` round trip to validate it, which would double the cost of each lock operation.
//! A multiplexed connection already pipelines concurrent commands, so lockkit takes a few of them
//! out of the pool once and spreads operations over them round-robin. A lane whose connection broke
//! or stopped answering is dropped and replaced from the pool on its next use.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use deadpool_redis::{Pool, Runtime};
use redis::aio::MultiplexedConnection;

use crate::model::error::{Error, ErrorKind, Result};

/// The lanes of one client.
pub(crate) struct Connections {
    pool: Pool,
    lanes: Box<[Mutex<Option<MultiplexedConnection>>]>,
    next: AtomicUsize,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("lanes", &self.lanes.len()).finish_non_exhaustive()
    }
}

/// A connection handed out for one operation (a cheap clone of a lane's connection).
pub(crate) struct Lane {
    /// Which lane it came from, for [`Connections::report`].
    pub(crate) index: usize,
    pub(crate) conn: MultiplexedConnection,
}

impl Connections {
    /// Lanes to the Redis at `url`, connecting lazily. Connecting and every answer are bounded by
    /// `command_timeout`.
    pub(crate) fn open(url: &str, lanes: usize, command_timeout: Duration) -> Result<Self> {
        let config_error = |what: &str| Error::new(ErrorKind::Config, what.to_owned());
        // redis-rs would otherwise give every connection its own 500 ms response timeout, which
        // would silently override `command_timeout`.
        let connection_config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(command_timeout))
            .set_connection_timeout(Some(command_timeout));
        let manager = deadpool_redis::Manager::new_with_config(url, connection_config)
            .map_err(|e| config_error("invalid redis url").with_source(e))?;
        let pool = Pool::builder(manager)
            .max_size(lanes.max(1))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| config_error("cannot build the redis pool").with_source(e))?;
        let lanes = (0..lanes.max(1)).map(|_| Mutex::new(None)).collect();
        Ok(Self { pool, lanes, next: AtomicUsize::new(0) })
    }

    /// The next lane, connecting it first if it has no connection.
    pub(crate) async fn checkout(&self) -> Result<Lane> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
        if let Some(conn) = self.lanes[index].lock().unwrap().clone() {
            return Ok(Lane { index, conn });
        }
        // Boxed: deadpool's checkout future is about 7 KB, and every operation's future (boxed
        // behind the backend trait) would otherwise carry it, copied into each box, although it
        // runs only when a lane (re)connects. Measured: that copy and its allocation were a
        // tenth of the client's CPU per lock pair.
        let fresh = deadpool_redis::Connection::take(Box::pin(self.pool.get()).await?);
        // Another operation may have filled the lane meanwhile; keep theirs.
        let conn = self.lanes[index].lock().unwrap().get_or_insert(fresh).clone();
        Ok(Lane { index, conn })
    }

    /// Reports the outcome of an operation on the lane of that `index`: a connection that failed
    /// or timed out is dropped, so the next operation on this lane reconnects.
    pub(crate) fn report<T>(&self, index: usize, outcome: &Result<T>) {
        if outcome.as_ref().is_err_and(Error::is_unavailable) {
            *self.lanes[index].lock().unwrap() = None;
        }
    }

    /// Runs `op` on the next lane. Connecting is bounded by the connection timeout and each
    /// command by the response timeout (both the client's command timeout).
    pub(crate) async fn run<T>(
        &self,
        op: impl AsyncFnOnce(&mut MultiplexedConnection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut lane = self.checkout().await?;
        let outcome = op(&mut lane.conn).await.map_err(Error::from);
        self.report(lane.index, &outcome);
        outcome
    }
}
