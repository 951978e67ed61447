//! A userspace TCP fault proxy (this machine has no `tc netem` and no toxiproxy): it forwards
//! `127.0.0.1:P` to an upstream (Redis) and, on command, delays traffic, blackholes it, or resets
//! every connection.
//!
//! - [`Mode::Pass`]: forward as is.
//! - [`Mode::Delay`]: add latency: every chunk is forwarded that long after it arrived (order is
//!   kept, chunks in flight do not queue behind each other).
//! - [`Mode::DelayRequests`]: Kleppmann's delayed packet. Only what clients send is delayed;
//!   answers pass. A client that sends a request now has it arrive that much later, whatever it
//!   decides meanwhile (give up, close the connection).
//! - [`Mode::Blackhole`]: a partition. Connections stay open and new ones are accepted, but
//!   nothing is forwarded in either direction: bytes wait in the kernel's buffers, as they would
//!   behind a cut cable while TCP retransmits. Healing (back to `Pass`) delivers them late.
//! - [`FaultProxy::reset_all`]: closes every open connection with a TCP reset (`SO_LINGER` 0).
//!
//! Used in-process by the `partition` scenario, and standalone through the `faultproxy` binary.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, watch},
    task::JoinHandle,
    time::Instant,
};

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Forward every chunk after this delay.
    Delay(Duration),
    /// Forward what clients send after this delay; answers pass at once.
    DelayRequests(Duration),
    /// Forward nothing (connections stay open and are still accepted).
    Blackhole,
}

impl std::str::FromStr for Mode {
    type Err = String;

    /// `pass`, `blackhole`, `delay MS` or `delay-requests MS`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut words = s.split_whitespace();
        match (words.next(), words.next()) {
            (Some("pass" | "heal"), None) => Ok(Self::Pass),
            (Some("blackhole"), None) => Ok(Self::Blackhole),
            (Some("delay"), Some(ms)) => ms
                .parse()
                .map(|ms| Self::Delay(Duration::from_millis(ms)))
                .map_err(|_| format!("bad delay {ms:?}")),
            (Some("delay-requests"), Some(ms)) => ms
                .parse()
                .map(|ms| Self::DelayRequests(Duration::from_millis(ms)))
                .map_err(|_| format!("bad delay {ms:?}")),
            _ => Err(format!(
                "unknown mode {s:?} (pass | delay MS | delay-requests MS | blackhole)"
            )),
        }
    }
}

/// Counters of a proxy.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted so far.
    pub accepted: AtomicU64,
    /// Connections closed by a reset command.
    pub reset: AtomicU64,
    /// Bytes forwarded (both directions).
    pub bytes: AtomicU64,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    resets: watch::Sender<u64>,
    stats: Arc<Stats>,
    accept_loop: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0 picks one) and forwards to `upstream`.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("bind {listen}"))?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Pass);
        let (resets, _) = watch::channel(0u64);
        let stats = Arc::new(Stats::default());
        let accept_loop = tokio::spawn(accept(
            listener,
            upstream,
            mode.clone(),
            resets.clone(),
            stats.clone(),
        ));
        Ok(Self {
            addr,
            upstream,
            mode,
            resets,
            stats,
            accept_loop,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where traffic goes.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `redis://ADDR` of the proxy, for a client that should go through it.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Switches every connection, open or future, to `mode`.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Resets (TCP RST) every connection open now; later ones are unaffected.
    pub fn reset_all(&self) {
        self.resets.send_modify(|generation| *generation += 1);
    }

    /// Its counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        // Open connections end with a reset too: nothing should outlive the proxy.
        self.reset_all();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    resets: watch::Sender<u64>,
    stats: Arc<Stats>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        let (mode, mut resets, stats) = (mode.subscribe(), resets.subscribe(), stats.clone());
        resets.mark_unchanged();
        tokio::spawn(async move {
            let connect = async {
                // A partition also holds new connections: accepted, but not connected through.
                let mut waiting = mode.clone();
                wait_for_traffic(&mut waiting).await;
                tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(upstream)).await
            };
            let server = tokio::select! {
                connected = connect => connected,
                _ = resets.changed() => return close_with_reset(&client, &stats),
            };
            let Ok(Ok(mut server)) = server else {
                return close_with_reset(&client, &stats);
            };
            let mut client = client;
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let reset = {
                let (client_read, client_write) = client.split();
                let (server_read, server_write) = server.split();
                let both = async {
                    tokio::join!(
                        pump(
                            client_read,
                            server_write,
                            Direction::Requests,
                            mode.clone(),
                            &stats
                        ),
                        pump(
                            server_read,
                            client_write,
                            Direction::Answers,
                            mode.clone(),
                            &stats
                        )
                    )
                };
                tokio::select! {
                    _ = both => false,
                    _ = resets.changed() => true,
                }
            };
            if reset {
                close_with_reset(&server, &stats);
                close_with_reset(&client, &stats);
            }
        });
    }
}

