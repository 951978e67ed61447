//! The listening connection of a PostgreSQL client: `LISTEN <prefix>_released`, each
//! notification waking this process's waiters of the lock it names, and the check that
//! notifications really arrive on it.
//!
//! # Why the check
//!
//! Behind a PgBouncer in transaction pooling mode, `LISTEN` succeeds but binds a server session
//! that the pooler hands to other clients as soon as the statement ends: no notification ever
//! reaches this connection, while its pings still succeed. Trusting it, a waiter would sleep
//! until the holder's lease or the wake safety interval ran out after every release. So once
//! `LISTEN` succeeded, another session (a command connection) sends a `NOTIFY` with a payload of
//! this connection's own; only when it comes back here within [`CHECK_WITHIN`] do waiters rely on
//! wake-ups. Otherwise the client says so once (a warning, and the
//! `lockkit_postgres_listen_unheard_total` counter), waiters poll (every 500 ms at most, the
//! acquire loop's backoff), and the check is tried again every [`RECHECK_UNHEARD`].
//!
//! The `NOTIFY` must come from another client connection: a session that notifies a channel it
//! listens on hears itself, and behind a pooler that would prove nothing.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::{Names, Pool, Server, bounded};
use crate::{metrics, wake::WakeHub};

/// How often the listening connection proves it is alive: a frozen server keeps its sockets open,
/// and waiters must not trust wake-ups that cannot come.
const LISTEN_PING: Duration = Duration::from_secs(2);

/// Longest pause between reconnection attempts of the listening connection.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Longest wait for the check's `NOTIFY` to come back (never more than the command timeout). A
/// healthy server delivers it in about a round trip; a slower one only costs polling until the
/// next check.
const CHECK_WITHIN: Duration = Duration::from_secs(1);

/// How long waiters poll before the check is tried again on a new connection, after a
/// `NOTIFY` did not come back (the pooler may have been reconfigured, or the server was slow).
const RECHECK_UNHEARD: Duration = Duration::from_secs(30);

/// What the listening task needs.
pub(super) struct Listener {
    pub(super) server: Server,
    pub(super) names: Names,
    pub(super) wake: WakeHub,
    /// Sends the check's `NOTIFY` from another session.
    pub(super) pool: Arc<Pool>,
    /// Whether to check that notifications arrive (off only in the test's control).
    pub(super) check: bool,
    /// Set once the first connection came to a verdict (wake-ups work, or do not, or the
    /// connection failed), so that `open` can return with the hub in its settled state.
    pub(super) settled: watch::Sender<bool>,
    pub(super) stop: CancellationToken,
}

/// How one connection of the listening task ended.
enum Ended {
    /// The client was dropped.
    Stopped,
    /// Connecting, `LISTEN` or a ping failed, or the connection broke: reconnect with backoff.
    Broken,
    /// Notifications did not come back: poll, and check again later.
    Unheard,
}

impl Listener {
    /// Runs until the client is dropped: reconnects with backoff, telling the hub while
    /// wake-ups cannot be relied on.
    pub(super) async fn run(self) {
        let mut backoff = Duration::from_millis(50);
        let mut warned = false;
        loop {
            let pause = match self.connection(&mut backoff).await {
                Ended::Stopped => return,
                Ended::Broken => {
                    tracing::debug!("lockkit postgres LISTEN connection down; waiters poll until it returns");
                    let pause = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    pause
                }
                Ended::Unheard => {
                    metrics::listen_unheard();
                    if !std::mem::replace(&mut warned, true) {
                        tracing::warn!(
                            channel = %self.names.channel,
                            "lockkit postgres: a NOTIFY did not reach the LISTEN connection (a PgBouncer in \
                             transaction pooling mode?); waiters poll instead of waiting for wake-ups"
                        );
                    }
                    RECHECK_UNHEARD
                }
            };
            self.wake.set_connected(false);
            self.settled.send_replace(true);
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One listening connection, from connecting to its end.
    async fn connection(&self, backoff: &mut Duration) -> Ended {
        let Ok((client, mut connection)) = self.server.connect().await else { return Ended::Broken };
        let check_payload = self.names.check_payload();
        let (heard, heard_rx) = oneshot::channel();
        let deliver = {
            let (names, wake, check_payload) = (self.names.clone(), self.wake.clone(), check_payload.clone());
            async move {
                let mut heard = Some(heard);
                let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(Ok(message)) = messages.next().await {
                    let AsyncMessage::Notification(n) = message else { continue };
                    if n.payload() == check_payload {
                        if let Some(heard) = heard.take() {
                            let _ = heard.send(());
                        }
                    } else if let Some(channel) = names.wake_channel(n.payload()) {
                        // One local waiter, as on Redis: any waiter can take the released lock,
                        // and only one will.
                        wake.deliver(&channel);
                    }
                }
            }
        };
        // Aborted when this connection ends, whichever way.
        let deliver = AbortOnDrop(tokio::spawn(deliver));
        let timeout = self.server.timeout;
        let listen = format!("LISTEN {}", self.names.channel);
        if bounded("LISTEN", timeout, client.batch_execute(&listen)).await.is_err() {
            return Ended::Broken;
        }
        if self.check {
            let notify = self.names.notify_check(&check_payload);
            if self.pool.run("a LISTEN check", async |c| c.batch_execute(&notify).await).await.is_err() {
                return Ended::Broken;
            }
            if tokio::time::timeout(CHECK_WITHIN.min(timeout), heard_rx).await.is_err() {
                return Ended::Unheard;
            }
        }
        *backoff = Duration::from_millis(50);
        self.wake.set_connected(true);
        self.settled.send_replace(true);
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return Ended::Stopped,
                () = tokio::time::sleep(LISTEN_PING) => {
                    if bounded("a ping", timeout, client.simple_query("")).await.is_err() {
                        return Ended::Broken;
                    }
                }
            }
            if deliver.0.is_finished() {
                return Ended::Broken;
            }
        }
    }
}

/// A task aborted when this handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
