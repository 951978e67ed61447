//! Shared test helpers: the Redis URL, clients, unique lock names, a raw connection.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures_util::FutureExt;
use lockkit::LockClient;
use redis::aio::MultiplexedConnection;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Notify,
};

pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

/// A lock name no other test (or earlier run) uses.
pub(crate) fn unique(name: &str) -> String {
    format!("test:{name}:{:016x}", rand::random::<u64>())
}

pub(crate) async fn client() -> LockClient {
    LockClient::connect(&redis_url()).await.expect("redis from `make services` must be running")
}

/// A client whose watchdog renews a short default lease.
pub(crate) async fn client_with_lease(lease: Duration) -> LockClient {
    LockClient::builder(redis_url()).default_lease(lease).connect().await.unwrap()
}

/// A plain connection, standing in for "another client" or an operator.
pub(crate) async fn raw() -> MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

pub(crate) fn lock_key(name: &str) -> String {
    format!("{{lockkit:{name}}}")
}

/// Runs `acquire` and drops it at the `i`-th of varied points of its round trip: every third
/// right after its first poll (the request queued, not yet sent), the others at a deadline of
/// `first_us + (i * step_us) % spread_us` µs, which lands before the request was sent or after the
/// server granted the lock but before the answer arrived. `None` when it was dropped. Timers tick
/// in milliseconds, so on a fast machine the deadlines alone may drop none.
pub(crate) async fn cancelled_at_varied_points<T>(
    i: u64,
    (first_us, step_us, spread_us): (u64, u64, u64),
    acquire: impl Future<Output = T>,
) -> Option<T> {
    if i.is_multiple_of(3) {
        return acquire.now_or_never();
    }
    tokio::time::timeout(Duration::from_micros(first_us + (i * step_us) % spread_us), acquire).await.ok()
}

/// Polls `check` every 10 ms for up to `within`; true as soon as it holds.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query_async::<bool>(conn).await.unwrap()
}

/// Another library's lock on `name`: `SET key token NX PX ms`, as redis-py, redsync or
/// node-redlock take it. `true` when it was granted.
pub(crate) async fn foreign_set_nx(conn: &mut MultiplexedConnection, name: &str, token: &str, ms: u64) -> bool {
    let set: Option<String> =
        redis::cmd("SET").arg(lock_key(name)).arg(token).arg("NX").arg("PX").arg(ms).query_async(conn).await.unwrap();
    set.is_some()
}

/// A TCP proxy in front of Redis (or any server) that a test can make misbehave for the clients
/// connected through it only (other tests share the same server).
pub(crate) struct Proxy {
    port: u16,
    faults: Arc<Faults>,
}

#[derive(Default)]
struct Faults {
    /// Client-to-server bytes are held back while set.
    stalled: AtomicBool,
    resumed: Notify,
    /// What reached the proxy while stalled.
    held: Mutex<Vec<u8>>,
    /// Writes containing `SUBSCRIBE` are never forwarded (and nothing after them on that
    /// connection): a pub/sub connection that never confirms.
    swallow_subscribes: AtomicBool,
}

impl Proxy {
    /// A proxy in front of the shared Redis.
    pub(crate) async fn start() -> Self {
        Self::start_to(redis_url().trim_start_matches("redis://").split('/').next().unwrap().to_owned()).await
    }

    /// A proxy in front of the server at `upstream` (`host:port`).
    pub(crate) async fn start_to(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let faults = Arc::new(Faults::default());
        let shared = faults.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut server_rx, &mut client_tx).await });
                let faults = shared.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    loop {
                        let n = match client_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        loop {
                            let resumed = faults.resumed.notified();
                            if !faults.stalled.load(Ordering::SeqCst) {
                                break;
                            }
                            faults.held.lock().unwrap().extend_from_slice(&buf[..n]);
                            resumed.await;
                        }
                        if faults.swallow_subscribes.load(Ordering::SeqCst)
                            && buf[..n].windows(9).any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
                        {
                            std::future::pending::<()>().await;
                        }
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { port, faults }
    }

    /// `127.0.0.1:PORT`: where clients connect to go through this proxy.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The Redis URL that goes through this proxy.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds back everything clients send from now on, until [`resume`](Self::resume).
    pub(crate) fn stall(&self) {
        self.faults.stalled.store(true, Ordering::SeqCst);
    }

    pub(crate) fn resume(&self) {
        self.faults.stalled.store(false, Ordering::SeqCst);
        self.faults.resumed.notify_waiters();
    }

    /// Whether a command `name` (such as `EVALSHA`) was sent while stalled.
    pub(crate) fn held_back(&self, name: &str) -> bool {
        self.faults.held.lock().unwrap().windows(name.len()).any(|w| w.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// From now on, pub/sub subscriptions are never confirmed.
    pub(crate) fn swallow_subscribes(&self) {
        self.faults.swallow_subscribes.store(true, Ordering::SeqCst);
    }
}