fn close_with_reset(stream: &TcpStream, stats: &Stats) {
    let _ = stream.set_zero_linger();
    stats.reset.fetch_add(1, Ordering::Relaxed);
}

/// Waits while the proxy blackholes traffic.
async fn wait_for_traffic(mode: &mut watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Blackhole).await;
}

/// Which way a pump copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to upstream.
    Requests,
    /// Upstream to client.
    Answers,
}

/// Copies one direction. A reader stamps each chunk with the time it arrived; a writer forwards
/// it no earlier than that time plus the delay (pure latency: chunks in flight do not wait for
/// each other). Neither reads nor writes while the link is blackholed.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    direction: Direction,
    mode: watch::Receiver<Mode>,
    stats: &Stats,
) {
    let (chunks, mut arrived) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let mut reader_mode = mode.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            wait_for_traffic(&mut reader_mode).await;
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if chunks
                .send((Instant::now(), buf[..n].to_vec()))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let mut writer_mode = mode;
    let writer = async move {
        while let Some((read_at, chunk)) = arrived.recv().await {
            // A chunk read just before a partition began waits for it to end.
            wait_for_traffic(&mut writer_mode).await;
            let current = *writer_mode.borrow();
            match current {
                Mode::Delay(delay) => tokio::time::sleep_until(read_at + delay).await,
                Mode::DelayRequests(delay) if direction == Direction::Requests => {
                    tokio::time::sleep_until(read_at + delay).await
                }
                _ => {}
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
            stats.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes every byte back.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(
        stream: &mut TcpStream,
        within: Duration,
    ) -> std::io::Result<Option<Vec<u8>>> {
        stream.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(within, stream.read_exact(&mut buf)).await {
            Ok(r) => r.map(|_| Some(buf.to_vec())),
            Err(_) => Ok(None),
        }
    }

    #[tokio::test]
    async fn forwards_delays_blackholes_heals_and_resets() {
        let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), echo_server().await)
            .await
            .unwrap();
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            round_trip(&mut conn, Duration::from_secs(2))
                .await
                .unwrap()
                .unwrap(),
            b"ping"
        );

        proxy.set_mode(Mode::Delay(Duration::from_millis(100)));
        let started = Instant::now();
        assert!(
            round_trip(&mut conn, Duration::from_secs(2))
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "delayed both ways"
        );

        // Only the request waits: it is still on its way after the client gave up on it.
        proxy.set_mode(Mode::DelayRequests(Duration::from_millis(400)));
        assert!(
            round_trip(&mut conn, Duration::from_millis(150))
                .await
                .unwrap()
                .is_none(),
            "the request is held back"
        );
        let mut delayed = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), conn.read_exact(&mut delayed))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&delayed, b"ping", "and delivered later");

        proxy.set_mode(Mode::Blackhole);
        assert!(
            round_trip(&mut conn, Duration::from_millis(300))
                .await
                .unwrap()
                .is_none(),
            "nothing comes back"
        );
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(
            round_trip(&mut fresh, Duration::from_millis(300))
                .await
                .unwrap()
                .is_none(),
            "new connections stall too"
        );

        proxy.set_mode(Mode::Pass);
        let mut late = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), conn.read_exact(&mut late))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&late, b"ping", "held bytes are delivered after healing");
        tokio::time::timeout(Duration::from_secs(2), fresh.read_exact(&mut late))
            .await
            .unwrap()
            .unwrap();

        proxy.reset_all();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = round_trip(&mut conn, Duration::from_secs(1)).await;
        assert!(
            matches!(after, Err(_) | Ok(None)),
            "the connection was reset: {after:?}"
        );
        assert!(proxy.stats().reset.load(Ordering::Relaxed) >= 2);
        let mut next = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(
            round_trip(&mut next, Duration::from_secs(2))
                .await
                .unwrap()
                .is_some(),
            "later connections work"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("pass".parse::<Mode>().unwrap(), Mode::Pass);
        assert_eq!(
            "delay 250".parse::<Mode>().unwrap(),
            Mode::Delay(Duration::from_millis(250))
        );
        assert_eq!("blackhole".parse::<Mode>().unwrap(), Mode::Blackhole);
        assert_eq!(
            "delay-requests 1500".parse::<Mode>().unwrap(),
            Mode::DelayRequests(Duration::from_millis(1500))
        );
        assert!("drop it".parse::<Mode>().is_err());
    }
}
